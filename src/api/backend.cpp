// Which backend runs a call: auto picks sm90 on Hopper when a kernel and TMA-friendly strides
// exist, then sm80 on Ampere and later, and cpu for host tensors. What each CUDA backend's
// kernels run at all (dtypes, layouts) is said here, in unsupported_reason.
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

// sm80 (mma.sync, Ampere and later) runs fp16/bf16 in every layout; FP8 tensor cores start at
// sm89, and the portable kernel has no FP8 path.
std::string sm80_unsupported_reason(DType dtype, const ServingLayout& /*layout*/) {
  if (dtype == DType::kFloat8E4M3) {
    return "dtype fp8_e4m3 needs FP8 tensor cores (sm89+); backend sm80 does not run it";
  }
  return "";
}

}  // namespace

std::string unsupported_reason(Backend backend, DType dtype, const ServingLayout& layout) {
  switch (backend) {
    // sm90 runs fp16, bf16 and fp8_e4m3 in every layout: packed q/k and contiguous caches as
    // tensor maps over the whole tensor, paged caches in boxes of page runs or gathered row by
    // row (cuda/sm90/sequence_layout.h), any page_size.
    case Backend::kSM90: return "";
    case Backend::kSM80: return sm80_unsupported_reason(dtype, layout);
    default: return "";  // cpu and reference run everything; auto is resolved by the caller
  }
}

void check_cuda_backends_run(Backend requested, DType dtype, const ServingLayout& layout) {
  if (is_cuda_backend(requested)) {
    const std::string reason = unsupported_reason(requested, dtype, layout);
    if (!reason.empty()) throw Error(reason + " (this call is " + layout_name(layout) + ")");
    return;
  }
  if (requested != Backend::kAuto) return;
  const std::string sm90 = unsupported_reason(Backend::kSM90, dtype, layout);
  const std::string sm80 = unsupported_reason(Backend::kSM80, dtype, layout);
  if (sm90.empty() || sm80.empty()) return;  // auto picks the one that runs it
  throw Error(sm90 + "; sm80: " + sm80 + " (this call is " + layout_name(layout) +
              " on CUDA tensors; the cpu and reference backends run it on host tensors)");
}

namespace {

// Empty when `backend` can run the call, else the reason.
std::string why_not(Backend backend, const AttentionParams& params, const AttentionArgs& args) {
  std::string reason = backend_unavailable_reason(backend, params.device_index);
  if (!reason.empty()) return reason;
  reason = unsupported_reason(backend, params.dtype, serving_layout(params));
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
  if (args.q.device.type == DeviceType::kCUDA) {  // said first, the same on every machine
    check_cuda_backends_run(args.backend, params.dtype, serving_layout(params));
  }
  if (args.backend != Backend::kAuto) {
    validate_for_backend(params, args.backend);
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
