// stmatrix.sync.aligned.m8n8.x4.shared.b16 (sm90+): one warp stores four 8x8 matrices of 16-bit
// elements to shared memory, the inverse of ldmatrix without .trans (ldmatrix.cuh).
//
// Lanes 8i..8i+7 give the addresses of the 8 rows (16 bytes each) of matrix i; register i of
// lane l goes to matrix i's row l / 4, elements 2(l % 4) and 2(l % 4) + 1 (bytes 4(l % 4) to
// 4(l % 4) + 3 of the row).
#pragma once

#include <cstdint>

namespace flashcore::detail {

__device__ __forceinline__ void stmatrix_x4(uint32_t smem_row_address, const uint32_t (&regs)[4]) {
  asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};\n"
               :
               : "r"(smem_row_address), "r"(regs[0]), "r"(regs[1]), "r"(regs[2]), "r"(regs[3])
               : "memory");
}

}  // namespace flashcore::detail
