// Host emulation stand-in for mma.sync.m16n8k16.row.col.f32, from the PTX ISA fragment figures
// (g = lane/4, t = lane%4): A a0 (g, 2t..), a1 (g+8, 2t..), a2 (g, 2t+8..), a3 (g+8, 2t+8..);
// B b0 (k 2t.., n g), b1 (k 2t+8.., n g); C c0,c1 (g, 2t..), c2,c3 (g+8, 2t..).
#pragma once
#include <cstdint>
#include "flashcore/flashcore.h"
namespace flashcore::detail {

template <DType kDType>
inline float emu_half_of(uint32_t reg, int half) {
  return emu_widen<kDType>(static_cast<uint16_t>(half ? reg >> 16 : reg & 0xffffu));
}

template <DType kDType>
inline void mma_m16n8k16_row_col_f32(float (&acc)[4], const uint32_t (&a)[4], uint32_t b0,
                                     uint32_t b1) {
  emu::WarpSlots& w = emu::warp();
  const int l = emu::lane();
  for (int i = 0; i < 4; ++i) w.a[l][i] = a[i];
  w.b[l][0] = b0;
  w.b[l][1] = b1;
  w.barrier.wait();
  const auto a_at = [&](int r, int k) {
    const int lane = 4 * (r % 8) + (k % 8) / 2;
    const int reg = (r >= 8 ? 1 : 0) + (k >= 8 ? 2 : 0);
    return emu_half_of<kDType>(w.a[lane][reg], k % 2);
  };
  const auto b_at = [&](int k, int n) {
    return emu_half_of<kDType>(w.b[4 * n + (k % 8) / 2][k >= 8 ? 1 : 0], k % 2);
  };
  const int g = l / 4, t = l % 4;
  for (int e = 0; e < 4; ++e) {
    const int row = g + (e >= 2 ? 8 : 0);
    const int col = 2 * t + (e % 2);
    float sum = acc[e];
    for (int k = 0; k < 16; ++k) sum += a_at(row, k) * b_at(k, col);
    acc[e] = sum;
  }
  w.barrier.wait();
}

}  // namespace flashcore::detail
