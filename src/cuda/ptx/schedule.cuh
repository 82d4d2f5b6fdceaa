// Where ptxas may move instructions. ptxas schedules each basic block on its own, so a branch it
// cannot prove dead keeps every instruction on its side: a wait placed after the branch in the
// source stays after everything before it. (The compiler before ptxas may still sink a value
// whose only uses lie past the branch; docs/kernels.md, run 275, has a case.)
#pragma once

#include <cstdint>

namespace flashcore::detail {

// Always false, but from a value ptxas cannot know (the SM count, never 0): the condition of a
// basic_block_end(). Read it once, outside the loop that ends its blocks.
__device__ __forceinline__ bool opaque_false() {
  uint32_t sm_count;
  asm volatile("mov.u32 %0, %%nsmid;" : "=r"(sm_count));
  return sm_count == 0;
}

// Ends the basic block here: a branch on `never` (opaque_false()) around a no-op ptxas must keep.
// Costs a compare and a branch (never taken, uniform).
__device__ __forceinline__ void basic_block_end(bool never) {
  if (never) asm volatile("nanosleep.u32 0;" ::: "memory");
}

}  // namespace flashcore::detail
