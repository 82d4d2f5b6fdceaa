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

// named_barrier_sync that also returns whether `predicate` held in any of the threads
// (bar.red.or.pred): one thread's decision reaches the others without a shared-memory word.
__device__ __forceinline__ bool named_barrier_sync_or(uint32_t id, uint32_t thread_count,
                                                      bool predicate) {
  uint32_t any;
  asm volatile(
      "{\n"
      ".reg .pred p, q;\n"
      "setp.ne.u32 p, %1, 0;\n"
      "bar.red.or.pred q, %2, %3, p;\n"
      "selp.u32 %0, 1, 0, q;\n"
      "}\n"
      : "=r"(any)
      : "r"(static_cast<uint32_t>(predicate)), "r"(id), "r"(thread_count)
      : "memory");
  return any != 0;
}

// Counts this warp towards barrier `id` without waiting: the producer side of a signal.
__device__ __forceinline__ void named_barrier_arrive(uint32_t id, uint32_t thread_count) {
  asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(thread_count) : "memory");
}

}  // namespace flashcore::detail
