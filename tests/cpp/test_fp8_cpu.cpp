// FP8 (e4m3fn) on the host (issue 26): the exact decode, torch's rounding on encode, and the cpu
// and reference backends against the float64 reference of the dequantized inputs under the FP8
// rule (max err <= 2x the fp8 baseline's + 1e-3), dense and serving layouts. Inputs are
// quantized per (batch, kv head) with descale = amax / 448, as FP8 callers do.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "cpu/element_io.h"
#include "cpu/fp8_convert.h"
#include "cpu_runner.h"
#include "testing/serving_problem.h"

namespace flashcore::test {
namespace {

using detail::float_to_fp8_e4m3;
using detail::fp8_e4m3_to_float;
using testing::ProblemShape;

// The e4m3fn value of a code from its definition (not from the bit layout of float): sign,
// exponent field e (bias 7) and mantissa m; e = 0 subnormal m * 2^-9; e = 15, m = 7 NaN.
double e4m3_by_definition(int code) {
  const int sign = code >> 7, e = (code >> 3) & 15, m = code & 7;
  if (e == 15 && m == 7) return std::numeric_limits<double>::quiet_NaN();
  const double magnitude = e == 0 ? std::ldexp(double(m), -9) : std::ldexp(1.0 + m / 8.0, e - 7);
  return sign ? -magnitude : magnitude;
}

TEST(Fp8E4M3, DecodesEveryCodeExactly) {
  for (int code = 0; code < 256; ++code) {
    const double want = e4m3_by_definition(code);
    const float got = fp8_e4m3_to_float(static_cast<uint8_t>(code));
    if (std::isnan(want)) {
      EXPECT_TRUE(std::isnan(got)) << "code 0x" << std::hex << code << " got " << got;
      continue;
    }
    EXPECT_EQ(double(got), want) << "code 0x" << std::hex << code;
    EXPECT_EQ(std::signbit(got), code >= 0x80) << "code 0x" << std::hex << code;
  }
  // The landmarks: largest finite, one, smallest normal and subnormal, the two NaNs.
  EXPECT_EQ(fp8_e4m3_to_float(0x7E), 448.0f);
  EXPECT_EQ(fp8_e4m3_to_float(0xFE), -448.0f);
  EXPECT_EQ(fp8_e4m3_to_float(0x38), 1.0f);
  EXPECT_EQ(fp8_e4m3_to_float(0x08), std::ldexp(1.0f, -6));
  EXPECT_EQ(fp8_e4m3_to_float(0x01), std::ldexp(1.0f, -9));
  EXPECT_TRUE(std::isnan(fp8_e4m3_to_float(0x7F)));
  EXPECT_TRUE(std::isnan(fp8_e4m3_to_float(0xFF)));
}

TEST(Fp8E4M3, EncodeRoundTripsEveryFiniteCode) {
  for (int code = 0; code < 256; ++code) {
    if ((code & 0x7F) == 0x7F) continue;  // NaN
    EXPECT_EQ(float_to_fp8_e4m3(fp8_e4m3_to_float(uint8_t(code))), code)
        << "code 0x" << std::hex << code;
  }
}

// Between two neighbouring codes: the midpoint ties to the even code (mantissa bit 0 clear, which
// is the code's own bit 0), and the floats on either side of it go to the nearer code. Covers the
// subnormal steps, the subnormal-normal boundary and every binade, both signs.
TEST(Fp8E4M3, EncodeRoundsToNearestEven) {
  for (int code = 0; code < 0x7E; ++code) {
    for (uint8_t sign : {uint8_t(0), uint8_t(0x80)}) {
      const uint8_t low = uint8_t(code | sign), high = uint8_t((code + 1) | sign);
      const float a = fp8_e4m3_to_float(low), b = fp8_e4m3_to_float(high);
      const float mid = (a + b) / 2;  // exact: both have 4 significant bits
      const uint8_t even = (code & 1) ? high : low;
      EXPECT_EQ(float_to_fp8_e4m3(mid), even) << "midpoint " << mid;
      EXPECT_EQ(float_to_fp8_e4m3(std::nextafter(mid, a)), low) << "below " << mid;
      EXPECT_EQ(float_to_fp8_e4m3(std::nextafter(mid, b)), high) << "above " << mid;
    }
  }
}

// torch's Tensor.to(torch.float8_e4m3fn) and ml_dtypes do not saturate: a magnitude that rounds
// past 448 is NaN. 464 is the tie between 448 and the missing 480 and goes to 448 (even).
TEST(Fp8E4M3, EncodeOverflowIsNaNAsInTorch) {
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(float_to_fp8_e4m3(448.0f), 0x7E);
  EXPECT_EQ(float_to_fp8_e4m3(460.0f), 0x7E);
  EXPECT_EQ(float_to_fp8_e4m3(464.0f), 0x7E);
  EXPECT_EQ(float_to_fp8_e4m3(-464.0f), 0xFE);
  EXPECT_EQ(float_to_fp8_e4m3(std::nextafter(464.0f, inf)), 0x7F);
  EXPECT_EQ(float_to_fp8_e4m3(480.0f), 0x7F);
  EXPECT_EQ(float_to_fp8_e4m3(1e6f), 0x7F);
  EXPECT_EQ(float_to_fp8_e4m3(-1e6f), 0xFF);
  EXPECT_EQ(float_to_fp8_e4m3(inf), 0x7F);
  EXPECT_EQ(float_to_fp8_e4m3(-inf), 0xFF);
  EXPECT_EQ(float_to_fp8_e4m3(std::numeric_limits<float>::quiet_NaN()) & 0x7F, 0x7F);
  EXPECT_TRUE(std::isnan(detail::round_to_dtype(DType::kFloat8E4M3, 500.0f)));
}

TEST(Fp8E4M3, EncodeUnderflowRoundsToZeroOrTheSmallestSubnormal) {
  const float step = std::ldexp(1.0f, -9);  // the smallest subnormal
  EXPECT_EQ(float_to_fp8_e4m3(step / 2), 0x00);  // tie: to 0 (even)
  EXPECT_EQ(float_to_fp8_e4m3(std::nextafter(step / 2, 1.0f)), 0x01);
  EXPECT_EQ(float_to_fp8_e4m3(-step / 2), 0x80);  // negative zero keeps its sign
  EXPECT_EQ(float_to_fp8_e4m3(1.5f * step), 0x02);  // tie between 1 and 2 units: 2
  EXPECT_EQ(float_to_fp8_e4m3(2.5f * step), 0x02);  // tie between 2 and 3 units: 2
  EXPECT_EQ(float_to_fp8_e4m3(1e-30f), 0x00);
  EXPECT_EQ(float_to_fp8_e4m3(std::numeric_limits<float>::denorm_min()), 0x00);
  EXPECT_EQ(float_to_fp8_e4m3(-0.0f), 0x80);
}

TEST(Fp8E4M3, NamesParsingAndSize) {
  EXPECT_STREQ(to_string(DType::kFloat8E4M3), "fp8_e4m3");
  for (const char* name : {"fp8", "fp8_e4m3", "float8_e4m3fn"}) {
    EXPECT_EQ(parse_dtype(name), DType::kFloat8E4M3) << name;
  }
  EXPECT_EQ(dtype_size(DType::kFloat8E4M3), 1u);
}

ProblemShape fp8_shape(int b, int sq, int sk, int hq, int hkv, int d, bool causal) {
  ProblemShape s;
  s.batch = b, s.seqlen_q = sq, s.seqlen_k = sk, s.heads_q = hq, s.heads_kv = hkv;
  s.head_dim = d, s.dtype = DType::kFloat8E4M3, s.causal = causal;
  return s;
}

void expect_fp8_rule(const ProblemShape& s, float stddev, Backend backend = Backend::kCPU,
                     Layout layout = Layout::kBSHD) {
  const CpuRun run = run_host_case(s, layout, stddev, /*max_rows=*/48, backend);
  EXPECT_TRUE(run.report.pass) << s.describe() << " std " << stddev << " " << to_string(layout)
                               << " on " << to_string(backend) << ": " << run.report.summary();
  // The rule is only as strong as its baseline: e4m3 P must cost something.
  EXPECT_GT(run.report.baseline_err_out, 0.0) << s.describe();
}

TEST(Fp8Cpu, GqaBothMasksStd1AndStd30) {
  for (float stddev : {1.0f, 30.0f}) {
    for (bool causal : {false, true}) {
      expect_fp8_rule(fp8_shape(2, 65, 130, 8, 2, 64, causal), stddev);
    }
  }
}

// Tails around the 64-row blocks and bottom-right causal with seqlen_q != seqlen_k both ways.
TEST(Fp8Cpu, TailsAndCausalSqNotSk) {
  expect_fp8_rule(fp8_shape(1, 1, 17, 4, 4, 64, true), 1.0f);
  expect_fp8_rule(fp8_shape(1, 17, 63, 4, 1, 64, false), 30.0f);  // MQA
  expect_fp8_rule(fp8_shape(1, 127, 65, 4, 2, 64, true), 1.0f);   // sq > sk: early rows see none
  expect_fp8_rule(fp8_shape(1, 17, 200, 8, 1, 64, true), 30.0f);  // chunked prefill
}

TEST(Fp8Cpu, HeadDimsLayoutsAndTheReferenceBackend) {
  expect_fp8_rule(fp8_shape(1, 33, 70, 2, 1, 128, true), 1.0f);
  expect_fp8_rule(fp8_shape(1, 20, 40, 2, 2, 256, false), 30.0f);
  expect_fp8_rule(fp8_shape(2, 40, 40, 4, 2, 64, true), 1.0f, Backend::kCPU, Layout::kBHSD);
  expect_fp8_rule(fp8_shape(1, 40, 40, 4, 2, 64, true), 1.0f, Backend::kCPU, Layout::kPackedQKV);
  expect_fp8_rule(fp8_shape(1, 33, 50, 4, 2, 64, true), 30.0f, Backend::kReference);
}

TEST(Fp8Cpu, Fp16Output) {
  ProblemShape s = fp8_shape(1, 40, 70, 4, 2, 64, true);
  s.out_dtype = DType::kFloat16;
  expect_fp8_rule(s, 1.0f);
}

// The semantics, checked by hand on a tiny GQA call: q_deq = float(q) * q_descale[b][h / group]
// (the kv head's factor), k and v likewise with their own; out = softmax(q_deq k_deq^T * scale)
// v_deq. Distinct factors per (batch, kv head) catch an index mix-up the rule would miss (the
// reference reads the same params).
TEST(Fp8Cpu, DescalesFollowTheContract) {
  const int b = 2, sq = 3, sk = 5, hq = 4, hkv = 2, d = 8;
  ProblemShape s = fp8_shape(b, sq, sk, hq, hkv, d, false);
  testing::HostTensors in = testing::make_random_inputs(s, 99, 1.0f);
  in.q_descale = {0.5f, 0.25f, 2.0f, 1.5f};
  in.k_descale = {0.125f, 1.0f, 0.75f, 3.0f};
  in.v_descale = {4.0f, 0.5f, 1.25f, 0.0625f};
  std::vector<uint16_t> out(size_t(b) * sq * hq * d);
  const Device cpu{DeviceType::kCPU, 0};
  AttentionArgs args;
  args.q = make_tensor(in.q.data(), s.dtype, cpu, {b, sq, hq, d});
  args.k = make_tensor(in.k.data(), s.dtype, cpu, {b, sk, hkv, d});
  args.v = make_tensor(in.v.data(), s.dtype, cpu, {b, sk, hkv, d});
  args.out = make_tensor(out.data(), DType::kBFloat16, cpu, {b, sq, hq, d});
  args.q_descale = make_tensor(in.q_descale.data(), DType::kFloat32, cpu, {b, hkv});
  args.k_descale = make_tensor(in.k_descale.data(), DType::kFloat32, cpu, {b, hkv});
  args.v_descale = make_tensor(in.v_descale.data(), DType::kFloat32, cpu, {b, hkv});
  for (Backend backend : {Backend::kReference, Backend::kCPU}) {
    args.backend = backend;
    attention_forward(args);
    auto at = [](const std::vector<uint8_t>& x, size_t i) {
      return double(fp8_e4m3_to_float(x[i]));
    };
    for (int ib = 0; ib < b; ++ib) {
      for (int h = 0; h < hq; ++h) {
        const int g = h / (hq / hkv);
        const double qs = in.q_descale[ib * hkv + g], ks = in.k_descale[ib * hkv + g];
        const double vs = in.v_descale[ib * hkv + g];
        for (int i = 0; i < sq; ++i) {
          std::vector<double> p(sk);
          double max_score = -INFINITY, sum = 0;
          for (int j = 0; j < sk; ++j) {
            double dot = 0;
            for (int c = 0; c < d; ++c) {
              dot += at(in.q, ((size_t(ib) * sq + i) * hq + h) * d + c) * qs *
                     at(in.k, ((size_t(ib) * sk + j) * hkv + g) * d + c) * ks;
            }
            p[j] = dot / std::sqrt(double(d));
            max_score = std::max(max_score, p[j]);
          }
          for (double& x : p) sum += (x = std::exp(x - max_score));
          for (int c = 0; c < d; ++c) {
            double want = 0;
            for (int j = 0; j < sk; ++j) {
              want += p[j] / sum * at(in.v, ((size_t(ib) * sk + j) * hkv + g) * d + c) * vs;
            }
            const double got = detail::bf16_to_float(out[((size_t(ib) * sq + i) * hq + h) * d + c]);
            EXPECT_NEAR(got, want, 1e-2 * std::fabs(want) + 1e-3)
                << to_string(backend) << " b" << ib << " h" << h << " row" << i << " d" << c;
          }
        }
      }
    }
  }
}

// Absent descales are 1; strided (transposed) and broadcast (stride 0) descales read the same
// values as contiguous ones: the outputs agree bit for bit.
TEST(Fp8Cpu, DescaleStridesAndAbsence) {
  const int b = 2, s_len = 20, hq = 4, hkv = 2, d = 32;
  ProblemShape s = fp8_shape(b, s_len, s_len, hq, hkv, d, true);
  testing::HostTensors in = testing::make_random_inputs(s, 5, 1.0f);
  const Device cpu{DeviceType::kCPU, 0};
  auto run = [&](auto&& set_descales) {
    std::vector<uint16_t> out(size_t(b) * s_len * hq * d);
    AttentionArgs args;
    args.q = make_tensor(in.q.data(), s.dtype, cpu, {b, s_len, hq, d});
    args.k = make_tensor(in.k.data(), s.dtype, cpu, {b, s_len, hkv, d});
    args.v = make_tensor(in.v.data(), s.dtype, cpu, {b, s_len, hkv, d});
    args.out = make_tensor(out.data(), DType::kBFloat16, cpu, {b, s_len, hq, d});
    args.causal = true;
    set_descales(args);
    attention_forward(args);
    return out;
  };
  std::vector<float> ones(b * hkv, 1.0f);
  const auto absent = run([](AttentionArgs&) {});
  const auto all_ones = run([&](AttentionArgs& a) {
    a.q_descale = a.k_descale = a.v_descale =
        make_tensor(ones.data(), DType::kFloat32, cpu, {b, hkv});
  });
  EXPECT_EQ(absent, all_ones);
  // The quantization's q/v factors (so that the scores are not all saturated), and k's scaled
  // differently per (batch, kv head), contiguous and as a transposed [hkv, b] buffer.
  std::vector<float> k_scale(b * hkv), k_scale_t(b * hkv);
  const float factors[] = {0.5f, 2.0f, 0.25f, 1.5f};
  for (int i = 0; i < b * hkv; ++i) k_scale[i] = in.k_descale[i] * factors[i];
  for (int ib = 0; ib < b; ++ib)
    for (int g = 0; g < hkv; ++g) k_scale_t[g * b + ib] = k_scale[ib * hkv + g];
  auto with_q_v = [&](AttentionArgs& a) {
    a.q_descale = make_tensor(in.q_descale.data(), DType::kFloat32, cpu, {b, hkv});
    a.v_descale = make_tensor(in.v_descale.data(), DType::kFloat32, cpu, {b, hkv});
  };
  const auto contiguous = run([&](AttentionArgs& a) {
    with_q_v(a);
    a.k_descale = make_tensor(k_scale.data(), DType::kFloat32, cpu, {b, hkv});
  });
  const auto transposed = run([&](AttentionArgs& a) {
    with_q_v(a);
    a.k_descale = make_strided_tensor(k_scale_t.data(), DType::kFloat32, cpu, {b, hkv}, {1, b});
  });
  const auto k_absent = run([&](AttentionArgs& a) { with_q_v(a); });
  EXPECT_EQ(contiguous, transposed);
  EXPECT_NE(contiguous, k_absent);
  float one_value = 0.75f;
  std::vector<float> filled(b * hkv, one_value);
  const auto broadcast = run([&](AttentionArgs& a) {
    with_q_v(a);
    a.k_descale = make_strided_tensor(&one_value, DType::kFloat32, cpu, {b, hkv}, {0, 0});
  });
  const auto filled_out = run([&](AttentionArgs& a) {
    with_q_v(a);
    a.k_descale = make_tensor(filled.data(), DType::kFloat32, cpu, {b, hkv});
  });
  EXPECT_EQ(broadcast, filled_out);
}

// The serving layouts take fp8 the same way: descales per sequence, k_new/v_new fp8 like the
// cache (the append copies their bytes), NaN (0xFF) in every slot no sequence owns.
void expect_serving_fp8(testing::ServingShape shape, float stddev) {
  shape.dtype = DType::kFloat8E4M3;
  SCOPED_TRACE(shape.describe());
  testing::ServingProblem problem(shape, 11, stddev);
  ASSERT_EQ(attention_forward(problem.args(Backend::kCPU)), Backend::kCPU);
  const testing::AccuracyReport report = problem.check_all(48);
  EXPECT_TRUE(report.pass) << report.summary();
  if (shape.append) {
    for (int b = 0; b < shape.batch(); ++b) EXPECT_EQ(problem.cache_mismatch(b), "");
  }
  if (shape.kv != testing::KvLayout::kVarlen) EXPECT_TRUE(problem.free_slots_untouched());
}

TEST(Fp8Cpu, VarlenRaggedBatch) {
  testing::ServingShape s;
  s.kv = testing::KvLayout::kVarlen;
  s.q_lens = {1, 17, 65, 0, 40};
  s.k_lens = {1, 17, 65, 30, 130};
  s.causal = true;
  expect_serving_fp8(s, 1.0f);
  s.seqused = true;
  expect_serving_fp8(s, 30.0f);
}

TEST(Fp8Cpu, PagedCacheWithAppend) {
  testing::ServingShape s;
  s.kv = testing::KvLayout::kPaged;
  s.k_lens = {5, 37, 100};
  s.q_lens = {1, 1, 1};
  s.packed_q = false;
  s.append = true;
  s.page_size = 16;
  s.causal = true;
  expect_serving_fp8(s, 1.0f);
  s.q_lens = {3, 9, 20};  // chunked prefill: packed q, its tokens appended
  s.packed_q = true;
  s.page_size = 7;
  s.out_dtype = DType::kFloat16;
  expect_serving_fp8(s, 30.0f);
}

}  // namespace
}  // namespace flashcore::test
