// The Hopper kernel for packed calls (decode) whose tiles hold at most 64 query rows and need
// no more CTAs than SMs, or read a gathered cache (launch.cuh): one consumer warpgroup of 128
// threads per tile and KV split (sm90_kv_split_plan), which loads its own K/V.
//
//   Dense layout (one TMA box a block):     Serving layouts (Sm90DecodeRoles: producer warps):
//   one tile a CTA                          persistent CTAs, tiles gridDim.x apart
//   thread 0: barrier init                  thread 0: barrier init
//   (wait for the kernel before: PDL)       (wait for the kernel before: PDL)
//   thread 0: Q, K / V of the first         producer warps, tile after tile: K / V of its first
//     kStages KV blocks                       kStages blocks; Q once q_empty; the rest, each once
//   consumers, for each KV block (last        its stage_empty (boxes or gathered rows)
//   first): wait k_full; S = Q K^T; mask;   consumers, tile after tile: the same block loop,
//   softmax; rescale O; wait v_full;          arriving on stage_empty after every block and on
//   O += P V; stage free (named barrier),     q_empty after the last; the epilogue
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

namespace flashcore::detail {

constexpr int kSm90DecodeThreads = 128;  // the consumer warpgroup: the wgmma M of 64 rows

// Who loads K/V. A layout whose blocks may take many loads (Layout::kProducerLanes > 1: a paged
// block is up to kBlockN boxes, or gathered rows each after a page-table read) gets a producer
// warpgroup after the consumers, which runs up to kStages blocks ahead and waits only on a
// stage's release, so neither the page-table reads nor the copies' issue stall the GEMMs. Its
// warp 0 issues TMA boxes; gathered blocks (paged_gather.cuh) take all four warps, whose copies
// are issue-bound in one warp. A dense block is one TMA box: thread 0 issues it between its own
// GEMMs, and no warp is added.
template <class Layout>
struct Sm90DecodeRoles {
  static constexpr bool kProducerWarps = Layout::kProducerLanes > 1;
  static constexpr int kGatherThreads = 128;
  static constexpr int kThreads = kSm90DecodeThreads + (kProducerWarps ? kGatherThreads : 0);
  // K/V stages: the tile configuration's, or with producer warps as many as fit up to
  // kMaxStages. A gathered block lands a page-table read later than a box would, so the
  // producer runs a block further ahead to keep as many bytes in flight (docs/kernels.md,
  // run 115).
  static constexpr int kMaxStages = 3;
  template <class Config>
  static constexpr int stages() {
    if (!kProducerWarps) return Config::kStages;
    int stages = kMaxStages;
    while (stages > Config::kStages && Config::kQSlabBytes + 2 * stages * Config::kKVTileBytes +
                                               8 * (1 + 3 * stages) + Config::kAlignmentSlack >
                                           Config::kMaxSmemBytes) {
      --stages;
    }
    return stages;
  }

  // Arrivals that complete a K/V full barrier: the arming thread's, or every gathering thread's.
  template <int kBlockN>
  __device__ static uint32_t kv_full_arrivals(const AttentionParams& params) {
    return Layout::template kv_gathered<kBlockN>(params) && kProducerWarps ? kGatherThreads : 1;
  }
  // Whether producer thread `thread` takes part in loading a block: every gathering thread, or
  // the layout's box lanes.
  template <int kBlockN>
  __device__ static bool loads_kv(const AttentionParams& params, int thread) {
    return thread < Layout::kProducerLanes ||
           (kProducerWarps && Layout::template kv_gathered<kBlockN>(params));
  }
};

// Dynamic shared memory of the decode kernel: [Q slab][K stages][V stages][barriers], each tile
// on a 1024-byte swizzle atom; kStages from Sm90DecodeRoles::stages. stage_empty is the producer
// warpgroup's (Sm90DecodeRoles).
template <class Config, int kStages>
struct Sm90DecodeSmem {
  // q_full, k_full[s], v_full[s], stage_empty[s], q_empty
  static constexpr int kBarriers = 2 + 3 * kStages;
  static constexpr int kBytes = Config::kQSlabBytes + 2 * kStages * Config::kKVTileBytes +
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
    return k(kStages + stage);
  }
  __device__ __forceinline__ uint64_t* q_full() const {
    return reinterpret_cast<uint64_t*>(k(2 * kStages));
  }
  __device__ __forceinline__ uint64_t* k_full(int stage) const { return q_full() + 1 + stage; }
  __device__ __forceinline__ uint64_t* v_full(int stage) const {
    return q_full() + 1 + kStages + stage;
  }
  // Completed when every consumer thread's GEMMs on the stage's K and V are done.
  __device__ __forceinline__ uint64_t* stage_empty(int stage) const {
    return q_full() + 1 + 2 * kStages + stage;
  }
  // Completed when every consumer thread's last GEMM of a tile is done: Q may be reloaded.
  __device__ __forceinline__ uint64_t* q_empty() const { return q_full() + 1 + 3 * kStages; }
};

// K and V of the KV block the tile visits at `step` (last block first) into `stage`, by
// producer thread `lane` (Sm90DecodeRoles::loads_kv).
template <class Config, class Layout, int kStages>
__device__ __forceinline__ void sm90_decode_load_kv(const Sm90DecodeSmem<Config, kStages>& smem,
                                                    const CUtensorMap* map_k,
                                                    const CUtensorMap* map_v,
                                                    const AttentionParams& params,
                                                    const Sm90Tile& tile,
                                                    const KvTileRange& kv_tiles, int step,
                                                    int stage, int lane) {
  const int n_block = kv_tiles.tile_at(step);
  constexpr int kGatherThreads = Sm90DecodeRoles<Layout>::kGatherThreads;
  sm90_arm_and_load_kv_block<Config, Layout, kGatherThreads>(
      smem.k(stage), map_k, smem.k_full(stage), params, false, n_block, tile.head, tile.batch, lane);
  sm90_arm_and_load_kv_block<Config, Layout, kGatherThreads>(
      smem.v(stage), map_v, smem.v_full(stage), params, true, n_block, tile.head, tile.batch, lane);
}

// The producer warps of a persistent decode CTA (serving layouts): its tiles in the consumers'
// order, each tile's K/V blocks into the ring's next stages as the consumers release them, and
// its Q once they released the previous tile's. The first kStages blocks of a tile go before
// its Q: their stages are released by the previous tile's blocks, so they load while that tile
// ends, and the Q wait cannot hold them up.
template <class Config, class Layout, bool kCausal, int kStages>
__device__ __forceinline__ void sm90_decode_produce(
    const Sm90DecodeSmem<Config, kStages>& smem, const CUtensorMap* map_q,
    const CUtensorMap* map_k, const CUtensorMap* map_v, const AttentionParams& params,
    const Sm90TileOrder<Config, Layout, kCausal>& tile_order, const Sm90KvSplit& kv_split,
    int64_t num_tiles, int thread) {
  if (!Sm90DecodeRoles<Layout>::template loads_kv<Config::kBlockN>(params, thread)) return;
  int ring = 0;   // blocks loaded for earlier tiles: the ring position of this tile's first
  int tiles = 0;  // earlier tiles: the Q phase
  for (int64_t index = blockIdx.x; index < num_tiles; index += gridDim.x) {
    const Sm90Tile tile = tile_order.tile(params, static_cast<int>(index));
    if (tile.m_block < 0) continue;  // an index past a packed batch's blocks
    const MaskPolicy<kCausal> mask = Layout::template mask<kCausal>(params, tile.batch);
    const KvTileRange kv_tiles =
        sm90_kv_tiles<Config>(mask, tile, tile_order.group_shift, kv_split);
    const int count = kv_tiles.count();
    const auto load_block = [&](int step) {
      const int position = ring + step;
      if (position >= kStages) {
        mbarrier_wait_parity(smem.stage_empty(position % kStages),
                             ((position / kStages) - 1) & 1);
      }
      sm90_decode_load_kv<Config, Layout>(smem, map_k, map_v, params, tile, kv_tiles, step,
                                          position % kStages, thread);
    };
    const int before_q = count < kStages ? count : kStages;
    for (int step = 0; step < before_q; ++step) load_block(step);
    if (thread == 0) {
      if (tiles > 0) mbarrier_wait_parity(smem.q_empty(), (tiles - 1) & 1);
      const int slab = sm90_slabs_before_row_0<Config>(tile.row_begin);
      mbarrier_arrive_expect_tx(smem.q_full(), Config::kQSlabBytes);
      sm90_load_q_slab<Config, Layout>(smem.q(), map_q, smem.q_full(), params, tile,
                                       sm90_slab_row_begin<Config>(tile, slab),
                                       tile_order.group_shift);
    }
    for (int step = before_q; step < count; ++step) load_block(step);
    ring += count;
    ++tiles;
  }
  cp_async_wait_all();  // a gather's copies land before their thread exits
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

// One KV block of a tile in stage `stage` (its full barriers' phase `phase`): S = Q K^T, mask
// and online softmax into P, O += P V. The block at step 0 (the range's last, visited first) is
// the only one that can end past the keys: its V rows there are zeroed first.
template <class Config, class Layout, bool kCausal, int kStages, int kOAccRegs>
__device__ __forceinline__ void sm90_decode_block(const Sm90DecodeSmem<Config, kStages>& smem,
                                                  const AttentionParams& params,
                                                  const Sm90Tile& tile,
                                                  const KvTileRange& kv_tiles,
                                                  const Sm90ThreadRows<Config, Layout, kCausal>& rows,
                                                  OnlineSoftmaxRows& softmax,
                                                  float (&o)[kOAccRegs], uint32_t q_slab,
                                                  int step, int stage, uint32_t phase,
                                                  int thread) {
  constexpr DType kDType = Config::kDType;
  using Math = Sm90ConsumerMath<kDType, Config>;
  const int n_block = kv_tiles.tile_at(step);
  float s[Math::kSAccRegs];
  mbarrier_wait_parity(smem.k_full(stage), phase);
  sm90_kv_block_landed<Config, Layout>(params);
  Math::issue_qk(s, q_slab, smem_u32(smem.k(stage)));
  wgmma_wait_group<0>();
  fence_accumulators(s);
  uint32_t p[Math::kPSteps][4];
  sm90_scores_to_p<kDType>(s, o, p, softmax, rows, kv_tiles, n_block, params.softmax_scale_log2);
  mbarrier_wait_parity(smem.v_full(stage), phase);
  sm90_kv_block_landed<Config, Layout>(params);
  if (step == 0) {
    sm90_zero_v_past_keys<Config, Layout>(smem.v(stage), params, tile.batch, n_block, thread,
                                          sm90_barrier_id(Sm90NamedBarrier::kDecodeStageFree));
  }
  Math::issue_pv(o, p, smem_u32(smem.v(stage)));
  wgmma_wait_group<0>();
  fence_accumulators(o);
}

// A tile's O normalized: a split's partial O and lse to the workspace, or out and lse.
template <class Config, class Layout, bool kWritesSplits, int kOAccRegs>
__device__ __forceinline__ void sm90_decode_epilogue(float (&o)[kOAccRegs],
                                                     OnlineSoftmaxRows& softmax,
                                                     const AttentionParams& params,
                                                     const Sm90KvSplit& kv_split,
                                                     const Sm90Tile& tile, int group_shift,
                                                     int slab_row_begin, int thread) {
  float inv_sum[2], lse[2];
  softmax.finalize(inv_sum, lse);
  scale_rows(o, inv_sum);
  const int lane = thread % 32;
  const int row0 = (thread / 32) * 16 + lane / 4;
  const int query_rows = sm90_query_rows<Layout>(params, tile.batch, group_shift);
  if constexpr (kWritesSplits) {
    sm90_write_split<Config>(o, lse, params, kv_split, tile, slab_row_begin, row0, lane,
                             group_shift, query_rows);
  } else {
    sm90_decode_write_out<Config::kDType>(o, lse, params, tile, slab_row_begin, row0, lane,
                                          group_shift, query_rows);
  }
}

// The serving layouts' decode CTA, persistent: tiles blockIdx.x, + gridDim.x, ... (launch.cuh
// sizes the grid to the SMs). The producer warps (sm90_decode_produce) run into the next tile
// while this one ends; the consumers release every block's stage and, after a tile's last GEMM,
// its Q. The K/V ring runs on across tiles: a block's stage and phase come from its position
// among all the blocks the CTA consumed.
template <class Config, class Layout, bool kCausal, bool kWritesSplits, int kStages>
__device__ __forceinline__ void sm90_decode_persistent(
    const Sm90DecodeSmem<Config, kStages>& smem, const CUtensorMap* map_q,
    const CUtensorMap* map_k, const CUtensorMap* map_v, const AttentionParams& params,
    const Sm90TileOrder<Config, Layout, kCausal>& tile_order, const Sm90KvSplit& kv_split,
    int thread) {
  using Math = Sm90ConsumerMath<Config::kDType, Config>;
  const int64_t num_tiles = sm90_num_tiles<Config, Layout>(params, kv_split.splits);
  if (thread >= kSm90DecodeThreads) {
    sm90_decode_produce<Config, Layout, kCausal>(smem, map_q, map_k, map_v, params, tile_order,
                                                 kv_split, num_tiles,
                                                 thread - kSm90DecodeThreads);
    return;
  }
  int ring = 0;          // blocks consumed for earlier tiles
  uint32_t q_phase = 0;  // flips every tile
  for (int64_t index = blockIdx.x; index < num_tiles; index += gridDim.x) {
    const Sm90Tile tile = tile_order.tile(params, static_cast<int>(index));
    if (tile.m_block < 0) continue;  // an index past a packed batch's blocks
    const MaskPolicy<kCausal> mask = Layout::template mask<kCausal>(params, tile.batch);
    const KvTileRange kv_tiles =
        sm90_kv_tiles<Config>(mask, tile, tile_order.group_shift, kv_split);
    const int count = kv_tiles.count();
    const int slab = sm90_slabs_before_row_0<Config>(tile.row_begin);  // the slab with the rows
    const Sm90ThreadRows<Config, Layout, kCausal> rows(params, tile, slab, thread);
    float o[Math::kOAccRegs];
#pragma unroll
    for (int i = 0; i < Math::kOAccRegs; ++i) o[i] = 0.0f;
    OnlineSoftmaxRows softmax;
    const uint32_t q_slab = smem_u32(smem.q());
    mbarrier_wait_parity(smem.q_full(), q_phase);
    for (int step = 0; step < count; ++step) {
      const int position = ring + step;
      const int stage = position % kStages;
      sm90_decode_block<Config, Layout>(smem, params, tile, kv_tiles, rows, softmax, o, q_slab,
                                        step, stage, (position / kStages) & 1, thread);
      mbarrier_arrive(smem.stage_empty(stage));
    }
    mbarrier_arrive(smem.q_empty());
    ring += count;
    q_phase ^= 1;
    sm90_decode_epilogue<Config, Layout, kWritesSplits>(o, softmax, params, kv_split, tile,
                                                        tile_order.group_shift,
                                                        sm90_slab_row_begin<Config>(tile, slab),
                                                        thread);
  }
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
  constexpr int kStages = Roles::template stages<Config>();
  extern __shared__ __align__(16) uint8_t dynamic_smem[];
  const Sm90DecodeSmem<Config, kStages> smem(dynamic_smem);
  const int thread = threadIdx.x;

  if (thread == 0) {
    mbarrier_init(smem.q_full(), 1);
#pragma unroll
    for (int stage = 0; stage < kStages; ++stage) {
      mbarrier_init(smem.k_full(stage), Roles::template kv_full_arrivals<Config::kBlockN>(params));
      mbarrier_init(smem.v_full(stage), Roles::template kv_full_arrivals<Config::kBlockN>(params));
      if (kProducerWarps) mbarrier_init(smem.stage_empty(stage), kSm90DecodeThreads);
    }
    if (kProducerWarps) mbarrier_init(smem.q_empty(), kSm90DecodeThreads);
    mbarrier_init_fence();
  }
  __syncthreads();
  // Launched as a programmatic dependent (launch.cuh): nothing in global memory before the wait.
  if (kv_split.early_dependents) grid_dependency_launch_dependents();
  grid_dependency_wait();

  const Sm90TileOrder<Config, Layout, kCausal> tile_order(params);
  if constexpr (kProducerWarps) {
    sm90_decode_persistent<Config, Layout, kCausal, kWritesSplits>(
        smem, &map_q, &map_k, &map_v, params, tile_order, kv_split, thread);
    return;
  }
  const Sm90Tile tile = tile_order.tile(params, blockIdx.x);
  if (tile.m_block < 0) return;  // an index past a packed batch's blocks: no barrier is in use
  const MaskPolicy<kCausal> mask = Layout::template mask<kCausal>(params, tile.batch);
  const KvTileRange kv_tiles = sm90_kv_tiles<Config>(mask, tile, tile_order.group_shift, kv_split);
  const int count = kv_tiles.count();
  const int slab = sm90_slabs_before_row_0<Config>(tile.row_begin);  // the slab with the rows
  const int slab_row_begin = sm90_slab_row_begin<Config>(tile, slab);
  // Thread 0 loads Q, and the layout's producer lanes K and V.
  if (thread == 0) {
    mbarrier_arrive_expect_tx(smem.q_full(), Config::kQSlabBytes);
    sm90_load_q_slab<Config, Layout>(smem.q(), &map_q, smem.q_full(), params, tile,
                                     slab_row_begin, tile_order.group_shift);
  }
  if (thread < Layout::kProducerLanes) {  // the first stages; the rest in the loop
    for (int step = 0; step < count && step < kStages; ++step) {
      sm90_decode_load_kv<Config, Layout>(smem, &map_k, &map_v, params, tile, kv_tiles, step,
                                          step % kStages, thread);
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
    const int stage = step % kStages;
    sm90_decode_block<Config, Layout>(smem, params, tile, kv_tiles, rows, softmax, o, q_slab, step,
                                      stage, (step / kStages) & 1, thread);
    if (step + kStages < count) {  // this stage takes the block kStages further on
      named_barrier_sync(sm90_barrier_id(Sm90NamedBarrier::kDecodeStageFree), kSm90DecodeThreads);
      if (thread < Layout::kProducerLanes) {
        sm90_decode_load_kv<Config, Layout>(smem, &map_k, &map_v, params, tile, kv_tiles,
                                            step + kStages, stage, thread);
      }
    }
  }
  sm90_decode_epilogue<Config, Layout, kWritesSplits>(o, softmax, params, kv_split, tile,
                                                      tile_order.group_shift, slab_row_begin,
                                                      thread);
#endif
}

}  // namespace flashcore::detail
