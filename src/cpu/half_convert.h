// Host conversions between float and the 16-bit formats, round-to-nearest-even, no CUDA headers.
//
// Used by the CPU backends, the float64 reference and the accuracy tests; the bit layouts are
// IEEE binary16 (1-5-10) and bfloat16 (the top half of a binary32).
#pragma once

#include <cstdint>
#include <cstring>

namespace flashcore::detail {

inline uint32_t float_bits(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof(bits));
  return bits;
}

inline float bits_float(uint32_t bits) {
  float value;
  std::memcpy(&value, &bits, sizeof(value));
  return value;
}

inline float bf16_to_float(uint16_t bits) { return bits_float(static_cast<uint32_t>(bits) << 16); }

inline uint16_t float_to_bf16(float value) {
  uint32_t bits = float_bits(value);
  // NaN: keep the payload's top bits and set the quiet bit.
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((bits >> 16) | 0x40u);
  // Round to nearest even on the dropped 16 bits; an overflow correctly carries into infinity.
  uint32_t rounding_bias = 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>((bits + rounding_bias) >> 16);
}

inline float fp16_to_float(uint16_t h) {
  uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t exponent = (h >> 10) & 0x1fu;
  uint32_t mantissa = h & 0x3ffu;
  if (exponent == 0x1fu) return bits_float(sign | 0x7f800000u | (mantissa << 13));  // inf/NaN
  if (exponent == 0) {
    // Subnormal (or zero): value = mantissa * 2^-24, exact in float.
    float magnitude = static_cast<float>(mantissa) * (1.0f / 16777216.0f);
    return sign ? -magnitude : magnitude;
  }
  return bits_float(sign | ((exponent + 112u) << 23) | (mantissa << 13));  // rebias 15 -> 127
}

inline uint16_t float_to_fp16(float value) {
  uint32_t bits = float_bits(value);
  uint16_t sign = static_cast<uint16_t>((bits >> 16) & 0x8000u);
  uint32_t abs_bits = bits & 0x7fffffffu;
  if (abs_bits > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u);  // NaN
  // Rounds to >= 65520, past the largest half (65504): infinity.
  if (abs_bits >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);
  if (abs_bits < 0x38800000u) {
    // Below the smallest normal (2^-14): subnormal result, integer units of 2^-24.
    if (abs_bits < 0x33000000u) return sign;  // < 2^-25 rounds to zero
    uint32_t exponent = abs_bits >> 23;
    uint32_t mantissa = (abs_bits & 0x7fffffu) | 0x800000u;
    uint32_t shift = 126u - exponent;  // mantissa * 2^(exponent-150) / 2^-24
    uint32_t result = mantissa >> shift;
    uint32_t remainder = mantissa & ((1u << shift) - 1u);
    uint32_t halfway = 1u << (shift - 1u);
    if (remainder > halfway || (remainder == halfway && (result & 1u))) ++result;
    return static_cast<uint16_t>(sign | result);
  }
  // Normal: rebias the exponent and round the 13 dropped mantissa bits to nearest even.
  uint32_t rebased = abs_bits - (112u << 23);
  uint32_t rounding_bias = 0xfffu + ((rebased >> 13) & 1u);
  return static_cast<uint16_t>(sign | ((rebased + rounding_bias) >> 13));
}

}  // namespace flashcore::detail
