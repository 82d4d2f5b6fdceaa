// Bookkeeping shared by the producer and the consumers of the Hopper kernel: a tile's rows and
// KV blocks, the split-KV partials, and the position in the K/V stage ring. Both roles derive
// their loop bounds from the same functions here and from MaskPolicy::kv_tiles, so they can never
// disagree on a trip count. Which tile a CTA computes next is the scheduler's (scheduler.cuh).
#pragma once

#include <cstdint>

#include "common/params.h"
#include "cuda/common/mask.cuh"
#include "cuda/ptx/mbarrier.cuh"
#include "cuda/ptx/tma.cuh"
#include "cuda/sm90/sequence_layout.h"
#include "cuda/sm90/tile_config.h"

namespace flashcore::detail {

// A batch entry's sequence: its query and key lengths, and its first row in a packed q and in
// packed K/V (0 otherwise). The serving layouts read them from the call's index arrays, a round
// trip to the L2 each; the tile order resolves them once a sequence (sm90_resolve_sequence) and
// the tile slot hands them to the consumers (all but k_start, which only the producer reads), so
// they cost no thread anything at a tile's start or a block's load (docs/kernels.md, runs
// 203-204).
struct Sm90Sequence {
  int seqlen_q;
  int seqlen_k;
  int q_start;
  int k_start;
};

// One output tile: what a scheduler hands out and the consumers compute.
struct Sm90Tile {
  int m_block;    // which BLOCK_M rows of the query sequence (< 0: no further tile)
  int head;       // query head (packed tiles: KV head)
  int batch;
  int row_begin;  // its first query row (sm90_block_row_begin): below 0 for a causal partial block
  int kv_split;   // packed tiles: which split of the KV blocks (Sm90KvSplit); else 0
  Sm90Sequence sequence;  // its batch entry's
};
static_assert(sizeof(Sm90Tile) <= kSm90TileSlotBytes, "Sm90Tile must fit the smem tile slot");

// A consumer's O staged for the producer to store (Config::kProducerStoresO): the O map's
// coordinates of its slab's first row, and whether there is anything to store (a slab with rows
// of the sequence, not stored row by row). Written by the consumer's thread 0 before its arrival
// on o_free, read by the producer after its wait.
struct Sm90OStoreSlot {
  TmaRowCoord at;
  int stores;  // 0: nothing to store
};
static_assert(sizeof(Sm90OStoreSlot) == kSm90OStoreSlotBytes, "one store slot per consumer");

// The TMA store of one consumer's O staged at `staged` (its column blocks, 64 rows each) to the
// O map's rows from `at`, committed as one bulk group: the consumer's store (epilogue.cuh) and
// the producer's (producer.cuh, Config::kProducerStoresO).
template <class Config>
__device__ __forceinline__ void sm90_store_o_slab(const CUtensorMap* map_o, const uint8_t* staged,
                                                  const AttentionParams& params,
                                                  const TmaRowCoord& at) {
#pragma unroll
  for (int block = 0; block < Config::kOutColumnBlocks; ++block) {
    const uint8_t* src = staged + block * Config::kRowsPerConsumer * kSwizzleBytes;
    if constexpr (Config::kTransposesV) {  // FP8 d64 runs d128: no box wholly past head_dim
      if (block * Config::kOutBoxCols >= params.head_dim) break;
    }
    if constexpr (Config::kPacksGroups) {  // 5-D map, as the Q loads (producer.cuh)
      tma_store_5d(map_o, src, block * Config::kOutBoxCols, 0, at.row, at.head, at.batch);
    } else {
      tma_store_4d(map_o, src, block * Config::kOutBoxCols, at.row, at.head, at.batch);
    }
  }
  tma_store_commit_group();
}

// Whether the producer stores the O staged in the V ring (Config::kProducerStoresO): in the dense
// layout's kernels, the ones timed. The serving layouts' producers spilled with it (16-bit d256:
// 12 -> 340 bytes) and keep the consumer's store.
template <class Config, class Layout>
inline constexpr bool kSm90ProducerStoresO =
    Config::kProducerStoresO && kSm90IsDenseLayout<Layout>;

template <class Layout>
__device__ __forceinline__ Sm90Sequence sm90_resolve_sequence(const AttentionParams& params,
                                                              int batch) {
  return {Layout::seqlen_q(params, batch), Layout::seqlen_k(params, batch),
          Layout::q_start(params, batch), Layout::k_start(params, batch)};
}

// The tile's sequence lengths: the call's where every sequence has them (Layout::kUniformLengths:
// kernel parameters, which the kernel keeps in uniform registers), else the tile's.
template <class Layout>
__device__ __forceinline__ int sm90_tile_seqlen_q(const AttentionParams& params,
                                                  const Sm90Tile& tile) {
  return Layout::kUniformLengths ? params.seqlen_q : tile.sequence.seqlen_q;
}
template <class Layout>
__device__ __forceinline__ int sm90_tile_seqlen_k(const AttentionParams& params,
                                                  const Sm90Tile& tile) {
  return Layout::kUniformLengths ? params.seqlen_k : tile.sequence.seqlen_k;
}

// The mask of the tile's sequence (bottom-right causal per sequence).
template <bool kCausal, class Layout>
__device__ __forceinline__ MaskPolicy<kCausal> sm90_tile_mask(const AttentionParams& params,
                                                              const Sm90Tile& tile) {
  return MaskPolicy<kCausal>(sm90_tile_seqlen_q<Layout>(params, tile),
                             sm90_tile_seqlen_k<Layout>(params, tile));
}

// Split-KV of a packed launch (sm90_kv_split_plan): tile t's KV blocks in `splits` contiguous
// ranges, each a tile of its own; a split's epilogue writes its partial O and lse here, in the
// caller's workspace, for the combine kernel (split_combine.cuh). splits = 1: no split, and
// unpacked kernels never read it.
struct Sm90KvSplit {
  float* o_partial = nullptr;    // [splits][batch][heads_q][seqlen_q][head_dim]
  float* lse_partial = nullptr;  // [splits][batch][heads_q][seqlen_q]
  int splits = 1;
  int blocks_per_split = 0;
  // Packed launches: whether the kernel lets the one after it (the combine) launch at its start
  // (grid_dependency_launch_dependents), or only as its CTAs end. Early, the combine's CTAs wait
  // on the SMs this grid leaves idle; where it leaves only a few, they crowd onto those, and
  // launched late the combine is faster (launch.cuh).
  bool early_dependents = true;

  // The KV blocks of `full` that split `split` visits (none past the tile's own range).
  FC_HOST_DEVICE KvTileRange range(KvTileRange full, int split) const {
    if (splits <= 1) return full;
    const int lo = split * blocks_per_split, hi = lo + blocks_per_split;
    full.begin = full.begin > lo ? full.begin : lo;
    full.end = full.end < hi ? full.end : hi;
    return full;
  }
  // Index of a (split, batch, query head, position) row in the partial buffers.
  FC_HOST_DEVICE int64_t row(const AttentionParams& params, int split, int batch, int head_q,
                             int position) const {
    return ((int64_t(split) * params.batch + batch) * params.heads_q + head_q) * params.seqlen_q +
           position;
  }
};

// First query row of consumer `consumer`'s 64-row slab in `tile`: what its accumulators hold
// (Sm90ThreadRows) and whether it has any row at all (sm90_slab_has_rows).
template <class Config>
__device__ __forceinline__ int sm90_slab_row_begin(const Sm90Tile& tile, int consumer) {
  return tile.row_begin + consumer * Config::kRowsPerConsumer;
}

// Tile rows and query positions. A tile's rows are query positions of one head, or with
// Config::kPacksGroups the positions of a KV group's G query heads interleaved (row r: position
// r >> shift of the group's head r & (G - 1), G = 1 << shift). Unpacked the shift is a constant 0
// and every function below is what it was before packing existed.
// The consumers recompute the shift per tile (a division and a short loop, beside a tile of
// thousands of cycles) instead of keeping the tile order's copy live across their main loop:
// kept live, the packed d256 causal kernel spilled (8-byte stack frame).
template <class Config>
FC_HOST_DEVICE int sm90_group_shift(const AttentionParams& params) {
  if (!Config::kPacksGroups) return 0;
  int shift = 0;
  while ((1 << shift) < params.group_size()) ++shift;  // G is a power of two, at most 64
  return shift;
}

// The query head and position of tile row `row` (tile_head: the tile's head, packed the KV head).
FC_HOST_DEVICE int sm90_row_head(int tile_head, int row, int group_shift) {
  return (tile_head << group_shift) + (row & ((1 << group_shift) - 1));
}
FC_HOST_DEVICE int sm90_row_position(int row, int group_shift) { return row >> group_shift; }

// This thread's two accumulator rows (row0 and row0 + 8 of the slab from slab_row_begin) that
// lie in the sequence, each with its query head and position: fn(r, head_q, position).
template <class Fn>
__device__ __forceinline__ void sm90_for_each_thread_row(const Sm90Tile& tile, int slab_row_begin,
                                                         int row0, int group_shift,
                                                         int query_rows, Fn&& fn) {
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int row = slab_row_begin + row0 + 8 * r;
    if (row < 0 || row >= query_rows) continue;
    fn(r, sm90_row_head(tile.head, row, group_shift), sm90_row_position(row, group_shift));
  }
}

// Rows of the tile's query block sequence (a head's, or packed, a KV group's).
template <class Layout>
__device__ __forceinline__ int sm90_tile_query_rows(const AttentionParams& params,
                                                    const Sm90Tile& tile, int group_shift) {
  return sm90_tile_seqlen_q<Layout>(params, tile) << group_shift;
}

// The heads that tiles run over: query heads, or packed, KV heads.
template <class Config>
FC_HOST_DEVICE int sm90_tile_heads(const AttentionParams& params) {
  return Config::kPacksGroups ? params.heads_kv : params.heads_q;
}

// BLOCK_M-row blocks of the query sequence: the one count the launcher, the tile order and the
// producer's loop bound all derive from.
template <class Config, class Layout>
FC_HOST_DEVICE int sm90_m_blocks(const AttentionParams& params) {
  return ceil_div(Layout::max_seqlen_q(params) << sm90_group_shift<Config>(params),
                  Config::kBlockM);
}

// BLOCK_M-row blocks of one sequence of `rows` tile rows.
template <class Config>
FC_HOST_DEVICE int sm90_m_blocks_of_rows(int rows) {
  return ceil_div(rows, Config::kBlockM);
}

// Blocks per tile head over the whole batch that the tile order numbers: batch x the longest
// sequence's, or with packed q (Layout::kMayPackQ and cu_seqlens_q) a bound that needs no
// sequence length: sum over b of ceil(rows_b / BLOCK_M) <= total rows / BLOCK_M + batch. Indices
// past a packed batch's own blocks decode to no tile (Sm90TileOrder).
template <class Config, class Layout>
FC_HOST_DEVICE int64_t sm90_batch_m_blocks(const AttentionParams& params) {
  const int64_t dense = int64_t(sm90_m_blocks<Config, Layout>(params)) * params.batch;
  if (!Layout::kMayPackQ || params.cu_seqlens_q == nullptr) return dense;
  const int64_t packed =
      (int64_t(params.total_q) << sm90_group_shift<Config>(params)) / Config::kBlockM +
      params.batch;
  return packed < dense ? packed : dense;
}

// Number of output tiles, each split of a split-KV launch counted as a tile: CTAs of a
// one-tile-per-CTA launch, claims of a persistent one.
template <class Config, class Layout>
FC_HOST_DEVICE int64_t sm90_num_tiles(const AttentionParams& params, int kv_splits = 1) {
  const int64_t tiles = sm90_batch_m_blocks<Config, Layout>(params) * sm90_tile_heads<Config>(params);
  return Config::kPacksGroups ? tiles * kv_splits : tiles;
}

// The KV tiles that `tile`'s rows visit (packed: the positions its rows hold, and of those the
// tile's split).
template <class Config, bool kCausal>
__device__ __forceinline__ KvTileRange sm90_kv_tiles(const MaskPolicy<kCausal>& mask,
                                                     const Sm90Tile& tile, int group_shift,
                                                     const Sm90KvSplit& kv_split) {
  const KvTileRange full = mask.kv_tiles(sm90_row_position(tile.row_begin, group_shift),
                                         Config::kBlockM >> group_shift, Config::kBlockN);
  if constexpr (Config::kPacksGroups) {
    return kv_split.range(full, tile.kv_split);
  } else {
    return full;
  }
}

// KV blocks at the end of `kv_tiles` that no row of consumer `consumer` may see. Under a causal
// mask a tile's last blocks can lie wholly past the diagonal of its upper slabs' rows: a 192-row
// d64 tile spans 1.5 blocks of 128 keys, so its first slab's last row is a block short of the
// tile's (at 1k, 7 of a head's 79 consumer steps). The consumer visits them first (blocks go last
// to first) and passes their turns without GEMMs (sm90_pass_dead_blocks). The count is all of
// `kv_tiles` when the consumer's rows see no key at all (seqlen_q > seqlen_k leaves the first
// rows none); the kernel then passes the whole tile as for a consumer without rows.
template <class Config, bool kCausal>
__device__ __forceinline__ int sm90_dead_blocks(const MaskPolicy<kCausal>& mask,
                                                const Sm90Tile& tile, int consumer,
                                                int group_shift, const KvTileRange& kv_tiles) {
  if constexpr (!kCausal) return 0;
  const int slab_row_begin = sm90_slab_row_begin<Config>(tile, consumer);
  return mask.trailing_hidden_tiles(kv_tiles, sm90_row_position(slab_row_begin, group_shift),
                                    Config::kRowsPerConsumer >> group_shift, Config::kBlockN);
}

// Position in the ring of K/V stages: the stage to use and the parity of the barrier phase that
// marks it full (consumers wait for `phase`) or empty (the producer waits for `phase ^ 1`, which
// passes at once on the first trip round the ring).
template <int kStages>
struct RingPosition {
  int stage = 0;
  uint32_t phase = 0;
  __device__ __forceinline__ void advance() {
    if (++stage == kStages) {
      stage = 0;
      phase ^= 1;
    }
  }
};

// What carries from one tile to the next when a CTA computes several (persistent scheduler): the
// ring position, and the parity of the Q barriers' current phase (q_full / q_empty complete once
// per tile). A non-persistent CTA uses a fresh one for its single tile.
template <int kStages>
struct Sm90TileLoopState {
  RingPosition<kStages> ring;
  uint32_t q_phase = 0;
};

// How a consumer hands its Q slab back to the producer for the next tile (persistent schedulers),
// and where it stages O for the store.
struct Sm90QRelease {
  uint64_t* q_empty = nullptr;  // nullptr: one tile per CTA, nothing to hand back
  // Persistent CTAs: Config::kPersistentOStaging. Every consumer thread arrives on q_empty as soon
  // as its last S = Q K^T completed, unless O is staged in the Q slab: then once the O store has
  // read it (epilogue.cuh).
  Sm90OStaging staging = Sm90OStaging::kQSlab;
  // kVRing: this consumer's barrier, which every one of its threads arrives on, the last once the
  // O store has read the V stage; with Config::kProducerStoresO its thread 0 alone, once O is
  // staged and its store slot written.
  uint64_t* o_free = nullptr;
  Sm90OStoreSlot* o_store_slot = nullptr;  // Config::kProducerStoresO: this consumer's
  // Q goes back after the last S = Q K^T: O is staged in its own buffer or in a V stage, or
  // stored from registers.
  __device__ __forceinline__ bool hands_back_early() const {
    return q_empty != nullptr && staging != Sm90OStaging::kQSlab;
  }
  // Q goes back after the O store has read the slab it was staged in.
  __device__ __forceinline__ bool hands_back_after_store() const {
    return q_empty != nullptr && staging == Sm90OStaging::kQSlab;
  }
  __device__ __forceinline__ bool stages_o_in_v_ring() const { return o_free != nullptr; }
  // O staged in a buffer of its own, which the previous tile's store may still be reading.
  __device__ __forceinline__ bool stages_o_in_own_buffer() const {
    // (kRegisters answers true too: the epilogue stores from registers before it asks)
    return hands_back_early() && !stages_o_in_v_ring();
  }
  // The barrier to arrive on once the O store has read its staging buffer, or nullptr (own
  // buffer, or one tile per CTA).
  __device__ __forceinline__ uint64_t* staging_read_barrier() const {
    return stages_o_in_v_ring() ? o_free : hands_back_after_store() ? q_empty : nullptr;
  }
  __device__ __forceinline__ void after_last_qk() const {
    if (hands_back_early()) mbarrier_arrive(q_empty);
  }
};

// Where a consumer stages O with Config::kOStagingInVRing: consumer c in the V stage c places past
// `next` (the ring position after the tile), once every consumer has finished reading the V last
// loaded there. The producer loads the next tile's V_c into that stage (after o_free[c]), so each
// stage holds at most one O at a time (producer.cuh waits for the rest when a tile has fewer V
// loads than consumers).
template <int kStages>
struct Sm90VStaging {
  int stage;
  uint32_t read_parity;  // v_empty's phase that completes once every consumer has read that V
  __device__ __forceinline__ Sm90VStaging(RingPosition<kStages> next, int consumer) {
    for (int i = 0; i < consumer; ++i) next.advance();
    stage = next.stage;
    // The V read there was loaded one trip round the ring before `next` + consumer: its phase
    // is the other parity. Never loaded (the CTA's first trip): that wait passes at once.
    read_parity = next.phase ^ 1;
  }
};

}  // namespace flashcore::detail
