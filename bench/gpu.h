// The little of the CUDA runtime flashcore-bench needs: device buffers and event timing.
//
// gpu_cuda.cpp implements it when the library is built with CUDA; gpu_none.cpp otherwise
// (no GPU present; any allocation throws flashcore::Error).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace flashcore::bench {

// A CUDA device 0 exists and the driver answers.
bool gpu_present();
// Why there is no GPU ("flashcore-bench was built without CUDA", the CUDA error of
// cudaGetDeviceCount, ...), or "" when there is one.
std::string gpu_absence_reason();
// "NVIDIA H100 80GB HBM3", or "" without a GPU.
std::string gpu_name();
// L2 cache size of device 0 in bytes (0 without a GPU).
int64_t gpu_l2_bytes();
// Global memory of device 0 in bytes (0 without a GPU).
int64_t gpu_memory_bytes();

// Device memory on device 0, freed on destruction.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(size_t bytes);
  ~DeviceBuffer();
  DeviceBuffer(DeviceBuffer&& other) noexcept;
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  void* data() const { return data_; }
  uint8_t* bytes_at(size_t offset) const { return static_cast<uint8_t*>(data_) + offset; }
  size_t size() const { return bytes_; }

  void upload(size_t offset, const void* host, size_t bytes);
  void download(size_t offset, void* host, size_t bytes) const;
  void copy_within(size_t dst_offset, size_t src_offset, size_t bytes);
  void fill(uint8_t value);  // every byte; 0xFF makes every fp16/bf16/fp32 element a NaN

 private:
  void* data_ = nullptr;
  size_t bytes_ = 0;
};

// Waits for all work on the device; throws flashcore::Error on a pending CUDA error.
void gpu_synchronize();

// Runs `run(i)` for i in [0, warmup + iters) on the legacy default stream and returns the
// elapsed milliseconds of the last `iters` runs, each bracketed by its own pair of CUDA events.
std::vector<double> time_gpu_runs(const std::function<void(int)>& run, int warmup, int iters);

}  // namespace flashcore::bench
