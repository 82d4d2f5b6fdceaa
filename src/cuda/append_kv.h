// The kv-cache append of a serving call (flashcore.h, "kv cache"): k_new/v_new written into the
// cache at position cache_seqlens[b] of each sequence before the attention kernel reads it.
// Host-compilable (no CUDA types): src/api/attention.cpp calls it for CUDA tensors.
#pragma once

#include "common/params.h"
#include "flashcore/flashcore.h"

namespace flashcore::detail {

// Copies new token r of sequence b (r < params.appended_k_of(b)) of k_new and v_new to cache
// slot params.seqused_k[b] + r of params.k / params.v, through the params' addressing (paged or
// contiguous cache; k_new/v_new dense [batch, seqlen_new, heads_kv, head_dim] or, with
// params.appends_packed, packed like q [total_q, heads_kv, head_dim]). Asynchronous on
// params.stream, no host sync. A row whose slot falls outside the cache's capacity
// (params.seqlen_k), or whose source row falls outside k_new, is dropped: wrong index values
// give wrong answers, never a write outside the cache. Throws Error for tensors the 16-byte
// copies cannot serve (a misaligned pointer or stride, a dtype that is not 16-bit).
void append_kv_cuda(const AttentionParams& params, const TensorView& k_new,
                    const TensorView& v_new);

}  // namespace flashcore::detail
