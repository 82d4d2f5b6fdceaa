#include "runner.h"

#include <algorithm>
#include <chrono>
#include <fstream>
#include <thread>
#include <vector>

#include <unistd.h>  // sysconf

#include "gpu.h"
#include "timing.h"

namespace flashcore::bench {
namespace {

using testing::ProblemShape;

constexpr uint8_t kPoisonByte = 0xFF;  // all-ones bits are a NaN in fp16, bf16 and fp32

// Bounds the memory of the rotation for tiny configs (they stay launch-bound anyway).
constexpr int64_t kMaxInputCopies = 512;

// Bytes of one copy of each tensor; Size is size_t for allocations, double for the checks of
// shapes that may not fit any machine (memory_needed).
template <typename Size>
struct TensorSizes {
  Size q, kv, out, lse;
  Size total() const { return q + 2 * kv + out + lse; }
};

template <typename Size = size_t>
TensorSizes<Size> tensor_sizes(const ProblemShape& s) {
  const Size element = static_cast<Size>(dtype_size(s.dtype));
  TensorSizes<Size> sizes{};
  sizes.q = Size(s.batch) * s.seqlen_q * s.heads_q * s.head_dim * element;
  sizes.kv = Size(s.batch) * s.seqlen_k * s.heads_kv * s.head_dim * element;
  sizes.out = sizes.q / element * static_cast<Size>(dtype_size(s.output_dtype()));
  sizes.lse = Size(s.batch) * s.heads_q * s.seqlen_q * Size(sizeof(float));
  return sizes;
}

// fp8 inputs' [batch, heads_kv] float32 descales (nullptr: none), wherever they live.
struct DescalePointers {
  const float *q = nullptr, *k = nullptr, *v = nullptr;
};

DescalePointers host_descales(const testing::HostTensors& inputs) {
  if (inputs.q_descale.empty()) return {};
  return {inputs.q_descale.data(), inputs.k_descale.data(), inputs.v_descale.data()};
}

size_t descale_bytes(const ProblemShape& s) {
  return s.dtype == DType::kFloat8E4M3 ? size_t(s.batch) * s.heads_kv * sizeof(float) : 0;
}

// Contiguous BSHD views of q, k, v, out and the [b, hq, sq] lse at the given addresses.
AttentionArgs make_args(const ProblemShape& s, Backend backend, Device device, const void* q,
                        const void* k, const void* v, void* out, float* lse,
                        const DescalePointers& descales = {}) {
  const std::vector<int64_t> q_shape = {s.batch, s.seqlen_q, s.heads_q, s.head_dim};
  const std::vector<int64_t> kv_shape = {s.batch, s.seqlen_k, s.heads_kv, s.head_dim};
  AttentionArgs args;
  args.q = make_tensor(const_cast<void*>(q), s.dtype, device, q_shape);
  args.k = make_tensor(const_cast<void*>(k), s.dtype, device, kv_shape);
  args.v = make_tensor(const_cast<void*>(v), s.dtype, device, kv_shape);
  args.out = make_tensor(out, s.output_dtype(), device, q_shape);
  args.lse = make_tensor(lse, DType::kFloat32, device, {s.batch, s.heads_q, s.seqlen_q});
  auto descale = [&](const float* data) -> std::optional<TensorView> {
    if (data == nullptr) return std::nullopt;
    return make_tensor(const_cast<float*>(data), DType::kFloat32, device, {s.batch, s.heads_kv});
  };
  args.q_descale = descale(descales.q);
  args.k_descale = descale(descales.k);
  args.v_descale = descale(descales.v);
  args.softmax_scale = s.softmax_scale;
  args.causal = s.causal;
  args.backend = backend;
  return args;
}

void finish_record(BenchRecord& record, const std::vector<double>& run_ms,
                   const testing::HostTensors& inputs, const std::vector<uint8_t>& out_host,
                   const std::vector<float>& lse_host, const RunSettings& settings) {
  const TimingSummary timing = summarize(run_ms);
  record.median_ms = timing.median_ms;
  record.min_ms = timing.min_ms;
  record.tflops = tflops(record.shape.flops(), timing.median_ms);
  const std::vector<int> rows = testing::sample_rows(record.shape.seqlen_q, settings.check_rows);
  record.accuracy = testing::check_accuracy(record.shape, inputs, out_host.data(),
                                            lse_host.data(), rows);
  record.pass = record.accuracy->pass;
}

void run_on_host(BenchRecord& record, Backend backend, const testing::HostTensors& inputs,
                 const RunSettings& settings) {
  const ProblemShape& s = record.shape;
  const TensorSizes<size_t> sizes = tensor_sizes(s);
  std::vector<uint8_t> out(sizes.out, kPoisonByte);
  std::vector<float> lse(sizes.lse / sizeof(float));
  std::fill_n(reinterpret_cast<uint8_t*>(lse.data()), sizes.lse, kPoisonByte);
  const AttentionArgs args = make_args(s, backend, Device{DeviceType::kCPU, 0}, inputs.q.data(),
                                       inputs.k.data(), inputs.v.data(), out.data(), lse.data(),
                                       host_descales(inputs));
  record.backend_ran = to_string(attention_forward(args));  // the checked run
  const std::vector<uint8_t> out_checked = out;
  const std::vector<float> lse_checked = lse;
  const std::vector<double> run_ms = time_host_runs(
      [&](int) { attention_forward(args); }, settings.warmup, settings.iters);
  finish_record(record, run_ms, inputs, out_checked, lse_checked, settings);
}

void run_on_gpu(BenchRecord& record, Backend backend, const testing::HostTensors& inputs,
                const RunSettings& settings) {
  const ProblemShape& s = record.shape;
  const TensorSizes<size_t> sizes = tensor_sizes(s);
  const int64_t cold_bytes = kColdCacheL2Multiple * gpu_l2_bytes();
  const int64_t set_bytes = static_cast<int64_t>(sizes.total());
  const int copies = static_cast<int>(std::clamp<int64_t>(
      (cold_bytes + set_bytes - 1) / std::max<int64_t>(set_bytes, 1), 1, kMaxInputCopies));
  record.input_copies = copies;

  const size_t q_stride = align_up(sizes.q), kv_stride = align_up(sizes.kv);
  const size_t out_stride = align_up(sizes.out), lse_stride = align_up(sizes.lse);
  DeviceBuffer q(q_stride * copies), k(kv_stride * copies), v(kv_stride * copies);
  DeviceBuffer out(out_stride * copies), lse(lse_stride * copies);
  q.upload(0, inputs.q.data(), sizes.q);
  k.upload(0, inputs.k.data(), sizes.kv);
  v.upload(0, inputs.v.data(), sizes.kv);
  for (int c = 1; c < copies; ++c) {
    q.copy_within(c * q_stride, 0, sizes.q);
    k.copy_within(c * kv_stride, 0, sizes.kv);
    v.copy_within(c * kv_stride, 0, sizes.kv);
  }
  out.fill(kPoisonByte);
  lse.fill(kPoisonByte);
  // fp8: one set of descales for every copy (a few bytes, always in cache anyway).
  const size_t descale_size = descale_bytes(s), descale_stride = align_up(descale_size);
  DeviceBuffer descales(std::max<size_t>(3 * descale_stride, 1));
  DescalePointers descale_at;
  if (descale_size > 0) {
    descales.upload(0, inputs.q_descale.data(), descale_size);
    descales.upload(descale_stride, inputs.k_descale.data(), descale_size);
    descales.upload(2 * descale_stride, inputs.v_descale.data(), descale_size);
    descale_at = {reinterpret_cast<float*>(descales.bytes_at(0)),
                  reinterpret_cast<float*>(descales.bytes_at(descale_stride)),
                  reinterpret_cast<float*>(descales.bytes_at(2 * descale_stride))};
  }

  const Device device{DeviceType::kCUDA, 0};
  auto args_for_copy = [&](int c) {
    return make_args(s, backend, device, q.bytes_at(c * q_stride), k.bytes_at(c * kv_stride),
                     v.bytes_at(c * kv_stride), out.bytes_at(c * out_stride),
                     reinterpret_cast<float*>(lse.bytes_at(c * lse_stride)), descale_at);
  };
  std::vector<AttentionArgs> args;
  for (int c = 0; c < copies; ++c) {
    args.push_back(args_for_copy(c));
  }
  // One workspace for every run (they run one after another on one stream), sized for this call
  // as the library asks, poisoned: the tile counters and split-KV partials it holds are the
  // library's to initialize.
  const size_t workspace_bytes = attention_workspace_bytes(args[0]);
  DeviceBuffer workspace(std::max<size_t>(workspace_bytes, 1));
  workspace.fill(kPoisonByte);
  for (AttentionArgs& a : args) {
    a.workspace = workspace.bytes_at(0);
    a.workspace_bytes = workspace_bytes;
  }

  record.backend_ran = to_string(attention_forward(args[0]));  // the checked run
  gpu_synchronize();
  std::vector<uint8_t> out_host(sizes.out);
  std::vector<float> lse_host(sizes.lse / sizeof(float));
  out.download(0, out_host.data(), sizes.out);
  lse.download(0, lse_host.data(), sizes.lse);

  // Run i uses copy (i + 1) % copies, so the first timed runs do not reuse the checked copy.
  const std::vector<double> run_ms = time_gpu_runs(
      [&](int i) { attention_forward(args[(i + 1) % copies]); }, settings.warmup, settings.iters);
  finish_record(record, run_ms, inputs, out_host, lse_host, settings);
}

}  // namespace

std::string config_text(const BenchRecord& record) {
  return record.serving ? record.serving->describe() : record.shape.describe();
}

double record_flops(const BenchRecord& record) {
  return record.serving ? record.serving->flops() : record.shape.flops();
}

bool runs_on_gpu(Backend backend) {
  switch (backend) {
    case Backend::kSM80:
    case Backend::kSM90:
      return true;
    case Backend::kAuto:
      return backend_available(Backend::kSM90) || backend_available(Backend::kSM80);
    default:
      return false;
  }
}

std::string host_device_name() {
  std::ifstream cpuinfo("/proc/cpuinfo");
  std::string line, model = "unknown CPU";
  while (std::getline(cpuinfo, line)) {
    if (line.rfind("model name", 0) == 0) {
      if (const size_t colon = line.find(':'); colon != std::string::npos) {
        model = line.substr(std::min(colon + 2, line.size()));
      }
      break;
    }
  }
  return "cpu: " + model + " (" + std::to_string(std::thread::hardware_concurrency()) +
         " threads)";
}

int64_t host_memory_bytes() {
  const long pages = sysconf(_SC_PHYS_PAGES), page_bytes = sysconf(_SC_PAGE_SIZE);
  return pages > 0 && page_bytes > 0 ? int64_t(pages) * page_bytes : 0;
}

MemoryNeed memory_needed(const ProblemShape& shape) {
  const TensorSizes<double> sizes = tensor_sizes<double>(shape);
  MemoryNeed need;
  // The inputs, then out and lse twice: the host run keeps the checked outputs while timing.
  need.host_bytes = sizes.q + 2 * sizes.kv + 2 * (sizes.out + sizes.lse);
  need.device_bytes = sizes.total();
  return need;
}

size_t align_up(size_t bytes) {
  return (bytes + kBufferAlignment - 1) / kBufferAlignment * kBufferAlignment;
}

void* MadeUpAddresses::place(size_t bytes) {
  void* address = reinterpret_cast<void*>(next_);
  next_ += align_up(std::max<size_t>(bytes, 1));
  return address;
}

std::string selection_refusal(AttentionArgs args) {
  args.device_pointers_verified = true;  // no driver query for addresses that are not memory
  try {
    select_backend(args);
    return "";
  } catch (const Error& error) {
    return error.what();
  }
}

BenchRecord new_record(Backend backend, const RunSettings& settings) {
  BenchRecord record;
  record.backend = to_string(backend);
  record.seed = settings.seed;
  record.warmup = settings.warmup;
  record.iters = settings.iters;
  return record;
}

std::string refusal_reason(const ProblemShape& shape, Backend backend) {
  // select_backend validates the call and picks a backend without touching memory.
  const TensorSizes<size_t> sizes = tensor_sizes(shape);
  MadeUpAddresses addresses;
  const auto place = [&addresses](size_t bytes) { return addresses.place(bytes); };
  const Device device = runs_on_gpu(backend) ? Device{DeviceType::kCUDA, 0}
                                             : Device{DeviceType::kCPU, 0};
  DescalePointers descales;
  if (const size_t bytes = descale_bytes(shape); bytes > 0) {
    descales = {static_cast<float*>(place(bytes)), static_cast<float*>(place(bytes)),
                static_cast<float*>(place(bytes))};
  }
  return selection_refusal(make_args(shape, backend, device, place(sizes.q), place(sizes.kv),
                                     place(sizes.kv), place(sizes.out),
                                     static_cast<float*>(place(sizes.lse)), descales));
}

BenchRecord run_benchmark(const ProblemShape& shape, Backend backend,
                          const RunSettings& settings) {
  BenchRecord record = new_record(backend, settings);
  record.shape = shape;
  try {
    const bool on_gpu = runs_on_gpu(backend);
    record.device = on_gpu ? gpu_name() : host_device_name();
    const testing::HostTensors inputs = testing::make_random_inputs(shape, settings.seed);
    if (on_gpu) {
      run_on_gpu(record, backend, inputs, settings);
    } else {
      run_on_host(record, backend, inputs, settings);
    }
  } catch (const std::exception& error) {  // flashcore::Error, and std::bad_alloc on huge shapes
    record.error = error.what();
    record.pass = false;
  }
  return record;
}

}  // namespace flashcore::bench
