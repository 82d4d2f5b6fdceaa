#include "testing/accuracy.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <set>
#include <sstream>

#include "cpu/element_io.h"
#include "cpu/fp8_convert.h"
#include "cpu/reference.h"

namespace flashcore::testing {
namespace {

// Tile sizes the kernels use (64 and 128 rows); rows around their multiples catch tail bugs.
constexpr int kTileRows = 64;
// How many tile boundaries at each end of the sequence get their neighbours checked.
constexpr int kBoundaryTilesEachEnd = 2;
constexpr double kBaselineErrorFactor = 2;  // BENCHMARKS.md rule: twice the baseline's error
constexpr double kOutAbsoluteSlack = 1e-5;  // BENCHMARKS.md rule
constexpr double kLseAbsoluteSlack = 1e-4;

detail::AttentionParams contiguous_params(const ProblemShape& s, const HostTensors& in) {
  detail::AttentionParams p;
  p.q = in.q.data();
  p.k = in.k.data();
  p.v = in.v.data();
  p.dtype = s.dtype;
  p.batch = s.batch, p.seqlen_q = s.seqlen_q, p.seqlen_k = s.seqlen_k;
  p.heads_q = s.heads_q, p.heads_kv = s.heads_kv, p.head_dim = s.head_dim;
  p.q_head_stride = s.head_dim;
  p.q_row_stride = int64_t(s.heads_q) * s.head_dim;
  p.q_batch_stride = p.q_row_stride * s.seqlen_q;
  p.k_head_stride = p.v_head_stride = s.head_dim;
  p.k_row_stride = p.v_row_stride = int64_t(s.heads_kv) * s.head_dim;
  p.k_batch_stride = p.v_batch_stride = p.k_row_stride * s.seqlen_k;
  p.set_softmax_scale(s.scale());
  p.causal = s.causal;
  p.out_dtype = s.output_dtype();
  // [batch, heads_kv] contiguous descales (fp8 only; empty: absent, i.e. 1).
  auto descales = [&](const std::vector<float>& values, const float*& data, int64_t& batch_stride,
                      int64_t& head_stride) {
    if (values.empty()) return;
    data = values.data();
    batch_stride = s.heads_kv;
    head_stride = 1;
  };
  descales(in.q_descale, p.q_descale, p.q_descale_batch_stride, p.q_descale_head_stride);
  descales(in.k_descale, p.k_descale, p.k_descale_batch_stride, p.k_descale_head_stride);
  descales(in.v_descale, p.v_descale, p.v_descale_batch_stride, p.v_descale_head_stride);
  return p;
}

std::string format_double(double value) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.9g", value);
  return text;
}

// Tracks the largest error and where it happened.
struct WorstTracker {
  double max_err = 0;
  std::string where;
  template <typename Describe>
  void add(double err, double got, double want, const Describe& describe) {
    if (err > max_err || (std::isnan(err) && !std::isnan(max_err))) {
      max_err = std::isnan(err) ? std::numeric_limits<double>::infinity() : err;
      where = describe() + ": got " + format_double(got) + " want " + format_double(want);
    }
  }
};

double element_error(double got, double want, bool* nonfinite) {
  if (std::isinf(want)) return (got == want) ? 0.0 : std::numeric_limits<double>::infinity();
  if (!std::isfinite(got)) {
    *nonfinite = true;
    return std::numeric_limits<double>::infinity();
  }
  return std::fabs(got - want);
}

}  // namespace

std::string ProblemShape::describe() const {
  std::ostringstream text;
  text << "b" << batch << " sq" << seqlen_q << " sk" << seqlen_k << " hq" << heads_q << " hkv"
       << heads_kv << " d" << head_dim << " " << to_string(dtype);
  if (output_dtype() != dtype) text << "->" << to_string(output_dtype());
  text << (causal ? " causal" : "");
  if (softmax_scale) text << " scale" << *softmax_scale;
  return text.str();
}

DType ProblemShape::output_dtype() const {
  if (dtype != DType::kFloat8E4M3) return dtype;
  return out_dtype.value_or(DType::kBFloat16);
}

float ProblemShape::scale() const {
  return softmax_scale ? *softmax_scale : float(1.0 / std::sqrt(double(head_dim)));
}

double ProblemShape::flops() const {
  const double per_pair = 4.0 * batch * heads_q * head_dim;
  const double sq = seqlen_q, sk = seqlen_k;
  if (!causal) return per_pair * sq * sk;
  // BENCHMARKS.md halves sq * sk under a causal mask; kept exactly for sq == sk, so figures stay
  // comparable with published ones. With sq != sk (chunked prefill, decode steps) halving is
  // wrong by up to 2x: count the pairs the bottom-right mask leaves visible (query i sees keys
  // j <= i + sk - sq), as bench/compare_grids.py does.
  if (seqlen_q == seqlen_k) return per_pair * sq * sk / 2;
  if (sq <= sk) return per_pair * sq * (2 * sk - sq + 1) / 2;
  return per_pair * sk * (sk + 1) / 2;
}

HostTensors make_random_inputs(const ProblemShape& s, uint64_t seed, float stddev) {
  std::mt19937_64 generator(seed);
  std::normal_distribution<float> normal(0.0f, stddev);
  const size_t q_count = size_t(s.batch) * s.seqlen_q * s.heads_q * s.head_dim;
  const size_t kv_count = size_t(s.batch) * s.seqlen_k * s.heads_kv * s.head_dim;
  HostTensors inputs;
  if (s.dtype == DType::kFloat8E4M3) {
    auto draw = [&](size_t count) {
      std::vector<float> values(count);
      for (float& x : values) x = normal(generator);
      return values;
    };
    quantize_fp8_e4m3(draw(q_count), s.batch, s.seqlen_q, s.heads_q, s.heads_kv, s.head_dim,
                      inputs.q, inputs.q_descale);
    quantize_fp8_e4m3(draw(kv_count), s.batch, s.seqlen_k, s.heads_kv, s.heads_kv, s.head_dim,
                      inputs.k, inputs.k_descale);
    quantize_fp8_e4m3(draw(kv_count), s.batch, s.seqlen_k, s.heads_kv, s.heads_kv, s.head_dim,
                      inputs.v, inputs.v_descale);
    return inputs;
  }
  const size_t element_bytes = dtype_size(s.dtype);
  auto fill = [&](std::vector<uint8_t>& bytes, size_t count) {
    bytes.resize(count * element_bytes);
    for (size_t i = 0; i < count; ++i) {
      from_float(s.dtype, normal(generator), &bytes[i * element_bytes]);
    }
  };
  fill(inputs.q, q_count);
  fill(inputs.k, kv_count);
  fill(inputs.v, kv_count);
  return inputs;
}

void quantize_fp8_e4m3(const std::vector<float>& values, int batch, int seqlen, int heads,
                       int heads_kv, int head_dim, std::vector<uint8_t>& codes,
                       std::vector<float>& descales) {
  const int group = heads_kv > 0 ? heads / heads_kv : 0;
  codes.assign(values.size(), 0);
  descales.assign(size_t(batch) * heads_kv, 1.0f);
  auto index = [&](int b, int row, int h) {
    return ((size_t(b) * seqlen + row) * heads + h) * head_dim;
  };
  for (int b = 0; b < batch; ++b) {
    for (int g = 0; g < heads_kv; ++g) {
      // Every element of the (b, kv head) block: the rows of its query (or its own) heads.
      auto for_block = [&](auto&& visit) {
        for (int row = 0; row < seqlen; ++row)
          for (int h = g * group; h < (g + 1) * group; ++h)
            for (int c = 0; c < head_dim; ++c) visit(index(b, row, h) + c);
      };
      float amax = 0;
      for_block([&](size_t i) { amax = std::max(amax, std::fabs(values[i])); });
      // x / descale is at most 448 (or a rounding above it that still rounds to 448).
      const float descale = amax > 0 ? amax / detail::kFp8E4M3Max : 1.0f;
      descales[size_t(b) * heads_kv + g] = descale;
      for_block([&](size_t i) { codes[i] = detail::float_to_fp8_e4m3(values[i] / descale); });
    }
  }
}

std::vector<int> sample_rows(int seqlen_q, int max_rows) {
  std::vector<int> all;
  if (seqlen_q <= max_rows) {
    for (int r = 0; r < seqlen_q; ++r) all.push_back(r);
    return all;
  }
  std::set<int> chosen;
  auto add = [&](int row) {
    if (row >= 0 && row < seqlen_q && int(chosen.size()) < max_rows) chosen.insert(row);
  };
  add(0);
  add(seqlen_q - 1);
  const int last_boundary = (seqlen_q - 1) / kTileRows * kTileRows;
  for (int t = 1; t <= kBoundaryTilesEachEnd; ++t) {
    for (int boundary : {t * kTileRows, last_boundary - (t - 1) * kTileRows}) {
      add(boundary - 1);
      add(boundary);
      add(boundary + 1);
    }
  }
  // Evenly spread the rest.
  for (int i = 0; int(chosen.size()) < max_rows && i < max_rows * 4; ++i) {
    add(int((int64_t(i) * 2654435761u) % seqlen_q));  // multiplicative hash: a spread, no pattern
  }
  return {chosen.begin(), chosen.end()};
}

std::string AccuracyReport::summary() const {
  std::ostringstream text;
  text << (pass ? "PASS" : "FAIL") << " rows=" << rows_checked << " out err "
       << format_double(max_err_out) << " (baseline " << format_double(baseline_err_out)
       << ", tol " << format_double(tol_out) << ")";
  if (tol_lse > 0) {
    text << " lse err " << format_double(max_err_lse) << " (baseline "
         << format_double(baseline_err_lse) << ", tol " << format_double(tol_lse) << ")";
  }
  if (nonfinite) text << " NONFINITE";
  if (!worst.empty()) text << " worst " << worst;
  return text.str();
}

AccuracyReport check_accuracy(const ProblemShape& s, const HostTensors& inputs,
                              const void* out_host, const float* lse_host,
                              const std::vector<int>& rows) {
  detail::AttentionParams p = contiguous_params(s, inputs);
  AccuracyReport report;
  report.rows_checked = int(rows.size());
  if (rows.empty() || s.batch == 0 || s.heads_q == 0) {
    report.pass = true;
    return report;
  }
  auto ref = detail::reference_attention(p, rows, detail::ReferenceMode::kFloat64);
  auto base = detail::reference_attention(p, rows, detail::ReferenceMode::kBaseline);
  const int d = s.head_dim, num_rows = int(rows.size());
  const auto* out_bytes = static_cast<const uint8_t*>(out_host);
  const DType out_dtype = s.output_dtype();
  const size_t element_bytes = dtype_size(out_dtype);

  WorstTracker out_worst, lse_worst;
  double baseline_out = 0, baseline_lse = 0;
  for (int b = 0; b < s.batch; ++b) {
    for (int r = 0; r < num_rows; ++r) {
      for (int h = 0; h < s.heads_q; ++h) {
        const size_t ref_index = ((size_t(b) * num_rows + r) * s.heads_q + h) * d;
        const size_t out_index = ((size_t(b) * s.seqlen_q + rows[r]) * s.heads_q + h) * d;
        for (int c = 0; c < d; ++c) {
          const double want = ref.out[ref_index + c];
          const double got = to_float(out_dtype, out_bytes + (out_index + c) * element_bytes);
          bool unused = false;
          baseline_out = std::max(baseline_out, element_error(base.out[ref_index + c], want, &unused));
          out_worst.add(element_error(got, want, &report.nonfinite), got, want, [&] {
            return "out b=" + std::to_string(b) + " row=" + std::to_string(rows[r]) +
                   " h=" + std::to_string(h) + " d=" + std::to_string(c);
          });
        }
        if (lse_host == nullptr) continue;
        const size_t ref_lse = (size_t(b) * s.heads_q + h) * num_rows + r;
        const double want = ref.lse[ref_lse];
        const double got = lse_host[(size_t(b) * s.heads_q + h) * s.seqlen_q + rows[r]];
        bool unused = false;
        baseline_lse = std::max(baseline_lse, element_error(base.lse[ref_lse], want, &unused));
        lse_worst.add(element_error(got, want, &report.nonfinite), got, want, [&] {
          return "lse b=" + std::to_string(b) + " h=" + std::to_string(h) +
                 " row=" + std::to_string(rows[r]);
        });
      }
    }
  }
  report.max_err_out = out_worst.max_err;
  report.baseline_err_out = baseline_out;
  const bool fp8 = s.dtype == DType::kFloat8E4M3;
  report.tol_out = out_tolerance(baseline_out, fp8);
  bool pass = !report.nonfinite && report.max_err_out <= report.tol_out;
  if (lse_host != nullptr) {
    report.max_err_lse = lse_worst.max_err;
    report.baseline_err_lse = baseline_lse;
    report.tol_lse = lse_tolerance(baseline_lse, fp8);
    pass = pass && report.max_err_lse <= report.tol_lse;
  }
  report.pass = pass;
  // Name the element that decides the verdict: the worse of out and lse relative to tolerance.
  const bool lse_is_worse = lse_host != nullptr &&
                            report.max_err_lse / report.tol_lse > report.max_err_out / report.tol_out;
  report.worst = lse_is_worse ? lse_worst.where : out_worst.where;
  return report;
}

double out_tolerance(double baseline_err, bool fp8) {
  return kBaselineErrorFactor * baseline_err + (fp8 ? kFp8OutAbsoluteSlack : kOutAbsoluteSlack);
}

double lse_tolerance(double baseline_err, bool fp8) {
  return kBaselineErrorFactor * baseline_err + (fp8 ? kFp8LseAbsoluteSlack : kLseAbsoluteSlack);
}

float to_float(DType dtype, const uint8_t* element) {
  return detail::load_element(dtype, element, 0);
}

void from_float(DType dtype, float value, uint8_t* element) {
  detail::store_element(dtype, element, 0, value);
}

}  // namespace flashcore::testing
