// Device memory of a test fixture with many tensors: allocated and filled piece by piece, all
// freed when the fixture goes (also when its constructor throws half way).
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

namespace flashcore::test {

class DeviceAllocations {
 public:
  DeviceAllocations() = default;
  ~DeviceAllocations() {
    for (void* p : pointers_) cudaFree(p);
  }
  DeviceAllocations(const DeviceAllocations&) = delete;
  DeviceAllocations& operator=(const DeviceAllocations&) = delete;

  void* allocate(size_t bytes) {
    void* p = nullptr;
    check(cudaMalloc(&p, std::max(bytes, kMinBytes)), "cudaMalloc");
    pointers_.push_back(p);
    return p;
  }
  void* upload(const void* host, size_t bytes) {
    void* p = allocate(bytes);
    if (bytes > 0) check(cudaMemcpy(p, host, bytes, cudaMemcpyHostToDevice), "cudaMemcpy");
    return p;
  }
  int32_t* upload_ints(const std::vector<int32_t>& values) {
    return static_cast<int32_t*>(upload(values.data(), values.size() * sizeof(int32_t)));
  }
  // All bits set: NaN in every float format, so an element the kernel never writes fails.
  void* poisoned(size_t bytes) {
    void* p = allocate(bytes);
    check(cudaMemset(p, 0xFF, std::max(bytes, kMinBytes)), "cudaMemset");
    return p;
  }

 private:
  // Empty tensors still get an address, aligned for the kernels' 16-byte accesses.
  static constexpr size_t kMinBytes = 16;

  static void check(cudaError_t status, const char* what) {
    if (status != cudaSuccess) {
      throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(status));
    }
  }

  std::vector<void*> pointers_;
};

}  // namespace flashcore::test
