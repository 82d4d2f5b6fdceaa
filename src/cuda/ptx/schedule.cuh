// Where ptxas may move instructions. ptxas moves a wgmma wait (which has no register inputs)
// anywhere within its basic block, but not above a branch it cannot prove dead: a wait placed
// after the branch in the source stays after what comes before it. Other instructions may still
// cross the branch: ptxas sank a step's exponentials past one (docs/kernels.md, runs 274-275),
// so read the SASS of every kernel that relies on it.
#pragma once

#include <cstdint>

namespace flashcore::detail {

// Always false, but from a value ptxas cannot know (the SM count, never 0): the condition of a
// basic_block_end(). Read it once, outside the loop that ends its blocks. (The identities of
// sm80/compiler_hints.cuh hide a value from the compiler before ptxas only: an empty asm leaves
// nothing in the PTX, so ptxas sees through them.)
__device__ __forceinline__ bool opaque_false() {
  uint32_t sm_count;
  asm volatile("mov.u32 %0, %%nsmid;" : "=r"(sm_count));
  return sm_count == 0;
}

// Ends the basic block here: a branch on `never` (opaque_false()) around a block ptxas must keep,
// a NANOSLEEP and a store of `computed_before`. The store names the value as an input, so every
// instruction that computes it stays before the branch (the NANOSLEEP alone does not hold them:
// see above). The block never runs, so the store's address (0) is never written. A block of one
// predicable instruction (the store alone) would be predicated instead, with no branch and no
// block end. In the fp8 d64 step the branch is the one instruction that runs (on a predicate set
// once a tile); ptxas moves the add of `computed_before` into the block, so its inputs are what
// the branch waits for.
__device__ __forceinline__ void basic_block_end(bool never, float computed_before) {
  if (never) {
    asm volatile(
        "nanosleep.u32 0;\n\t"
        "st.global.f32 [%0], %1;" ::"l"(0ull),
        "f"(computed_before)
        : "memory");
  }
}

}  // namespace flashcore::detail
