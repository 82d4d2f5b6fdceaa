// A tile of rows x head_dim 16-bit elements in shared memory, swizzled so that the accesses of
// the kernel are free of bank conflicts, and the cp.async loader that fills it from global.
//
// Why this swizzle: every ldmatrix phase reads one 16-byte chunk from each of 8 consecutive
// rows (rows r0..r0+7, r0 a multiple of 8) at the same logical chunk index c. Shared memory has
// 32 banks of 4 bytes, i.e. 8 chunk slots of 16 bytes per 128-byte line, so the 8 reads are
// conflict-free iff their addresses fall in 8 different chunk slots (address / 16 mod 8).
//   - head_dim 64/128/256 (8, 16, 32 chunks per row, a multiple of 8): the row start is a multiple
//     of 128 bytes, so slot = physical chunk mod 8; storing chunk c at c ^ (r mod 8) gives the 8
//     rows 8 different slots. The XOR only flips the low 3 bits, so chunks stay inside the row.
//   - head_dim 96 (12 chunks = 192 bytes per row): row r starts at slot 4 (r mod 2), so
//     slot = 4 (r mod 2) + physical chunk mod 8. Storing chunk c at c ^ ((r / 2) mod 4) makes the
//     low 2 bits distinct across row pairs and bit 2 distinct within a pair: 8 slots again. XOR
//     with a value < 4 stays inside c's aligned group of 4, so chunks 8..11 stay in 8..11.
// The epilogue's 4-byte stores (rows g = 0..7 of a fragment, same chunk, 4 lanes per chunk)
// hit the same 8 distinct slots, and the 16-byte cp.async writes cover whole 128-byte lines.
#pragma once

#include <cstdint>

#include "cuda/ptx/cp_async.cuh"
#include "cuda/sm80/compiler_hints.cuh"

namespace flashcore::detail {

template <int kHeadDim>
struct SwizzledRows {
  static constexpr int kChunkElems = 8;  // 16-byte chunk of 16-bit elements: the cp.async size
  static constexpr int kChunks = kHeadDim / kChunkElems;
  static constexpr int kRowBytes = kHeadDim * 2;
  static_assert(kChunks % 8 == 0 || kChunks == 12, "swizzle derived for 8k or 12 chunks per row");

  __device__ __forceinline__ static int chunk_xor(int row) {
    if constexpr (kChunks % 8 == 0) {
      return row & 7;
    } else {
      return (row >> 1) & 3;
    }
  }
  // Byte offset of logical chunk `chunk` of `row` from the start of the tile.
  __device__ __forceinline__ static uint32_t byte_offset(int row, int chunk) {
    return row * kRowBytes + ((chunk ^ chunk_xor(row)) << 4);
  }
};

// How the threads of a CTA cover a tile for 16-byte copies: kThreadsPerRow consecutive threads
// take the chunks of one row (so each warp reads whole 128-byte segments), kRowsPerPass rows per
// pass, with kRowsPerPass a power of two so it divides every tile height. With 12 chunks per row
// (head_dim 96) 128 threads do not tile evenly: 96 threads copy 8 rows per pass, the rest idle.
template <int kHeadDim, int kThreads>
struct TileCopyPlan {
  static constexpr int kThreadsPerRow = SwizzledRows<kHeadDim>::kChunks;
  static constexpr int kRowsPerPass = [] {
    int rows = 1;
    while (rows * 2 * kThreadsPerRow <= kThreads) rows *= 2;
    return rows;
  }();
  static constexpr int kActiveThreads = kRowsPerPass * kThreadsPerRow;
};

// Issues cp.async for a kRows x kHeadDim tile starting at `gmem_tile` (row stride in elements);
// rows >= valid_rows (>= 1) are zero-filled with their source clamped to the tile's first row.
// Per chunk this is one 64-bit pointer add, one compare and one LDGSTS.
template <int kRows, int kHeadDim, int kThreads, typename Element>
__device__ __forceinline__ void load_tile_async(uint32_t smem_tile, const Element* gmem_tile,
                                                int64_t row_stride, int valid_rows) {
  using Layout = SwizzledRows<kHeadDim>;
  using Plan = TileCopyPlan<kHeadDim, kThreads>;
  static_assert(kRows % Plan::kRowsPerPass == 0, "whole passes per tile");
  const int tid = thread_index_unhoisted();
  if (Plan::kActiveThreads < kThreads && tid >= Plan::kActiveThreads) return;
  const int row = tid / Plan::kThreadsPerRow;
  const int chunk = tid % Plan::kThreadsPerRow;
  // The swizzle depends on row mod 8, and passes advance by a multiple of 8 rows whenever
  // kRowsPerPass >= 8 (all head dims here), so one swizzled offset serves every pass.
  static_assert(Plan::kRowsPerPass % 8 == 0, "swizzle phase must repeat every pass");
  const uint32_t smem_thread = smem_tile + Layout::byte_offset(row, chunk);
  const Element* src = gmem_tile + row * row_stride + chunk * Layout::kChunkElems;
  const int64_t pass_stride = Plan::kRowsPerPass * unhoisted(row_stride);
  const int rows_left = valid_rows - row;  // compared with compile-time pass offsets below
#pragma unroll
  for (int pass = 0; pass < kRows / Plan::kRowsPerPass; ++pass) {
    const bool valid = pass * Plan::kRowsPerPass < rows_left;
    cp_async_16_zfill(smem_thread + pass * Plan::kRowsPerPass * Layout::kRowBytes,
                      valid ? src : gmem_tile, valid);
    src += pass_stride;
  }
}

// Copies a kRows x kHeadDim tile from shared memory to global with 16-byte coalesced stores,
// skipping rows >= valid_rows. The caller synchronizes the CTA before calling.
template <int kRows, int kHeadDim, int kThreads, typename Element>
__device__ __forceinline__ void store_tile(Element* gmem_tile, int64_t row_stride,
                                           const unsigned char* smem_tile, int valid_rows,
                                           int tid) {
  using Layout = SwizzledRows<kHeadDim>;
  using Plan = TileCopyPlan<kHeadDim, kThreads>;
  static_assert(kRows % Plan::kRowsPerPass == 0, "whole passes per tile");
  if (Plan::kActiveThreads < kThreads && tid >= Plan::kActiveThreads) return;
  const int row = tid / Plan::kThreadsPerRow;
  const int chunk = tid % Plan::kThreadsPerRow;
  const unsigned char* smem_thread = smem_tile + Layout::byte_offset(row, chunk);
  Element* dst = gmem_tile + row * row_stride + chunk * Layout::kChunkElems;
  const int64_t pass_stride = Plan::kRowsPerPass * row_stride;
#pragma unroll
  for (int pass = 0; pass < kRows / Plan::kRowsPerPass; ++pass) {
    if (row + pass * Plan::kRowsPerPass < valid_rows) {
      *reinterpret_cast<uint4*>(dst) = *reinterpret_cast<const uint4*>(
          smem_thread + pass * Plan::kRowsPerPass * Layout::kRowBytes);
    }
    dst += pass_stride;
  }
}

}  // namespace flashcore::detail
