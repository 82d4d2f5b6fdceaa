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

template <DType kDType, int kHeadDim, bool kCausal>
void run_sm80_forward(const AttentionParams& params) {
  using Shape = Sm80ForwardTraits<kDType, kHeadDim, kCausal>;
  if (params.batch == 0 || params.heads_q == 0 || params.seqlen_q == 0) return;
  constexpr auto kernel = sm80_forward_kernel<kDType, kHeadDim, kCausal>;
  const int smem_bytes = static_cast<int>(Shape::kSmemBytes);
  // The kernel's static shared memory (two pointers) counts against the same default limit.
  constexpr size_t kStaticSmemMargin = 1024;
  if (Shape::kSmemBytes + kStaticSmemMargin > Shape::kDefaultSmemLimit) {
    raise_dynamic_smem_limit_once<kernel>(smem_bytes, params.device_index);
  }
  const dim3 grid(ceil_div(params.seqlen_q, Shape::kBlockM), params.heads_q, params.batch);
  const dim3 block(Shape::kThreads);
  kernel<<<grid, block, smem_bytes, reinterpret_cast<cudaStream_t>(params.stream)>>>(params);
  FLASHCORE_CHECK_LAUNCH();
}

}  // namespace flashcore::detail
