// cp.async (sm80+): asynchronous global -> shared copies that bypass the register file, grouped
// with commit_group and waited on with wait_group so a tile's load overlaps earlier compute.
#pragma once

#include <cstdint>

namespace flashcore::detail {

// Copies 16 bytes from global to shared memory, caching in L2 only (.cg: the tile is reused
// from shared memory, not L1). When `valid` is false the source size is 0 and the 16 bytes are
// zero-filled, so rows past the end of a sequence read as zeros without touching memory.
__device__ __forceinline__ void cp_async_16_zfill(uint32_t smem_address, const void* gmem,
                                                  bool valid) {
  constexpr int kCopyBytes = 16;
  const int src_bytes = valid ? kCopyBytes : 0;
  asm volatile("cp.async.cg.shared.global [%0], [%1], %2, %3;\n"
               :
               : "r"(smem_address), "l"(gmem), "n"(kCopyBytes), "r"(src_bytes)
               : "memory");
}

// Copies 4 bytes from global to shared memory (.ca: below 16 bytes cp.async caches in L1 too).
// For small index tables staged ahead of the loads that read them.
__device__ __forceinline__ void cp_async_4(uint32_t smem_address, const void* gmem) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(smem_address), "l"(gmem)
               : "memory");
}

// Closes the group of cp.async issued by this thread since the last commit.
__device__ __forceinline__ void cp_async_commit() {
  asm volatile("cp.async.commit_group;\n" ::: "memory");
}

// Waits until at most kPending of this thread's committed groups are still in flight. Other
// threads' copies become visible only after a barrier (__syncthreads) that follows the wait.
template <int kPending>
__device__ __forceinline__ void cp_async_wait_group() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending) : "memory");
}

// Waits until every cp.async this thread issued has landed, committed to a group or not.
__device__ __forceinline__ void cp_async_wait_all() {
  asm volatile("cp.async.wait_all;\n" ::: "memory");
}

}  // namespace flashcore::detail
