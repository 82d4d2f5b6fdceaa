// Host emulation stand-in: cp.async as a synchronous 16-byte copy (zero fill when invalid).
#pragma once
#include <cstdint>
#include <cstring>
namespace flashcore::detail {
inline void cp_async_16_zfill(uint32_t smem_address, const void* gmem, bool valid) {
  emu::cp_async_copies.fetch_add(1);
  if (valid) {
    std::memcpy(smem + smem_address, gmem, 16);
  } else {
    std::memset(smem + smem_address, 0, 16);
  }
}
inline void cp_async_4(uint32_t smem_address, const void* gmem) {
  emu::cp_async_copies.fetch_add(1);
  std::memcpy(smem + smem_address, gmem, 4);
}
inline void cp_async_commit() {}
template <int kPending>
inline void cp_async_wait_group() {}
}  // namespace flashcore::detail
