// attention_forward: validate -> choose a backend -> run it.
#include <limits>
#include <vector>

#include "api/backend.h"
#include "api/kernel_registry.h"
#include "api/validate.h"
#include "cpu/cpu_backend.h"
#include "cpu/reference.h"

#ifdef FLASHCORE_HAS_CUDA
#include <cuda_runtime.h>

#include "cuda/check.h"
#endif

namespace flashcore {
namespace detail {
namespace {

#ifdef FLASHCORE_HAS_CUDA
// Makes the tensors' device current for the launch and restores the caller's afterwards.
class CurrentDeviceGuard {
 public:
  explicit CurrentDeviceGuard(int device_index) {
    FLASHCORE_CUDA_CHECK(cudaGetDevice(&previous_));
    if (previous_ != device_index) FLASHCORE_CUDA_CHECK(cudaSetDevice(device_index));
  }
  ~CurrentDeviceGuard() { cudaSetDevice(previous_); }
  CurrentDeviceGuard(const CurrentDeviceGuard&) = delete;
  CurrentDeviceGuard& operator=(const CurrentDeviceGuard&) = delete;

 private:
  int previous_ = 0;
};

// seqlen_k == 0 with query rows: every row sees no key, so out = 0 and lse = -inf, written here
// instead of asking every kernel to handle a KV length of zero.
void fill_empty_rows_cuda(const AttentionParams& p) {
  cudaStream_t stream = p.stream;
  const size_t element_bytes = dtype_size(p.dtype);
  auto* out = static_cast<char*>(p.out);
  const size_t row_bytes = p.head_dim * element_bytes;
  // A single row may carry any row stride; cudaMemset2D only needs pitch >= width then.
  const size_t pitch = p.seqlen_q == 1 ? row_bytes : p.o_row_stride * element_bytes;
  for (int b = 0; b < p.batch; ++b) {
    for (int h = 0; h < p.heads_q; ++h) {
      FLASHCORE_CUDA_CHECK(cudaMemset2DAsync(out + p.o_offset(b, 0, h) * element_bytes, pitch,
                                             0, row_bytes, p.seqlen_q, stream));
    }
  }
  if (p.lse == nullptr) return;
  // Pageable source: cudaMemcpyAsync stages it before returning, so the vector may go away.
  std::vector<float> minus_inf(p.seqlen_q, -std::numeric_limits<float>::infinity());
  for (int b = 0; b < p.batch; ++b) {
    for (int h = 0; h < p.heads_q; ++h) {
      FLASHCORE_CUDA_CHECK(cudaMemcpyAsync(p.lse + p.lse_offset(b, h, 0), minus_inf.data(),
                                           minus_inf.size() * sizeof(float),
                                           cudaMemcpyHostToDevice, stream));
    }
  }
  FLASHCORE_CUDA_CHECK(cudaStreamSynchronize(stream));
}

void run_cuda(Backend backend, const AttentionParams& p) {
  CurrentDeviceGuard guard(p.device_index);
  if (p.seqlen_k == 0) {
    fill_empty_rows_cuda(p);
    return;
  }
  KernelLauncher launcher = find_kernel(backend, p.dtype, p.head_dim, p.causal);
  if (launcher == nullptr) {  // validation should have caught this; keep the error explicit
    throw Error(std::string("no ") + to_string(backend) + " kernel for this call");
  }
  launcher(p);
}
#endif

// Nothing to compute: no batch, no head or no query row.
bool is_noop(const AttentionParams& p) { return p.batch == 0 || p.heads_q == 0 || p.seqlen_q == 0; }

}  // namespace
}  // namespace detail

Backend attention_forward(const AttentionArgs& args) {
  detail::AttentionParams params = detail::validate_common(args);
  Backend backend = detail::choose_backend(params, args);
  if (detail::is_noop(params)) return backend;
  switch (backend) {
    case Backend::kCPU: detail::run_cpu_backend(params); break;
    case Backend::kReference: detail::run_reference_backend(params); break;
    case Backend::kSM80:
    case Backend::kSM90:
#ifdef FLASHCORE_HAS_CUDA
      detail::run_cuda(backend, params);
      break;
#else
      throw Error(std::string("backend ") + to_string(backend) + " is not compiled in");
#endif
    case Backend::kAuto: throw Error("internal error: backend auto was not resolved");
  }
  return backend;
}

}  // namespace flashcore
