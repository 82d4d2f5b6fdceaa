// The consumer math of the Hopper kernels, shared by the general kernel's consumers
// (consumer_overlap.cuh) and the decode kernel: the two GEMMs of a KV block, the query rows a
// thread's accumulators hold, and the step between the GEMMs (mask, online softmax, P).
//   S = Q K^T   wgmma SS, both K-major
//   O += P V    wgmma RS, P from registers, V MN-major (16-bit) or V^T K-major (FP8: the
//               producer warpgroup transposes V in shared memory, v_transpose.cuh)
#pragma once

#include "cuda/common/accumulator_layout.h"
#include "cuda/common/mask.cuh"
#include "cuda/common/numeric.cuh"
#include "cuda/ptx/mbarrier.cuh"
#include "cuda/ptx/wgmma.cuh"
#include "cuda/sm90/pipeline.cuh"
#include "cuda/sm90/smem_layout.cuh"
#include "cuda/sm90/softmax.cuh"

namespace flashcore::detail {

// What the 16-bit and FP8 consumer math share: the accumulator sizes and S = Q K^T, whose
// operands are K-major for every element type.
template <class Config, class GemmS_>
struct Sm90ConsumerMathBase {
  static constexpr int kHeadDim = Config::kHeadDim;
  static constexpr int kBlockN = Config::kBlockN;
  static constexpr int kSAccRegs = kBlockN / 2;
  static constexpr int kOAccRegs = Config::kComputedHeadDim / 2;  // O's columns past it: padding
  static constexpr int kWgmmaK = Config::Element::kWgmmaK;
  static constexpr int kPSteps = kBlockN / kWgmmaK;  // K-steps of O += P V
  static constexpr bool kStepped = Config::kStepDescriptors;  // smem_descriptor.cuh
  using GemmS = GemmS_;

  // Issues S = Q K^T (not waited for), over the Config::kComputedHeadDim columns that are not
  // zero-filled padding.
  __device__ __forceinline__ static void issue_qk(float (&s)[kSAccRegs], uint32_t q_slab,
                                                  uint32_t k_tile) {
    wgmma_fence();
#pragma unroll
    for (int k = 0; k < Config::kComputedHeadDim / kWgmmaK; ++k) {
      GemmS::ss(s, kmajor_descriptor<Config::kRowsPerConsumer, kStepped>(q_slab, k),
                kmajor_descriptor<kBlockN, kStepped>(k_tile, k), k > 0 ? 1 : 0);
    }
    wgmma_commit_group();
  }
};

template <DType kDType, class Config>
struct Sm90ConsumerMath
    : Sm90ConsumerMathBase<Config, WgmmaM64K16<kDType, Config::kBlockN>> {
  using Base = Sm90ConsumerMathBase<Config, WgmmaM64K16<kDType, Config::kBlockN>>;
  using Base::kBlockN;
  using Base::kOAccRegs;
  using Base::kPSteps;
  static_assert(Base::kWgmmaK == 16, "the generated wgmma wrappers are k16 (16-bit inputs)");
  using GemmO = WgmmaM64K16<kDType, Config::kHeadDim>;
  static constexpr int kTransposeV = 1;  // V is [keys][head_dim]: MN-major as the B operand

  // Issues O += P V (not waited for).
  __device__ __forceinline__ static void issue_pv(float (&o)[kOAccRegs],
                                                  const uint32_t (&p)[kPSteps][4],
                                                  uint32_t v_tile) {
    wgmma_fence();
#pragma unroll
    for (int k = 0; k < kPSteps; ++k) {
      GemmO::template rs<kTransposeV>(
          o, p[k], mnmajor_descriptor<kBlockN, Base::kStepped>(v_tile, k), 1);
    }
    wgmma_commit_group();
  }

  // The factor of S = Q K^T into base-2 softmax units (16-bit inputs: the scale alone).
  __device__ __forceinline__ static float scale_log2(const AttentionParams& params,
                                                     const Sm90Tile& /*tile*/) {
    return params.softmax_scale_log2;
  }
};

// FP8 (e4m3, m64nNk32): S = Q K^T on the stored bytes, with the descales folded into the
// softmax scale; P rounded to e4m3 in the permuted key order that V^T is written in
// (v_transpose.cuh); O += P V^T with B K-major. v_descale multiplies O in the epilogue.
template <class Config>
struct Sm90ConsumerMath<DType::kFloat8E4M3, Config>
    : Sm90ConsumerMathBase<Config, WgmmaM64K32E4M3<Config::kBlockN>> {
  using Base = Sm90ConsumerMathBase<Config, WgmmaM64K32E4M3<Config::kBlockN>>;
  using Base::kOAccRegs;
  using Base::kPSteps;
  static_assert(Base::kWgmmaK == 32, "e4m3 wgmma is k32");
  // O holds the computed columns only (the epilogue's loops follow the register count, and the
  // O store drops the padding columns it never wrote).
  using GemmO = WgmmaM64K32E4M3<Config::kComputedHeadDim>;

  // vt_tile: Config::kVtRows (the computed head_dim) rows of BLOCK_N keys, K-major
  // (kmajor_descriptor's 32-byte steps are the k32 steps over the keys).
  __device__ __forceinline__ static void issue_pv(float (&o)[kOAccRegs],
                                                  const uint32_t (&p)[kPSteps][4],
                                                  uint32_t vt_tile) {
    wgmma_fence();
#pragma unroll
    for (int k = 0; k < kPSteps; ++k) {
      GemmO::rs(o, p[k], kmajor_descriptor<Config::kVtRows, Base::kStepped>(vt_tile, k), 1);
    }
    wgmma_commit_group();
  }

  __device__ __forceinline__ static float scale_log2(const AttentionParams& params,
                                                     const Sm90Tile& tile) {
    const int kv_head = params.kv_head_of(tile.head);
    return params.softmax_scale_log2 * params.q_descale_of(tile.batch, kv_head) *
           params.k_descale_of(tile.batch, kv_head);
  }
};

// The query rows this consumer thread's accumulators hold (the wgmma layout: rows warp * 16 +
// lane / 4 and + 8, columns 2 * (lane % 4) + {0, 1} of every 8) and how far each row may look.
template <class Config, class Layout, bool kCausal>
struct Sm90ThreadRows {
  int slab_row_begin;  // first query row of this consumer's 64-row slab
  int lane_col;        // this thread's first column within each group of 8
  int col_limit[2];    // one past the last visible key column of its two rows

  __device__ __forceinline__ Sm90ThreadRows(const AttentionParams& params, const Sm90Tile& tile,
                                            int consumer, int thread_in_warpgroup) {
    const int lane = thread_in_warpgroup % 32;
    slab_row_begin = sm90_slab_row_begin<Config>(tile, consumer);
    const int row0 = slab_row_begin + (thread_in_warpgroup / 32) * 16 + lane / 4;
    const MaskPolicy<kCausal> mask = sm90_tile_mask<kCausal, Layout>(params, tile);
    const int group_shift = sm90_group_shift<Config>(params);  // see sm90_group_shift
    col_limit[0] = mask.col_limit(sm90_row_position(row0, group_shift));
    col_limit[1] = mask.col_limit(sm90_row_position(row0 + 8, group_shift));
    lane_col = kAccPairColumns * (lane % kAccLanesPerRow);
  }
};

// The first KV block whose columns this warp's 16 rows must mask. The rows' column limits grow
// down the warp, so blocks before the one holding its first row's limit are visible to all of
// them: in a causal tile the warps below the first row's diagonal block skip its mask (a 128-row
// d256 tile spans two or three blocks of 80 columns). Config::kWarpMaskStart says where that
// pays; elsewhere, and without a causal mask, the tile's first masked block.
template <class Config, class Layout, bool kCausal>
__device__ __forceinline__ int sm90_warp_first_masked(
    const Sm90ThreadRows<Config, Layout, kCausal>& rows, const KvTileRange& kv_tiles) {
  if constexpr (!kCausal || !Config::kWarpMaskStart) return kv_tiles.first_masked;
  // Lane 0 holds the warp's first row.
  const int warp_col_limit = __shfl_sync(0xffffffff, rows.col_limit[0], 0);
  const int first = warp_col_limit > 0 ? warp_col_limit / Config::kBlockN : 0;
  return first > kv_tiles.first_masked ? first : kv_tiles.first_masked;
}

// The online softmax of a tile row's scores with the configuration's choices: the element type's
// P offset, the row's FMA-pipe exponentials and how many of row 0's come first (softmax.cuh).
template <class Config, int kAccRegs>
__device__ __forceinline__ bool sm90_softmax_update(OnlineSoftmaxRows& softmax,
                                                    float (&s)[kAccRegs], float scale_log2,
                                                    float (&correction)[2],
                                                    float allowance = 0.0f) {
  return softmax.template update<Config::Element::kPOffsetLog2, Config::kFmaExpPeriod,
                                 Config::kRow0FirstChunks>(s, scale_log2, correction, allowance);
}

// Between S = Q K^T of KV block `n_block` and its P V, for consumers that take the blocks in turn
// (the decode kernel): the mask where the block needs it, the online softmax, O rescaled by the
// moved maxima, and P as the A fragments of P V.
template <DType kDType, class Config, class Layout, bool kCausal, int kSAccRegs, int kOAccRegs,
          int kPSteps>
__device__ __forceinline__ void sm90_scores_to_p(float (&s)[kSAccRegs], float (&o)[kOAccRegs],
                                                 uint32_t (&p)[kPSteps][4],
                                                 OnlineSoftmaxRows& softmax,
                                                 const Sm90ThreadRows<Config, Layout, kCausal>& rows,
                                                 const KvTileRange& kv_tiles, int n_block,
                                                 float scale_log2) {
  if (n_block >= kv_tiles.first_masked) {
    mask_columns(s, n_block * Config::kBlockN + rows.lane_col, rows.col_limit[0],
                 rows.col_limit[1]);
  }
  float correction[2];
  sm90_softmax_update<Config>(softmax, s, scale_log2, correction);
  scale_rows(o, correction);
  accumulator_to_a_fragments<kDType>(s, p);
}

}  // namespace flashcore::detail
