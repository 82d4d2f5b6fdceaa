// ldmatrix.sync.aligned.m8n8.x4(.trans).shared.b16 (sm75+): one warp loads four 8x8 matrices of
// 16-bit elements from shared memory into registers in the mma.sync fragment layout.
//
// Lanes 8i..8i+7 give the addresses of the 8 rows (16 bytes each) of matrix i; register i of
// lane l receives matrix i's row l / 4, elements 2(l % 4) and 2(l % 4) + 1. With .trans lane l
// receives column l / 4, rows 2(l % 4) and 2(l % 4) + 1 instead, i.e. the element pair that a
// B fragment needs when the matrix is stored k-major (V in attention).
#pragma once

#include <cstdint>

namespace flashcore::detail {

// Shared-memory address (32-bit, .shared window) of a generic pointer into shared memory.
__device__ __forceinline__ uint32_t shared_address(const void* ptr) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(ptr));
}

__device__ __forceinline__ void ldmatrix_x4(uint32_t (&regs)[4], uint32_t smem_row_address) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(regs[0]), "=r"(regs[1]), "=r"(regs[2]), "=r"(regs[3])
               : "r"(smem_row_address));
}

__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&regs)[4], uint32_t smem_row_address) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(regs[0]), "=r"(regs[1]), "=r"(regs[2]), "=r"(regs[3])
               : "r"(smem_row_address));
}

}  // namespace flashcore::detail
