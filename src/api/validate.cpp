#include "api/validate.h"

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <sstream>

#include "api/backend.h"
#include "api/kernel_registry.h"
#include "api/tensor_checks.h"
#include "api/validate_fp8.h"
#include "api/validate_serving.h"

#ifdef FLASHCORE_HAS_CUDA
#include "cuda/device_info.h"
#include "cuda/launchers.h"
#endif

namespace flashcore::detail {
namespace {

const char* kDimNames[kMaxDims] = {"batch", "seqlen", "heads", "head_dim"};

// Shapes of a dense call: q/out [batch, seqlen_q, heads_q, d], k/v [batch, seqlen_k, heads_kv, d].
CallShape check_dense_shapes(const AttentionArgs& args) {
  const TensorView &q = args.q, &k = args.k, &v = args.v, &out = args.out;
  check_tensor("q", q, kDenseDims);
  check_tensor("k", k, kDenseDims);
  check_tensor("v", v, kDenseDims);
  check_tensor("out", out, kDenseDims);
  if (k.shape != v.shape) {
    fail("k and v must have the same shape, got k " + shape_string(k) + " and v " +
         shape_string(v));
  }
  for (int dim : {0, 3}) check_same_dim("q", q, dim, "k", k, dim, kDimNames[dim]);
  for (int dim = 0; dim < kDenseDims.rank; ++dim) {
    check_same_dim("out", out, dim, "q", q, dim, kDimNames[dim]);
  }
  CallShape s;
  s.batch = q.shape[0], s.seqlen_q = q.shape[1], s.seqlen_k = k.shape[1];
  s.heads_q = q.shape[2], s.heads_kv = k.shape[2], s.head_dim = q.shape[3];
  s.lse_shape = {s.batch, s.heads_q, s.seqlen_q};
  return s;
}

void check_lse(const AttentionArgs& args, const CallShape& s) {
  const TensorView& lse = *args.lse;
  const DimNames dims{static_cast<int>(s.lse_shape.size()), s.lse_text, {}};
  check_rank("lse", lse, dims);
  std::string expected = "[", got_names = s.lse_text;
  bool matches = true;
  for (size_t i = 0; i < s.lse_shape.size(); ++i) {
    expected += (i ? ", " : "") + std::to_string(s.lse_shape[i]);
    matches = matches && lse.shape[i] == s.lse_shape[i];
  }
  if (!matches) {
    fail("lse must have shape " + expected + "] (" +
         got_names.substr(1, got_names.size() - 2) + "), got " + shape_string(lse));
  }
  if (lse.dtype != DType::kFloat32) {
    fail(std::string("lse must be fp32, got ") + to_string(lse.dtype));
  }
  check_tensor("lse", lse, dims);  // strides and pointer, as for q/k/v/out
  check_same_device("lse", lse, "q", args.q);
  for (auto [name, t] : {std::pair{"q", &args.q}, {"k", &args.k}, {"v", &args.v},
                         {"out", &args.out}}) {
    check_no_overlap("lse", lse, name, *t);
  }
}

// Size, pointer and alignment of the caller's workspace (where it lives is checked with the other
// device pointers below, and only where a GPU can answer).
void check_workspace(const AttentionArgs& args) {
  const size_t required = attention_workspace_bytes(args);
  if (args.workspace == nullptr) {
    if (args.workspace_bytes > 0) {
      fail("workspace is null but workspace_bytes=" + std::to_string(args.workspace_bytes) +
           "; pass a buffer of that many bytes or workspace_bytes=0");
    }
    return;  // no workspace: the backend manages without one
  }
  if (args.workspace_bytes < required) {
    fail("workspace_bytes=" + std::to_string(args.workspace_bytes) + " is smaller than the " +
         std::to_string(required) + " bytes this call needs (attention_workspace_bytes)");
  }
  if (reinterpret_cast<uintptr_t>(args.workspace) % kWorkspaceAlignmentBytes != 0) {
    fail("workspace pointer " + address_string(args.workspace) + " must be " +
         std::to_string(kWorkspaceAlignmentBytes) + "-byte aligned");
  }
}

#ifdef FLASHCORE_HAS_CUDA
// Every pointer of a CUDA call is memory of the tensors' device (one driver query each, a
// noticeable share of a decode call's host time: docs/kernels.md). Skipped when the caller
// vouches for them (AttentionArgs::device_pointers_verified).
// A pointer equal to one already checked in this call has the same answer and is not asked again
// (e.g. out passed as lse's neighbour, or one buffer given twice); nothing is cached across calls,
// since an address may be freed and reused as host memory between them.
void check_device_pointers(const AttentionArgs& args) {
  const int device_index = args.q.device.index;
  auto optional = [](const std::optional<TensorView>& t) { return t ? &*t : nullptr; };
  const TensorView* all[] = {&args.q, &args.k, &args.v, &args.out, optional(args.lse),
                             optional(args.cu_seqlens_q), optional(args.cu_seqlens_k),
                             optional(args.seqused_k), optional(args.cache_seqlens),
                             optional(args.page_table), optional(args.k_new),
                             optional(args.v_new), optional(args.q_descale),
                             optional(args.k_descale), optional(args.v_descale)};
  const char* names[] = {"q", "k", "v", "out", "lse", "cu_seqlens_q", "cu_seqlens_k",
                         "seqused_k", "cache_seqlens", "page_table", "k_new", "v_new",
                         "q_descale", "k_descale", "v_descale"};
  constexpr int kChecked = sizeof(all) / sizeof(all[0]);
  const void* good[kChecked] = {};  // pointers already known to be device memory
  int num_good = 0;
  auto known_good = [&](const void* ptr) {
    for (int i = 0; i < num_good; ++i) {
      if (good[i] == ptr) return true;
    }
    return false;
  };
  for (int i = 0; i < kChecked; ++i) {
    if (all[i] == nullptr || all[i]->numel() == 0 || known_good(all[i]->data)) continue;
    if (!is_device_pointer(all[i]->data, device_index)) {
      fail(std::string(names[i]) + " is marked as on " + device_name(args.q.device) +
           " but its data pointer " + address_string(all[i]->data) +
           " is not memory of that device");
    }
    good[num_good++] = all[i]->data;
  }
  if (args.workspace != nullptr && !known_good(args.workspace) &&
      !is_device_pointer(args.workspace, device_index)) {
    fail("workspace pointer " + address_string(args.workspace) + " is not memory of " +
         device_name(args.q.device) + ", the tensors' device");
  }
}
#endif

#ifdef FLASHCORE_HAS_CUDA
// SMs a launch may use: the device's, less FLASHCORE_SM_MARGIN (read once per process). Kernels
// that run beside FlashCore's, as NCCL's in ring attention, get that many SMs that no persistent
// CTA holds; without the margin they wait for a persistent kernel's end.
int schedulable_sms(int device_sms) {
  // Past any GPU's SM count (an H100 has 132); a larger value is a typo, not a margin.
  constexpr long kMaxSmMargin = 1024;
  static const int margin = [] {
    const char* env = std::getenv("FLASHCORE_SM_MARGIN");
    if (env == nullptr || *env == '\0') return 0;
    char* end = nullptr;
    const long value = std::strtol(env, &end, 10);
    if (*end != '\0' || value < 0 || value > kMaxSmMargin) {
      fail("FLASHCORE_SM_MARGIN must be a count of SMs from 0 to " +
           std::to_string(kMaxSmMargin) + ", got '" + env + "'");
    }
    return static_cast<int>(value);
  }();
  return std::max(1, device_sms - margin);
}
#endif

}  // namespace

bool is_cuda_backend(Backend backend) {
  return backend == Backend::kSM80 || backend == Backend::kSM90;
}

std::string device_name(const Device& device) {
  if (device.type == DeviceType::kCPU) return "cpu";
  return "cuda:" + std::to_string(device.index);
}

// The sm90 split-KV partials of a call that the sm90 backend may run: a Hopper device, fp16 /
// bf16, backend auto or sm90, the dense layout (sm90 sizes its split-KV partials from dense q/k
// shapes; the serving layouts need the tile counters only, for now). The backend sizes them
// (launchers.h); without k (the Python helpers' q-only question) it gives its bound for any k.
size_t split_kv_workspace_bytes(const AttentionArgs& args) {
#ifdef FLASHCORE_HAS_CUDA
  const TensorView &q = args.q, &k = args.k;
  const bool half_precision = q.dtype == DType::kFloat16 || q.dtype == DType::kBFloat16;
  const bool may_run_sm90 = args.backend == Backend::kAuto || args.backend == Backend::kSM90;
  if (!half_precision || !may_run_sm90 || q.ndim < 3) return 0;
  const DeviceInfo& device = device_info(q.device.index);
  if (!device.present || device.cc_major != 9) return 0;
  // The shape the kernels plan with (AttentionParams): packed q counts its sequences and the
  // caller's max_seqlen_q, a kv cache its capacity (a paged one: the table's width in pages).
  Sm90WorkspaceQuery query;
  const bool packed_q = args.cu_seqlens_q.has_value();
  if (packed_q ? q.ndim != 3 : q.ndim != kDenseDims.rank) return 0;
  query.batch = packed_q ? args.cu_seqlens_q->shape[0] - 1 : q.shape[0];
  query.seqlen_q = packed_q ? args.max_seqlen_q : q.shape[1];
  query.heads_q = q.shape[q.ndim - 2];
  query.head_dim = q.shape[q.ndim - 1];
  if (args.cu_seqlens_k && k.ndim == 3) {
    query.seqlen_k = args.max_seqlen_k;
    query.heads_kv = k.shape[1];
  } else if (k.ndim == kDenseDims.rank) {
    const bool paged = args.page_table && args.page_table->ndim == 2;
    query.seqlen_k = paged ? args.page_table->shape[1] * k.shape[1] : k.shape[1];
    query.heads_kv = k.shape[2];
  }
  query.causal_mask = needs_causal_mask(args.causal, query.seqlen_q);
  query.num_sms = schedulable_sms(device.num_sms);
  return sm90_split_kv_workspace_bytes(query);
#else
  (void)args;
  return 0;
#endif
}

AttentionParams validate_common(const AttentionArgs& args) {
  const TensorView &q = args.q, &k = args.k, &v = args.v, &out = args.out;
  const ServingLayout layout = serving_layout(args);
  const CallShape shape = layout.dense() ? check_dense_shapes(args)
                                         : check_serving_shapes(args, layout);

  check_same_device("q", q, "k", k);
  check_same_device("q", q, "v", v);
  check_same_device("q", q, "out", out);

  check_dtypes(args);

  const int64_t heads_q = shape.heads_q, heads_kv = shape.heads_kv, head_dim = shape.head_dim;
  if (heads_kv == 0 && heads_q != 0) {
    fail("heads_kv=0 but heads_q=" + std::to_string(heads_q) + "; heads_q must be a multiple of "
         "heads_kv");
  }
  if (heads_kv > 0 && heads_q % heads_kv != 0) {
    fail("heads_q=" + std::to_string(heads_q) + " is not a multiple of heads_kv=" +
         std::to_string(heads_kv));
  }
  if (head_dim <= 0) fail("head_dim must be > 0, got head_dim=" + std::to_string(head_dim));

  check_no_overlap("out", out, "q", q);
  check_no_overlap("out", out, "k", k);
  check_no_overlap("out", out, "v", v);
  if (args.lse) check_lse(args, shape);
  check_descales(args, shape.batch, heads_kv);
  if (!layout.dense()) check_serving_overlaps(args, layout);
  check_workspace(args);

  float scale = args.softmax_scale ? *args.softmax_scale
                                   : static_cast<float>(1.0 / std::sqrt(double(head_dim)));
  if (!std::isfinite(scale) || scale <= 0.0f) {
    std::ostringstream text;
    text << "softmax_scale must be finite and > 0, got " << scale;
    fail(text.str());
  }

  const bool on_cuda = q.device.type == DeviceType::kCUDA;
  int num_sms = 0;  // of the tensors' device, read with its other properties below
  if (is_cuda_backend(args.backend) && !on_cuda) {
    fail(std::string("backend ") + to_string(args.backend) + " needs CUDA tensors, but q is on " +
         device_name(q.device));
  }
  if ((args.backend == Backend::kCPU || args.backend == Backend::kReference) && on_cuda) {
    fail(std::string("backend ") + to_string(args.backend) + " needs host tensors, but q is on " +
         device_name(q.device));
  }
  if (on_cuda) {
    if (q.dtype == DType::kFloat32) {
      fail("dtype fp32 of q on " + device_name(q.device) +
           " is only supported by the cpu and reference backends; CUDA backends take fp16 or bf16");
    }
    if (head_dim > kMaxCudaHeadDim) {
      fail("head_dim=" + std::to_string(head_dim) + " is larger than " +
           std::to_string(kMaxCudaHeadDim) + ", the largest head_dim of the CUDA backends");
    }
    for (auto [name, t] : {std::pair{"q", &q}, {"out", &out}}) {
      check_cuda_alignment(name, *t, shape.q_dims);
    }
    for (auto [name, t] : {std::pair{"k", &k}, {"v", &v}}) {
      check_cuda_alignment(name, *t, shape.kv_dims);
    }
    check_serving_cuda_alignment(args, layout);
    // What a CUDA backend's kernels cannot run at all (fp8 today) is said before whether this
    // machine has the backend, so the answer is the same everywhere.
    check_cuda_backends_run(args.backend, q.dtype, layout);
#ifdef FLASHCORE_HAS_CUDA
    // An explicit backend that cannot run says so before the pointer checks, which would only
    // report the symptom ("not device memory") when there is no device at all.
    if (is_cuda_backend(args.backend)) {
      std::string reason = backend_unavailable_reason(args.backend, q.device.index);
      if (!reason.empty()) {
        fail(std::string("backend ") + to_string(args.backend) +
             " requested but not available: " + reason);
      }
    }
    const DeviceInfo& device = device_info(q.device.index);
    if (!device.present) {
      fail("q is on " + device_name(q.device) + " but there is no such CUDA device");
    }
    num_sms = schedulable_sms(device.num_sms);
    if (!args.device_pointers_verified) check_device_pointers(args);
#endif
  }

  AttentionParams p;
  p.q = q.data;
  p.k = k.data;
  p.v = v.data;
  p.out = out.data;
  p.lse = args.lse ? static_cast<float*>(args.lse->data) : nullptr;
  p.dtype = q.dtype;
  fill_fp8_params(args, p);  // out_dtype, descales
  p.batch = static_cast<int>(shape.batch);
  p.seqlen_q = static_cast<int>(shape.seqlen_q);
  p.seqlen_k = static_cast<int>(shape.seqlen_k);
  p.heads_q = static_cast<int>(heads_q);
  p.heads_kv = static_cast<int>(heads_kv);
  p.head_dim = static_cast<int>(head_dim);
  // Rank 4 is [batch (or page), rows, heads, d]; rank 3 is packed [rows, heads, d], batch
  // stride 0 (the accessors find a packed sequence's rows through cu_seqlens).
  auto set_strides = [](const TensorView& t, int64_t& batch, int64_t& row, int64_t& head) {
    const int r = t.ndim;
    batch = r == 4 ? t.strides[0] : 0;
    row = t.strides[r - 3];
    head = t.strides[r - 2];
  };
  set_strides(q, p.q_batch_stride, p.q_row_stride, p.q_head_stride);
  set_strides(k, p.k_batch_stride, p.k_row_stride, p.k_head_stride);
  set_strides(v, p.v_batch_stride, p.v_row_stride, p.v_head_stride);
  set_strides(out, p.o_batch_stride, p.o_row_stride, p.o_head_stride);
  if (args.lse) {  // [batch, heads_q, seqlen_q] or packed [heads_q, total_q]
    const TensorView& lse = *args.lse;
    p.lse_batch_stride = lse.ndim == 3 ? lse.strides[0] : 0;
    p.lse_head_stride = lse.strides[lse.ndim - 2];
  }
  p.set_softmax_scale(scale);
  p.causal = needs_causal_mask(args.causal, shape.seqlen_q);
  p.device_index = on_cuda ? q.device.index : 0;
  p.stream = args.stream;
  // Set by run_cuda from the caller's workspace (sm90 only); the sm90 launcher zeroes it on the
  // stream right before a launch that claims tiles.
  p.tile_counters = nullptr;
  p.num_sms = num_sms;
  if (!layout.dense()) {
    fill_serving_params(args, layout, p);
    if (index_values_checked(args)) check_index_values(args, p);
  }
  return p;
}

std::string backend_unavailable_reason(Backend backend, int device_index) {
  if (backend == Backend::kCPU || backend == Backend::kReference) return "";
  if (!is_cuda_backend(backend)) return "it is not a concrete backend";
#ifdef FLASHCORE_HAS_CUDA
  if (compiled_head_dims(backend).empty()) {
    return std::string("no ") + to_string(backend) + " kernels were compiled in";
  }
  const DeviceInfo& info = device_info(device_index);
  if (!info.present) return "no CUDA device cuda:" + std::to_string(device_index);
  std::string arch = "sm_" + std::to_string(info.cc_major) + std::to_string(info.cc_minor);
  if (backend == Backend::kSM90 && !(info.cc_major == 9 && info.cc_minor == 0)) {
    return "device cuda:" + std::to_string(device_index) + " is " + arch + " (needs sm_90)";
  }
  if (backend == Backend::kSM80 && info.cc_major < 8) {
    return "device cuda:" + std::to_string(device_index) + " is " + arch + " (needs sm_80+)";
  }
  return "";
#else
  (void)device_index;
  return "CUDA backends were not compiled in (built without nvcc)";
#endif
}

void validate_for_backend(const AttentionParams& params, Backend backend) {
  std::string reason = backend_unavailable_reason(backend, params.device_index);
  if (!reason.empty()) {
    fail(std::string("backend ") + to_string(backend) + " requested but not available: " + reason);
  }
  if (!is_cuda_backend(backend)) return;
  const std::vector<int>& dims = compiled_head_dims(backend);
  bool supported = false;
  std::string list;
  for (int dim : dims) {
    supported = supported || dim == params.head_dim;
    list += (list.empty() ? "" : ", ") + std::to_string(dim);
  }
  if (!supported) {
    fail("head_dim=" + std::to_string(params.head_dim) + " is not supported by backend " +
         to_string(backend) + "; supported: " + list);
  }
  if (find_kernel(backend, params.dtype, params.head_dim, params.causal) == nullptr) {
    fail(std::string("no ") + to_string(backend) + " kernel compiled for dtype " +
         to_string(params.dtype) + ", head_dim=" + std::to_string(params.head_dim) +
         (params.causal ? ", causal" : ", non-causal") +
         " (rebuild with it in FLASHCORE_DTYPES / FLASHCORE_HEAD_DIMS)");
  }
}

}  // namespace flashcore::detail

namespace flashcore {

size_t attention_workspace_bytes(const AttentionArgs& args) {
  if (args.q.device.type != DeviceType::kCUDA) return 0;
  return std::max(detail::split_kv_workspace_bytes(args), detail::kTileCounterWorkspaceBytes);
}

}  // namespace flashcore
