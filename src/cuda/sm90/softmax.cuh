// Online softmax on a wgmma accumulator tile (64 rows x N columns per warpgroup).
//
// Each thread holds two rows, r0 = 16*warp + lane/4 and r1 = r0 + 8, and in each 8-column chunk i
// the columns 8i + 2*(lane%4) + {0,1} (see cuda/ptx/wgmma.cuh). A row is spread over the 4 lanes of
// a quad, so row reductions are two xor-shuffles (1 and 2).
//
// Everything is in base 2 with the scale folded in: row_max is max_j(s_j) * scale * log2(e), and
// p_j = exp2(s_j * scale_log2 - row_max), so one FFMA and one MUFU.EX2 per element. A row that has
// seen no visible key keeps row_max = -inf; the subtrahend is then 0 so that exp2(-inf) = 0 and no
// -inf - -inf = NaN appears.
#pragma once

#include <cmath>

#include "cuda/common/numeric.cuh"

namespace flashcore::detail {

constexpr float kNegInfinity = -INFINITY;

__device__ __forceinline__ float quad_max(float x) {
  x = fmaxf(x, __shfl_xor_sync(0xffffffff, x, 1));
  return fmaxf(x, __shfl_xor_sync(0xffffffff, x, 2));
}

__device__ __forceinline__ float quad_sum(float x) {
  x += __shfl_xor_sync(0xffffffff, x, 1);
  return x + __shfl_xor_sync(0xffffffff, x, 2);
}

// Sets to -inf the elements whose key column is >= the row's limit. `first_col` is the key index of
// this thread's first column in the tile (tile start + 2*(lane%4)).
template <int kAccRegs>
__device__ __forceinline__ void mask_columns(float (&s)[kAccRegs], int first_col, int limit_r0,
                                             int limit_r1) {
#pragma unroll
  for (int chunk = 0; chunk < kAccRegs / 4; ++chunk) {
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      const int col = first_col + 8 * chunk + e;
      if (col >= limit_r0) s[4 * chunk + e] = kNegInfinity;
      if (col >= limit_r1) s[4 * chunk + 2 + e] = kNegInfinity;
    }
  }
}

struct OnlineSoftmaxRows {
  float row_max[2] = {kNegInfinity, kNegInfinity};
  float row_sum[2] = {0.0f, 0.0f};  // this thread's columns only; quad-reduced in finalize()

  // Turns the scores `s` into probabilities in place and returns, per row, the factor by which the
  // O accumulator (and the running sum) must be rescaled.
  template <int kAccRegs>
  __device__ __forceinline__ void update(float (&s)[kAccRegs], float scale_log2,
                                         float (&correction)[2]) {
    float tile_max[2] = {kNegInfinity, kNegInfinity};
#pragma unroll
    for (int chunk = 0; chunk < kAccRegs / 4; ++chunk) {
      tile_max[0] = fmaxf(tile_max[0], fmaxf(s[4 * chunk], s[4 * chunk + 1]));
      tile_max[1] = fmaxf(tile_max[1], fmaxf(s[4 * chunk + 2], s[4 * chunk + 3]));
    }
    float subtrahend[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const float new_max = fmaxf(row_max[r], quad_max(tile_max[r]) * scale_log2);
      subtrahend[r] = new_max == kNegInfinity ? 0.0f : new_max;
      correction[r] = exp2_approx(row_max[r] - subtrahend[r]);  // 0 when row_max was -inf
      row_max[r] = new_max;
      row_sum[r] *= correction[r];
    }
#pragma unroll
    for (int chunk = 0; chunk < kAccRegs / 4; ++chunk) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int r = e / 2;
        const float p = exp2_approx(fmaf(s[4 * chunk + e], scale_log2, -subtrahend[r]));
        s[4 * chunk + e] = p;
        row_sum[r] += p;
      }
    }
  }

  // Per row: the factor that normalizes O (0 for a row with no visible key, so out = 0) and the
  // log-sum-exp in natural-log units (-inf for such a row).
  __device__ __forceinline__ void finalize(float (&inv_sum)[2], float (&lse)[2]) const {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const float sum = quad_sum(row_sum[r]);
      const bool any_visible = sum > 0.0f;
      inv_sum[r] = any_visible ? 1.0f / sum : 0.0f;
      lse[r] = any_visible ? row_max[r] * kLn2 + logf(sum) : kNegInfinity;
    }
  }
};

// O rows scaled by the per-row factors (O registers follow the accumulator layout).
template <int kAccRegs>
__device__ __forceinline__ void scale_rows(float (&o)[kAccRegs], const float (&factor)[2]) {
#pragma unroll
  for (int chunk = 0; chunk < kAccRegs / 4; ++chunk) {
    o[4 * chunk + 0] *= factor[0];
    o[4 * chunk + 1] *= factor[0];
    o[4 * chunk + 2] *= factor[1];
    o[4 * chunk + 3] *= factor[1];
  }
}

}  // namespace flashcore::detail
