#include "cuda/device_info.h"

#include <cuda_runtime.h>

#include <memory>
#include <mutex>

namespace flashcore::detail {
namespace {

// The device count and every device's properties, read once per process: none of them can change
// while it runs (CUDA_VISIBLE_DEVICES is read at driver initialisation), so the hot path is an
// index into a table filled on first use and never a CUDA call.
struct DeviceTable {
  int count = 0;  // 0 when the driver or runtime is missing
  std::unique_ptr<DeviceInfo[]> devices;
  std::unique_ptr<std::once_flag[]> filled;  // devices[i] holds its properties once filled[i] ran
};

DeviceInfo query_device(int device_index) {
  DeviceInfo info;
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, device_index) != cudaSuccess) {
    cudaGetLastError();  // leave no sticky error behind for the caller's next CUDA call
    return info;
  }
  info.present = true;
  info.cc_major = prop.major;
  info.cc_minor = prop.minor;
  info.num_sms = prop.multiProcessorCount;
  info.max_smem_per_block_optin = static_cast<int>(prop.sharedMemPerBlockOptin);
  return info;
}

// Filled lazily per device: reading one device's properties must not initialise the others.
const DeviceTable& device_table() {
  static const DeviceTable table = [] {
    DeviceTable t;
    if (cudaGetDeviceCount(&t.count) != cudaSuccess) {
      cudaGetLastError();  // clear the sticky "no driver" error so later calls are not confused
      t.count = 0;
    }
    const int slots = t.count > 0 ? t.count : 1;  // never a zero-length array
    t.devices = std::make_unique<DeviceInfo[]>(slots);
    t.filled = std::make_unique<std::once_flag[]>(slots);
    return t;
  }();
  return table;
}

}  // namespace

const DeviceInfo& device_info(int device_index) {
  static const DeviceInfo absent{};
  const DeviceTable& table = device_table();
  if (device_index < 0 || device_index >= table.count) return absent;
  std::call_once(table.filled[device_index],
                 [&] { table.devices[device_index] = query_device(device_index); });
  return table.devices[device_index];
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
