// Host conversions between float and float8 e4m3fn (DType::kFloat8E4M3), no CUDA headers.
//
// e4m3fn: 1 sign bit, 4 exponent bits (bias 7), 3 mantissa bits. Exponent field 0 holds the
// subnormals m * 2^-9 (m = 0..7); fields 1..15 the normals (1 + m/8) * 2^(e-7). There are no
// infinities: the codes 0x7F and 0xFF (every exponent and mantissa bit set) are NaN, so the
// largest finite magnitude is 0x7E = 1.75 * 2^8 = 448.
//
// Encoding follows torch's Tensor.to(torch.float8_e4m3fn) (c10's fp8e4m3fn_from_fp32_value, read,
// not copied): round to nearest, ties to even, on the e4m3 grid; a magnitude that rounds past 448
// (anything above 464, the midpoint between 448 and the missing 480; 464 itself ties to 448) and
// every infinity become NaN with the input's sign, NOT 448: torch does not saturate. ml_dtypes'
// float8_e4m3fn is meant to agree (nearest even; overflow to NaN, the type having no infinity);
// no torch or ml_dtypes was at hand to run the edge cases against. Quantizers that must not
// produce NaN divide by a scale of amax / 448 first (as FA3's callers and the tests here do).
#pragma once

#include <cmath>
#include <cstdint>

#include "cpu/half_convert.h"

namespace flashcore::detail {

inline constexpr float kFp8E4M3Max = 448.0f;
inline constexpr uint8_t kFp8E4M3NaN = 0x7F;  // with the sign bit: 0xFF, also NaN

// Exact: every e4m3fn value is a float.
inline float fp8_e4m3_to_float(uint8_t code) {
  const uint32_t sign = static_cast<uint32_t>(code & 0x80u) << 24;
  const uint32_t exponent = (code >> 3) & 0xFu;
  const uint32_t mantissa = code & 0x7u;
  if (exponent == 0xFu && mantissa == 0x7u) return bits_float(sign | 0x7fc00000u);  // NaN
  if (exponent == 0) {
    // Subnormal (or zero): mantissa * 2^-9, exact in float.
    const float magnitude = static_cast<float>(mantissa) * (1.0f / 512.0f);
    return sign ? -magnitude : magnitude;
  }
  // Normal: rebias 7 -> 127 and move the 3 mantissa bits to the top of float's 23.
  return bits_float(sign | ((exponent + 120u) << 23) | (mantissa << 20));
}

inline uint8_t float_to_fp8_e4m3(float value) {
  const uint32_t bits = float_bits(value);
  const uint8_t sign = static_cast<uint8_t>((bits >> 24) & 0x80u);
  const uint32_t abs_bits = bits & 0x7fffffffu;
  // 480 (0x43F00000) and up, infinities and NaN: NaN. Values in (464, 480) round to the NaN
  // code below by themselves.
  constexpr uint32_t kFirstUnrepresentable = 0x43F00000u;  // 480.0f
  if (abs_bits >= kFirstUnrepresentable) return static_cast<uint8_t>(sign | kFp8E4M3NaN);
  constexpr uint32_t kSmallestNormal = 0x3C800000u;  // 2^-6.0f
  if (abs_bits < kSmallestNormal) {
    // Subnormal result, integer units of 2^-9: scaling by 512 is exact, and nearbyint rounds to
    // nearest even in the default rounding mode. 8 units is 2^-6, whose code 0x08 is the same.
    const float units = std::nearbyint(bits_float(abs_bits) * 512.0f);
    return static_cast<uint8_t>(sign | static_cast<uint8_t>(units));
  }
  // Normal: rebias the exponent (127 -> 7) and round the 20 dropped mantissa bits to nearest
  // even; a carry moves into the exponent, and a carry past 448 lands on 0x7F, the NaN code.
  const uint32_t rebased = abs_bits - (120u << 23);
  const uint32_t rounding_bias = 0x7ffffu + ((rebased >> 20) & 1u);
  return static_cast<uint8_t>(sign | ((rebased + rounding_bias) >> 20));
}

}  // namespace flashcore::detail
