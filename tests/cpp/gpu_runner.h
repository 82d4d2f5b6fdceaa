// Device buffers and one GPU attention run checked against the float64 oracle on the host.
#pragma once

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "gpu_suite.h"
#include "host_problem.h"

namespace flashcore::test {

#define GPU_TEST_CHECK(expr)                                                       \
  do {                                                                             \
    cudaError_t status_ = (expr);                                                  \
    if (status_ != cudaSuccess) {                                                  \
      throw std::runtime_error(std::string(#expr) + ": " + cudaGetErrorString(status_)); \
    }                                                                              \
  } while (0)

// cudaMalloc'ed bytes, freed on scope exit.
class DeviceBuffer {
 public:
  explicit DeviceBuffer(size_t bytes) : bytes_(bytes) {
    if (bytes_ > 0) GPU_TEST_CHECK(cudaMalloc(&data_, bytes_));
  }
  ~DeviceBuffer() {
    if (data_ != nullptr) cudaFree(data_);
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  uint8_t* data() const { return static_cast<uint8_t*>(data_); }
  size_t bytes() const { return bytes_; }
  void upload(const std::vector<uint8_t>& host) const {
    GPU_TEST_CHECK(cudaMemcpy(data_, host.data(), host.size(), cudaMemcpyHostToDevice));
  }
  // All bits set: NaN in every float format, so an element the kernel never writes fails.
  void poison() const {
    if (bytes_ > 0) GPU_TEST_CHECK(cudaMemset(data_, 0xFF, bytes_));
  }
  void download(void* host) const {
    GPU_TEST_CHECK(cudaMemcpy(host, data_, bytes_, cudaMemcpyDeviceToHost));
  }

 private:
  void* data_ = nullptr;
  size_t bytes_ = 0;
};

struct GpuRun {
  Backend ran = Backend::kAuto;
  testing::AccuracyReport report;
};

// Uploads fresh inputs in `layout`, runs `backend` on `stream`, downloads out and lse and checks
// up to max_rows query rows. `adjust` may change the inputs first (e.g. fp8 descales); the check
// reads the adjusted ones.
inline GpuRun run_gpu_case(const testing::ProblemShape& s, Layout layout, float stddev,
                           Backend backend, int max_rows, cudaStream_t stream = nullptr,
                           uint64_t seed = 4321,
                           const std::function<void(testing::HostTensors&)>& adjust = nullptr) {
  testing::HostTensors in = testing::make_random_inputs(s, seed, stddev);
  if (adjust) adjust(in);
  const size_t eb = dtype_size(s.dtype);
  const Device cuda{DeviceType::kCUDA, 0};
  const int64_t packed_heads = s.heads_q + 2 * s.heads_kv;

  ViewGeometry gq, gk, gv;
  std::vector<uint8_t> host_q, host_k, host_v;
  if (layout == Layout::kPackedQKV) {  // needs seqlen_q == seqlen_k
    host_q.resize(size_t(s.batch) * s.seqlen_q * packed_heads * s.head_dim * eb);
    gq = geometry(layout, s.batch, s.seqlen_q, s.heads_q, s.head_dim, packed_heads, 0);
    gk = geometry(layout, s.batch, s.seqlen_k, s.heads_kv, s.head_dim, packed_heads, s.heads_q);
    gv = geometry(layout, s.batch, s.seqlen_k, s.heads_kv, s.head_dim, packed_heads,
                  s.heads_q + s.heads_kv);
    scatter_bshd(in.q, host_q.data(), gq, s.batch, s.seqlen_q, s.heads_q, s.head_dim, eb);
    scatter_bshd(in.k, host_q.data(), gk, s.batch, s.seqlen_k, s.heads_kv, s.head_dim, eb);
    scatter_bshd(in.v, host_q.data(), gv, s.batch, s.seqlen_k, s.heads_kv, s.head_dim, eb);
  } else {
    gq = geometry(layout, s.batch, s.seqlen_q, s.heads_q, s.head_dim);
    gk = gv = geometry(layout, s.batch, s.seqlen_k, s.heads_kv, s.head_dim);
    host_q.resize(in.q.size()), host_k.resize(in.k.size()), host_v.resize(in.v.size());
    scatter_bshd(in.q, host_q.data(), gq, s.batch, s.seqlen_q, s.heads_q, s.head_dim, eb);
    scatter_bshd(in.k, host_k.data(), gk, s.batch, s.seqlen_k, s.heads_kv, s.head_dim, eb);
    scatter_bshd(in.v, host_v.data(), gv, s.batch, s.seqlen_k, s.heads_kv, s.head_dim, eb);
  }
  DeviceBuffer dq(host_q.size()), dk(host_k.size()), dv(host_v.size());
  dq.upload(host_q);
  if (!host_k.empty()) dk.upload(host_k), dv.upload(host_v);
  uint8_t* k_base = layout == Layout::kPackedQKV ? dq.data() : dk.data();
  uint8_t* v_base = layout == Layout::kPackedQKV ? dq.data() : dv.data();

  // fp8 inputs: out in bf16 or fp16 (s.output_dtype()), and the descales they were quantized with.
  const DType out_dtype = s.output_dtype();
  const size_t out_bytes = in.q.size() / eb * dtype_size(out_dtype);
  DeviceBuffer d_out(out_bytes), d_lse(size_t(s.batch) * s.heads_q * s.seqlen_q * sizeof(float));
  d_out.poison();
  d_lse.poison();
  std::unique_ptr<DeviceBuffer> d_descales[3];
  const std::vector<float>* descales[3] = {&in.q_descale, &in.k_descale, &in.v_descale};
  for (int i = 0; i < 3; ++i) {
    if (descales[i]->empty()) continue;
    const auto* bytes = reinterpret_cast<const uint8_t*>(descales[i]->data());
    d_descales[i] = std::make_unique<DeviceBuffer>(descales[i]->size() * sizeof(float));
    d_descales[i]->upload(std::vector<uint8_t>(bytes, bytes + d_descales[i]->bytes()));
  }
  // Uploads and memsets run on the legacy stream and may still be in flight when they return;
  // a non-blocking `stream` would not wait for them.
  GPU_TEST_CHECK(cudaDeviceSynchronize());

  AttentionArgs args;
  args.q = make_strided_tensor(dq.data() + gq.offset * eb, s.dtype, cuda,
                               {s.batch, s.seqlen_q, s.heads_q, s.head_dim}, gq.strides);
  args.k = make_strided_tensor(k_base + gk.offset * eb, s.dtype, cuda,
                               {s.batch, s.seqlen_k, s.heads_kv, s.head_dim}, gk.strides);
  args.v = make_strided_tensor(v_base + gv.offset * eb, s.dtype, cuda,
                               {s.batch, s.seqlen_k, s.heads_kv, s.head_dim}, gv.strides);
  args.out =
      make_tensor(d_out.data(), out_dtype, cuda, {s.batch, s.seqlen_q, s.heads_q, s.head_dim});
  auto descale = [&](int i) -> std::optional<TensorView> {
    if (!d_descales[i]) return std::nullopt;
    return make_tensor(d_descales[i]->data(), DType::kFloat32, cuda, {s.batch, s.heads_kv});
  };
  args.q_descale = descale(0);
  args.k_descale = descale(1);
  args.v_descale = descale(2);
  args.lse = make_tensor(d_lse.data(), DType::kFloat32, cuda, {s.batch, s.heads_q, s.seqlen_q});
  args.softmax_scale = s.softmax_scale;
  args.causal = s.causal;
  args.backend = backend;
  args.stream = stream;

  GpuRun run;
  run.ran = attention_forward(args);
  GPU_TEST_CHECK(stream ? cudaStreamSynchronize(stream) : cudaDeviceSynchronize());
  std::vector<uint8_t> out(out_bytes);
  std::vector<float> lse(d_lse.bytes() / sizeof(float));
  d_out.download(out.data());
  d_lse.download(lse.data());
  run.report = testing::check_accuracy(s, in, out.data(), lse.data(),
                                       testing::sample_rows(s.seqlen_q, max_rows));
  return run;
}

}  // namespace flashcore::test
