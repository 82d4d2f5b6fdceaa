// Which paged K/V blocks the Hopper kernels gather with cp.async instead of loading in TMA boxes
// (cuda/sm90/sequence_layout.h): the general kernel gathers pages whose boxes would hold fewer
// than 8 rows, the decode kernel fewer than 32 (page-16 decode at b64 and b16 ran 4-6% faster
// gathered on an H200, docs/kernels.md runs 217-218), and the box-only kernels never. The
// kernels size their barriers and pick their load path from these predicates, and the launcher
// picks the decode kernel for gathered decode calls from them: a wrong answer is a hang or a
// slow path on a GPU, so the table is checked here, on the host.
#include <gtest/gtest.h>

#include <string>

#include "common/params.h"
#include "cuda/sm90/sequence_layout.h"

namespace flashcore::detail {
namespace {

constexpr int kBlockN = 128;  // the d128 rows' KV block
constexpr int kGatherThreads = 32;  // any count: a gathered block's barrier expects its gatherers

AttentionParams paged(int page_size) {
  static const int32_t kPageTable[1] = {0};  // only its presence matters here
  AttentionParams params;
  params.page_table = kPageTable;
  params.page_size = page_size;
  return params;
}

struct PageCase {
  int page_size;
  bool general_gathers;  // Sm90ServingLayout (the general kernel)
  bool decode_gathers;   // Sm90ServingDecodeLayout (the decode kernel)
};

// A box holds the largest power of two dividing both page_size and BLOCK_N.
constexpr PageCase kCases[] = {
    {1, true, true},     {3, true, true},     {7, true, true},      {8, false, true},
    {12, true, true},    {16, false, true},   {24, false, true},    {48, false, true},
    {32, false, false},  {64, false, false},  {96, false, false},   {128, false, false},
    {256, false, false}, {1000, false, true}, {1024, false, false},
};

TEST(Sm90PageGather, GeneralAndDecodeKernelsGatherTheirPageSizes) {
  for (const PageCase& c : kCases) {
    SCOPED_TRACE("page_size " + std::to_string(c.page_size));
    const AttentionParams params = paged(c.page_size);
    EXPECT_EQ(Sm90ServingLayout::kv_gathered<kBlockN>(params), c.general_gathers);
    EXPECT_EQ(Sm90ServingDecodeLayout::kv_gathered<kBlockN>(params), c.decode_gathers);
    EXPECT_FALSE(Sm90ServingTmaLayout::kv_gathered<kBlockN>(params));
    // A gathered block's full barrier counts the gathering threads' arrivals, a boxed one the
    // arming lane's.
    EXPECT_EQ((Sm90ServingDecodeLayout::kv_full_arrivals<kBlockN, kGatherThreads>(params)),
              c.decode_gathers ? uint32_t(kGatherThreads) : 1u);
  }
}

TEST(Sm90PageGather, CallsWithoutPagesAreNeverGathered) {
  AttentionParams params;  // no page table: dense, varlen or a contiguous cache
  params.page_size = 1;
  EXPECT_FALSE(Sm90ServingLayout::kv_gathered<kBlockN>(params));
  EXPECT_FALSE(Sm90ServingDecodeLayout::kv_gathered<kBlockN>(params));
  EXPECT_FALSE(Sm90DenseLayout::kv_gathered<kBlockN>(params));
}

}  // namespace
}  // namespace flashcore::detail
