// The length that picks a call's row of the Hopper tuning table (cuda/sm90/tile_table.h,
// sm90_bucket_length): seqlen_q for the 16-bit rows; for the fp8 rows the square length whose
// query rows see as many keys, so a chunked prefill or a cross attention over many keys runs the
// long-tile row that a long square call runs (docs/kernels.md, run 331).
#include <gtest/gtest.h>

#include <cstdint>

#include "cuda/sm90/tile_table.h"

namespace flashcore::detail {
namespace {

constexpr int kFp8 = 1, kBf16 = 2;  // input element bytes, as the table keys its rows

// The row a dense call of these lengths runs (before any wave peer).
int dense_row(int head_dim, bool causal, int input_bytes, int seqlen_q, int seqlen_k) {
  return sm90_bucket_row(head_dim, causal, input_bytes,
                         sm90_bucket_length(seqlen_q, seqlen_k, causal, input_bytes));
}

TEST(Sm90RowBucket, SixteenBitRowsGoBySeqlenQ) {
  for (bool causal : {false, true}) {
    EXPECT_EQ(sm90_bucket_length(2048, 8192, causal, kBf16), 2048);
    EXPECT_EQ(sm90_bucket_length(4096, 1000, causal, kBf16), 4096);
  }
}

TEST(Sm90RowBucket, Fp8SquareCallsGoBySeqlenQ) {
  for (int seqlen : {1, 512, 2048, 2049, 16384}) {
    EXPECT_EQ(sm90_bucket_length(seqlen, seqlen, false, kFp8), seqlen);
    EXPECT_EQ(sm90_bucket_length(seqlen, seqlen, true, kFp8), seqlen);
  }
}

TEST(Sm90RowBucket, Fp8CallsOverMoreKeysGoByTheKeysARowSees) {
  // Causal, bottom-right aligned: rows see sk - sq + 1 .. sk keys, on average those of a square
  // call of 2 sk - sq rows.
  EXPECT_EQ(sm90_bucket_length(2048, 8192, true, kFp8), 14336);
  EXPECT_EQ(sm90_bucket_length(1, 5000, true, kFp8), 9999);
  EXPECT_EQ(sm90_bucket_length(1024, 8192, false, kFp8), 8192);
  // Fewer keys than queries: the query rows still set the tile count; seqlen_q.
  EXPECT_EQ(sm90_bucket_length(4096, 1000, true, kFp8), 4096);
  EXPECT_EQ(sm90_bucket_length(4096, 1000, false, kFp8), 4096);
  // The largest lengths do not overflow.
  EXPECT_EQ(sm90_bucket_length(1, 0x7fffffff, true, kFp8), int64_t(2) * 0x7fffffff - 1);
}

TEST(Sm90RowBucket, Fp8ChunkedPrefillRunsTheLongRow) {
  const int d128_causal_rows = sm90_row_count(128, true, kFp8);
  ASSERT_GE(d128_causal_rows, 2);
  // A square 2k call stays on its bucket's row; a 2k chunk of 8k keys runs the last one.
  EXPECT_LT(dense_row(128, true, kFp8, 2048, 2048), d128_causal_rows - 1);
  EXPECT_EQ(dense_row(128, true, kFp8, 2048, 8192), d128_causal_rows - 1);
  // The 16-bit rows keep the 2k bucket for the same chunk.
  EXPECT_EQ(dense_row(128, true, kBf16, 2048, 8192), dense_row(128, true, kBf16, 2048, 2048));
}

}  // namespace
}  // namespace flashcore::detail
