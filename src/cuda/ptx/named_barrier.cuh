// Named barriers (bar.sync / bar.arrive with an id and a thread count): synchronize a subset of the
// CTA, e.g. the 128 threads of one warpgroup or the 256 threads of two consumer warpgroups.
// Id 0 is __syncthreads(); kernels number theirs from 1 (16 exist per CTA).
#pragma once

#include <cstdint>

namespace flashcore::detail {

// Blocks until `thread_count` threads (a multiple of 32, counted per warp) reached barrier `id`.
__device__ __forceinline__ void named_barrier_sync(uint32_t id, uint32_t thread_count) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(thread_count) : "memory");
}

// Counts this warp towards barrier `id` without waiting: the producer side of a signal.
__device__ __forceinline__ void named_barrier_arrive(uint32_t id, uint32_t thread_count) {
  asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(thread_count) : "memory");
}

}  // namespace flashcore::detail
