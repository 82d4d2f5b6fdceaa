// Planning of the Hopper backend's short-query calls, on the host and the device alike: which
// calls pack a KV group's query heads into one tile, how their keys split over CTAs, and the
// workspace the split partials need (attention_workspace_bytes asks workspace.cpp, which asks
// this file, so the workspace a caller sizes is the one the launch uses).
#pragma once

#include <cstdint>

#include "cuda/sm90/tile_table.h"

namespace flashcore::detail {

// Query rows of one consumer warpgroup: the wgmma M. BLOCK_M = consumers x this.
constexpr int kSm90RowsPerConsumer = 64;

// GQA tiles with the query heads of a KV group packed into their rows (Sm90TileConfig::
// kPacksGroups): row r of a tile is query position r / G of the group's head r % G, so one tile
// reads the group's K/V once for all G heads. Packed when G is a power of two (the row split is
// a shift) of at most 64 (a 64-row slab holds whole positions) and seqlen_q is at most half a
// 128-row tile: longer, unpacked tiles are mostly full and the G tiles of a group share its K/V
// through the L2. G = 1 (MHA) takes the packed kernels too, for their split-KV.
constexpr int kSm90MaxPackedGroup = 64;
constexpr int kSm90MaxPackedSeqlenQ = 64;

constexpr bool sm90_packs_query_groups(int heads_q, int heads_kv, int seqlen_q) {
  if (heads_kv <= 0 || heads_q % heads_kv != 0) return false;
  const int group = heads_q / heads_kv;
  const bool power_of_two = (group & (group - 1)) == 0;
  return group >= 1 && power_of_two && group <= kSm90MaxPackedGroup &&
         seqlen_q <= kSm90MaxPackedSeqlenQ;
}

// The largest BLOCK_M of a packed tile (it bounds the split-KV partials), or -1 when a packed
// row does not serve every packed length.
constexpr int sm90_max_packed_block_m() {
  int block_m = 0;
  for (int head_dim : {64, 128, 256}) {
    for (bool causal : {false, true}) {
      const Sm90TuningRow row = sm90_packed_row(head_dim, causal);
      if (row.max_seqlen_q < kSm90MaxPackedSeqlenQ) return -1;
      const int rows = row.consumers * kSm90RowsPerConsumer;
      block_m = rows > block_m ? rows : block_m;
    }
  }
  return block_m;
}
static_assert(sm90_max_packed_block_m() > 0,
              "packed calls run a row that serves their lengths unpacked");

// Split-KV for packed calls with few tiles (decode at batch 1 has one tile per KV head): when
// the tiles fill at most half the SMs, each tile's KV blocks are cut into contiguous splits, one
// CTA each; every split writes its O (normalized by its own row sum, fp32) and lse to the
// caller's workspace, and a combine kernel weights the splits by their lse (split_combine.cuh).
// A split keeps at least kSm90MinKvBlocksPerSplit KV blocks (docs/kernels.md: 1 measured best).
#ifdef FLASHCORE_SM90_MIN_KV_BLOCKS_PER_SPLIT  // experiments: set it for every TU (C++ and CUDA)
constexpr int kSm90MinKvBlocksPerSplit = FLASHCORE_SM90_MIN_KV_BLOCKS_PER_SPLIT;
#else
constexpr int kSm90MinKvBlocksPerSplit = 1;
#endif
// The combine reduces the splits' lse across one warp, two per lane (split_combine.cuh).
constexpr int kSm90MaxKvSplits = 64;

struct Sm90KvSplitPlan {
  int splits = 1;            // 1: no split
  int blocks_per_split = 0;  // KV blocks (BLOCK_N keys) per split
};

// The plan of a call, from its shape and the device's SM count.
constexpr Sm90KvSplitPlan sm90_kv_split_plan(int batch, int heads_q, int heads_kv, int seqlen_q,
                                             int seqlen_k, int head_dim, bool causal,
                                             int num_sms) {
  const Sm90KvSplitPlan none;
  if (!sm90_packs_query_groups(heads_q, heads_kv, seqlen_q) || batch <= 0 || seqlen_q <= 0 ||
      seqlen_k <= 0 || num_sms <= 0) {
    return none;
  }
  const Sm90TuningRow row = sm90_packed_row(sm90_kernel_head_dim(head_dim), causal);
  if (row.block_n <= 0) return none;  // no kernel for this head_dim
  const int64_t rows = int64_t(seqlen_q) * (heads_q / heads_kv);
  const int64_t block_m = int64_t(kSm90RowsPerConsumer) * row.consumers;
  const int64_t tiles = (rows + block_m - 1) / block_m * heads_kv * batch;
  if (2 * tiles > num_sms) return none;
  const int kv_blocks = (seqlen_k + row.block_n - 1) / row.block_n;
  int64_t splits = num_sms / tiles;
  const int64_t by_work = (kv_blocks + kSm90MinKvBlocksPerSplit - 1) / kSm90MinKvBlocksPerSplit;
  splits = splits < by_work ? splits : by_work;
  splits = splits < kSm90MaxKvSplits ? splits : kSm90MaxKvSplits;
  if (splits <= 1) return none;
  Sm90KvSplitPlan plan;
  plan.blocks_per_split = static_cast<int>((kv_blocks + splits - 1) / splits);
  plan.splits = (kv_blocks + plan.blocks_per_split - 1) / plan.blocks_per_split;  // none empty
  return plan;
}

// Workspace of a split call: the tile counters first, then per split O (head_dim floats) and lse
// of every (batch, head, query row), starting on a 256-byte boundary so that the combine's loads
// of a row start on whole L2 sectors whatever the counters grow to.
constexpr int64_t kSm90SplitWorkspaceOffset = 256;
constexpr int64_t sm90_kv_split_workspace_bytes(const Sm90KvSplitPlan& plan, int batch,
                                                int heads_q, int seqlen_q, int head_dim) {
  if (plan.splits <= 1) return 0;
  return kSm90SplitWorkspaceOffset + int64_t(plan.splits) * batch * heads_q * seqlen_q *
                                         (head_dim + 1) * int64_t(sizeof(float));
}

// The bound of sm90_kv_split_workspace_bytes over every seqlen_k (the Python helpers size a
// workspace from q alone): a split launch has at most one CTA per SM, each with at most
// sm90_max_packed_block_m() rows, and at most kSm90MaxKvSplits splits of each row.
constexpr int64_t sm90_kv_split_workspace_bound(int64_t batch, int64_t heads_q, int64_t seqlen_q,
                                                int64_t head_dim, int num_sms) {
  if (seqlen_q > kSm90MaxPackedSeqlenQ) return 0;
  const int64_t rows = batch * heads_q * seqlen_q;
  const int64_t by_sms = int64_t(num_sms) * sm90_max_packed_block_m();
  const int64_t by_splits = kSm90MaxKvSplits * rows;
  const int64_t split_rows = by_sms < by_splits ? by_sms : by_splits;
  return kSm90SplitWorkspaceOffset + split_rows * (head_dim + 1) * int64_t(sizeof(float));
}

}  // namespace flashcore::detail
