// Prefetches into the L2: a hint, with no result and no completion to wait for.
#pragma once

namespace flashcore::detail {

// Brings the 128-byte line holding `ptr` (global memory) into the L2.
__device__ __forceinline__ void prefetch_global_l2(const void* ptr) {
  asm volatile("prefetch.global.L2 [%0];\n" ::"l"(ptr));
}

}  // namespace flashcore::detail
