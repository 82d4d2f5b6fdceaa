// The float64 attention oracle every test compares against, and its same-precision "baseline".
//
// Plain and obviously right: for each (batch, head, query row) the scores, their max, exp, sum,
// output and lse, with nothing tiled or fused. Works on a chosen subset of query rows so the
// tests can afford large shapes.
#pragma once

#include <vector>

#include "common/params.h"

namespace flashcore::detail {

enum class ReferenceMode {
  kFloat64,   // everything in double: the oracle
  // A naive implementation in the input precision: scores, max, sum and lse in float32 (as a
  // tensor-core GEMM with fp32 accumulation gives them), P = softmax rounded to the dtype,
  // out accumulated in float32 and rounded to the dtype. fp8 inputs: P = exp(s - max)
  // unnormalized, rounded to e4m3 for P V, divided by the float32 sum of the unrounded P at
  // the end, out rounded to the output dtype (reference.cpp, row_baseline_fp8).
  kBaseline,
};

// Rows are indexed by query row of each sequence; with packed q (cu_seqlens_q) a row past its
// sequence's length stays out = 0, lse = -inf.
struct ReferenceResult {
  int rows = 0;             // number of query rows computed (rows.size())
  std::vector<double> out;  // [batch][rows][heads_q][head_dim]
  std::vector<double> lse;  // [batch][heads_q][rows], natural log; -inf for rows with no key
};

// Computes the given query rows (every row < params.seqlen_q when `rows` is empty) of every
// batch and head, through the params' accessors (any layout: packed, paged, kv cache).
// Reads q/k/v through the params' strides; ignores params.out and params.lse.
ReferenceResult reference_attention(const AttentionParams& params, const std::vector<int>& rows,
                                    ReferenceMode mode);

// Backend::kReference: the float64 oracle writing out (rounded to the output dtype) and lse
// (float). fp8 inputs are dequantized exactly (float(x) * descale in double).
void run_reference_backend(const AttentionParams& params);

}  // namespace flashcore::detail
