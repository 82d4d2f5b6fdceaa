#include "grids.h"

#include <algorithm>
#include <string>

namespace flashcore::bench {
namespace {

// BENCHMARKS.md standard grid: batch * seqlen and heads * head_dim are held constant, so every
// config moves the same bytes per token and fills the GPU.
constexpr int kStandardTokens = 16384;     // batch = kStandardTokens / seqlen
constexpr int kStandardHiddenDim = 2048;   // heads = kStandardHiddenDim / head_dim
constexpr int kStandardHeadDims[] = {64, 128, 256};
constexpr int kStandardSeqlens[] = {512, 1024, 2048, 4096, 8192, 16384};

ProblemShape make_shape(int batch, int seqlen_q, int seqlen_k, int heads_q, int heads_kv,
                        int head_dim, DType dtype, bool causal) {
  ProblemShape shape;
  shape.batch = batch;
  shape.seqlen_q = seqlen_q;
  shape.seqlen_k = seqlen_k;
  shape.heads_q = heads_q;
  shape.heads_kv = heads_kv;
  shape.head_dim = head_dim;
  shape.dtype = dtype;
  shape.causal = causal;
  return shape;
}

// "--dtype fp32", "--causal" or both, for the message when they filter out a grid.
std::string filter_description(const BenchOptions& options) {
  std::string text;
  if (options.dtype) {
    text = std::string("--dtype ") + to_string(*options.dtype);
  }
  if (options.causal) {
    text += (text.empty() ? "" : " with ") + std::string("--causal");
  }
  return text;
}

}  // namespace

std::vector<ProblemShape> default_grid(DType dtype) {
  constexpr int kBatch = 1, kHeads = 4, kSeqlen = 512, kHeadDim = 64;
  std::vector<ProblemShape> shapes;
  for (const bool causal : {false, true}) {
    shapes.push_back(
        make_shape(kBatch, kSeqlen, kSeqlen, kHeads, kHeads, kHeadDim, dtype, causal));
  }
  return shapes;
}

std::vector<ProblemShape> small_grid() {
  struct Row {
    int batch, seqlen_q, seqlen_k, heads_q, heads_kv, head_dim;
    bool causal;
  };
  // Each row exercises one edge the kernels must get right.
  const Row rows[] = {
      {1, 1, 1, 4, 4, 64, false},       // one query, one key
      {2, 17, 65, 8, 2, 64, true},      // seqlen_q < seqlen_k with causal, GQA 4
      {2, 65, 17, 8, 2, 64, true},      // seqlen_q > seqlen_k: leading rows see no key
      {1, 63, 63, 4, 4, 128, false},    // one short of a 64-row tile
      {1, 64, 64, 4, 4, 128, true},     // exactly one tile
      {1, 127, 129, 8, 1, 128, true},   // MQA, ragged tiles
      {1, 1000, 1000, 8, 1, 64, false}, // MQA, long
      {1, 512, 512, 16, 2, 128, true},  // GQA 8
      {2, 256, 256, 4, 4, 256, false},  // the largest head_dim
      {1, 4097, 4097, 1, 1, 64, true},  // one past a power of two
  };
  std::vector<ProblemShape> shapes;
  for (const DType dtype : {DType::kFloat16, DType::kBFloat16}) {
    for (const Row& r : rows) {
      shapes.push_back(make_shape(r.batch, r.seqlen_q, r.seqlen_k, r.heads_q, r.heads_kv,
                                  r.head_dim, dtype, r.causal));
    }
  }
  return shapes;
}

std::vector<ProblemShape> standard_grid() {
  std::vector<ProblemShape> shapes;
  for (const DType dtype : {DType::kBFloat16, DType::kFloat16}) {
    for (const int head_dim : kStandardHeadDims) {
      for (const int seqlen : kStandardSeqlens) {
        for (const bool causal : {false, true}) {
          const int batch = kStandardTokens / seqlen;
          const int heads = kStandardHiddenDim / head_dim;
          shapes.push_back(
              make_shape(batch, seqlen, seqlen, heads, heads, head_dim, dtype, causal));
        }
      }
    }
  }
  // The original FlashCore config.
  for (const bool causal : {false, true}) {
    shapes.push_back(make_shape(16, 2048, 2048, 16, 16, 64, DType::kFloat16, causal));
  }
  // GQA prefill (Llama-style 32 query heads over 8 kv heads).
  shapes.push_back(make_shape(1, 8192, 8192, 32, 8, 128, DType::kBFloat16, true));
  return shapes;
}

// The model shapes of bench/llm_shapes.txt (bf16), the same list compare.py's llm grid reads
// (the generated rows name each shape in a comment).
struct ModelShape {
  int batch, seqlen_q, seqlen_k, heads_q, heads_kv, head_dim, causal;
};
constexpr ModelShape kLlmShapes[] = {
#include "llm_shapes.inc"
};

std::vector<ProblemShape> llm_grid() {
  std::vector<ProblemShape> shapes;
  for (const ModelShape& s : kLlmShapes) {
    shapes.push_back(make_shape(s.batch, s.seqlen_q, s.seqlen_k, s.heads_q, s.heads_kv,
                                s.head_dim, DType::kBFloat16, s.causal != 0));
  }
  return shapes;
}

std::vector<ProblemShape> shapes_from_options(const BenchOptions& options) {
  if (options.grid.empty() && options.shape_given) {
    return {make_shape(options.batch, options.seqlen_q, options.seqlen_k, options.heads_q,
                       options.heads_kv, options.head_dim,
                       options.dtype.value_or(DType::kFloat16), options.causal)};
  }
  std::vector<ProblemShape> shapes;
  if (options.grid == "small") {
    shapes = small_grid();
  } else if (options.grid == "standard") {
    shapes = standard_grid();
  } else if (options.grid == "llm") {
    shapes = llm_grid();
  } else {
    // The default is one config in two masks: --dtype chooses its dtype rather than filtering
    // a grid that holds fp16 only (which left nothing to run for fp32 or bf16).
    shapes = default_grid(options.dtype.value_or(DType::kFloat16));
  }
  const size_t grid_size = shapes.size();
  // On a grid, --dtype and --causal are filters.
  shapes.erase(std::remove_if(shapes.begin(), shapes.end(),
                              [&](const ProblemShape& s) {
                                return (options.dtype && s.dtype != *options.dtype) ||
                                       (options.causal && !s.causal);
                              }),
               shapes.end());
  if (shapes.empty()) {
    throw UsageError(filter_description(options) + " leaves none of the " +
                     std::to_string(grid_size) + " configs of --grid " +
                     (options.grid.empty() ? "default" : options.grid) +
                     " (the grids hold fp16 and bf16 configs)");
  }
  return shapes;
}

}  // namespace flashcore::bench
