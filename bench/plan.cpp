#include "plan.h"

#include <algorithm>
#include <cstdio>
#include <iostream>
#include <string>

#include "gpu.h"
#include "grids.h"
#include "runner.h"
#include "serving.h"

namespace flashcore::bench {
namespace {

bool runs_on_host(Backend backend) { return !runs_on_gpu(backend); }

std::vector<Backend> requested_backends(const BenchOptions& options) {
  if (options.backend == "all") {
    std::vector<Backend> backends;
    for (const Backend b : {Backend::kSM90, Backend::kSM80, Backend::kCPU, Backend::kReference}) {
      if (backend_available(b)) {
        backends.push_back(b);
      }
    }
    return backends;
  }
  const Backend backend = parse_backend(options.backend);
  // The no-flag default also runs the reference backend, so a first run exercises both paths.
  if (!options.shape_given && options.grid.empty() && backend == Backend::kAuto) {
    return {Backend::kAuto, Backend::kReference};
  }
  return {backend};
}

// An explicit GPU backend without a GPU would fail in its first CUDA call with whatever the
// runtime says (cudaErrorInsufficientDriver on a machine without the driver): say what is
// missing and what runs instead. (--backend all and auto only take what is available.)
void check_gpu_present(const std::vector<Backend>& backends) {
  for (const Backend backend : backends) {
    if (backend != Backend::kSM80 && backend != Backend::kSM90) {
      continue;
    }
    if (const std::string reason = gpu_absence_reason(); !reason.empty()) {
      throw UsageError(std::string("--backend ") + to_string(backend) +
                       ": no CUDA device: use --backend cpu or reference (" + reason + ")");
    }
  }
}

// The standard and llm grids are 7e10 to 2e13 FLOPs per config: hours on the CPU backends. An
// explicit CPU backend is refused (exit 2); with --backend all they are dropped with a note.
bool is_gpu_grid(const std::string& grid) { return grid == "standard" || grid == "llm"; }

void fit_backends_to_grid(const BenchOptions& options, std::vector<Backend>& backends) {
  if (!is_gpu_grid(options.grid)) {
    return;
  }
  const std::string grid = "--grid " + options.grid;
  if (options.backend != "all") {
    if (runs_on_host(backends.front())) {
      throw UsageError(grid + " is sized for GPUs (7e10 to 2e13 FLOPs per config) and backend " +
                       std::string(to_string(backends.front())) +
                       " runs on the CPU here (hours); use --grid small or a single config "
                       "instead");
    }
    return;
  }
  const auto host_end = std::remove_if(backends.begin(), backends.end(), runs_on_host);
  if (host_end != backends.end()) {
    std::cerr << "note: " << grid << " skips the CPU backends (cpu, reference): too slow\n";
    backends.erase(host_end, backends.end());
  }
  if (backends.empty()) {
    throw UsageError(grid + " needs a GPU backend, and none is available here");
  }
}

std::string gibibytes(double bytes) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.1f GiB", bytes / double(int64_t{1} << 30));
  return text;
}

// A config larger than the machine's memory would die in an allocation after the runs before
// it; every dimension flag is within the library's bounds, but their product need not be.
void check_memory(const std::vector<testing::ProblemShape>& shapes,
                  const std::vector<Backend>& backends) {
  const bool any_gpu = std::any_of(backends.begin(), backends.end(), runs_on_gpu);
  const double host_bytes = double(host_memory_bytes());
  const double device_bytes = any_gpu ? double(gpu_memory_bytes()) : 0;
  for (const testing::ProblemShape& shape : shapes) {
    const MemoryNeed need = memory_needed(shape);
    std::string where, has;
    if (host_bytes > 0 && need.host_bytes > host_bytes) {
      where = gibibytes(need.host_bytes) + " of host memory";
      has = gibibytes(host_bytes);
    } else if (device_bytes > 0 && need.device_bytes > device_bytes) {
      where = gibibytes(need.device_bytes) + " of GPU memory";
      has = gibibytes(device_bytes);
    }
    if (!where.empty()) {
      throw UsageError(shape.describe() + " needs " + where + " for its inputs and outputs, " +
                       "more than this machine's " + has +
                       ": lower --batch, --seqlen*, --heads* or --head-dim");
    }
  }
}

// Every config the library would refuse (a dtype or head_dim a GPU backend has no kernel for,
// a GPU of the wrong arch, ...) is refused here, with the library's reason, before any run.
// --backend all asks for what can run, so there such a backend is dropped with a note.
void check_library_accepts(const BenchOptions& options,
                           const std::vector<testing::ProblemShape>& shapes,
                           std::vector<Backend>& backends) {
  std::vector<Backend> accepted;
  for (const Backend backend : backends) {
    std::string refusal;  // "<config>: <the library's reason>" of the first config refused
    for (const testing::ProblemShape& shape : shapes) {
      if (const std::string reason = refusal_reason(shape, backend); !reason.empty()) {
        refusal = shape.describe() + ": " + reason;
        break;
      }
    }
    if (refusal.empty()) {
      accepted.push_back(backend);
    } else if (options.backend == "all") {
      std::cerr << "note: --backend all skips " << to_string(backend) << ", which cannot run "
                << refusal << "\n";
    } else {
      throw UsageError("backend " + std::string(to_string(backend)) + " cannot run " + refusal);
    }
  }
  if (accepted.empty()) {
    throw UsageError("--backend all: no available backend can run these configs");
  }
  backends = accepted;
}

// The serving config's memory and the library's answer on each backend, as for dense configs.
void check_serving_config(const BenchOptions& options, const testing::ServingShape& shape,
                          std::vector<Backend>& backends) {
  const MemoryNeed need = serving_memory_needed(shape);
  const double host_bytes = double(host_memory_bytes());
  if (host_bytes > 0 && need.host_bytes > host_bytes) {
    throw UsageError(shape.describe() + " needs " + gibibytes(need.host_bytes) +
                     " of host memory, more than this machine's " + gibibytes(host_bytes));
  }
  std::vector<Backend> accepted;
  for (const Backend backend : backends) {
    const std::string reason = serving_refusal_reason(shape, backend);
    if (reason.empty()) {
      accepted.push_back(backend);
    } else if (options.backend == "all") {
      std::cerr << "note: --backend all skips " << to_string(backend) << ", which cannot run "
                << shape.describe() << ": " << reason << "\n";
    } else {
      throw UsageError("backend " + std::string(to_string(backend)) + " cannot run " +
                       shape.describe() + ": " + reason);
    }
  }
  if (accepted.empty()) {
    throw UsageError("--backend all: no available backend can run " + shape.describe());
  }
  backends = accepted;
}

}  // namespace

BenchPlan make_plan(const BenchOptions& options) {
  BenchPlan plan;
  plan.backends = requested_backends(options);
  check_gpu_present(plan.backends);
  if (options.layout != "dense") {
    plan.serving = {serving_shape_from_options(options)};
    check_serving_config(options, plan.serving.front(), plan.backends);
    return plan;
  }
  fit_backends_to_grid(options, plan.backends);
  plan.shapes = shapes_from_options(options);
  check_memory(plan.shapes, plan.backends);  // first: refusal_reason sums the shapes' bytes
  check_library_accepts(options, plan.shapes, plan.backends);
  return plan;
}

}  // namespace flashcore::bench
