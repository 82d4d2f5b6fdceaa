// Standalone check of the Hopper kernel: runs run_sm90_forward on shapes with tails, causal with
// seqlen_q != seqlen_k both ways, GQA, BHSD strides and empty rows, compares out and lse with a
// float64 CPU reference (accuracy rule of BENCHMARKS.md: error <= 2 x the error of the same
// computation with P rounded to the dtype, + 1e-5), then times the 16k / 4k standard-grid shapes.
//
// Build (repository root; needs only cudart, the driver entry point is looked up at run time):
//   nvcc -std=c++17 -O3 --expt-relaxed-constexpr -gencode=arch=compute_90a,code=sm_90a \
//        -I include -I src dev/sm90/check_sm90.cu -o /tmp/check_sm90
// Run: /tmp/check_sm90 [--no-timing] [--only-timing] [--hd 64|128|256]
//                      [--schedule plain|overlap|persistent] [--sweep]
// All schedules of the tile table by default (plain = stage 2; overlap = stage 3 intra-warpgroup
// overlap + ping-pong; persistent = stage 4, overlap in one CTA per SM); --sweep adds other tile
// configurations (bf16), each checked then timed.
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

// One way of running the kernel: a tile configuration and a consumer schedule.
using Runner = void (*)(const AttentionParams&);
struct Variant {
  std::string name;
  int head_dim;     // 0: dispatches on params.head_dim (the tile table's configurations)
  bool bf16_only;   // sweep variants are compiled for bf16 only
  Runner run;
};

template <DType kDType, class Config, Sm90Schedule kSchedule>
void run_config(const AttentionParams& p) {
  p.causal ? run_sm90_forward_configured<kDType, Config, true, kSchedule>(p)
           : run_sm90_forward_configured<kDType, Config, false, kSchedule>(p);
}

// The tile table's configuration for the call's head_dim and dtype.
template <Sm90Schedule kSchedule>
void run_table(const AttentionParams& p) {
  const bool fp16 = p.dtype == DType::kFloat16;
  switch (p.head_dim) {
    case 64:
      fp16 ? run_config<DType::kFloat16, Sm90TileConfig<64>, kSchedule>(p)
           : run_config<DType::kBFloat16, Sm90TileConfig<64>, kSchedule>(p);
      break;
    case 128:
      fp16 ? run_config<DType::kFloat16, Sm90TileConfig<128>, kSchedule>(p)
           : run_config<DType::kBFloat16, Sm90TileConfig<128>, kSchedule>(p);
      break;
    case 256:
      fp16 ? run_config<DType::kFloat16, Sm90TileConfig<256>, kSchedule>(p)
           : run_config<DType::kBFloat16, Sm90TileConfig<256>, kSchedule>(p);
      break;
    default: std::printf("unsupported head_dim %d\n", p.head_dim); std::exit(1);
  }
}

template <int kHeadDim, int kBlockN, int kStages, Sm90Schedule kSchedule>
Variant sweep_variant() {
  char name[96];
  std::snprintf(name, sizeof(name), "%s d%d n%d s%d",
                kSchedule == Sm90Schedule::kPlain       ? "plain"
                : kSchedule == Sm90Schedule::kPersistent ? "persistent"
                                                         : "overlap",
                kHeadDim, kBlockN,
                kStages);
  return Variant{name, kHeadDim, true,
                 run_config<DType::kBFloat16, Sm90TileConfig<kHeadDim, kBlockN, kStages>,
                            kSchedule>};
}

std::vector<Variant> table_variants() {
  return {Variant{"plain", 0, false, run_table<Sm90Schedule::kPlain>},
          Variant{"overlap+pingpong", 0, false, run_table<Sm90Schedule::kOverlapPingPong>},
          Variant{"persistent", 0, false, run_table<Sm90Schedule::kPersistent>}};
}

// Tile configurations other than the table's, for one tuning run (bf16 only). Shared memory:
// d64 n192 s2 = 112 KB, d64 n128 s3 = 112 KB, d128 n176 s2 = 208 KB, d128 n128 s3 = 224 KB,
// d256 n64 s2 = 192 KB.
std::vector<Variant> sweep_variants() {
  constexpr Sm90Schedule kOverlap = Sm90Schedule::kOverlapPingPong;
  return {sweep_variant<64, 192, 2, kOverlap>(),  sweep_variant<64, 128, 3, kOverlap>(),
          sweep_variant<64, 176, 2, kOverlap>(),  sweep_variant<128, 176, 2, kOverlap>(),
          sweep_variant<128, 128, 3, kOverlap>(), sweep_variant<128, 96, 2, kOverlap>(),
          sweep_variant<256, 64, 2, kOverlap>()};
}

const Variant* g_variant = nullptr;

void run(const AttentionParams& p) { g_variant->run(p); }

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
  std::printf("%s [%s] %s: %s\n", result.pass ? "ok  " : "FAIL", g_variant->name.c_str(),
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
              g_variant->name.c_str(), shape.describe().c_str(), median_s * 1e3, flops / median_s * 1e-12, floor_s * 1e3,
              100.0 * floor_s / median_s);
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
}

}  // namespace

bool variant_takes(const Variant& variant, const ProblemShape& shape, int only_hd) {
  if (only_hd && shape.head_dim != only_hd) return false;
  if (variant.head_dim && shape.head_dim != variant.head_dim) return false;
  return !variant.bf16_only || shape.dtype == DType::kBFloat16;
}

int main(int argc, char** argv) {
  bool timing = true, checking = true, sweep = false;
  int only_hd = 0;
  std::string only_schedule;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--no-timing")) timing = false;
    if (!std::strcmp(argv[i], "--only-timing")) checking = false;
    if (!std::strcmp(argv[i], "--sweep")) sweep = true;
    if (!std::strcmp(argv[i], "--hd") && i + 1 < argc) only_hd = std::atoi(argv[++i]);
    if (!std::strcmp(argv[i], "--schedule") && i + 1 < argc) only_schedule = argv[++i];
  }
  cudaDeviceProp prop;
  CHECK_CUDA(cudaGetDeviceProperties(&prop, 0));
  std::printf("device: %s (sm%d%d, %d SMs)\n", prop.name, prop.major, prop.minor,
              prop.multiProcessorCount);
  if (prop.major != 9) {
    std::printf("needs an sm90 GPU\n");
    return 1;
  }
  std::vector<Variant> variants;
  for (const Variant& v : table_variants()) {
    if (only_schedule.empty() || v.name.rfind(only_schedule, 0) == 0) variants.push_back(v);
  }
  if (sweep) {
    for (const Variant& v : sweep_variants()) variants.push_back(v);
  }
  int failures = 0, cases = 0;
  std::vector<bool> variant_ok(variants.size(), true);
  if (checking) {
    for (size_t i = 0; i < variants.size(); ++i) {
      g_variant = &variants[i];
      for (const ProblemShape& shape : correctness_shapes()) {
        if (!variant_takes(variants[i], shape, only_hd)) continue;
        ++cases;
        const bool ok = check_case(shape);
        failures += !ok;
        if (!ok) variant_ok[i] = false;
      }
    }
    std::printf("%d passed, %d failed\n", cases - failures, failures);
  }
  if (timing) {
    for (size_t i = 0; i < variants.size(); ++i) {
      g_variant = &variants[i];
      if (!variant_ok[i]) {
        std::printf("time [%s]: skipped, the variant failed its checks\n", variants[i].name.c_str());
        continue;
      }
      for (const ProblemShape& shape : timing_shapes()) {
        if (variant_takes(variants[i], shape, only_hd)) time_case(shape);
      }
    }
  }
  return failures == 0 ? 0 : 1;
}
