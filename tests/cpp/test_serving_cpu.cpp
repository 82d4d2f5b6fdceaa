// The serving layouts on the host backends: ragged varlen batches, contiguous and paged kv
// caches, the in-place append. Every sequence is checked by the BENCHMARKS.md rule against the
// float64 reference of that sequence run alone; unused key rows, cache slots and pages hold NaN,
// so a backend that reads one fails.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "testing/serving_problem.h"

namespace flashcore::test {
namespace {

using testing::KvLayout;
using testing::ServingProblem;
using testing::ServingShape;

// Runs the problem on `backend` and checks every sequence (and, with an append, the cache).
void expect_correct(const ServingShape& shape, Backend backend = Backend::kCPU,
                    uint64_t seed = 7) {
  SCOPED_TRACE(shape.describe() + " on " + to_string(backend));
  ServingProblem problem(shape, seed);
  ASSERT_EQ(attention_forward(problem.args(backend)), backend);
  for (int b = 0; b < shape.batch(); ++b) {
    const testing::AccuracyReport report = problem.check_sequence(b);
    EXPECT_TRUE(report.pass) << "sequence " << b << ": " << report.summary();
  }
  if (shape.append) {
    for (int b = 0; b < shape.batch(); ++b) EXPECT_EQ(problem.cache_mismatch(b), "");
  }
  if (shape.kv != KvLayout::kVarlen) EXPECT_TRUE(problem.free_slots_untouched());
}

ServingShape varlen(std::vector<int> q_lens, std::vector<int> k_lens, bool causal) {
  ServingShape s;
  s.kv = KvLayout::kVarlen;
  s.q_lens = std::move(q_lens);
  s.k_lens = std::move(k_lens);
  s.causal = causal;
  return s;
}

// Decode against a cache: one query per sequence, cache lengths k_lens.
ServingShape decode(KvLayout kv, std::vector<int> k_lens, int page_size, bool causal) {
  ServingShape s;
  s.kv = kv;
  s.k_lens = std::move(k_lens);
  s.q_lens.assign(s.k_lens.size(), 1);
  s.packed_q = false;
  s.page_size = page_size;
  s.causal = causal;
  return s;
}

TEST(ServingCpu, VarlenRaggedBatchBothCausalModes) {
  for (bool causal : {false, true}) {
    // Tails around the 64-row blocks, a long sequence, a 0-query sequence with keys, and
    // seqlen_q != seqlen_k both ways.
    expect_correct(varlen({1, 17, 64, 65, 0, 300, 17}, {1, 17, 64, 65, 40, 1000, 90}, causal));
    expect_correct(varlen({90, 5, 64}, {17, 64, 1}, causal));
  }
}

TEST(ServingCpu, VarlenGqaAndHeadDims) {
  struct Heads { int q, kv, d; };
  for (Heads h : {Heads{4, 4, 128}, Heads{8, 2, 256}, Heads{8, 1, 64}, Heads{8, 8, 80}}) {
    ServingShape s = varlen({33, 1, 65}, {33, 129, 70}, true);
    s.heads_q = h.q, s.heads_kv = h.kv, s.head_dim = h.d;
    expect_correct(s);
  }
}

TEST(ServingCpu, VarlenSequsedKIgnoresNaNKeys) {
  for (bool causal : {false, true}) {
    ServingShape s = varlen({17, 0, 64, 3}, {65, 9, 64, 0}, causal);
    s.seqused = true;
    s.slack = 11;
    expect_correct(s);
  }
}

TEST(ServingCpu, VarlenDtypes) {
  for (DType dtype : {DType::kBFloat16, DType::kFloat32}) {
    ServingShape s = varlen({17, 64}, {65, 64}, true);
    s.dtype = dtype;
    expect_correct(s);
  }
}

TEST(ServingCpu, VarlenLargeMagnitudeInputs) {
  ServingShape s = varlen({65, 17}, {129, 17}, true);
  ServingProblem problem(s, 3, 30.0f);
  attention_forward(problem.args());
  for (int b = 0; b < s.batch(); ++b) {
    EXPECT_TRUE(problem.check_sequence(b).pass) << problem.check_sequence(b).summary();
  }
}

TEST(ServingCpu, ReferenceBackendRunsEveryLayout) {
  expect_correct(varlen({17, 0, 65}, {64, 5, 65}, true), Backend::kReference);
  expect_correct(decode(KvLayout::kPaged, {1, 17, 65}, 16, true), Backend::kReference);
  ServingShape chunk = decode(KvLayout::kPaged, {40, 20}, 1, true);
  chunk.packed_q = true, chunk.append = true, chunk.q_lens = {7, 0};
  expect_correct(chunk, Backend::kReference);
}

TEST(ServingCpu, PagedDecodeEveryPageSize) {
  for (int page_size : {1, 16, 64, 256}) {
    for (bool causal : {false, true}) {
      expect_correct(decode(KvLayout::kPaged, {1, 17, 65, 1000, 0}, page_size, causal));
    }
  }
}

TEST(ServingCpu, PagedGqaAndHeadDims) {
  struct Heads { int q, kv, d; };
  for (Heads h : {Heads{4, 4, 128}, Heads{8, 1, 256}, Heads{32, 4, 64}}) {
    ServingShape s = decode(KvLayout::kPaged, {300, 64, 5}, 16, true);
    s.heads_q = h.q, s.heads_kv = h.kv, s.head_dim = h.d;
    expect_correct(s);
  }
}

TEST(ServingCpu, ContiguousCacheDecodeAndDenseQueries) {
  expect_correct(decode(KvLayout::kCache, {1, 17, 65, 1000}, 0, true));
  ServingShape s = decode(KvLayout::kCache, {20, 64, 7}, 0, true);
  s.q_lens.assign(3, 7);  // seqlen_q 7 against caches of 20, 64 and 7 keys
  expect_correct(s);
}

TEST(ServingCpu, AppendDecodeStepWritesTheCacheThenAttends) {
  for (KvLayout kv : {KvLayout::kCache, KvLayout::kPaged}) {
    for (int page_size : {1, 16}) {
      ServingShape s = decode(kv, {1, 17, 64, 65, 300}, page_size, true);
      s.append = true;  // the last key of every sequence arrives in k_new/v_new
      expect_correct(s);
    }
  }
}

TEST(ServingCpu, AppendSeveralDenseTokens) {
  for (bool causal : {false, true}) {
    ServingShape s = decode(KvLayout::kPaged, {5, 40, 100}, 16, causal);
    s.q_lens.assign(3, 5);
    s.append = true;
    s.seqlen_new = 5;  // new tokens == queries: a chunk of 5 fills 5 slots then attends
    expect_correct(s);
  }
}

// Chunked prefill: packed q against a paged cache, each sequence's chunk appended first.
TEST(ServingCpu, ChunkedPrefillPackedAppend) {
  for (int page_size : {1, 16, 64}) {
    for (bool causal : {false, true}) {
      ServingShape s = decode(KvLayout::kPaged, {47, 10, 64, 130}, page_size, causal);
      s.packed_q = true;
      s.append = true;
      s.q_lens = {17, 0, 64, 65};  // cache before the call: 30, 10, 0 and 65 tokens
      expect_correct(s);
    }
  }
  ServingShape contiguous = decode(KvLayout::kCache, {47, 10, 64}, 0, true);
  contiguous.packed_q = true, contiguous.append = true, contiguous.q_lens = {17, 0, 64};
  expect_correct(contiguous);
}

// A call with no query row still appends (a prefill that only fills the cache).
TEST(ServingCpu, AppendWithoutQueriesStillFillsTheCache) {
  ServingShape s = decode(KvLayout::kPaged, {3, 8}, 4, false);
  s.q_lens = {0, 0};
  s.append = true;
  s.seqlen_new = 3;
  ServingProblem problem(s);
  attention_forward(problem.args());
  for (int b = 0; b < s.batch(); ++b) EXPECT_EQ(problem.cache_mismatch(b), "");
  EXPECT_TRUE(problem.free_slots_untouched());
}

TEST(ServingCpu, EmptyBatchIsANoOp) {
  ServingShape s = varlen({}, {}, true);
  ServingProblem problem(s);
  EXPECT_EQ(attention_forward(problem.args()), Backend::kCPU);
  ServingShape paged = decode(KvLayout::kPaged, {}, 16, true);
  ServingProblem empty_cache(paged);
  EXPECT_EQ(attention_forward(empty_cache.args()), Backend::kCPU);
}

// The cpu backend and the float64 reference agree on the same ragged batch (cpu within the
// accuracy rule, checked per sequence above; here both backends' outputs side by side).
// check_all (flashcore-bench's serving check) applies the rule over the whole call: the
// tolerance is twice the largest of the sequences' baselines, and one sequence past it fails the
// call and is named.
TEST(ServingCpu, CheckAllJudgesTheCallAndNamesTheWorstSequence) {
  const ServingShape shape = decode(KvLayout::kPaged, {150, 40, 300, 7}, 1, false);
  ServingProblem problem(shape);
  ASSERT_EQ(attention_forward(problem.args(Backend::kCPU)), Backend::kCPU);
  const testing::AccuracyReport clean = problem.check_all(8);
  EXPECT_TRUE(clean.pass) << clean.summary();
  double largest_baseline = 0;
  for (int b = 0; b < shape.batch(); ++b) {
    largest_baseline = std::max(largest_baseline, problem.check_sequence(b, 8).baseline_err_out);
  }
  EXPECT_EQ(clean.baseline_err_out, largest_baseline);
  EXPECT_EQ(clean.tol_out, testing::out_tolerance(largest_baseline, false));

  // Sequence 2's first output element moved by ten tolerances.
  const size_t out_bytes = testing::serving_bytes(shape, problem.indices()).out;
  const auto* own = static_cast<const uint8_t*>(problem.host_pointers().out);
  std::vector<uint8_t> out(own, own + out_bytes);
  const size_t row_bytes = size_t(shape.heads_q) * shape.head_dim * dtype_size(shape.dtype);
  uint8_t* element = out.data() + size_t(problem.cu_seqlens_q()[2]) * row_bytes;
  testing::from_float(shape.dtype,
                      testing::to_float(shape.dtype, element) + float(10 * clean.tol_out),
                      element);
  const testing::AccuracyReport moved = problem.check_all(8, out.data());
  EXPECT_FALSE(moved.pass) << moved.summary();
  EXPECT_EQ(moved.worst.rfind("sequence 2 ", 0), 0u) << moved.worst;
}

TEST(ServingCpu, CpuMatchesReferenceSequenceBySequence) {
  ServingShape s = decode(KvLayout::kPaged, {100, 33, 1}, 16, true);
  s.packed_q = true, s.append = true, s.q_lens = {20, 33, 1};
  for (Backend backend : {Backend::kCPU, Backend::kReference}) expect_correct(s, backend, 11);
}

}  // namespace
}  // namespace flashcore::test
