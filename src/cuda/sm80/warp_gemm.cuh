// The two warp-level products of the attention mainloop on mma.sync.m16n8k16:
//   S = Q K^T   (A = Q rows from shared memory, B = K rows from shared memory, both ldmatrix)
//   O += P V    (A = P straight from the S accumulator registers, B = V via ldmatrix.trans)
// A warp owns kMTiles 16-row tiles; each B fragment loaded from shared memory feeds kMTiles
// mmas, which is what keeps shared-memory bandwidth below the tensor-core rate.
#pragma once

#include <cstdint>

#include "common/params.h"
#include "cuda/common/numeric.cuh"
#include "cuda/ptx/ldmatrix.cuh"
#include "cuda/ptx/mma_sync.cuh"
#include "cuda/sm80/smem_tile.cuh"

namespace flashcore::detail {

// Per-lane row and chunk of an ldmatrix.x4 over a 16x16 block (two 16-byte chunks wide).
//   "row-split" order (A operand, and V for ldmatrix.trans): matrices = (rows 0-7, chunk 0),
//   (rows 8-15, chunk 0), (rows 0-7, chunk 1), (rows 8-15, chunk 1): registers a0..a3 of an A
//   fragment, or b0,b1 of n-block 0 then b0,b1 of n-block 1 for the transposed V.
//   "chunk-split" order (K as B operand): (rows 0-7, chunk 0), (rows 0-7, chunk 1),
//   (rows 8-15, chunk 0), (rows 8-15, chunk 1): b0,b1 of n-block 0 then b0,b1 of n-block 1.
__device__ __forceinline__ int ldsm_row_split_row(int lane) { return lane & 15; }
__device__ __forceinline__ int ldsm_row_split_chunk(int lane) { return lane >> 4; }
__device__ __forceinline__ int ldsm_chunk_split_row(int lane) {
  return (lane & 7) | ((lane >> 4) << 3);
}
__device__ __forceinline__ int ldsm_chunk_split_chunk(int lane) { return (lane >> 3) & 1; }

// acc[i][n] += Q[warp_row0 + 16 i .., :] K[8 n .., :]^T over the whole head_dim.
template <DType kDType, class Shape, int kHeadDim>
__device__ __forceinline__ void warp_gemm_qk(float (&acc)[Shape::kMTiles][Shape::kSBlocks][4],
                                             uint32_t smem_q, uint32_t smem_k, int warp_row0) {
  using Layout = SwizzledRows<kHeadDim>;
  const int lane = thread_index_unhoisted() & 31;
  const int q_row = warp_row0 + ldsm_row_split_row(lane);
  const int q_chunk = ldsm_row_split_chunk(lane);
  const int k_row = ldsm_chunk_split_row(lane);
  const int k_chunk = ldsm_chunk_split_chunk(lane);
#pragma unroll
  for (int step = 0; step < Shape::kQkSteps; ++step) {
    uint32_t q_frag[Shape::kMTiles][4];
#pragma unroll
    for (int i = 0; i < Shape::kMTiles; ++i) {
      ldmatrix_x4(q_frag[i], smem_q + Layout::byte_offset(q_row + 16 * i, 2 * step + q_chunk));
    }
#pragma unroll
    for (int pair = 0; pair < Shape::kSBlocks / 2; ++pair) {
      uint32_t k_frag[4];
      ldmatrix_x4(k_frag, smem_k + Layout::byte_offset(k_row + 16 * pair, 2 * step + k_chunk));
#pragma unroll
      for (int i = 0; i < Shape::kMTiles; ++i) {
        mma_m16n8k16_row_col_f32<kDType>(acc[i][2 * pair], q_frag[i], k_frag[0], k_frag[1]);
        mma_m16n8k16_row_col_f32<kDType>(acc[i][2 * pair + 1], q_frag[i], k_frag[2], k_frag[3]);
      }
    }
  }
}

// Rounds the probabilities (S's accumulator layout) to A fragments of the P V product: S
// n-blocks 2k and 2k+1 of a row tile form the A fragment of k-step k (see mma_sync.cuh). Done
// for the whole tile before the product so the fp32 scores die before the V loads start.
template <DType kDType, class Shape>
__device__ __forceinline__ void pack_p_fragments(
    uint32_t (&p_frag)[Shape::kMTiles][Shape::kPvSteps][4],
    const float (&p)[Shape::kMTiles][Shape::kSBlocks][4]) {
#pragma unroll
  for (int i = 0; i < Shape::kMTiles; ++i) {
#pragma unroll
    for (int step = 0; step < Shape::kPvSteps; ++step) {
      p_frag[i][step][0] = pack_pair<kDType>(p[i][2 * step][0], p[i][2 * step][1]);
      p_frag[i][step][1] = pack_pair<kDType>(p[i][2 * step][2], p[i][2 * step][3]);
      p_frag[i][step][2] = pack_pair<kDType>(p[i][2 * step + 1][0], p[i][2 * step + 1][1]);
      p_frag[i][step][3] = pack_pair<kDType>(p[i][2 * step + 1][2], p[i][2 * step + 1][3]);
    }
  }
}

// acc_o[i][d] += P[i] V[:, 8 d ..] with P given as A fragments (pack_p_fragments).
template <DType kDType, class Shape, int kHeadDim>
__device__ __forceinline__ void warp_gemm_pv(
    float (&acc_o)[Shape::kMTiles][Shape::kOBlocks][4],
    const uint32_t (&p_frag)[Shape::kMTiles][Shape::kPvSteps][4], uint32_t smem_v) {
  using Layout = SwizzledRows<kHeadDim>;
  const int lane = thread_index_unhoisted() & 31;
  const int v_row = ldsm_row_split_row(lane);
  const int v_chunk = ldsm_row_split_chunk(lane);
#pragma unroll
  for (int step = 0; step < Shape::kPvSteps; ++step) {
#pragma unroll
    for (int pair = 0; pair < Shape::kOBlocks / 2; ++pair) {
      uint32_t v_frag[4];
      ldmatrix_x4_trans(v_frag,
                        smem_v + Layout::byte_offset(v_row + 16 * step, 2 * pair + v_chunk));
#pragma unroll
      for (int i = 0; i < Shape::kMTiles; ++i) {
        mma_m16n8k16_row_col_f32<kDType>(acc_o[i][2 * pair], p_frag[i][step], v_frag[0], v_frag[1]);
        mma_m16n8k16_row_col_f32<kDType>(acc_o[i][2 * pair + 1], p_frag[i][step], v_frag[2],
                                         v_frag[3]);
      }
    }
  }
}

}  // namespace flashcore::detail
