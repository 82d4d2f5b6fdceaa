// Host side of dev/sm90/check_sm90.cu: problem shapes, random inputs in BSHD or BHSD layout, and a
// float64 reference with the BENCHMARKS.md accuracy rule (baseline = the same math in the low
// precision: fp32 scores, fp32 softmax, P rounded to the dtype, output rounded to the dtype).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "common/params.h"

namespace flashcore::detail {

struct ProblemShape {
  DType dtype = DType::kBFloat16;
  int batch = 1, seqlen_q = 1, seqlen_k = 1, heads_q = 1, heads_kv = 1, head_dim = 128;
  bool causal = false;
  bool bhsd = false;        // BHSD strides (PyTorch SDPA's layout) instead of BSHD
  float input_std = 1.0f;   // 30 stresses the softmax
  std::string describe() const {
    char text[256];
    std::snprintf(text, sizeof(text), "%s b%d sq%d sk%d hq%d hkv%d d%d %s%s%s",
                  dtype == DType::kFloat16 ? "fp16" : "bf16", batch, seqlen_q, seqlen_k, heads_q,
                  heads_kv, head_dim, causal ? "causal" : "full", bhsd ? " bhsd" : "",
                  input_std != 1.0f ? " std30" : "");
    return text;
  }
};

inline uint16_t to_bits(float x, DType dtype) {
  if (dtype == DType::kFloat16) {
    __half h = __float2half_rn(x);
    return *reinterpret_cast<uint16_t*>(&h);
  }
  __nv_bfloat16 b = __float2bfloat16_rn(x);
  return *reinterpret_cast<uint16_t*>(&b);
}
inline float from_bits(uint16_t bits, DType dtype) {
  if (dtype == DType::kFloat16) return __half2float(*reinterpret_cast<__half*>(&bits));
  return __bfloat162float(*reinterpret_cast<__nv_bfloat16*>(&bits));
}
inline float round_to(float x, DType dtype) { return from_bits(to_bits(x, dtype), dtype); }

struct HostProblem {
  ProblemShape shape;
  std::vector<uint16_t> q, k, v;
  AttentionParams params;  // strides set, pointers not

  explicit HostProblem(const ProblemShape& s, bool fill = true) : shape(s) {
    const int b = s.batch, d = s.head_dim;
    q.resize(size_t(b) * s.seqlen_q * s.heads_q * d);
    k.resize(size_t(b) * s.seqlen_k * s.heads_kv * d);
    v.resize(k.size());
    if (fill) {
      std::mt19937 rng(1234u + s.seqlen_q * 7u + s.seqlen_k * 13u + d);
      std::normal_distribution<float> normal(0.0f, s.input_std);
      for (auto* t : {&q, &k, &v})
        for (auto& x : *t) x = to_bits(normal(rng), s.dtype);
    }
    AttentionParams& p = params;
    p.dtype = s.dtype;
    p.batch = b;
    p.seqlen_q = s.seqlen_q;
    p.seqlen_k = s.seqlen_k;
    p.heads_q = s.heads_q;
    p.heads_kv = s.heads_kv;
    p.head_dim = d;
    set_strides(s.seqlen_q, s.heads_q, p.q_batch_stride, p.q_row_stride, p.q_head_stride);
    set_strides(s.seqlen_k, s.heads_kv, p.k_batch_stride, p.k_row_stride, p.k_head_stride);
    set_strides(s.seqlen_k, s.heads_kv, p.v_batch_stride, p.v_row_stride, p.v_head_stride);
    set_strides(s.seqlen_q, s.heads_q, p.o_batch_stride, p.o_row_stride, p.o_head_stride);
    p.lse_batch_stride = int64_t(s.heads_q) * s.seqlen_q;
    p.lse_head_stride = s.seqlen_q;
    p.set_softmax_scale(1.0f / std::sqrt(float(d)));
    p.causal = s.causal;
  }
  size_t out_elements() const { return q.size(); }
  size_t lse_elements() const { return size_t(shape.batch) * shape.heads_q * shape.seqlen_q; }

 private:
  void set_strides(int seqlen, int heads, int64_t& batch_stride, int64_t& row_stride,
                   int64_t& head_stride) const {
    const int64_t d = shape.head_dim;
    batch_stride = int64_t(seqlen) * heads * d;
    if (shape.bhsd) {
      head_stride = int64_t(seqlen) * d;
      row_stride = d;
    } else {
      row_stride = int64_t(heads) * d;
      head_stride = d;
    }
  }
};

struct CheckResult {
  bool pass = true;
  std::string detail;
};

// Reference in float64 and the low-precision baseline, row by row; worst errors collected.
inline CheckResult compare_with_reference(const HostProblem& h, const std::vector<uint16_t>& out,
                                          const std::vector<float>& lse) {
  const AttentionParams& p = h.params;
  const DType dt = p.dtype;
  const int d = p.head_dim;
  const int work_items = p.batch * p.heads_q;
  struct Worst {
    double out_err = 0, base_err = 0, lse_err = 0, lse_base_err = 0;
    bool nan = false;
    std::string where;
  };
  std::vector<Worst> worst(work_items);
  auto work = [&](int item) {
    const int b = item / p.heads_q, hq = item % p.heads_q, hk = p.kv_head_of(hq);
    Worst& w = worst[item];
    std::vector<double> s(p.seqlen_k), ref(d), base(d);
    std::vector<float> s_low(p.seqlen_k);  // baseline scores: fp32 dot products, as a GPU computes
    for (int i = 0; i < p.seqlen_q; ++i) {
      double mx = -INFINITY;
      float mx_low = -INFINITY;
      for (int j = 0; j < p.seqlen_k; ++j) {
        const bool visible = !p.causal || j <= i + p.causal_offset(b);
        double acc = 0;
        float acc_low = 0;
        for (int c = 0; c < d; ++c) {
          const float qv = from_bits(h.q[p.q_offset(b, i, hq) + c], dt);
          const float kv = from_bits(h.k[p.k_offset(b, j, hk) + c], dt);
          acc += double(qv) * kv;
          acc_low += qv * kv;
        }
        s[j] = visible ? acc * p.softmax_scale : -INFINITY;
        s_low[j] = visible ? acc_low * p.softmax_scale : -INFINITY;
        mx = std::max(mx, s[j]);
        mx_low = std::max(mx_low, s_low[j]);
      }
      double ref_lse = -INFINITY, base_lse = -INFINITY;
      std::fill(ref.begin(), ref.end(), 0.0);
      std::fill(base.begin(), base.end(), 0.0);
      if (mx != -INFINITY) {
        double sum = 0;
        float base_sum = 0;
        for (int j = 0; j < p.seqlen_k; ++j) {
          if (s[j] == -INFINITY) continue;
          const double e = std::exp(s[j] - mx);
          const float e_low = std::exp(s_low[j] - mx_low);
          sum += e;
          base_sum += e_low;
          const float e_rounded = round_to(e_low, dt);
          for (int c = 0; c < d; ++c) {
            const float vv = from_bits(h.v[p.v_offset(b, j, hk) + c], dt);
            ref[c] += e * vv;
            base[c] += double(e_rounded) * vv;
          }
        }
        for (int c = 0; c < d; ++c) {
          ref[c] /= sum;
          base[c] = round_to(float(base[c] / base_sum), dt);
        }
        ref_lse = mx + std::log(sum);
        base_lse = mx_low + std::log(base_sum);
      }
      for (int c = 0; c < d; ++c) {
        const float got = from_bits(out[p.o_offset(b, i, hq) + c], dt);
        if (!std::isfinite(got)) w.nan = true;
        const double err = std::fabs(got - ref[c]);
        if (!(err <= w.out_err)) {
          w.out_err = std::isfinite(err) ? err : INFINITY;
          w.where = "out(b" + std::to_string(b) + " h" + std::to_string(hq) + " row " +
                    std::to_string(i) + " col " + std::to_string(c) + ") = " +
                    std::to_string(got) + " vs ref " + std::to_string(ref[c]);
        }
        w.base_err = std::max(w.base_err, std::fabs(base[c] - ref[c]));
      }
      const float got_lse = lse[p.lse_offset(b, hq, i)];
      double lse_err = 0;
      if (std::isinf(ref_lse)) {
        lse_err = (got_lse == -INFINITY) ? 0 : INFINITY;
      } else {
        lse_err = std::isfinite(got_lse) ? std::fabs(got_lse - ref_lse) : INFINITY;
        w.lse_base_err = std::max(w.lse_base_err, std::fabs(base_lse - ref_lse));
      }
      if (lse_err > w.lse_err) {
        w.lse_err = lse_err;
        if (!std::isfinite(lse_err))
          w.where += " | lse(b" + std::to_string(b) + " h" + std::to_string(hq) + " row " +
                     std::to_string(i) + ") = " + std::to_string(got_lse) + " vs ref " +
                     std::to_string(ref_lse);
      }
    }
  };
  const int threads = std::max(1u, std::thread::hardware_concurrency());
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t)
    pool.emplace_back([&, t] {
      for (int item = t; item < work_items; item += threads) work(item);
    });
  for (auto& th : pool) th.join();
  Worst total;
  for (const Worst& w : worst) {
    if (w.out_err > total.out_err || (w.lse_err > total.lse_err && !std::isfinite(w.lse_err)))
      total.where = w.where;
    total.out_err = std::max(total.out_err, w.out_err);
    total.base_err = std::max(total.base_err, w.base_err);
    total.lse_err = std::max(total.lse_err, w.lse_err);
    total.lse_base_err = std::max(total.lse_base_err, w.lse_base_err);
    total.nan |= w.nan;
  }
  CheckResult r;
  const double out_tol = 2 * total.base_err + 1e-5, lse_tol = 2 * total.lse_base_err + 1e-4;
  r.pass = !total.nan && total.out_err <= out_tol && total.lse_err <= lse_tol;
  char text[512];
  std::snprintf(text, sizeof(text), "out err %.3g (tol %.3g), lse err %.3g (tol %.3g)%s%s%s",
                total.out_err, out_tol, total.lse_err, lse_tol, total.nan ? ", NaN/Inf in out" : "",
                r.pass ? "" : "; worst: ", r.pass ? "" : total.where.c_str());
  r.detail = text;
  return r;
}

inline std::vector<ProblemShape> correctness_shapes() {
  std::vector<ProblemShape> shapes;
  auto add = [&](DType dt, int b, int sq, int sk, int hq, int hkv, int d, bool causal,
                 bool bhsd = false, float stdev = 1.0f) {
    ProblemShape s;
    s.dtype = dt; s.batch = b; s.seqlen_q = sq; s.seqlen_k = sk; s.heads_q = hq;
    s.heads_kv = hkv; s.head_dim = d; s.causal = causal; s.bhsd = bhsd; s.input_std = stdev;
    shapes.push_back(s);
  };
  const DType kBf = DType::kBFloat16, kFp = DType::kFloat16;
  for (int d : {64, 96, 128, 256}) {  // 96: the 128 kernels, zero-padded
    for (bool causal : {false, true}) {
      add(kBf, 2, 128, 128, 2, 2, d, causal);    // exactly one m-block, one/two KV tiles
      add(kFp, 1, 1, 1, 2, 2, d, causal);        // seqlen 1
      add(kBf, 2, 17, 17, 2, 1, d, causal);      // tails, MQA
      add(kFp, 1, 65, 65, 3, 3, d, causal);
      add(kBf, 1, 1000, 1000, 2, 2, d, causal);  // many KV tiles, tail in both
      add(kFp, 2, 257, 513, 8, 2, d, causal);    // GQA 4, seqlen_q < seqlen_k
      add(kBf, 1, 300, 100, 2, 2, d, causal);    // seqlen_q > seqlen_k: empty rows when causal
      add(kBf, 1, 1000, 200, 2, 2, d, causal);   // the same in the 1k row (three consumers, d64)
      add(kFp, 1, 200, 333, 2, 2, d, causal, /*bhsd=*/true);
      add(kFp, 1, 130, 260, 2, 2, d, causal, false, /*std=*/30.0f);
    }
    add(kBf, 1, 1, 1000, 2, 2, d, true);  // decode-like: one query sees everything
    add(kBf, 1, 64, 0, 2, 2, d, false);   // no keys: out = 0, lse = -inf
  }
  return shapes;
}

// Standard grid rows at 16k, 8k, 4k, 2k, 1k and 512 (batch = 16384 / seqlen, heads = 2048 / head_dim), plus the
// original FlashCore config and the GQA prefill config.
inline std::vector<ProblemShape> timing_shapes() {
  std::vector<ProblemShape> shapes;
  for (int d : {64, 128, 256})
    for (int seqlen : {16384, 8192, 4096, 2048, 1024, 512})
      for (bool causal : {false, true}) {
        ProblemShape s;
        s.dtype = DType::kBFloat16;
        s.batch = 16384 / seqlen;
        s.seqlen_q = s.seqlen_k = seqlen;
        s.heads_q = s.heads_kv = 2048 / d;
        s.head_dim = d;
        s.causal = causal;
        shapes.push_back(s);
      }
  for (int d : {64, 128, 256}) {  // fp16 must track bf16
    ProblemShape s;
    s.dtype = DType::kFloat16;
    s.batch = 8;
    s.seqlen_q = s.seqlen_k = 2048;
    s.heads_q = s.heads_kv = 2048 / d;
    s.head_dim = d;
    shapes.push_back(s);
  }
  ProblemShape original;
  original.dtype = DType::kFloat16;
  original.batch = 16; original.heads_q = original.heads_kv = 16;
  original.seqlen_q = original.seqlen_k = 2048; original.head_dim = 64;
  shapes.push_back(original);
  ProblemShape gqa;
  gqa.batch = 1; gqa.heads_q = 32; gqa.heads_kv = 8; gqa.seqlen_q = gqa.seqlen_k = 8192;
  gqa.head_dim = 128; gqa.causal = true;
  shapes.push_back(gqa);
  return shapes;
}

}  // namespace flashcore::detail
