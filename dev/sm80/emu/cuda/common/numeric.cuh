// Host emulation stand-in for src/cuda/common/numeric.cuh: same names and semantics, host types.
#pragma once
#include <cmath>
#include <cstdint>

#include "cpu/half_convert.h"
#include "flashcore/flashcore.h"

namespace flashcore::detail {

struct EmuHalf { uint16_t bits; };
struct EmuBfloat16 { uint16_t bits; };

template <DType kDType>
struct ElementType;
template <>
struct ElementType<DType::kFloat16> { using type = EmuHalf; };
template <>
struct ElementType<DType::kBFloat16> { using type = EmuBfloat16; };
template <DType kDType>
using element_t = typename ElementType<kDType>::type;

template <DType kDType>
inline uint16_t emu_round(float x) {
  return kDType == DType::kFloat16 ? float_to_fp16(x) : float_to_bf16(x);
}
template <DType kDType>
inline float emu_widen(uint16_t bits) {
  return kDType == DType::kFloat16 ? fp16_to_float(bits) : bf16_to_float(bits);
}

template <DType kDType>
inline uint32_t pack_pair(float lo, float hi) {
  return uint32_t(emu_round<kDType>(lo)) | (uint32_t(emu_round<kDType>(hi)) << 16);
}

inline float exp2_approx(float x) { return std::exp2(x); }

constexpr float kLn2 = 0.6931471805599453f;

}  // namespace flashcore::detail
