// The mask arithmetic that GPU kernels take shortcuts with (cuda/common/mask.cuh), checked on the
// host against the one definition of visibility, MaskPolicy::visible. A kernel that skips a KV
// tile or an element wrongly shows it only as a wrong answer on the lengths a GPU run happens
// to test; here every small case is enumerated.
#include <gtest/gtest.h>

#include <string>

#include "cuda/common/mask.cuh"

namespace flashcore::detail {
namespace {

// The key columns of a thread's row in the wgmma accumulator layout: 8 (j / 2) + j % 2 past the
// thread's first column. The sm90 mask takes the visible ones as a prefix of this count.
TEST(MaskTiles, ThreadColumnsBeforeCountsTheVisiblePrefix) {
  for (int columns_per_row : {20, 32, 40, 88}) {  // BLOCK_N 80, 128, 160, 176
    for (int until_limit = -300; until_limit <= 800; ++until_limit) {
      int visible = 0;
      bool prefix = true;
      for (int j = 0; j < columns_per_row; ++j) {
        const bool before = 8 * (j / 2) + j % 2 < until_limit;
        if (before && !prefix) ADD_FAILURE() << "visible columns are not a prefix";
        prefix = prefix && before;
        visible += before ? 1 : 0;
      }
      const int counted = thread_columns_before(until_limit);
      EXPECT_EQ(counted < columns_per_row ? counted : columns_per_row, visible)
          << "until_limit " << until_limit << ", " << columns_per_row << " columns";
    }
  }
}

// A consumer of a tile passes the tile's last KV tiles that its own rows cannot see
// (sm90_dead_blocks). Every tile it passes must hold no visible key for any of its rows in the
// sequence, and the tile before them must hold one (else it passed too few).
template <bool kCausal>
void check_hidden_tiles(int seqlen_q, int seqlen_k, int block_m, int slab_rows, int block_n) {
  AttentionParams params;
  params.batch = 1;
  params.seqlen_q = seqlen_q;
  params.seqlen_k = seqlen_k;
  const MaskPolicy<kCausal> mask(params, 0);
  // Blocks as the sm90 causal kernels place them: from a multiple of the slab below row 0.
  for (int block_begin = -block_m + slab_rows; block_begin < seqlen_q; block_begin += slab_rows) {
    const KvTileRange range = mask.kv_tiles(block_begin, block_m, block_n);
    for (int slab = block_begin; slab < block_begin + block_m; slab += slab_rows) {
      const int first_row = slab > 0 ? slab : 0;
      const int end_row = slab + slab_rows < seqlen_q ? slab + slab_rows : seqlen_q;
      if (first_row >= end_row) continue;  // no row: the kernel passes the whole tile
      SCOPED_TRACE("seqlen_q " + std::to_string(seqlen_q) + " seqlen_k " +
                   std::to_string(seqlen_k) + " block " + std::to_string(block_begin) +
                   " slab " + std::to_string(slab));
      const int hidden = mask.trailing_hidden_tiles(range, slab, slab_rows, block_n);
      ASSERT_GE(hidden, 0);
      ASSERT_LE(hidden, range.count());
      auto sees_tile = [&](int tile) {
        for (int row = first_row; row < end_row; ++row)
          for (int col = tile * block_n; col < (tile + 1) * block_n; ++col)
            if (mask.visible(row, col)) return true;
        return false;
      };
      for (int tile = range.end - hidden; tile < range.end; ++tile)
        EXPECT_FALSE(sees_tile(tile)) << "passed tile " << tile << " holds a visible key";
      if (hidden < range.count()) {
        EXPECT_TRUE(sees_tile(range.end - hidden - 1))
            << "tile " << range.end - hidden - 1 << " is hidden too but was not passed";
      }
    }
  }
}

TEST(MaskTiles, TrailingHiddenTilesAreExactlyTheUnseenOnes) {
  for (int seqlen_q : {1, 17, 64, 65, 200, 300, 1000}) {
    for (int seqlen_k : {1, 100, 257, 1000, 1333}) {
      check_hidden_tiles<true>(seqlen_q, seqlen_k, 192, 64, 128);  // d64: three consumers
      check_hidden_tiles<true>(seqlen_q, seqlen_k, 128, 64, 80);   // d256
      check_hidden_tiles<true>(seqlen_q, seqlen_k, 128, 64, 160);  // d128 long
      check_hidden_tiles<false>(seqlen_q, seqlen_k, 192, 64, 128);
    }
  }
}

TEST(MaskTiles, CausalOneThousandTwentyFourInBlocksOf192) {
  // 1k in 192-row blocks from row -128 (the partial block first), 128-key tiles: the block of
  // rows 256-447 visits tiles 0-3; its first two slabs (rows 256-383) see no key of tile 3.
  AttentionParams params;
  params.batch = 1;
  params.seqlen_q = params.seqlen_k = 1024;
  const MaskPolicy<true> mask(params, 0);
  const KvTileRange range = mask.kv_tiles(256, 192, 128);
  EXPECT_EQ(range.end, 4);
  EXPECT_EQ(mask.trailing_hidden_tiles(range, 256, 64, 128), 1);
  EXPECT_EQ(mask.trailing_hidden_tiles(range, 320, 64, 128), 1);
  EXPECT_EQ(mask.trailing_hidden_tiles(range, 384, 64, 128), 0);
}

}  // namespace
}  // namespace flashcore::detail
