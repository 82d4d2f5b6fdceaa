// Epilogue of one consumer warpgroup: normalize O, write lse, and store O with TMA.
//
// O (64 rows x head_dim) is converted to 16 bits and written into the staging buffer the caller
// chose (the consumer's Q slab once its last S = Q K^T has completed, a buffer of its own, or a V
// stage: consumer.cuh) in the 128-byte-swizzled column-block layout, then one thread stores it
// with TMA. Persistent schedulers: staged in the Q slab or a V stage, that thread waits only until
// the store has read the buffer, and every thread tells the producer it is free (q_empty /
// o_free; with Config::kLoneStoreWait the others arrive without waiting; with
// Config::kProducerStoresO the producer stores O from the V stage and nobody here waits); with a
// buffer of its own (Q already released), nobody waits until the next epilogue reuses the buffer.
// The O tensor map has a per-batch seqlen dimension, so rows past seqlen_q are dropped by the
// hardware.
#pragma once

#include <cuda.h>

#include "common/params.h"
#include "cuda/common/accumulator_layout.h"
#include "cuda/common/numeric.cuh"
#include "cuda/ptx/fence.cuh"
#include "cuda/ptx/named_barrier.cuh"
#include "cuda/ptx/smem_descriptor.cuh"
#include "cuda/ptx/tma.cuh"
#include "cuda/sm90/named_barriers.h"
#include "cuda/sm90/pipeline.cuh"
#include "cuda/sm90/sequence_layout.h"
#include "cuda/sm90/smem_layout.cuh"
#include "cuda/sm90/softmax.cuh"
#include "cuda/sm90/tile_config.h"
#include "cuda/sm90/trace.cuh"

namespace flashcore::detail {

// Consumer c's epilogue barrier (its 128 threads).
__device__ __forceinline__ uint32_t sm90_epilogue_barrier(int consumer) {
  return sm90_barrier_id(Sm90NamedBarrier::kEpilogueFirst, consumer);
}

// One split of a split-KV tile (packed kernels): its O, normalized by its own row sums, and its
// lse go to the workspace in fp32 for the combine kernel, which writes out and lse. Columns past
// the call's head_dim (a padded 96) are not written.
template <class Config, int kOAccRegs>
__device__ __forceinline__ void sm90_write_split(const float (&o)[kOAccRegs],
                                                 const float (&lse)[2],
                                                 const AttentionParams& params,
                                                 const Sm90KvSplit& kv_split, const Sm90Tile& tile,
                                                 int slab_row_begin, int row0, int lane,
                                                 int group_shift, int query_rows) {
  sm90_for_each_thread_row(tile, slab_row_begin, row0, group_shift, query_rows,
                           [&](int r, int head_q, int position) {
    const int64_t index = kv_split.row(params, tile.kv_split, tile.batch, head_q, position);
    if (lane % 4 == 0) kv_split.lse_partial[index] = lse[r];
    float* o_row = kv_split.o_partial + index * params.head_dim;
#pragma unroll
    for (int chunk = 0; chunk < kOAccRegs / kAccRegsPerChunk; ++chunk) {
      const int col = kAccChunkColumns * chunk + kAccPairColumns * (lane % kAccLanesPerRow);
      if (col < params.head_dim) {  // head_dim is a multiple of 8: both columns or neither
        o_row[col] = o[acc_reg(chunk, r, 0)];
        o_row[col + 1] = o[acc_reg(chunk, r, 1)];
      }
    }
  });
}

// A thread's rows of O (normalized) straight to out, bounded by the sequence: two columns of
// every 8, as 16-bit pairs. out's strides are multiples of 8 elements (the TMA maps the launcher
// built require 16 bytes), so every pair is 4-byte aligned.
template <DType kDType, int kOAccRegs>
__device__ __forceinline__ void sm90_store_o_rows(const float (&o)[kOAccRegs],
                                                  const AttentionParams& params,
                                                  const Sm90Tile& tile, int slab_row_begin,
                                                  int row0, int lane, int group_shift,
                                                  int query_rows) {
  sm90_for_each_thread_row(tile, slab_row_begin, row0, group_shift, query_rows,
                           [&](int r, int head_q, int position) {
    element_t<kDType>* out = static_cast<element_t<kDType>*>(params.out) +
                             params.o_offset(tile.batch, position, head_q);
#pragma unroll
    for (int chunk = 0; chunk < kOAccRegs / kAccRegsPerChunk; ++chunk) {
      const int col = kAccChunkColumns * chunk + kAccPairColumns * (lane % kAccLanesPerRow);
      if (col < params.head_dim) {  // a padded 96: both columns or neither
        *reinterpret_cast<uint32_t*>(out + col) =
            pack_pair<kDType>(o[acc_reg(chunk, r, 0)], o[acc_reg(chunk, r, 1)]);
      }
    }
  });
}

// The O map's coordinates of the first row of the 64-row slab from `slab_row_begin`.
template <class Layout>
__device__ __forceinline__ TmaRowCoord sm90_slab_o_at(const AttentionParams& params,
                                                      const Sm90Tile& tile, int slab_row_begin,
                                                      int group_shift) {
  return Layout::q_row(params, tile.batch, tile.sequence.q_start, tile.head,
                       sm90_row_position(slab_row_begin, group_shift));
}

// Where a consumer thread's two rows go: its lane, its first row in the 64-row slab (the second
// is row0 + 8), and the packing and length of the tile's query rows (sm90_group_shift).
struct Sm90SlabRows {
  int lane, row0, group_shift, query_rows;
  template <class Config, class Layout>
  __device__ __forceinline__ static Sm90SlabRows of(const AttentionParams& params,
                                                    const Sm90Tile& tile,
                                                    int thread_in_warpgroup) {
    Sm90SlabRows rows;
    rows.lane = thread_in_warpgroup % 32;
    rows.row0 = (thread_in_warpgroup / 32) * 16 + rows.lane / 4;
    rows.group_shift = sm90_group_shift<Config>(params);
    rows.query_rows = sm90_tile_query_rows<Layout>(params, tile, rows.group_shift);
    return rows;
  }
};

// Whether the tile's rows go out as a split's partials (packed decode tiles split over the keys)
// instead of out and lse.
template <class Config>
__device__ __forceinline__ bool sm90_writes_split(const Sm90KvSplit& kv_split) {
  return Config::kPacksGroups && kv_split.splits > 1;
}

// lse of a thread's two rows, those the sequence has, where the call asked for lse and the tile
// is not a split's: by the first lane of the row's quad (all four hold the row's lse).
__device__ __forceinline__ void sm90_write_lse(const float (&lse)[2],
                                               const AttentionParams& params, int head, int batch,
                                               int slab_row_begin, const Sm90SlabRows& rows,
                                               bool writes_split) {
  if (params.lse == nullptr || writes_split || rows.lane % 4 != 0) return;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int row = slab_row_begin + rows.row0 + 8 * r;
    const int head_q = sm90_row_head(head, row, rows.group_shift);
    if (row >= 0 && row < rows.query_rows) {
      params.lse[params.lse_offset(batch, head_q, sm90_row_position(row, rows.group_shift))] =
          lse[r];
    }
  }
}

// A thread's two rows once their softmax is final: the factor that normalizes O (with FP8's V
// descale) and lse.
struct Sm90RowTotals {
  float inv_sum[2];
  float lse[2];
};

template <class Config, bool kApproximate>
__device__ __forceinline__ Sm90RowTotals sm90_finalize_rows(const OnlineSoftmaxRows& softmax,
                                                            const AttentionParams& params,
                                                            const Sm90Tile& tile) {
  Sm90RowTotals totals;
  softmax.finalize<Config::Element::kPOffsetLog2, kApproximate>(totals.inv_sum, totals.lse);
  if constexpr (Config::kDType == DType::kFloat8E4M3) {  // P V was taken on V as stored
    const float v_descale = params.v_descale_of(tile.batch, params.kv_head_of(tile.head));
    totals.inv_sum[0] *= v_descale;
    totals.inv_sum[1] *= v_descale;
  }
  return totals;
}

// Rows with Config::kTotalsUnderPv: the row totals and lse (a split writes its partial lse
// beside its O instead), taken right after the tile's last P V is issued, with the approximate
// reciprocal and log2, so that the quad sums, the MUFU work, the lse stores and their parameter
// loads run under that P V (docs/kernels.md, runs 170-176). Other rows take them in the
// epilogue, after the P V.
template <class Config, class Layout>
__device__ __forceinline__ Sm90RowTotals sm90_row_totals(const OnlineSoftmaxRows& softmax,
                                                         const AttentionParams& params,
                                                         const Sm90KvSplit& kv_split,
                                                         const Sm90Tile& tile, int slab_row_begin,
                                                         int thread_in_warpgroup) {
  static_assert(Config::kTotalsUnderPv, "the other rows take their totals in sm90_epilogue");
  const Sm90SlabRows rows =
      Sm90SlabRows::of<Config, Layout>(params, tile, thread_in_warpgroup);
  const Sm90RowTotals totals =
      sm90_finalize_rows<Config, /*kApproximate=*/true>(softmax, params, tile);
  sm90_write_lse(totals.lse, params, tile.head, tile.batch, slab_row_begin, rows,
                 sm90_writes_split<Config>(kv_split));
  return totals;
}

// `early`: sm90_row_totals' for rows with Config::kTotalsUnderPv; unread otherwise.
template <DType kDType, class Config, class Layout, int kOAccRegs>
__device__ __forceinline__ void sm90_epilogue(float (&o)[kOAccRegs],
                                              const OnlineSoftmaxRows& softmax,
                                              const Sm90RowTotals& early,
                                              uint8_t* o_staging, const CUtensorMap* map_o,
                                              const AttentionParams& params,
                                              const Sm90KvSplit& kv_split, const Sm90Tile& tile,
                                              int slab_row_begin, int consumer,
                                              int thread_in_warpgroup,
                                              const Sm90QRelease& release) {
  const int head = tile.head, batch = tile.batch;
  const Sm90SlabRows rows = Sm90SlabRows::of<Config, Layout>(params, tile, thread_in_warpgroup);
  const int lane = rows.lane, row0 = rows.row0;
  const int group_shift = rows.group_shift, query_rows = rows.query_rows;

  const Sm90RowTotals totals =
      Config::kTotalsUnderPv ? early
                             : sm90_finalize_rows<Config, /*kApproximate=*/false>(softmax, params,
                                                                                  tile);
  const float(&inv_sum)[2] = totals.inv_sum;
  const float(&lse)[2] = totals.lse;
  scale_rows(o, inv_sum);

  // A split writes partial results instead of out and lse; the staging and hand-back below run
  // as for any tile (minus the store), so the barrier protocol does not depend on the split.
  const bool writes_split = sm90_writes_split<Config>(kv_split);
  if constexpr (Config::kPacksGroups) {
    if (writes_split) {
      sm90_write_split<Config>(o, lse, params, kv_split, tile, slab_row_begin, row0, lane,
                               group_shift, query_rows);
    }
  }

  if constexpr (!Config::kTotalsUnderPv) {
    sm90_write_lse(lse, params, head, batch, slab_row_begin, rows, writes_split);
  }

  // A slab that crosses the end of a packed sequence: its rows past the end belong to the next
  // sequence, so its O goes out through ordinary stores bounded by this one (not TMA's).
  // O with no staging buffer (Sm90OStaging::kRegisters) goes out that way too, and
  // nothing of shared memory is used: Q went back after the last S = Q K^T.
  constexpr bool kFromRegisters = Config::kPersistentOStaging == Sm90OStaging::kRegisters;
  bool bounded_store = !writes_split && Layout::o_rows_overrun(params) &&
                       slab_row_begin + Config::kRowsPerConsumer > query_rows;
  if constexpr (kFromRegisters) bounded_store = !writes_split;
  if (bounded_store) {
    sm90_store_o_rows<kDType>(o, params, tile, slab_row_begin, row0, lane, group_shift,
                              query_rows);
  }
  if constexpr (kFromRegisters) return;

  if (release.stages_o_in_own_buffer()) {  // the previous tile's O store must have read it
    if (thread_in_warpgroup == 0) tma_store_wait_reads();
    named_barrier_sync(sm90_epilogue_barrier(consumer), Config::kThreadsPerWarpgroup);
  }
  sm90_trace(Sm90Event::kOStagingFree);
#pragma unroll
  for (int chunk = 0; chunk < kOAccRegs / kAccRegsPerChunk; ++chunk) {
    const int col = kAccChunkColumns * chunk + kAccPairColumns * (lane % kAccLanesPerRow);
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const uint32_t offset = swizzled_offset<Config::kRowsPerConsumer>(row0 + 8 * r, col);
      *reinterpret_cast<uint32_t*>(o_staging + offset) =
          pack_pair<kDType>(o[acc_reg(chunk, r, 0)], o[acc_reg(chunk, r, 1)]);
    }
  }
  fence_proxy_async_shared();  // the TMA store reads what these ordinary stores wrote
  named_barrier_sync(sm90_epilogue_barrier(consumer), Config::kThreadsPerWarpgroup);
  sm90_trace(Sm90Event::kOStaged);
  const bool stores = sm90_slab_has_rows<Config>(slab_row_begin, query_rows) && !writes_split &&
                      !bounded_store;
  if constexpr (kSm90ProducerStoresO<Config, Layout>) {
    if (release.stages_o_in_v_ring()) {
      // The producer stores it (producer.cuh): this thread describes the store and hands the
      // stage over, and the consumer starts its next tile.
      if (thread_in_warpgroup == 0) {
        *release.o_store_slot =
            stores ? Sm90OStoreSlot{sm90_slab_o_at<Layout>(params, tile, slab_row_begin,
                                                           group_shift),
                                    1}
                   : Sm90OStoreSlot{};
        mbarrier_arrive(release.o_free);  // release: the slot and the staged O
      }
      return;
    }
  }
  if (thread_in_warpgroup == 0) {
    if (stores) {
      sm90_store_o_slab<Config>(map_o, o_staging, params,
                                sm90_slab_o_at<Layout>(params, tile, slab_row_begin, group_shift));
    }
    if (release.q_empty == nullptr) {
      tma_store_wait_all();  // the CTA's shared memory must outlive the reads of the store
    } else if (release.staging_read_barrier() != nullptr) {
      tma_store_wait_reads();  // then the buffer may take the next tile's Q or V
    }  // own buffer: the next epilogue waits for the reads, the kernel's end for the writes
  }
  if (Config::kLoneStoreWait && release.stages_o_in_v_ring()) {
    // Every thread arrives at once but the storing one, which arrives once the store has read the
    // stage: o_free completes then, and the others start the next tile meanwhile.
    mbarrier_arrive(release.o_free);
    return;
  }
  if (uint64_t* read_barrier = release.staging_read_barrier()) {
    // Every thread learns that the store has read the buffer, then hands it back itself.
    named_barrier_sync(sm90_epilogue_barrier(consumer), Config::kThreadsPerWarpgroup);
    mbarrier_arrive(read_barrier);
  }
}

// The general kernel's epilogue policy: how a consumer ends a tile (kDType: the output type),
// after row_totals under its last P V where the row takes them there (kTotalsUnderPv). O
// goes out through its own staging buffer, or a V stage once every reader of the V there is done
// (persistent CTAs, which hand Q back early), else through the consumer's Q slab, or (FP8 with V
// stages smaller than O) from registers; then the Q phase moves on. `state.ring` is already past
// the tile's last V.
template <DType kDType, class Config, class Layout>
struct Sm90Epilogue {
__device__ __forceinline__ static Sm90RowTotals row_totals(const OnlineSoftmaxRows& softmax,
                                                            const AttentionParams& params,
                                                            const Sm90KvSplit& kv_split,
                                                            const Sm90Tile& tile,
                                                            int slab_row_begin,
                                                            int thread_in_warpgroup) {
  return sm90_row_totals<Config, Layout>(softmax, params, kv_split, tile, slab_row_begin,
                                         thread_in_warpgroup);
}

template <int kOAccRegs>
__device__ __forceinline__ static void store(float (&o)[kOAccRegs],
                                                 const OnlineSoftmaxRows& softmax,
                                                 const Sm90RowTotals& totals,
                                                 const Sm90SmemLayout<Config>& smem,
                                                 const CUtensorMap* map_o,
                                                 const AttentionParams& params,
                                                 const Sm90KvSplit& kv_split,
                                                 const Sm90Tile& tile, int slab_row_begin,
                                                 int consumer, int thread_in_warpgroup,
                                                 Sm90TileLoopState<Config::kStages>& state,
                                                 const Sm90QRelease& release) {
  uint8_t* staging = smem.q_slab(consumer);
  if (release.stages_o_in_v_ring()) {
    const Sm90VStaging<Config::kStages> v_staging(state.ring, consumer);
    mbarrier_wait_parity(smem.v_load_empty(v_staging.stage), v_staging.read_parity);
    staging = smem.v_tile(v_staging.stage);
  } else if (release.stages_o_in_own_buffer()) {
    staging = smem.o_staging(consumer);
  }
  sm90_epilogue<kDType, Config, Layout>(o, softmax, totals, staging, map_o, params, kv_split, tile,
                                slab_row_begin, consumer, thread_in_warpgroup, release);
  state.q_phase ^= 1;
}
};

}  // namespace flashcore::detail
