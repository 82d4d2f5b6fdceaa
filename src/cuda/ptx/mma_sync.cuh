// mma.sync.aligned.m16n8k16.row.col with fp32 accumulators (sm80+): one warp multiplies a 16x16
// A tile (row-major) by a 16x8 B tile (column-major) and adds into a 16x8 fp32 tile.
//
// Fragment layouts (PTX ISA, "Matrix Fragments for mma.m16n8k16"), with g = lane / 4 and
// t = lane % 4:
//   A (4 regs, 2 elements each): a0 = (row g,   k 2t..2t+1)   a1 = (row g+8, k 2t..2t+1)
//                                a2 = (row g,   k 2t+8..+9)   a3 = (row g+8, k 2t+8..+9)
//   B (2 regs):                  b0 = (k 2t..2t+1, col g)     b1 = (k 2t+8..+9, col g)
//   C/D (4 floats):              c0,c1 = (row g, col 2t..2t+1)  c2,c3 = (row g+8, col 2t..2t+1)
// C's two 16x8 halves side by side therefore hold exactly A's layout for a 16x16 tile, which is
// what lets attention feed P = softmax(S) from the S accumulator straight into the P V product.
#pragma once

#include <cstdint>

#include "flashcore/flashcore.h"

namespace flashcore::detail {

template <DType kDType>
__device__ __forceinline__ void mma_m16n8k16_row_col_f32(float (&acc)[4], const uint32_t (&a)[4],
                                                         uint32_t b0, uint32_t b1) {
  static_assert(kDType == DType::kFloat16 || kDType == DType::kBFloat16,
                "mma_m16n8k16_row_col_f32 takes fp16 or bf16 operands");
  if constexpr (kDType == DType::kFloat16) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
        "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(acc[0]), "+f"(acc[1]), "+f"(acc[2]), "+f"(acc[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  } else {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
        "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(acc[0]), "+f"(acc[1]), "+f"(acc[2]), "+f"(acc[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
}

}  // namespace flashcore::detail
