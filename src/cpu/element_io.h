// Reading and writing one element of a fp16/bf16/fp32/fp8 tensor on the host. fp8 stores round
// as torch does (cpu/fp8_convert.h: nearest even, NaN past 464); only tests and the CLI's
// quantization write fp8, and the baseline's P rounding uses round_to_dtype.
#pragma once

#include <cstdint>

#include "cpu/fp8_convert.h"
#include "cpu/half_convert.h"
#include "flashcore/flashcore.h"

namespace flashcore::detail {

inline float load_element(DType dtype, const void* base, int64_t offset) {
  switch (dtype) {
    case DType::kFloat16: return fp16_to_float(static_cast<const uint16_t*>(base)[offset]);
    case DType::kBFloat16: return bf16_to_float(static_cast<const uint16_t*>(base)[offset]);
    case DType::kFloat32: return static_cast<const float*>(base)[offset];
    case DType::kInt32: return float(static_cast<const int32_t*>(base)[offset]);
    case DType::kFloat8E4M3: return fp8_e4m3_to_float(static_cast<const uint8_t*>(base)[offset]);
  }
  return 0.0f;
}

inline void store_element(DType dtype, void* base, int64_t offset, float value) {
  switch (dtype) {
    case DType::kFloat16: static_cast<uint16_t*>(base)[offset] = float_to_fp16(value); break;
    case DType::kBFloat16: static_cast<uint16_t*>(base)[offset] = float_to_bf16(value); break;
    case DType::kFloat32: static_cast<float*>(base)[offset] = value; break;
    case DType::kInt32: static_cast<int32_t*>(base)[offset] = static_cast<int32_t>(value); break;
    case DType::kFloat8E4M3:
      static_cast<uint8_t*>(base)[offset] = float_to_fp8_e4m3(value);
      break;
  }
}

// value rounded to the dtype and back (identity for fp32).
inline float round_to_dtype(DType dtype, float value) {
  switch (dtype) {
    case DType::kFloat16: return fp16_to_float(float_to_fp16(value));
    case DType::kBFloat16: return bf16_to_float(float_to_bf16(value));
    case DType::kFloat32: return value;
    case DType::kInt32: return value;
    case DType::kFloat8E4M3: return fp8_e4m3_to_float(float_to_fp8_e4m3(value));
  }
  return value;
}

}  // namespace flashcore::detail
