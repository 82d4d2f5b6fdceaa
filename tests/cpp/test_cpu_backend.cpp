// The cpu backend (and the reference backend) against the float64 oracle via the accuracy rule,
// over the BENCHMARKS.md shape list.
#include <gtest/gtest.h>

#include <cmath>
#include <sstream>

#include "cpu_runner.h"

namespace flashcore::test {
namespace {

// Query rows the oracle checks per problem; large sequences are sampled, the rest checked fully.
constexpr int kMaxCheckedRows = 160;
constexpr float kLargeStddev = 30.0f;  // BENCHMARKS.md: large-magnitude inputs stress softmax

struct CpuCase {
  testing::ProblemShape shape;
  Layout layout = Layout::kBSHD;
  float stddev = 1.0f;
};

std::string case_name(const CpuCase& c) {
  std::string name = c.shape.describe() + " " + to_string(c.layout) +
                     (c.stddev != 1.0f ? " std" + std::to_string(int(c.stddev)) : "");
  for (char& ch : name) {
    if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
  }
  return name;
}

// Short, readable parameter text in test listings (and so in ctest names).
void PrintTo(const CpuCase& c, std::ostream* os) { *os << case_name(c); }

testing::ProblemShape make_shape(int sq, int sk, int hq, int hkv, int d, DType dtype, bool causal,
                                 int batch = 1) {
  testing::ProblemShape s;
  s.batch = batch, s.seqlen_q = sq, s.seqlen_k = sk, s.heads_q = hq, s.heads_kv = hkv;
  s.head_dim = d, s.dtype = dtype, s.causal = causal;
  return s;
}

std::vector<CpuCase> all_cases() {
  std::vector<CpuCase> cases;
  const DType dtypes[] = {DType::kFloat16, DType::kBFloat16, DType::kFloat32};
  // Sequence tails; the long one with a single head keeps it cheap.
  for (int seqlen : {1, 17, 63, 64, 65, 127, 1000, 4097}) {
    const int heads = seqlen > 1000 ? 1 : 2;
    for (bool causal : {false, true}) {
      for (DType dtype : dtypes) {
        if (seqlen > 1000 && dtype == DType::kFloat32) continue;
        cases.push_back({make_shape(seqlen, seqlen, heads, heads, 64, dtype, causal)});
      }
    }
  }
  // seqlen_q != seqlen_k both ways, causal (bottom-right) and not.
  const std::pair<int, int> uneven[] = {{1, 1000}, {1000, 1}, {17, 65}, {65, 17},
                                        {127, 4097}, {4097, 127}, {64, 200}, {200, 64}};
  for (auto [sq, sk] : uneven) {
    for (bool causal : {false, true}) {
      cases.push_back({make_shape(sq, sk, 2, 1, 64, DType::kFloat16, causal)});
      cases.push_back({make_shape(sq, sk, 1, 1, 128, DType::kBFloat16, causal)});
    }
  }
  // GQA ratios 1, 4, 8 and MQA (heads_kv = 1).
  for (auto [hq, hkv] : {std::pair{8, 8}, {8, 2}, {8, 1}, {16, 2}, {4, 1}}) {
    cases.push_back({make_shape(129, 129, hq, hkv, 64, DType::kFloat16, true, 2)});
    cases.push_back({make_shape(65, 190, hq, hkv, 128, DType::kBFloat16, false)});
  }
  // Head dims, including ones no CUDA kernel has.
  for (int d : {8, 32, 80, 96, 128, 256, 7}) {
    cases.push_back({make_shape(100, 100, 2, 1, d, DType::kFloat16, true)});
    cases.push_back({make_shape(100, 77, 2, 2, d, DType::kFloat32, false)});
  }
  // Non-contiguous views.
  for (Layout layout : {Layout::kBHSD, Layout::kPackedQKV}) {
    for (DType dtype : dtypes) {
      cases.push_back({make_shape(130, 130, 4, 2, 64, dtype, true, 2), layout});
      cases.push_back({make_shape(65, 65, 8, 1, 128, dtype, false), layout});
    }
    cases.push_back({make_shape(200, 90, 4, 4, 64, DType::kFloat16, true), Layout::kBHSD});
  }
  // Large-magnitude inputs.
  for (DType dtype : dtypes) {
    for (bool causal : {false, true}) {
      cases.push_back({make_shape(300, 300, 2, 1, 64, dtype, causal), Layout::kBSHD, kLargeStddev});
      cases.push_back({make_shape(65, 65, 2, 2, 128, dtype, causal), Layout::kPackedQKV,
                       kLargeStddev});
    }
  }
  // Explicit softmax scale.
  testing::ProblemShape scaled = make_shape(70, 90, 2, 2, 64, DType::kFloat16, false);
  scaled.softmax_scale = 0.5f;
  cases.push_back({scaled});
  return cases;
}

class CpuBackendAccuracy : public ::testing::TestWithParam<CpuCase> {};

TEST_P(CpuBackendAccuracy, MatchesFloat64Reference) {
  const CpuCase& c = GetParam();
  CpuRun run = run_host_case(c.shape, c.layout, c.stddev, kMaxCheckedRows);
  std::printf("[cpu] %s %s: %s\n", c.shape.describe().c_str(), to_string(c.layout),
              run.report.summary().c_str());
  EXPECT_TRUE(run.report.pass) << c.shape.describe() << " " << to_string(c.layout)
                               << " std=" << c.stddev << ": " << run.report.summary();
}

INSTANTIATE_TEST_SUITE_P(Shapes, CpuBackendAccuracy, ::testing::ValuesIn(all_cases()),
                         [](const ::testing::TestParamInfo<CpuCase>& info) {
                           return case_name(info.param) + "_" + std::to_string(info.index);
                         });

TEST(ReferenceBackend, PassesTheRuleItDefines) {
  for (DType dtype : {DType::kFloat16, DType::kBFloat16, DType::kFloat32}) {
    testing::ProblemShape s = make_shape(33, 47, 4, 2, 64, dtype, true);
    CpuRun run = run_host_case(s, Layout::kBHSD, 1.0f, kMaxCheckedRows, Backend::kReference);
    EXPECT_TRUE(run.report.pass) << s.describe() << ": " << run.report.summary();
  }
}

TEST(AccuracyReport, FailureNamesShapeElementAndBothValues) {
  testing::ProblemShape s = make_shape(20, 20, 2, 1, 16, DType::kFloat16, false);
  CpuRun run = run_host_case(s, Layout::kBSHD, 1.0f, kMaxCheckedRows);
  ASSERT_TRUE(run.report.pass) << run.report.summary();
  testing::HostTensors in = testing::make_random_inputs(s, 1234, 1.0f);
  // Corrupt out[b=0, row=5, h=1, d=3] and check the report points at it.
  const size_t index = ((0 * 20 + 5) * 2 + 1) * 16 + 3;
  testing::from_float(s.dtype, 7.0f, &run.out[index * 2]);
  testing::AccuracyReport bad = testing::check_accuracy(s, in, run.out.data(), run.lse.data(),
                                                        testing::sample_rows(20, 100));
  EXPECT_FALSE(bad.pass);
  EXPECT_NE(bad.worst.find("row=5 h=1 d=3"), std::string::npos) << bad.worst;
  EXPECT_NE(bad.worst.find("got 7"), std::string::npos) << bad.worst;
  EXPECT_NE(bad.worst.find("want"), std::string::npos) << bad.worst;
  EXPECT_NE(bad.summary().find("FAIL"), std::string::npos) << bad.summary();
  EXPECT_EQ(s.describe(), "b1 sq20 sk20 hq2 hkv1 d16 fp16");

  // NaN where the reference is finite always fails.
  std::memset(&run.out[index * 2], 0xFF, 2);
  bad = testing::check_accuracy(s, in, run.out.data(), nullptr, testing::sample_rows(20, 100));
  EXPECT_FALSE(bad.pass);
  EXPECT_TRUE(bad.nonfinite);
}

TEST(SampleRows, KeepsEndsAndTileBoundaries) {
  std::vector<int> rows = testing::sample_rows(4097, 40);
  EXPECT_LE(rows.size(), 40u);
  for (int must : {0, 4096, 63, 64, 65, 127, 128, 129, 4095}) {
    EXPECT_NE(std::find(rows.begin(), rows.end(), must), rows.end()) << "row " << must;
  }
  EXPECT_EQ(testing::sample_rows(17, 40).size(), 17u);
}

}  // namespace
}  // namespace flashcore::test
