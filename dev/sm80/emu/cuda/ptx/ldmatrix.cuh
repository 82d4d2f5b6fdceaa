// Host emulation stand-in for ldmatrix.x4(.trans), following the PTX ISA description: lanes
// 8i..8i+7 address the rows of matrix i; lane l receives row l/4, elements 2(l%4) and 2(l%4)+1
// (with .trans: column l/4, rows 2(l%4) and 2(l%4)+1).
#pragma once
#include <cstdint>
#include <cstring>
namespace flashcore::detail {

inline uint32_t shared_address(const void* ptr) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(ptr));
}

inline uint16_t emu_load_u16(uint32_t address) {
  uint16_t v;
  std::memcpy(&v, smem + address, 2);
  return v;
}

inline void emu_ldmatrix_x4(uint32_t (&regs)[4], uint32_t row_address, bool trans) {
  emu::WarpSlots& w = emu::warp();
  const int l = emu::lane();
  if (row_address % 16 != 0) std::abort();  // ldmatrix rows are 16-byte aligned
  w.address[l] = row_address;
  w.barrier.wait();
  if (l == 0) {
    // Each matrix is one shared-memory wavefront: its 8 row reads must hit 8 different 16-byte
    // slots of a 128-byte line, or the access replays (bank conflict).
    for (int i = 0; i < 4; ++i) {
      unsigned slots = 0;
      for (int r = 0; r < 8; ++r) slots |= 1u << ((w.address[8 * i + r] / 16) % 8);
      if (slots != 0xffu) emu::ldmatrix_conflicts.fetch_add(1);
    }
    emu::ldmatrix_phases.fetch_add(4);
  }
  for (int i = 0; i < 4; ++i) {
    uint16_t lo, hi;
    if (!trans) {
      lo = emu_load_u16(w.address[8 * i + l / 4] + 2 * (2 * (l % 4)));
      hi = emu_load_u16(w.address[8 * i + l / 4] + 2 * (2 * (l % 4) + 1));
    } else {
      lo = emu_load_u16(w.address[8 * i + 2 * (l % 4)] + 2 * (l / 4));
      hi = emu_load_u16(w.address[8 * i + 2 * (l % 4) + 1] + 2 * (l / 4));
    }
    regs[i] = uint32_t(lo) | (uint32_t(hi) << 16);
  }
  w.barrier.wait();
}
inline void ldmatrix_x4(uint32_t (&regs)[4], uint32_t a) { emu_ldmatrix_x4(regs, a, false); }
inline void ldmatrix_x4_trans(uint32_t (&regs)[4], uint32_t a) { emu_ldmatrix_x4(regs, a, true); }

}  // namespace flashcore::detail
