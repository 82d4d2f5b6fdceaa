// Small cases whose answer is known by hand: causal alignment, empty rows, no-op sizes, the
// default scale, and the host fp16/bf16 conversions.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <string>

#include "cpu/half_convert.h"
#include "cpu_runner.h"

namespace flashcore::test {
namespace {

constexpr Device kCpu{DeviceType::kCPU, 0};
constexpr float kMinusInf = -std::numeric_limits<float>::infinity();

// fp32 problem with explicit values, run on one backend; returns out and lse.
struct TinyProblem {
  int sq, sk, d;
  std::vector<float> q, k, v, out, lse;
  TinyProblem(int sq_, int sk_, int d_)
      : sq(sq_), sk(sk_), d(d_), q(size_t(sq_) * d_), k(size_t(sk_) * d_), v(size_t(sk_) * d_),
        out(size_t(sq_) * d_, std::nanf("")), lse(size_t(sq_), std::nanf("")) {}

  void run(bool causal, Backend backend, std::optional<float> scale = std::nullopt) {
    AttentionArgs args;
    args.q = make_tensor(q.data(), DType::kFloat32, kCpu, {1, sq, 1, d});
    args.k = make_tensor(k.data(), DType::kFloat32, kCpu, {1, sk, 1, d});
    args.v = make_tensor(v.data(), DType::kFloat32, kCpu, {1, sk, 1, d});
    args.out = make_tensor(out.data(), DType::kFloat32, kCpu, {1, sq, 1, d});
    args.lse = make_tensor(lse.data(), DType::kFloat32, kCpu, {1, 1, sq});
    args.causal = causal;
    args.backend = backend;
    args.softmax_scale = scale;
    EXPECT_EQ(attention_forward(args), backend);
  }
};

class HostBackends : public ::testing::TestWithParam<Backend> {};

TEST_P(HostBackends, SingleQueryCausalSeesAllKeys) {
  // seqlen_q = 1, seqlen_k = 3: bottom-right alignment puts the query at the last key.
  TinyProblem causal(1, 3, 2), full(1, 3, 2);
  for (TinyProblem* p : {&causal, &full}) {
    p->q = {1, 0};
    p->k = {0, 0, 1, 0, 2, 0};   // scores 0, 1, 2 with scale 1
    p->v = {1, 0, 0, 1, 1, 1};
  }
  causal.run(true, GetParam(), 1.0f);
  full.run(false, GetParam(), 1.0f);
  const double z = 1 + std::exp(1.0) + std::exp(2.0);
  EXPECT_NEAR(causal.out[0], (1 + std::exp(2.0)) / z, 1e-6);
  EXPECT_NEAR(causal.out[1], (std::exp(1.0) + std::exp(2.0)) / z, 1e-6);
  EXPECT_NEAR(causal.lse[0], std::log(z), 1e-6);
  EXPECT_EQ(causal.out, full.out);
}

TEST_P(HostBackends, MoreQueriesThanKeysGivesEmptyRows) {
  // seqlen_q = 5, seqlen_k = 2, causal: row i sees keys j <= i - 3, so rows 0..2 see nothing,
  // row 3 sees key 0 only (out = v[0]) and row 4 sees both.
  TinyProblem p(5, 2, 2);
  p.q = {1, 1, 1, 1, 1, 1, 3, -1, 0, 0};
  p.k = {1, 2, 0, 1};
  p.v = {5, -5, 7, 9};
  p.run(true, GetParam(), 1.0f);
  for (int row = 0; row < 3; ++row) {
    EXPECT_EQ(p.out[row * 2], 0.0f) << "row " << row;
    EXPECT_EQ(p.out[row * 2 + 1], 0.0f) << "row " << row;
    EXPECT_EQ(p.lse[row], kMinusInf) << "row " << row;
  }
  EXPECT_NEAR(p.out[6], 5.0f, 1e-6);
  EXPECT_NEAR(p.out[7], -5.0f, 1e-6);
  EXPECT_NEAR(p.lse[3], 1.0f, 1e-6);  // q3 . k0 = 3 - 2
  EXPECT_NEAR(p.out[8], 6.0f, 1e-6);  // q4 = 0: uniform over both keys
  EXPECT_NEAR(p.lse[4], std::log(2.0f), 1e-6);
}

TEST_P(HostBackends, FewerQueriesThanKeysCausalOffset) {
  // seqlen_q = 2, seqlen_k = 4: row 0 sees keys 0..2, row 1 sees all four. q = 0: uniform weights.
  TinyProblem p(2, 4, 1);
  p.q = {0, 0};
  p.k = {1, 2, 3, 4};
  p.v = {1, 2, 3, 100};
  p.run(true, GetParam());
  EXPECT_NEAR(p.out[0], 2.0f, 1e-5);
  EXPECT_NEAR(p.out[1], 26.5f, 1e-5);
  EXPECT_NEAR(p.lse[0], std::log(3.0f), 1e-6);
}

TEST_P(HostBackends, NoKeysGivesZeroOutAndMinusInfLse) {
  TinyProblem p(3, 0, 4);
  p.run(false, GetParam());
  for (float value : p.out) EXPECT_EQ(value, 0.0f);
  for (float value : p.lse) EXPECT_EQ(value, kMinusInf);
}

TEST_P(HostBackends, DefaultScaleIsInverseSqrtHeadDim) {
  testing::ProblemShape s;
  s.seqlen_q = 9, s.seqlen_k = 11, s.head_dim = 16, s.dtype = DType::kFloat32;
  TinyProblem implicit(9, 11, 16), explicit_scale(9, 11, 16);
  testing::HostTensors in = testing::make_random_inputs(s, 7);
  for (TinyProblem* p : {&implicit, &explicit_scale}) {
    std::memcpy(p->q.data(), in.q.data(), in.q.size());
    std::memcpy(p->k.data(), in.k.data(), in.k.size());
    std::memcpy(p->v.data(), in.v.data(), in.v.size());
  }
  implicit.run(false, GetParam());
  explicit_scale.run(false, GetParam(), 0.25f);
  EXPECT_EQ(implicit.out, explicit_scale.out);
  EXPECT_EQ(implicit.lse, explicit_scale.lse);
}

// A key the causal mask hides from a row must not reach that row, whatever it holds: NaN or Inf
// in its K or V row (e.g. an unwritten KV-cache slot) must leave the row exactly as it is on
// clean data. Multiplying P = 0 by V = NaN gives NaN, so masked keys must be skipped, not zeroed.
// Every key is visible to the last query row under bottom-right alignment, so the rows checked
// are those before the poisoned key: rows i with i + seqlen_k - seqlen_q < key.
TEST_P(HostBackends, PoisonedMaskedKeysDoNotReachTheOutput) {
  constexpr int kHeadDim = 20;  // not a multiple of the cpu backend's 8-column micro-tile
  const float kInf = std::numeric_limits<float>::infinity();
  struct Poison {
    const char* name;
    bool in_k;
    float value;
  };
  const Poison poisons[] = {{"V=NaN", false, std::nanf("")}, {"V=+Inf", false, kInf},
                            {"V=-Inf", false, -kInf},        {"K=NaN", true, std::nanf("")},
                            {"K=+Inf", true, kInf}};
  // (seqlen_q, seqlen_k): square, fewer queries than keys, more queries than keys (top rows see
  // nothing); poisoned keys inside and at the edges of the cpu backend's 64-key blocks.
  struct Case {
    int sq, sk;
    std::vector<int> keys;
  };
  const Case cases[] = {{200, 200, {1, 63, 64, 100, 199}},
                        {100, 260, {170, 200, 223, 259}},
                        {260, 100, {0, 50, 63, 99}}};
  for (const Case& c : cases) {
    TinyProblem clean(c.sq, c.sk, kHeadDim);
    std::mt19937 rng(c.sq * 1000 + c.sk);
    std::normal_distribution<float> normal;
    for (std::vector<float>* t : {&clean.q, &clean.k, &clean.v}) {
      for (float& x : *t) x = normal(rng);
    }
    clean.run(true, GetParam());
    const int offset = c.sk - c.sq;
    for (int key : c.keys) {
      for (const Poison& poison : poisons) {
        TinyProblem poisoned = clean;
        float* row = (poison.in_k ? poisoned.k : poisoned.v).data() + size_t(key) * kHeadDim;
        std::fill(row, row + kHeadDim, poison.value);
        poisoned.run(true, GetParam());
        const int clean_rows = std::clamp(key - offset, 0, c.sq);  // rows that never see `key`
        int bad = 0;
        std::string first;
        for (int i = 0; i < clean_rows; ++i) {
          for (int col = 0; col < kHeadDim; ++col) {
            const float got = poisoned.out[size_t(i) * kHeadDim + col];
            const float want = clean.out[size_t(i) * kHeadDim + col];
            if (got == want) continue;  // bitwise equal but for the sign of zero
            if (bad++ == 0) {
              first = "row " + std::to_string(i) + " col " + std::to_string(col) + ": got " +
                      std::to_string(got) + ", clean run " + std::to_string(want);
            }
          }
          EXPECT_EQ(poisoned.lse[i], clean.lse[i]) << "lse row " << i;
        }
        EXPECT_EQ(bad, 0) << poison.name << " at key " << key << " (seqlen_q " << c.sq
                          << ", seqlen_k " << c.sk << "): " << bad << " of "
                          << clean_rows * kHeadDim
                          << " outputs of rows that cannot see the key changed; first " << first;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(CpuAndReference, HostBackends,
                         ::testing::Values(Backend::kCPU, Backend::kReference),
                         [](const auto& info) { return std::string(to_string(info.param)); });

TEST(NoOp, ZeroSizedDimensionsRunNothing) {
  // Null pointers are fine when a tensor has no elements; nothing may be touched.
  for (int zero_dim : {0, 1, 2}) {
    std::vector<int64_t> q_shape = {2, 3, 4, 8}, kv_shape = {2, 5, 2, 8};
    q_shape[zero_dim] = 0;
    if (zero_dim != 1) kv_shape[zero_dim] = 0;
    std::vector<uint16_t> k(2 * 5 * 2 * 8), v(k.size());  // only read when seqlen_q > 0
    const bool kv_has_data = zero_dim == 1;
    AttentionArgs args;
    args.q = make_tensor(nullptr, DType::kFloat16, kCpu, q_shape);
    args.k = make_tensor(kv_has_data ? k.data() : nullptr, DType::kFloat16, kCpu, kv_shape);
    args.v = make_tensor(kv_has_data ? v.data() : nullptr, DType::kFloat16, kCpu, kv_shape);
    args.out = make_tensor(nullptr, DType::kFloat16, kCpu, q_shape);
    EXPECT_EQ(attention_forward(args), Backend::kCPU) << "zero dim " << zero_dim;
  }
}

TEST(HalfConversion, RoundsToNearestEven) {
  using namespace flashcore::detail;
  EXPECT_EQ(float_to_fp16(1.0f), 0x3C00);
  EXPECT_EQ(float_to_fp16(-2.0f), 0xC000);
  EXPECT_EQ(float_to_fp16(65504.0f), 0x7BFF);
  EXPECT_EQ(float_to_fp16(65519.0f), 0x7BFF);
  EXPECT_EQ(float_to_fp16(65520.0f), 0x7C00);  // the tie rounds to even: infinity
  EXPECT_EQ(float_to_fp16(std::ldexp(1.0f, -24)), 0x0001);
  EXPECT_EQ(float_to_fp16(std::ldexp(1.0f, -25)), 0x0000);  // tie to even: zero
  EXPECT_EQ(float_to_fp16(std::ldexp(3.0f, -25)), 0x0002);  // 1.5 units: to even 2
  EXPECT_EQ(float_to_fp16(1.0f + std::ldexp(1.0f, -11)), 0x3C00);       // tie down to even
  EXPECT_EQ(float_to_fp16(1.0f + std::ldexp(3.0f, -11)), 0x3C02);       // tie up to even
  EXPECT_EQ(fp16_to_float(0x0001), std::ldexp(1.0f, -24));
  EXPECT_EQ(fp16_to_float(0x7BFF), 65504.0f);
  EXPECT_TRUE(std::isnan(fp16_to_float(0x7E00)));
  EXPECT_EQ(fp16_to_float(0xFC00), kMinusInf);
  EXPECT_EQ(float_to_bf16(1.0f), 0x3F80);
  EXPECT_EQ(float_to_bf16(1.0f + std::ldexp(1.0f, -8)), 0x3F80);  // tie to even
  EXPECT_EQ(float_to_bf16(1.0f + std::ldexp(3.0f, -8)), 0x3F82);
  EXPECT_EQ(bf16_to_float(0xC040), -3.0f);
  EXPECT_TRUE(std::isnan(bf16_to_float(float_to_bf16(std::nanf("")))));
  for (uint32_t bits = 0; bits < 0x7C00; bits += 7) {  // every finite fp16 survives a round trip
    EXPECT_EQ(float_to_fp16(fp16_to_float(uint16_t(bits))), bits);
  }
}

}  // namespace
}  // namespace flashcore::test
