// The parameters of one attention forward call, as every backend sees them.
//
// Plain data with no framework or CUDA types, built once by src/api after validation. Kernels
// never compute a sequence's length or offset from `batch * seqlen` arithmetic: they ask the
// accessors below, so variable-length batches (cu_seqlens) and paged KV caches can later change
// the accessors without touching the kernels.
#pragma once

#include <cstdint>

#include "flashcore/flashcore.h"

#if defined(__CUDACC__)
#define FC_HOST_DEVICE __host__ __device__ __forceinline__
#else
#define FC_HOST_DEVICE inline
#endif

namespace flashcore::detail {

// log2(e) in double: the kernels work in base 2 (exp(x * s) = exp2(x * s * log2(e))).
inline constexpr double kLog2e = 1.4426950408889634;

// Tile counters of a persistent sm90 launch that claims tiles: claims, CTAs done claiming. The
// workspace size (attention_workspace_bytes) and the kernel's counter pool both derive from it.
inline constexpr int kTileCounterCount = 2;

struct AttentionParams {
  const void* q = nullptr;
  const void* k = nullptr;
  const void* v = nullptr;
  void* out = nullptr;
  float* lse = nullptr;  // nullptr when the caller asked for no lse

  DType dtype = DType::kFloat16;
  int batch = 0;
  int seqlen_q = 0;
  int seqlen_k = 0;
  int heads_q = 0;
  int heads_kv = 0;
  int head_dim = 0;

  // Strides in elements; 64-bit because a packed qkv tensor easily passes 2^31 elements.
  // The head_dim stride is always 1 (validated).
  int64_t q_batch_stride = 0, q_row_stride = 0, q_head_stride = 0;
  int64_t k_batch_stride = 0, k_row_stride = 0, k_head_stride = 0;
  int64_t v_batch_stride = 0, v_row_stride = 0, v_head_stride = 0;
  int64_t o_batch_stride = 0, o_row_stride = 0, o_head_stride = 0;
  int64_t lse_batch_stride = 0, lse_head_stride = 0;  // lse row stride is 1

  float softmax_scale = 1.0f;
  float softmax_scale_log2 = float(kLog2e);  // softmax_scale * log2(e): exp(x*s) = exp2(x*s2)
  bool causal = false;

  int device_index = 0;
  CUstream_st* stream = nullptr;
  int num_sms = 0;  // multiprocessors of the device (CUDA backends), for persistent schedulers
  // Two uint32 counters (claims, CTAs done) for the persistent schedules that claim tiles: the
  // caller's workspace (AttentionArgs::workspace; the sm90 launcher zeroes it on `stream` just
  // before a launch that uses it), or nullptr (the launcher then uses its static pool).
  uint32_t* tile_counters = nullptr;

  // Sets the scale and its base-2 form together (rounded once, from the double product), so
  // every caller derives the pair the same way.
  void set_softmax_scale(float scale) {
    softmax_scale = scale;
    softmax_scale_log2 = static_cast<float>(double(scale) * kLog2e);
  }

  // --- accessors: the only way kernels learn lengths, groupings and offsets ---
  FC_HOST_DEVICE int seqlen_q_of(int /*batch_index*/) const { return seqlen_q; }
  FC_HOST_DEVICE int seqlen_k_of(int /*batch_index*/) const { return seqlen_k; }
  // Query heads sharing one kv head.
  FC_HOST_DEVICE int group_size() const { return heads_q / heads_kv; }
  FC_HOST_DEVICE int kv_head_of(int head_q) const { return head_q / group_size(); }
  // Bottom-right causal alignment: query row i sees key column j iff j <= i + causal_offset.
  FC_HOST_DEVICE int causal_offset(int b) const { return seqlen_k_of(b) - seqlen_q_of(b); }

  FC_HOST_DEVICE int64_t q_offset(int b, int row, int h) const {
    return b * q_batch_stride + row * q_row_stride + h * q_head_stride;
  }
  FC_HOST_DEVICE int64_t k_offset(int b, int row, int h) const {
    return b * k_batch_stride + row * k_row_stride + h * k_head_stride;
  }
  FC_HOST_DEVICE int64_t v_offset(int b, int row, int h) const {
    return b * v_batch_stride + row * v_row_stride + h * v_head_stride;
  }
  FC_HOST_DEVICE int64_t o_offset(int b, int row, int h) const {
    return b * o_batch_stride + row * o_row_stride + h * o_head_stride;
  }
  FC_HOST_DEVICE int64_t lse_offset(int b, int h, int row) const {
    return b * lse_batch_stride + h * lse_head_stride + row;
  }
};

}  // namespace flashcore::detail
