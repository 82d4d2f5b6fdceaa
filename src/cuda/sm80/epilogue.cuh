// The forward epilogue: normalize O by the row sums, round to the element type, stage the tile
// in shared memory (so global stores are 16-byte and coalesced), store the rows that exist, and
// write the log-sum-exp of each row when the caller asked for it.
#pragma once

#include <cstdint>

#include "common/params.h"
#include "cuda/common/numeric.cuh"
#include "cuda/sm80/online_softmax.cuh"
#include "cuda/sm80/smem_tile.cuh"

namespace flashcore::detail {

// `smem_o` must hold kBlockM rows and be free of pending reads by other warps' *rows*: each
// warp writes only its own rows, so the caller needs no barrier before this call, only that no
// cp.async into that region is in flight.
template <DType kDType, class Shape, int kHeadDim>
__device__ __forceinline__ void write_output(
    const float (&acc_o)[Shape::kMTiles][Shape::kOBlocks][4],
    const OnlineSoftmax<Shape::kMTiles>& softmax, unsigned char* smem_o,
    const AttentionParams& params, int batch, int head, int m_begin, int seqlen_q, int warp_row0,
    int tid) {
  using Layout = SwizzledRows<kHeadDim>;
  using Element = element_t<kDType>;
  const int lane = tid & 31;
  const int g = lane >> 2, t = lane & 3;

  float row_sum[Shape::kMTiles][2];
  float row_max[Shape::kMTiles][2];
#pragma unroll
  for (int i = 0; i < Shape::kMTiles; ++i) {
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      row_sum[i][half] = softmax.row_sum(i, half, lane);
      row_max[i][half] = softmax.row_max(i, half, lane);
    }
  }

#pragma unroll
  for (int i = 0; i < Shape::kMTiles; ++i) {
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int row = warp_row0 + 16 * i + g + 8 * half;
      const float inv_sum = softmax.inverse_sum(row_sum[i][half]);
#pragma unroll
      for (int d = 0; d < Shape::kOBlocks; ++d) {
        // Column 8 d + 2t: chunk d, element 2t within it (4 bytes in).
        const uint32_t packed = pack_pair<kDType>(acc_o[i][d][2 * half] * inv_sum,
                                                  acc_o[i][d][2 * half + 1] * inv_sum);
        *reinterpret_cast<uint32_t*>(smem_o + Layout::byte_offset(row, d) + 4 * t) = packed;
      }
    }
  }

  if (params.lse != nullptr && t == 0) {
#pragma unroll
    for (int i = 0; i < Shape::kMTiles; ++i) {
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int row = m_begin + warp_row0 + 16 * i + g + 8 * half;
        if (row < seqlen_q) {
          params.lse[params.lse_offset(batch, head, row)] =
              OnlineSoftmax<Shape::kMTiles>::lse(row_max[i][half], row_sum[i][half],
                                                 params.softmax_scale,
                                                 params.softmax_scale_log2);
        }
      }
    }
  }

  __syncthreads();  // the coalesced store below reads rows written by other warps
  Element* out = static_cast<Element*>(params.out) + params.o_offset(batch, m_begin, head);
  store_tile<Shape::kBlockM, kHeadDim, Shape::kThreads>(out, params.o_row_stride, smem_o,
                                                       seqlen_q - m_begin, tid);
}

}  // namespace flashcore::detail
