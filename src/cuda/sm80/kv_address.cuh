// Where the sm80 kernel finds the K/V rows of a tile: the one policy its load path takes,
// chosen at launch (a template parameter of the kernel, not a copy of it).
//
//   Sm80KvAddress<false>  evenly strided rows: dense [batch, seqlen_k, ...], varlen (packed
//                         [total_k, ...]) and a contiguous kv cache. Row r of (sequence, kv head)
//                         is head + r * row_stride, head = k_offset(batch, 0, kv_head), so a
//                         tile is one base pointer (the dense path as it always was).
//   Sm80KvAddress<true>   a paged cache: row r lives in page page_table[b][r / page_size], so
//                         rows are contiguous only within a page. head = the kv head's column
//                         of page 0's first slot; each tile adds kv_row_base (the accessor that
//                         clamps the page index into the cache). When page_size is a multiple
//                         of the tile height a tile lies in one page: one lookup per tile.
//                         Otherwise every row looks up its own page (page size 1 to kRows).
//
// Both keep the loader's promise: rows at or past valid_rows (the sequence's end) are
// zero-filled in shared memory (cp.async src-size 0), their pages are never looked up and their
// slots never read, so NaN in unused slots and pages cannot reach the output (P V multiplies
// a zero V row by P = 0, never a stale or NaN one).
#pragma once

#include <cstdint>

#include "common/params.h"
#include "cuda/sm80/smem_tile.cuh"

namespace flashcore::detail {

// Issues cp.async for a kRows x kHeadDim tile of a paged tensor: tile row i is key first_row + i
// of sequence `batch`, found through the page table. Rows >= valid_rows (>= 1) are zero-filled
// with `head` (a valid address) as their unread source. Copy plan and swizzle as
// load_tile_async.
template <int kRows, int kHeadDim, int kThreads, typename Element>
__device__ __forceinline__ void load_paged_rows_async(uint32_t smem_tile, const Element* head,
                                                      int64_t page_stride, int64_t row_stride,
                                                      const AttentionParams& params, int batch,
                                                      int first_row, int valid_rows) {
  using Layout = SwizzledRows<kHeadDim>;
  using Plan = TileCopyPlan<kHeadDim, kThreads>;
  static_assert(kRows % Plan::kRowsPerPass == 0, "whole passes per tile");
  static_assert(Plan::kRowsPerPass % 8 == 0, "swizzle phase must repeat every pass");
  const int tid = thread_index_unhoisted();
  if (Plan::kActiveThreads < kThreads && tid >= Plan::kActiveThreads) return;
  const int row = tid / Plan::kThreadsPerRow;
  const int chunk = tid % Plan::kThreadsPerRow;
  const uint32_t smem_thread = smem_tile + Layout::byte_offset(row, chunk);
  const Element* column = head + chunk * Layout::kChunkElems;
  // Four passes' page lookups in flight at once: fully unrolled, the eight of a d64 tile (128
  // rows, 16 per pass) spill at the 255-register limit of the causal kernel.
#pragma unroll 4
  for (int pass = 0; pass < kRows / Plan::kRowsPerPass; ++pass) {
    const int tile_row = row + pass * Plan::kRowsPerPass;
    const bool valid = tile_row < valid_rows;
    const Element* src =
        valid ? column + params.kv_row_base(batch, first_row + tile_row, page_stride, row_stride)
              : head;
    cp_async_16_zfill(smem_thread + pass * Plan::kRowsPerPass * Layout::kRowBytes, src, valid);
  }
}

template <bool kPaged>
struct Sm80KvAddress;

template <>
struct Sm80KvAddress<false> {
  // Offset of row 0 of (batch, kv_head) in K (or V, with V's strides).
  __device__ __forceinline__ static int64_t head_offset(const AttentionParams& params, bool is_v,
                                                        int batch, int kv_head) {
    return is_v ? params.v_offset(batch, 0, kv_head) : params.k_offset(batch, 0, kv_head);
  }
  // Loads tile `tile` (rows tile * kRows ..) of the head that starts at `head`.
  template <int kRows, int kHeadDim, int kThreads, typename Element>
  __device__ __forceinline__ static void load_tile(uint32_t smem_tile, const Element* head,
                                                   int64_t /*page_stride*/, int64_t row_stride,
                                                   const AttentionParams& /*params*/,
                                                   int /*batch*/, int tile, int valid_rows) {
    load_tile_async<kRows, kHeadDim, kThreads>(
        smem_tile, head + static_cast<int64_t>(tile) * kRows * row_stride, row_stride,
        valid_rows);
  }
};

template <>
struct Sm80KvAddress<true> {
  // The kv head's column of page 0, slot 0: pages and slots are added per tile or row.
  __device__ __forceinline__ static int64_t head_offset(const AttentionParams& params, bool is_v,
                                                        int /*batch*/, int kv_head) {
    return kv_head * (is_v ? params.v_head_stride : params.k_head_stride);
  }
  template <int kRows, int kHeadDim, int kThreads, typename Element>
  __device__ __forceinline__ static void load_tile(uint32_t smem_tile, const Element* head,
                                                   int64_t page_stride, int64_t row_stride,
                                                   const AttentionParams& params, int batch,
                                                   int tile, int valid_rows) {
    const int first_row = tile * kRows;
    if (params.page_size % kRows == 0) {
      // Tiles start at multiples of kRows, pages at multiples of page_size: the tile's rows
      // share first_row's page, evenly strided from its slot.
      load_tile_async<kRows, kHeadDim, kThreads>(
          smem_tile, head + params.kv_row_base(batch, first_row, page_stride, row_stride),
          row_stride, valid_rows);
    } else {
      load_paged_rows_async<kRows, kHeadDim, kThreads>(smem_tile, head, page_stride, row_stride,
                                                       params, batch, first_row, valid_rows);
    }
  }
};

}  // namespace flashcore::detail
