// Host side of programmatic dependent launch (cuda/ptx/grid_dependency.cuh): a launch that may
// start while the kernel before it on the stream is still running, once every CTA of that one
// has called grid_dependency_launch_dependents. The kernel must call grid_dependency_wait before
// it touches global memory. Recorded by CUDA graph capture as a programmatic edge.
#pragma once

#include <cuda_runtime.h>

#include <utility>

namespace flashcore::detail {

// Launches `kernel` on `stream` with the programmatic-stream-serialization attribute and returns
// the launch's error.
template <class... KernelArgs, class... Args>
cudaError_t sm90_launch_dependent(void (*kernel)(KernelArgs...), dim3 grid, dim3 block,
                                  size_t smem_bytes, cudaStream_t stream, Args&&... args) {
  cudaLaunchAttribute attribute{};
  attribute.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attribute.val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t config{};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = smem_bytes;
  config.stream = stream;
  config.attrs = &attribute;
  config.numAttrs = 1;
  return cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...);
}

}  // namespace flashcore::detail
