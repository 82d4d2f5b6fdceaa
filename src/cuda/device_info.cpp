#include "cuda/device_info.h"

#include <cuda_runtime.h>

#include <mutex>
#include <vector>

namespace flashcore::detail {

const DeviceInfo& device_info(int device_index) {
  // Devices are few; one slot each, filled once.
  static std::mutex mutex;
  static std::vector<DeviceInfo> cache;
  static std::vector<bool> filled;
  static const DeviceInfo absent{};

  std::lock_guard<std::mutex> lock(mutex);
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky "no driver" error so later calls are not confused
    return absent;
  }
  if (device_index < 0 || device_index >= count) return absent;
  if (cache.size() < static_cast<size_t>(count)) {
    cache.resize(count);
    filled.resize(count, false);
  }
  if (!filled[device_index]) {
    DeviceInfo info;
    cudaDeviceProp prop{};
    if (cudaGetDeviceProperties(&prop, device_index) == cudaSuccess) {
      info.present = true;
      info.cc_major = prop.major;
      info.cc_minor = prop.minor;
      info.num_sms = prop.multiProcessorCount;
      info.max_smem_per_block_optin = static_cast<int>(prop.sharedMemPerBlockOptin);
    } else {
      cudaGetLastError();
    }
    cache[device_index] = info;
    filled[device_index] = true;
  }
  return cache[device_index];
}

bool is_device_pointer(const void* ptr, int device_index) {
  cudaPointerAttributes attributes{};
  if (cudaPointerGetAttributes(&attributes, ptr) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  if (attributes.type == cudaMemoryTypeManaged) return true;
  return attributes.type == cudaMemoryTypeDevice && attributes.device == device_index;
}

}  // namespace flashcore::detail
