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

// A decode step: one query of 32 heads over 8 KV heads (4 rows a packed tile), 4096 keys.
AttentionParams decode_step(int batch = 64) {
  AttentionParams params;
  params.batch = batch;
  params.heads_q = 32;
  params.heads_kv = 8;
  params.seqlen_q = 1;
  params.seqlen_k = 4096;
  params.head_dim = 128;
  return params;
}

// The launch's tiles: one per sequence and KV head while a group's rows fit one slab.
int64_t packed_tiles(const AttentionParams& params) {
  const int64_t rows = int64_t(params.seqlen_q) * params.group_size();
  return (rows + kRows - 1) / kRows * params.batch * params.heads_kv;
}

template <class Layout, int kHeadDim>
bool decode_kernel(const AttentionParams& params) {
  return sm90_packed_call_runs_decode_kernel<Layout, kHeadDim, kBlockN, kRows>(
      params, packed_tiles(params), kSms);
}

TEST(Sm90DecodeDispatch, TilesThatFitTheSmsRunTheDecodeKernelInEveryLayout) {
  const AttentionParams params = decode_step(/*batch=*/16);  // 128 tiles
  ASSERT_LE(packed_tiles(params), kSms);
  EXPECT_TRUE((decode_kernel<Sm90DenseLayout, 64>(params)));
  EXPECT_TRUE((decode_kernel<Sm90DenseLayout, 128>(params)));
  EXPECT_TRUE((decode_kernel<Sm90ServingLayout, 64>(params)));
}

TEST(Sm90DecodeDispatch, DenseCallsInWavesKeepTheGeneralKernel) {
  const AttentionParams params = decode_step();  // 512 tiles
  ASSERT_GT(packed_tiles(params), kSms);
  EXPECT_FALSE((decode_kernel<Sm90DenseLayout, 64>(params)));
  EXPECT_FALSE((decode_kernel<Sm90DenseLayout, 128>(params)));
  EXPECT_FALSE((decode_kernel<Sm90DenseLayout, 256>(params)));
}

TEST(Sm90DecodeDispatch, KvCachesWithADenseQRunTheDecodeKernelAtAnyBatchFromD128) {
  const AttentionParams params = decode_step();  // a contiguous cache or TMA-box pages
  EXPECT_TRUE((decode_kernel<Sm90ServingLayout, 128>(params)));
  EXPECT_TRUE((decode_kernel<Sm90ServingLayout, 256>(params)));
  EXPECT_FALSE((decode_kernel<Sm90ServingLayout, 64>(params)));
}

TEST(Sm90DecodeDispatch, APackedQInWavesKeepsTheGeneralKernelUnlessGathered) {
  static const int32_t kCuSeqlens[2] = {0, 1};  // only its presence matters here
  AttentionParams params = decode_step();
  params.cu_seqlens_q = kCuSeqlens;
  EXPECT_FALSE((decode_kernel<Sm90ServingLayout, 128>(params)));
  static const int32_t kPageTable[1] = {0};
  params.page_table = kPageTable;
  params.page_size = 16;  // gathered by the decode kernel (fewer than 32 rows a box)
  EXPECT_TRUE((decode_kernel<Sm90ServingLayout, 128>(params)));
  params.page_size = 64;  // TMA boxes
  EXPECT_FALSE((decode_kernel<Sm90ServingLayout, 128>(params)));
}

TEST(Sm90DecodeDispatch, GatheredCachesRunTheDecodeKernelAtAnyHeadDim) {
  static const int32_t kPageTable[1] = {0};
  AttentionParams params = decode_step();
  params.page_table = kPageTable;
  params.page_size = 1;
  EXPECT_TRUE((decode_kernel<Sm90ServingLayout, 64>(params)));
}

TEST(Sm90DecodeDispatch, TilesOfMoreThanOneSlabRunTheGeneralKernel) {
  AttentionParams params = decode_step(/*batch=*/8);
  params.seqlen_q = 17;  // 68 rows at 4 heads a group: two slabs, 128 tiles that fit the SMs
  ASSERT_LE(packed_tiles(params), kSms);
  EXPECT_FALSE((decode_kernel<Sm90ServingLayout, 128>(params)));
  EXPECT_FALSE((decode_kernel<Sm90DenseLayout, 128>(params)));
  params.seqlen_q = 16;  // 64 rows: one slab
  EXPECT_TRUE((decode_kernel<Sm90ServingLayout, 128>(params)));
}

}  // namespace
}  // namespace flashcore::detail
