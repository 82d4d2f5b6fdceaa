// Argument validation: every check runs before anything touches memory.
//
// validate_common checks what holds for every backend (shapes, dtypes, devices, strides, aliasing,
// lse, scale) and fills AttentionParams; validate_for_backend adds what one concrete backend needs
// (availability, dtype, compiled head dims). Both throw flashcore::Error naming the argument, its
// value and what was expected.
#pragma once

#include <string>

#include "common/params.h"
#include "flashcore/flashcore.h"

namespace flashcore::detail {

// Alignment of base pointers and row/head/batch strides the CUDA kernels rely on (16-byte
// vector loads, cp.async and TMA all need it).
inline constexpr int64_t kCudaAlignmentBytes = 16;
// Largest head_dim any CUDA kernel could hold in registers/shared memory.
inline constexpr int kMaxCudaHeadDim = 256;

// Workspace of a CUDA call: the persistent schedules' two uint32 tile counters (claims, CTAs
// done claiming). 4-byte alignment is all the counters' atomics need.
inline constexpr size_t kTileCounterWorkspaceBytes = kTileCounterCount * sizeof(uint32_t);
inline constexpr size_t kWorkspaceAlignmentBytes = alignof(uint32_t);

bool is_cuda_backend(Backend backend);

// Whether a call needs the causal kernels: bottom-right causal with one query row sees every key
// (key j <= 0 + seqlen_k - 1), so decode steps run the unmasked kernels, which take their tiles in
// a fixed stride instead of claiming them through counters zeroed before each call.
inline bool needs_causal_mask(bool causal, int64_t seqlen_q) { return causal && seqlen_q != 1; }

// Workspace bytes of the sm90 split-KV partials for this call (0 when it cannot split); the
// tile counters share the workspace's first bytes (attention_workspace_bytes).
size_t split_kv_workspace_bytes(const AttentionArgs& args);

AttentionParams validate_common(const AttentionArgs& args);

// Throws unless `backend` (not kAuto) can run this call.
void validate_for_backend(const AttentionParams& params, Backend backend);

// Why `backend` cannot run on device `device_index`, or "" when it can.
std::string backend_unavailable_reason(Backend backend, int device_index);

// "cpu" or "cuda:1".
std::string device_name(const Device& device);

}  // namespace flashcore::detail
