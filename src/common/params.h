// The parameters of one attention forward call, as every backend sees them.
//
// Plain data with no framework or CUDA types, built once by src/api after validation. Kernels
// never compute a sequence's length or offset from `batch * seqlen` arithmetic: they ask the
// accessors below, so variable-length batches (cu_seqlens) and paged KV caches can later change
// the accessors without touching the kernels.
#pragma once

#include <cstddef>
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

  DType dtype = DType::kFloat16;  // of q, k and v (and k_new/v_new)
  // Of out: the input dtype, except for fp8 inputs (bf16 or fp16). Backends read it through
  // output_dtype(), which ignores it for non-fp8 inputs, so params built field by field (tests,
  // dev/ tools) that set only `dtype` keep writing out in that dtype.
  DType out_dtype = DType::kFloat16;
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
  size_t workspace_bytes = 0;  // of the caller's workspace behind tile_counters (0: none)

  // Sets the scale and its base-2 form together (rounded once, from the double product), so
  // every caller derives the pair the same way.
  void set_softmax_scale(float scale) {
    softmax_scale = scale;
    softmax_scale_log2 = static_cast<float>(double(scale) * kLog2e);
  }

  // --- serving layouts (flashcore.h). Unset pointers mean the dense layout. Every accessor
  // clamps what it reads from these arrays into the tensors' bounds, so wrong index values give
  // wrong answers, never an access outside the tensors. ---
  // Packed q/out: sequence b is rows [cu_seqlens_q[b], cu_seqlens_q[b+1]) of total_q rows;
  // seqlen_q is then the caller's max_seqlen_q (what grids are sized by). lse is
  // [heads_q, total_q] (lse_batch_stride 0).
  const int32_t* cu_seqlens_q = nullptr;
  int total_q = 0;
  // Packed k/v: likewise, over total_k rows; seqlen_k is max_seqlen_k.
  const int32_t* cu_seqlens_k = nullptr;
  int total_k = 0;
  // Keys per sequence (varlen seqused_k, or a cache's cache_seqlens), plus the tokens appended
  // by this call: seqlen_new each, or, with packed q, as many as the sequence's queries.
  const int32_t* seqused_k = nullptr;
  int seqlen_new = 0;
  bool appends_packed = false;
  // A kv cache's seqlen_k is its capacity per sequence: its seqlen dim, or the page table's
  // width times page_size.
  // Paged cache: k/v are [num_pages, page_size, heads_kv, head_dim] (k_batch_stride is the page
  // stride); token t of sequence b is in page page_table[b * page_table_stride + t / page_size].
  const int32_t* page_table = nullptr;
  int64_t page_table_stride = 0;
  int page_size = 0;
  int num_pages = 0;

  // --- FP8 dequantization factors (fp8 inputs only): float32 [batch, heads_kv], indexed by
  // (batch entry or sequence, kv head); nullptr means 1. Strides in elements. Read them only
  // through descale() / q_descale_of() / k_descale_of() / v_descale_of(). ---
  const float* q_descale = nullptr;
  const float* k_descale = nullptr;
  const float* v_descale = nullptr;
  int64_t q_descale_batch_stride = 0, q_descale_head_stride = 0;
  int64_t k_descale_batch_stride = 0, k_descale_head_stride = 0;
  int64_t v_descale_batch_stride = 0, v_descale_head_stride = 0;

  // --- accessors: the only way kernels learn lengths, groupings and offsets ---
  FC_HOST_DEVICE DType output_dtype() const {
    return dtype == DType::kFloat8E4M3 ? out_dtype : dtype;
  }
  // base[b][kv_head] through the strides, or 1 when the factor is absent.
  FC_HOST_DEVICE static float descale(const float* base, int64_t batch_stride,
                                      int64_t head_stride, int b, int kv_head) {
    return base == nullptr ? 1.0f : base[b * batch_stride + kv_head * head_stride];
  }
  // q's factor is per kv head too: query head h uses q_descale_of(b, kv_head_of(h)).
  FC_HOST_DEVICE float q_descale_of(int b, int kv_head) const {
    return descale(q_descale, q_descale_batch_stride, q_descale_head_stride, b, kv_head);
  }
  FC_HOST_DEVICE float k_descale_of(int b, int kv_head) const {
    return descale(k_descale, k_descale_batch_stride, k_descale_head_stride, b, kv_head);
  }
  FC_HOST_DEVICE float v_descale_of(int b, int kv_head) const {
    return descale(v_descale, v_descale_batch_stride, v_descale_head_stride, b, kv_head);
  }
  FC_HOST_DEVICE static int clamp_int(int value, int low, int high) {
    return value < low ? low : (value > high ? high : value);
  }
  // First packed row of sequence b, and its length, clamped into [0, total].
  FC_HOST_DEVICE static int packed_start(const int32_t* cu, int total, int b) {
    return clamp_int(cu[b], 0, total);
  }
  FC_HOST_DEVICE static int packed_length(const int32_t* cu, int total, int b) {
    const int start = packed_start(cu, total, b);
    return clamp_int(cu[b + 1], start, total) - start;
  }

  FC_HOST_DEVICE int seqlen_q_of(int b) const {
    if (cu_seqlens_q == nullptr) return seqlen_q;
    const int length = packed_length(cu_seqlens_q, total_q, b);
    return length < seqlen_q ? length : seqlen_q;
  }
  FC_HOST_DEVICE int appended_k_of(int b) const {
    return appends_packed ? seqlen_q_of(b) : seqlen_new;
  }
  FC_HOST_DEVICE int seqlen_k_of(int b) const {
    int limit = seqlen_k;
    if (cu_seqlens_k != nullptr) {
      const int length = packed_length(cu_seqlens_k, total_k, b);
      limit = length < limit ? length : limit;
    }
    if (seqused_k == nullptr) return limit;
    return clamp_int(clamp_int(seqused_k[b], 0, limit) + appended_k_of(b), 0, limit);
  }
  // Query heads sharing one kv head.
  FC_HOST_DEVICE int group_size() const { return heads_q / heads_kv; }
  FC_HOST_DEVICE int kv_head_of(int head_q) const { return head_q / group_size(); }
  // Bottom-right causal alignment: query row i sees key column j iff j <= i + causal_offset.
  FC_HOST_DEVICE int causal_offset(int b) const { return seqlen_k_of(b) - seqlen_q_of(b); }

  // Row `row` of sequence b in q/out: its packed row, or (b, row).
  FC_HOST_DEVICE int64_t q_row_base(int b, int row, int64_t batch_stride,
                                    int64_t row_stride) const {
    if (cu_seqlens_q == nullptr) return b * batch_stride + row * row_stride;
    return int64_t(packed_start(cu_seqlens_q, total_q, b) + row) * row_stride;
  }
  // Key `row` of sequence b in k/v (rows < seqlen_k_of(b)): packed, paged or batch-strided.
  FC_HOST_DEVICE int64_t kv_row_base(int b, int row, int64_t batch_stride,
                                     int64_t row_stride) const {
    if (page_table != nullptr) {
      const int page = clamp_int(page_table[b * page_table_stride + row / page_size], 0,
                                 num_pages - 1);
      return page * batch_stride + (row % page_size) * row_stride;
    }
    if (cu_seqlens_k != nullptr) {
      return int64_t(packed_start(cu_seqlens_k, total_k, b) + row) * row_stride;
    }
    return b * batch_stride + row * row_stride;
  }

  FC_HOST_DEVICE int64_t q_offset(int b, int row, int h) const {
    return q_row_base(b, row, q_batch_stride, q_row_stride) + h * q_head_stride;
  }
  FC_HOST_DEVICE int64_t k_offset(int b, int row, int h) const {
    return kv_row_base(b, row, k_batch_stride, k_row_stride) + h * k_head_stride;
  }
  FC_HOST_DEVICE int64_t v_offset(int b, int row, int h) const {
    return kv_row_base(b, row, v_batch_stride, v_row_stride) + h * v_head_stride;
  }
  FC_HOST_DEVICE int64_t o_offset(int b, int row, int h) const {
    return q_row_base(b, row, o_batch_stride, o_row_stride) + h * o_head_stride;
  }
  FC_HOST_DEVICE int64_t lse_offset(int b, int h, int row) const {
    if (cu_seqlens_q != nullptr) {
      return h * lse_head_stride + packed_start(cu_seqlens_q, total_q, b) + row;
    }
    return b * lse_batch_stride + h * lse_head_stride + row;
  }

  FC_HOST_DEVICE bool is_dense() const {
    return cu_seqlens_q == nullptr && cu_seqlens_k == nullptr && seqused_k == nullptr &&
           page_table == nullptr;
  }
};

}  // namespace flashcore::detail
