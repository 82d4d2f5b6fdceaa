// Which backend runs a call: auto picks sm90 on Hopper when a kernel and TMA-friendly strides
// exist, then sm80 on Ampere and later, and cpu for host tensors.
#include "api/backend.h"

#include <string>

#include "api/kernel_registry.h"
#include "api/validate.h"
#include "api/validate_serving.h"

namespace flashcore::detail {
namespace {

// TMA tensor maps take strides below 2^40 bytes (cuTensorMapEncodeTiled limit).
constexpr int64_t kMaxTmaStrideBytes = int64_t{1} << 40;

bool strides_fit_tma(const TensorView& t) {
  int64_t element_bytes = static_cast<int64_t>(dtype_size(t.dtype));
  for (int i = 0; i < t.ndim - 1; ++i) {
    int64_t stride_bytes = t.strides[i] * element_bytes;
    if (stride_bytes % kCudaAlignmentBytes != 0 || stride_bytes >= kMaxTmaStrideBytes) return false;
  }
  return reinterpret_cast<uintptr_t>(t.data) % kCudaAlignmentBytes == 0;
}

}  // namespace

// The one switch for the sm90 kernels' serving layouts. They run every layout: packed q/k and
// contiguous caches as tensor maps over the whole tensor, paged caches in boxes of page runs
// (cuda/sm90/sequence_layout.h), any page_size.
std::string sm90_layout_unsupported_reason(const AttentionParams& /*params*/) { return ""; }

std::string layout_unsupported_reason(Backend backend, const AttentionParams& params) {
  if (backend == Backend::kSM90) return sm90_layout_unsupported_reason(params);
  return "";  // cpu, reference and sm80 run every layout
}

namespace {

// Empty when `backend` can run the call, else the reason.
std::string why_not(Backend backend, const AttentionParams& params, const AttentionArgs& args) {
  std::string reason = backend_unavailable_reason(backend, params.device_index);
  if (!reason.empty()) return reason;
  reason = layout_unsupported_reason(backend, params);
  if (!reason.empty()) return reason + " (this call is " + layout_name(params) + ")";
  if (find_kernel(backend, params.dtype, params.head_dim, params.causal) == nullptr) {
    return std::string("no kernel compiled for ") + to_string(params.dtype) + " head_dim=" +
           std::to_string(params.head_dim) + (params.causal ? " causal" : " non-causal");
  }
  if (backend == Backend::kSM90) {
    for (const TensorView* t : {&args.q, &args.k, &args.v, &args.out}) {
      if (!strides_fit_tma(*t)) return "strides are not TMA-describable";
    }
  }
  return "";
}

}  // namespace

Backend choose_backend(const AttentionParams& params, const AttentionArgs& args) {
  if (args.backend != Backend::kAuto) {
    validate_for_backend(params, args.backend);
    const std::string reason = layout_unsupported_reason(args.backend, params);
    if (!reason.empty()) {
      throw Error(std::string("backend ") + to_string(args.backend) + " cannot run this call's " +
                  layout_name(params) + " layout: " + reason);
    }
    return args.backend;
  }
  if (args.q.device.type == DeviceType::kCPU) return Backend::kCPU;
  std::string sm90_reason = why_not(Backend::kSM90, params, args);
  if (sm90_reason.empty()) return Backend::kSM90;
  std::string sm80_reason = why_not(Backend::kSM80, params, args);
  if (sm80_reason.empty()) return Backend::kSM80;
  // Report the most specific error: an unsupported head_dim beats a generic "unavailable".
  if (backend_unavailable_reason(Backend::kSM80, params.device_index).empty()) {
    validate_for_backend(params, Backend::kSM80);
  }
  throw Error("no CUDA backend can run this call on " + device_name(args.q.device) +
              ": sm90: " + sm90_reason + "; sm80: " + sm80_reason);
}

}  // namespace flashcore::detail

namespace flashcore {

Backend select_backend(const AttentionArgs& args) {
  detail::AttentionParams params = detail::validate_common(args);
  return detail::choose_backend(params, args);
}

bool backend_available(Backend backend, int device_index) {
  if (backend == Backend::kAuto) return true;
  return detail::backend_unavailable_reason(backend, device_index).empty();
}

std::vector<int> supported_head_dims(Backend backend) {
  if (!detail::is_cuda_backend(backend)) return {};
  return detail::compiled_head_dims(backend);
}

}  // namespace flashcore
