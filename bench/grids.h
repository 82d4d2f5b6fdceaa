// The configurations flashcore-bench runs: one from flags, or a named grid.
#pragma once

#include <string>
#include <vector>

#include "options.h"
#include "testing/accuracy.h"

namespace flashcore::bench {

using testing::ProblemShape;

// The no-flag default: batch 1, heads 4, seqlen 512, head_dim 64, non-causal and causal, in
// `dtype` (--dtype picks it; fp16 without the flag).
std::vector<ProblemShape> default_grid(DType dtype = DType::kFloat16);

// Seconds on any backend: tails (1, 17, 63, 64, 65, 127, 1000), seqlen_q != seqlen_k both ways
// with causal, GQA 4 and 8, MQA (heads_kv 1), head_dim 64/128/256, fp16 and bf16.
std::vector<ProblemShape> small_grid();

// BENCHMARKS.md: bf16 and fp16; head_dim 64, 128, 256; seqlen 512..16k with batch 16384/seqlen
// and heads 2048/head_dim; causal and non-causal. Then the original FlashCore config (b16 h16
// s2048 d64 fp16, both masks) and GQA prefill (hq32 hkv8 d128 b1 s8192 causal, bf16).
std::vector<ProblemShape> standard_grid();

// The shapes the options ask for: one config from flags, the default grid in --dtype, or the
// named grid filtered by --dtype / --causal. Throws UsageError when the filters leave nothing:
// zero configs would otherwise "pass".
std::vector<ProblemShape> shapes_from_options(const BenchOptions& options);

}  // namespace flashcore::bench
