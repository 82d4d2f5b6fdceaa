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
#include <cstdint>

#include "cuda/common/accumulator_layout.h"
#include "cuda/common/mask.cuh"
#include "cuda/common/numeric.cuh"
#include "cuda/ptx/schedule.cuh"

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

// Sets to -inf the elements whose key column is >= the row's limit. `first_col` is the key index
// of this thread's first column in the tile (tile start + 2*(lane%4)). The visible columns of
// each row are a prefix of the thread's (thread_columns_before), so the mask is that prefix as
// the low bits of a word, tested bit by bit: ptxas moves the word into predicates seven bits at
// a time (R2P), one FSEL per element where a compare per element took an ISETP and an FSEL.
template <int kAccRegs>
__device__ __forceinline__ void mask_columns(float (&s)[kAccRegs], int first_col, int limit_r0,
                                             int limit_r1) {
  constexpr int kColumnsPerRow = kAccRegs / 2;  // half the registers hold each of the two rows
  constexpr int kWordBits = 32;
  const int limits[2] = {limit_r0, limit_r1};
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int visible = thread_columns_before(limits[r] - first_col);
#pragma unroll
    for (int word = 0; word * kWordBits < kColumnsPerRow; ++word) {
      const int in_word = max(visible - kWordBits * word, 0);
      // The low min(in_word, 32) bits set: the funnel shift clamps its count at 32.
      const uint32_t visible_bits = __funnelshift_lc(0xffffffffu, 0u, in_word);
#pragma unroll
      for (int bit = 0; bit < kWordBits && kWordBits * word + bit < kColumnsPerRow; ++bit) {
        const int j = kWordBits * word + bit;  // the thread's j-th column of the row
        if (!(visible_bits & (1u << bit))) {
          s[acc_reg(j / kAccPairColumns, r, j % kAccPairColumns)] = kNegInfinity;
        }
      }
    }
  }
}

// Lazy rescaling (FA4's): a row's scores may rise up to an allowance (log2 units; the element
// type's kStaleMaxLog2, tile_config.h) above the max its probabilities are taken against before
// that max moves and O is rescaled. Rows whose max stays put, the common case after the first KV
// steps, skip the correction and O's multiplies (the consumer skips them for a whole warp when
// none of its rows moved). Probabilities then reach at most 2^allowance times their eager bound
// (16 bits: 2^8, far from fp32 overflow; e4m3: below its 448), and finalize() uses the same max.
// Not free in precision: rounded to 16 bits, P above 1 carries more error into O than P just
// below 1, where the eager max puts the largest term (exactly 1); the errors stay inside the
// accuracy rule (docs/kernels.md has the figures). Likewise in e4m3, where a stale max moves a
// row's largest P off 256, its exact value, to a rounded one (docs/kernels.md, run 257).
// A consumer takes the KV tiles last first, and the last tile can hold a single key (257 = 2 x
// 128 + 1; also the causal diagonal's first rows): the max it sets says little about the row, and
// a lazy max from the second tile on let fp16 fail the rule. So the second tile's max is exact
// too (allowance 0 at step 1); GpuSm90TileRows tests that case for every row of the table.
struct OnlineSoftmaxRows {
  float row_max[2] = {kNegInfinity, kNegInfinity};
  float row_sum[2] = {0.0f, 0.0f};  // this thread's columns only; quad-reduced in finalize()

  // Turns the scores `s` into probabilities in place and returns, per row, the factor by which the
  // O accumulator (and the running sum) must be rescaled (1 when the max did not move), and
  // whether any of this thread's rows moved.
  // `allowance`: how far the scores may rise above the row's max before it moves (0: eager,
  // the element type's kStaleMaxLog2: lazy).
  // kPOffsetLog2: the probabilities are taken as exp2(s - max + kPOffsetLog2), in
  // [0, 2^kPOffsetLog2] (FP8: Sm90ElementTraits); O and the sum carry the same factor, which
  // finalize() takes out of lse and which cancels in O / l.
  // kFmaExpPeriod: one 4-score chunk in kFmaExpPeriod takes its exponentials on the FMA pipe
  // (exp2_fma) instead of MUFU.EX2; 0: none.
  // kRow0FirstChunks > 0: row 0's max and the exponentials of its first kRow0FirstChunks chunks
  // end a basic block (basic_block_end) before row 1's max, so the exponentials start once row 0's
  // max is known and row 1's FMNMX issue between them. Otherwise ptxas takes both rows' maxima
  // before the first exponential.
  template <int kPOffsetLog2 = 0, int kFmaExpPeriod = 0, int kRow0FirstChunks = 0, int kAccRegs>
  __device__ __forceinline__ bool update(float (&s)[kAccRegs], float scale_log2,
                                         float (&correction)[2], float allowance = 0.0f) {
    constexpr int kChunks = kAccRegs / 4;
    static_assert(kRow0FirstChunks >= 0 && kRow0FirstChunks <= kChunks, "row 0's first chunks");
    // A row's thread max from four partial maxima, so the reduction is a short tree, not one
    // chain of kChunks dependent FMNMX.
    constexpr int kPartials = 4;
    static_assert(kChunks >= kPartials, "BLOCK_N must be at least 32");
    const auto thread_max = [&](int r) {
      float partial[kPartials];
#pragma unroll
      for (int i = 0; i < kPartials; ++i) {
        partial[i] = fmaxf(s[4 * i + 2 * r], s[4 * i + 2 * r + 1]);
      }
#pragma unroll
      for (int chunk = kPartials; chunk < kChunks; ++chunk) {
        const int i = chunk % kPartials;
        partial[i] = fmaxf(partial[i], fmaxf(s[4 * chunk + 2 * r], s[4 * chunk + 2 * r + 1]));
      }
      return fmaxf(fmaxf(partial[0], partial[1]), fmaxf(partial[2], partial[3]));
    };
    float subtrahend[2];
    bool moved = false;
    // Row r's max over the quad, the correction of what it had, and what its exponents subtract.
    const auto take_max = [&](int r, float max_of_thread) {
      const float new_max = quad_max(max_of_thread) * scale_log2;
      // -inf + 8 = -inf: a row that had seen no visible key moves to the first finite max.
      const bool move = new_max > row_max[r] + allowance;
      const float used_max = move ? new_max : row_max[r];
      subtrahend[r] = used_max == kNegInfinity ? 0.0f : used_max - kPOffsetLog2;
      correction[r] = move ? exp2_approx(row_max[r] - subtrahend[r] - kPOffsetLog2)  // 0 from -inf
                           : 1.0f;
      row_max[r] = used_max;
      row_sum[r] *= correction[r];
      moved = moved || move;
    };
    // Element e of chunk `chunk` (row e / 2) to its probability.
    const auto exponential = [&](int chunk, int e) {
      const int r = e / 2;
      const float x = fmaf(s[4 * chunk + e], scale_log2, -subtrahend[r]);
      float p = 0.0f;
      if constexpr (kFmaExpPeriod > 0) {
        p = chunk % kFmaExpPeriod == kFmaExpPeriod - 1 ? exp2_fma(x) : exp2_approx(x);
      } else {
        p = exp2_approx(x);
      }
      s[4 * chunk + e] = p;
      row_sum[r] += p;
    };
    if constexpr (kRow0FirstChunks > 0) {
      take_max(0, thread_max(0));
#pragma unroll
      for (int chunk = 0; chunk < kRow0FirstChunks; ++chunk) {
        exponential(chunk, 0);
        exponential(chunk, 1);
      }
      // opaque_false() read here, one CS2R a step: a `never` read once a tile and held across the
      // steps spilled a consumer register in the d256 step (ptxas -v).
      basic_block_end(opaque_false(), row_sum[0]);
      take_max(1, thread_max(1));
#pragma unroll
      for (int chunk = 0; chunk < kChunks; ++chunk) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          if (e >= 2 || chunk >= kRow0FirstChunks) exponential(chunk, e);
        }
      }
    } else {
      // Both rows' maxima before any exponential, their partial maxima in one loop: the rows
      // without the switch keep the SASS they were measured with.
      float partial[2][kPartials];
#pragma unroll
      for (int i = 0; i < kPartials; ++i) {
        partial[0][i] = fmaxf(s[4 * i], s[4 * i + 1]);
        partial[1][i] = fmaxf(s[4 * i + 2], s[4 * i + 3]);
      }
#pragma unroll
      for (int chunk = kPartials; chunk < kChunks; ++chunk) {
        const int i = chunk % kPartials;
        partial[0][i] = fmaxf(partial[0][i], fmaxf(s[4 * chunk], s[4 * chunk + 1]));
        partial[1][i] = fmaxf(partial[1][i], fmaxf(s[4 * chunk + 2], s[4 * chunk + 3]));
      }
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        take_max(r, fmaxf(fmaxf(partial[r][0], partial[r][1]),
                          fmaxf(partial[r][2], partial[r][3])));
      }
#pragma unroll
      for (int chunk = 0; chunk < kChunks; ++chunk) {
#pragma unroll
        for (int e = 0; e < 4; ++e) exponential(chunk, e);
      }
    }
    return moved;
  }

  // Per row: the factor that normalizes O (0 for a row with no visible key, so out = 0) and the
  // log-sum-exp in natural-log units (-inf for such a row); kPOffsetLog2 as update() took it.
  // kApproximate: the reciprocal and log2 on the special-function unit, one MUFU each and no
  // branch, where IEEE division and logf take dozens of instructions behind a slow-path branch
  // (docs/kernels.md, run 170); a visible row's sum is at least 1, inside both bounds.
  template <int kPOffsetLog2 = 0, bool kApproximate = false>
  __device__ __forceinline__ void finalize(float (&inv_sum)[2], float (&lse)[2]) const {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const float sum = quad_sum(row_sum[r]);
      const bool any_visible = sum > 0.0f;
      if constexpr (kApproximate) {
        inv_sum[r] = any_visible ? reciprocal_approx(sum) : 0.0f;
        lse[r] = any_visible ? (row_max[r] - kPOffsetLog2 + log2_approx(sum)) * kLn2
                             : kNegInfinity;
      } else {
        inv_sum[r] = any_visible ? 1.0f / sum : 0.0f;
        lse[r] = any_visible ? (row_max[r] - kPOffsetLog2) * kLn2 + logf(sum) : kNegInfinity;
      }
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
