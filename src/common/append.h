// The in-place cache append of a kv-cache call (flashcore.h "Serving layouts"): k_new/v_new row r
// of sequence b is written to cache position cache_seqlens[b] + r, through the same addressing
// the attention reads (AttentionParams::k_offset / v_offset: contiguous or paged), before any
// attention runs. The host append (src/cpu/append_kv.cpp) takes its rows, sources and
// destinations from the accessors below, so it cannot write outside the cache even when
// cache_seqlens or the page table hold wrong values. (A CUDA cache is appended by the kernel of
// src/cuda/append_kv.cu, which run_cuda calls.)
#pragma once

#include <cstdint>

#include "common/params.h"

namespace flashcore::detail {

struct AppendParams {
  const void* k_new = nullptr;  // nullptr: the call appends nothing
  const void* v_new = nullptr;
  // Strides in elements of k_new/v_new, [batch, seqlen_new, heads_kv, head_dim] or, when the
  // call's q is packed (params.appends_packed), [total_q, heads_kv, head_dim] with batch stride 0.
  int64_t k_batch_stride = 0, k_row_stride = 0, k_head_stride = 0;
  int64_t v_batch_stride = 0, v_row_stride = 0, v_head_stride = 0;

  FC_HOST_DEVICE bool active() const { return k_new != nullptr; }

  // First cache position sequence b's new tokens go to: cache_seqlens[b], clamped to the cache.
  FC_HOST_DEVICE static int first_slot(const AttentionParams& p, int b) {
    return AttentionParams::clamp_int(p.seqused_k[b], 0, p.seqlen_k);
  }
  // New tokens of sequence b that are written: all of them when they fit (validation and
  // check_indices make sure they do), else the ones that fit before the cache's capacity.
  FC_HOST_DEVICE static int rows_of(const AttentionParams& p, int b) {
    return p.seqlen_k_of(b) - first_slot(p, b);
  }

  // Element offsets of new token `row` (< rows_of(p, b)) of sequence b, head h, in k_new/v_new.
  // k_new/v_new are laid out like q (packed exactly when q is), so q's row addressing holds.
  FC_HOST_DEVICE int64_t k_new_offset(const AttentionParams& p, int b, int row, int h) const {
    return p.q_row_base(b, row, k_batch_stride, k_row_stride) + h * k_head_stride;
  }
  FC_HOST_DEVICE int64_t v_new_offset(const AttentionParams& p, int b, int row, int h) const {
    return p.q_row_base(b, row, v_batch_stride, v_row_stride) + h * v_head_stride;
  }
};

// Writes params' k_new/v_new rows into the host cache (k/v), for the cpu and reference backends.
void append_kv_host(const AttentionParams& params, const AppendParams& append);

}  // namespace flashcore::detail
