// Turns CUDA runtime errors into flashcore::Error carrying the CUDA error string.
#pragma once

#include <cuda_runtime.h>

#include <string>

#include "flashcore/flashcore.h"

namespace flashcore::detail {

[[noreturn]] inline void throw_cuda_error(cudaError_t status, const char* what, const char* file,
                                          int line) {
  throw Error(std::string("CUDA error in ") + what + ": " + cudaGetErrorName(status) + " (" +
              cudaGetErrorString(status) + ") at " + file + ":" + std::to_string(line));
}

}  // namespace flashcore::detail

#define FLASHCORE_CUDA_CHECK(expr)                                                  \
  do {                                                                              \
    cudaError_t fc_status_ = (expr);                                                \
    if (fc_status_ != cudaSuccess) {                                                \
      ::flashcore::detail::throw_cuda_error(fc_status_, #expr, __FILE__, __LINE__); \
    }                                                                               \
  } while (0)

// After every kernel launch: launch-configuration errors surface here, not at the next sync.
#define FLASHCORE_CHECK_LAUNCH() FLASHCORE_CUDA_CHECK(cudaGetLastError())
