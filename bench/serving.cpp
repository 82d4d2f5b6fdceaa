#include "serving.h"

#include <algorithm>
#include <vector>

#include "gpu.h"
#include "timing.h"

namespace flashcore::bench {
namespace {

using testing::KvLayout;
using testing::ServingBytes;
using testing::ServingIndices;
using testing::ServingPointers;
using testing::ServingProblem;
using testing::ServingShape;

constexpr uint8_t kPoisonByte = 0xFF;     // a NaN in fp16, bf16 and fp32
constexpr uint64_t kPageOrderSeed = 1;    // the paged cache's page order: the same every run

// The dense fields of a record: the batch and the longest sequences (JSON readers keep working).
testing::ProblemShape summary_shape(const ServingShape& s) {
  testing::ProblemShape shape;
  shape.batch = s.batch();
  shape.seqlen_q = s.batch() ? *std::max_element(s.q_lens.begin(), s.q_lens.end()) : 0;
  shape.seqlen_k = s.batch() ? *std::max_element(s.k_lens.begin(), s.k_lens.end()) : 0;
  shape.heads_q = s.heads_q, shape.heads_kv = s.heads_kv, shape.head_dim = s.head_dim;
  shape.dtype = s.dtype, shape.causal = s.causal;
  shape.out_dtype = s.out_dtype;
  return shape;
}

void finish_record(BenchRecord& record, const ServingProblem& problem,
                   const std::vector<double>& run_ms, const std::vector<uint8_t>& out,
                   const std::vector<float>& lse, const RunSettings& settings) {
  const TimingSummary timing = summarize(run_ms);
  record.median_ms = timing.median_ms;
  record.min_ms = timing.min_ms;
  record.tflops = tflops(problem.shape().flops(), timing.median_ms);
  record.accuracy = problem.check_all(settings.check_rows, out.data(), lse.data());
  record.pass = record.accuracy->pass;
}

void run_on_host(BenchRecord& record, ServingProblem& problem, Backend backend,
                 const RunSettings& settings) {
  const ServingBytes bytes = serving_bytes(problem.shape(), problem.indices());
  const AttentionArgs args = problem.args(backend);
  record.backend_ran = to_string(attention_forward(args));  // the checked run
  const ServingPointers at = problem.host_pointers();
  const auto* out = static_cast<const uint8_t*>(at.out);
  const std::vector<uint8_t> out_checked(out, out + bytes.out);
  const std::vector<float> lse_checked(at.lse, at.lse + bytes.lse / sizeof(float));
  const std::vector<double> run_ms = time_host_runs(
      [&](int) { attention_forward(args); }, settings.warmup, settings.iters);
  finish_record(record, problem, run_ms, out_checked, lse_checked, settings);
}

// One device buffer per tensor, uploaded from the problem's host data; no rotation of input
// copies: the serving configs worth timing (thousands of keys per sequence) outgrow L2 anyway.
void run_on_gpu(BenchRecord& record, ServingProblem& problem, Backend backend,
                const RunSettings& settings) {
  const ServingShape& s = problem.shape();
  const ServingIndices& ix = problem.indices();
  const ServingBytes bytes = serving_bytes(s, ix);
  const ServingPointers host = problem.host_pointers();
  auto upload = [](const void* data, size_t size) {
    DeviceBuffer buffer(align_up(std::max<size_t>(size, 1)));
    if (size > 0) buffer.upload(0, data, size);
    return buffer;
  };
  auto ints = [&](const std::vector<int32_t>& values) {
    return upload(values.data(), values.size() * sizeof(int32_t));
  };
  DeviceBuffer q = upload(host.q, bytes.q), k = upload(host.k, bytes.k),
               v = upload(host.v, bytes.k);
  DeviceBuffer out(align_up(std::max<size_t>(bytes.out, 1))),
      lse(align_up(std::max<size_t>(bytes.lse, 1)));
  out.fill(kPoisonByte);
  lse.fill(kPoisonByte);
  DeviceBuffer cu_q = ints(ix.cu_q), cu_k = ints(ix.cu_k), lengths = ints(ix.lengths),
               page_table = ints(ix.page_table);
  ServingPointers at;
  at.q = q.data(), at.k = k.data(), at.v = v.data(), at.out = out.data();
  at.lse = static_cast<float*>(lse.data());
  at.cu_q = static_cast<int32_t*>(cu_q.data()), at.cu_k = static_cast<int32_t*>(cu_k.data());
  at.lengths = static_cast<int32_t*>(lengths.data());
  at.page_table = static_cast<int32_t*>(page_table.data());
  DeviceBuffer q_descale, k_descale, v_descale;  // fp8 only
  if (bytes.descale > 0) {
    q_descale = upload(host.q_descale, bytes.descale);
    k_descale = upload(host.k_descale, bytes.descale);
    v_descale = upload(host.v_descale, bytes.descale);
    at.q_descale = static_cast<float*>(q_descale.data());
    at.k_descale = static_cast<float*>(k_descale.data());
    at.v_descale = static_cast<float*>(v_descale.data());
  }
  AttentionArgs args = serving_args(s, ix, at, Device{DeviceType::kCUDA, 0}, backend);
  const size_t workspace_bytes = attention_workspace_bytes(args);
  DeviceBuffer workspace(std::max<size_t>(workspace_bytes, 1));
  workspace.fill(kPoisonByte);
  args.workspace = workspace.data();
  args.workspace_bytes = workspace_bytes;

  record.backend_ran = to_string(attention_forward(args));  // the checked run
  gpu_synchronize();
  std::vector<uint8_t> out_host(bytes.out);
  std::vector<float> lse_host(bytes.lse / sizeof(float));
  out.download(0, out_host.data(), bytes.out);
  lse.download(0, lse_host.data(), bytes.lse);
  const std::vector<double> run_ms = time_gpu_runs(
      [&](int) { attention_forward(args); }, settings.warmup, settings.iters);
  finish_record(record, problem, run_ms, out_host, lse_host, settings);
}

}  // namespace

ServingShape serving_shape_from_options(const BenchOptions& options) {
  ServingShape s;
  s.kv = options.layout == "varlen" ? KvLayout::kVarlen
         : options.layout == "cache" ? KvLayout::kCache
                                     : KvLayout::kPaged;
  s.k_lens = options.seqlens.empty() ? std::vector<int>(options.batch, options.seqlen_k)
                                     : options.seqlens;
  if (s.kv == KvLayout::kVarlen) {
    s.q_lens = s.k_lens;
    if (options.seqlen_q_given) {
      for (int& n : s.q_lens) n = std::min(n, options.seqlen_q);
    }
  } else {
    s.packed_q = false;  // dense q [batch, seqlen_q, ...] against the cache
    s.q_lens.assign(s.k_lens.size(), options.seqlen_q_given ? options.seqlen_q : 1);
  }
  s.page_size = options.page_size;
  s.slack = 0;  // a cache exactly as long as its longest sequence
  s.heads_q = options.heads_q, s.heads_kv = options.heads_kv, s.head_dim = options.head_dim;
  s.dtype = options.dtype.value_or(DType::kFloat16);
  s.causal = options.causal;
  return s;
}

MemoryNeed serving_memory_needed(const ServingShape& s) {
  const ServingIndices ix(s, kPageOrderSeed);
  const ServingBytes bytes = serving_bytes(s, ix);
  double inputs = 0;  // the per-sequence dense inputs the check compares against
  const double element = double(dtype_size(s.dtype));
  for (int b = 0; b < s.batch(); ++b) {
    inputs += element * (double(s.q_lens[b]) * s.heads_q + 2.0 * s.k_lens[b] * s.heads_kv) *
              s.head_dim;
  }
  const double packed = double(bytes.q) + bytes.out + 2.0 * bytes.k + bytes.lse;
  MemoryNeed need;
  need.host_bytes = inputs + packed + bytes.out + bytes.lse;  // and the checked copies
  need.device_bytes = packed;
  return need;
}

std::string serving_refusal_reason(const ServingShape& s, Backend backend) {
  ServingIndices ix(s, kPageOrderSeed);
  const ServingBytes bytes = serving_bytes(s, ix);
  MadeUpAddresses addresses;
  const auto place = [&addresses](size_t bytes) { return addresses.place(bytes); };
  const bool on_gpu = runs_on_gpu(backend);
  ServingPointers at;
  at.q = place(bytes.q), at.out = place(bytes.out), at.k = place(bytes.k), at.v = place(bytes.k);
  at.lse = static_cast<float*>(place(bytes.lse));
  if (bytes.descale > 0) {  // fp8: values are never read by validation
    at.q_descale = static_cast<float*>(place(bytes.descale));
    at.k_descale = static_cast<float*>(place(bytes.descale));
    at.v_descale = static_cast<float*>(place(bytes.descale));
  }
  if (on_gpu) {  // index values on a device are not read without check_indices
    at.cu_q = static_cast<int32_t*>(place(ix.cu_q.size() * 4));
    at.cu_k = static_cast<int32_t*>(place(ix.cu_k.size() * 4));
    at.lengths = static_cast<int32_t*>(place(ix.lengths.size() * 4));
    at.page_table = static_cast<int32_t*>(place(ix.page_table.size() * 4));
  } else {
    at.cu_q = ix.cu_q.data(), at.cu_k = ix.cu_k.data(), at.lengths = ix.lengths.data();
    at.page_table = ix.page_table.data();
  }
  const Device device = on_gpu ? Device{DeviceType::kCUDA, 0} : Device{DeviceType::kCPU, 0};
  return selection_refusal(serving_args(s, ix, at, device, backend));
}

BenchRecord run_serving_benchmark(const ServingShape& shape, Backend backend,
                                  const RunSettings& settings) {
  BenchRecord record = new_record(backend, settings);
  record.shape = summary_shape(shape);
  record.serving = shape;
  try {
    const bool on_gpu = runs_on_gpu(backend);
    record.device = on_gpu ? gpu_name() : host_device_name();
    ServingProblem problem(shape, settings.seed);
    if (on_gpu) {
      run_on_gpu(record, problem, backend, settings);
    } else {
      run_on_host(record, problem, backend, settings);
    }
  } catch (const std::exception& error) {
    record.error = error.what();
    record.pass = false;
  }
  return record;
}

}  // namespace flashcore::bench
