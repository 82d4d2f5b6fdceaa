// Runs one (config, backend): fresh inputs, a poisoned and checked first run, then timing.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "flashcore/flashcore.h"
#include "testing/accuracy.h"

namespace flashcore::bench {

struct RunSettings {
  int warmup = 0;      // untimed runs after the checked first run
  int iters = 1;       // timed runs; the median is reported
  int check_rows = 64; // query rows (per batch and head) checked against the reference
  uint64_t seed = 0;   // input seed for this config (the same for every backend)
};

// Everything one row of the table and one JSON record holds.
struct BenchRecord {
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

// Whether `backend` runs on device memory here (auto: when a CUDA backend is available).
bool runs_on_gpu(Backend backend);

// BENCHMARKS.md wants inputs larger than L2. When one input set (q, k, v, out, lse) is smaller
// than this many L2 sizes, the timed runs rotate among copies so each run finds its data evicted
// by the ones in between (a cold-cache time, as for the large configs).
inline constexpr int64_t kColdCacheL2Multiple = 3;

// The host CPU model ("cpu: AMD EPYC ... (16 threads)").
std::string host_device_name();

// Never throws for a runtime failure of the backend: the message lands in record.error.
BenchRecord run_benchmark(const testing::ProblemShape& shape, Backend backend,
                          const RunSettings& settings);

}  // namespace flashcore::bench
