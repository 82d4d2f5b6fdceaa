// Timelines of the sm90 FP8 kernel (cuda/sm90/trace.cuh) on one shape, for
// dev/sm90/trace_report.py: the fp8 counterpart of check_sm90 --trace, whose problems are 16-bit.
// The kernel is compiled into this file with tracing on (the library's kernels carry none of it);
// inputs are e4m3 of std-1 normals, descales 1, out bf16, BSHD, 2048 / head_dim heads; batch 1
// unless given (short sequences need a batch to fill the SMs with several tiles each).
//
//   nvcc -std=c++17 -O3 --expt-relaxed-constexpr -gencode=arch=compute_90a,code=sm_90a \
//        -DFLASHCORE_SM90_TRACE -I include -I src dev/fp8/trace_fp8.cu -o .sm90bin/trace_fp8
//   .sm90bin/trace_fp8 OUT_DIR [seqlen=16384] [head_dim=128|256] [batch=1] [causal=0|1]
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

template <bool kCausal>
void run_mask(const AttentionParams& params) {
  if (params.head_dim == 256) {
    run_sm90_forward<DType::kFloat8E4M3, 256, kCausal>(params);
  } else {
    run_sm90_forward<DType::kFloat8E4M3, 128, kCausal>(params);
  }
}

void run(const AttentionParams& params, bool causal) {
  if (causal) {
    run_mask<true>(params);
  } else {
    run_mask<false>(params);
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s OUT_DIR [seqlen] [head_dim 128|256] [batch] [causal 0|1]\n",
                 argv[0]);
    return 2;
  }
  const std::string dir = argv[1];
  const int seqlen = argc > 2 ? std::atoi(argv[2]) : 16384;
  const int head_dim = argc > 3 ? std::atoi(argv[3]) : 128;
  const int batch = argc > 4 ? std::atoi(argv[4]) : 1;
  const bool causal = argc > 5 && std::atoi(argv[5]) != 0;
  if (seqlen <= 0 || batch <= 0 || (head_dim != 128 && head_dim != 256)) {
    std::fprintf(stderr, "seqlen and batch must be positive and head_dim 128 or 256\n");
    return 2;
  }
  const int heads = kModelWidth / head_dim;
  const size_t elements = size_t(batch) * seqlen * heads * head_dim;

  std::mt19937 random(0);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<__nv_fp8_e4m3> host(3 * elements);
  for (auto& x : host) x = __nv_fp8_e4m3(normal(random));
  uint8_t* qkv = nullptr;
  void* out = nullptr;
  float* lse = nullptr;
  CHECK_CUDA(cudaMalloc(&qkv, 3 * elements));
  CHECK_CUDA(cudaMalloc(&out, elements * 2));
  CHECK_CUDA(cudaMalloc(&lse, size_t(batch) * seqlen * heads * sizeof(float)));
  CHECK_CUDA(cudaMemcpy(qkv, host.data(), 3 * elements, cudaMemcpyHostToDevice));

  AttentionParams params;
  params.q = qkv;
  params.k = qkv + elements;
  params.v = qkv + 2 * elements;
  params.out = out;
  params.lse = lse;
  params.dtype = DType::kFloat8E4M3;
  params.out_dtype = DType::kBFloat16;
  params.batch = batch;
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
  params.causal = causal;
  params.lse_head_stride = seqlen;
  params.set_softmax_scale(1.0f / std::sqrt(float(head_dim)));
  CHECK_CUDA(cudaDeviceGetAttribute(&params.num_sms, cudaDevAttrMultiProcessorCount, 0));

  Sm90TraceRecorder recorder;

  cudaEvent_t start, stop;
  CHECK_CUDA(cudaEventCreate(&start));
  CHECK_CUDA(cudaEventCreate(&stop));
  for (int i = 0; i < kLaunches; ++i) {
    CHECK_CUDA(cudaEventRecord(start));
    run(params, causal);
    CHECK_CUDA(cudaEventRecord(stop));
    CHECK_CUDA(cudaEventSynchronize(stop));
  }
  float ms = 0.0f;
  CHECK_CUDA(cudaEventElapsedTime(&ms, start, stop));
  const double flops =
      4.0 * batch * seqlen * double(seqlen) * heads * head_dim / (causal ? 2.0 : 1.0);
  const std::string shape = "d" + std::to_string(head_dim) + "_b" + std::to_string(batch) + "_s" +
                            std::to_string(seqlen) + (causal ? "_causal" : "");
  std::printf("time fp8 %s (traced): %.3f ms, %.1f TFLOPS\n", shape.c_str(), ms,
              flops / (ms * 1e-3) / 1e12);

  recorder.write_csv(dir + "/fp8_" + shape + ".csv");
  return 0;
}
