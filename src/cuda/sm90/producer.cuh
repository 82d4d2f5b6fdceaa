// The producer of the Hopper kernel: one thread of warpgroup 0 issues every TMA load of a tile,
// or with a layout whose K/V blocks come in many boxes (a paged cache: kProducerLanes 32) the
// first warp of it: every lane waits on the barriers, lane 0 alone arms them and loads Q, and the
// lanes share the K/V boxes.
//
//   K tile 0 (wait k_empty[s])  -> k_full[s]
//   (persistent: wait q_empty; O in the V ring and n < consumers: wait o_free[n..], or with
//    Config::kProducerStoresO store the staged O there and wait for its read)
//   Q (once per tile)           -> q_full
//   for j = 1 .. n-1 (KV tiles last to first, the order the consumers visit them):
//     wait k_empty[s_j];   K tile j   -> k_full[s_j]
//     (O in the V ring, j - 1 < consumers: wait o_free[j - 1])
//     wait v_empty[s_j-1]; V tile j-1 -> v_full[s_j-1]
//   wait v_empty; V tile n-1 -> v_full
#pragma once

#include <cuda.h>

#include "cuda/ptx/mbarrier.cuh"
#include "cuda/ptx/tma.cuh"
#include "cuda/sm90/cluster.cuh"
#include "cuda/sm90/kv_tail.cuh"
#include "cuda/sm90/paged_gather.cuh"
#include "cuda/sm90/pipeline.cuh"
#include "cuda/sm90/sequence_layout.h"
#include "cuda/sm90/smem_layout.cuh"
#include "cuda/sm90/trace.cuh"

namespace flashcore::detail {

struct Sm90TensorMaps {
  const CUtensorMap* q;
  const CUtensorMap* k;
  const CUtensorMap* v;
  const CUtensorMap* o;
};

// One 64-row slab of Q (every column block) into `dst`, completing on `barrier`; the caller
// expects its bytes. Packed tiles (5-D map over (head_dim, head in group, seqlen, KV head,
// batch)): the slab is 64 >> group_shift positions of every head of the group.
template <class Config, class Layout>
__device__ __forceinline__ void sm90_load_q_slab(uint8_t* dst, const CUtensorMap* map_q,
                                                 uint64_t* barrier, const AttentionParams& params,
                                                 const Sm90Tile& tile, int slab_row_begin,
                                                 int group_shift) {
  constexpr int kBoxBytesQ = Config::kRowsPerConsumer * kSwizzleBytes;
  const TmaRowCoord at = Layout::q_row(params, tile.batch, tile.sequence.q_start, tile.head,
                                      sm90_row_position(slab_row_begin, group_shift));
#pragma unroll
  for (int block = 0; block < Config::kColumnBlocks; ++block) {
    if constexpr (Config::kPacksGroups) {
      tma_load_5d(dst + block * kBoxBytesQ, map_q, barrier, block * Config::kBoxCols, 0, at.row,
                  at.head, at.batch);
    } else {
      tma_load_4d(dst + block * kBoxBytesQ, map_q, barrier, block * Config::kBoxCols, at.row,
                  at.head, at.batch);
    }
  }
}

// KV block `n_block` of K or V (every column block) into `dst`, completing on `full`; the
// caller expects its bytes. Shared by the general and the decode kernel's producers. The layout
// cuts the block into boxes (one, or a paged cache's page runs); a box of r rows lands r
// swizzled rows into each column block (128-byte rows: the swizzle follows the address).
template <class Config, class Layout>
__device__ __forceinline__ void sm90_load_kv_block(uint8_t* dst, const CUtensorMap* map,
                                                   uint64_t* full, const AttentionParams& params,
                                                   int n_block, int kv_head, const Sm90Tile& tile,
                                                   int lane) {
  constexpr int kBoxBytesKV = Config::kBlockN * kSwizzleBytes;
  Layout::template for_each_kv_box<Config::kBlockN>(
      params, tile.batch, tile.sequence.k_start, kv_head, n_block * Config::kBlockN, lane,
      [&](int box_row, const TmaRowCoord& at) {
#pragma unroll
        for (int block = 0; block < Config::kColumnBlocks; ++block) {
          tma_load_4d(dst + block * kBoxBytesKV + box_row * kSwizzleBytes, map, full,
                      block * Config::kBoxCols, at.row, at.head, at.batch);
        }
      });
}

// Whether producer lane `lane` is the one that arms barriers and loads Q.
template <class Layout>
__device__ __forceinline__ bool sm90_lead_lane(int lane) {
  return Layout::kProducerLanes == 1 || lane == 0;
}

// Arms `full` for one K/V block (lane 0), then every producer lane issues its boxes of it (the
// warp's lanes wait for the arming, so no box can complete before the barrier expects it).
// Gathered blocks (small pages, paged_gather.cuh) skip the arming: the cp.async arrivals of
// kGatherThreads threads (lane: 0 .. kGatherThreads - 1) count instead.
template <class Config, class Layout, int kGatherThreads = kSm90GatherLanes>
__device__ __forceinline__ void sm90_arm_and_load_kv_block(uint8_t* dst, const CUtensorMap* map,
                                                           uint64_t* full,
                                                           const AttentionParams& params,
                                                           bool is_v, int n_block, int kv_head,
                                                           const Sm90Tile& tile, int lane) {
  if constexpr (Sm90ClusterShape<Config, Layout>::kClustered) {  // this CTA's share, multicast
    sm90_arm_and_load_kv_share<Config, Layout>(dst, map, full, params, n_block, kv_head,
                                               tile.batch);
    return;
  }
  if (Layout::template kv_gathered<Config::kBlockN>(params)) {
    sm90_gather_kv_block<Config, kGatherThreads>(dst, full, params, is_v, n_block, kv_head,
                                                 tile.batch, lane);
    return;
  }
  if (sm90_lead_lane<Layout>(lane)) mbarrier_arrive_expect_tx(full, Config::kKVTileBytes);
  if constexpr (Layout::kProducerLanes > 1) __syncwarp();
  sm90_load_kv_block<Config, Layout>(dst, map, full, params, n_block, kv_head, tile, lane);
}

// Q of every consumer's slab, but those wholly before row 0 (a causal first block,
// sm90_block_row_begin): TMA faults on negative coordinates, and those consumers store nothing.
template <class Config, class Layout>
__device__ __forceinline__ void sm90_load_q(const Sm90SmemLayout<Config>& smem,
                                            const Sm90TensorMaps& maps,
                                            const AttentionParams& params, const Sm90Tile& tile,
                                            int group_shift) {
  const int slabs_before_row_0 = sm90_slabs_before_row_0<Config>(tile.row_begin);
  mbarrier_arrive_expect_tx(smem.q_full(),
                            Config::kQBytes - slabs_before_row_0 * Config::kQSlabBytes);
#pragma unroll
  for (int consumer = 0; consumer < Config::kConsumerWarpgroups; ++consumer) {
    if (consumer < slabs_before_row_0) continue;
    sm90_load_q_slab<Config, Layout>(smem.q_slab(consumer), maps.q, smem.q_full(), params, tile,
                                     sm90_slab_row_begin<Config>(tile, consumer), group_shift);
  }
}

// Loads K (or V) of the KV tile visited at `step` into the ring's next K (or V) stage, once both
// consumers released that stage.
template <class Config, class Layout>
__device__ __forceinline__ void sm90_load_kv_tile(const Sm90SmemLayout<Config>& smem,
                                                  const CUtensorMap* map,
                                                  const AttentionParams& params, bool is_v,
                                                  const Sm90Tile& tile, int kv_head,
                                                  const KvTileRange& kv_tiles, int step,
                                                  RingPosition<Config::kStages>& ring, int lane) {
  // V (FP8): the stage is free once the transposer has read it (v_transpose.cuh).
  uint64_t* empty = is_v ? smem.v_load_empty(ring.stage) : smem.k_empty(ring.stage);
  uint64_t* full = is_v ? smem.v_full(ring.stage) : smem.k_full(ring.stage);
  uint8_t* dst = is_v ? smem.v_tile(ring.stage) : smem.k_tile(ring.stage);
  mbarrier_wait_parity(empty, ring.phase ^ 1);
  sm90_trace(is_v ? Sm90Event::kVSlotFree : Sm90Event::kKSlotFree);
  const int n_block = kv_tiles.tile_at(step);
  if constexpr (Config::kTransposesV) {
    // The transposer zeroes V's rows past the keys (v_transpose.cuh); it read the stage's last
    // word before releasing the stage (`empty`), and reads this one after the arrival below.
    if (is_v && Layout::kv_tail_may_hold_garbage(params) && sm90_lead_lane<Layout>(lane)) {
      *smem.v_keys(ring.stage) = sm90_keys_in_block<Config, Layout>(params, tile, n_block);
    }
  }
  sm90_arm_and_load_kv_block<Config, Layout>(dst, map, full, params, is_v, n_block, kv_head,
                                             tile, lane);
  ring.advance();
}

// Config::kProducerStoresO: the TMA store of the O that consumer `consumer` staged in V stage
// `stage`, where its store slot says (nothing for a slab without rows of the sequence, nor
// before the CTA's first tile: kernel.cuh zeroes the slots).
template <class Config>
__device__ __forceinline__ void sm90_issue_o_store(const Sm90SmemLayout<Config>& smem,
                                                   const CUtensorMap* map_o,
                                                   const AttentionParams& params, int consumer,
                                                   int stage) {
  const Sm90OStoreSlot slot = *smem.o_store_slot(consumer);
  if (slot.stores != 0) sm90_store_o_slab<Config>(map_o, smem.v_tile(stage), params, slot.at);
}

// Waits until consumer `consumer` has staged its O (the o_free phase of parity `parity`; the CTA's
// first tile has none before it, and that wait passes at once), stores it, and waits until the
// store has read the stage.
template <class Config>
__device__ __forceinline__ void sm90_store_staged_o(const Sm90SmemLayout<Config>& smem,
                                                    const CUtensorMap* map_o,
                                                    const AttentionParams& params, int consumer,
                                                    int stage, uint32_t parity) {
  mbarrier_wait_parity(smem.o_free(consumer), parity);
  sm90_issue_o_store<Config>(smem, map_o, params, consumer, stage);
  tma_store_wait_reads();
}

// Every consumer's O of the CTA's last tile (Config::kProducerStoresO), after the producer's
// last load: stored, and the stores finished before the CTA's shared memory goes.
template <class Config>
__device__ __forceinline__ void sm90_store_last_o(const Sm90SmemLayout<Config>& smem,
                                                  const CUtensorMap* map_o,
                                                  const AttentionParams& params,
                                                  const Sm90TileLoopState<Config::kStages>& state) {
#pragma unroll 1
  for (int consumer = 0; consumer < Config::kConsumerWarpgroups; ++consumer) {
    sm90_store_staged_o<Config>(smem, map_o, params, consumer,
                                Sm90VStaging<Config::kStages>(state.ring, consumer).stage,
                                state.q_phase ^ 1);
  }
  tma_store_wait_all();
}

// K loads of a tile left to issue when the producer claims the next tile (a claiming
// scheduler's atomic, an L2 round trip away). Late enough that a CTA claims about when it is
// about to be free (causal launches hand their tiles out longest first, to the CTAs free first);
// early enough that the round trip runs under the tile's last loads, not on the way to the next
// tile's Q (docs/kernels.md, runs 209-210).
constexpr int kSm90ClaimAheadLoads = 1;
static_assert(kSm90ClaimAheadLoads >= 1, "the claim precedes one of the tile's K loads");

// All loads of one output tile, in the order the overlapped consumers need them:
// K_0, Q, then K_{j+1} before V_j. With a persistent scheduler the Q slabs may still hold the
// previous tile: K_0 is loaded before waiting for q_empty, so it lands under the previous tile's
// epilogue, and the tile is handed to the consumers (Scheduler::publish) with the Q it loads.
// O staged in the V ring (persistent, Config::kOStagingInVRing): the previous tile's consumer c
// staged its O in the stage that this tile's V_c loads into (Sm90VStaging), so V_c waits until
// that store has read it (o_free[c], completed once per tile like q_empty). With fewer V loads
// than consumers the remaining o_free are waited for before Q, so no consumer of this tile stages
// its O over a store still reading. claim_next() claims the scheduler's next tile, once, before
// the tile's last kSm90ClaimAheadLoads K loads (at once where it has no more); decode_next()
// decodes it, once, before the tile's last V load: that load waits for a stage the consumers are
// still reading, so the decode runs in the wait and not between this tile's last load and the
// next tile's Q, which the consumers wait for.
template <class Config, class Layout, class Scheduler, class ClaimNext, class DecodeNext>
__device__ __forceinline__ void sm90_produce(const Sm90SmemLayout<Config>& smem,
                                             const Sm90TensorMaps& maps,
                                             const AttentionParams& params,
                                             const Scheduler& scheduler, const Sm90Tile& tile,
                                             const KvTileRange& kv_tiles, int group_shift,
                                             Sm90TileLoopState<Config::kStages>& state, int lane,
                                             ClaimNext&& claim_next, DecodeNext&& decode_next) {
  constexpr bool persistent = Scheduler::kPersistent;
  const int kv_head = Config::kPacksGroups ? tile.head : params.kv_head_of(tile.head);
  const int count = kv_tiles.count();
  const bool o_in_v_ring = persistent && Config::kOStagingInVRing;
  const uint32_t previous_tile_parity = state.q_phase ^ 1;
  RingPosition<Config::kStages> k_ring = state.ring, v_ring = state.ring;
  // The previous tile's consumer c staged its O where V_c loads (Sm90VStaging): waited for, or
  // where the producer stores it (dense layout: one producer lane), stored and waited for until
  // read. The later consumers' O already staged is stored with it (probed, not waited for), so
  // their V loads, which follow K loads that wait for this tile's first S = Q K^T, find it read.
  unsigned stored = 0;  // bit c: consumer c's O stored this tile
  const auto free_o_stage = [&](int consumer) {
    if constexpr (kSm90ProducerStoresO<Config, Layout>) {
      static_assert(Layout::kProducerLanes == 1, "one thread issues and waits for the stores");
      if ((stored >> consumer & 1u) == 0) {
        mbarrier_wait_parity(smem.o_free(consumer), previous_tile_parity);
        sm90_issue_o_store<Config>(smem, maps.o, params, consumer,
                                   Sm90VStaging<Config::kStages>(state.ring, consumer).stage);
      }
#pragma unroll
      for (int later = consumer + 1; later < Config::kConsumerWarpgroups; ++later) {
        if ((stored >> later & 1u) == 0 &&
            mbarrier_test_wait_parity(smem.o_free(later), previous_tile_parity)) {
          sm90_issue_o_store<Config>(smem, maps.o, params, later,
                                     Sm90VStaging<Config::kStages>(state.ring, later).stage);
          stored |= 1u << later;
        }
      }
      tma_store_wait_reads();
    } else {
      mbarrier_wait_parity(smem.o_free(consumer), previous_tile_parity);
    }
  };
  const auto load_v = [&](int step) {
    if (o_in_v_ring && step < Config::kConsumerWarpgroups) free_o_stage(step);
    sm90_load_kv_tile<Config, Layout>(smem, maps.v, params, true, tile, kv_head, kv_tiles, step,
                                      v_ring, lane);
  };
  const int claim_step = count > kSm90ClaimAheadLoads ? count - kSm90ClaimAheadLoads : 0;
  if (claim_step == 0) claim_next();
  if (count > 0) {
    sm90_load_kv_tile<Config, Layout>(smem, maps.k, params, false, tile, kv_head, kv_tiles, 0,
                                      k_ring, lane);
  }
  if (persistent) {
    mbarrier_wait_parity(smem.q_empty(), previous_tile_parity);
    sm90_trace(Sm90Event::kQSlotFree);
    // by the arrival on q_full (sm90_load_q)
    if (sm90_lead_lane<Layout>(lane)) scheduler.publish(smem.tile_slot(), tile);
  }
  if (o_in_v_ring) {
    for (int consumer = count; consumer < Config::kConsumerWarpgroups; ++consumer)
      free_o_stage(consumer);
  }
  if (sm90_lead_lane<Layout>(lane)) sm90_load_q<Config, Layout>(smem, maps, params, tile, group_shift);
  for (int step = 1; step < count; ++step) {
    if (step == claim_step) claim_next();
    sm90_load_kv_tile<Config, Layout>(smem, maps.k, params, false, tile, kv_head, kv_tiles, step,
                                      k_ring, lane);
    load_v(step - 1);
  }
  decode_next();
  if (count > 0) load_v(count - 1);
  state.ring = k_ring;  // both rings advanced `count` times
  state.q_phase ^= 1;
}

}  // namespace flashcore::detail
