// Runs one problem through a host backend in a chosen layout and applies the accuracy rule.
#pragma once

#include <cstring>
#include <optional>
#include <vector>

#include "host_problem.h"

namespace flashcore::test {

struct CpuRun {
  testing::AccuracyReport report;
  std::vector<uint8_t> out;  // contiguous BSHD
  std::vector<float> lse;    // [b, hq, sq]
};

inline CpuRun run_host_case(const testing::ProblemShape& s, Layout layout, float stddev,
                            int max_rows, Backend backend = Backend::kCPU, uint64_t seed = 1234) {
  testing::HostTensors in = testing::make_random_inputs(s, seed, stddev);
  const size_t eb = dtype_size(s.dtype);
  const Device cpu{DeviceType::kCPU, 0};
  const int64_t packed_heads = s.heads_q + 2 * s.heads_kv;

  std::vector<uint8_t> packed, q_buf, k_buf, v_buf;
  ViewGeometry gq, gk, gv;
  uint8_t *q_base, *k_base, *v_base;
  if (layout == Layout::kPackedQKV) {  // needs seqlen_q == seqlen_k
    packed.resize(size_t(buffer_elements(layout, s.batch, s.seqlen_q, 0, s.head_dim,
                                         packed_heads)) * eb);
    gq = geometry(layout, s.batch, s.seqlen_q, s.heads_q, s.head_dim, packed_heads, 0);
    gk = geometry(layout, s.batch, s.seqlen_k, s.heads_kv, s.head_dim, packed_heads, s.heads_q);
    gv = geometry(layout, s.batch, s.seqlen_k, s.heads_kv, s.head_dim, packed_heads,
                  s.heads_q + s.heads_kv);
    q_base = k_base = v_base = packed.data();
  } else {
    gq = geometry(layout, s.batch, s.seqlen_q, s.heads_q, s.head_dim);
    gk = geometry(layout, s.batch, s.seqlen_k, s.heads_kv, s.head_dim);
    gv = gk;
    q_buf.resize(in.q.size());
    k_buf.resize(in.k.size());
    v_buf.resize(in.v.size());
    q_base = q_buf.data(), k_base = k_buf.data(), v_base = v_buf.data();
  }
  scatter_bshd(in.q, q_base, gq, s.batch, s.seqlen_q, s.heads_q, s.head_dim, eb);
  scatter_bshd(in.k, k_base, gk, s.batch, s.seqlen_k, s.heads_kv, s.head_dim, eb);
  scatter_bshd(in.v, v_base, gv, s.batch, s.seqlen_k, s.heads_kv, s.head_dim, eb);

  CpuRun run;
  // NaN poison (all bits set) so an element the backend never writes fails the check.
  const DType out_dtype = s.output_dtype();  // fp8 inputs: bf16 or fp16
  run.out.assign(in.q.size() / eb * dtype_size(out_dtype), 0xFF);
  run.lse.resize(size_t(s.batch) * s.heads_q * s.seqlen_q);
  std::memset(run.lse.data(), 0xFF, run.lse.size() * sizeof(float));

  AttentionArgs args;
  args.q = make_strided_tensor(q_base + gq.offset * eb, s.dtype, cpu,
                               {s.batch, s.seqlen_q, s.heads_q, s.head_dim}, gq.strides);
  args.k = make_strided_tensor(k_base + gk.offset * eb, s.dtype, cpu,
                               {s.batch, s.seqlen_k, s.heads_kv, s.head_dim}, gk.strides);
  args.v = make_strided_tensor(v_base + gv.offset * eb, s.dtype, cpu,
                               {s.batch, s.seqlen_k, s.heads_kv, s.head_dim}, gv.strides);
  args.out = make_tensor(run.out.data(), out_dtype, cpu,
                         {s.batch, s.seqlen_q, s.heads_q, s.head_dim});
  // fp8: the [batch, heads_kv] descales the inputs were quantized with.
  auto descale = [&](std::vector<float>& values) -> std::optional<TensorView> {
    if (values.empty()) return std::nullopt;
    return make_tensor(values.data(), DType::kFloat32, cpu, {s.batch, s.heads_kv});
  };
  args.q_descale = descale(in.q_descale);
  args.k_descale = descale(in.k_descale);
  args.v_descale = descale(in.v_descale);
  args.lse = make_tensor(run.lse.data(), DType::kFloat32, cpu, {s.batch, s.heads_q, s.seqlen_q});
  args.softmax_scale = s.softmax_scale;
  args.causal = s.causal;
  args.backend = backend;
  attention_forward(args);

  run.report = testing::check_accuracy(s, in, run.out.data(), run.lse.data(),
                                       testing::sample_rows(s.seqlen_q, max_rows));
  return run;
}

}  // namespace flashcore::test
