// Host-side timing and the statistics every backend reports.
#pragma once

#include <functional>
#include <vector>

namespace flashcore::bench {

struct TimingSummary {
  double median_ms = 0;
  double min_ms = 0;
};

// Median and minimum of per-run times (median of an even count: mean of the middle two).
TimingSummary summarize(std::vector<double> run_ms);

// BENCHMARKS.md convention: flops / time, in 1e12 per second.
double tflops(double flops, double ms);

// Times `run(i)` with the host's steady clock (the CPU backends are synchronous): `warmup`
// untimed runs, then `iters` timed ones, each timed on its own.
std::vector<double> time_host_runs(const std::function<void(int)>& run, int warmup, int iters);

}  // namespace flashcore::bench
