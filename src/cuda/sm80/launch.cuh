// Host launcher of the sm80 forward kernel: picks the tile from the table, opts in to more than
// 48 KB of dynamic shared memory when the tile needs it, and launches on the caller's stream.
// Included by the generated instance files (src/instances/), which instantiate run_sm80_forward.
#pragma once

#include <cuda_runtime.h>

#include "common/params.h"
#include "cuda/check.h"
#include "cuda/common/mask.cuh"
#include "cuda/common/smem_attribute.cuh"
#include "cuda/launchers.h"
#include "cuda/sm80/forward_kernel.cuh"

namespace flashcore::detail {

// One kernel per K/V addressing (kv_address.cuh): a paged cache, or evenly strided rows.
template <DType kDType, int kHeadDim, bool kCausal, bool kPagedKv>
void launch_sm80_forward(const AttentionParams& params) {
  using Shape = Sm80ForwardTraits<kDType, kHeadDim, kCausal>;
  constexpr auto kernel = sm80_forward_kernel<kDType, kHeadDim, kCausal, kPagedKv>;
  // The tiles, and past them what the K/V addressing stages.
  constexpr size_t kDynamicSmemBytes =
      Shape::kSmemBytes + Sm80KvAddress<kPagedKv>::template kStageBytes<Shape::kBlockN>;
  const int smem_bytes = static_cast<int>(kDynamicSmemBytes);
  // The kernel's static shared memory (two pointers) counts against the same default limit.
  constexpr size_t kStaticSmemMargin = 1024;
  if (kDynamicSmemBytes + kStaticSmemMargin > Shape::kDefaultSmemLimit) {
    raise_dynamic_smem_limit_once<kernel>(smem_bytes, params.device_index);
  }
  // seqlen_q is the longest sequence's length (max_seqlen_q for packed q): CTAs past a shorter
  // sequence's end exit at once.
  const dim3 grid(ceil_div(params.seqlen_q, Shape::kBlockM), params.heads_q, params.batch);
  const dim3 block(Shape::kThreads);
  kernel<<<grid, block, smem_bytes, reinterpret_cast<cudaStream_t>(params.stream)>>>(params);
  FLASHCORE_CHECK_LAUNCH();
}

template <DType kDType, int kHeadDim, bool kCausal>
void run_sm80_forward(const AttentionParams& params) {
  if (params.batch == 0 || params.heads_q == 0 || params.seqlen_q == 0) return;
  if (params.page_table != nullptr) {
    launch_sm80_forward<kDType, kHeadDim, kCausal, true>(params);
  } else {
    launch_sm80_forward<kDType, kHeadDim, kCausal, false>(params);
  }
}

}  // namespace flashcore::detail
