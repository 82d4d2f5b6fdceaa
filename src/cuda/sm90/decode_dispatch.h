// Which kernel runs a packed call (Sm90TileConfig::kPacksGroups): the decode kernel
// (decode_kernel.cuh, one consumer warpgroup a tile and split) or the general one (kernel.cuh).
// Host code of the launcher (launch.cuh), in a header of its own so that the host tests can
// check the choice without a GPU.
#pragma once

#include <cstdint>
#include <type_traits>

#include "common/params.h"
#include "cuda/sm90/sequence_layout.h"

namespace flashcore::detail {

// The smallest head_dim at which a KV-cache decode (serving layout, dense q) runs the decode
// kernel at any batch: at d64 the general persistent kernel read a contiguous cache slightly
// faster (docs/kernels.md, run 224).
inline constexpr int kSm90ServingDecodeAnyBatchMinHeadDim = 128;

// The layout a call runs in when the decode kernel takes it: that kernel gathers larger pages
// than the general one (kSm90DecodeMinTmaBoxRows).
template <class Layout>
using Sm90DecodeLayoutOf = std::conditional_t<std::is_same_v<Layout, Sm90ServingLayout>,
                                              Sm90ServingDecodeLayout, Layout>;

// Calls whose tiles hold at most one slab of rows (kRowsPerConsumer) run the decode kernel when
// their tiles and splits need no more CTAs than SMs (decode: batch-1 split, or up to batch 16 of
// GQA 4:1 unsplit), on the same tiles, splits and workspace. So do gathered caches (small pages)
// of any batch, in waves: their copies need the decode kernel's producer warps (the general
// kernel's producer is one warp of 24-40 registers). Those warps ran TMA-box caches faster than
// the general persistent kernel too, so the serving layouts' calls with a dense q take the
// decode kernel at any batch from kSm90ServingDecodeAnyBatchMinHeadDim up; in the dense layout,
// whose decode kernel issues its loads from a consumer thread, the general kernel is as fast or
// faster (docs/kernels.md, runs 223-224). A packed (varlen) q keeps the general kernel there:
// its tile's sequence is found by a walk over the sequences, which a CTA of one tile would start
// from the first.
template <class Layout, int kHeadDim, int kBlockN, int kRowsPerConsumer>
bool sm90_packed_call_runs_decode_kernel(const AttentionParams& params, int64_t num_tiles,
                                         int num_sms) {
  if (int64_t(params.seqlen_q) * params.group_size() > kRowsPerConsumer) return false;
  constexpr bool kAnyBatch = std::is_same_v<Layout, Sm90ServingLayout> &&
                             kHeadDim >= kSm90ServingDecodeAnyBatchMinHeadDim;
  return (kAnyBatch && params.cu_seqlens_q == nullptr) || num_tiles <= num_sms ||
         Sm90DecodeLayoutOf<Layout>::template kv_gathered<kBlockN>(params);
}

}  // namespace flashcore::detail
