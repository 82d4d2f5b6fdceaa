#include "api/kernel_registry.h"

#include <algorithm>

#include "cuda/launchers.h"

namespace flashcore::detail {
namespace {

struct KernelEntry {
  Backend backend;
  DType dtype;
  int head_dim;
  bool causal;
  KernelLauncher launcher;
};

constexpr Backend kBackend_sm80 = Backend::kSM80;
constexpr Backend kBackend_sm90 = Backend::kSM90;

#define FLASHCORE_KERNEL(backend, dtype, head_dim, causal) \
  {kBackend_##backend, DType::dtype, head_dim, causal,     \
   &run_##backend##_forward<DType::dtype, head_dim, causal>},

// A leading sentinel keeps the array non-empty in CPU-only builds.
const KernelEntry kKernels[] = {
    {Backend::kAuto, DType::kFloat32, 0, false, nullptr},
#include "flashcore_kernel_list.inc"
};

#undef FLASHCORE_KERNEL

}  // namespace

KernelLauncher find_kernel(Backend backend, DType dtype, int head_dim, bool causal) {
  for (const KernelEntry& entry : kKernels) {
    if (entry.launcher != nullptr && entry.backend == backend && entry.dtype == dtype &&
        entry.head_dim == head_dim && entry.causal == causal) {
      return entry.launcher;
    }
  }
  return nullptr;
}

namespace {

std::vector<int> collect_head_dims(Backend backend) {
  std::vector<int> dims;
  for (const KernelEntry& entry : kKernels) {
    if (entry.launcher != nullptr && entry.backend == backend &&
        std::find(dims.begin(), dims.end(), entry.head_dim) == dims.end()) {
      dims.push_back(entry.head_dim);
    }
  }
  std::sort(dims.begin(), dims.end());
  return dims;
}

}  // namespace

const std::vector<int>& compiled_head_dims(Backend backend) {
  // The kernel table is fixed at build time: collect each backend's list once, not per call.
  static const std::vector<int> sm80 = collect_head_dims(Backend::kSM80);
  static const std::vector<int> sm90 = collect_head_dims(Backend::kSM90);
  static const std::vector<int> none;
  switch (backend) {
    case Backend::kSM80: return sm80;
    case Backend::kSM90: return sm90;
    default: return none;
  }
}

}  // namespace flashcore::detail
