// Standalone check of the sm80 forward kernel: runs run_sm80_forward on shapes with tails,
// causal in both alignments, GQA, strided layouts and rows without visible keys; compares with a
// CPU float64 reference on sampled rows; then times the standard grid (seqlen 1k..16k, d64 and
// d128, both dtypes, causal and not; d256 at 4k) and prints TFLOPS.
//
// Build (repository root):
//   nvcc -std=c++17 -O3 --expt-relaxed-constexpr -gencode=arch=compute_90a,code=sm_90a \
//        -gencode=arch=compute_80,code=sm_80 -I include -I src dev/sm80/check_sm80.cu -o check_sm80
// Run: ./check_sm80 [--no-timing | --only-timing]   (exit status 1 if any check fails)
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "cpu/half_convert.h"
#include "cuda/sm80/launch.cuh"

using flashcore::DType;
using flashcore::detail::AttentionParams;

#define CHECK_CUDA(expr)                                                                   \
  do {                                                                                     \
    cudaError_t e_ = (expr);                                                               \
    if (e_ != cudaSuccess) {                                                               \
      std::printf("CUDA error %s at %s:%d\n", cudaGetErrorString(e_), __FILE__, __LINE__); \
      std::exit(2);                                                                        \
    }                                                                                      \
  } while (0)

enum class Layout { kBSHD, kBHSD, kPackedQKV };

struct Case {
  DType dtype;
  int head_dim;
  bool causal;
  int batch, seqlen_q, seqlen_k, heads_q, heads_kv;
  Layout layout = Layout::kBSHD;
  float input_std = 1.0f;
};

static float to_float(uint16_t bits, DType dtype) {
  return dtype == DType::kFloat16 ? flashcore::detail::fp16_to_float(bits)
                                  : flashcore::detail::bf16_to_float(bits);
}
static uint16_t from_float(float value, DType dtype) {
  return dtype == DType::kFloat16 ? flashcore::detail::float_to_fp16(value)
                                  : flashcore::detail::float_to_bf16(value);
}

template <DType kDType, int kHeadDim, bool kCausal>
static void launch(const AttentionParams& params) {
  flashcore::detail::run_sm80_forward<kDType, kHeadDim, kCausal>(params);
}

static void dispatch(const AttentionParams& p, int head_dim, bool causal) {
#define FC_CASE(DT, HD)                                                 \
  if (p.dtype == DT && head_dim == HD) {                                \
    return causal ? launch<DT, HD, true>(p) : launch<DT, HD, false>(p); \
  }
  FC_CASE(DType::kFloat16, 64)
  FC_CASE(DType::kFloat16, 96)
  FC_CASE(DType::kFloat16, 128)
  FC_CASE(DType::kFloat16, 256)
  FC_CASE(DType::kBFloat16, 64)
  FC_CASE(DType::kBFloat16, 96)
  FC_CASE(DType::kBFloat16, 128)
  FC_CASE(DType::kBFloat16, 256)
#undef FC_CASE
  std::printf("no variant for head_dim %d\n", head_dim);
  std::exit(2);
}

// Device buffers and params for one case; q, k, v share one allocation for the packed layout.
struct Problem {
  Case c;
  AttentionParams params;
  size_t q_elems = 0, kv_elems = 0, o_elems = 0;
  std::vector<uint16_t> q, k, v;  // host copies in the device layout
  // Where q, k, v start in their host vectors: 0, except for the packed layout, where all three
  // are one [b, s, 3, h, d] buffer and k, v start h * d and 2 h * d elements in.
  size_t q_base = 0, k_base = 0, v_base = 0;
  uint16_t *d_q = nullptr, *d_k = nullptr, *d_v = nullptr, *d_o = nullptr, *d_qkv = nullptr;
  float* d_lse = nullptr;
};

static void set_strides(const Case& c, AttentionParams& p) {
  const int64_t d = c.head_dim;
  if (c.layout == Layout::kBSHD) {
    p.q_row_stride = c.heads_q * d, p.q_head_stride = d,
    p.q_batch_stride = c.seqlen_q * c.heads_q * d;
    p.k_row_stride = c.heads_kv * d, p.k_head_stride = d,
    p.k_batch_stride = c.seqlen_k * c.heads_kv * d;
  } else if (c.layout == Layout::kBHSD) {
    p.q_row_stride = d, p.q_head_stride = c.seqlen_q * d,
    p.q_batch_stride = c.seqlen_q * c.heads_q * d;
    p.k_row_stride = d, p.k_head_stride = c.seqlen_k * d,
    p.k_batch_stride = c.seqlen_k * c.heads_kv * d;
  } else {  // [b, s, 3, h, d]; needs seqlen_q == seqlen_k and heads_q == heads_kv
    p.q_row_stride = 3 * c.heads_q * d, p.q_head_stride = d;
    p.q_batch_stride = c.seqlen_q * 3 * c.heads_q * d;
    p.k_row_stride = p.q_row_stride, p.k_head_stride = d, p.k_batch_stride = p.q_batch_stride;
  }
  p.v_row_stride = p.k_row_stride, p.v_head_stride = p.k_head_stride,
  p.v_batch_stride = p.k_batch_stride;
  p.o_row_stride = c.heads_q * d, p.o_head_stride = d,
  p.o_batch_stride = c.seqlen_q * c.heads_q * d;
  p.lse_head_stride = c.seqlen_q, p.lse_batch_stride = int64_t(c.heads_q) * c.seqlen_q;
}

static Problem make_problem(const Case& c, uint64_t seed) {
  Problem pr;
  pr.c = c;
  AttentionParams& p = pr.params;
  p.dtype = c.dtype, p.batch = c.batch, p.seqlen_q = c.seqlen_q, p.seqlen_k = c.seqlen_k;
  p.heads_q = c.heads_q, p.heads_kv = c.heads_kv, p.head_dim = c.head_dim, p.causal = c.causal;
  p.set_softmax_scale(1.0f / std::sqrt(float(c.head_dim)));
  set_strides(c, p);
  pr.q_elems = size_t(c.batch) * c.seqlen_q * c.heads_q * c.head_dim;
  pr.kv_elems = size_t(c.batch) * c.seqlen_k * c.heads_kv * c.head_dim;
  pr.o_elems = pr.q_elems;
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, c.input_std);
  if (c.layout == Layout::kPackedQKV) {
    std::vector<uint16_t> qkv(3 * pr.q_elems);
    for (auto& x : qkv) x = from_float(normal(rng), c.dtype);
    CHECK_CUDA(cudaMalloc(&pr.d_qkv, qkv.size() * 2));
    CHECK_CUDA(cudaMemcpy(pr.d_qkv, qkv.data(), qkv.size() * 2, cudaMemcpyHostToDevice));
    pr.q = pr.k = pr.v = qkv;
    pr.k_base = size_t(c.heads_q) * c.head_dim, pr.v_base = 2 * pr.k_base;
    pr.d_q = pr.d_qkv, pr.d_k = pr.d_qkv + pr.k_base, pr.d_v = pr.d_qkv + pr.v_base;
  } else {
    for (auto* vec : {&pr.q, &pr.k, &pr.v}) {
      vec->resize(vec == &pr.q ? pr.q_elems : pr.kv_elems);
      for (auto& x : *vec) x = from_float(normal(rng), c.dtype);
    }
    CHECK_CUDA(cudaMalloc(&pr.d_q, pr.q_elems * 2));
    CHECK_CUDA(cudaMalloc(&pr.d_k, pr.kv_elems * 2));
    CHECK_CUDA(cudaMalloc(&pr.d_v, pr.kv_elems * 2));
    CHECK_CUDA(cudaMemcpy(pr.d_q, pr.q.data(), pr.q_elems * 2, cudaMemcpyHostToDevice));
    CHECK_CUDA(cudaMemcpy(pr.d_k, pr.k.data(), pr.kv_elems * 2, cudaMemcpyHostToDevice));
    CHECK_CUDA(cudaMemcpy(pr.d_v, pr.v.data(), pr.kv_elems * 2, cudaMemcpyHostToDevice));
  }
  CHECK_CUDA(cudaMalloc(&pr.d_o, pr.o_elems * 2));
  CHECK_CUDA(cudaMalloc(&pr.d_lse, size_t(c.batch) * c.heads_q * c.seqlen_q * 4));
  CHECK_CUDA(cudaMemset(pr.d_o, 0xff, pr.o_elems * 2));  // NaN poison: unwritten elements fail
  CHECK_CUDA(cudaMemset(pr.d_lse, 0xff, size_t(c.batch) * c.heads_q * c.seqlen_q * 4));
  p.q = pr.d_q, p.k = pr.d_k, p.v = pr.d_v, p.out = pr.d_o, p.lse = pr.d_lse;
  return pr;
}

static void free_problem(Problem& pr) {
  if (pr.d_qkv) {
    cudaFree(pr.d_qkv);
  } else {
    cudaFree(pr.d_q), cudaFree(pr.d_k), cudaFree(pr.d_v);
  }
  cudaFree(pr.d_o), cudaFree(pr.d_lse);
}

// Compares sampled rows with a float64 reference. Returns true when within tolerance.
static bool check(const Problem& pr) {
  const Case& c = pr.c;
  const AttentionParams& p = pr.params;
  std::vector<uint16_t> out(pr.o_elems);
  std::vector<float> lse(size_t(c.batch) * c.heads_q * c.seqlen_q);
  CHECK_CUDA(cudaMemcpy(out.data(), pr.d_o, out.size() * 2, cudaMemcpyDeviceToHost));
  CHECK_CUDA(cudaMemcpy(lse.data(), pr.d_lse, lse.size() * 4, cudaMemcpyDeviceToHost));
  const int row_step = std::max(1, c.seqlen_q / 97);  // sample ~100 rows per (batch, head)
  double max_err = 0.0, max_lse_err = 0.0;
  bool finite = true;
  std::vector<double> scores(c.seqlen_k), acc(c.head_dim);
  for (int b = 0; b < c.batch; ++b) {
    for (int h = 0; h < c.heads_q; ++h) {
      const int hk = p.kv_head_of(h);
      for (int i = 0; i < c.seqlen_q; ++i) {
        // Every row of the first and last query blocks (tails, diagonal), a sample in between.
        constexpr int kEdgeRows = 130;
        if (i >= kEdgeRows && i < c.seqlen_q - kEdgeRows && i % row_step != 0) continue;
        const int limit =
            c.causal ? std::min(c.seqlen_k, i + c.seqlen_k - c.seqlen_q + 1) : c.seqlen_k;
        double mx = -INFINITY;
        for (int j = 0; j < limit; ++j) {
          double dot = 0.0;
          for (int d = 0; d < c.head_dim; ++d) {
            dot += double(to_float(pr.q[pr.q_base + p.q_offset(b, i, h) + d], c.dtype)) *
                   to_float(pr.k[pr.k_base + p.k_offset(b, j, hk) + d], c.dtype);
          }
          scores[j] = dot * p.softmax_scale;
          mx = std::max(mx, scores[j]);
        }
        double sum = 0.0;
        std::fill(acc.begin(), acc.end(), 0.0);
        for (int j = 0; j < limit; ++j) {
          const double w = std::exp(scores[j] - mx);
          sum += w;
          for (int d = 0; d < c.head_dim; ++d)
            acc[d] += w * to_float(pr.v[pr.v_base + p.v_offset(b, j, hk) + d], c.dtype);
        }
        for (int d = 0; d < c.head_dim; ++d) {
          const double ref = limit > 0 ? acc[d] / sum : 0.0;
          const double got = to_float(out[p.o_offset(b, i, h) + d], c.dtype);
          if (!std::isfinite(got)) finite = false;
          max_err = std::max(max_err, std::abs(got - ref));
        }
        const double ref_lse = limit > 0 ? mx + std::log(sum) : -INFINITY;
        const double got_lse = lse[p.lse_offset(b, h, i)];
        if (std::isinf(ref_lse)) {
          if (!(std::isinf(got_lse) && got_lse < 0)) finite = false;
        } else {
          if (!std::isfinite(got_lse)) finite = false;
          max_lse_err = std::max(max_lse_err, std::abs(got_lse - ref_lse));
        }
      }
    }
  }
  // Loose bounds: a few ulp of the dtype at the outputs' magnitude, which is that of V (input_std);
  // the lse scales with the scores, i.e. input_std^2. The test suite applies the real rule.
  const double tol = (c.dtype == DType::kFloat16 ? 4e-3 : 3e-2) * c.input_std;
  const bool ok = finite && max_err <= tol && max_lse_err <= 1e-3 * c.input_std * c.input_std;
  std::printf(
      "%s %s d%-3d %-6s b%d sq%-5d sk%-5d hq%d hkv%d %s std%.0f: max|err| %.2e lse %.2e %s\n",
      ok ? "PASS" : "FAIL", c.dtype == DType::kFloat16 ? "fp16" : "bf16", c.head_dim,
      c.causal ? "causal" : "full", c.batch, c.seqlen_q, c.seqlen_k, c.heads_q, c.heads_kv,
      c.layout == Layout::kBSHD   ? "bshd"
      : c.layout == Layout::kBHSD ? "bhsd"
                                  : "qkv",
      c.input_std, max_err, max_lse_err, finite ? "" : "(non-finite or wrong -inf)");
  return ok;
}

static void time_case(const Case& c) {
  Problem pr = make_problem(c, 7);
  constexpr int kWarmup = 3, kRuns = 30;
  for (int i = 0; i < kWarmup; ++i) dispatch(pr.params, c.head_dim, c.causal);
  cudaEvent_t start, stop;
  CHECK_CUDA(cudaEventCreate(&start));
  CHECK_CUDA(cudaEventCreate(&stop));
  std::vector<float> ms(kRuns);
  for (int i = 0; i < kRuns; ++i) {
    CHECK_CUDA(cudaEventRecord(start));
    dispatch(pr.params, c.head_dim, c.causal);
    CHECK_CUDA(cudaEventRecord(stop));
    CHECK_CUDA(cudaEventSynchronize(stop));
    CHECK_CUDA(cudaEventElapsedTime(&ms[i], start, stop));
  }
  std::sort(ms.begin(), ms.end());
  const double flops = 4.0 * c.batch * c.heads_q * double(c.seqlen_q) * c.seqlen_k * c.head_dim *
                       (c.causal ? 0.5 : 1.0);
  std::printf("TIME %s d%d %-6s b%d h%d s%d: %.3f ms  %.1f TFLOPS\n",
              c.dtype == DType::kFloat16 ? "fp16" : "bf16", c.head_dim,
              c.causal ? "causal" : "full", c.batch, c.heads_q, c.seqlen_q, ms[kRuns / 2],
              flops / (ms[kRuns / 2] * 1e-3) / 1e12);
  free_problem(pr);
}

int main(int argc, char** argv) {
  bool run_checks = true, run_timing = true;
  for (int a = 1; a < argc; ++a) {
    const std::string arg = argv[a];
    if (arg == "--no-timing") {
      run_timing = false;
    } else if (arg == "--only-timing") {
      run_checks = false;
    } else {
      std::printf("unknown argument '%s': expected --no-timing or --only-timing\n", argv[a]);
      return 2;
    }
  }
  const DType f16 = DType::kFloat16, b16 = DType::kBFloat16;
  std::vector<Case> cases = {
      {f16, 128, false, 2, 17, 65, 8, 2},
      {f16, 128, true, 2, 65, 127, 8, 2},  // causal, seqlen_q < seqlen_k
      {f16, 128, true, 2, 127, 65, 8, 8},  // causal, rows without visible keys
      {b16, 64, false, 1, 1000, 1000, 4, 1},
      {b16, 64, true, 1, 1000, 4097, 4, 4},
      {f16, 64, true, 1, 4097, 1000, 2, 1},
      {f16, 96, false, 2, 63, 64, 4, 4},
      {b16, 96, true, 1, 129, 129, 8, 4},
      {f16, 256, false, 1, 65, 1, 2, 2},  // seqlen_k = 1
      {b16, 256, true, 2, 1, 127, 4, 1},  // seqlen_q = 1
      {f16, 128, false, 2, 300, 300, 4, 4, Layout::kBHSD},
      {b16, 128, true, 1, 257, 257, 4, 4, Layout::kPackedQKV},
      {f16, 64, false, 1, 511, 511, 2, 2, Layout::kBSHD, 30.0f},  // large magnitudes
      {b16, 128, true, 1, 4097, 4097, 2, 1},
  };
  int failures = 0;
  uint64_t seed = 1;
  for (const Case& c : cases) {
    if (!run_checks) break;
    Problem pr = make_problem(c, seed++);
    dispatch(pr.params, c.head_dim, c.causal);
    CHECK_CUDA(cudaDeviceSynchronize());
    failures += check(pr) ? 0 : 1;
    free_problem(pr);
  }
  // The standard grid: batch = 16384 / seqlen, heads = 2048 / head_dim (BENCHMARKS.md).
  constexpr int kTokens = 16384, kModelWidth = 2048;
  if (run_timing) {
    for (int hd : {64, 128}) {
      for (DType dt : {b16, f16}) {
        for (bool causal : {false, true}) {
          for (int seqlen : {1024, 2048, 4096, 8192, 16384}) {
            const int heads = kModelWidth / hd;
            time_case({dt, hd, causal, kTokens / seqlen, seqlen, seqlen, heads, heads});
          }
        }
      }
    }
    for (bool causal : {false, true}) time_case({b16, 256, causal, 4, 4096, 4096, 8, 8});
  }
  std::printf("%d failure(s)\n", failures);
  return failures == 0 ? 0 : 1;
}
