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

// Four fp32 values rounded (to nearest, saturating) to e4m3, x0 in the low byte.
__device__ __forceinline__ uint32_t pack_e4m3x4(float x0, float x1, float x2, float x3) {
  uint32_t packed;
  asm("{\n.reg .b16 lo, hi;\n"
      "cvt.rn.satfinite.e4m3x2.f32 lo, %2, %1;\n"  // first operand to the upper byte
      "cvt.rn.satfinite.e4m3x2.f32 hi, %4, %3;\n"
      "mov.b32 %0, {lo, hi};\n}\n"
      : "=r"(packed)
      : "f"(x0), "f"(x1), "f"(x2), "f"(x3));
  return packed;
}

// An accumulator tile (64 x N fp32) as the A operand of the next wgmma (64 x K=N).
// 16-bit: K-step k takes accumulator columns 16k..16k+15, d[8k..8k+7], packed in pairs.
// e4m3 (m64nNk32, PTX ISA: a[0] = row g, k 4t..4t+3; a[1] = row g + 8, same k; a[2], a[3] =
// k + 16), one byte per element: K-step k takes columns 32k..32k+31, d[16k..16k+15], in the
// permuted key order of the FP8 kernel's V^T (fp8_a_position_key): byte e of a[2h + r] is
// row r's element e % 2 of chunk 4k + 2h + e / 2. In both no data moves between lanes.
template <DType kDType, int kAccRegs, int kSteps>
__device__ __forceinline__ void accumulator_to_a_fragments(const float (&acc)[kAccRegs],
                                                           uint32_t (&a)[kSteps][4]) {
  if constexpr (kDType == DType::kFloat8E4M3) {
    static_assert(kAccRegs == 16 * kSteps, "N must be a multiple of 32 to feed a k32 wgmma");
#pragma unroll
    for (int k = 0; k < kSteps; ++k) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
#pragma unroll
        for (int r = 0; r < 2; ++r) {
          const int lo = 16 * k + 8 * h + 2 * r;  // acc_reg(4k + 2h, r, 0)
          a[k][2 * h + r] = pack_e4m3x4(acc[lo], acc[lo + 1], acc[lo + 4], acc[lo + 5]);
        }
      }
    }
  } else {
    static_assert(kAccRegs == 8 * kSteps, "N must be a multiple of 16 to feed a k16 wgmma");
#pragma unroll
    for (int k = 0; k < kSteps; ++k) {
#pragma unroll
      for (int r = 0; r < 4; ++r) {
        a[k][r] = pack_pair<kDType>(acc[8 * k + 2 * r], acc[8 * k + 2 * r + 1]);
      }
    }
  }
}

}  // namespace flashcore::detail
