// wgmma shared-memory matrix descriptors for tiles stored with the 128-byte swizzle that TMA's
// CU_TENSOR_MAP_SWIZZLE_128B writes.
//
// Descriptor bits (PTX ISA, "Matrix Descriptor Format"): [0,14) start address >> 4,
// [16,30) leading-dimension byte offset (LBO) >> 4, [32,46) stride-dimension byte offset (SBO) >> 4,
// [49,52) base offset (0: every tile starts on a 1024-byte boundary), [62,64) swizzle mode
// (1 = 128B).
//
// The tiles FlashCore uses are "column blocks": a tile of R rows x C 16-bit elements is stored as
// C/64 blocks side by side, each block R rows of 128 bytes (64 elements), row r at r*128 bytes, the
// sixteen-byte chunk c of row r stored at chunk position c ^ (r % 8). Eight rows form one
// 1024-byte swizzle atom.
//
// * K-major operand (the reduction dimension K is the contiguous one: Q and K for S = Q K^T):
//   rows are M/N. Core-matrix groups of 8 rows are SBO = 1024 bytes apart; one wgmma reads K = 16
//   elements = 32 bytes of each row, so step k of a block starts 32*k bytes later (the hardware
//   applies the swizzle to the absolute address, so a start inside the atom is fine). LBO is not
//   used for swizzled K-major layouts (set to 1 by convention).
// * MN-major operand (M/N contiguous: V as the B operand of O = P V, read with the transpose bit):
//   rows are K. Groups of 8 K-rows are SBO = 1024 bytes apart; the next 64 elements of N live in
//   the next column block, LBO = rows * 128 bytes away. Step k (16 rows of K) starts 2048*k later.
#pragma once

#include <cstdint>

namespace flashcore::detail {

constexpr uint32_t kSwizzleBytes = 128;                 // one swizzled row: 64 16-bit elements
constexpr uint32_t kSwizzleAtomBytes = 8 * kSwizzleBytes;  // 8 rows: the pattern's period
constexpr uint32_t kElementsPerSwizzleRow = 64;
// Descriptor fields (the header's bit list): 14 bits each, in 16-byte units; the start address
// is the low 18 bits of a shared-memory address (the window ends below 256 KB).
constexpr uint32_t kDescriptorAddressMask = 0x3FFFF;
constexpr uint32_t kDescriptorFieldMask = 0x3FFF;
constexpr int kDescriptorLboShift = 16;       // in the low word
constexpr int kDescriptorSwizzleShift = 30;   // bits [62,64) of the descriptor: 30 of the high word
constexpr uint32_t kDescriptorSwizzle128B = 1;

// The descriptor of the operand `offset` bytes into a tile that starts at `tile_address`: the
// tile's encoded start address plus offset >> 4. The sum cannot carry into LBO's bits: shared
// memory ends below 256 KB, where start addresses fill the field's 14 bits, and every tile starts
// on a 16-byte boundary.
__device__ __forceinline__ uint64_t make_smem_descriptor(uint32_t tile_address, uint32_t offset,
                                                         uint32_t leading_byte_offset,
                                                         uint32_t stride_byte_offset) {
  const uint32_t lbo = (leading_byte_offset >> 4) & kDescriptorFieldMask;
  const uint32_t start = (tile_address & kDescriptorAddressMask) >> 4;
  const uint32_t base = start | (lbo << kDescriptorLboShift);
  const uint32_t high = ((stride_byte_offset >> 4) & kDescriptorFieldMask) |
                        (kDescriptorSwizzle128B << kDescriptorSwizzleShift);
  return (static_cast<uint64_t>(high) << 32) | (base + (offset >> 4));
}

// The operand `offset` bytes into a tile: with kStepped (the tuning table's kStepDescriptors,
// per row) the steps of one tile share the encoding of its base and each costs one add of a
// constant; otherwise each step's address is encoded whole (four more uniform operations a
// wgmma), as the rows without the switch were measured.
template <bool kStepped>
__device__ __forceinline__ uint64_t smem_descriptor_at(uint32_t tile_address, uint32_t offset,
                                                       uint32_t leading_byte_offset,
                                                       uint32_t stride_byte_offset) {
  return kStepped ? make_smem_descriptor(tile_address, offset, leading_byte_offset,
                                         stride_byte_offset)
                  : make_smem_descriptor(tile_address + offset, 0, leading_byte_offset,
                                         stride_byte_offset);
}

// K-major operand, k-th 16-element step along K, of a column-block tile with `rows` rows.
template <int kRows, bool kStepped = false>
__device__ __forceinline__ uint64_t kmajor_descriptor(uint32_t tile_address, int k_step) {
  constexpr uint32_t kBlockBytes = kRows * kSwizzleBytes;
  constexpr uint32_t kStepsPerBlock = kElementsPerSwizzleRow / 16;
  const uint32_t offset = (k_step / kStepsPerBlock) * kBlockBytes + (k_step % kStepsPerBlock) * 32;
  return smem_descriptor_at<kStepped>(tile_address, offset, 16, kSwizzleAtomBytes);
}

// MN-major operand (transpose bit set), k-th 16-row step along K, of a column-block tile whose
// rows are K (`kRows` of them) and whose columns are N.
template <int kRows, bool kStepped = false>
__device__ __forceinline__ uint64_t mnmajor_descriptor(uint32_t tile_address, int k_step) {
  constexpr uint32_t kBlockBytes = kRows * kSwizzleBytes;
  return smem_descriptor_at<kStepped>(tile_address, k_step * 16 * kSwizzleBytes, kBlockBytes,
                                      kSwizzleAtomBytes);
}

// Byte offset of element (row, col) in a column-block tile with `kRows` rows (for threads that
// write such a tile with ordinary stores, e.g. the epilogue staging O for a TMA store).
template <int kRows>
__device__ __forceinline__ uint32_t swizzled_offset(int row, int col) {
  const int block = col / kElementsPerSwizzleRow;
  const int chunk = (col % kElementsPerSwizzleRow) / 8;
  const int in_chunk_bytes = (col % 8) * 2;
  return block * (kRows * kSwizzleBytes) + row * kSwizzleBytes + ((chunk ^ (row % 8)) * 16) +
         in_chunk_bytes;
}

}  // namespace flashcore::detail
