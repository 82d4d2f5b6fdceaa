#include "api/validate.h"

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdint>
#include <sstream>

#include "api/kernel_registry.h"

#ifdef FLASHCORE_HAS_CUDA
#include "cuda/device_info.h"
#include "cuda/launchers.h"
#endif

namespace flashcore::detail {
namespace {

constexpr int kAttentionRank = 4;  // [batch, seqlen, heads, head_dim]
constexpr const char* kDimNames[kAttentionRank] = {"batch", "seqlen", "heads", "head_dim"};
constexpr const char* kAttentionDims = "[batch, seqlen, heads, head_dim]";
constexpr int kLseRank = 3;        // [batch, heads_q, seqlen_q]
constexpr const char* kLseDims = "[batch, heads_q, seqlen_q]";

[[noreturn]] void fail(const std::string& message) { throw Error(message); }

std::string shape_string(const TensorView& t) {
  std::ostringstream text;
  text << "[";
  for (int i = 0; i < t.ndim; ++i) text << (i ? ", " : "") << t.shape[i];
  text << "]";
  return text.str();
}

std::string address_string(const void* ptr) {
  std::ostringstream text;
  text << ptr;
  return text.str();
}

// One wording for every tensor, e.g. "q must have 4 dimensions [batch, seqlen, heads, head_dim],
// got 3 (shape [16, 4, 64])". The Python module words the ranks it checks itself (ranks a
// TensorView cannot hold, torch tensors) the same way.
void check_rank(const char* name, const TensorView& t, int rank, const char* dims) {
  if (t.ndim != rank) {
    fail(std::string(name) + " must have " + std::to_string(rank) + " dimensions " + dims +
         ", got " + std::to_string(t.ndim) + " (shape " + shape_string(t) + ")");
  }
}

// Sizes, strides and pointer of one tensor on its own.
void check_tensor(const char* name, const TensorView& t, int rank, const char* dims) {
  check_rank(name, t, rank, dims);
  for (int i = 0; i < rank; ++i) {
    if (t.shape[i] < 0) {
      fail(std::string("size of dim ") + std::to_string(i) + " of " + name +
           " must be >= 0, got " + std::to_string(t.shape[i]) + " " + shape_string(t));
    }
    if (t.shape[i] > INT_MAX) {
      fail(std::string("size of dim ") + std::to_string(i) + " of " + name + " is " +
           std::to_string(t.shape[i]) + ", larger than the supported " + std::to_string(INT_MAX));
    }
    if (t.strides[i] < 0) {
      fail(std::string("stride of dim ") + std::to_string(i) + " of " + name +
           " must be >= 0, got " + std::to_string(t.strides[i]));
    }
  }
  if (t.strides[rank - 1] != 1 && t.shape[rank - 1] > 1) {
    fail(std::string("stride of last dim of ") + name + " must be 1, got " +
         std::to_string(t.strides[rank - 1]));
  }
  if (t.data == nullptr && t.numel() > 0) {
    fail(std::string(name) + " has a null data pointer but " + std::to_string(t.numel()) +
         " elements " + shape_string(t));
  }
}

void check_same_dim(const char* name_a, const TensorView& a, const char* name_b,
                    const TensorView& b, int dim) {
  if (a.shape[dim] != b.shape[dim]) {
    fail(std::string(kDimNames[dim]) + " of " + name_a + " (" + std::to_string(a.shape[dim]) +
         ") does not match " + kDimNames[dim] + " of " + name_b + " (" +
         std::to_string(b.shape[dim]) + ")");
  }
}

void check_same_device(const char* name_a, const TensorView& a, const char* name_b,
                       const TensorView& b) {
  if (a.device.type != b.device.type || a.device.index != b.device.index) {
    fail(std::string(name_a) + " on " + device_name(a.device) + " but " + name_b + " on " +
         device_name(b.device));
  }
}

// [first byte, one past the last byte] a view can touch (strides are non-negative here).
struct ByteRange {
  uintptr_t begin = 0, end = 0;
};

ByteRange byte_range(const TensorView& t) {
  ByteRange range;
  if (t.numel() == 0) return range;
  int64_t last = 0;
  for (int i = 0; i < t.ndim; ++i) last += (t.shape[i] - 1) * t.strides[i];
  range.begin = reinterpret_cast<uintptr_t>(t.data);
  range.end = range.begin + static_cast<uintptr_t>((last + 1) * dtype_size(t.dtype));
  return range;
}

void check_no_overlap(const char* name_a, const TensorView& a, const char* name_b,
                      const TensorView& b) {
  ByteRange ra = byte_range(a), rb = byte_range(b);
  if (ra.begin == ra.end || rb.begin == rb.end) return;
  if (ra.begin < rb.end && rb.begin < ra.end) {
    fail(std::string(name_a) + " overlaps " + name_b + " in memory (" + name_a + " at " +
         address_string(a.data) + ", " + name_b + " at " + address_string(b.data) +
         "); the output must not alias an input");
  }
}

// Base pointer and the strides of dims 0..2 keep every row 16-byte aligned.
void check_cuda_alignment(const char* name, const TensorView& t) {
  if (reinterpret_cast<uintptr_t>(t.data) % kCudaAlignmentBytes != 0) {
    fail(std::string("data pointer of ") + name + " (" + address_string(t.data) +
         ") must be " + std::to_string(kCudaAlignmentBytes) + "-byte aligned for CUDA backends");
  }
  int64_t element_bytes = static_cast<int64_t>(dtype_size(t.dtype));
  for (int i = 0; i < t.ndim - 1; ++i) {
    int64_t stride_bytes = t.strides[i] * element_bytes;
    if (t.shape[i] > 1 && stride_bytes % kCudaAlignmentBytes != 0) {
      fail(std::string(kDimNames[i]) + " stride of " + name + " is " +
           std::to_string(t.strides[i]) + " elements (" + std::to_string(stride_bytes) +
           " bytes); CUDA backends need a multiple of " + std::to_string(kCudaAlignmentBytes) +
           " bytes so every row stays aligned");
    }
  }
}

void check_lse(const AttentionArgs& args, int64_t batch, int64_t heads_q, int64_t seqlen_q) {
  const TensorView& lse = *args.lse;
  check_rank("lse", lse, kLseRank, kLseDims);
  if (lse.shape[0] != batch || lse.shape[1] != heads_q || lse.shape[2] != seqlen_q) {
    fail("lse must have shape [" + std::to_string(batch) + ", " + std::to_string(heads_q) + ", " +
         std::to_string(seqlen_q) + "] (batch, heads_q, seqlen_q), got " + shape_string(lse));
  }
  if (lse.dtype != DType::kFloat32) {
    fail(std::string("lse must be fp32, got ") + to_string(lse.dtype));
  }
  check_tensor("lse", lse, kLseRank, kLseDims);  // strides and pointer, as for q/k/v/out
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
  const TensorView* all[] = {&args.q, &args.k, &args.v, &args.out,
                             args.lse ? &*args.lse : nullptr};
  const char* names[] = {"q", "k", "v", "out", "lse"};
  constexpr int kChecked = 5;
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

}  // namespace

bool is_cuda_backend(Backend backend) {
  return backend == Backend::kSM80 || backend == Backend::kSM90;
}

std::string device_name(const Device& device) {
  if (device.type == DeviceType::kCPU) return "cpu";
  return "cuda:" + std::to_string(device.index);
}

// The sm90 split-KV partials of a call that the sm90 backend may run: a Hopper device, fp16 /
// bf16, backend auto or sm90. The backend sizes them (launchers.h); without k (the Python helpers'
// q-only question) it gives its bound for any k.
size_t split_kv_workspace_bytes(const AttentionArgs& args) {
#ifdef FLASHCORE_HAS_CUDA
  const TensorView &q = args.q, &k = args.k;
  const bool half_precision = q.dtype == DType::kFloat16 || q.dtype == DType::kBFloat16;
  const bool may_run_sm90 = args.backend == Backend::kAuto || args.backend == Backend::kSM90;
  if (q.ndim != kAttentionRank || !half_precision || !may_run_sm90) return 0;
  const DeviceInfo& device = device_info(q.device.index);
  if (!device.present || device.cc_major != 9) return 0;
  Sm90WorkspaceQuery query;
  query.batch = q.shape[0];
  query.seqlen_q = q.shape[1];
  query.heads_q = q.shape[2];
  query.head_dim = q.shape[3];
  if (k.ndim == kAttentionRank) {
    query.seqlen_k = k.shape[1];
    query.heads_kv = k.shape[2];
  }
  query.causal_mask = needs_causal_mask(args.causal, query.seqlen_q);
  query.num_sms = device.num_sms;
  return sm90_split_kv_workspace_bytes(query);
#else
  (void)args;
  return 0;
#endif
}

AttentionParams validate_common(const AttentionArgs& args) {
  const TensorView &q = args.q, &k = args.k, &v = args.v, &out = args.out;
  check_tensor("q", q, kAttentionRank, kAttentionDims);
  check_tensor("k", k, kAttentionRank, kAttentionDims);
  check_tensor("v", v, kAttentionRank, kAttentionDims);
  check_tensor("out", out, kAttentionRank, kAttentionDims);

  check_same_device("q", q, "k", k);
  check_same_device("q", q, "v", v);
  check_same_device("q", q, "out", out);

  for (auto [name, t] : {std::pair{"k", &k}, {"v", &v}, {"out", &out}}) {
    if (t->dtype != q.dtype) {
      fail(std::string("dtype of ") + name + " (" + to_string(t->dtype) +
           ") does not match dtype of q (" + to_string(q.dtype) + ")");
    }
  }
  if (k.shape != v.shape) {
    fail("k and v must have the same shape, got k " + shape_string(k) + " and v " +
         shape_string(v));
  }
  for (int dim : {0, 3}) check_same_dim("q", q, "k", k, dim);
  check_same_dim("k", k, "v", v, 1);
  for (int dim = 0; dim < kAttentionRank; ++dim) check_same_dim("out", out, "q", q, dim);

  const int64_t heads_q = q.shape[2], heads_kv = k.shape[2], head_dim = q.shape[3];
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
  if (args.lse) check_lse(args, q.shape[0], heads_q, q.shape[1]);
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
    for (auto [name, t] : {std::pair{"q", &q}, {"k", &k}, {"v", &v}, {"out", &out}}) {
      check_cuda_alignment(name, *t);
    }
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
    num_sms = device.num_sms;
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
  p.batch = static_cast<int>(q.shape[0]);
  p.seqlen_q = static_cast<int>(q.shape[1]);
  p.seqlen_k = static_cast<int>(k.shape[1]);
  p.heads_q = static_cast<int>(heads_q);
  p.heads_kv = static_cast<int>(heads_kv);
  p.head_dim = static_cast<int>(head_dim);
  p.q_batch_stride = q.strides[0], p.q_row_stride = q.strides[1], p.q_head_stride = q.strides[2];
  p.k_batch_stride = k.strides[0], p.k_row_stride = k.strides[1], p.k_head_stride = k.strides[2];
  p.v_batch_stride = v.strides[0], p.v_row_stride = v.strides[1], p.v_head_stride = v.strides[2];
  p.o_batch_stride = out.strides[0], p.o_row_stride = out.strides[1];
  p.o_head_stride = out.strides[2];
  if (args.lse) p.lse_batch_stride = args.lse->strides[0], p.lse_head_stride = args.lse->strides[1];
  p.set_softmax_scale(scale);
  p.causal = needs_causal_mask(args.causal, q.shape[1]);
  p.device_index = on_cuda ? q.device.index : 0;
  p.stream = args.stream;
  // Set by run_cuda from the caller's workspace (sm90 only); the sm90 launcher zeroes it on the
  // stream right before a launch that claims tiles.
  p.tile_counters = nullptr;
  p.num_sms = num_sms;
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
