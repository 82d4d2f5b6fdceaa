// The Hopper kernel for packed calls (decode) whose tiles hold at most 64 query rows and need
// no more CTAs than SMs, or read a gathered cache (launch.cuh): one consumer warpgroup of 128
// threads per tile and KV split (sm90_kv_split_plan), which loads its own K/V.
//
//   Dense layout (one TMA box a block):     Serving layouts (Sm90DecodeRoles: producer warps):
//   thread 0: barrier init                  thread 0: barrier init
//   (wait for the kernel before: PDL)       (wait for the kernel before: PDL)
//   thread 0: Q, K / V of the first         producer warps: Q; for each KV block (last first):
//     kStages KV blocks                       wait stage_empty (from the kStages-th block on),
//   consumers, for each KV block (last        K / V boxes or gathered rows into the stage
//   first): wait k_full; S = Q K^T; mask;   consumers: the same loop, then arrive on
//   softmax; rescale O; wait v_full;          stage_empty
//   O += P V; stage free (named barrier),
//   thread 0 loads block j + kStages
//   epilogue: a split's partial O and lse to the workspace, or out and lse
//
// Why a kernel of its own: the general kernel (kernel.cuh) is built for long tiles (a producer
// warpgroup, two consumers taking turns, a persistent tile loop with its hand-offs, O staged for a
// TMA store). A decode split visits one or two KV blocks, so that machinery would be the CTA's
// whole life (docs/kernels.md, "decode kernel").
// The combine kernel (split_combine.cuh) merges the splits as before; tiles, splits, tensor maps
// and the workspace layout are the general packed kernel's (Config is its configuration). Of its
// 64-row slabs only the one that holds the rows is computed, so the launcher sends calls with
// more rows per tile there: the first slab, or causal the second (sm90_block_row_begin moves a
// causal partial block up by whole slabs, so its first slab lies before row 0).
#pragma once

#include <cuda.h>

#include "common/params.h"
#include "cuda/common/accumulator_layout.h"
#include "cuda/common/mask.cuh"
#include "cuda/common/numeric.cuh"
#include "cuda/ptx/cp_async.cuh"
#include "cuda/ptx/grid_dependency.cuh"
#include "cuda/ptx/mbarrier.cuh"
#include "cuda/ptx/named_barrier.cuh"
#include "cuda/ptx/setmaxnreg.cuh"
#include "cuda/ptx/tma.cuh"
#include "cuda/ptx/wgmma.cuh"
#include "cuda/sm90/consumer.cuh"
#include "cuda/sm90/epilogue.cuh"
#include "cuda/sm90/kv_tail.cuh"
#include "cuda/sm90/named_barriers.h"
#include "cuda/sm90/pipeline.cuh"
#include "cuda/sm90/producer.cuh"
#include "cuda/sm90/scheduler.cuh"
#include "cuda/sm90/sequence_layout.h"
#include "cuda/sm90/smem_layout.cuh"
#include "cuda/sm90/softmax.cuh"
#include "cuda/sm90/tile_config.h"

namespace flashcore::detail {

constexpr int kSm90DecodeThreads = 128;  // the consumer warpgroup: the wgmma M of 64 rows

// Who loads K/V. A layout whose blocks may take many loads (Layout::kProducerLanes > 1: a paged
// block is up to kBlockN boxes, or gathered rows each after a page-table read) gets producer
// warps after the consumers, which run up to kStages blocks ahead and wait only on a stage's
// release, so neither the page-table reads nor the copies' issue stall the GEMMs. Warp 0 issues
// TMA boxes; gathered blocks (paged_gather.cuh) take every producer warp, whose copies are
// issue-bound in one warp: four warps gather a block's K while four others gather its V, so V's
// page-table reads and copies do not queue behind K's (four warps doing K then V, or two and
// two, ran page 1 5% / 7% slower: docs/kernels.md, run 196). A dense block is one TMA box:
// thread 0 issues it between its own GEMMs, and no warp is added.
template <class Layout>
struct Sm90DecodeRoles {
  static constexpr bool kProducerWarps = Layout::kProducerLanes > 1;
  static constexpr int kGatherThreadsPerTensor = 128;  // K's, and as many for V
  static constexpr int kGatherThreads = 2 * kGatherThreadsPerTensor;
  static_assert(kGatherThreadsPerTensor % kSm90GatherLanes == 0, "K and V gather whole warps");
  static constexpr int kThreads = kSm90DecodeThreads + (kProducerWarps ? kGatherThreads : 0);
  // setmaxnreg budgets with producer warps: at launch __launch_bounds__(384, 1) caps every
  // thread at 168 registers (65536 / 384, rounded down to 8), where the d256 consumer spilled
  // 552 bytes (it takes 226 uncapped); the producer warpgroups give back to 136, the consumers
  // take 232.
  static constexpr int kProducerRegisters = 136;
  static constexpr int kConsumerRegisters = 232;
  static constexpr int kRegistersAtLaunch =
      kSm90RegistersPerSm / kThreads / kSm90RegisterUnit * kSm90RegisterUnit;
  static_assert(!kProducerWarps || kSm90DecodeThreads * kConsumerRegisters +
                                           kGatherThreads * kProducerRegisters <=
                                       kThreads * kRegistersAtLaunch,
                "setmaxnreg budgets past the registers the CTA holds at launch");

  // Whether producer thread `thread` takes part in loading a block: every gathering thread, or
  // the layout's box lanes.
  template <int kBlockN>
  __device__ static bool loads_kv(const AttentionParams& params, int thread) {
    return thread < Layout::kProducerLanes ||
           (kProducerWarps && Layout::template kv_gathered<kBlockN>(params));
  }
};

// Dynamic shared memory of the decode kernel: [Q slab][K stages][V stages][barriers], each tile
// on a 1024-byte swizzle atom. stage_empty is the producer warpgroup's (Sm90DecodeRoles).
template <class Config>
struct Sm90DecodeSmem {
  // q_full, k_full[s], v_full[s], stage_empty[s]
  static constexpr int kBarriers = 1 + 3 * Config::kStages;
  static constexpr int kBytes = Config::kQSlabBytes + 2 * Config::kStages * Config::kKVTileBytes +
                                8 * kBarriers + Config::kAlignmentSlack;
  static_assert(kBytes <= Config::kMaxSmemBytes, "decode tile does not fit shared memory");

  uint8_t* base;

  __device__ __forceinline__ explicit Sm90DecodeSmem(uint8_t* dynamic_smem)
      : base(align_to_swizzle_atom(dynamic_smem)) {}
  __device__ __forceinline__ uint8_t* q() const { return base; }
  __device__ __forceinline__ uint8_t* k(int stage) const {
    return base + Config::kQSlabBytes + stage * Config::kKVTileBytes;
  }
  __device__ __forceinline__ uint8_t* v(int stage) const {
    return k(Config::kStages + stage);
  }
  __device__ __forceinline__ uint64_t* q_full() const {
    return reinterpret_cast<uint64_t*>(k(2 * Config::kStages));
  }
  __device__ __forceinline__ uint64_t* k_full(int stage) const { return q_full() + 1 + stage; }
  __device__ __forceinline__ uint64_t* v_full(int stage) const {
    return q_full() + 1 + Config::kStages + stage;
  }
  // Completed when every consumer thread's GEMMs on the stage's K and V are done.
  __device__ __forceinline__ uint64_t* stage_empty(int stage) const {
    return q_full() + 1 + 2 * Config::kStages + stage;
  }
};

// K and V of the KV block visited at `step` (last block first) into stage step % kStages, by
// producer thread `lane` (Sm90DecodeRoles::loads_kv).
template <class Config, class Layout>
__device__ __forceinline__ void sm90_decode_load_kv(const Sm90DecodeSmem<Config>& smem,
                                                    const CUtensorMap* map_k,
                                                    const CUtensorMap* map_v,
                                                    const AttentionParams& params,
                                                    const Sm90Tile& tile,
                                                    const KvTileRange& kv_tiles, int step,
                                                    int lane) {
  const int stage = step % Config::kStages;
  const int n_block = kv_tiles.tile_at(step);
  constexpr int kPerTensor = Sm90DecodeRoles<Layout>::kGatherThreadsPerTensor;
  if (Layout::template kv_gathered<Config::kBlockN>(params)) {  // K's threads, then V's
    const bool is_v = lane >= kPerTensor;
    sm90_gather_kv_block<Config, kPerTensor>(is_v ? smem.v(stage) : smem.k(stage),
                                             is_v ? smem.v_full(stage) : smem.k_full(stage),
                                             params, is_v, n_block, tile.head, tile.batch,
                                             is_v ? lane - kPerTensor : lane);
    return;
  }
  sm90_arm_and_load_kv_block<Config, Layout>(smem.k(stage), map_k, smem.k_full(stage), params,
                                             false, n_block, tile.head, tile, lane);
  sm90_arm_and_load_kv_block<Config, Layout>(smem.v(stage), map_v, smem.v_full(stage), params,
                                             true, n_block, tile.head, tile, lane);
}

// An unsplit tile's O (normalized) and lse straight to out and lse.
template <DType kDType, int kOAccRegs>
__device__ __forceinline__ void sm90_decode_write_out(const float (&o)[kOAccRegs],
                                                      const float (&lse)[2],
                                                      const AttentionParams& params,
                                                      const Sm90Tile& tile, int slab_row_begin,
                                                      int row0, int lane, int group_shift,
                                                      int query_rows) {
  sm90_store_o_rows<kDType>(o, params, tile, slab_row_begin, row0, lane, group_shift, query_rows);
  if (params.lse == nullptr || lane % 4 != 0) return;
  sm90_for_each_thread_row(tile, slab_row_begin, row0, group_shift, query_rows,
                           [&](int r, int head_q, int position) {
    params.lse[params.lse_offset(tile.batch, head_q, position)] = lse[r];
  });
}

// kWritesSplits: the launch splits the keys (partials for the combine kernel), else every tile
// writes out itself. Two kernels, so that the split one carries no unsplit epilogue: with it,
// batch-1 decode ran slower (more registers: docs/kernels.md).
template <class Config, class Layout, bool kCausal, bool kWritesSplits>
__global__ void __launch_bounds__(Sm90DecodeRoles<Layout>::kThreads, 1)
    sm90_decode_kernel(const __grid_constant__ CUtensorMap map_q,
                       const __grid_constant__ CUtensorMap map_k,
                       const __grid_constant__ CUtensorMap map_v,
                       const __grid_constant__ AttentionParams params, const Sm90KvSplit kv_split) {
#if defined(__CUDA_ARCH__) && (__CUDA_ARCH__ >= 900) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
  static_assert(Config::kPacksGroups, "the decode kernel runs packed tiles");
  constexpr DType kDType = Config::kDType;
  using Math = Sm90ConsumerMath<kDType, Config>;
  using Roles = Sm90DecodeRoles<Layout>;
  constexpr bool kProducerWarps = Roles::kProducerWarps;
  extern __shared__ __align__(16) uint8_t dynamic_smem[];
  const Sm90DecodeSmem<Config> smem(dynamic_smem);
  const int thread = threadIdx.x;

  if (thread == 0) {
    mbarrier_init(smem.q_full(), 1);
#pragma unroll
    for (int stage = 0; stage < Config::kStages; ++stage) {
      const uint32_t arrivals =
          Layout::template kv_full_arrivals<Config::kBlockN, Roles::kGatherThreadsPerTensor>(
              params);
      mbarrier_init(smem.k_full(stage), arrivals);
      mbarrier_init(smem.v_full(stage), arrivals);
      if (kProducerWarps) mbarrier_init(smem.stage_empty(stage), kSm90DecodeThreads);
    }
    mbarrier_init_fence();
  }
  __syncthreads();
  // Launched as a programmatic dependent (launch.cuh): nothing in global memory before the wait.
  if (kv_split.early_dependents) grid_dependency_launch_dependents();
  grid_dependency_wait();

  const Sm90TileOrder<Config, Layout, kCausal> tile_order(params);
  const Sm90Tile tile = tile_order.tile(params, blockIdx.x);
  if (tile.m_block < 0) return;  // an index past a packed batch's blocks: no barrier is in use
  const MaskPolicy<kCausal> mask = sm90_tile_mask<kCausal, Layout>(params, tile);
  const KvTileRange kv_tiles = sm90_kv_tiles<Config>(mask, tile, tile_order.group_shift, kv_split);
  const int count = kv_tiles.count();
  const int slab = sm90_slabs_before_row_0<Config>(tile.row_begin);  // the slab with the rows
  const int slab_row_begin = sm90_slab_row_begin<Config>(tile, slab);
  // Q by thread 0 of the loading warps: the producer warpgroup's, or else the consumers'.
  const int producer_thread = kProducerWarps ? thread - kSm90DecodeThreads : thread;
  if (producer_thread == 0) {
    mbarrier_arrive_expect_tx(smem.q_full(), Config::kQSlabBytes);
    sm90_load_q_slab<Config, Layout>(smem.q(), &map_q, smem.q_full(), params, tile,
                                     slab_row_begin, tile_order.group_shift);
  }
  if constexpr (kProducerWarps) {
    if (producer_thread >= 0) {  // every block in turn, each into a stage the consumers released
      setmaxnreg_dec<Roles::kProducerRegisters>();
      if (!Roles::template loads_kv<Config::kBlockN>(params, producer_thread)) return;
      for (int step = 0; step < count; ++step) {
        if (step >= Config::kStages) {
          mbarrier_wait_parity(smem.stage_empty(step % Config::kStages),
                               ((step / Config::kStages) - 1) & 1);
        }
        sm90_decode_load_kv<Config, Layout>(smem, &map_k, &map_v, params, tile, kv_tiles, step,
                                            producer_thread);
      }
      cp_async_wait_all();  // a gather's copies land before their thread exits
      return;
    }
    setmaxnreg_inc<Roles::kConsumerRegisters>();
  } else if (thread < Layout::kProducerLanes) {  // the first stages; the rest in the loop
    for (int step = 0; step < count && step < Config::kStages; ++step) {
      sm90_decode_load_kv<Config, Layout>(smem, &map_k, &map_v, params, tile, kv_tiles, step,
                                          thread);
    }
  }

  const Sm90ThreadRows<Config, Layout, kCausal> rows(params, tile, slab, thread);
  float o[Math::kOAccRegs];
#pragma unroll
  for (int i = 0; i < Math::kOAccRegs; ++i) o[i] = 0.0f;
  OnlineSoftmaxRows softmax;
  const uint32_t q_slab = smem_u32(smem.q());
  mbarrier_wait_parity(smem.q_full(), 0);
  for (int step = 0; step < count; ++step) {
    const int stage = step % Config::kStages;
    const uint32_t phase = (step / Config::kStages) & 1;
    const int n_block = kv_tiles.tile_at(step);
    float s[Math::kSAccRegs];
    mbarrier_wait_parity(smem.k_full(stage), phase);
    sm90_kv_block_landed<Config, Layout>(params);
    Math::issue_qk(s, q_slab, smem_u32(smem.k(stage)));
    wgmma_wait_group<0>();
    fence_accumulators(s);
    uint32_t p[Math::kPSteps][4];
    sm90_scores_to_p<kDType>(s, o, p, softmax, rows, kv_tiles, n_block,
                             params.softmax_scale_log2);
    mbarrier_wait_parity(smem.v_full(stage), phase);
    sm90_kv_block_landed<Config, Layout>(params);
    if (step == 0) {  // the last block of the tile's range: the only one that can end past the keys
      sm90_zero_v_past_keys<Config, Layout>(smem.v(stage), params, tile, n_block, thread,
                                            sm90_barrier_id(Sm90NamedBarrier::kDecodeStageFree));
    }
    Math::issue_pv(o, p, smem_u32(smem.v(stage)));
    wgmma_wait_group<0>();
    fence_accumulators(o);
    if (step + Config::kStages < count) {  // this stage takes the block kStages further on
      if constexpr (kProducerWarps) {
        mbarrier_arrive(smem.stage_empty(stage));
      } else {
        named_barrier_sync(sm90_barrier_id(Sm90NamedBarrier::kDecodeStageFree),
                           kSm90DecodeThreads);
        if (thread < Layout::kProducerLanes) {
          sm90_decode_load_kv<Config, Layout>(smem, &map_k, &map_v, params, tile, kv_tiles,
                                              step + Config::kStages, thread);
        }
      }
    }
  }

  float inv_sum[2], lse[2];
  softmax.finalize<Config::Element::kPOffsetLog2>(inv_sum, lse);
  scale_rows(o, inv_sum);
  const int lane = thread % 32;
  const int row0 = (thread / 32) * 16 + lane / 4;
  const int group_shift = tile_order.group_shift;
  const int query_rows = sm90_tile_query_rows<Layout>(params, tile, group_shift);
  if constexpr (kWritesSplits) {
    sm90_write_split<Config>(o, lse, params, kv_split, tile, slab_row_begin, row0, lane,
                             group_shift, query_rows);
  } else {
    sm90_decode_write_out<kDType>(o, lse, params, tile, slab_row_begin, row0, lane, group_shift,
                                  query_rows);
  }
#endif
}

}  // namespace flashcore::detail
