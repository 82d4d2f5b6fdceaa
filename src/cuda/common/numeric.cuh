// Numeric helpers shared by the CUDA kernels: element types, packing of fp32 pairs into 16-bit
// pairs, and exp2 with the softmax scale folded in.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "flashcore/flashcore.h"

namespace flashcore::detail {

template <DType kDType>
struct ElementType;
template <>
struct ElementType<DType::kFloat16> {
  using type = __half;
  using pair = __half2;
};
template <>
struct ElementType<DType::kBFloat16> {
  using type = __nv_bfloat16;
  using pair = __nv_bfloat162;
};

template <DType kDType>
using element_t = typename ElementType<kDType>::type;

// Two fp32 values rounded to one 32-bit register of 16-bit elements, low half first: the layout
// mma.sync and wgmma expect for an A-operand register.
template <DType kDType>
__device__ __forceinline__ uint32_t pack_pair(float lo, float hi) {
  typename ElementType<kDType>::pair packed;
  if constexpr (kDType == DType::kFloat16) {
    packed = __floats2half2_rn(lo, hi);
  } else {
    packed = __floats2bfloat162_rn(lo, hi);
  }
  return *reinterpret_cast<uint32_t*>(&packed);
}

// 2^x on the special-function unit (ex2.approx, ~2 ulp); the softmax works in base 2 with
// log2(e) folded into the scale, so exp(s * scale - m) is one FFMA and one MUFU.EX2.
__device__ __forceinline__ float exp2_approx(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

// 1 / x (rcp.approx, at most 1 ulp off) and log2(x) (lg2.approx, absolute error below 2^-22) on
// the special-function unit: one MUFU each, where 1.0f / x and logf are IEEE-exact routines of
// dozens of instructions with a slow path behind a branch. For the softmax's row sums, which
// are at least 1 (the row's max contributes 2^0, or 2^kPOffsetLog2).
__device__ __forceinline__ float reciprocal_approx(float x) {
  float y;
  asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

__device__ __forceinline__ float log2_approx(float x) {
  float y;
  asm("lg2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

// 2^x on the FMA pipe, for softmaxes whose exponentials outnumber what the special-function unit
// keeps up with beside the tensor cores (FP8: Sm90TuningRow::fma_exp_period). x is rounded to an
// integer j by the 1.5 x 2^23 magic, 2^f for f = x - j in [-0.5, 0.5] is a cubic (relative error
// < 5.2e-4, exactly 1 at f = 0; fitted for the relative error on [-0.5, 0.5]), and j is added to
// its exponent bits: t's low mantissa bits hold j, the bits above shift out of the 32. Valid for
// x <= 127; x <= -127 (a masked -inf included) gives exactly 0, -126 < x < -127 a subnormal.
// 7 FMA-pipe and ALU instructions where ex2.approx is one MUFU.
__device__ __forceinline__ float exp2_fma(float x) {
  constexpr float kRoundMagic = 12582912.0f;  // 1.5 x 2^23: x + magic rounds x to an integer
  x = fmaxf(x, -127.0f);
  const float t = x + kRoundMagic;
  const float f = x - (t - kRoundMagic);
  float p = fmaf(0.051469944f, f, 0.24116194f);  // 2^f = 1 + f (c1 + f (c2 + f c3))
  p = fmaf(p, f, 0.69351685f);
  p = fmaf(p, f, 1.0f);
  return __int_as_float(__float_as_int(p) + (__float_as_int(t) << 23));
}

constexpr float kLn2 = 0.6931471805599453f;

}  // namespace flashcore::detail
