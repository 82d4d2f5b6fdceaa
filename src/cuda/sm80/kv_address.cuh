// Where the sm80 kernel finds the K/V rows of a tile: the one policy its load path takes,
// chosen at launch (a template parameter of the kernel, not a copy of it).
//
//   Sm80KvAddress<false>  evenly strided rows: dense [batch, seqlen_k, ...], varlen (packed
//                         [total_k, ...]) and a contiguous kv cache. Row r of (sequence, kv head)
//                         is head + r * row_stride, head = k_offset(batch, 0, kv_head), so a
//                         tile is one base pointer (the dense path as it always was).
//   Sm80KvAddress<true>   a paged cache: row r lives in page page_table[b][r / page_size], so
//                         rows are contiguous only within a page. head = the kv head's column
//                         of page 0's first slot; each tile or row adds its page and slot
//                         (paged_row_offset, which clamps the page into the cache as
//                         kv_row_base does), the page-table entries staged in shared memory
//                         one tile ahead. When page_size is a
//                         multiple of the tile height a tile lies in one page: one entry per
//                         tile. Otherwise every row finds its own (page size 1 to kRows).
//
// Both keep the loader's promise: rows at or past valid_rows (the sequence's end) are
// zero-filled in shared memory (cp.async src-size 0), their pages are never looked up and their
// slots never read, so NaN in unused slots and pages cannot reach the output (P V multiplies
// a zero V row by P = 0, never a stale or NaN one).
#pragma once

#include <cstdint>

#include "common/params.h"
#include "cuda/ptx/cp_async.cuh"
#include "cuda/ptx/ldmatrix.cuh"
#include "cuda/sm80/smem_tile.cuh"

namespace flashcore::detail {

// Row `row` (< the sequence's length) of a paged tensor, its page taken from `page`, the raw
// page-table entry: clamped into the cache as AttentionParams::kv_row_base clamps it.
__device__ __forceinline__ int64_t paged_row_offset(const AttentionParams& params, int32_t page,
                                                    int row, int64_t page_stride,
                                                    int64_t row_stride) {
  const int clamped = AttentionParams::clamp_int(page, 0, params.num_pages - 1);
  return clamped * page_stride + (row % params.page_size) * row_stride;
}

// Issues cp.async for a kRows x kHeadDim tile of a paged tensor: tile row i is key first_row + i,
// in page pages[(first_row + i) / page_size - first_row / page_size] (the tile's page-table
// entries, staged in shared memory). Rows >= valid_rows (>= 1) are zero-filled with `head` (a
// valid address) as their unread source. Copy plan and swizzle as load_tile_async.
template <int kRows, int kHeadDim, int kThreads, typename Element>
__device__ __forceinline__ void load_paged_rows_async(uint32_t smem_tile, const Element* head,
                                                      int64_t page_stride, int64_t row_stride,
                                                      const AttentionParams& params,
                                                      const int32_t* pages, int first_row,
                                                      int valid_rows) {
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
  const int first_page = first_row / params.page_size;
  // Four passes' addresses at once: fully unrolled, d64 causal spilled at the 255-register limit.
#pragma unroll 4
  for (int pass = 0; pass < kRows / Plan::kRowsPerPass; ++pass) {
    const int tile_row = row + pass * Plan::kRowsPerPass;
    const bool valid = tile_row < valid_rows;
    const int key = first_row + tile_row;
    const Element* src =
        valid ? column + paged_row_offset(params, pages[key / params.page_size - first_page], key,
                                          page_stride, row_stride)
              : head;
    cp_async_16_zfill(smem_thread + pass * Plan::kRowsPerPass * Layout::kRowBytes, src, valid);
  }
}

template <bool kPaged>
struct Sm80KvAddress;

template <>
struct Sm80KvAddress<false> {
  // Shared memory the policy needs past the kernel's tiles.
  template <int kRows>
  static constexpr int kStageBytes = 0;

  // Offset of row 0 of (batch, kv_head) in K (or V, with V's strides).
  __device__ __forceinline__ static int64_t head_offset(const AttentionParams& params, bool is_v,
                                                        int batch, int kv_head) {
    return is_v ? params.v_offset(batch, 0, kv_head) : params.k_offset(batch, 0, kv_head);
  }
  // Before the first tile's loads, and one tile ahead of the loads: nothing to stage.
  template <int kRows, int kThreads>
  __device__ __forceinline__ static void stage_first(const AttentionParams&, int, int, int,
                                                     int32_t*) {}
  template <int kRows, int kThreads>
  __device__ __forceinline__ static void stage_next(const AttentionParams&, int, int, int,
                                                    int32_t*) {}
  // Loads tile `tile` (rows tile * kRows ..) of the head that starts at `head`.
  template <int kRows, int kHeadDim, int kThreads, typename Element>
  __device__ __forceinline__ static void load_tile(uint32_t smem_tile, const Element* head,
                                                   int64_t /*page_stride*/, int64_t row_stride,
                                                   const AttentionParams& /*params*/,
                                                   const int32_t* /*stage*/, int tile,
                                                   int valid_rows) {
    load_tile_async<kRows, kHeadDim, kThreads>(
        smem_tile, head + static_cast<int64_t>(tile) * kRows * row_stride, row_stride,
        valid_rows);
  }
};

// A paged tile's page-table entries come from shared memory, copied there (cp.async) with the
// tile before: a decode CTA has one tile of lookahead, and a page-table read per row in the
// load's own path put its latency on every tile (page 16 ran at half the contiguous speed).
// Two slots of kRows entries, by tile parity: tile t's entries are copied while tile t + 1's V
// loads, read by K_t's and V_t's loads, and overwritten (by tile t - 2's) only after both.
template <>
struct Sm80KvAddress<true> {
  template <int kRows>
  static constexpr int kStageBytes = 2 * kRows * int(sizeof(int32_t));

  // The kv head's column of page 0, slot 0: pages and slots are added per tile or row.
  __device__ __forceinline__ static int64_t head_offset(const AttentionParams& params, bool is_v,
                                                        int /*batch*/, int kv_head) {
    return kv_head * (is_v ? params.v_head_stride : params.k_head_stride);
  }

  // Copies the page-table entries of tile `tile`'s rows below seqlen_k (a visited tile starts
  // below it) into its slot; one entry per thread, never past the sequence's last page (which
  // lies inside the table: seqlen_k <= table width x page_size).
  template <int kRows, int kThreads>
  __device__ __forceinline__ static void stage_next(const AttentionParams& params, int batch,
                                                    int tile, int seqlen_k, int32_t* stage) {
    static_assert(kRows <= kThreads, "one entry per thread covers a page-1 tile");
    const int first_row = tile * kRows;
    const int end_row = first_row + kRows < seqlen_k ? first_row + kRows : seqlen_k;
    const int first_page = first_row / params.page_size;
    const int entries = (end_row - 1) / params.page_size - first_page + 1;
    const int tid = thread_index_unhoisted();
    if (tid < entries) {
      cp_async_4(shared_address(stage + (tile & 1) * kRows + tid),
                 params.page_table + batch * params.page_table_stride + first_page + tid);
    }
  }
  // The first tile's entries, before its K load: copied and waited for (the CTA's one exposed
  // page-table latency).
  template <int kRows, int kThreads>
  __device__ __forceinline__ static void stage_first(const AttentionParams& params, int batch,
                                                     int tile, int seqlen_k, int32_t* stage) {
    stage_next<kRows, kThreads>(params, batch, tile, seqlen_k, stage);
    cp_async_commit();
    cp_async_wait_group<0>();
    __syncthreads();
  }

  template <int kRows, int kHeadDim, int kThreads, typename Element>
  __device__ __forceinline__ static void load_tile(uint32_t smem_tile, const Element* head,
                                                   int64_t page_stride, int64_t row_stride,
                                                   const AttentionParams& params,
                                                   const int32_t* stage, int tile,
                                                   int valid_rows) {
    const int32_t* pages = stage + (tile & 1) * kRows;
    const int first_row = tile * kRows;
    if (params.page_size % kRows == 0) {
      // Tiles start at multiples of kRows, pages at multiples of page_size: the tile's rows
      // share first_row's page, evenly strided from its slot.
      load_tile_async<kRows, kHeadDim, kThreads>(
          smem_tile, head + paged_row_offset(params, pages[0], first_row, page_stride, row_stride),
          row_stride, valid_rows);
    } else {
      load_paged_rows_async<kRows, kHeadDim, kThreads>(smem_tile, head, page_stride, row_stride,
                                                       params, pages, first_row, valid_rows);
    }
  }
};

}  // namespace flashcore::detail
