// The BENCHMARKS.md accuracy rule, shared by the GoogleTest suites and flashcore-bench.
//
// Given one problem's inputs and a backend's outputs (host copies), computes the float64
// reference and the same-precision baseline (reference with P and O rounded to the input dtype)
// on a set of query rows and applies the rule:
//   max|out - ref64| <= 2 * max|baseline - ref64| + 1e-5    (lse: same with 1e-4)
//   any NaN/Inf in out or lse where the reference is finite fails.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "flashcore/flashcore.h"

namespace flashcore::testing {

struct ProblemShape {
  int batch = 1;
  int seqlen_q = 1;
  int seqlen_k = 1;
  int heads_q = 1;
  int heads_kv = 1;
  int head_dim = 64;
  DType dtype = DType::kFloat16;
  bool causal = false;
  std::optional<float> softmax_scale;  // default 1/sqrt(head_dim)
  // Of out, for fp8 inputs only: bf16 (the default) or fp16. Other dtypes write out in dtype.
  std::optional<DType> out_dtype;

  // The dtype out is written in.
  DType output_dtype() const;
  // "b2 sq17 sk65 hq8 hkv2 d128 bf16 causal" for failure messages and tables.
  std::string describe() const;
  float scale() const;
  // 4 * b * hq * sq * sk * d, halved when causal (BENCHMARKS.md convention).
  double flops() const;
};

// Contiguous BSHD host tensors holding the dtype's bits (2 bytes per element for fp16/bf16, 1
// for fp8), and for fp8 the float32 [batch, heads_kv] descales (empty for other dtypes).
struct HostTensors {
  std::vector<uint8_t> q, k, v;
  std::vector<float> q_descale, k_descale, v_descale;
};

// Fresh normal(0, stddev) inputs rounded to the dtype, deterministic in `seed`. fp8: quantized
// per (batch, kv head) as FP8 callers do, with descale = amax / 448 over the block (q: the
// query heads of that kv head, every row) and e4m3 = round(x / descale).
HostTensors make_random_inputs(const ProblemShape& shape, uint64_t seed, float stddev = 1.0f);

// values (float [batch, seqlen, heads, head_dim]) to e4m3 bytes with one descale per (batch, kv
// head) = amax / 448 of that block (1 for an all-zero block); descales [batch, heads_kv].
void quantize_fp8_e4m3(const std::vector<float>& values, int batch, int seqlen, int heads,
                       int heads_kv, int head_dim, std::vector<uint8_t>& codes,
                       std::vector<float>& descales);

// Query rows to check: all rows when seqlen_q <= max_rows, else a spread that always includes
// the first and last rows and the rows around tile boundaries (63, 64, 65, 127, 128, ...).
std::vector<int> sample_rows(int seqlen_q, int max_rows);

// The FP8 rule's absolute slack on out (issue 26: max err <= 2x the fp8 baseline's + 1e-3), and
// the same on lse: the float32 baseline's lse is exact to 1e-6, which no e4m3 wgmma reaches.
inline constexpr double kFp8OutAbsoluteSlack = 1e-3;
inline constexpr double kFp8LseAbsoluteSlack = 1e-3;

// The rule's tolerances for a baseline error: twice it plus the absolute slack (fp8: the FP8
// rule's).
double out_tolerance(double baseline_err, bool fp8);
double lse_tolerance(double baseline_err, bool fp8);

struct AccuracyReport {
  bool pass = false;
  double max_err_out = 0, baseline_err_out = 0, tol_out = 0;
  double max_err_lse = 0, baseline_err_lse = 0, tol_lse = 0;
  bool nonfinite = false;
  int rows_checked = 0;
  std::string worst;  // "out b=0 row=17 h=3 d=5: got 0.1234 want 0.4567" of the worst element

  std::string summary() const;  // one line: errors, tolerances, worst element
};

// out_host: contiguous BSHD in shape.output_dtype(); lse_host: float32 [b, hq, sq] or nullptr
// to skip. fp8 inputs are judged by issue 26's FP8 rule: the fp8 baseline (reference.h) and an
// absolute slack of 1e-3 on out (kFp8OutAbsoluteSlack) and on lse (kFp8LseAbsoluteSlack: e4m3
// wgmma accumulates its scores in fewer bits than float32, and FA3's FP8 lse is off by the same
// 1e-4-3.5e-4 at std 1 on the same inputs, docs/kernels.md run 111).
AccuracyReport check_accuracy(const ProblemShape& shape, const HostTensors& inputs,
                              const void* out_host, const float* lse_host,
                              const std::vector<int>& rows);

// Host conversions between the dtype's bits and float.
float to_float(DType dtype, const uint8_t* element);
void from_float(DType dtype, float value, uint8_t* element);

}  // namespace flashcore::testing
