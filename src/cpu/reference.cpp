#include "cpu/reference.h"

#include <cmath>
#include <limits>

#include "cpu/element_io.h"
#include "cpu/parallel.h"

namespace flashcore::detail {
namespace {

// One (batch, kv head)'s keys and values as doubles, dequantized (fp8: times their descale, exact
// in double), so every query row reuses the conversion. The fp8 baseline also needs V as stored
// (its descale is applied to the accumulated output, as an FP8 kernel does).
struct KeyValueBlock {
  std::vector<double> k, v;  // [seqlen_k][head_dim]
  std::vector<float> v_stored;  // fp8 only: float(v) before the descale
  float v_descale = 1.0f;
};

KeyValueBlock load_kv(const AttentionParams& p, int b, int kv_head) {
  const int seqlen_k = p.seqlen_k_of(b), d = p.head_dim;
  const bool fp8 = p.dtype == DType::kFloat8E4M3;
  const double k_descale = p.k_descale_of(b, kv_head);
  KeyValueBlock block;
  block.v_descale = p.v_descale_of(b, kv_head);
  block.k.resize(static_cast<size_t>(seqlen_k) * d);
  block.v.resize(static_cast<size_t>(seqlen_k) * d);
  if (fp8) block.v_stored.resize(block.v.size());
  for (int j = 0; j < seqlen_k; ++j) {
    for (int c = 0; c < d; ++c) {
      const size_t i = size_t(j) * d + c;
      const float v = load_element(p.dtype, p.v, p.v_offset(b, j, kv_head) + c);
      block.k[i] = load_element(p.dtype, p.k, p.k_offset(b, j, kv_head) + c) * k_descale;
      block.v[i] = double(v) * block.v_descale;
      if (fp8) block.v_stored[i] = v;
    }
  }
  return block;
}

// Keys j < visible_keys are visible to `row`.
int visible_keys(const AttentionParams& p, int b, int row) {
  if (!p.causal) return p.seqlen_k_of(b);
  int limit = row + p.causal_offset(b) + 1;
  return limit < 0 ? 0 : (limit > p.seqlen_k_of(b) ? p.seqlen_k_of(b) : limit);
}

void row_float64(const AttentionParams& p, const KeyValueBlock& kv, const std::vector<double>& q,
                 int keys, double* out, double* lse) {
  const int d = p.head_dim;
  std::vector<double> scores(keys);
  double max_score = -std::numeric_limits<double>::infinity();
  for (int j = 0; j < keys; ++j) {
    double dot = 0;
    for (int c = 0; c < d; ++c) dot += q[c] * kv.k[size_t(j) * d + c];
    scores[j] = dot * double(p.softmax_scale);
    max_score = std::max(max_score, scores[j]);
  }
  double sum = 0;
  for (int j = 0; j < keys; ++j) sum += (scores[j] = std::exp(scores[j] - max_score));
  for (int c = 0; c < d; ++c) out[c] = 0;
  for (int j = 0; j < keys; ++j) {
    for (int c = 0; c < d; ++c) out[c] += scores[j] * kv.v[size_t(j) * d + c];
  }
  for (int c = 0; c < d; ++c) out[c] /= sum;
  *lse = max_score + std::log(sum);
}

// The scaled scores of `keys` keys in float32, as a tensor-core GEMM with fp32 accumulation gives
// them; returns their max.
float float32_scores(const AttentionParams& p, const KeyValueBlock& kv,
                     const std::vector<double>& q, int keys, std::vector<float>& scores) {
  const int d = p.head_dim;
  scores.resize(keys);
  float max_score = -std::numeric_limits<float>::infinity();
  for (int j = 0; j < keys; ++j) {
    float dot = 0;
    for (int c = 0; c < d; ++c) dot += float(q[c]) * float(kv.k[size_t(j) * d + c]);
    scores[j] = dot * p.softmax_scale;
    max_score = std::max(max_score, scores[j]);
  }
  return max_score;
}

void row_baseline(const AttentionParams& p, const KeyValueBlock& kv, const std::vector<double>& q,
                  int keys, double* out, double* lse) {
  const int d = p.head_dim;
  std::vector<float> scores;
  const float max_score = float32_scores(p, kv, q, keys, scores);
  float sum = 0;
  for (int j = 0; j < keys; ++j) sum += (scores[j] = std::exp(scores[j] - max_score));
  std::vector<float> accumulator(d, 0.0f);
  for (int j = 0; j < keys; ++j) {
    float probability = round_to_dtype(p.dtype, scores[j] / sum);
    for (int c = 0; c < d; ++c) accumulator[c] += probability * float(kv.v[size_t(j) * d + c]);
  }
  for (int c = 0; c < d; ++c) out[c] = round_to_dtype(p.output_dtype(), accumulator[c]);
  *lse = double(max_score + std::log(sum));
}

// What an FP8 kernel must do at least: scores, max and sum in float32 on the dequantized q and k
// (float(q) * q_descale rounded to float), P = exp(s - max) unnormalized in [0, 1] and rounded to
// e4m3 for the P V product over V as stored, then out = (sum_j P_j v_j) * v_descale / l rounded
// to the output dtype. l sums the unrounded float32 P: the kernel keeps P in fp32 registers for
// the row sum and converts a copy to e4m3 for the GEMM.
void row_baseline_fp8(const AttentionParams& p, const KeyValueBlock& kv,
                      const std::vector<double>& q, int keys, double* out, double* lse) {
  const int d = p.head_dim;
  std::vector<float> scores;
  const float max_score = float32_scores(p, kv, q, keys, scores);
  float sum = 0;
  std::vector<float> accumulator(d, 0.0f);
  for (int j = 0; j < keys; ++j) {
    const float probability = std::exp(scores[j] - max_score);
    sum += probability;
    const float rounded = round_to_dtype(DType::kFloat8E4M3, probability);
    for (int c = 0; c < d; ++c) accumulator[c] += rounded * kv.v_stored[size_t(j) * d + c];
  }
  for (int c = 0; c < d; ++c) {
    out[c] = round_to_dtype(p.output_dtype(), accumulator[c] * kv.v_descale / sum);
  }
  *lse = double(max_score + std::log(sum));
}

}  // namespace

ReferenceResult reference_attention(const AttentionParams& p, const std::vector<int>& rows_in,
                                    ReferenceMode mode) {
  std::vector<int> rows = rows_in;
  if (rows.empty()) {
    for (int r = 0; r < p.seqlen_q; ++r) rows.push_back(r);
  }
  const int num_rows = static_cast<int>(rows.size()), d = p.head_dim;
  ReferenceResult result;
  result.rows = num_rows;
  result.out.assign(size_t(p.batch) * num_rows * p.heads_q * d, 0.0);
  result.lse.assign(size_t(p.batch) * p.heads_q * num_rows,
                    -std::numeric_limits<double>::infinity());
  if (p.batch == 0 || p.heads_q == 0 || num_rows == 0) return result;

  parallel_for(int64_t(p.batch) * p.heads_q, [&](int64_t item) {
    const int b = static_cast<int>(item / p.heads_q), h = static_cast<int>(item % p.heads_q);
    KeyValueBlock kv = load_kv(p, b, p.kv_head_of(h));
    const double q_descale = p.q_descale_of(b, p.kv_head_of(h));
    std::vector<double> q(d);
    for (int r = 0; r < num_rows; ++r) {
      const int row = rows[r];
      if (row >= p.seqlen_q_of(b)) continue;  // a shorter sequence of a packed batch
      const int keys = visible_keys(p, b, row);
      if (keys == 0) continue;  // out stays 0, lse stays -inf
      for (int c = 0; c < d; ++c) {
        q[c] = load_element(p.dtype, p.q, p.q_offset(b, row, h) + c) * q_descale;
      }
      double* out = &result.out[((size_t(b) * num_rows + r) * p.heads_q + h) * d];
      double* lse = &result.lse[(size_t(b) * p.heads_q + h) * num_rows + r];
      if (mode == ReferenceMode::kFloat64) {
        row_float64(p, kv, q, keys, out, lse);
      } else if (p.dtype == DType::kFloat8E4M3) {
        row_baseline_fp8(p, kv, q, keys, out, lse);
      } else {
        row_baseline(p, kv, q, keys, out, lse);
      }
    }
  });
  return result;
}

void run_reference_backend(const AttentionParams& p) {
  ReferenceResult result = reference_attention(p, {}, ReferenceMode::kFloat64);
  const int d = p.head_dim;
  for (int b = 0; b < p.batch; ++b) {
    for (int row = 0; row < p.seqlen_q_of(b); ++row) {
      for (int h = 0; h < p.heads_q; ++h) {
        const double* out = &result.out[((size_t(b) * p.seqlen_q + row) * p.heads_q + h) * d];
        for (int c = 0; c < d; ++c) {
          store_element(p.output_dtype(), p.out, p.o_offset(b, row, h) + c, float(out[c]));
        }
        if (p.lse != nullptr) {
          p.lse[p.lse_offset(b, h, row)] =
              float(result.lse[(size_t(b) * p.heads_q + h) * p.seqlen_q + row]);
        }
      }
    }
  }
}

}  // namespace flashcore::detail
