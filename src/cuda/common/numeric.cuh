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

constexpr float kLn2 = 0.6931471805599453f;

}  // namespace flashcore::detail
