// The sm80 forward kernel's tile table: one constexpr entry per (head_dim, causal), and every
// size the kernel derives from it. Host-compilable (no CUDA types) so launchers and docs agree.
//
// Pipeline depth is fixed by the algorithm, not the table: one Q tile, one K buffer and one V
// buffer, with K_{j+1} loading under the softmax and P V_j of tile j and V_j loading under
// S_j = Q K_j^T (FlashAttention-2's schedule), so shared memory holds (block_m + 2 block_n) rows.
#pragma once

#include <cstddef>

namespace flashcore::detail {

struct Sm80Tile {
  int block_m;  // query rows per CTA
  int block_n;  // key/value rows per pipeline step
  int warps;    // each warp owns block_m / warps query rows (a multiple of the 16-row mma tile)
  // Where the load of K_{j+1} is issued: before the softmax of tile j (FlashAttention-2's order,
  // the load overlaps softmax and P V) or after it (overlaps P V only). The later issue keeps
  // the load's address arithmetic out of the point of peak register pressure (S and O both
  // live), which is what removes the last spill at head_dim 128.
  bool k_load_after_softmax;
};

// Register budget drives the table: a warp holds its O accumulator (rows_per_warp x head_dim
// fp32) and its S tile (rows_per_warp x block_n fp32) at once, within 255 registers per thread.
//   d64  128x128 (causal too): O 64 + S 128 regs. Causal was 128x64 first, but the CTA count
//        depends on block_m only, the diagonal wastes the same area when seqlen_k - seqlen_q is a
//        multiple of 128 (up to 64 more columns per CTA otherwise), and 128 halves the per-tile
//        barriers, max reductions and O rescales. 0 spills at 254-255 registers.
//   d96  128x64: O 96 + S 64 regs.
//   d128 128x64: O 128 + S 64 regs.
//   d256 128x64 on 8 warps (16 rows each): O 128 + S 32 regs; 128 KB of shared memory.
constexpr Sm80Tile sm80_tile(int head_dim, [[maybe_unused]] bool causal) {
  return head_dim == 64    ? Sm80Tile{128, 128, 4, false}
         : head_dim == 96  ? Sm80Tile{128, 64, 4, false}
         : head_dim == 128 ? Sm80Tile{128, 64, 4, true}
         : head_dim == 256 ? Sm80Tile{128, 64, 8, false}
                           : Sm80Tile{0, 0, 0, false};
}

template <int kHeadDim, bool kCausal, size_t kElementBytes>
struct Sm80TileShape {
  static constexpr Sm80Tile kTile = sm80_tile(kHeadDim, kCausal);
  static_assert(kTile.block_m > 0, "sm80 kernel: head_dim must be 64, 96, 128 or 256");

  static constexpr int kBlockM = kTile.block_m;
  static constexpr int kBlockN = kTile.block_n;
  static constexpr int kWarps = kTile.warps;
  static constexpr bool kLoadKAfterSoftmax = kTile.k_load_after_softmax;
  static constexpr int kThreads = kWarps * 32;
  static constexpr int kMmaM = 16, kMmaN = 8, kMmaK = 16;  // mma.sync.m16n8k16
  static constexpr int kRowsPerWarp = kBlockM / kWarps;
  static constexpr int kMTiles = kRowsPerWarp / kMmaM;    // 16-row mma tiles per warp
  static constexpr int kSBlocks = kBlockN / kMmaN;        // n8 column blocks of S
  static constexpr int kOBlocks = kHeadDim / kMmaN;       // n8 column blocks of O
  static constexpr int kQkSteps = kHeadDim / kMmaK;       // k16 steps of Q K^T
  static constexpr int kPvSteps = kBlockN / kMmaK;        // k16 steps of P V
  static_assert(kRowsPerWarp % kMmaM == 0, "each warp owns whole 16-row mma tiles");
  static_assert(kBlockN % 16 == 0 && kHeadDim % 16 == 0, "ldmatrix.x4 loads 16x16 blocks");

  static constexpr size_t kQBytes = size_t(kBlockM) * kHeadDim * kElementBytes;
  static constexpr size_t kKvBytes = size_t(kBlockN) * kHeadDim * kElementBytes;
  static constexpr size_t kSmemBytes = kQBytes + 2 * kKvBytes;  // Q + K + V; O reuses Q
  static constexpr size_t kDefaultSmemLimit = 48 * 1024;  // above it, opt in per kernel
};

}  // namespace flashcore::detail
