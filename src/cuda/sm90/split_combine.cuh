// Combine step of split-KV (Sm90KvSplit): each split of a query row left its O, normalized by
// its own row sum, and its lse (natural log) in the workspace. The row's softmax over all keys is
//   lse = log(sum_i exp(lse_i)),   out = sum_i exp(lse_i - lse) * O_i,
// since exp(lse_i) is split i's row sum of exp(s - 0). A split whose keys the row cannot see has
// lse_i = -inf and weight 0; a row that sees no key at all gets out = 0 and lse = -inf, as the
// kernel writes for it unsplit.
//
// One warp per (batch, head, position) row: lanes reduce the splits' lse (at most 64, two per
// lane), then each lane sums the splits' O over its columns, so the reads of a split's row are
// coalesced. This reads splits x head_dim x 4 bytes per row: at decode sizes a few microseconds.
#pragma once

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "common/params.h"
#include "cuda/common/numeric.cuh"
#include "cuda/sm90/pipeline.cuh"

namespace flashcore::detail {

constexpr int kCombineWarpsPerBlock = 4;
constexpr int kCombineMaxSplitsPerLane = 2;  // kSm90MaxKvSplits over a warp
static_assert(kSm90MaxKvSplits <= 32 * kCombineMaxSplitsPerLane, "combine: too many splits");

template <DType kDType>
__global__ void __launch_bounds__(32 * kCombineWarpsPerBlock)
    sm90_combine_kv_splits(const __grid_constant__ AttentionParams params,
                           const Sm90KvSplit kv_split) {
  const int lane = threadIdx.x % 32;
  const int64_t row = int64_t(blockIdx.x) * kCombineWarpsPerBlock + threadIdx.x / 32;
  const int64_t rows = int64_t(params.batch) * params.heads_q * params.seqlen_q;
  if (row >= rows) return;
  const int position = static_cast<int>(row % params.seqlen_q);
  const int head = static_cast<int>(row / params.seqlen_q % params.heads_q);
  const int batch = static_cast<int>(row / params.seqlen_q / params.heads_q);

  float lse_of[kCombineMaxSplitsPerLane];
  float max_lse = -INFINITY;
#pragma unroll
  for (int i = 0; i < kCombineMaxSplitsPerLane; ++i) {
    const int split = lane + 32 * i;
    lse_of[i] = split < kv_split.splits
                    ? kv_split.lse_partial[kv_split.row(params, split, batch, head, position)]
                    : -INFINITY;
    max_lse = fmaxf(max_lse, lse_of[i]);
  }
  for (int offset = 16; offset > 0; offset /= 2)
    max_lse = fmaxf(max_lse, __shfl_xor_sync(0xffffffff, max_lse, offset));
  float sum = 0.0f;
  if (max_lse != -INFINITY) {
#pragma unroll
    for (int i = 0; i < kCombineMaxSplitsPerLane; ++i) sum += expf(lse_of[i] - max_lse);
  }
  for (int offset = 16; offset > 0; offset /= 2)
    sum += __shfl_xor_sync(0xffffffff, sum, offset);
  const bool any_visible = max_lse != -INFINITY;
  const float lse = any_visible ? max_lse + logf(sum) : -INFINITY;

  float weight_of[kCombineMaxSplitsPerLane];  // exp(lse_i - lse): 0 for -inf
#pragma unroll
  for (int i = 0; i < kCombineMaxSplitsPerLane; ++i) {
    weight_of[i] = any_visible ? expf(lse_of[i] - lse) : 0.0f;
  }

  element_t<kDType>* out = static_cast<element_t<kDType>*>(params.out) +
                           params.o_offset(batch, position, head);
  for (int col_base = 0; col_base < params.head_dim; col_base += 32) {  // warp-uniform
    const int col = col_base + lane;
    float acc = 0.0f;
    for (int split = 0; split < kv_split.splits; ++split) {
      const float weight = __shfl_sync(0xffffffff, split < 32 ? weight_of[0] : weight_of[1],
                                       split % 32);
      const int64_t index = kv_split.row(params, split, batch, head, position);
      if (col < params.head_dim && weight != 0.0f) {
        acc += weight * kv_split.o_partial[index * params.head_dim + col];
      }
    }
    if (col < params.head_dim) {
      if constexpr (kDType == DType::kFloat16) {
        out[col] = __float2half_rn(acc);
      } else {
        out[col] = __float2bfloat16_rn(acc);
      }
    }
  }
  if (params.lse != nullptr && lane == 0) {
    params.lse[params.lse_offset(batch, head, position)] = lse;
  }
}

// Launches the combine on params.stream, after the attention kernel that filled the partials.
template <DType kDType>
void launch_sm90_combine_kv_splits(const AttentionParams& params, const Sm90KvSplit& kv_split) {
  const int64_t rows = int64_t(params.batch) * params.heads_q * params.seqlen_q;
  const int64_t blocks = (rows + kCombineWarpsPerBlock - 1) / kCombineWarpsPerBlock;
  sm90_combine_kv_splits<kDType><<<static_cast<unsigned int>(blocks), 32 * kCombineWarpsPerBlock,
                                   0, params.stream>>>(params, kv_split);
}

}  // namespace flashcore::detail
