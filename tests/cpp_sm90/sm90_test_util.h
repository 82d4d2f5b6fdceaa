// Helpers for the sm90 PTX wrapper tests: device checks, exact test values, host 16-bit conversion,
// tensor maps over plain row-major matrices, comparisons that name the worst elements, and the
// swizzle-atom alignment of a kernel's dynamic shared memory.
#pragma once

#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <sstream>
#include <string>
#include <vector>

#include "cuda/sm90/smem_layout.cuh"  // align_to_swizzle_atom
#include "cuda/sm90/tensor_map.h"
#include "flashcore/flashcore.h"

namespace flashcore::sm90_test {

using detail::BshdTensor;
using detail::make_bshd_tensor_map;

// Dynamic shared memory is only 16-byte aligned; swizzled tiles start on a swizzle atom
// (detail::align_to_swizzle_atom). Kernels allocate kSmemSlack extra bytes for the shift.
constexpr int kSmemSlack = detail::kSwizzleAtomBytes;
using detail::align_to_swizzle_atom;

inline bool has_sm90_device() {
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess) return false;
  cudaDeviceProp prop;
  if (cudaGetDeviceProperties(&prop, device) != cudaSuccess) return false;
  return prop.major == 9;
}

#define SKIP_WITHOUT_SM90()                                                       \
  do {                                                                            \
    if (!::flashcore::sm90_test::has_sm90_device())                               \
      GTEST_SKIP() << "needs an sm90 (Hopper) GPU; none is visible to this process"; \
  } while (0)

#define ASSERT_CUDA(expr)                                                                  \
  do {                                                                                     \
    cudaError_t status_ = (expr);                                                          \
    ASSERT_EQ(status_, cudaSuccess) << #expr << " -> " << cudaGetErrorName(status_) << ": " \
                                    << cudaGetErrorString(status_);                        \
  } while (0)

// Waits for the device like cudaDeviceSynchronize, but a kernel stuck on a barrier (which would
// hang the test binary until ctest's timeout) ends the process after kHangSeconds with a message
// naming the test case.
constexpr double kHangSeconds = 10.0;
inline cudaError_t synchronize_or_exit(const std::string& what) {
  const auto start = std::chrono::steady_clock::now();
  while (true) {
    const cudaError_t status = cudaStreamQuery(nullptr);
    if (status != cudaErrorNotReady) return status == cudaSuccess ? cudaDeviceSynchronize() : status;
    if (std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() >
        kHangSeconds) {
      std::printf("FATAL: %s: kernel still running after %.0f s; a barrier never completed "
                  "(mbarrier phase / expect_tx bytes / named-barrier counts)\n",
                  what.c_str(), kHangSeconds);
      std::fflush(stdout);
      std::_Exit(3);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

// Values k/4 for k in [-4, 4]: exact in fp16 and bf16, and every dot product of a few hundred of
// them is exact in fp32, so device and host results must match bit for bit.
inline std::vector<float> exact_values(size_t count, uint32_t seed) {
  std::vector<float> values(count);
  uint32_t state = seed * 2654435761u + 12345u;
  for (size_t i = 0; i < count; ++i) {
    state = state * 1664525u + 1013904223u;
    values[i] = static_cast<float>(static_cast<int>((state >> 16) % 9) - 4) * 0.25f;
  }
  return values;
}

template <DType kDType>
std::vector<uint16_t> to_16bit(const std::vector<float>& values) {
  std::vector<uint16_t> bits(values.size());
  for (size_t i = 0; i < values.size(); ++i) {
    if constexpr (kDType == DType::kFloat16) {
      __half h = __float2half_rn(values[i]);
      bits[i] = *reinterpret_cast<uint16_t*>(&h);
    } else {
      __nv_bfloat16 h = __float2bfloat16_rn(values[i]);
      bits[i] = *reinterpret_cast<uint16_t*>(&h);
    }
  }
  return bits;
}

// e4m3 bytes of values that e4m3 holds exactly (exact_values' k/4 do).
inline std::vector<uint8_t> to_e4m3(const std::vector<float>& values) {
  std::vector<uint8_t> bytes(values.size());
  for (size_t i = 0; i < values.size(); ++i) {
    bytes[i] = static_cast<uint8_t>(__nv_fp8_e4m3(values[i]).__x);
  }
  return bytes;
}

template <DType kDType>
float from_16bit(uint16_t bits) {
  if constexpr (kDType == DType::kFloat16) {
    return __half2float(*reinterpret_cast<__half*>(&bits));
  } else {
    return __bfloat162float(*reinterpret_cast<__nv_bfloat16*>(&bits));
  }
}

template <DType kDType>
const char* dtype_name() {
  return kDType == DType::kFloat16 ? "fp16" : "bf16";
}

// A row-major `rows` x `cols` matrix as the 4-D map the kernel uses, boxes of 64 cols x box_rows.
inline CUtensorMap matrix_tensor_map(const void* data, DType dtype, int rows, int cols,
                                     int box_rows, const char* name) {
  return make_bshd_tensor_map(
      BshdTensor{name, data, cols, rows, 1, 1, cols, int64_t(rows) * cols, int64_t(rows) * cols},
      dtype, box_rows);
}

// Device buffer that frees itself.
template <typename T>
struct DeviceBuffer {
  T* ptr = nullptr;
  size_t count = 0;
  explicit DeviceBuffer(size_t n) : count(n) {
    if (cudaMalloc(&ptr, n * sizeof(T)) != cudaSuccess) ptr = nullptr;
  }
  DeviceBuffer(const std::vector<T>& host) : DeviceBuffer(host.size()) {
    if (ptr) cudaMemcpy(ptr, host.data(), count * sizeof(T), cudaMemcpyHostToDevice);
  }
  ~DeviceBuffer() { cudaFree(ptr); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  std::vector<T> to_host() const {
    std::vector<T> host(count);
    cudaMemcpy(host.data(), ptr, count * sizeof(T), cudaMemcpyDeviceToHost);
    return host;
  }
};

// Compares a row-major rows x cols result with the expected one, exactly. On failure the message
// names the case, how many elements differ, the first few (row, col, expected, got) and whether the
// errors look like a known layout mistake (all wrong = likely descriptor/swizzle; some rows only =
// likely fragment layout).
inline ::testing::AssertionResult matrices_equal(const std::string& what,
                                                 const std::vector<float>& expected,
                                                 const std::vector<float>& got, int rows,
                                                 int cols, float tolerance = 0.0f) {
  int wrong = 0;
  std::vector<int> wrong_rows(rows, 0), wrong_cols(cols, 0);
  std::ostringstream first;
  for (int r = 0; r < rows; ++r) {
    for (int c = 0; c < cols; ++c) {
      const float e = expected[size_t(r) * cols + c];
      const float g = got[size_t(r) * cols + c];
      const bool same = (std::isnan(e) && std::isnan(g)) || std::fabs(e - g) <= tolerance ||
                        (std::isinf(e) && e == g);
      if (same) continue;
      if (wrong < 8) first << "\n  (row " << r << ", col " << c << "): expected " << e << ", got " << g;
      ++wrong;
      ++wrong_rows[r];
      ++wrong_cols[c];
    }
  }
  if (wrong == 0) return ::testing::AssertionSuccess();
  int rows_hit = 0, cols_hit = 0;
  for (int n : wrong_rows) rows_hit += n > 0;
  for (int n : wrong_cols) cols_hit += n > 0;
  return ::testing::AssertionFailure()
         << what << ": " << wrong << " of " << rows * cols << " elements differ (" << rows_hit
         << " of " << rows << " rows, " << cols_hit << " of " << cols << " cols hit); first:"
         << first.str();
}

}  // namespace flashcore::sm90_test
