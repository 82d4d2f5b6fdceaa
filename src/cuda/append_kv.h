// The CUDA kv-cache append of a serving call (flashcore.h, "kv cache"): k_new/v_new written into
// the cache before the attention kernel reads it. Host-compilable (no CUDA types): src/api
// calls it for CUDA tensors; the host caches' append is src/cpu/append_kv.cpp.
#pragma once

#include "common/append.h"
#include "common/params.h"

namespace flashcore::detail {

// Copies new token r < AppendParams::rows_of(params, b) of sequence b, every kv head, from
// k_new/v_new to cache slot AppendParams::first_slot(params, b) + r of params.k / params.v
// (paged or contiguous, through params.k_offset / v_offset): the rows and slots the host append
// writes, so both stay inside the cache for any cache_seqlens or page-table values. 16-byte
// copies, asynchronous on params.stream (no host sync, legal under graph capture). Throws Error
// for tensors those copies cannot serve (a dtype that is neither 16-bit nor fp8, a pointer or
// stride that is not a multiple of 16 bytes).
void append_kv_cuda(const AttentionParams& params, const AppendParams& append);

}  // namespace flashcore::detail
