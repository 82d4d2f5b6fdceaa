// FLOPs of a problem (the TFLOPS every tool reports): 4 * b * hq * d per visible (query, key)
// pair, the causal square halved as BENCHMARKS.md counts it, and the bottom-right mask's exact
// visible pairs when seqlen_q != seqlen_k (bench/compare_grids.py counts them the same way).
#include <gtest/gtest.h>

#include "testing/accuracy.h"

namespace flashcore::test {
namespace {

testing::ProblemShape shape(int sq, int sk, bool causal) {
  testing::ProblemShape s;
  s.batch = 2, s.seqlen_q = sq, s.seqlen_k = sk, s.heads_q = 4, s.heads_kv = 2, s.head_dim = 64;
  s.causal = causal;
  return s;
}

// Visible pairs of one (batch, head), counted row by row.
double brute_force_pairs(int sq, int sk) {
  double pairs = 0;
  for (int i = 0; i < sq; ++i) {
    const int last = i + sk - sq;  // bottom-right: query i sees keys 0 .. last
    pairs += last < 0 ? 0 : (last < sk ? last + 1 : sk);
  }
  return pairs;
}

TEST(ProblemFlops, NonCausalCountsEveryPair) {
  EXPECT_DOUBLE_EQ(shape(100, 300, false).flops(), 4.0 * 2 * 4 * 64 * 100 * 300);
}

TEST(ProblemFlops, CausalSquareIsHalved) {
  EXPECT_DOUBLE_EQ(shape(1000, 1000, true).flops(), 4.0 * 2 * 4 * 64 * 1000 * 1000 / 2);
}

TEST(ProblemFlops, CausalWithUnequalLengthsCountsVisiblePairs) {
  for (auto [sq, sk] : {std::pair{2048, 8192}, {4, 4096}, {1, 100}, {300, 65}, {65, 17}}) {
    EXPECT_DOUBLE_EQ(shape(sq, sk, true).flops(), 4.0 * 2 * 4 * 64 * brute_force_pairs(sq, sk))
        << "sq " << sq << " sk " << sk;
  }
}

}  // namespace
}  // namespace flashcore::test
