// Combine step of split-KV (Sm90KvSplit): each split of a query row left its O, normalized by
// its own row sum, and its lse (natural log) in the workspace. The row's softmax over all keys is
//   lse = log(sum_i exp(lse_i)),   out = sum_i exp(lse_i - lse) * O_i,
// since exp(lse_i) is split i's row sum of exp(s - 0). A split whose keys the row cannot see has
// lse_i = -inf and weight 0; a row that sees no key at all gets out = 0 and lse = -inf, as the
// kernel writes for it unsplit.
//
// One warp per 32 output columns of a (batch, head, position) row: lanes reduce the splits' lse
// (at most 64, two per lane), then each lane sums its column over the splits, loads issued
// kCombineLoadBatch at a time, the first batch beside the lse loads. The partial rows are
// numbered (split, batch, head, position), so split s of output row r is partial row
// s x rows + r. (A warp per whole row left batch-1 decode 8 blocks walking the splits one load
// at a time, longer than the attention kernel itself.)
#pragma once

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "common/params.h"
#include "cuda/check.h"
#include "cuda/common/numeric.cuh"
#include "cuda/ptx/grid_dependency.cuh"
#include "cuda/sm90/launch_dependent.h"
#include "cuda/sm90/pipeline.cuh"

namespace flashcore::detail {

constexpr int kCombineWarpsPerBlock = 4;
constexpr int kCombineMaxSplitsPerLane = 2;  // kSm90MaxKvSplits over a warp
constexpr int kCombineLoadBatch = 16;        // independent loads in flight per lane
constexpr int kCombineColumnsPerWarp = 32;
static_assert(kSm90MaxKvSplits <= 32 * kCombineMaxSplitsPerLane, "combine: too many splits");

// The combine's work, one warp per (query row, chunk of kCombineColumnsPerWarp columns): the
// kernel's bound and the launcher's grid both come from here.
FC_HOST_DEVICE int64_t sm90_combine_rows(const AttentionParams& params) {
  return int64_t(params.batch) * params.heads_q * params.seqlen_q;
}
FC_HOST_DEVICE int sm90_combine_chunks(const AttentionParams& params) {
  return ceil_div(params.head_dim, kCombineColumnsPerWarp);
}

template <DType kDType>
__global__ void __launch_bounds__(32 * kCombineWarpsPerBlock)
    sm90_combine_kv_splits(const __grid_constant__ AttentionParams params,
                           const Sm90KvSplit kv_split) {
  // Launched as a programmatic dependent of the attention kernel: the CTAs may be resident
  // before the partials are written, and wait for them here.
  grid_dependency_launch_dependents();
  grid_dependency_wait();
  const int lane = threadIdx.x % 32;
  const int chunks = sm90_combine_chunks(params);
  const int64_t warp = int64_t(blockIdx.x) * kCombineWarpsPerBlock + threadIdx.x / 32;
  const int64_t rows = sm90_combine_rows(params);
  if (warp >= rows * chunks) return;  // whole warps
  const int64_t row = warp / chunks;
  const int col = static_cast<int>(warp % chunks) * kCombineColumnsPerWarp + lane;
  const int position = static_cast<int>(row % params.seqlen_q);
  const int head = static_cast<int>(row / params.seqlen_q % params.heads_q);
  const int batch = static_cast<int>(row / params.seqlen_q / params.heads_q);
  // Packed q: rows past this sequence's queries belong to no query (seqlen_q is the longest's).
  if (params.cu_seqlens_q != nullptr && position >= params.seqlen_q_of(batch)) return;

  // The first kCombineLoadBatch splits' O values are loaded together with the lse values, so a
  // call with up to that many splits waits for memory once.
  const bool in_row = col < params.head_dim;
  const auto load_values = [&](int first, float (&value)[kCombineLoadBatch]) {
#pragma unroll
    for (int j = 0; j < kCombineLoadBatch; ++j) {
      const int split = first + j;
      value[j] = split < kv_split.splits && in_row
                     ? kv_split.o_partial[(split * rows + row) * params.head_dim + col]
                     : 0.0f;
    }
  };
  float value[kCombineLoadBatch];
  load_values(0, value);

  float lse_of[kCombineMaxSplitsPerLane];
  float max_lse = -INFINITY;
#pragma unroll
  for (int i = 0; i < kCombineMaxSplitsPerLane; ++i) {
    const int split = lane + 32 * i;
    lse_of[i] = split < kv_split.splits ? kv_split.lse_partial[split * rows + row] : -INFINITY;
    max_lse = fmaxf(max_lse, lse_of[i]);
  }
  for (int offset = 16; offset > 0; offset /= 2)
    max_lse = fmaxf(max_lse, __shfl_xor_sync(0xffffffff, max_lse, offset));
  const bool any_visible = max_lse != -INFINITY;
  float sum = 0.0f;
  if (any_visible) {
#pragma unroll
    for (int i = 0; i < kCombineMaxSplitsPerLane; ++i) sum += expf(lse_of[i] - max_lse);
  }
  for (int offset = 16; offset > 0; offset /= 2)
    sum += __shfl_xor_sync(0xffffffff, sum, offset);
  const float lse = any_visible ? max_lse + logf(sum) : -INFINITY;
  float weight_of[kCombineMaxSplitsPerLane];  // exp(lse_i - lse): 0 for -inf
#pragma unroll
  for (int i = 0; i < kCombineMaxSplitsPerLane; ++i) {
    weight_of[i] = any_visible ? expf(lse_of[i] - lse) : 0.0f;
  }

  // Every split wrote every row of its tile (0 where it saw no key), so all reads are defined.
  float acc = 0.0f;
  for (int first = 0; first < kv_split.splits; first += kCombineLoadBatch) {
    if (first > 0) load_values(first, value);
#pragma unroll
    for (int j = 0; j < kCombineLoadBatch; ++j) {
      const int split = first + j;  // warp-uniform
      acc += __shfl_sync(0xffffffff, split < 32 ? weight_of[0] : weight_of[1], split % 32) *
             value[j];
    }
  }
  if (in_row) {
    element_t<kDType>* out = static_cast<element_t<kDType>*>(params.out) +
                             params.o_offset(batch, position, head);
    if constexpr (kDType == DType::kFloat16) {
      out[col] = __float2half_rn(acc);
    } else {
      out[col] = __float2bfloat16_rn(acc);
    }
  }
  if (params.lse != nullptr && col == 0) {
    params.lse[params.lse_offset(batch, head, position)] = lse;
  }
}

// CTAs of the combine of a call.
inline int64_t sm90_combine_blocks(const AttentionParams& params) {
  const int64_t warps = sm90_combine_rows(params) * sm90_combine_chunks(params);
  return (warps + kCombineWarpsPerBlock - 1) / kCombineWarpsPerBlock;
}

// Launches the combine on params.stream, after the attention kernel that filled the partials,
// as its programmatic dependent (sm90_launch_dependent).
template <DType kDType>
void launch_sm90_combine_kv_splits(const AttentionParams& params, const Sm90KvSplit& kv_split) {
  const int64_t blocks = sm90_combine_blocks(params);
  FLASHCORE_CUDA_CHECK(sm90_launch_dependent(sm90_combine_kv_splits<kDType>,
                                             static_cast<unsigned int>(blocks),
                                             32 * kCombineWarpsPerBlock, 0, params.stream, params,
                                             kv_split));
}

}  // namespace flashcore::detail
