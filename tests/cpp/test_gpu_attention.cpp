// The CUDA backends against the float64 oracle (BENCHMARKS.md rule), one line printed per case.
// Every case skips with the reason when it cannot run here (no device, wrong arch, not compiled).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <memory>
#include <tuple>

#include "api/kernel_registry.h"
#include "cuda/sm90/kv_split_plan.h"
#include "cuda/sm90/tile_table.h"
#include "gpu_runner.h"
#include "thrown_message.h"

namespace flashcore::test {
namespace {

// The float64 oracle runs on the host: sample rows of long sequences to keep the suite fast.
constexpr int kMaxCheckedRows = 64;
constexpr float kLargeStddev = 30.0f;  // BENCHMARKS.md: large-magnitude inputs stress softmax
constexpr int kPreferredHeadDim = 128;  // the shape list runs at this head_dim when compiled

struct GpuCase {
  testing::ProblemShape shape;  // head_dim 0: the backend's preferred compiled head_dim
  Layout layout = Layout::kBSHD;
  float stddev = 1.0f;
};

void PrintTo(const GpuCase& c, std::ostream* os) {
  *os << c.shape.describe() << " " << to_string(c.layout) << (c.stddev != 1.0f ? " std30" : "");
}

testing::ProblemShape make_shape(int sq, int sk, int hq, int hkv, bool causal, int batch = 1) {
  testing::ProblemShape s;
  s.batch = batch, s.seqlen_q = sq, s.seqlen_k = sk, s.heads_q = hq, s.heads_kv = hkv;
  s.head_dim = 0, s.causal = causal;
  return s;
}

std::vector<GpuCase> shape_list() {
  std::vector<GpuCase> cases;
  for (int seqlen : {1, 17, 63, 64, 65, 127, 1000, 4097}) {
    for (bool causal : {false, true}) {
      cases.push_back({make_shape(seqlen, seqlen, 2, seqlen > 1000 ? 1 : 2, causal)});
    }
  }
  const std::pair<int, int> uneven[] = {{1, 1000}, {1000, 1}, {17, 65}, {65, 17}, {127, 4097},
                                        {4097, 127}, {100, 300}, {300, 100}};
  for (auto [sq, sk] : uneven) {
    for (bool causal : {false, true}) cases.push_back({make_shape(sq, sk, 2, 1, causal)});
  }
  for (auto [hq, hkv] : {std::pair{8, 8}, {8, 2}, {8, 1}, {16, 2}, {4, 1}}) {
    cases.push_back({make_shape(300, 300, hq, hkv, true, 2)});
    cases.push_back({make_shape(200, 333, hq, hkv, false)});
  }
  for (Layout layout : {Layout::kBHSD, Layout::kPackedQKV}) {
    for (bool causal : {false, true}) cases.push_back({make_shape(257, 257, 4, 2, causal, 2), layout});
  }
  cases.push_back({make_shape(190, 400, 4, 4, true), Layout::kBHSD});
  for (bool causal : {false, true}) {
    cases.push_back({make_shape(512, 512, 2, 1, causal), Layout::kBSHD, kLargeStddev});
    cases.push_back({make_shape(129, 129, 2, 2, causal), Layout::kPackedQKV, kLargeStddev});
  }
  return cases;
}

// Why this (backend, dtype, head_dim, causal) cannot run here, or "".
std::string skip_reason(Backend backend, DType dtype, int head_dim, bool causal) {
  if (cuda_device_count() == 0) return "no CUDA device";
  if (!backend_available(backend)) {
    return std::string("backend ") + to_string(backend) + " not available on this device";
  }
  if (detail::find_kernel(backend, dtype, head_dim, causal) == nullptr) {
    return std::string("no ") + to_string(backend) + " kernel compiled for " + to_string(dtype) +
           " head_dim=" + std::to_string(head_dim) + (causal ? " causal" : "");
  }
  return "";
}

// The message attention_forward throws for `args`, or "" when the call runs.
std::string forward_error(const AttentionArgs& args) {
  return thrown_message([&] { attention_forward(args); });
}

// Test names of the suites parameterized by dtype alone.
std::string dtype_name(const ::testing::TestParamInfo<DType>& info) {
  return to_string(info.param);
}

int preferred_head_dim(Backend backend) {
  std::vector<int> dims = supported_head_dims(backend);
  if (dims.empty()) return kPreferredHeadDim;
  return std::count(dims.begin(), dims.end(), kPreferredHeadDim) ? kPreferredHeadDim : dims[0];
}

void run_and_check(const testing::ProblemShape& s, Layout layout, float stddev, Backend backend,
                   cudaStream_t stream = nullptr) {
  std::string reason = skip_reason(backend, s.dtype, s.head_dim, s.causal);
  if (!reason.empty()) GTEST_SKIP() << reason;
  GpuRun run = run_gpu_case(s, layout, stddev, backend, kMaxCheckedRows, stream);
  std::printf("[%s] %s %s%s: %s\n", to_string(backend), s.describe().c_str(), to_string(layout),
              stddev != 1.0f ? " std30" : "", run.report.summary().c_str());
  EXPECT_EQ(run.ran, backend);
  EXPECT_TRUE(run.report.pass) << to_string(backend) << " " << s.describe() << " "
                               << to_string(layout) << " std=" << stddev << ": "
                               << run.report.summary();
}

using GpuParam = std::tuple<Backend, DType, GpuCase>;

class GpuAttention : public ::testing::TestWithParam<GpuParam> {};

TEST_P(GpuAttention, MatchesFloat64Reference) {
  auto [backend, dtype, c] = GetParam();
  testing::ProblemShape s = c.shape;
  s.dtype = dtype;
  s.head_dim = preferred_head_dim(backend);
  run_and_check(s, c.layout, c.stddev, backend);
}

std::string param_name(const ::testing::TestParamInfo<GpuParam>& info) {
  auto [backend, dtype, c] = info.param;
  testing::ProblemShape s = c.shape;
  s.dtype = dtype;
  s.head_dim = preferred_head_dim(backend);
  std::string name = std::string(to_string(backend)) + "_" + s.describe() + "_" +
                     to_string(c.layout) +
                     (c.stddev != 1.0f ? "_std30" : "");
  for (char& ch : name) {
    if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
  }
  return name + "_" + std::to_string(info.index);
}

INSTANTIATE_TEST_SUITE_P(Shapes, GpuAttention,
                         ::testing::Combine(::testing::Values(Backend::kSM80, Backend::kSM90),
                                            ::testing::Values(DType::kFloat16, DType::kBFloat16),
                                            ::testing::ValuesIn(shape_list())),
                         param_name);

using BackendDtype = std::tuple<Backend, DType>;
class GpuBackend : public ::testing::TestWithParam<BackendDtype> {};

TEST_P(GpuBackend, EverySupportedHeadDim) {
  auto [backend, dtype] = GetParam();
  std::vector<int> dims = supported_head_dims(backend);
  if (dims.empty()) GTEST_SKIP() << "backend " << to_string(backend) << " not compiled in";
  for (int d : dims) {
    for (bool causal : {false, true}) {
      testing::ProblemShape s = make_shape(200, 230, 4, 2, causal, 2);
      s.dtype = dtype, s.head_dim = d;
      SCOPED_TRACE(s.describe());
      run_and_check(s, Layout::kBSHD, 1.0f, backend);
    }
  }
}

TEST_P(GpuBackend, ExplicitSoftmaxScaleAndStream) {
  auto [backend, dtype] = GetParam();
  testing::ProblemShape s = make_shape(333, 333, 4, 1, true);
  s.dtype = dtype, s.head_dim = preferred_head_dim(backend), s.softmax_scale = 0.3f;
  cudaStream_t stream = nullptr;
  if (cuda_device_count() > 0) GPU_TEST_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  run_and_check(s, Layout::kBSHD, 1.0f, backend, stream);
  if (stream != nullptr) cudaStreamDestroy(stream);
}

TEST_P(GpuBackend, UnsupportedHeadDimNamesSupportedOnes) {
  auto [backend, dtype] = GetParam();
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
  if (!backend_available(backend)) {
    GTEST_SKIP() << "backend " << to_string(backend) << " not available on this device";
  }
  std::vector<int> dims = supported_head_dims(backend);
  int unsupported = 0;
  for (int candidate : {80, 72, 48, 40, 160}) {
    if (std::count(dims.begin(), dims.end(), candidate) == 0) {
      unsupported = candidate;
      break;
    }
  }
  std::string list;
  for (int d : dims) list += (list.empty() ? "" : ", ") + std::to_string(d);
  const int64_t d = unsupported;
  DeviceBuffer buffer(4 * 64 * d * 2);
  const Device cuda{DeviceType::kCUDA, 0};
  AttentionArgs args;
  args.q = make_tensor(buffer.data(), dtype, cuda, {1, 64, 1, d});
  args.k = make_tensor(buffer.data() + 64 * d * 2, dtype, cuda, {1, 64, 1, d});
  args.v = make_tensor(buffer.data() + 2 * 64 * d * 2, dtype, cuda, {1, 64, 1, d});
  args.out = make_tensor(buffer.data() + 3 * 64 * d * 2, dtype, cuda, {1, 64, 1, d});
  args.backend = backend;
  const std::string expected = "head_dim=" + std::to_string(d) + " is not supported by backend " +
                               to_string(backend) + "; supported: " + list;
  const std::string error = forward_error(args);
  EXPECT_NE(error.find(expected), std::string::npos)
      << (error.empty() ? "did not throw" : error) << "\nexpected: " << expected;
}

TEST_P(GpuBackend, NoKeysGivesZeroOutAndMinusInfLse) {
  auto [backend, dtype] = GetParam();
  testing::ProblemShape s = make_shape(70, 0, 2, 1, false);
  s.dtype = dtype, s.head_dim = preferred_head_dim(backend);
  run_and_check(s, Layout::kBSHD, 1.0f, backend);
}

INSTANTIATE_TEST_SUITE_P(Backends, GpuBackend,
                         ::testing::Combine(::testing::Values(Backend::kSM80, Backend::kSM90),
                                            ::testing::Values(DType::kFloat16, DType::kBFloat16)),
                         [](const ::testing::TestParamInfo<BackendDtype>& info) {
                           return std::string(to_string(std::get<0>(info.param))) + "_" +
                                  to_string(std::get<1>(info.param));
                         });

// --- sm90: a one-key last tile in every row of the tile table ---

// A consumer takes its KV tiles last first, so with seqlen_k = m x BLOCK_N + 1 its first tile
// holds one key: the max that tile sets says little about the row. The lazy O rescale
// (cuda/sm90/softmax.cuh) then meets its worst case, which failed the accuracy rule for fp16
// before the second tile's max was taken exactly. One case per row of kSm90TuningTable: the
// shortest such length that the row serves (seqlen_q picks the row), causal or not as the row,
// GQA 2:1.
class GpuSm90TileRows : public ::testing::TestWithParam<DType> {};

TEST_P(GpuSm90TileRows, OneKeyLastTileInEveryRow) {
  const DType dtype = GetParam();
  for (int head_dim : {64, 128, 256}) {
    for (bool causal : {false, true}) {
      int served_above = 0;  // the previous row serves seqlen_q up to this
      for (int i = 0; i < detail::sm90_row_count(head_dim, causal); ++i) {
        const detail::Sm90TuningRow row = detail::sm90_tuning_row(head_dim, causal, i);
        // m x BLOCK_N + 1 > served_above with m >= 1: two tiles at least, the last with one key.
        const int blocks = std::max(1, (served_above + row.block_n - 1) / row.block_n);
        const int seqlen = blocks * row.block_n + 1;
        served_above = row.max_seqlen_q;
        testing::ProblemShape s = make_shape(seqlen, seqlen, 2, 1, causal);
        s.dtype = dtype, s.head_dim = head_dim;
        SCOPED_TRACE(s.describe() + " (BLOCK_N " + std::to_string(row.block_n) + ")");
        run_and_check(s, Layout::kBSHD, 1.0f, Backend::kSM90);
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Dtypes, GpuSm90TileRows,
                         ::testing::Values(DType::kFloat16, DType::kBFloat16), dtype_name);

// --- sm90 case lists: a problem, its memory layout, its inputs' spread ---

struct Sm90Case {
  testing::ProblemShape shape;
  Layout layout = Layout::kBSHD;
  float stddev = 1.0f;
};

// Every case in `dtype` on the sm90 backend against the reference; cases that leave head_dim 0
// run at `head_dim_if_unset`.
void run_sm90_cases(std::vector<Sm90Case> cases, DType dtype,
                    int head_dim_if_unset = kPreferredHeadDim) {
  for (Sm90Case& c : cases) {
    c.shape.dtype = dtype;
    if (c.shape.head_dim == 0) c.shape.head_dim = head_dim_if_unset;
    SCOPED_TRACE(c.shape.describe() + " " + to_string(c.layout));
    run_and_check(c.shape, c.layout, c.stddev, Backend::kSM90);
  }
}

// --- sm90: head_dim 96 runs the 128 kernels with zero-filled columns ---

// The tensor maps are 96 columns wide and the kernels' tiles 128, so TMA zero-fills columns
// 96-127 of Q, K and V and the O store drops them (cuda/sm90/launch.cuh). Tails in both
// sequences, GQA, strided BHSD views (the maps' strides are the caller's) and large inputs, both
// masks.
class GpuSm90PaddedHeadDim : public ::testing::TestWithParam<DType> {};

TEST_P(GpuSm90PaddedHeadDim, MatchesReferenceOnEveryPath) {
  constexpr int kPaddedHeadDim = 96;
  std::vector<Sm90Case> cases;
  for (bool causal : {false, true}) {
    for (int seqlen : {1, 17, 65, 1000, 4097}) {
      cases.push_back({make_shape(seqlen, seqlen, 2, 1, causal), Layout::kBSHD, 1.0f});
    }
    cases.push_back({make_shape(257, 513, 8, 2, causal, 2), Layout::kBSHD, 1.0f});
    cases.push_back({make_shape(300, 100, 2, 2, causal), Layout::kBSHD, 1.0f});
    cases.push_back({make_shape(200, 333, 4, 2, causal), Layout::kBHSD, 1.0f});
    cases.push_back({make_shape(512, 512, 2, 1, causal), Layout::kBSHD, kLargeStddev});
  }
  run_sm90_cases(cases, GetParam(), kPaddedHeadDim);
}

INSTANTIATE_TEST_SUITE_P(Dtypes, GpuSm90PaddedHeadDim,
                         ::testing::Values(DType::kFloat16, DType::kBFloat16), dtype_name);

// --- sm90: rows that run in thread-block clusters (tile_table.h cluster_m) ---

// A clustered row's two CTAs compute m-blocks 2t and 2t + 1 of one (batch, head) and each loads
// half of every K/V block for both (cuda/sm90/cluster.cuh). For every such row, from its
// first length on: an odd m-block count (the second CTA of a head's last cluster has no row but
// keeps the loads and barriers), a last tile of one row, a last K/V block whose second half is
// empty or holds one key, one partial K/V block only, GQA and MQA, more cluster tiles than fit
// at once (the persistent stride and the rotation of the m-blocks), strided BHSD views, large
// inputs, head_dim 96 on the 128 kernels, and the previous row's longest length (unclustered).
class GpuSm90ClusterRows : public ::testing::TestWithParam<DType> {};

TEST_P(GpuSm90ClusterRows, MatchesReferenceAcrossTheRowsLengths) {
  std::vector<Sm90Case> cases;
  for (int head_dim : {64, 128, 256}) {
    int served_above = 0;  // the previous row serves seqlen_q up to this
    for (int i = 0; i < detail::sm90_row_count(head_dim, false); ++i) {
      const detail::Sm90TuningRow row = detail::sm90_tuning_row(head_dim, false, i);
      const int previous = served_above;
      served_above = row.max_seqlen_q;
      if (row.cluster_m < 2) continue;
      const int bm = detail::kSm90RowsPerConsumer * row.consumers, bn = row.block_n;
      const int first = previous + 1;
      const int m_odd = ((first + bm - 1) / bm) | 1;  // an odd m-block count from `first` on
      const std::vector<Sm90Case> row_cases = {
          {make_shape(first, first, 2, 1, false)},
          {make_shape(m_odd * bm, m_odd * bn + 1, 3, 3, false)},
          {make_shape(m_odd * bm + 1, m_odd * bn + bn / 2 + 1, 4, 1, false, 2)},
          {make_shape((m_odd + 2) * bm - 7, bn / 2 + 1, 8, 2, false, 3)},
          {make_shape(std::max(first, 12 * bm + 1), std::max(first, 12 * bm + 1), 16, 4, false,
                      2)},
          {make_shape(first + 100, first + 300, 4, 2, false, 2), Layout::kBHSD},
          {make_shape(first, first, 2, 1, false), Layout::kBSHD, kLargeStddev},
          {make_shape(previous > 0 ? previous : 1, previous > 0 ? previous : 1, 2, 1, false)},
      };
      for (Sm90Case c : row_cases) {
        c.shape.head_dim = head_dim;
        cases.push_back(c);
      }
      if (head_dim == 128) {  // 96 runs the 128 kernels
        Sm90Case c{make_shape(first + 7, first + 33, 4, 2, false)};
        c.shape.head_dim = 96;
        cases.push_back(c);
      }
    }
  }
  if (cases.empty()) GTEST_SKIP() << "no row of kSm90TuningTable runs in clusters";
  run_sm90_cases(cases, GetParam());
}

INSTANTIATE_TEST_SUITE_P(Dtypes, GpuSm90ClusterRows,
                         ::testing::Values(DType::kFloat16, DType::kBFloat16), dtype_name);

// --- sm90: calls that run a row's wave peer (cuda/sm90/wave_peer.h) ---

// d128 non-causal calls above 512 rows whose 128-row tiles end sooner than the bucket's 192-row
// ones run the 512 row's kernel at lengths it otherwise never sees: a 24-head Flux-like call
// (2816 tokens: 4 waves of 128-row tiles on 132 SMs against 3 of 192), 1k in the standard grid's
// 16 x 16 heads, and small calls (one wave either way) with tails in both sequences, GQA,
// BHSD views, large inputs and head_dim 96. Causal d128 chunks likewise run the 2048 row's.
class GpuSm90WavePeers : public ::testing::TestWithParam<DType> {};

TEST_P(GpuSm90WavePeers, MatchesReferenceWhereThePeerRuns) {
  const std::vector<Sm90Case> cases = {
      {make_shape(2816, 2816, 24, 24, false)},
      {make_shape(1024, 1024, 16, 16, false, 16)},
      {make_shape(2049, 2100, 2, 1, false)},
      {make_shape(4097, 3001, 8, 2, false)},
      {make_shape(600, 700, 4, 4, false, 2), Layout::kBHSD},
      {make_shape(1500, 1500, 4, 1, false), Layout::kBSHD, kLargeStddev},
      // d128 causal chunks above 2k query rows whose keys are at least twice their queries
      // (sm90_causal_tiles_even): the 2048 row's 128-row tiles, tails in both sequences.
      {make_shape(2100, 4300, 4, 1, true)},
      {make_shape(2500, 5001, 4, 2, true)},
  };
  run_sm90_cases(cases, GetParam(), 128);
  Sm90Case padded{make_shape(3000, 2999, 4, 2, false)};
  padded.shape.head_dim = 96;
  run_sm90_cases({padded}, GetParam());
}

INSTANTIATE_TEST_SUITE_P(Dtypes, GpuSm90WavePeers,
                         ::testing::Values(DType::kFloat16, DType::kBFloat16), dtype_name);

// --- sm90: rows whose producer stores O (tile_table.h kProducerStoresO) ---

// A consumer of such a row stages O in a V stage and hands it to the producer, which stores it
// before the next tile's V loads there and, after its last loads, the CTA's last tile's
// (cuda/sm90/producer.cuh). For every such row, in its mask: several tiles a CTA, tiles of fewer
// KV blocks than consumers (one key: those stores come before Q), a single tile (CTAs without
// one), a causal first block with a slab before row 0 and a last block with a slab past the
// sequence (consumers that store nothing), fewer queries than keys and the reverse, GQA, BHSD
// views and large inputs.
class GpuSm90ProducerStores : public ::testing::TestWithParam<DType> {};

TEST_P(GpuSm90ProducerStores, MatchesReferenceAcrossTiles) {
  std::vector<Sm90Case> cases;
  for (int head_dim : {64, 128, 256}) {
    for (bool causal : {false, true}) {
      int served_above = 0;  // the previous row serves seqlen_q up to this
      for (int i = 0; i < detail::sm90_row_count(head_dim, causal); ++i) {
        const detail::Sm90TuningRow row = detail::sm90_tuning_row(head_dim, causal, i);
        const int first = served_above + 1;
        served_above = row.max_seqlen_q;
        if (!row.has(detail::Sm90Switch::kProducerStoresO)) continue;
        // Query lengths of the row's bucket (seqlen_q picks a 16-bit row), from 100 rows up:
        // shorter ones with a power-of-two group run packed tiles.
        const auto in_row = [&](int seqlen_q) {
          return std::min(std::max(seqlen_q, std::max(first, 100)), row.max_seqlen_q);
        };
        const std::vector<Sm90Case> row_cases = {
            {make_shape(in_row(1000), in_row(1000), 8, 2, causal, 4)},
            {make_shape(in_row(1050), in_row(1050), 8, 8, causal, 2)},
            {make_shape(in_row(900), in_row(900), 8, 8, causal, 2)},
            {make_shape(in_row(2100), 1, 16, 4, causal, 2)},
            {make_shape(in_row(100), 300, 1, 1, causal)},
            {make_shape(in_row(777), 2100, 8, 4, causal, 2)},
            {make_shape(in_row(1033), in_row(1033), 4, 4, causal, 3), Layout::kBHSD},
            {make_shape(in_row(1100), in_row(1100), 4, 1, causal), Layout::kBSHD, kLargeStddev},
        };
        for (Sm90Case c : row_cases) {
          c.shape.head_dim = head_dim;
          cases.push_back(c);
        }
      }
    }
  }
  if (cases.empty()) GTEST_SKIP() << "no row of kSm90TuningTable has its producer store O";
  run_sm90_cases(cases, GetParam());
}

INSTANTIATE_TEST_SUITE_P(Dtypes, GpuSm90ProducerStores,
                         ::testing::Values(DType::kFloat16, DType::kBFloat16), dtype_name);

// --- sm90: the query heads of a KV group packed into one tile's rows ---

// Calls with a power-of-two group (1 included) and seqlen_q <= 64 run packed tiles
// (detail::sm90_packs_query_groups): row r of a tile is position r / G of the group's head
// r % G, loaded and stored through 5-D tensor maps, the causal limit and the lse index taken from
// that position and head. Every group size from 1 to 64, decode and short causal queries with
// tails (fewer keys than queries: rows with no visible key), strided layouts and large inputs,
// every head_dim; and the lengths and groups on either side of the rule, which stay unpacked.
class GpuSm90PackedGroups : public ::testing::TestWithParam<DType> {};

TEST_P(GpuSm90PackedGroups, MatchesReferenceForEveryGroupAndMask) {
  std::vector<Sm90Case> cases;
  for (int head_dim : {64, 96, 128, 256}) {  // decode, GQA 4:1, both masks
    for (bool causal : {false, true}) {
      for (int seqlen_k : {1, 1000}) {
        Sm90Case c{make_shape(1, seqlen_k, 8, 2, causal, 2)};
        c.shape.head_dim = head_dim;
        cases.push_back(c);
      }
    }
  }
  for (auto [hq, hkv] : {std::pair{4, 4}, {4, 2}, {16, 2}, {32, 2}, {32, 1}, {64, 1}}) {  // G 1..64
    cases.push_back({make_shape(1, 300, hq, hkv, false, 3)});
    cases.push_back({make_shape(5, 129, hq, hkv, true, 2)});
  }
  for (int seqlen_q : {2, 17, 64}) {  // short causal queries (speculative decoding, chunks)
    for (int seqlen_k : {seqlen_q, 700}) {
      cases.push_back({make_shape(seqlen_q, seqlen_k, 8, 1, true, 2)});
    }
  }
  cases.push_back({make_shape(17, 5, 8, 2, true)});    // rows 0-11 see no key
  cases.push_back({make_shape(33, 200, 8, 2, false)});  // 132 rows: a second, partial tile
  cases.push_back({make_shape(5, 257, 8, 2, true, 2), Layout::kBHSD});
  cases.push_back({make_shape(33, 33, 8, 2, true, 2), Layout::kPackedQKV});  // needs sq == sk
  cases.push_back({make_shape(1, 512, 8, 2, false), Layout::kBSHD, kLargeStddev});
  // Unpacked: one position past the rule, and a group that is not a power of two.
  cases.push_back({make_shape(65, 300, 8, 2, true)});
  cases.push_back({make_shape(1, 300, 6, 2, false)});
  run_sm90_cases(cases, GetParam());
}

INSTANTIATE_TEST_SUITE_P(Dtypes, GpuSm90PackedGroups,
                         ::testing::Values(DType::kFloat16, DType::kBFloat16), dtype_name);

// --- caller-provided workspace (AttentionArgs::workspace) ---

// A shape that takes the sm90 persistent schedule (seqlen <= 4096 rows of the tile table).
testing::ProblemShape persistent_shape(DType dtype) {
  testing::ProblemShape s = make_shape(1000, 1000, 8, 2, true, 2);
  s.dtype = dtype, s.head_dim = kPreferredHeadDim;
  return s;
}

// One BSHD call whose device buffers stay alive until checked, so several can be in flight.
struct PendingRun {
  testing::ProblemShape shape;
  testing::HostTensors inputs;
  std::unique_ptr<DeviceBuffer> q, k, v, out, lse, workspace;
  AttentionArgs args;

  PendingRun(const testing::ProblemShape& s, uint64_t seed) : shape(s) {
    inputs = testing::make_random_inputs(s, seed);
    const Device cuda{DeviceType::kCUDA, 0};
    q = std::make_unique<DeviceBuffer>(inputs.q.size());
    k = std::make_unique<DeviceBuffer>(inputs.k.size());
    v = std::make_unique<DeviceBuffer>(inputs.v.size());
    out = std::make_unique<DeviceBuffer>(inputs.q.size());
    lse = std::make_unique<DeviceBuffer>(size_t(s.batch) * s.heads_q * s.seqlen_q * sizeof(float));
    q->upload(inputs.q), k->upload(inputs.k), v->upload(inputs.v);
    out->poison(), lse->poison();
    const std::vector<int64_t> q_shape = {s.batch, s.seqlen_q, s.heads_q, s.head_dim};
    const std::vector<int64_t> kv_shape = {s.batch, s.seqlen_k, s.heads_kv, s.head_dim};
    args.q = make_tensor(q->data(), s.dtype, cuda, q_shape);
    args.k = make_tensor(k->data(), s.dtype, cuda, kv_shape);
    args.v = make_tensor(v->data(), s.dtype, cuda, kv_shape);
    args.out = make_tensor(out->data(), s.dtype, cuda, q_shape);
    args.lse = make_tensor(lse->data(), DType::kFloat32, cuda, {s.batch, s.heads_q, s.seqlen_q});
    args.causal = s.causal;
    args.backend = Backend::kSM90;
    // Garbage in the workspace: the library must zero what it uses.
    workspace = std::make_unique<DeviceBuffer>(attention_workspace_bytes(args));
    workspace->poison();
    args.workspace = workspace->data(), args.workspace_bytes = workspace->bytes();
  }

  // Runs the call alone on the device (sm90 expected), checks it, prints "[label] shape: ...".
  void run_and_check(const char* label) {
    GPU_TEST_CHECK(cudaDeviceSynchronize());  // uploads ran on the legacy stream
    EXPECT_EQ(attention_forward(args), Backend::kSM90);
    GPU_TEST_CHECK(cudaDeviceSynchronize());
    const testing::AccuracyReport report = check();
    std::printf("[%s] %s: %s\n", label, shape.describe().c_str(), report.summary().c_str());
    EXPECT_TRUE(report.pass) << report.summary();
  }

  testing::AccuracyReport check() const {  // after the stream has finished
    std::vector<uint8_t> out_host(inputs.q.size());
    std::vector<float> lse_host(lse->bytes() / sizeof(float));
    out->download(out_host.data());
    lse->download(lse_host.data());
    return testing::check_accuracy(shape, inputs, out_host.data(), lse_host.data(),
                                   testing::sample_rows(shape.seqlen_q, kMaxCheckedRows));
  }
};

class GpuWorkspace : public ::testing::TestWithParam<DType> {
 protected:
  void SetUp() override {
    std::string reason = skip_reason(Backend::kSM90, GetParam(), kPreferredHeadDim, true);
    if (!reason.empty()) GTEST_SKIP() << reason;
  }
};

TEST_P(GpuWorkspace, PoisonedWorkspaceIsZeroedBeforeUse) {
  PendingRun run(persistent_shape(GetParam()), 99);
  ASSERT_EQ(run.args.workspace_bytes, 8u);
  run.run_and_check("sm90 workspace");
}

TEST_P(GpuWorkspace, ConcurrentStreamsWithOwnWorkspaces) {
  constexpr int kStreams = 2;
  std::vector<std::unique_ptr<PendingRun>> runs;
  cudaStream_t streams[kStreams] = {};
  for (int i = 0; i < kStreams; ++i) {
    runs.push_back(std::make_unique<PendingRun>(persistent_shape(GetParam()), 100 + i));
    GPU_TEST_CHECK(cudaStreamCreateWithFlags(&streams[i], cudaStreamNonBlocking));
    runs[i]->args.stream = streams[i];
  }
  GPU_TEST_CHECK(cudaDeviceSynchronize());  // uploads ran on the legacy stream
  for (int i = 0; i < kStreams; ++i) attention_forward(runs[i]->args);  // both in flight
  for (int i = 0; i < kStreams; ++i) {
    GPU_TEST_CHECK(cudaStreamSynchronize(streams[i]));
    testing::AccuracyReport report = runs[i]->check();
    EXPECT_TRUE(report.pass) << "stream " << i << ": " << report.summary();
    cudaStreamDestroy(streams[i]);
  }
}

TEST_P(GpuWorkspace, HostWorkspaceIsRejected) {
  PendingRun run(persistent_shape(GetParam()), 7);
  uint32_t host_counters[2] = {};
  run.args.workspace = host_counters;
  const std::string error = forward_error(run.args);
  EXPECT_NE(error.find("is not memory of cuda:0"), std::string::npos)
      << (error.empty() ? "host memory accepted as workspace" : error);
}

// A caller that vouches for its pointers (flashcore.torch does) skips only the per-pointer driver
// queries: the call runs and matches, and a wrong shape is still an Error naming the argument.
TEST_P(GpuWorkspace, VerifiedPointersSkipOnlyThePointerQueries) {
  PendingRun run(persistent_shape(GetParam()), 11);
  run.args.device_pointers_verified = true;
  run.run_and_check("sm90 verified pointers");
  AttentionArgs bad = run.args;
  bad.out.shape[1] += 1;
  const std::string error = forward_error(bad);
  EXPECT_NE(error.find("out"), std::string::npos)
      << (error.empty() ? "a wrong out shape accepted" : error);
}

INSTANTIATE_TEST_SUITE_P(Dtypes, GpuWorkspace,
                         ::testing::Values(DType::kFloat16, DType::kBFloat16), dtype_name);

// --- sm90: split-KV for packed calls with few tiles ---

// Batch-1 decode runs one packed tile per KV head, far fewer than the SMs: with a workspace the
// keys are split over CTAs (detail::sm90_kv_split_plan), each split writes its partial O and lse
// into the (poisoned) workspace, and a combine kernel merges them. Tiles of at most 64 rows run
// the decode kernel (one warpgroup per split): decode with a key tail at every head_dim, MQA
// with 64 heads (a full slab), MHA, two sequences of 3 causal positions (rows in the tile's second
// slab); 17 causal positions of 8 heads (136 rows) run the general packed kernel, with early rows
// that see few keys (splits with no key for them). Each must ask for split workspace, pass the
// accuracy rule, pass it again on the workspace the first call left (partials and counters of
// that call), and fail cleanly when handed only the tile counters' 8 bytes.
class GpuSm90KvSplit : public ::testing::TestWithParam<DType> {};

TEST_P(GpuSm90KvSplit, SplitsMatchTheReferenceAndNeedTheirWorkspace) {
  const DType dtype = GetParam();
  std::vector<testing::ProblemShape> shapes;
  for (int head_dim : {64, 96, 128, 256}) {
    for (bool causal : {false, true}) {
      testing::ProblemShape s = make_shape(1, 5003, 8, 2, causal);
      s.head_dim = head_dim;
      shapes.push_back(s);
    }
  }
  shapes.push_back(make_shape(17, 700, 16, 2, true));
  shapes.push_back(make_shape(1, 3000, 64, 1, false));
  shapes.push_back(make_shape(1, 4000, 8, 8, true));  // MHA: G 1
  shapes.push_back(make_shape(3, 2000, 8, 1, true, 2));
  for (testing::ProblemShape s : shapes) {
    s.dtype = dtype;
    if (s.head_dim == 0) s.head_dim = kPreferredHeadDim;
    SCOPED_TRACE(s.describe());
    const std::string reason = skip_reason(Backend::kSM90, dtype, s.head_dim, s.causal);
    if (!reason.empty()) {
      std::printf("[sm90 split-KV] %s skipped: %s\n", s.describe().c_str(), reason.c_str());
      continue;
    }
    PendingRun run(s, 11);
    EXPECT_GT(run.args.workspace_bytes, 8u) << "this call should split its keys";
    AttentionArgs q_only;  // the Python helpers' question: the answer must hold for any k
    q_only.q = run.args.q;
    EXPECT_GE(attention_workspace_bytes(q_only), run.args.workspace_bytes);
    run.run_and_check("sm90 split-KV");
    run.out->poison(), run.lse->poison();
    run.run_and_check("sm90 split-KV, reused workspace");

    run.args.workspace_bytes = 8;  // the tile counters alone
    const std::string error = forward_error(run.args);
    EXPECT_NE(error.find("smaller than the"), std::string::npos)
        << (error.empty() ? "8 bytes of workspace accepted for a split call" : error);
  }
}

INSTANTIATE_TEST_SUITE_P(Dtypes, GpuSm90KvSplit,
                         ::testing::Values(DType::kFloat16, DType::kBFloat16), dtype_name);

// Once per head_dim: the preferred one, and 96, which sm90 serves with the d128 kernels.
class GpuSelection : public ::testing::TestWithParam<int> {};

TEST_P(GpuSelection, AutoPicksTheFastestAvailableBackend) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
  const int64_t d = GetParam() != 0 ? GetParam() : preferred_head_dim(Backend::kSM80);
  if (!detail::find_kernel(Backend::kSM80, DType::kFloat16, int(d), false) &&
      !detail::find_kernel(Backend::kSM90, DType::kFloat16, int(d), false)) {
    GTEST_SKIP() << "no fp16 kernel compiled for head_dim=" << d;
  }
  DeviceBuffer buffer(4 * 128 * d * 2);
  const Device cuda{DeviceType::kCUDA, 0};
  AttentionArgs args;
  for (int i = 0; i < 4; ++i) {
    TensorView t = make_tensor(buffer.data() + i * 128 * d * 2, DType::kFloat16, cuda, {1, 128, 1, d});
    (i == 0 ? args.q : i == 1 ? args.k : i == 2 ? args.v : args.out) = t;
  }
  Backend expected = backend_available(Backend::kSM90) &&
                             detail::find_kernel(Backend::kSM90, DType::kFloat16, int(d), false)
                         ? Backend::kSM90
                         : Backend::kSM80;
  if (!backend_available(expected)) GTEST_SKIP() << "no CUDA backend available on this device";
  EXPECT_EQ(select_backend(args), expected);
  // Host memory marked as CUDA is rejected before any kernel runs.
  std::vector<uint16_t> host(128 * d);
  args.q.data = host.data();
  try {
    select_backend(args);
    FAIL() << "host pointer accepted as device memory";
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("is not memory of that device"), std::string::npos)
        << error.what();
  }
}

INSTANTIATE_TEST_SUITE_P(HeadDims, GpuSelection, ::testing::Values(0, 96),
                         [](const ::testing::TestParamInfo<int>& info) {
                           return info.param == 0 ? std::string("preferred")
                                                  : "d" + std::to_string(info.param);
                         });

}  // namespace
}  // namespace flashcore::test

int main(int argc, char** argv) {
  return flashcore::test::run_gpu_suite(argc, argv, "GPU tests",
                                       {flashcore::Backend::kSM80, flashcore::Backend::kSM90});
}
