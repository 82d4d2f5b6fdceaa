// flashcore-bench: times FlashCore attention and checks every result against the float64
// reference. Flags: options.cpp (--help); shapes: grids.cpp; checks before any run: plan.cpp;
// one run: runner.cpp.
#include <algorithm>
#include <iostream>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "gpu.h"
#include "grids.h"
#include "options.h"
#include "plan.h"
#include "report.h"
#include "runner.h"
#include "serving.h"

namespace fb = flashcore::bench;
using flashcore::Backend;

namespace {

constexpr int kExitPass = 0;
constexpr int kExitFailure = 1;
constexpr int kExitUsage = 2;

// Defaults per place: GPU timing follows BENCHMARKS.md (median of >= 30); the CPU backends are
// ~1000x slower, so a few runs; the float64 reference is only checked, timed once.
struct IterationDefaults {
  int warmup, iters;
};
constexpr IterationDefaults kGpuDefaults{10, 30};
constexpr IterationDefaults kCpuDefaults{1, 5};
constexpr IterationDefaults kReferenceDefaults{0, 1};

// Query rows checked per (batch, head). The check runs on the host in float64; on the GPU grids
// (standard: b*h*sk*d is ~2e9 per row) 16 rows keep it near a second per config.
constexpr int kDefaultCheckRows = 64;
constexpr int kGpuGridCheckRows = 16;

bool runs_on_host(Backend backend) { return !fb::runs_on_gpu(backend); }

fb::RunSettings settings_for(Backend backend, const fb::BenchOptions& options, uint64_t seed) {
  IterationDefaults defaults = kGpuDefaults;
  if (backend == Backend::kReference) {
    defaults = kReferenceDefaults;
  } else if (runs_on_host(backend)) {
    defaults = kCpuDefaults;
  }
  fb::RunSettings settings;
  settings.warmup = options.warmup.value_or(defaults.warmup);
  settings.iters = options.iters.value_or(defaults.iters);
  settings.check_rows = options.check_rows.value_or(
      options.grid == "standard" || options.grid == "llm" ? kGpuGridCheckRows
                                                          : kDefaultCheckRows);
  settings.seed = seed;
  return settings;
}

void print_header(const fb::BenchPlan& plan, uint64_t seed, std::ostream& os) {
  os << "flashcore-bench " << flashcore::version() << " (commit " << fb::build_commit()
     << "), seed " << seed << ", " << plan.shapes.size() + plan.serving.size() << " config(s) x "
     << plan.backends.size() << " backend(s)\n";
  if (fb::gpu_present()) {
    os << "gpu: " << fb::gpu_name() << " (L2 " << fb::gpu_l2_bytes() / (1 << 20)
       << " MiB; inputs smaller than " << fb::kColdCacheL2Multiple
       << "x L2 are rotated between timed runs)\n";
  }
  os << fb::host_device_name() << "\n\n";
}

int run(const fb::BenchOptions& options) {
  const fb::BenchPlan plan = fb::make_plan(options);  // every usage error before any run
  std::optional<fb::JsonDestination> json;
  if (!options.json_path.empty()) {
    json.emplace(options.json_path);  // opened now: a bad path is a usage error, not news later
  }
  // With --json - standard output carries the JSON alone; the table goes to stderr.
  std::ostream& human = json && json->is_stdout() ? std::cerr : std::cout;
  const uint64_t seed = options.seed.value_or(std::random_device{}());
  const bool show_progress = !options.grid.empty();
  print_header(plan, seed, human);

  std::vector<fb::BenchRecord> records;
  const size_t total = (plan.shapes.size() + plan.serving.size()) * plan.backends.size();
  for (size_t i = 0; i < plan.shapes.size(); ++i) {
    for (const Backend backend : plan.backends) {
      // One seed per config, the same for every backend: side by side on the same inputs.
      records.push_back(
          fb::run_benchmark(plan.shapes[i], backend, settings_for(backend, options, seed + i)));
      if (show_progress) {
        fb::print_progress(records.back(), records.size() - 1, total, std::cerr);
      }
    }
  }

  for (size_t i = 0; i < plan.serving.size(); ++i) {
    for (const Backend backend : plan.backends) {
      records.push_back(fb::run_serving_benchmark(plan.serving[i], backend,
                                                  settings_for(backend, options, seed + i)));
    }
  }

  fb::print_table(records, human);
  if (json) {
    fb::write_json(records, *json);
    human << "wrote " << (json->is_stdout() ? "the JSON to standard output" : json->path())
          << "\n";
  }
  // Nothing run is nothing checked: an empty run never passes (shapes_from_options refuses
  // one already; this keeps the exit code honest should another path ever produce one).
  const bool all_pass =
      !records.empty() && std::all_of(records.begin(), records.end(),
                                      [](const fb::BenchRecord& r) { return r.pass; });
  human << (all_pass ? "all results pass\n" : "SOME RESULTS FAILED\n");
  return all_pass ? kExitPass : kExitFailure;
}

}  // namespace

int main(int argc, char** argv) {
  fb::BenchOptions options;
  try {
    options = fb::parse_options(std::vector<std::string>(argv + 1, argv + argc));
    if (options.help) {
      std::cout << fb::usage_text();
      return kExitPass;
    }
    return run(options);
  } catch (const fb::UsageError& error) {
    // The error and where to look, not the whole usage text: the one line that matters stays
    // on screen.
    std::cerr << "flashcore-bench: error: " << error.what() << "\n"
              << "run flashcore-bench --help for usage\n";
    return kExitUsage;
  } catch (const std::exception& error) {
    std::cerr << "flashcore-bench: error: " << error.what() << "\n";
    return kExitFailure;
  }
}
