// Which kernel a packed Hopper call runs (cuda/sm90/decode_dispatch.h): the decode kernel for
// tiles of at most one 64-row slab that fit the SMs, for gathered caches of any batch, and for
// KV-cache decode with a dense q at any batch from head_dim 128 up; the general persistent
// kernel for the rest. A wrong choice runs correctly but slower (up to 14% at b64 x 4096 d64
// dense, docs/kernels.md run 224), which no GPU test would notice, so the table is checked here.
#include <gtest/gtest.h>

#include <cstdint>

#include "common/params.h"
#include "cuda/sm90/decode_dispatch.h"

namespace flashcore::detail {
namespace {

constexpr int kBlockN = 128;
constexpr int kRows = 64;  // one consumer's slab
constexpr int kSms = 132;

// A decode step: one query of 32 heads over 8 KV heads (4 rows a packed tile), b64 x 4096 keys.
AttentionParams decode_step() {
  AttentionParams params;
  params.batch = 64;
  params.heads_q = 32;
  params.heads_kv = 8;
  params.seqlen_q = 1;
  params.seqlen_k = 4096;
  params.head_dim = 128;
  return params;
}
constexpr int64_t kManyTiles = 64 * 8;  // more than the SMs: waves
constexpr int64_t kFewTiles = 16 * 8;

template <class Layout, int kHeadDim>
bool decode_kernel(const AttentionParams& params, int64_t tiles) {
  return sm90_packed_call_runs_decode_kernel<Layout, kHeadDim, kBlockN, kRows>(params, tiles,
                                                                              kSms);
}

TEST(Sm90DecodeDispatch, TilesThatFitTheSmsRunTheDecodeKernelInEveryLayout) {
  const AttentionParams params = decode_step();
  EXPECT_TRUE((decode_kernel<Sm90DenseLayout, 64>(params, kFewTiles)));
  EXPECT_TRUE((decode_kernel<Sm90DenseLayout, 128>(params, kSms)));
  EXPECT_TRUE((decode_kernel<Sm90ServingLayout, 64>(params, kFewTiles)));
}

TEST(Sm90DecodeDispatch, DenseCallsInWavesKeepTheGeneralKernel) {
  const AttentionParams params = decode_step();
  EXPECT_FALSE((decode_kernel<Sm90DenseLayout, 64>(params, kManyTiles)));
  EXPECT_FALSE((decode_kernel<Sm90DenseLayout, 128>(params, kManyTiles)));
  EXPECT_FALSE((decode_kernel<Sm90DenseLayout, 256>(params, kManyTiles)));
}

TEST(Sm90DecodeDispatch, KvCachesWithADenseQRunTheDecodeKernelAtAnyBatchFromD128) {
  const AttentionParams params = decode_step();  // a contiguous cache or TMA-box pages
  EXPECT_TRUE((decode_kernel<Sm90ServingLayout, 128>(params, kManyTiles)));
  EXPECT_TRUE((decode_kernel<Sm90ServingLayout, 256>(params, kManyTiles)));
  EXPECT_FALSE((decode_kernel<Sm90ServingLayout, 64>(params, kManyTiles)));
}

TEST(Sm90DecodeDispatch, APackedQInWavesKeepsTheGeneralKernelUnlessGathered) {
  static const int32_t kCuSeqlens[2] = {0, 1};  // only its presence matters here
  AttentionParams params = decode_step();
  params.cu_seqlens_q = kCuSeqlens;
  EXPECT_FALSE((decode_kernel<Sm90ServingLayout, 128>(params, kManyTiles)));
  static const int32_t kPageTable[1] = {0};
  params.page_table = kPageTable;
  params.page_size = 16;  // gathered by the decode kernel (fewer than 32 rows a box)
  EXPECT_TRUE((decode_kernel<Sm90ServingLayout, 128>(params, kManyTiles)));
  params.page_size = 64;  // TMA boxes
  EXPECT_FALSE((decode_kernel<Sm90ServingLayout, 128>(params, kManyTiles)));
}

TEST(Sm90DecodeDispatch, GatheredCachesRunTheDecodeKernelAtAnyHeadDim) {
  static const int32_t kPageTable[1] = {0};
  AttentionParams params = decode_step();
  params.page_table = kPageTable;
  params.page_size = 1;
  EXPECT_TRUE((decode_kernel<Sm90ServingLayout, 64>(params, kManyTiles)));
}

TEST(Sm90DecodeDispatch, TilesOfMoreThanOneSlabRunTheGeneralKernel) {
  AttentionParams params = decode_step();
  params.seqlen_q = 17;  // 68 rows a tile at 4 heads a group
  EXPECT_FALSE((decode_kernel<Sm90ServingLayout, 128>(params, kFewTiles)));
  EXPECT_FALSE((decode_kernel<Sm90DenseLayout, 128>(params, kFewTiles)));
  params.seqlen_q = 16;  // 64 rows: one slab
  EXPECT_TRUE((decode_kernel<Sm90ServingLayout, 128>(params, kManyTiles)));
}

}  // namespace
}  // namespace flashcore::detail
