// Standalone check of the Hopper kernel: runs run_sm90_forward on shapes with tails, causal with
// seqlen_q != seqlen_k both ways, GQA, BHSD strides and empty rows, compares out and lse with a
// float64 CPU reference (accuracy rule of BENCHMARKS.md: error <= 2 x the error of the same
// computation with P rounded to the dtype, + 1e-5), then times the 16k / 4k standard-grid shapes.
//
// Build (repository root; needs only cudart, the driver entry point is looked up at run time):
//   nvcc -std=c++17 -O3 --expt-relaxed-constexpr -gencode=arch=compute_90a,code=sm_90a \
//        -I include -I src dev/sm90/check_sm90.cu -o /tmp/check_sm90
// Run: /tmp/check_sm90 [--no-timing] [--only-timing] [--hd 64|128|256] [--schedule plain|overlap]
// (both schedules by default: plain = stage 2, overlap = stage 3 intra-warpgroup overlap + ping-pong)
// A kernel that does not finish within kWatchdogSeconds is reported (a barrier deadlock) and the
// program exits 2.
#include <cuda_runtime.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "cuda/sm90/launch.cuh"
#include "check_reference.h"

using namespace flashcore;
using namespace flashcore::detail;

namespace {

constexpr double kWatchdogSeconds = 20.0;
constexpr double kGemmPeakTflops = 753.0;  // bf16 GEMM 8192^3 on the H100 (BENCHMARKS.md)
constexpr double kCopyTBps = 3.0;          // device-to-device copy on the H100

#define CHECK_CUDA(expr)                                                                      \
  do {                                                                                        \
    cudaError_t e_ = (expr);                                                                  \
    if (e_ != cudaSuccess) {                                                                  \
      std::printf("CUDA error %s at %s:%d: %s\n", cudaGetErrorName(e_), __FILE__, __LINE__,   \
                  cudaGetErrorString(e_));                                                    \
      std::exit(1);                                                                           \
    }                                                                                         \
  } while (0)

void wait_with_watchdog(const char* what) {
  const auto start = std::chrono::steady_clock::now();
  while (true) {
    const cudaError_t status = cudaStreamQuery(nullptr);
    if (status == cudaSuccess) return;
    if (status != cudaErrorNotReady) {
      std::printf("FAIL %s: kernel error %s (%s)\n", what, cudaGetErrorName(status),
                  cudaGetErrorString(status));
      std::exit(1);
    }
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (seconds > kWatchdogSeconds) {
      std::printf("FAIL %s: kernel still running after %.0f s - likely an mbarrier deadlock "
                  "(expect_tx bytes vs box bytes, phase parity, or arrival counts)\n",
                  what, kWatchdogSeconds);
      std::fflush(stdout);
      std::_Exit(2);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

template <DType kDType, Sm90Schedule kSchedule>
void dispatch(const AttentionParams& p) {
  const bool c = p.causal;
  switch (p.head_dim) {
    case 64:
      c ? run_sm90_forward_scheduled<kDType, 64, true, kSchedule>(p)
        : run_sm90_forward_scheduled<kDType, 64, false, kSchedule>(p);
      break;
    case 128:
      c ? run_sm90_forward_scheduled<kDType, 128, true, kSchedule>(p)
        : run_sm90_forward_scheduled<kDType, 128, false, kSchedule>(p);
      break;
    case 256:
      c ? run_sm90_forward_scheduled<kDType, 256, true, kSchedule>(p)
        : run_sm90_forward_scheduled<kDType, 256, false, kSchedule>(p);
      break;
    default: std::printf("unsupported head_dim %d\n", p.head_dim); std::exit(1);
  }
}

Sm90Schedule g_schedule = Sm90Schedule::kPlain;

const char* schedule_name(Sm90Schedule s) {
  return s == Sm90Schedule::kPlain ? "plain" : "overlap+pingpong";
}

void run(const AttentionParams& p) {
  const bool fp16 = p.dtype == DType::kFloat16;
  if (g_schedule == Sm90Schedule::kPlain) {
    fp16 ? dispatch<DType::kFloat16, Sm90Schedule::kPlain>(p)
         : dispatch<DType::kBFloat16, Sm90Schedule::kPlain>(p);
  } else {
    fp16 ? dispatch<DType::kFloat16, Sm90Schedule::kOverlapPingPong>(p)
         : dispatch<DType::kBFloat16, Sm90Schedule::kOverlapPingPong>(p);
  }
}

// Device buffers of a problem plus params pointing into them.
struct DeviceProblem {
  void *q = nullptr, *k = nullptr, *v = nullptr, *out = nullptr;
  float* lse = nullptr;
  AttentionParams params;
  explicit DeviceProblem(const HostProblem& h) {
    const size_t bytes_q = h.q.size() * 2, bytes_k = h.k.size() * 2;
    CHECK_CUDA(cudaMalloc(&q, bytes_q + 16));
    CHECK_CUDA(cudaMalloc(&k, bytes_k + 16));
    CHECK_CUDA(cudaMalloc(&v, bytes_k + 16));
    CHECK_CUDA(cudaMalloc(&out, h.out_elements() * 2 + 16));
    CHECK_CUDA(cudaMalloc(&lse, h.lse_elements() * 4 + 16));
    CHECK_CUDA(cudaMemcpy(q, h.q.data(), bytes_q, cudaMemcpyHostToDevice));
    CHECK_CUDA(cudaMemcpy(k, h.k.data(), bytes_k, cudaMemcpyHostToDevice));
    CHECK_CUDA(cudaMemcpy(v, h.v.data(), bytes_k, cudaMemcpyHostToDevice));
    CHECK_CUDA(cudaMemset(out, 0xFF, h.out_elements() * 2));  // NaN poison
    CHECK_CUDA(cudaMemset(lse, 0xFF, h.lse_elements() * 4));
    params = h.params;
    params.q = q;
    params.k = k;
    params.v = v;
    params.out = out;
    params.lse = lse;
    int device = 0;
    CHECK_CUDA(cudaGetDevice(&device));
    CHECK_CUDA(cudaDeviceGetAttribute(&params.num_sms, cudaDevAttrMultiProcessorCount, device));
  }
  ~DeviceProblem() {
    cudaFree(q);
    cudaFree(k);
    cudaFree(v);
    cudaFree(out);
    cudaFree(lse);
  }
};

bool check_case(const ProblemShape& shape) {
  HostProblem host(shape);
  DeviceProblem dev(host);
  const std::string name = shape.describe();
  try {
    run(dev.params);
  } catch (const std::exception& e) {
    std::printf("FAIL %s: launcher threw: %s\n", name.c_str(), e.what());
    return false;
  }
  wait_with_watchdog(name.c_str());
  std::vector<uint16_t> out(host.out_elements());
  std::vector<float> lse(host.lse_elements());
  CHECK_CUDA(cudaMemcpy(out.data(), dev.out, out.size() * 2, cudaMemcpyDeviceToHost));
  CHECK_CUDA(cudaMemcpy(lse.data(), dev.lse, lse.size() * 4, cudaMemcpyDeviceToHost));
  const CheckResult result = compare_with_reference(host, out, lse);
  std::printf("%s [%s] %s: %s\n", result.pass ? "ok  " : "FAIL", schedule_name(g_schedule),
              name.c_str(), result.detail.c_str());
  return result.pass;
}

void time_case(const ProblemShape& shape) {
  HostProblem host(shape, /*fill=*/true);
  DeviceProblem dev(host);
  const AttentionParams& p = dev.params;
  const double flops = 4.0 * p.batch * p.heads_q * double(p.seqlen_q) * p.seqlen_k * p.head_dim *
                       (p.causal ? 0.5 : 1.0);
  const double bytes = 2.0 * (2.0 * p.batch * p.heads_q * double(p.seqlen_q) * p.head_dim +
                              2.0 * p.batch * p.heads_kv * double(p.seqlen_k) * p.head_dim);
  constexpr int kWarmup = 3, kRuns = 30;
  for (int i = 0; i < kWarmup; ++i) run(p);
  wait_with_watchdog(shape.describe().c_str());
  std::vector<float> ms(kRuns);
  cudaEvent_t start, stop;
  CHECK_CUDA(cudaEventCreate(&start));
  CHECK_CUDA(cudaEventCreate(&stop));
  for (int i = 0; i < kRuns; ++i) {
    CHECK_CUDA(cudaEventRecord(start));
    run(p);
    CHECK_CUDA(cudaEventRecord(stop));
    wait_with_watchdog(shape.describe().c_str());
    CHECK_CUDA(cudaEventElapsedTime(&ms[i], start, stop));
  }
  std::sort(ms.begin(), ms.end());
  const double median_s = ms[kRuns / 2] * 1e-3;
  const double floor_s = std::max(flops / (kGemmPeakTflops * 1e12), bytes / (kCopyTBps * 1e12));
  std::printf("time [%s] %s: %.3f ms, %.1f TFLOPS (floor %.3f ms = %.0f%% of floor speed)\n",
              schedule_name(g_schedule), shape.describe().c_str(), median_s * 1e3, flops / median_s * 1e-12, floor_s * 1e3,
              100.0 * floor_s / median_s);
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
}

}  // namespace

int main(int argc, char** argv) {
  bool timing = true, checking = true;
  int only_hd = 0;
  std::vector<Sm90Schedule> schedules = {Sm90Schedule::kPlain, Sm90Schedule::kOverlapPingPong};
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--no-timing")) timing = false;
    if (!std::strcmp(argv[i], "--only-timing")) checking = false;
    if (!std::strcmp(argv[i], "--hd") && i + 1 < argc) only_hd = std::atoi(argv[++i]);
    if (!std::strcmp(argv[i], "--schedule") && i + 1 < argc) {
      const std::string which = argv[++i];
      if (which == "plain") schedules = {Sm90Schedule::kPlain};
      if (which == "overlap") schedules = {Sm90Schedule::kOverlapPingPong};
    }
  }
  cudaDeviceProp prop;
  CHECK_CUDA(cudaGetDeviceProperties(&prop, 0));
  std::printf("device: %s (sm%d%d, %d SMs)\n", prop.name, prop.major, prop.minor,
              prop.multiProcessorCount);
  if (prop.major != 9) {
    std::printf("needs an sm90 GPU\n");
    return 1;
  }
  int failures = 0, cases = 0;
  for (Sm90Schedule schedule : schedules) {
    g_schedule = schedule;
    if (!checking) break;
    for (const ProblemShape& shape : correctness_shapes()) {
      if (only_hd && shape.head_dim != only_hd) continue;
      ++cases;
      failures += !check_case(shape);
    }
  }
  if (checking) std::printf("%d passed, %d failed\n", cases - failures, failures);
  for (Sm90Schedule schedule : schedules) {
    g_schedule = schedule;
    if (!timing) break;
    for (const ProblemShape& shape : timing_shapes()) {
      if (only_hd && shape.head_dim != only_hd) continue;
      time_case(shape);
    }
  }
  return failures == 0 ? 0 : 1;
}
