// The Hopper (sm90a) attention forward kernel, composed of four policies:
//   Layout     where a batch entry's rows live and how long it is (sequence_layout.h)
//   Mainloop   the producer's loads and the consumers' GEMMs and softmax (mainloop.cuh)
//   Epilogue   how a consumer stores its O and lse and hands its buffers back (epilogue.cuh)
//   Scheduler  which tiles a CTA computes and how the consumers learn them (scheduler.cuh)
// A CTA is a producer warpgroup and two or three consumer warpgroups of 64 query rows each
// (tile_config.h); packed kernels (Config::kPacksGroups) run tiles over KV heads whose rows hold
// the group's query heads, with split-KV one tile per (tile, KV split) (pipeline.cuh).
//
//   warpgroup 0 (producer)                 warpgroups 1.. (consumers, 64 rows each)
//   ---------------------------------      -------------------------------------------------
//   for each tile (Scheduler):             for each tile (Scheduler::consumer_tile):
//     TMA Q        -> q_full  -----------> wait q_full
//     for KV tile j:                         for KV tile j:
//       wait k_empty[s] <--------------------- arrive k_empty[s] (after S = Q K^T completed)
//       TMA K_j     -> k_full[s] --------> wait k_full[s]; S = Q K_j^T; softmax
//       wait v_empty[s] <--------------------- arrive v_empty[s] (after O += P V completed)
//       TMA V_j     -> v_full[s] --------> wait v_full[s]; O += P V_j
//     (K_{j+1} is issued before V_j:       Epilogue: O / l -> smem -> TMA store; lse
//      producer.cuh)
//   (persistent: wait q_empty before the   arrive q_empty (after the last S, or the O store)
//    next Q; O staged in a V stage: wait   arrive o_free[c] once the store has read it
//    o_free[c] before V_c of a tile; with  (kProducerStoresO: once O is staged, for the
//    kProducerStoresO store that O first)   producer to store)
//
// Clustered rows (Config::kRow.cluster_m 2, dense layout): two CTAs compute two query tiles of
// one (batch, head), each loads half of every K/V block for both (TMA multicast), and a stage is
// free once the consumers of both CTAs released it (cluster.cuh, cluster_scheduler.cuh).
//
// FP8 (Config::kTransposesV): warps 1-3 of warpgroup 0 turn each V stage into V^T for the
// consumers, who then wait for vt_full instead of v_full (v_transpose.cuh draws it).
//
// Shared memory: see smem_layout.cuh. Registers: see tile_config.h.
#pragma once

#include <cuda.h>

#include <type_traits>

#include "common/params.h"
#include "cuda/ptx/grid_dependency.cuh"
#include "cuda/ptx/mbarrier.cuh"
#include "cuda/ptx/setmaxnreg.cuh"
#include "cuda/ptx/tma.cuh"
#include "cuda/sm90/cluster.cuh"
#include "cuda/sm90/cluster_scheduler.cuh"
#include "cuda/sm90/epilogue.cuh"
#include "cuda/sm90/mainloop.cuh"
#include "cuda/sm90/pipeline.cuh"
#include "cuda/sm90/scheduler.cuh"
#include "cuda/sm90/smem_layout.cuh"
#include "cuda/sm90/trace.cuh"
#include "cuda/sm90/v_transpose.cuh"

namespace flashcore::detail {

template <class Layout, class Mainloop, class Epilogue, class Scheduler>
__global__ void __launch_bounds__(Mainloop::Config::kThreads, 1)
    sm90_forward_kernel(const __grid_constant__ CUtensorMap map_q,
                        const __grid_constant__ CUtensorMap map_k,
                        const __grid_constant__ CUtensorMap map_v,
                        const __grid_constant__ CUtensorMap map_o,
                        const __grid_constant__ AttentionParams params,
                        const Sm90TileCounters tile_counters, const Sm90KvSplit kv_split) {
#if defined(__CUDA_ARCH__) && (__CUDA_ARCH__ >= 900) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using Config = typename Mainloop::Config;
  static_assert(std::is_same_v<Layout, typename Mainloop::Layout>, "one layout for the kernel");
  static_assert(
      Sm90SchedulerClusterSize<Scheduler>::value == Sm90ClusterShape<Config, Layout>::kSize,
      "clustered rows run with the cluster scheduler (Sm90RowScheduler), only they do");
  // Whether the producer stores the consumers' O (only persistent CTAs stage it in the V ring).
  constexpr bool kProducerStoresO =
      kSm90ProducerStoresO<Config, Layout> && Scheduler::kPersistent;
  sm90_trace_span_begin();
  extern __shared__ __align__(16) uint8_t dynamic_smem[];
  const Sm90SmemLayout<Config> smem(dynamic_smem);

  // Warp-uniform role index, so the compiler sees one branch per warpgroup.
  const int warpgroup = __shfl_sync(0xffffffff, static_cast<int>(threadIdx.x) / 128, 0);
  const int thread_in_warpgroup = threadIdx.x % Config::kThreadsPerWarpgroup;

  if (threadIdx.x == 0) {
    mbarrier_init(smem.q_full(), 1);
    mbarrier_init(smem.q_empty(), Config::kQEmptyArrivals);
#pragma unroll
    for (int stage = 0; stage < Config::kStages; ++stage) {
      const uint32_t arrivals =
          Layout::template kv_full_arrivals<Config::kBlockN, kSm90GatherLanes>(params);
      mbarrier_init(smem.k_full(stage), arrivals);
      mbarrier_init(smem.v_full(stage), arrivals);
      mbarrier_init(smem.k_empty(stage), sm90_kv_empty_arrivals<Config, Layout>());
      mbarrier_init(smem.v_empty(stage), sm90_kv_empty_arrivals<Config, Layout>());
    }
#pragma unroll
    for (int consumer = 0; consumer < Config::kConsumerWarpgroups; ++consumer) {
      // The one thread that hands the staged O to the producer, or every thread (the last once
      // its own store has read the stage); nothing staged before the first tile.
      mbarrier_init(smem.o_free(consumer),
                    kProducerStoresO ? 1 : Config::kThreadsPerWarpgroup);
      if constexpr (kProducerStoresO) *smem.o_store_slot(consumer) = Sm90OStoreSlot{};
    }
    if constexpr (Config::kTransposesV) {
#pragma unroll
      for (int stage = 0; stage < Config::kStages; ++stage) {
        mbarrier_init(smem.vt_full(stage), kSm90TransposerThreads);
        mbarrier_init(smem.v_raw_empty(stage), kSm90TransposerThreads);
      }
      *smem.transposer_stop() = 0;
    }
    mbarrier_init_fence();
    sm90_trace_reset();
  }
  __syncthreads();
  sm90_cluster_sync<Config, Layout>();  // clustered: the peers' barriers are ready too
  if constexpr (Config::kPacksGroups) {
    // Packed (decode) launches use programmatic dependent launch (launch.cuh): this prologue may
    // run while the kernel before this one on the stream finishes, and nothing in global memory
    // is touched before the wait. The split-KV combine after this kernel may take idle SMs at
    // once where there are enough of them (it waits for this kernel in turn).
    if (kv_split.early_dependents) grid_dependency_launch_dependents();
    grid_dependency_wait();
  }

  // Both roles walk the scheduler's tiles in the same order, so their ring positions and Q
  // phases stay in step.
  const int64_t num_tiles =
      sm90_tile_index_bound<Scheduler, Config, Layout>(params, kv_split.splits);
  const Scheduler scheduler(params, tile_counters);
  Sm90TileLoopState<Config::kStages> state;
  if (warpgroup == 0) {
    setmaxnreg_dec<Sm90ClusterShape<Config, Layout>::kProducerRegisters>();
    // The producer's lanes (Layout::kProducerLanes: 1, or the warp) walk the tiles together;
    // lane 0 takes the claims and hands the tiles over.
    constexpr int kLanes = Layout::kProducerLanes;
    if (thread_in_warpgroup < kLanes) {
      const int lane = thread_in_warpgroup;
      const bool lead = kLanes == 1 || lane == 0;
      // A claim is taken by the lead lane and shared with the others where its value is needed:
      // a claiming scheduler's next index is an atomic's round trip to the L2 away.
      const auto claim = [&](int index) { return lead ? scheduler.next_index(index) : 0; };
      const auto share = [&](int claimed) {
        if constexpr (kLanes == 1) {
          return claimed;
        } else {
          return __shfl_sync(0xffffffff, claimed, 0);
        }
      };
      const Sm90TensorMaps maps{&map_q, &map_k, &map_v, &map_o};
      if (lead) {
        tma_prefetch_descriptor(&map_q);
        tma_prefetch_descriptor(&map_k);
        tma_prefetch_descriptor(&map_v);
      }
      // A serving layout's next tile is decoded while this one's last V load waits for its
      // stage, not on the way to the next tile's Q (sm90_produce says when): its decode walks
      // the sequence table and may read it. A dense tile's decode is a few divisions and stays
      // after the loads (decoded ahead, the d128 rows lost ~1%: docs/kernels.md, run 216).
      // `decoded`: `next_tile` is the decode of `index` already.
      constexpr bool kDecodesAhead = Scheduler::kPersistent && !Layout::kUniformLengths;
      int index = scheduler.first_index();
      Sm90Tile next_tile;
      bool decoded = false;
      while (index < num_tiles) {
        const Sm90Tile tile = decoded ? next_tile : scheduler.tile(params, index);
        decoded = false;
        if (tile.m_block < 0) {  // an index past a packed batch's blocks (Sm90TileOrder)
          if (!Scheduler::kPersistent) break;
          index = share(claim(index));
          continue;
        }
        // A claiming scheduler's next tile is claimed while this one loads; a fixed stride's is
        // worked out with the early decode, or else after the loads.
        int claimed = 0;
        int next_index = 0;
        const auto claim_next = [&] {
          if constexpr (Scheduler::kClaimsTiles) claimed = claim(index);
        };
        const auto next = [&] { return share(Scheduler::kClaimsTiles ? claimed : claim(index)); };
        const auto decode_next = [&] {
          if constexpr (kDecodesAhead) {
            next_index = next();
            if (next_index < num_tiles) {
              next_tile = scheduler.tile(params, next_index);
              decoded = true;
            }
          }
        };
        sm90_trace(Sm90Event::kClaimed);
        const MaskPolicy<Mainloop::kCausal> mask =
            sm90_tile_mask<Mainloop::kCausal, Layout>(params, tile);
        const KvTileRange kv_tiles =
            Mainloop::kv_tiles(mask, tile, scheduler.group_shift(), kv_split);
        Mainloop::load(smem, maps, params, scheduler, tile, kv_tiles, scheduler.group_shift(),
                       state, lane, claim_next, decode_next);
        if (!Scheduler::kPersistent) break;
        index = kDecodesAhead ? next_index : next();
      }
      if (lead) scheduler.producer_done(smem, state.q_phase);
      if (lead) sm90_cluster_producer_tail<Config, Layout>(smem, state.ring);
      if constexpr (Config::kTransposesV) {
        if (lead) sm90_stop_transposer<Config, Layout>(smem, params, state.ring);
      }
      if constexpr (kProducerStoresO) {
        if (lead) sm90_store_last_o<Config>(smem, &map_o, params, state);
      }
    }
    if constexpr (Config::kTransposesV) {  // warps 1-3 (the loads' lanes are in warp 0)
      constexpr int kFirst = kSm90TransposerFirstWarp * 32;
      if (thread_in_warpgroup >= kFirst && thread_in_warpgroup < kFirst + kSm90TransposerThreads) {
        sm90_transpose_v<Config, Layout>(smem, params, state.ring, thread_in_warpgroup - kFirst);
      }
    }
  } else {
    setmaxnreg_inc<Config::kConsumerRegisters>();
    const int consumer = warpgroup - 1;
    Sm90QRelease release;
    if (Scheduler::kPersistent) {
      release.q_empty = smem.q_empty();
      release.staging = Config::kPersistentOStaging;
      if (Config::kOStagingInVRing) release.o_free = smem.o_free(consumer);
      if (kProducerStoresO) release.o_store_slot = smem.o_store_slot(consumer);
    }
    // Ping-pong turns between the consumers, one rotation for all tiles.
    const typename Mainloop::Turns turns{consumer};
    turns.start();
    Sm90Tile tile;
    while (scheduler.consumer_tile(params, smem, state.q_phase, tile)) {
      const int group_shift = scheduler.group_shift();
      const MaskPolicy<Mainloop::kCausal> mask =
          sm90_tile_mask<Mainloop::kCausal, Layout>(params, tile);
      const KvTileRange kv_tiles = Mainloop::kv_tiles(mask, tile, group_shift, kv_split);
      const int dead_blocks = Mainloop::dead_blocks(mask, tile, consumer, group_shift, kv_tiles);
      const int slab_row_begin = sm90_slab_row_begin<Config>(tile, consumer);
      // Two call sites, not one behind a flag: each instantiation keeps its own straight code.
      if (Mainloop::computes(params, tile, slab_row_begin, group_shift, kv_tiles, dead_blocks)) {
        Mainloop::template consume<true, Epilogue>(smem, &map_o, params, kv_split, tile, kv_tiles,
                                                   dead_blocks, slab_row_begin, consumer,
                                                   thread_in_warpgroup, state, release, turns);
      } else {  // no query row left for this consumer, or none of its rows sees a key
        Mainloop::template consume<false, Epilogue>(smem, &map_o, params, kv_split, tile,
                                                    kv_tiles, 0, slab_row_begin, consumer,
                                                    thread_in_warpgroup, state, release, turns);
      }
      if (!Scheduler::kPersistent) break;
    }
    turns.finish();
    if (Scheduler::kPersistent && thread_in_warpgroup == 0) tma_store_wait_all();  // last O store
  }
  sm90_cluster_sync<Config, Layout>();  // clustered: no CTA leaves while a peer may reach it
  sm90_trace_span_end();
#endif
}

}  // namespace flashcore::detail
