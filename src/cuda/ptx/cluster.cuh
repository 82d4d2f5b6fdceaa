// Thread-block clusters (sm90): a CTA's rank in its cluster, the cluster's index in the grid, the
// cluster-wide barrier, and mapa (a shared-memory address of this CTA to the same offset in a
// peer CTA's shared memory, for remote mbarrier arrivals and multicast TMA). A CTA launched
// without a cluster attribute is a cluster of one: rank 0, cluster index blockIdx. The special
// registers are constant for a CTA's life (not volatile: the compiler may reuse or re-read them).
// ptxas derives %clusterid from %ctaid with float arithmetic; kernels whose clusters are 1-D along
// a 1-D grid may take blockIdx.x / size and blockIdx.x % size instead (cluster_scheduler.cuh).
#pragma once

#include <cstdint>

namespace flashcore::detail {

__device__ __forceinline__ uint32_t cluster_cta_rank() {
  uint32_t rank;
  asm("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(rank));
  return rank;
}

// The cluster's index along x, and how many clusters the grid has along x.
__device__ __forceinline__ uint32_t cluster_id_x() {
  uint32_t id;
  asm("mov.u32 %0, %%clusterid.x;\n" : "=r"(id));
  return id;
}
__device__ __forceinline__ uint32_t cluster_count_x() {
  uint32_t count;
  asm("mov.u32 %0, %%nclusterid.x;\n" : "=r"(count));
  return count;
}

// Every thread of every CTA of the cluster arrives, then waits for all the others: what each
// wrote to (its own or a peer's) shared memory before the arrival is visible to all after the
// wait. Not .aligned: callers may be divergent (the producer warpgroup's idle lanes).
__device__ __forceinline__ void cluster_arrive_release() {
  asm volatile("barrier.cluster.arrive.release;\n" ::: "memory");
}
__device__ __forceinline__ void cluster_wait_acquire() {
  asm volatile("barrier.cluster.wait.acquire;\n" ::: "memory");
}
__device__ __forceinline__ void cluster_sync() {
  cluster_arrive_release();
  cluster_wait_acquire();
}

// The shared::cluster address of `smem_address` (a shared::cta address of this CTA) in the
// shared memory of the cluster's CTA `rank`.
__device__ __forceinline__ uint32_t cluster_map_shared(uint32_t smem_address, uint32_t rank) {
  uint32_t mapped;
  asm("mapa.shared::cluster.u32 %0, %1, %2;\n"
               : "=r"(mapped)
               : "r"(smem_address), "r"(rank));
  return mapped;
}

}  // namespace flashcore::detail
