// What the API layer needs to know about a CUDA device, without CUDA types.
#pragma once

namespace flashcore::detail {

struct DeviceInfo {
  bool present = false;  // a CUDA device with this index exists and the driver answers
  int cc_major = 0;
  int cc_minor = 0;
  int num_sms = 0;
  int max_smem_per_block_optin = 0;  // bytes, after cudaFuncSetAttribute raises the limit
};

// Cached per device index; never throws (an absent driver or GPU gives present = false).
const DeviceInfo& device_info(int device_index);

// Whether ptr is memory the CUDA device `device_index` can read (device or managed memory).
bool is_device_pointer(const void* ptr, int device_index);

}  // namespace flashcore::detail
