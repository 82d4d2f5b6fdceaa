// Raising a kernel's dynamic shared-memory limit once per (kernel, device).
//
// The limit is an attribute of the kernel on a device that never changes once set, while
// cudaFuncSetAttribute is a driver call on every launch's host path (decode calls are host-bound),
// so each kernel remembers the devices it was raised on.
#pragma once

#include <cuda_runtime.h>

#include <atomic>
#include <cstdint>

#include "cuda/check.h"

namespace flashcore::detail {

// Devices tracked in one 64-bit mask; a device past it simply sets the attribute on every launch.
inline constexpr int kSmemAttributeTrackedDevices = 64;

template <auto kKernel>
void raise_dynamic_smem_limit_once(int bytes, int device_index) {
  static std::atomic<uint64_t> raised_on{0};
  const uint64_t bit = device_index >= 0 && device_index < kSmemAttributeTrackedDevices
                           ? uint64_t{1} << device_index
                           : 0;
  if (bit != 0 && (raised_on.load(std::memory_order_acquire) & bit) != 0) return;
  FLASHCORE_CUDA_CHECK(
      cudaFuncSetAttribute(kKernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
  raised_on.fetch_or(bit, std::memory_order_release);
}

}  // namespace flashcore::detail
