// Online softmax over mma.sync accumulator fragments, in base 2 with the softmax scale folded in.
//
// A thread holds, per 16-row mma tile i, two rows: g and g + 8 (g = lane / 4), each spread over
// the 4 lanes of a quad (t = lane % 4) as column pairs 2t, 2t+1 of every n8 block. Row maxima
// are reduced across the quad with two xor shuffles; row sums stay per thread (each lane sums
// its own columns, all lanes of a quad apply the same rescale) and are reduced once at the end.
#pragma once

#include <math_constants.h>

#include "cuda/common/mask.cuh"
#include "cuda/common/numeric.cuh"

namespace flashcore::detail {

__device__ __forceinline__ float quad_max(float x) {
  x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 1));
  return fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 2));
}
__device__ __forceinline__ float quad_sum(float x) {
  x += __shfl_xor_sync(0xffffffffu, x, 1);
  return x + __shfl_xor_sync(0xffffffffu, x, 2);
}

// Sets S elements that the mask hides to -inf. `tile_row0` is the global query row of the
// warp's first row, `tile_col0` the global key column of the tile's first column.
template <bool kCausal, int kMTiles, int kSBlocks>
__device__ __forceinline__ void apply_mask(float (&s)[kMTiles][kSBlocks][4],
                                           const MaskPolicy<kCausal>& mask, int tile_row0,
                                           int tile_col0, int lane) {
  const int g = lane >> 2, t = lane & 3;
#pragma unroll
  for (int i = 0; i < kMTiles; ++i) {
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int row = tile_row0 + 16 * i + g + 8 * half;
      const int limit = mask.col_limit(row) - tile_col0;  // visible columns: [0, limit)
#pragma unroll
      for (int n = 0; n < kSBlocks; ++n) {
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          if (8 * n + 2 * t + e >= limit) s[i][n][2 * half + e] = -CUDART_INF_F;
        }
      }
    }
  }
}

template <int kMTiles>
struct OnlineSoftmax {
  float row_max[kMTiles][2];  // running max of the raw (unscaled) scores; -inf before any key
  float row_sum[kMTiles][2];  // this lane's part of sum exp2((s - row_max) * scale_log2)

  __device__ __forceinline__ OnlineSoftmax() {
#pragma unroll
    for (int i = 0; i < kMTiles; ++i) {
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        row_max[i][half] = -CUDART_INF_F;
        row_sum[i][half] = 0.0f;
      }
    }
  }

  // Turns the scores s of one KV tile into unnormalized probabilities in place, updates the
  // running max and sum, and rescales the O accumulator rows by exp2(old_max - new_max).
  template <int kSBlocks, int kOBlocks>
  __device__ __forceinline__ void update(float (&s)[kMTiles][kSBlocks][4],
                                         float (&acc_o)[kMTiles][kOBlocks][4],
                                         float scale_log2) {
#pragma unroll
    for (int i = 0; i < kMTiles; ++i) {
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        float tile_max = row_max[i][half];
#pragma unroll
        for (int n = 0; n < kSBlocks; ++n) {
          tile_max = fmaxf(tile_max, fmaxf(s[i][n][2 * half], s[i][n][2 * half + 1]));
        }
        const float new_max = quad_max(tile_max);
        // A row that has seen no visible key keeps max -inf; subtracting 0 instead makes every
        // exp2 give 0 (not NaN from -inf - -inf).
        const float base = new_max == -CUDART_INF_F ? 0.0f : new_max * scale_log2;
        const float rescale = exp2_approx(row_max[i][half] * scale_log2 - base);
        row_max[i][half] = new_max;
        float sum = 0.0f;
#pragma unroll
        for (int n = 0; n < kSBlocks; ++n) {
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            const float p = exp2_approx(fmaf(s[i][n][2 * half + e], scale_log2, -base));
            s[i][n][2 * half + e] = p;
            sum += p;
          }
        }
        row_sum[i][half] = fmaf(row_sum[i][half], rescale, sum);
#pragma unroll
        for (int d = 0; d < kOBlocks; ++d) {
          acc_o[i][d][2 * half] *= rescale;
          acc_o[i][d][2 * half + 1] *= rescale;
        }
      }
    }
  }

  // Finishes the row sums across the quad. Afterwards row_sum holds the full sum per row.
  __device__ __forceinline__ void reduce_sums() {
#pragma unroll
    for (int i = 0; i < kMTiles; ++i) {
#pragma unroll
      for (int half = 0; half < 2; ++half) row_sum[i][half] = quad_sum(row_sum[i][half]);
    }
  }

  // 1 / sum, or 0 for a row with no visible key (its O accumulator is 0 and must stay 0).
  __device__ __forceinline__ float inverse_sum(int i, int half) const {
    const float sum = row_sum[i][half];
    return sum > 0.0f ? 1.0f / sum : 0.0f;
  }

  // Natural-log log-sum-exp of the scaled scores: max * scale + log(sum); -inf with no key.
  __device__ __forceinline__ float lse(int i, int half, float softmax_scale) const {
    const float sum = row_sum[i][half];
    if (row_max[i][half] == -CUDART_INF_F || !(sum > 0.0f)) return -CUDART_INF_F;
    return row_max[i][half] * softmax_scale + logf(sum);
  }
};

}  // namespace flashcore::detail
