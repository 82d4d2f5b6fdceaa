// Host side of thread-block cluster launches (cluster.cuh, cluster_scheduler.cuh): the launch
// with a cluster-dimension attribute, and how many clusters of a kernel fit the device at once
// (a persistent grid larger than that would run its last clusters after the others, as a tail).
#pragma once

#include <cuda_runtime.h>

#include <atomic>
#include <utility>

#include "cuda/check.h"

namespace flashcore::detail {

// A launch configuration of `grid` CTAs in clusters of `cluster_x` along x; `attribute` holds the
// cluster dimension and must outlive the configuration.
inline cudaLaunchConfig_t sm90_cluster_config(cudaLaunchAttribute& attribute, unsigned int grid,
                                              unsigned int threads, size_t smem_bytes,
                                              cudaStream_t stream, unsigned int cluster_x) {
  attribute = cudaLaunchAttribute{};
  attribute.id = cudaLaunchAttributeClusterDimension;
  attribute.val.clusterDim.x = cluster_x;
  attribute.val.clusterDim.y = 1;
  attribute.val.clusterDim.z = 1;
  cudaLaunchConfig_t config{};
  config.gridDim = dim3(grid);
  config.blockDim = dim3(threads);
  config.dynamicSmemBytes = smem_bytes;
  config.stream = stream;
  config.attrs = &attribute;
  config.numAttrs = 1;
  return config;
}

// Launches `kernel` on `stream` in clusters of `cluster_x` CTAs along x (grid.x a multiple of it)
// and returns the launch's error.
template <class... KernelArgs, class... Args>
cudaError_t sm90_launch_cluster(void (*kernel)(KernelArgs...), unsigned int grid,
                                unsigned int threads, size_t smem_bytes, cudaStream_t stream,
                                unsigned int cluster_x, Args&&... args) {
  cudaLaunchAttribute attribute;
  const cudaLaunchConfig_t config =
      sm90_cluster_config(attribute, grid, threads, smem_bytes, stream, cluster_x);
  return cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...);
}

// Devices whose answer is remembered; past them the query runs on every launch.
inline constexpr int kClusterOccupancyTrackedDevices = 64;

// Clusters of `cluster_x` CTAs of kKernel (its dynamic shared memory limit already raised) that
// are resident at once on device `device_index`, asked once per (kernel, device); 0 when the
// query fails (the caller falls back to SMs / cluster_x).
template <auto kKernel>
int sm90_max_active_clusters(unsigned int cluster_x, unsigned int threads, size_t smem_bytes,
                             int device_index) {
  static std::atomic<int> known[kClusterOccupancyTrackedDevices] = {};
  const bool tracked = device_index >= 0 && device_index < kClusterOccupancyTrackedDevices;
  if (tracked) {
    const int cached = known[device_index].load(std::memory_order_relaxed);
    if (cached != 0) return cached > 0 ? cached : 0;
  }
  cudaLaunchAttribute attribute;
  const cudaLaunchConfig_t config =
      sm90_cluster_config(attribute, cluster_x, threads, smem_bytes, nullptr, cluster_x);
  int clusters = 0;
  if (cudaOccupancyMaxActiveClusters(&clusters, kKernel, &config) != cudaSuccess) {
    (void)cudaGetLastError();  // not sticky; keep it from reaching the launch's check
    clusters = 0;
  }
  if (tracked) known[device_index].store(clusters > 0 ? clusters : -1, std::memory_order_relaxed);
  return clusters;
}

}  // namespace flashcore::detail
