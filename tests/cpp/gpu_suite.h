// What every GPU test binary shares: the CUDA device count, and a main that says what it runs on
// and reports a run that found no GPU as skipped to ctest.
#pragma once

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <initializer_list>
#include <string>

#include "flashcore/flashcore.h"

namespace flashcore::test {

// 0 where there is no device, or no driver (the error is cleared for later calls).
inline int cuda_device_count() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return count;
}

// The gpu.* tests' SKIP_RETURN_CODE (tests/CMakeLists.txt): a suite that ran on no GPU shows as
// skipped, not passed.
constexpr int kSkippedExitCode = 77;

// main() of a GPU test binary: the device count and whether each of `backends` is available,
// then every test.
inline int run_gpu_suite(int argc, char** argv, const char* suite,
                         std::initializer_list<Backend> backends) {
  ::testing::InitGoogleTest(&argc, argv);
  const int devices = cuda_device_count();
  std::string available;
  for (Backend backend : backends) {
    available += std::string(available.empty() ? "" : ", ") + to_string(backend) +
                 (backend_available(backend) ? " available" : " unavailable");
  }
  std::printf("flashcore %s: %d CUDA device(s); %s\n", suite, devices, available.c_str());
  const int result = RUN_ALL_TESTS();
  return result == 0 && devices == 0 ? kSkippedExitCode : result;
}

}  // namespace flashcore::test
