// Merge step of split-KV (Sm90KvSplit): each split of a query row left its O, normalized by its
// own row sum, and its lse (natural log) in the workspace. The row's softmax over all keys is
//   lse = log(sum_i exp(lse_i)),   out = sum_i exp(lse_i - lse) * O_i,
// since exp(lse_i) is split i's row sum of exp(s - 0). A split whose keys the row cannot see has
// lse_i = -inf and weight 0; a row that sees no key at all gets out = 0 and lse = -inf, as the
// kernel writes for it unsplit.
//
// No second kernel: a split launch runs one tile (one split of a tile) per CTA, and when a
// consumer warpgroup has written its slab's partial rows and left the tile loop, it counts the
// split in the slab's arrival counter. The warpgroup that arrives last (all other splits' rows
// are written by then) merges the slab's rows into out and lse. After the loop, not in the
// epilogue: nothing of the merge is live across the main loop (inlined into the epilogue, the
// d256 kernel spilled there). A combine kernel launched after the attention kernel took 4.7 us of
// the 15.6 / 18.8 / 34.6 us of a batch-1 decode call at 1k / 4k / 16k keys on the H100 (ncu).
#pragma once

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "common/params.h"
#include "cuda/common/numeric.cuh"
#include "cuda/ptx/named_barrier.cuh"
#include "cuda/sm90/pipeline.cuh"

namespace flashcore::detail {

// The arrival counter of `consumer`'s slab of `tile` (a packed tile: head is the KV head),
// the same for every split of the tile.
template <class Config>
__device__ __forceinline__ unsigned long long* sm90_split_arrival(const AttentionParams& params,
                                                                  const Sm90KvSplit& kv_split,
                                                                  const Sm90Tile& tile,
                                                                  int consumer) {
  const int64_t tile_index =
      (int64_t(tile.batch) * params.heads_kv + tile.head) * sm90_m_blocks<Config>(params) +
      tile.m_block;
  return kv_split.arrivals + tile_index * Config::kConsumerWarpgroups + consumer;
}

// Counts this warpgroup's split of its slab as done once all 128 threads have written their
// partial rows. True in every thread of the warpgroup that arrives last, which may then read
// every split's rows: the CUDA programming guide's last-block pattern (each writer fences before
// the count, the last one fences after reading it).
// The counter needs no zeroing before the launch (a memset node cost more than the merge saved
// in CUDA graphs): it holds the launch's tag above the count (Sm90KvSplit::arrival_tag), and a
// word with another tag, whatever the workspace held, counts as no arrival yet. The last
// arrival sets the word back to 0, so a graph replaying this launch with its tag starts from 0.
__device__ __forceinline__ bool sm90_arrive_split_last(unsigned long long* arrival,
                                                       const Sm90KvSplit& kv_split,
                                                       uint32_t barrier_id,
                                                       int thread_in_warpgroup) {
  constexpr uint32_t kWarpgroupThreads = 128;
  __threadfence();  // this thread's partial rows reach the device before the count does
  named_barrier_sync(barrier_id, kWarpgroupThreads);
  bool last = false;
  if (thread_in_warpgroup == 0) {
    const unsigned long long tagged_zero = kv_split.arrival_tag << kSm90ArrivalCountBits;
    unsigned long long seen = *reinterpret_cast<volatile unsigned long long*>(arrival);
    unsigned long long before;
    do {
      before = seen;
      const bool this_launch = (before >> kSm90ArrivalCountBits) == kv_split.arrival_tag;
      seen = atomicCAS(arrival, before, (this_launch ? before : tagged_zero) + 1);
    } while (seen != before);
    const bool this_launch = (before >> kSm90ArrivalCountBits) == kv_split.arrival_tag;
    const unsigned long long earlier = this_launch ? before - tagged_zero : 0;
    last = earlier == static_cast<unsigned long long>(kv_split.splits - 1);
    if (last) atomicExch(arrival, 0ull);
  }
  last = named_barrier_sync_or(barrier_id, kWarpgroupThreads, last);
  if (last) __threadfence();
  return last;
}

// The last split of a consumer slab merges its rows: 128 threads, kMergeColumns adjacent
// columns of a row per thread and step. The splits go in batches of kMergeBatch whose lse and O
// loads are all issued before any is used (a split at a time waited for the L2 once per load),
// with a running maximum across batches. Loads bypass L1 (__ldcg): other SMs wrote them.
constexpr int kMergeColumns = 4;
constexpr int kMergeBatch = 16;  // one round for up to 16 splits; nothing else is live here

template <DType kDType, class Config>
__device__ __forceinline__ void sm90_merge_splits(const AttentionParams& params,
                                                  const Sm90KvSplit& kv_split,
                                                  const Sm90Tile& tile, int slab_row_begin,
                                                  int query_rows, int group_shift,
                                                  int thread_in_warpgroup) {
  static_assert(kSm90BoxCols % kMergeColumns == 0, "head_dim must split into merge chunks");
  const int row_begin = slab_row_begin > 0 ? slab_row_begin : 0;
  const int slab_end = slab_row_begin + Config::kRowsPerConsumer;
  const int row_end = slab_end < query_rows ? slab_end : query_rows;
  const int chunks = params.head_dim / kMergeColumns;  // head_dim is a multiple of 8
  const int items = (row_end - row_begin) * chunks;
  const int64_t split_stride = kv_split.row(params, 1, 0, 0, 0);  // partial rows of one split
  for (int item = thread_in_warpgroup; item < items; item += Config::kThreadsPerWarpgroup) {
    const int row = row_begin + item / chunks;
    const int col = item % chunks * kMergeColumns;
    const int head_q = (tile.head << group_shift) + (row & ((1 << group_shift) - 1));
    const int position = row >> group_shift;
    const int64_t first_row = kv_split.row(params, 0, tile.batch, head_q, position);

    float max_lse = -INFINITY, sum = 0.0f, acc[kMergeColumns] = {};
    for (int first = 0; first < kv_split.splits; first += kMergeBatch) {
      float lse_of[kMergeBatch], o_of[kMergeBatch][kMergeColumns];
#pragma unroll
      for (int j = 0; j < kMergeBatch; ++j) {
        const bool exists = first + j < kv_split.splits;
        const int64_t partial_row = first_row + (first + j) * split_stride;
        const float* o_j = kv_split.o_partial + partial_row * params.head_dim + col;
        lse_of[j] = exists ? __ldcg(kv_split.lse_partial + partial_row) : -INFINITY;
#pragma unroll
        for (int c = 0; c < kMergeColumns; ++c) o_of[j][c] = exists ? __ldcg(o_j + c) : 0.0f;
      }
      float batch_max = max_lse;
#pragma unroll
      for (int j = 0; j < kMergeBatch; ++j) batch_max = fmaxf(batch_max, lse_of[j]);
      if (batch_max == -INFINITY) continue;  // no split so far saw a key of this row
      const float rescale = expf(max_lse - batch_max);  // 0 while max_lse is -inf
      sum *= rescale;
#pragma unroll
      for (int c = 0; c < kMergeColumns; ++c) acc[c] *= rescale;
#pragma unroll
      for (int j = 0; j < kMergeBatch; ++j) {
        const float weight = expf(lse_of[j] - batch_max);  // 0 for a split that saw no key
        sum += weight;
#pragma unroll
        for (int c = 0; c < kMergeColumns; ++c) acc[c] += weight * o_of[j][c];
      }
      max_lse = batch_max;
    }
    const float inv_sum = sum > 0.0f ? 1.0f / sum : 0.0f;  // no key at all: out = 0
    element_t<kDType>* out = static_cast<element_t<kDType>*>(params.out) +
                             params.o_offset(tile.batch, position, head_q) + col;
#pragma unroll
    for (int c = 0; c < kMergeColumns; c += 2) {
      *reinterpret_cast<uint32_t*>(out + c) =
          pack_pair<kDType>(acc[c] * inv_sum, acc[c + 1] * inv_sum);
    }
    if (params.lse != nullptr && col == 0) {
      params.lse[params.lse_offset(tile.batch, head_q, position)] =
          sum > 0.0f ? max_lse + logf(sum) : -INFINITY;
    }
  }
}

// A consumer's end of a split launch: its slab of the CTA's tile (the tile order's index
// blockIdx.x: one per CTA, sm90_kv_split_plan) counts its split, and the last one merges.
// `barrier_id` is the consumer's own named barrier (its 128 threads only).
template <DType kDType, class Config>
__device__ __forceinline__ void sm90_finish_split(const AttentionParams& params,
                                                  const Sm90KvSplit& kv_split,
                                                  const Sm90Tile& tile, int consumer,
                                                  uint32_t barrier_id, int thread_in_warpgroup) {
  const int group_shift = sm90_group_shift<Config>(params);
  const int query_rows = sm90_query_rows(params, tile.batch, group_shift);
  const int slab_row_begin = sm90_slab_row_begin<Config>(tile, consumer);
  if (!sm90_slab_has_rows<Config>(slab_row_begin, query_rows)) return;  // nothing to merge
  unsigned long long* arrival = sm90_split_arrival<Config>(params, kv_split, tile, consumer);
  if (sm90_arrive_split_last(arrival, kv_split, barrier_id, thread_in_warpgroup)) {
    sm90_merge_splits<kDType, Config>(params, kv_split, tile, slab_row_begin, query_rows,
                                      group_shift, thread_in_warpgroup);
  }
}

}  // namespace flashcore::detail
