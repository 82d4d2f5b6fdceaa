// Standalone check of the Hopper kernel: runs run_sm90_forward on shapes with tails, causal with
// seqlen_q != seqlen_k both ways, GQA, BHSD strides and empty rows, compares out and lse with a
// float64 CPU reference (accuracy rule of BENCHMARKS.md: error <= 2 x the error of the same
// computation with P rounded to the dtype, + 1e-5), then times the 16k / 4k standard-grid shapes.
//
// Build (repository root; needs only cudart, the driver entry point is looked up at run time):
//   nvcc -std=c++17 -O3 --expt-relaxed-constexpr -gencode=arch=compute_90a,code=sm_90a \
//        -I include -I src dev/sm90/check_sm90.cu -o /tmp/check_sm90
// Run: /tmp/check_sm90 [--no-timing] [--only-timing] [--hd 64|128|256]
//                      [--sweep] [--variants a,b,!c] [--list]
//                      [--seqlen N (timing shapes of that seqlen only)]
//                      [--dtype fp16 (the bf16 timing shapes in fp16; table variants only)]
//                      [--trace DIR (a -DFLASHCORE_SM90_TRACE build: timelines, trace.cuh)]
// --variants picks table and sweep variants by name prefix ('!x' drops names containing x);
// --list prints every variant name.
// The tuning table's rows by default ("default"); --sweep adds other tile configurations (bf16,
// pers_* persistent, ovl_* one tile per CTA), each checked then timed.
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
#ifdef FLASHCORE_SM90_TRACE
#include "trace_recorder.h"
#endif

using namespace flashcore;
using namespace flashcore::detail;

namespace {

constexpr double kWatchdogSeconds = 20.0;
constexpr double kGemmPeakTflops = 780.0;  // bf16 GEMM 8192^3 on the H200 (measured 2026-11-21)

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

// One way of running the kernel: a tile configuration and its scheduler.
using Runner = void (*)(const AttentionParams&);
struct Variant {
  std::string name;
  int head_dim;     // 0: dispatches on params.head_dim (the tile table's configurations)
  bool bf16_only;   // sweep variants are compiled for bf16 only
  Runner run;
};

template <class Config>
void run_config(const AttentionParams& p) {
  p.causal ? run_sm90_forward_configured<Config, true>(p)
           : run_sm90_forward_configured<Config, false>(p);
}

// The switches a sweep row takes: those of the table's rows of the same head_dim and consumers
// (tile_table.h), so that a sweep varies the tile alone.
constexpr Sm90Switch sweep_switches(int head_dim, int consumers, bool persistent) {
  Sm90Switch switches = Sm90Switch::kNone;
  if (head_dim == 128) switches = switches | Sm90Switch::kRescaleUnderQk;
  if (head_dim != 64) switches = switches | Sm90Switch::kLazyRescale;
  if (head_dim == 256) switches = switches | Sm90Switch::kWarpMaskStart;
  if (consumers == 3) switches = switches | Sm90Switch::kSkipDeadBlocks;
  if (consumers == 3 && persistent) switches = switches | Sm90Switch::kSkipRowlessConsumers;
  return switches;
}

// A tuning row of its own for a sweep (the mask comes from the call).
template <bool kPersistent, int kHeadDim, int kBlockN, int kStages, int kConsumers, int kL2MiB>
struct SweepRow {
  static constexpr Sm90TuningRow kRow{
      kHeadDim, false, kAnySeqlen, kBlockN, kStages, kConsumers,
      kPersistent ? Sm90Scheduling::kPersistent : Sm90Scheduling::kOneTilePerCta, kL2MiB,
      sweep_switches(kHeadDim, kConsumers, kPersistent)};
};

template <bool kPersistent, int kHeadDim, int kBlockN, int kStages, int kConsumers = 2,
          int kL2MiB = kSm90L2SectionMiB>
Variant sweep_variant() {
  char name[96];
  char l2[16] = "";
  if (kL2MiB != kSm90L2SectionMiB) std::snprintf(l2, sizeof(l2), "_l%d", kL2MiB);
  std::snprintf(name, sizeof(name), "%s_d%d_n%d_s%d%s%s", kPersistent ? "pers" : "ovl", kHeadDim,
                kBlockN, kStages, kConsumers == 3 ? "_m192" : "", l2);
  using Row = SweepRow<kPersistent, kHeadDim, kBlockN, kStages, kConsumers, kL2MiB>;
  return Variant{name, kHeadDim, true, run_config<Sm90TileConfig<Row, DType::kBFloat16>>};
}

// What the library runs (run_sm90_forward: the tuning table's rows).
void run_default(const AttentionParams& p) {
  const bool fp16 = p.dtype == DType::kFloat16;
  constexpr DType kH = DType::kFloat16, kB = DType::kBFloat16;
  switch (p.head_dim * 2 + (p.causal ? 1 : 0)) {
    case 128: fp16 ? run_sm90_forward<kH, 64, false>(p) : run_sm90_forward<kB, 64, false>(p); break;
    case 129: fp16 ? run_sm90_forward<kH, 64, true>(p) : run_sm90_forward<kB, 64, true>(p); break;
    case 192: fp16 ? run_sm90_forward<kH, 96, false>(p) : run_sm90_forward<kB, 96, false>(p); break;
    case 193: fp16 ? run_sm90_forward<kH, 96, true>(p) : run_sm90_forward<kB, 96, true>(p); break;
    case 256: fp16 ? run_sm90_forward<kH, 128, false>(p) : run_sm90_forward<kB, 128, false>(p); break;
    case 257: fp16 ? run_sm90_forward<kH, 128, true>(p) : run_sm90_forward<kB, 128, true>(p); break;
    case 512: fp16 ? run_sm90_forward<kH, 256, false>(p) : run_sm90_forward<kB, 256, false>(p); break;
    case 513: fp16 ? run_sm90_forward<kH, 256, true>(p) : run_sm90_forward<kB, 256, true>(p); break;
    default: std::printf("unsupported head_dim %d\n", p.head_dim); std::exit(1);
  }
}

std::vector<Variant> table_variants() { return {Variant{"default", 0, false, run_default}}; }

// Tile configurations x schedulers for tuning runs (bf16 only), selected with --variants.
// Shared memory (plus the O staging where it fits): d64 n128 s3 = 112 KB (+16), d64 n192 s2 =
// 112 KB (+16), d128 n128 s2 = 160 KB (+32), d128 n128 s3 = 224 KB, d256 n80 s2 = 224 KB.
std::vector<Variant> sweep_variants() {
  constexpr bool kOvl = false, kPers = true;
  return {
      // d64
      sweep_variant<kOvl, 64, 128, 2>(),
      sweep_variant<kOvl, 64, 128, 3>(),
      sweep_variant<kOvl, 64, 192, 2>(),
      sweep_variant<kPers, 64, 128, 2>(),
      sweep_variant<kPers, 64, 192, 2>(),
      sweep_variant<kOvl, 64, 128, 2, 3>(),
      sweep_variant<kPers, 64, 128, 2, 3>(),
      sweep_variant<kOvl, 64, 96, 2, 3>(),
      sweep_variant<kPers, 64, 96, 2, 3>(),
      sweep_variant<kOvl, 64, 112, 2, 3>(),
      sweep_variant<kOvl, 64, 128, 3, 3>(),
      sweep_variant<kPers, 64, 64, 2, 3>(),
      sweep_variant<kPers, 64, 64, 2>(),
      sweep_variant<kPers, 64, 128, 3, 3>(),
      // d128
      sweep_variant<kOvl, 128, 128, 2>(),
      sweep_variant<kOvl, 128, 128, 3>(),
      sweep_variant<kOvl, 128, 160, 2>(),
      sweep_variant<kOvl, 128, 176, 2>(),
      sweep_variant<kPers, 128, 128, 2>(),
      sweep_variant<kPers, 128, 128, 3>(),
      sweep_variant<kPers, 128, 160, 2>(),
      sweep_variant<kPers, 128, 176, 2>(),
      sweep_variant<kPers, 128, 96, 2>(),
      sweep_variant<kPers, 128, 64, 2>(),
      sweep_variant<kPers, 128, 64, 2, 3>(),
      sweep_variant<kPers, 128, 64, 3, 3>(),
      sweep_variant<kPers, 128, 80, 2, 3>(),
      sweep_variant<kPers, 128, 80, 3, 3>(),
      sweep_variant<kOvl, 128, 80, 2, 3>(),
      // d256
      sweep_variant<kOvl, 256, 80, 2>(),
      sweep_variant<kOvl, 256, 64, 2>(),
      sweep_variant<kPers, 256, 80, 2>(),
      sweep_variant<kPers, 256, 64, 2>(),
      // L2 section size (MiB of K/V per section; default kSm90L2SectionMiB = 8)
      sweep_variant<kPers, 64, 128, 2, 3, 24>(),
      sweep_variant<kPers, 64, 128, 3, 3, 24>(),
      sweep_variant<kPers, 128, 128, 2, 2, 4>(),
      sweep_variant<kPers, 128, 128, 2, 2, 24>(),
      sweep_variant<kPers, 128, 128, 2, 2, 16>(),
      sweep_variant<kPers, 128, 96, 3>(),
      sweep_variant<kPers, 128, 160, 2, 2, 24>(),
      sweep_variant<kOvl, 128, 176, 2, 2, 24>(),
      sweep_variant<kPers, 256, 80, 2, 2, 24>(),
      sweep_variant<kOvl, 256, 80, 2, 2, 24>(),
  };
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

// SMs the second run of every check pretends to have: persistent CTAs then take many tiles each
// (the correctness shapes have fewer tiles than an H100 has SMs), so the hand-over from one tile
// to the next (tiles of different lengths, empty ones, causal claims) is checked too.
constexpr int kFewSms = 3;

bool check_case(const ProblemShape& shape) {
  HostProblem host(shape);
  DeviceProblem dev(host);
  bool all_pass = true;
  for (const int sms : {dev.params.num_sms, kFewSms}) {
    const std::string name = shape.describe() + " sms=" + std::to_string(sms);
    CHECK_CUDA(cudaMemset(dev.out, 0xFF, host.out_elements() * 2));  // NaN poison, every run
    CHECK_CUDA(cudaMemset(dev.lse, 0xFF, host.lse_elements() * 4));
    AttentionParams params = dev.params;
    params.num_sms = sms;
    try {
      run(params);
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
    all_pass = all_pass && result.pass;
  }
  return all_pass;
}

// Random inputs for timing, filled fast on all host threads (a hash of the index, roughly normal:
// the sum of four uniforms, centered and scaled to unit variance). Never zeros: see METHOD.md.
void fast_fill(HostProblem& host) {
  const DType dt = host.shape.dtype;
  std::vector<uint16_t>* tensors[3] = {&host.q, &host.k, &host.v};
  const int threads = std::max(1u, std::thread::hardware_concurrency());
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      for (int which = 0; which < 3; ++which) {
        std::vector<uint16_t>& x = *tensors[which];
        const size_t chunk = (x.size() + threads - 1) / threads;
        const size_t end = std::min(x.size(), chunk * (t + 1));
        for (size_t i = chunk * t; i < end; ++i) {
          uint64_t h = (i + 1) * 0x9E3779B97F4A7C15ull ^ (uint64_t(which + 1) << 60);
          h ^= h >> 31; h *= 0xBF58476D1CE4E5B9ull; h ^= h >> 29; h *= 0x94D049BB133111EBull;
          h ^= h >> 32;
          const float sum = float(h & 0xFFFF) + float((h >> 16) & 0xFFFF) +
                            float((h >> 32) & 0xFFFF) + float(h >> 48);
          x[i] = to_bits((sum / 65536.0f - 2.0f) * 1.7320508f, dt);  // variance 4/12 -> 1
        }
      }
    });
  }
  for (auto& th : pool) th.join();
}

struct TimingRow {
  std::string shape, variant;
  double tflops;
};
std::vector<TimingRow> g_rows;

// Times every selected variant on one shape. Variants take turns (kRounds rounds of kRunsPerRound
// runs each) so that clock and temperature drift over the shape's measurement hits all of them
// alike: timing each variant in one block favoured whichever ran first by up to 4%.
void time_shape(const ProblemShape& shape, const DeviceProblem& dev,
                const std::vector<const Variant*>& variants) {
  const AttentionParams& p = dev.params;
  const double flops = 4.0 * p.batch * p.heads_q * double(p.seqlen_q) * p.seqlen_k * p.head_dim *
                       (p.causal ? 0.5 : 1.0);
  constexpr int kWarmup = 2, kRounds = 5, kRunsPerRound = 8;
  // Short shapes (a few tens of microseconds per call) are timed as kShortBatch back-to-back
  // launches per event pair: the host's per-call work (four tensor maps, the launch) then overlaps
  // the previous kernel instead of sitting between the start event and the kernel.
  constexpr int kShortSeqlen = 2048, kShortBatch = 8;
  const int launches = p.seqlen_q <= kShortSeqlen ? kShortBatch : 1;
  std::vector<std::vector<float>> ms(variants.size());
  cudaEvent_t start, stop;
  CHECK_CUDA(cudaEventCreate(&start));
  CHECK_CUDA(cudaEventCreate(&stop));
  for (const Variant* v : variants) {
    g_variant = v;
    for (int i = 0; i < kWarmup; ++i) run(p);
    wait_with_watchdog(shape.describe().c_str());
  }
  for (int round = 0; round < kRounds; ++round) {
    for (size_t i = 0; i < variants.size(); ++i) {
      g_variant = variants[i];
      for (int r = 0; r < kRunsPerRound; ++r) {
        CHECK_CUDA(cudaEventRecord(start));
        for (int l = 0; l < launches; ++l) run(p);
        CHECK_CUDA(cudaEventRecord(stop));
        wait_with_watchdog(shape.describe().c_str());
        float elapsed = 0;
        CHECK_CUDA(cudaEventElapsedTime(&elapsed, start, stop));
        ms[i].push_back(elapsed / launches);
      }
    }
  }
  for (size_t i = 0; i < variants.size(); ++i) {
    std::vector<float>& t = ms[i];
    std::sort(t.begin(), t.end());
    const double median_s = t[t.size() / 2] * 1e-3, min_s = t[0] * 1e-3;
    const double tflops = flops / median_s * 1e-12;
    std::printf("time [%s] %s: median %.3f ms = %.1f TFLOPS (min %.3f ms = %.1f; %.0f%% of GEMM "
                "peak)\n",
                variants[i]->name.c_str(), shape.describe().c_str(), median_s * 1e3, tflops,
                min_s * 1e3, flops / min_s * 1e-12, 100.0 * tflops / kGemmPeakTflops);
    g_rows.push_back({shape.describe(), variants[i]->name, tflops});
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
}

#ifdef FLASHCORE_SM90_TRACE
// --trace DIR (a build with -DFLASHCORE_SM90_TRACE, see dev/sm90/trace_sm90.sh): after a shape's
// timing, each variant runs three more times and the last launch's timeline goes to
// DIR/<variant>__<shape>.csv (cta, warpgroup, event, clock; cuda/sm90/trace.cuh).
void dump_traces(const ProblemShape& shape, const DeviceProblem& dev,
                 const std::vector<const Variant*>& variants, const std::string& dir) {
  static Sm90TraceRecorder recorder;
  for (const Variant* v : variants) {
    g_variant = v;
    recorder.reset();
    for (int i = 0; i < 3; ++i) run(dev.params);
    wait_with_watchdog(shape.describe().c_str());
    std::string name = v->name + "__" + shape.describe();
    for (char& c : name)
      if (c == ' ' || c == '/' || c == '=') c = '_';
    recorder.write_csv(dir + "/" + name + ".csv");
  }
}
#endif

}  // namespace

bool variant_takes(const Variant& variant, const ProblemShape& shape, int only_hd) {
  if (only_hd && shape.head_dim != only_hd) return false;
  if (variant.head_dim && shape.head_dim != variant.head_dim) return false;
  return !variant.bf16_only || shape.dtype == DType::kBFloat16;
}

// --variants a,b,!c: a variant runs if its name starts with one of the plain items and contains
// none of the items marked with '!'.
bool selected(const std::string& name, const std::string& list) {
  if (list.empty()) return true;
  bool match = false;
  size_t begin = 0;
  while (begin <= list.size()) {
    size_t end = list.find(',', begin);
    if (end == std::string::npos) end = list.size();
    const std::string item = list.substr(begin, end - begin);
    if (item.size() > 1 && item[0] == '!') {
      if (name.find(item.substr(1)) != std::string::npos) return false;
    } else if (!item.empty() && name.rfind(item, 0) == 0) {
      match = true;
    }
    begin = end + 1;
  }
  return match;
}

int main(int argc, char** argv) {
  bool timing = true, checking = true, sweep = false;
  int only_hd = 0, only_seqlen = 0;
  bool timing_fp16 = false;
  std::string variant_list, trace_dir;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--no-timing")) timing = false;
    if (!std::strcmp(argv[i], "--only-timing")) checking = false;
    if (!std::strcmp(argv[i], "--sweep")) sweep = true;
    if (!std::strcmp(argv[i], "--hd") && i + 1 < argc) only_hd = std::atoi(argv[++i]);
    if (!std::strcmp(argv[i], "--variants") && i + 1 < argc) variant_list = argv[++i];
    if (!std::strcmp(argv[i], "--seqlen") && i + 1 < argc) only_seqlen = std::atoi(argv[++i]);
    if (!std::strcmp(argv[i], "--trace") && i + 1 < argc) trace_dir = argv[++i];
    if (!std::strcmp(argv[i], "--dtype") && i + 1 < argc) {
      const std::string dtype = argv[++i];
      if (dtype != "fp16" && dtype != "bf16") {
        std::printf("--dtype expects fp16 or bf16, got '%s'\n", dtype.c_str());
        return 2;
      }
      timing_fp16 = dtype == "fp16";
    }
  }
#ifndef FLASHCORE_SM90_TRACE
  if (!trace_dir.empty()) {
    std::printf("--trace needs a build with -DFLASHCORE_SM90_TRACE (dev/sm90/trace_sm90.sh)\n");
    return 2;
  }
#endif
  std::vector<Variant> variants;
  if (!variant_list.empty()) {  // any table or sweep variant by name
    for (const Variant& v : table_variants())
      if (selected(v.name, variant_list)) variants.push_back(v);
    for (const Variant& v : sweep_variants())
      if (selected(v.name, variant_list)) variants.push_back(v);
  } else {
    for (const Variant& v : table_variants()) variants.push_back(v);
    if (sweep) {
      for (const Variant& v : sweep_variants()) variants.push_back(v);
    }
  }
  if (argc > 1 && !std::strcmp(argv[1], "--list")) {
    for (const Variant& v : table_variants()) std::printf("%s\n", v.name.c_str());
    for (const Variant& v : sweep_variants()) std::printf("%s\n", v.name.c_str());
    return 0;
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
    for (size_t i = 0; i < variants.size(); ++i)
      if (!variant_ok[i]) std::printf("FAILED variant: %s\n", variants[i].name.c_str());
  }
  if (timing) {
    // One set of inputs per shape, shared by every variant that takes it.
    for (ProblemShape shape : timing_shapes()) {
      if (only_seqlen && shape.seqlen_q != only_seqlen) continue;
      if (timing_fp16) shape.dtype = DType::kFloat16;
      std::vector<const Variant*> takers;
      for (size_t i = 0; i < variants.size(); ++i)
        if (variant_ok[i] && variant_takes(variants[i], shape, only_hd))
          takers.push_back(&variants[i]);
      if (takers.empty()) continue;
      HostProblem host(shape, /*fill=*/false);
      fast_fill(host);
      DeviceProblem dev(host);
      time_shape(shape, dev, takers);
#ifdef FLASHCORE_SM90_TRACE
      if (!trace_dir.empty()) dump_traces(shape, dev, takers, trace_dir);
#endif
    }
    std::printf("\n=== summary: TFLOPS (median of 40 samples, variants interleaved), best first ===\n");
    std::string current;
    std::vector<TimingRow> rows;
    auto flush = [&] {
      if (rows.empty()) return;
      std::sort(rows.begin(), rows.end(),
                [](const TimingRow& a, const TimingRow& b) { return a.tflops > b.tflops; });
      std::printf("%s:", rows[0].shape.c_str());
      for (const TimingRow& r : rows) std::printf(" %s %.0f;", r.variant.c_str(), r.tflops);
      std::printf("\n");
      rows.clear();
    };
    for (const TimingRow& r : g_rows) {
      if (r.shape != current) flush();
      current = r.shape;
      rows.push_back(r);
    }
    flush();
  }
  return failures == 0 ? 0 : 1;
}
