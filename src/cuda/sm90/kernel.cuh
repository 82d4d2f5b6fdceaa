// The Hopper (sm90a) attention forward kernel: one CTA per (m-block of BLOCK_M query rows, head,
// batch), or with a persistent schedule one CTA per SM claiming those tiles one after another
// (dynamically, through two counters: pipeline.cuh). BLOCK_M is 64 rows per consumer warpgroup,
// two consumers (128) or three (192, d64); register budgets per role are in tile_config.h.
// Packed kernels (Config::kPacksGroups) run tiles over KV heads whose rows hold the group's query
// heads, and with split-KV one tile per (tile, KV split) (pipeline.cuh).
//
//   warpgroup 0 (producer)                 warpgroups 1.. (consumers, 64 rows each)
//   ---------------------------------      -------------------------------------------------
//   TMA Q            -> q_full  ---------> wait q_full
//   for KV tile j:                         for KV tile j:
//     wait k_empty[s] <----------------------- arrive k_empty[s] (after S = Q K^T completed)
//     TMA K_j        -> k_full[s] -------> wait k_full[s]; S = Q K_j^T; softmax
//     wait v_empty[s] <----------------------- arrive v_empty[s] (after O += P V completed)
//     TMA V_j        -> v_full[s] -------> wait v_full[s]; O += P V_j
//   (the producer issues K_{j+1} before V_j: see producer.cuh)
//                                          epilogue: O / l -> smem -> TMA store; lse
//   (persistent, O staged in a V stage:
//    wait o_free[c] before V_c of a tile) <--- arrive o_free[c] once the store has read it
//
// Shared memory: see smem_layout.cuh. Registers: see tile_config.h.
#pragma once

#include <cuda.h>

#include "common/params.h"
#include "cuda/common/mask.cuh"
#include "cuda/ptx/grid_dependency.cuh"
#include "cuda/ptx/mbarrier.cuh"
#include "cuda/ptx/setmaxnreg.cuh"
#include "cuda/ptx/tma.cuh"
#include "cuda/sm90/consumer.cuh"
#include "cuda/sm90/consumer_overlap.cuh"
#include "cuda/sm90/pipeline.cuh"
#include "cuda/sm90/producer.cuh"
#include "cuda/sm90/smem_layout.cuh"
#include "cuda/sm90/tile_config.h"
#include "cuda/sm90/trace.cuh"

namespace flashcore::detail {

template <DType kDType, class Config, bool kCausal, Sm90Schedule kSchedule>
__global__ void __launch_bounds__(Config::kThreads, 1)
    sm90_forward_kernel(const __grid_constant__ CUtensorMap map_q,
                        const __grid_constant__ CUtensorMap map_k,
                        const __grid_constant__ CUtensorMap map_v,
                        const __grid_constant__ CUtensorMap map_o,
                        const __grid_constant__ AttentionParams params,
                        const Sm90TileCounters tile_counters, const Sm90KvSplit kv_split) {
#if defined(__CUDA_ARCH__) && (__CUDA_ARCH__ >= 900) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
  extern __shared__ __align__(16) uint8_t dynamic_smem[];
  const Sm90SmemLayout<Config> smem(dynamic_smem);

  // Warp-uniform role index, so the compiler sees one branch per warpgroup.
  const int warpgroup = __shfl_sync(0xffffffff, static_cast<int>(threadIdx.x) / 128, 0);
  const int thread_in_warpgroup = threadIdx.x % Config::kThreadsPerWarpgroup;

  constexpr bool kPersistent = sm90_is_persistent(kSchedule);
  constexpr bool kClaimsTiles = sm90_claims_tiles(kSchedule, kCausal);
  // A consumer whose 64 rows all lie outside the sequence passes its turns without GEMMs
  // (sm90_pass_tile_overlapped) in persistent CTAs of three consumers, where a power-of-two length
  // always leaves a partial block (2^k mod 192 is 64 or 128): the last one, or causal the first
  // (sm90_block_row_begin). H100, A B A B against f33dc83
  // (dev/sm90/results/2026-11-21-h100-rowless-consumers): d64 non-causal 512 +4.4%, 1k +2.1%,
  // causal 2k +1.9%, 4k +2.5%. In every CTA the extra path cost d256 causal ~2% (its kernels
  // changed, not its work: 128-row tiles of the standard lengths have no rowless consumer) and
  // the one-tile d64 kernel 8k 3.7%, so elsewhere the kernel is as before.
  // Packed GQA tiles (Config::kPacksGroups) skip them too: a decode tile has G rows.
  constexpr bool kSkipsRowlessConsumers =
      kPersistent && (Config::kConsumerWarpgroups == 3 || Config::kPacksGroups);
  if (threadIdx.x == 0) {
    mbarrier_init(smem.q_full(), 1);
    mbarrier_init(smem.q_empty(), Config::kQEmptyArrivals);
#pragma unroll
    for (int stage = 0; stage < Config::kStages; ++stage) {
      mbarrier_init(smem.k_full(stage), 1);
      mbarrier_init(smem.v_full(stage), 1);
      mbarrier_init(smem.k_empty(stage), Config::kConsumerThreads);
      mbarrier_init(smem.v_empty(stage), Config::kConsumerThreads);
    }
#pragma unroll
    for (int consumer = 0; consumer < Config::kConsumerWarpgroups; ++consumer)
      mbarrier_init(smem.o_free(consumer), Config::kThreadsPerWarpgroup);
    mbarrier_init_fence();
    sm90_trace_reset();
  }
  __syncthreads();
  if constexpr (Config::kPacksGroups) {
    // Packed (decode) launches use programmatic dependent launch (launch.cuh): this prologue may
    // run while the kernel before this one on the stream finishes, and nothing in global memory
    // is touched before the wait. The split-KV combine after this kernel may take idle SMs at
    // once where there are enough of them (it waits for this kernel in turn).
    if (kv_split.early_dependents) grid_dependency_launch_dependents();
    grid_dependency_wait();
  }

  // One tile per CTA, or (persistent) tiles claimed one after another (sm90_claim_next_tile): the
  // producer claims and decodes each tile, the consumers read it from the tile slot once Q has
  // landed, so both roles walk the same sequence and their ring positions and Q phases stay in
  // step.
  const int64_t num_tiles = sm90_num_tiles<Config>(params, kv_split.splits);
  const Sm90TileOrder<Config, kCausal> tile_order(params);
  Sm90TileLoopState<Config::kStages> state;
  if (warpgroup == 0) {
    setmaxnreg_dec<Config::kProducerRegisters>();
    if (thread_in_warpgroup == 0) {
      const Sm90TensorMaps maps{&map_q, &map_k, &map_v, &map_o};
      tma_prefetch_descriptor(&map_q);
      tma_prefetch_descriptor(&map_k);
      tma_prefetch_descriptor(&map_v);
      int index = blockIdx.x;
      while (index < num_tiles) {
        const Sm90Tile tile = tile_order.tile(params, index);
        sm90_trace(Sm90Event::kClaimed);
        const MaskPolicy<kCausal> mask(params, tile.batch);
        const KvTileRange kv_tiles =
            sm90_kv_tiles<Config>(mask, tile, tile_order.group_shift, kv_split);
        sm90_produce<Config>(smem, maps, params, tile, kv_tiles, tile_order.group_shift,
                             kPersistent, state);
        if (!kPersistent) break;
        index = kClaimsTiles ? sm90_claim_next_tile(tile_counters.get())
                             : index + static_cast<int>(gridDim.x);
      }
      if (kPersistent) {  // tell the consumers there is no further tile
        if (kClaimsTiles) sm90_finish_claims(tile_counters.get());
        mbarrier_wait_parity(smem.q_empty(), state.q_phase ^ 1);
        smem.tile_slot()->m_block = -1;
        mbarrier_arrive(smem.q_full());
      }
    }
  } else {
    setmaxnreg_inc<Config::kConsumerRegisters>();
    const int consumer = warpgroup - 1;
    Sm90QRelease release;
    if (kPersistent) {
      release.q_empty = smem.q_empty();
      release.staging = Config::kPersistentOStaging;
      if (Config::kOStagingInVRing) release.o_free = smem.o_free(consumer);
    }
    // Ping-pong turns between the consumers (overlapped schedules), one rotation for all tiles.
    constexpr bool kPingPong =
        sm90_is_overlapped(kSchedule) && kSchedule != Sm90Schedule::kOverlapOnly;
    const PingPongTurns<kPingPong, Config::kConsumerWarpgroups> turns{consumer};
    turns.start();
    while (true) {
      Sm90Tile tile;
      if (kPersistent) {
        mbarrier_wait_parity(smem.q_full(), state.q_phase);  // waited again (at once) below
        const volatile Sm90Tile* slot = smem.tile_slot();
        tile.m_block = slot->m_block;
        if (tile.m_block < 0) break;
        tile.head = slot->head;
        tile.batch = slot->batch;
        tile.row_begin = slot->row_begin;
        tile.kv_split = Config::kPacksGroups ? slot->kv_split : 0;
      } else {
        tile = tile_order.tile(params, blockIdx.x);
      }
      const MaskPolicy<kCausal> mask(params, tile.batch);
      const KvTileRange kv_tiles =
          sm90_kv_tiles<Config>(mask, tile, tile_order.group_shift, kv_split);
      if constexpr (sm90_is_overlapped(kSchedule)) {
        const int slab_row_begin = sm90_slab_row_begin<Config>(tile, consumer);
        const int rows = sm90_query_rows(params, tile.batch, tile_order.group_shift);
        const int dead_blocks =
            Config::kSkipsDeadBlocks
                ? sm90_dead_blocks<Config>(mask, tile, consumer, tile_order.group_shift, kv_tiles)
                : 0;
        const bool sees_keys = dead_blocks == 0 || dead_blocks < kv_tiles.count();
        if ((!kSkipsRowlessConsumers || sm90_slab_has_rows<Config>(slab_row_begin, rows)) &&
            sees_keys) {
          sm90_consume_overlapped<kDType, Config, kCausal>(smem, &map_o, params, kv_split, tile,
                                                           kv_tiles, dead_blocks, consumer,
                                                           thread_in_warpgroup, state, release,
                                                           turns);
        } else {  // no query row left for this consumer, or none of its rows sees a key
          sm90_pass_tile_overlapped<kDType, Config>(smem, &map_o, params, kv_split, tile,
                                                    kv_tiles, slab_row_begin, consumer,
                                                    thread_in_warpgroup, state, release, turns);
        }
      } else {
        sm90_consume<kDType, Config, kCausal>(smem, &map_o, params, kv_split, tile, kv_tiles,
                                              consumer, thread_in_warpgroup, state, release);
      }
      if (!kPersistent) break;
    }
    turns.finish();
    if (kPersistent && thread_in_warpgroup == 0) tma_store_wait_all();  // the last O store
  }
#endif
}

}  // namespace flashcore::detail
