// wgmma (sm90a): warpgroup-wide asynchronous matrix multiply-accumulate, plus its ordering calls.
//
// Protocol for one batch of wgmma: wgmma_fence() (after any ordinary write of the accumulator or
// A registers), the wgmma calls, wgmma_commit_group(), and later wgmma_wait_group<N>() before the
// accumulators are read (N = how many newer groups may still be in flight). The compiler does not
// know that the asm writes registers asynchronously, so after the wait, fence_accumulators()
// pins every accumulator register behind it.
//
// Register fragments (PTX ISA, "wgmma .m64nNk16 register fragments"), warp w of the warpgroup owns
// rows 16w..16w+15; with g = lane / 4 and t = lane % 4:
//   accumulator D (N/2 floats): d[4i+0], d[4i+1] = (row g,   col 8i + 2t + {0,1})
//                               d[4i+2], d[4i+3] = (row g+8, col 8i + 2t + {0,1})
//   A from registers (4 x 32-bit, two 16-bit elements each, low half = lower column):
//     a[0] = (row g, k 2t..2t+1)   a[1] = (row g+8, k 2t..2t+1)
//     a[2] = (row g, k 2t+8..+9)   a[3] = (row g+8, k 2t+8..+9)
// so D columns 16k..16k+15 (d[8k..8k+7]) packed in pairs are exactly the A registers for K-step k.
// cuda/common/accumulator_layout.h names this layout for the code that indexes it.
#pragma once

#include <cstdint>

#include "cuda/common/numeric.cuh"
#include "cuda/ptx/smem_descriptor.cuh"
#include "cuda/ptx/wgmma_ops.cuh"

namespace flashcore::detail {

__device__ __forceinline__ void wgmma_fence() {
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
}

__device__ __forceinline__ void wgmma_commit_group() {
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}

template <int kPendingGroups>
__device__ __forceinline__ void wgmma_wait_group() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(kPendingGroups) : "memory");
}

// Keeps the compiler from moving reads or writes of the registers across this point.
template <int kCount>
__device__ __forceinline__ void fence_accumulators(float (&acc)[kCount]) {
#pragma unroll
  for (int i = 0; i < kCount; ++i) asm volatile("" : "+f"(acc[i])::"memory");
}

// An accumulator tile (64 x N fp32) as the 16-bit A operand of the next wgmma (64 x K=N): K-step k
// takes accumulator columns 16k..16k+15, d[8k..8k+7], packed in pairs; no data moves between lanes.
template <DType kDType, int kAccRegs>
__device__ __forceinline__ void accumulator_to_a_fragments(const float (&acc)[kAccRegs],
                                                           uint32_t (&a)[kAccRegs / 8][4]) {
  static_assert(kAccRegs % 8 == 0, "N must be a multiple of 16 to feed a k16 wgmma");
#pragma unroll
  for (int k = 0; k < kAccRegs / 8; ++k) {
#pragma unroll
    for (int r = 0; r < 4; ++r) a[k][r] = pack_pair<kDType>(acc[8 * k + 2 * r], acc[8 * k + 2 * r + 1]);
  }
}

}  // namespace flashcore::detail
