// V rows past a sequence's keys, zeroed in shared memory before P V.
//
// The scores of keys past a sequence's end are masked to -inf, so their P is exactly 0, but
// 0 x NaN is NaN: where the loaded block can hold anything in those rows (a cache's unused slots,
// Sm90ServingLayout::kv_tail_may_hold_garbage), the warpgroup that multiplies by V first writes
// zeros over them. Every consumer warpgroup zeroes the rows itself before its own P V, so none
// depends on another's timing; two writing the same zeros at once is harmless. With V transposed
// (FP8) the consumers read V^T, and the transposer zeroes the raw rows before it transposes them
// (v_transpose.cuh).
#pragma once

#include <cstdint>

#include "common/params.h"
#include "cuda/ptx/fence.cuh"
#include "cuda/ptx/named_barrier.cuh"
#include "cuda/sm90/pipeline.cuh"
#include "cuda/sm90/smem_layout.cuh"

namespace flashcore::detail {

// Zeroes rows [first_row, kBlockN) of a V block (every 128-byte-swizzled column block: the
// swizzle moves 16-byte chunks only within their row, so writing a row's eight chunks clears it)
// by thread `thread` of kThreads, then makes the writes visible to the async proxy (wgmma, or the
// next TMA load into the stage) and waits for the kThreads threads on `barrier_id`.
template <class Config, int kThreads = Config::kThreadsPerWarpgroup>
__device__ __forceinline__ void sm90_zero_v_rows(uint8_t* v_block, int first_row, int thread,
                                                 uint32_t barrier_id) {
  constexpr int kChunkBytes = 16;
  constexpr int kChunksPerRow = kSwizzleBytes / kChunkBytes;
  constexpr int kColumnBlockBytes = Config::kBlockN * kSwizzleBytes;
  const int chunks = (Config::kBlockN - first_row) * kChunksPerRow;
  uint8_t* first = v_block + first_row * kSwizzleBytes;
#pragma unroll
  for (int block = 0; block < Config::kColumnBlocks; ++block) {
    for (int chunk = thread; chunk < chunks; chunk += kThreads) {
      *reinterpret_cast<uint4*>(first + block * kColumnBlockBytes + chunk * kChunkBytes) =
          make_uint4(0, 0, 0, 0);
    }
  }
  fence_proxy_async_shared();
  named_barrier_sync(barrier_id, kThreads);
}

// Keys of the tile's sequence in its KV block `n_block`: kBlockN when the block lies wholly
// inside the sequence, fewer in the block of its last key.
template <class Config, class Layout>
__device__ __forceinline__ int sm90_keys_in_block(const AttentionParams& params,
                                                  const Sm90Tile& tile, int n_block) {
  const int keys = sm90_tile_seqlen_k<Layout>(params, tile) - n_block * Config::kBlockN;
  return keys < Config::kBlockN ? keys : Config::kBlockN;
}

// The first row of V block `n_block` that holds no key of the tile's sequence and may hold
// anything, or kBlockN when none may: kBlockN for layouts that fill such rows with zeros (folded
// at compile time) and for blocks wholly inside the sequence (only the block of its last key
// has such rows).
template <class Config, class Layout>
__device__ __forceinline__ int sm90_v_garbage_row(const AttentionParams& params,
                                                  const Sm90Tile& tile, int n_block) {
  if (!Layout::kv_tail_may_hold_garbage(params)) return Config::kBlockN;
  return sm90_keys_in_block<Config, Layout>(params, tile, n_block);
}

// Zeroes the rows of V block `n_block` (at `v_block`) from sm90_v_garbage_row on, if any.
template <class Config, class Layout>
__device__ __forceinline__ void sm90_zero_v_past_keys(uint8_t* v_block,
                                                      const AttentionParams& params,
                                                      const Sm90Tile& tile, int n_block,
                                                      int thread_in_warpgroup,
                                                      uint32_t barrier_id) {
  const int first_row = sm90_v_garbage_row<Config, Layout>(params, tile, n_block);
  if (first_row == Config::kBlockN) return;
  sm90_zero_v_rows<Config>(v_block, first_row, thread_in_warpgroup, barrier_id);
}

}  // namespace flashcore::detail
