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

  // "b2 sq17 sk65 hq8 hkv2 d128 bf16 causal" for failure messages and tables.
  std::string describe() const;
  float scale() const;
  // 4 * b * hq * sq * sk * d, halved when causal (BENCHMARKS.md convention).
  double flops() const;
};

// Contiguous BSHD host tensors holding the dtype's bits (2 bytes per element for fp16/bf16).
struct HostTensors {
  std::vector<uint8_t> q, k, v;
};

// Fresh normal(0, stddev) inputs rounded to the dtype, deterministic in `seed`.
HostTensors make_random_inputs(const ProblemShape& shape, uint64_t seed, float stddev = 1.0f);

// Query rows to check: all rows when seqlen_q <= max_rows, else a spread that always includes
// the first and last rows and the rows around tile boundaries (63, 64, 65, 127, 128, ...).
std::vector<int> sample_rows(int seqlen_q, int max_rows);

struct AccuracyReport {
  bool pass = false;
  double max_err_out = 0, baseline_err_out = 0, tol_out = 0;
  double max_err_lse = 0, baseline_err_lse = 0, tol_lse = 0;
  bool nonfinite = false;
  int rows_checked = 0;
  std::string worst;  // "out b=0 row=17 h=3 d=5: got 0.1234 want 0.4567" of the worst element

  std::string summary() const;  // one line: errors, tolerances, worst element
};

// out_host: contiguous BSHD in shape.dtype; lse_host: float32 [b, hq, sq] or nullptr to skip.
AccuracyReport check_accuracy(const ProblemShape& shape, const HostTensors& inputs,
                              const void* out_host, const float* lse_host,
                              const std::vector<int>& rows);

// Host conversions between the dtype's bits and float.
float to_float(DType dtype, const uint8_t* element);
void from_float(DType dtype, float value, uint8_t* element);

}  // namespace flashcore::testing
