// Identities the compiler cannot see through, used where the sm80 kernel sits at the
// 255-register limit: a value derived from an opaque copy is recomputed where it is used instead
// of being hoisted out of the KV loop and held in a register (or spilled) for the whole loop.
#pragma once

#include <cstdint>

namespace flashcore::detail {

// threadIdx.x read through an opaque asm volatile, so the compiler recomputes the per-thread
// address arithmetic derived from it at each use instead of hoisting dozens of loop-invariant
// 64-bit addresses out of the KV loop (which spills them at 255 registers). The recomputation
// is a few integer instructions per tile, free next to the tile's mma work.
__device__ __forceinline__ int thread_index_unhoisted() {
  int tid;
  asm volatile("mov.u32 %0, %%tid.x;\n" : "=r"(tid));
  return tid;
}

// The same for any value: an identity the compiler cannot see through, so what is derived from
// it is recomputed where it is used (from the constant bank, for kernel parameters).
__device__ __forceinline__ int unhoisted(int value) {
  asm volatile("" : "+r"(value));
  return value;
}
__device__ __forceinline__ int64_t unhoisted(int64_t value) {
  asm volatile("" : "+l"(value));
  return value;
}

}  // namespace flashcore::detail
