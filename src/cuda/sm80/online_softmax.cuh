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

// The base subtracted from a row's exponents: max * scale_log2, rounded once by an explicit
// multiply. Every use (the exponents, the rescale, the lse correction) must see this same
// rounded value; a plain product would let the compiler fuse it into a neighbouring FFMA in some
// places and not others, and with std-30 inputs (bases ~4e3, ulp 2.4e-4) those inconsistent
// roundings accumulated over the rescales to ~1.6e-3 of lse error.
__device__ __forceinline__ float exponent_base(float max, float scale_log2) {
  return __fmul_rn(max, scale_log2);
}

// Register budget: a thread has 2 * kMTiles rows, but the kernel sits at the 255-register limit.
// Every lane needs each row's max (to subtract it), so the maxima are replicated; the sums are
// not: each tile's partial sums are reduced across the quad at once (two shuffles per row), and
// lane t keeps only the running sum of row slot t mod (2 kMTiles) (slot = 2 i + half): one
// register instead of 2 kMTiles. (Distributing the maxima the same way measured worse: ptxas
// then spilled more, at d128 and d96.)
template <int kMTiles>
struct OnlineSoftmax {
  static constexpr int kRowSlots = 2 * kMTiles;
  static_assert(kRowSlots <= 4, "a quad has 4 lanes to hold the row state");

  float row_max_[kMTiles][2];  // running max of the raw (unscaled) scores; -inf before any key
  float owned_sum;             // running sum of exp2((s - max) * scale_log2) of the owned row

  __device__ __forceinline__ OnlineSoftmax() : owned_sum(0.0f) {
#pragma unroll
    for (int i = 0; i < kMTiles; ++i) {
#pragma unroll
      for (int half = 0; half < 2; ++half) row_max_[i][half] = -CUDART_INF_F;
    }
  }

  __device__ __forceinline__ static int owned_slot(int lane) { return (lane & 3) % kRowSlots; }
  __device__ __forceinline__ static int owner_lane(int lane, int i, int half) {
    return (lane & ~3) | (2 * i + half);
  }

  // Turns the scores s of one KV tile into unnormalized probabilities in place, updates the
  // running max and sum, and rescales the O accumulator rows by exp2(old_max - new_max).
  template <int kSBlocks, int kOBlocks>
  __device__ __forceinline__ void update(float (&s)[kMTiles][kSBlocks][4],
                                         float (&acc_o)[kMTiles][kOBlocks][4],
                                         float scale_log2, int lane) {
    const int slot = owned_slot(lane);
    float owned_rescale = 1.0f;
    float owned_tile_sum = 0.0f;
    float rescales[kMTiles][2];
#pragma unroll
    for (int i = 0; i < kMTiles; ++i) {
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const float old_max = row_max_[i][half];
        float tile_max = old_max;
#pragma unroll
        for (int n = 0; n < kSBlocks; ++n) {
          tile_max = fmaxf(tile_max, fmaxf(s[i][n][2 * half], s[i][n][2 * half + 1]));
        }
        const float new_max = quad_max(tile_max);
        // A row that has seen no visible key keeps max -inf; subtracting 0 instead makes every
        // exp2 give 0 (not NaN from -inf - -inf).
        const float base = new_max == -CUDART_INF_F ? 0.0f : exponent_base(new_max, scale_log2);
        // The earlier tiles' sum and O were accumulated against exponent_base(old_max), the same
        // rounded product (-inf before any key, giving rescale 0): the difference of two close
        // floats is exact, so the rescale carries no rounding of the ~1e3-magnitude bases.
        const float rescale = exp2_approx(exponent_base(old_max, scale_log2) - base);
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
        sum = quad_sum(sum);
        row_max_[i][half] = new_max;
        if (slot == 2 * i + half) {
          owned_rescale = rescale;
          owned_tile_sum = sum;
        }
        rescales[i][half] = rescale;
      }
    }
    owned_sum = fmaf(owned_sum, owned_rescale, owned_tile_sum);
#pragma unroll
    for (int i = 0; i < kMTiles; ++i) {
#pragma unroll
      for (int d = 0; d < kOBlocks; ++d) {
#pragma unroll
        for (int e = 0; e < 4; ++e) acc_o[i][d][e] *= rescales[i][e / 2];
      }
    }
  }

  __device__ __forceinline__ float row_max(int i, int half, int /*lane*/) const {
    return row_max_[i][half];
  }
  // The final sum of row (i, half), fetched from the owning lane. All lanes call it.
  __device__ __forceinline__ float row_sum(int i, int half, int lane) const {
    return __shfl_sync(0xffffffffu, owned_sum, owner_lane(lane, i, half));
  }

  // 1 / sum, or 0 for a row with no visible key (its O accumulator is 0 and must stay 0).
  __device__ __forceinline__ static float inverse_sum(float sum) {
    return sum > 0.0f ? __frcp_rn(sum) : 0.0f;
  }

  // Natural-log log-sum-exp of the scaled scores, -inf with no key. The sum holds
  // sum_j 2^(s_j * scale_log2 - base) with base = exponent_base(max) = max * scale_log2 - err;
  // fmaf recovers err exactly, so lse = max * scale + log(sum) - err * ln2 keeps the large
  // max * scale term in natural units with a single rounding (no trip through log2 units).
  __device__ __forceinline__ static float lse(float max, float sum, float softmax_scale,
                                              float scale_log2) {
    if (max == -CUDART_INF_F || !(sum > 0.0f)) return -CUDART_INF_F;
    const float base_error = fmaf(max, scale_log2, -exponent_base(max, scale_log2));
    return fmaf(max, softmax_scale, fmaf(-base_error, kLn2, logf(sum)));
  }
};

}  // namespace flashcore::detail
