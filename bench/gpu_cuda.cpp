#include <cuda_runtime.h>

#include <string>
#include <utility>

#include "cuda/check.h"
#include "gpu.h"

namespace flashcore::bench {
namespace {

constexpr int kDevice = 0;  // flashcore-bench runs on the first visible device

}  // namespace

std::string gpu_absence_reason() {
  int count = 0;
  if (const cudaError_t status = cudaGetDeviceCount(&count); status != cudaSuccess) {
    cudaGetLastError();  // clear the sticky "no driver" error so later calls are not confused
    return std::string("cudaGetDeviceCount: ") + cudaGetErrorName(status) + ", " +
           cudaGetErrorString(status);
  }
  return count > 0 ? "" : "cudaGetDeviceCount found no device";
}

bool gpu_present() { return gpu_absence_reason().empty(); }

std::string gpu_name() {
  if (!gpu_present()) {
    return "";
  }
  cudaDeviceProp prop{};
  FLASHCORE_CUDA_CHECK(cudaGetDeviceProperties(&prop, kDevice));
  return prop.name;
}

int64_t gpu_l2_bytes() {
  if (!gpu_present()) {
    return 0;
  }
  int bytes = 0;
  FLASHCORE_CUDA_CHECK(cudaDeviceGetAttribute(&bytes, cudaDevAttrL2CacheSize, kDevice));
  return bytes;
}

int64_t gpu_memory_bytes() {
  if (!gpu_present()) {
    return 0;
  }
  cudaDeviceProp prop{};
  FLASHCORE_CUDA_CHECK(cudaGetDeviceProperties(&prop, kDevice));
  return static_cast<int64_t>(prop.totalGlobalMem);
}

DeviceBuffer::DeviceBuffer(size_t bytes) : bytes_(bytes) {
  FLASHCORE_CUDA_CHECK(cudaSetDevice(kDevice));
  FLASHCORE_CUDA_CHECK(cudaMalloc(&data_, bytes == 0 ? 1 : bytes));
}

DeviceBuffer::~DeviceBuffer() {
  if (data_ != nullptr) {
    cudaFree(data_);  // no throw from a destructor; a failure here has nothing left to free
  }
}

DeviceBuffer::DeviceBuffer(DeviceBuffer&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)), bytes_(std::exchange(other.bytes_, 0)) {}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& other) noexcept {
  if (this != &other) {
    if (data_ != nullptr) {
      cudaFree(data_);
    }
    data_ = std::exchange(other.data_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
  }
  return *this;
}

void DeviceBuffer::upload(size_t offset, const void* host, size_t bytes) {
  FLASHCORE_CUDA_CHECK(cudaMemcpy(bytes_at(offset), host, bytes, cudaMemcpyHostToDevice));
}

void DeviceBuffer::download(size_t offset, void* host, size_t bytes) const {
  FLASHCORE_CUDA_CHECK(cudaMemcpy(host, bytes_at(offset), bytes, cudaMemcpyDeviceToHost));
}

void DeviceBuffer::copy_within(size_t dst_offset, size_t src_offset, size_t bytes) {
  FLASHCORE_CUDA_CHECK(
      cudaMemcpy(bytes_at(dst_offset), bytes_at(src_offset), bytes, cudaMemcpyDeviceToDevice));
}

void DeviceBuffer::fill(uint8_t value) {
  FLASHCORE_CUDA_CHECK(cudaMemset(data_, value, bytes_));
}

void gpu_synchronize() { FLASHCORE_CUDA_CHECK(cudaDeviceSynchronize()); }

std::vector<double> time_gpu_runs(const std::function<void(int)>& run, int warmup, int iters) {
  for (int i = 0; i < warmup; ++i) {
    run(i);
  }
  std::vector<cudaEvent_t> starts(iters), stops(iters);
  for (int i = 0; i < iters; ++i) {
    FLASHCORE_CUDA_CHECK(cudaEventCreate(&starts[i]));
    FLASHCORE_CUDA_CHECK(cudaEventCreate(&stops[i]));
  }
  for (int i = 0; i < iters; ++i) {
    FLASHCORE_CUDA_CHECK(cudaEventRecord(starts[i], nullptr));
    run(warmup + i);
    FLASHCORE_CUDA_CHECK(cudaEventRecord(stops[i], nullptr));
  }
  gpu_synchronize();
  std::vector<double> ms(iters);
  for (int i = 0; i < iters; ++i) {
    float elapsed = 0;
    FLASHCORE_CUDA_CHECK(cudaEventElapsedTime(&elapsed, starts[i], stops[i]));
    ms[i] = elapsed;
    cudaEventDestroy(starts[i]);
    cudaEventDestroy(stops[i]);
  }
  return ms;
}

}  // namespace flashcore::bench
