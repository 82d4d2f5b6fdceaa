// setmaxnreg (sm90a): a warpgroup gives registers back to the pool (dec) or takes more (inc), so
// a producer warpgroup that only issues TMA can run on few registers while the consumers hold the
// wgmma accumulators. Takes effect only when the kernel has a register cap at entry
// (__launch_bounds__(threads, 1)) and every warp of the warpgroup executes the same call.
#pragma once

namespace flashcore::detail {

template <int kRegisters>
__device__ __forceinline__ void setmaxnreg_dec() {
  static_assert(kRegisters % 8 == 0 && kRegisters >= 24 && kRegisters <= 256,
                "setmaxnreg takes a multiple of 8 in [24, 256]");
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(kRegisters));
}

template <int kRegisters>
__device__ __forceinline__ void setmaxnreg_inc() {
  static_assert(kRegisters % 8 == 0 && kRegisters >= 24 && kRegisters <= 256,
                "setmaxnreg takes a multiple of 8 in [24, 256]");
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(kRegisters));
}

}  // namespace flashcore::detail
