// Timelines of the sm90 FP8 kernel (cuda/sm90/trace.cuh) on one shape, for
// dev/sm90/trace_report.py: the fp8 counterpart of check_sm90 --trace, whose problems are 16-bit.
// The kernel is compiled into this file with tracing on (the library's kernels carry none of it);
// inputs are e4m3 of std-1 normals, descales 1, out bf16, BSHD, batch 1, 2048 / head_dim heads.
//
//   nvcc -std=c++17 -O3 --expt-relaxed-constexpr -gencode=arch=compute_90a,code=sm_90a \
//        -DFLASHCORE_SM90_TRACE -I include -I src dev/fp8/trace_fp8.cu -o .sm90bin/trace_fp8
//   .sm90bin/trace_fp8 OUT_DIR [seqlen=16384] [head_dim=128|256]
//   python3 dev/sm90/trace_report.py OUT_DIR/*.csv
#ifndef FLASHCORE_SM90_TRACE
#error "build with -DFLASHCORE_SM90_TRACE"
#endif
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "cuda/sm90/launch.cuh"
#include "../sm90/trace_recorder.h"

using namespace flashcore;
using namespace flashcore::detail;

#define CHECK_CUDA(expr)                                                              \
  do {                                                                                \
    const cudaError_t status_ = (expr);                                               \
    if (status_ != cudaSuccess) {                                                     \
      std::fprintf(stderr, "%s: %s\n", #expr, cudaGetErrorString(status_));           \
      std::exit(1);                                                                   \
    }                                                                                 \
  } while (0)

namespace {

constexpr int kModelWidth = 2048;  // heads x head_dim, as the standard grid
constexpr int kLaunches = 3;  // the last launch's timeline is kept

void run(const AttentionParams& params) {
  if (params.head_dim == 256) {
    run_sm90_forward<DType::kFloat8E4M3, 256, false>(params);
  } else {
    run_sm90_forward<DType::kFloat8E4M3, 128, false>(params);
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s OUT_DIR [seqlen] [head_dim 128|256]\n", argv[0]);
    return 2;
  }
  const std::string dir = argv[1];
  const int seqlen = argc > 2 ? std::atoi(argv[2]) : 16384;
  const int head_dim = argc > 3 ? std::atoi(argv[3]) : 128;
  if (seqlen <= 0 || (head_dim != 128 && head_dim != 256)) {
    std::fprintf(stderr, "seqlen must be positive and head_dim 128 or 256\n");
    return 2;
  }
  const int heads = kModelWidth / head_dim;
  const size_t elements = size_t(seqlen) * heads * head_dim;

  std::mt19937 random(0);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<__nv_fp8_e4m3> host(3 * elements);
  for (auto& x : host) x = __nv_fp8_e4m3(normal(random));
  uint8_t* qkv = nullptr;
  void* out = nullptr;
  float* lse = nullptr;
  CHECK_CUDA(cudaMalloc(&qkv, 3 * elements));
  CHECK_CUDA(cudaMalloc(&out, elements * 2));
  CHECK_CUDA(cudaMalloc(&lse, size_t(seqlen) * heads * sizeof(float)));
  CHECK_CUDA(cudaMemcpy(qkv, host.data(), 3 * elements, cudaMemcpyHostToDevice));

  AttentionParams params;
  params.q = qkv;
  params.k = qkv + elements;
  params.v = qkv + 2 * elements;
  params.out = out;
  params.lse = lse;
  params.dtype = DType::kFloat8E4M3;
  params.out_dtype = DType::kBFloat16;
  params.batch = 1;
  params.seqlen_q = params.seqlen_k = seqlen;
  params.heads_q = params.heads_kv = heads;
  params.head_dim = head_dim;
  const int64_t row = int64_t(heads) * head_dim;
  params.q_batch_stride = params.k_batch_stride = params.v_batch_stride = row * seqlen;
  params.o_batch_stride = row * seqlen;
  params.q_row_stride = params.k_row_stride = params.v_row_stride = params.o_row_stride = row;
  params.q_head_stride = params.k_head_stride = params.v_head_stride = head_dim;
  params.o_head_stride = head_dim;
  params.lse_batch_stride = int64_t(heads) * seqlen;
  params.lse_head_stride = seqlen;
  params.set_softmax_scale(1.0f / std::sqrt(float(head_dim)));
  CHECK_CUDA(cudaDeviceGetAttribute(&params.num_sms, cudaDevAttrMultiProcessorCount, 0));

  Sm90TraceRecorder recorder;

  cudaEvent_t start, stop;
  CHECK_CUDA(cudaEventCreate(&start));
  CHECK_CUDA(cudaEventCreate(&stop));
  for (int i = 0; i < kLaunches; ++i) {
    CHECK_CUDA(cudaEventRecord(start));
    run(params);
    CHECK_CUDA(cudaEventRecord(stop));
    CHECK_CUDA(cudaEventSynchronize(stop));
  }
  float ms = 0.0f;
  CHECK_CUDA(cudaEventElapsedTime(&ms, start, stop));
  const double flops = 4.0 * seqlen * double(seqlen) * heads * head_dim;
  std::printf("time fp8 d%d s%d (traced): %.3f ms, %.1f TFLOPS\n", head_dim, seqlen, ms,
              flops / (ms * 1e-3) / 1e12);

  recorder.write_csv(dir + "/fp8_d" + std::to_string(head_dim) + "_s" + std::to_string(seqlen) +
                     ".csv");
  return 0;
}
