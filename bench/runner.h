// Runs one (config, backend): fresh inputs, a poisoned and checked first run, then timing.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "flashcore/flashcore.h"
#include "testing/accuracy.h"
#include "testing/serving_problem.h"

namespace flashcore::bench {

struct RunSettings {
  int warmup = 0;      // untimed runs after the checked first run
  int iters = 1;       // timed runs; the median is reported
  int check_rows = 64; // query rows (per batch and head) checked against the reference
  uint64_t seed = 0;   // input seed for this config (the same for every backend)
};

// Everything one row of the table and one JSON record holds.
struct BenchRecord {
  // A serving config (--layout) keeps its batch here; `shape` then holds its batch size, longest
  // sequences, heads and dtype.
  std::optional<testing::ServingShape> serving;
  testing::ProblemShape shape;
  std::string backend;      // as requested: auto, cpu, reference, sm80, sm90
  std::string backend_ran;  // what attention_forward reports it ran ("" when it failed)
  std::string device;       // GPU name or host CPU model
  uint64_t seed = 0;
  int warmup = 0;
  int iters = 0;
  int input_copies = 1;     // GPU: input sets rotated between timed runs to keep L2 cold
  double median_ms = 0;
  double min_ms = 0;
  double tflops = 0;
  std::optional<testing::AccuracyReport> accuracy;
  std::string error;        // the Error message when the run threw; empty otherwise
  bool pass = false;
};

// The config column and FLOPs of a record, dense or serving.
std::string config_text(const BenchRecord& record);
double record_flops(const BenchRecord& record);

// Whether `backend` runs on device memory here (auto: when a CUDA backend is available).
bool runs_on_gpu(Backend backend);

// BENCHMARKS.md wants inputs larger than L2. When one input set (q, k, v, out, lse) is smaller
// than this many L2 sizes, the timed runs rotate among copies so each run finds its data evicted
// by the ones in between (a cold-cache time, as for the large configs).
inline constexpr int64_t kColdCacheL2Multiple = 3;

// The host CPU model ("cpu: AMD EPYC ... (16 threads)").
std::string host_device_name();

// Physical memory of the host in bytes (0 when the system does not say).
int64_t host_memory_bytes();

// Bytes one run of `shape` holds at once: on the host (inputs, outputs and their checked
// copies) and, for a GPU backend, on the device (one input set; more copies are only made of
// sets small enough to fit in a few L2s). In double: a product of flag values can pass 2^64.
struct MemoryNeed {
  double host_bytes = 0;
  double device_bytes = 0;
};
MemoryNeed memory_needed(const testing::ProblemShape& shape);

// cudaMalloc's own alignment, kept for every buffer and made-up address of the bench.
constexpr size_t kBufferAlignment = 256;
size_t align_up(size_t bytes);

// Tensor addresses for a refusal check, which touches no memory: non-null, aligned like
// cudaMalloc's and each in a range of its own, so no two views overlap.
class MadeUpAddresses {
 public:
  void* place(size_t bytes);

 private:
  uintptr_t next_ = kBufferAlignment;
};

// select_backend's message for `args` (views over made-up addresses), or "" when it takes them.
std::string selection_refusal(AttentionArgs args);

// A record of `backend` carrying the settings' seed, warm-up and iterations.
BenchRecord new_record(Backend backend, const RunSettings& settings);

// Why attention_forward would refuse `shape` on `backend` before running anything (the library's
// message), or "" when it would take it. Touches no memory: use it to refuse a config up front.
// Call it only on shapes whose memory_needed fits the machine (the library sums their bytes).
std::string refusal_reason(const testing::ProblemShape& shape, Backend backend);

// Never throws for a runtime failure of the backend: the message lands in record.error.
BenchRecord run_benchmark(const testing::ProblemShape& shape, Backend backend,
                          const RunSettings& settings);

}  // namespace flashcore::bench
