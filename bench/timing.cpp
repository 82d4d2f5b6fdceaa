#include "timing.h"

#include <algorithm>
#include <chrono>

namespace flashcore::bench {

TimingSummary summarize(std::vector<double> run_ms) {
  TimingSummary summary;
  if (run_ms.empty()) {
    return summary;
  }
  std::sort(run_ms.begin(), run_ms.end());
  const size_t n = run_ms.size();
  summary.median_ms = n % 2 == 1 ? run_ms[n / 2] : 0.5 * (run_ms[n / 2 - 1] + run_ms[n / 2]);
  summary.min_ms = run_ms.front();
  return summary;
}

double tflops(double flops, double ms) { return ms > 0 ? flops / (ms * 1e-3) / 1e12 : 0; }

std::vector<double> time_host_runs(const std::function<void(int)>& run, int warmup, int iters) {
  using Clock = std::chrono::steady_clock;
  for (int i = 0; i < warmup; ++i) {
    run(i);
  }
  std::vector<double> ms;
  ms.reserve(iters);
  for (int i = 0; i < iters; ++i) {
    const Clock::time_point start = Clock::now();
    run(warmup + i);
    ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - start).count());
  }
  return ms;
}

}  // namespace flashcore::bench
