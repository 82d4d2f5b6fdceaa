// Tile schedulers of the Hopper kernel: which output tile a CTA computes first and next, and how
// the producer hands each tile to the consumers. The kernel's loops (kernel.cuh) are written once
// against these members; a new way of handing out work (clusters, a key range per rank) is a new
// type here:
//
//   Scheduler(params, counters)         device: built once per CTA
//   grid_size(tiles, sms)               host: CTAs to launch
//   kClaimsTiles                        host: the launcher zeroes the caller's tile counters
//   first_index() / next_index(i)       producer: launch-wide tile indices, until >= num_tiles
//   tile(params, i)                     producer: the decoded tile
//   publish(slot, tile)                 producer: hands the tile over, with the Q it loads
//   producer_done(smem, q_phase)        producer: after its last tile
//   consumer_tile(params, smem, q_phase, tile)
//                                       consumers: the next tile, false when there is none
#pragma once

#include <cstdint>

#include "common/params.h"
#include "cuda/ptx/grid_dependency.cuh"
#include "cuda/ptx/mbarrier.cuh"
#include "cuda/sm90/pipeline.cuh"
#include "cuda/sm90/smem_layout.cuh"
#include "cuda/sm90/tile_config.h"

namespace flashcore::detail {

// How many (head, batch) pairs one L2 section holds: their K and V together fit kL2ReuseBytes.
// Query heads of one KV group count once (they read the same K/V); packed tiles run over KV
// heads already.
template <class Config, class Layout>
FC_HOST_DEVICE int sm90_heads_per_section(const AttentionParams& params) {
  const int64_t kv_bytes =
      int64_t(Layout::max_seqlen_k(params)) * Config::kHeadDim * 2 * Config::kElementBytes;
  const int group =
      Config::kPacksGroups ? 1 : params.heads_kv > 0 ? params.heads_q / params.heads_kv : 1;
  const int64_t kv_heads = kv_bytes > 0 ? Config::kL2ReuseBytes / kv_bytes : Config::kL2ReuseBytes;
  const int64_t heads = (kv_heads > 0 ? kv_heads : 1) * (group > 0 ? group : 1);
  const int64_t total = int64_t(sm90_tile_heads<Config>(params)) * params.batch;
  return static_cast<int>(heads < total ? heads : total);
}

// The launch's tile order. The (head, batch) pairs are cut into L2 sections (consecutive query
// heads, so a GQA group stays together); sections run one after another, and inside a section the
// m-block is the slowest coordinate and runs backwards: the blocks with the most keys to visit
// under a causal mask start first, and the CTAs running at one time read the K/V of few heads, so
// those stay in the L2. Built once per CTA: the section size takes a 64-bit division.
//
// Non-causal unpacked launches put the m-block fastest instead: consecutive CTAs compute the
// blocks of one head. The hardware places consecutive CTAs on one group of SMs (a GPC by its
// size), and reads of the same sectors from one GPC at about the same time are merged before the
// L2 (the L2 request coalescer). Causal launches keep the m-block slowest (longest first): their
// CTAs visit a head's K/V from their own diagonal down, so the blocks of one head never read the
// same K/V at the same time anyway.
// With a partial block the m-block of a persistent CTA's tiles would repeat with the stride (132
// = 6 x 22 = 11 x 12), so the same CTAs would draw every short tile. The m-blocks of a head
// therefore rotate by the round (stride) their first tile is in: each CTA draws every m-block in
// turn.
template <class Config, class Layout, bool kCausal>
struct Sm90TileOrder {
  int group_shift;  // sm90_group_shift
  int m_blocks;
  int heads_times_batch;
  int per_section;  // (head, batch) pairs per L2 section
  static constexpr bool kMBlockFastest = !kCausal && !Config::kPacksGroups;

  __device__ __forceinline__ explicit Sm90TileOrder(const AttentionParams& params)
      : group_shift(sm90_group_shift<Config>(params)),
        m_blocks(sm90_m_blocks<Config, Layout>(params)),
        heads_times_batch(sm90_tile_heads<Config>(params) * params.batch),
        per_section(sm90_heads_per_section<Config, Layout>(params)) {}

  // Tile `index` of the launch. Packed launches with split-KV run every tile once per split:
  // the split is the slowest coordinate. An index past a packed batch's blocks gives m_block -1
  // (no tile: the CTA goes on to its next index).
  __device__ __forceinline__ Sm90Tile tile(const AttentionParams& params, int index) const {
    int kv_split = 0;
    if constexpr (Config::kPacksGroups) {
      int tiles_per_split = m_blocks * heads_times_batch;
      if constexpr (Layout::kMayPackQ) {
        tiles_per_split = static_cast<int>(sm90_batch_m_blocks<Config, Layout>(params)) *
                          sm90_tile_heads<Config>(params);
      }
      kv_split = index / tiles_per_split;
      index -= kv_split * tiles_per_split;
    }
    if constexpr (Layout::kMayPackQ) {
      if (params.cu_seqlens_q != nullptr) return packed_tile(params, index, kv_split);
    }
    const int section = index / (per_section * m_blocks);
    const int first_pair = section * per_section;
    const int pairs = min(per_section, heads_times_batch - first_pair);
    const int rest = index - first_pair * m_blocks;
    Sm90Tile tile;
    int pair;
    if constexpr (kMBlockFastest) {
      pair = first_pair + rest / m_blocks;
      const int in_head = rest % m_blocks;
      // The round (stride of gridDim.x) that the head's first tile falls in.
      const int round = (index - in_head) / static_cast<int>(gridDim.x);
      tile.m_block = m_blocks - 1 - (in_head + round) % m_blocks;
    } else {
      pair = first_pair + rest % pairs;
      tile.m_block = m_blocks - 1 - rest / pairs;
    }
    tile.head = pair % sm90_tile_heads<Config>(params);
    tile.batch = pair / sm90_tile_heads<Config>(params);
    tile.sequence = sm90_resolve_sequence<Layout>(params, tile.batch);
    tile.row_begin = sm90_block_row_begin<Config, kCausal>(
        tile.m_block, sm90_tile_query_rows<Layout>(params, tile, group_shift));
    tile.kv_split = kv_split;
    return tile;
  }

 private:
  // Packed q: the sequences one after another, each cut into L2 sections of heads as a dense
  // batch entry is, m-block slowest within a section (longest first under a causal mask). The
  // sequence of a tile is found by walking the sequences' block counts from the last one found,
  // whose resolved Sm90Sequence the cursor keeps: a CTA's indices only grow, so the walk is
  // short after its first tile, and tiles of the sequence before read nothing.
  mutable int cursor_batch_ = -1;  // -1: not placed yet
  mutable Sm90Sequence cursor_sequence_;
  mutable int cursor_first_tile_ = 0;  // the index of cursor_batch_'s first tile
  mutable int cursor_tiles_ = 0;       // its tiles

  __device__ __forceinline__ void place_cursor(const AttentionParams& params, int batch) const {
    cursor_batch_ = batch;
    cursor_sequence_ = sm90_resolve_sequence<Layout>(params, batch);
    cursor_tiles_ = sm90_m_blocks_of_rows<Config>(cursor_sequence_.seqlen_q << group_shift) *
                    sm90_tile_heads<Config>(params);
  }

  __device__ __forceinline__ Sm90Tile packed_tile(const AttentionParams& params, int index,
                                                  int kv_split) const {
    Sm90Tile tile;
    tile.m_block = -1;
    if (cursor_batch_ < 0 || index < cursor_first_tile_) {
      cursor_first_tile_ = 0;
      place_cursor(params, 0);
    }
    while (index >= cursor_first_tile_ + cursor_tiles_) {
      if (cursor_batch_ + 1 >= params.batch) return tile;
      cursor_first_tile_ += cursor_tiles_;
      place_cursor(params, cursor_batch_ + 1);
    }
    const int heads = sm90_tile_heads<Config>(params);
    const int blocks = cursor_tiles_ / heads;
    const int in_sequence = index - cursor_first_tile_;
    const int heads_per_section = per_section < heads ? per_section : heads;
    const int section = in_sequence / (heads_per_section * blocks);
    const int first_head = section * heads_per_section;
    const int pairs = min(heads_per_section, heads - first_head);
    const int rest = in_sequence - first_head * blocks;
    tile.head = first_head + rest % pairs;
    tile.m_block = blocks - 1 - rest / pairs;
    tile.batch = cursor_batch_;
    tile.sequence = cursor_sequence_;
    tile.row_begin = sm90_block_row_begin<Config, kCausal>(
        tile.m_block, sm90_tile_query_rows<Layout>(params, tile, group_shift));
    tile.kv_split = kv_split;
    return tile;
  }
};

// Tile counters of the dynamic scheduler: counter[0] counts claims, counter[1] CTAs done
// claiming; the last of those resets both, so the counters are ready for a later launch. They
// live in the caller's workspace (zeroed on the stream just before the launch by
// sm90_zero_tile_counters, see AttentionArgs::workspace), or else in one slot of a static pool:
// a __device__ array zeroed when the module loads (no allocation, no host sync, nothing that
// breaks graph capture; `static` gives every instance TU its own pool). The launcher hands out
// pool slots round-robin and passes the slot index. Limit: two launches in flight at once on the
// same slot share counters and skip or repeat tiles; a captured graph keeps its slot for every
// replay, so callers with overlapping launches pass a workspace.
inline constexpr int kSm90TileCounterPoolSlots = 256;  // pool launches in flight before a reuse
static __device__ uint32_t sm90_tile_counter_pool[kSm90TileCounterPoolSlots * kTileCounterCount];

struct Sm90TileCounters {
  uint32_t* workspace = nullptr;  // the caller's zeroed counters, or nullptr: use the pool slot
  uint32_t pool_slot = 0;         // < kSm90TileCounterPoolSlots

  __device__ __forceinline__ uint32_t* get() const {
    return workspace != nullptr ? workspace
                                : sm90_tile_counter_pool + kTileCounterCount * pool_slot;
  }
};

// Zeroes a caller's tile counters (any content: AttentionArgs::workspace) for the claiming launch
// after it on the stream, which is its programmatic dependent (launch_dependent.h): that launch's
// CTAs take their SMs and load their first tiles while this one runs, and its producers wait for
// it (grid_dependency_wait in next_index) before their first claim. A cudaMemsetAsync before a
// plain launch cost the short causal calls 0.5-1.3% of their time as graph replays
// (docs/kernels.md, runs 359-360). A template: every instance TU that launches it gets its own
// copy.
constexpr int kSm90ZeroCountersThreads = 32;  // one warp, a thread a counter
template <int kCount>
__global__ void sm90_zero_tile_counters(uint32_t* counters) {
  static_assert(kCount <= kSm90ZeroCountersThreads, "a thread a counter");
  grid_dependency_launch_dependents();  // the dependent's wait still waits for the writes below
  if (threadIdx.x < kCount) counters[threadIdx.x] = 0;
}

// The tile slot: the producer writes the decoded tile before its arrival on q_full, the
// consumers read it after their wait. Only packed kernels split the KV blocks, and only layouts
// whose sequences differ carry theirs (Layout::kUniformLengths): the others leave those words
// alone.
template <class Config, class Layout>
__device__ __forceinline__ void sm90_publish_tile(Sm90Tile* slot, const Sm90Tile& tile) {
  slot->m_block = tile.m_block;
  slot->head = tile.head;
  slot->batch = tile.batch;
  slot->row_begin = tile.row_begin;
  if constexpr (Config::kPacksGroups) slot->kv_split = tile.kv_split;
  if constexpr (!Layout::kUniformLengths) {
    slot->sequence.seqlen_q = tile.sequence.seqlen_q;
    slot->sequence.seqlen_k = tile.sequence.seqlen_k;
    slot->sequence.q_start = tile.sequence.q_start;
  }
}

template <class Config, class Layout>
__device__ __forceinline__ Sm90Tile sm90_receive_tile(const volatile Sm90Tile* slot) {
  Sm90Tile tile;
  tile.m_block = slot->m_block;
  if (tile.m_block < 0) return tile;
  tile.head = slot->head;
  tile.batch = slot->batch;
  tile.row_begin = slot->row_begin;
  tile.kv_split = Config::kPacksGroups ? slot->kv_split : 0;
  if constexpr (!Layout::kUniformLengths) {
    tile.sequence.seqlen_q = slot->sequence.seqlen_q;
    tile.sequence.seqlen_k = slot->sequence.seqlen_k;
    tile.sequence.q_start = slot->sequence.q_start;
  }
  return tile;
}

// What every scheduler shares: the launch's tile order, and a first tile of blockIdx.x.
template <class Config, class Layout, bool kCausal>
struct Sm90OrderedTiles {
  Sm90TileOrder<Config, Layout, kCausal> order;

  __device__ __forceinline__ explicit Sm90OrderedTiles(const AttentionParams& params)
      : order(params) {}
  __device__ __forceinline__ int group_shift() const { return order.group_shift; }
  __device__ __forceinline__ Sm90Tile tile(const AttentionParams& params, int index) const {
    return order.tile(params, index);
  }
  __device__ __forceinline__ int first_index() const { return static_cast<int>(blockIdx.x); }
};

// One CTA per tile: the consumers decode blockIdx.x themselves, nothing is handed over.
template <class Config, class Layout, bool kCausal>
struct Sm90SingleTileScheduler : Sm90OrderedTiles<Config, Layout, kCausal> {
  static constexpr bool kPersistent = false;
  static constexpr bool kClaimsTiles = false;

  static int64_t grid_size(int64_t num_tiles, int /*num_sms*/) { return num_tiles; }

  __device__ __forceinline__ Sm90SingleTileScheduler(const AttentionParams& params,
                                                     const Sm90TileCounters& /*counters*/)
      : Sm90OrderedTiles<Config, Layout, kCausal>(params) {}
  __device__ __forceinline__ int next_index(int /*index*/) const { return INT32_MAX; }
  __device__ __forceinline__ void publish(Sm90Tile* /*slot*/, const Sm90Tile& /*tile*/) const {}
  __device__ __forceinline__ void producer_done(const Sm90SmemLayout<Config>& /*smem*/,
                                                uint32_t /*q_phase*/) const {}
  __device__ __forceinline__ bool consumer_tile(const AttentionParams& params,
                                                const Sm90SmemLayout<Config>& /*smem*/,
                                                uint32_t /*q_phase*/, Sm90Tile& tile) const {
    tile = this->tile(params, this->first_index());
    return tile.m_block >= 0;  // the producer skips such an index as well
  }
};

// One CTA per SM taking tiles one after another; the producer decodes each and publishes it in
// the tile slot with its Q, and after the last one publishes m_block -1. kClaims: the next tile
// is the next unclaimed one of the launch (gridDim.x + a global atomic counter), so CTAs that
// drew short causal tiles take more of them; else a fixed stride of gridDim.x (every tile costs
// the same; no counter, so no reset on the stream before the launch).
template <class Config, class Layout, bool kCausal, bool kClaims>
struct Sm90PersistentScheduler : Sm90OrderedTiles<Config, Layout, kCausal> {
  static constexpr bool kPersistent = true;
  static constexpr bool kClaimsTiles = kClaims;
  Sm90TileCounters counters;

  static int64_t grid_size(int64_t num_tiles, int num_sms) {
    return num_tiles < num_sms ? num_tiles : num_sms;  // shared memory allows one CTA per SM
  }

  __device__ __forceinline__ Sm90PersistentScheduler(const AttentionParams& params,
                                                     const Sm90TileCounters& counters_)
      : Sm90OrderedTiles<Config, Layout, kCausal>(params), counters(counters_) {}
  __device__ __forceinline__ int next_index(int index) const {
    if constexpr (kClaims) {
      // The counters may still be being zeroed by the kernel before this one (a caller's
      // workspace: sm90_zero_tile_counters); once passed, the wait returns at once.
      grid_dependency_wait();
      return static_cast<int>(gridDim.x + atomicAdd(counters.get(), 1u));
    } else {
      return index + static_cast<int>(gridDim.x);
    }
  }
  __device__ __forceinline__ void publish(Sm90Tile* slot, const Sm90Tile& tile) const {
    sm90_publish_tile<Config, Layout>(slot, tile);
  }
  // Tells the consumers there is no further tile, once they have taken the last one's Q.
  __device__ __forceinline__ void producer_done(const Sm90SmemLayout<Config>& smem,
                                                uint32_t q_phase) const {
    if constexpr (kClaims) {
      // Every CTA has claimed (next_index) before it gets here, so this wait returns at once; it
      // keeps the reset after the zeroing without leaning on that.
      grid_dependency_wait();
      uint32_t* counter = counters.get();
      __threadfence();
      if (atomicAdd(counter + 1, 1u) == gridDim.x - 1) {
        atomicExch(counter, 0u);
        atomicExch(counter + 1, 0u);
      }
    }
    mbarrier_wait_parity(smem.q_empty(), q_phase ^ 1);
    smem.tile_slot()->m_block = -1;
    mbarrier_arrive(smem.q_full());
  }
  // The tile whose Q is loading (q_full is waited for again, at once, by the consumer).
  __device__ __forceinline__ bool consumer_tile(const AttentionParams& /*params*/,
                                                const Sm90SmemLayout<Config>& smem,
                                                uint32_t q_phase, Sm90Tile& tile) const {
    mbarrier_wait_parity(smem.q_full(), q_phase);
    tile = sm90_receive_tile<Config, Layout>(smem.tile_slot());
    return tile.m_block >= 0;
  }
};

// The scheduler a tuning row names: persistent rows claim tiles under a causal mask (tiles differ
// by up to seqlen / BLOCK_N KV steps) and take a fixed stride otherwise.
template <class Config, class Layout, bool kCausal, bool kPersistent = Config::kPersistent>
struct Sm90SchedulerFor {
  using type = Sm90PersistentScheduler<Config, Layout, kCausal, kCausal>;
};
template <class Config, class Layout, bool kCausal>
struct Sm90SchedulerFor<Config, Layout, kCausal, false> {
  using type = Sm90SingleTileScheduler<Config, Layout, kCausal>;
};

}  // namespace flashcore::detail
