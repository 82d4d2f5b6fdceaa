// attention_forward: validate -> choose a backend -> run it.

#include "api/backend.h"
#include "api/kernel_registry.h"
#include "api/validate.h"
#include "api/validate_serving.h"
#include "common/append.h"
#include "cpu/cpu_backend.h"
#include "cpu/reference.h"

#ifdef FLASHCORE_HAS_CUDA
#include <cuda_runtime.h>

#include "cuda/append_kv.h"
#include "cuda/check.h"
#endif

namespace flashcore {
namespace detail {
namespace {

#ifdef FLASHCORE_HAS_CUDA
// Makes the tensors' device current for the launch and restores the caller's afterwards. The
// common case (already current) costs one cudaGetDevice and nothing on the way out.
class CurrentDeviceGuard {
 public:
  explicit CurrentDeviceGuard(int device_index) {
    FLASHCORE_CUDA_CHECK(cudaGetDevice(&previous_));
    if (previous_ != device_index) {
      FLASHCORE_CUDA_CHECK(cudaSetDevice(device_index));
      switched_ = true;
    }
  }
  ~CurrentDeviceGuard() {
    if (switched_) cudaSetDevice(previous_);
  }
  CurrentDeviceGuard(const CurrentDeviceGuard&) = delete;
  CurrentDeviceGuard& operator=(const CurrentDeviceGuard&) = delete;

 private:
  int previous_ = 0;
  bool switched_ = false;
};

// Hands the caller's workspace to the kernels as tile counters; without one they stay nullptr and
// the backend uses its own. Only the sm90 kernel claims tiles today, and only its launcher knows
// whether the row it runs does (persistent, causal): it zeroes the counters on the call's stream
// then (asynchronous, capture-safe), so the other calls pay for no zeroing.
void attach_workspace(Backend backend, const AttentionArgs& args, AttentionParams& p) {
  if (args.workspace == nullptr || backend != Backend::kSM90) return;
  p.tile_counters = static_cast<uint32_t*>(args.workspace);
  p.workspace_bytes = args.workspace_bytes;
}

void run_cuda(Backend backend, const AttentionArgs& args, AttentionParams p) {
  CurrentDeviceGuard guard(p.device_index);
  attach_workspace(backend, args, p);
  // seqlen_k == 0 goes to the kernels too: they visit no KV tile and write out = 0, lse = -inf
  // (asynchronous, and legal under CUDA graph capture).
  KernelLauncher launcher = find_kernel(backend, p.dtype, p.head_dim, p.causal);
  if (launcher == nullptr) {  // validation should have caught this; keep the error explicit
    throw Error(std::string("no ") + to_string(backend) + " kernel for this call");
  }
  launcher(p);
}
#endif

// Writes k_new/v_new into the cache at cache_seqlens[b] before any attention runs, even for
// calls with no query row (a caller may fill a cache with seqlen_q 0): a host cache here
// (validation checked that they fit), a CUDA one on the call's stream, ahead of the launch that
// reads it.
void run_append(Backend backend, const AttentionArgs& args, const AttentionParams& p) {
  const AppendParams append = append_params(args);
  if (!append.active()) return;
  if (!is_cuda_backend(backend)) {
    append_kv_host(p, append);
    return;
  }
#ifdef FLASHCORE_HAS_CUDA
  CurrentDeviceGuard guard(p.device_index);
  append_kv_cuda(p, append);
#endif
}

// Nothing to compute: no batch, no head or no query row.
bool is_noop(const AttentionParams& p) { return p.batch == 0 || p.heads_q == 0 || p.seqlen_q == 0; }

}  // namespace
}  // namespace detail

Backend attention_forward(const AttentionArgs& args) {
  detail::AttentionParams params = detail::validate_common(args);
  Backend backend = detail::choose_backend(params, args);
  detail::run_append(backend, args, params);
  if (detail::is_noop(params)) return backend;
  switch (backend) {
    case Backend::kCPU: detail::run_cpu_backend(params); break;
    case Backend::kReference: detail::run_reference_backend(params); break;
    case Backend::kSM80:
    case Backend::kSM90:
#ifdef FLASHCORE_HAS_CUDA
      detail::run_cuda(backend, args, params);
      break;
#else
      throw Error(std::string("backend ") + to_string(backend) + " is not compiled in");
#endif
    case Backend::kAuto: throw Error("internal error: backend auto was not resolved");
  }
  return backend;
}

}  // namespace flashcore
