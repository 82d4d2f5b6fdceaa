// nanobind module `flashcore._flashcore`: turns Python tensors into flashcore::TensorView and calls
// the C++ API. Thin on purpose: every check lives in the library, which names the argument.
//
// Two ways in:
//   attention_forward(q, k, v, out, lse, ...)      any DLPack tensor (NumPy, PyTorch, CuPy, JAX)
//   attention_forward_raw(q, k, v, out, lse, ...)  (data_ptr, dtype, device_type, device_index,
//                                                   shape, strides) tuples: the PyTorch op uses it
//                                                   because torch's __dlpack__() without a stream
//                                                   synchronises with the legacy default stream,
//                                                   which breaks CUDA graph capture, and refuses
//                                                   tensors that require grad.
//   attention_serving(...) / attention_serving_raw(...)
//                                                 the same with the serving layouts' arguments
//                                                 (varlen cu_seqlens, kv cache, page table,
//                                                 append; flashcore.h), kept apart so that the
//                                                 dense calls' argument parsing stays as short.
// The dense calls take an optional workspace (device pointer as an int, and its size in bytes) of at least
// attention_workspace_bytes(q, k, causal) bytes; the Python wrappers allocate it with the array's
// own allocator (torch's caching allocator: free, and safe under CUDA graph capture). The
// serving calls instead take that allocator as a callable, asked once the library has sized the
// call, so that one crossing into C++ both sizes and runs it.
// flashcore::Error becomes flashcore.FlashCoreError (a ValueError) with the same message; an
// argument of the wrong type (not an array at all) becomes flashcore.FlashCoreTypeError, which is
// both a FlashCoreError and a TypeError.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "flashcore/flashcore.h"

namespace nb = nanobind;
using flashcore::Backend;
using flashcore::Device;
using flashcore::DeviceType;
using flashcore::DType;
using flashcore::Error;
using flashcore::TensorView;

namespace {

// Inputs may be read-only (e.g. NumPy views of constants); outputs must be writable.
using InputArray = nb::ndarray<nb::ro>;
using OutputArray = nb::ndarray<>;

// (data_ptr, dtype code, device type code, device index, shape, strides in elements).
using RawTensor =
    std::tuple<uintptr_t, int, int, int, std::vector<int64_t>, std::vector<int64_t>>;
// Codes of RawTensor, mirrored in flashcore/_arrays.py (RAW_*).
enum RawDType : int { kRawFloat16 = 0, kRawBFloat16 = 1, kRawFloat32 = 2, kRawInt32 = 3 };
enum RawDevice : int { kRawCPU = 0, kRawCUDA = 1 };

constexpr int kBitsHalf = 16;
constexpr int kBitsSingle = 32;
constexpr int kBitsInt32 = 32;
constexpr int kBitsBool = 8;  // DLPack stores a bool in a byte
constexpr uint8_t kDLPackOpaqueHandle = 3;

// A wrong-type argument: raised as flashcore.FlashCoreTypeError (a FlashCoreError and a TypeError).
struct ArgumentTypeError : Error {
  using Error::Error;
};

// The dtype as NumPy, PyTorch and ml_dtypes name it (complex64, bool, float8_e4m3fn, ...), so
// that an error names the dtype the caller knows.
std::string describe_dtype(const nb::dlpack::dtype& dt) {
  using Code = nb::dlpack::dtype_code;
  const std::string bits = std::to_string(dt.bits);
  std::string name;
  switch (static_cast<Code>(dt.code)) {
    case Code::Int: name = "int" + bits; break;
    case Code::UInt: name = "uint" + bits; break;
    case Code::Float: name = "float" + bits; break;
    case Code::Bfloat: name = "bfloat" + bits; break;
    case Code::Complex: name = "complex" + bits; break;  // bits of both parts: complex64
    case Code::Bcomplex: name = "bcomplex" + bits; break;
    case Code::Bool: name = dt.bits == kBitsBool ? "bool" : "bool" + bits; break;
    case Code::Float8_E3M4: name = "float8_e3m4"; break;
    case Code::Float8_E4M3: name = "float8_e4m3"; break;
    case Code::Float8_E4M3B11FNUZ: name = "float8_e4m3b11fnuz"; break;
    case Code::Float8_E4M3FN: name = "float8_e4m3fn"; break;
    case Code::Float8_E4M3FNUZ: name = "float8_e4m3fnuz"; break;
    case Code::Float8_E5M2: name = "float8_e5m2"; break;
    case Code::Float8_E5M2FNUZ: name = "float8_e5m2fnuz"; break;
    case Code::Float8_E8M0FNU: name = "float8_e8m0fnu"; break;
    case Code::Float6_E2M3FN: name = "float6_e2m3fn"; break;
    case Code::Float6_E3M2FN: name = "float6_e3m2fn"; break;
    case Code::Float4_E2M1FN: name = "float4_e2m1fn"; break;
    default:
      name = dt.code == kDLPackOpaqueHandle
                 ? "opaque handle (DLPack type code 3)"
                 : "DLPack type code " + std::to_string(dt.code) + " of " + bits + " bits";
  }
  if (dt.lanes != 1) name += " x " + std::to_string(dt.lanes) + " lanes";
  return name;
}

DType dtype_of(const nb::dlpack::dtype& dt, const char* name) {
  const auto code = static_cast<nb::dlpack::dtype_code>(dt.code);
  if (dt.lanes == 1) {
    if (code == nb::dlpack::dtype_code::Float && dt.bits == kBitsHalf) return DType::kFloat16;
    if (code == nb::dlpack::dtype_code::Bfloat && dt.bits == kBitsHalf) return DType::kBFloat16;
    if (code == nb::dlpack::dtype_code::Float && dt.bits == kBitsSingle) return DType::kFloat32;
  }
  throw Error(std::string(name) + " has dtype " + describe_dtype(dt) +
              ", expected float16, bfloat16 or float32");
}

Device device_of(int dlpack_device_type, int device_id, const char* name) {
  if (dlpack_device_type == nb::device::cpu::value ||
      dlpack_device_type == nb::device::cuda_host::value) {  // pinned host memory is host memory
    return Device{DeviceType::kCPU, 0};
  }
  if (dlpack_device_type == nb::device::cuda::value) return Device{DeviceType::kCUDA, device_id};
  throw Error(std::string(name) + " is on DLPack device type " +
              std::to_string(dlpack_device_type) + ", expected cpu (1) or cuda (2)");
}

// The dimensions of each tensor of a dense call, as the library's messages name them.
const char* dense_dims(const char* name) {
  return std::string(name) == "lse" ? "[batch, heads_q, seqlen_q]"
                                    : "[batch, seqlen, heads, head_dim]";
}

// The library's rank message (validate.cpp), for the ranks a TensorView cannot hold (0, or more
// than kMaxDims): one wording for every tensor wherever the check runs. `dims` names the
// dimensions expected, "[batch + 1]" say; its rank is its count of commas plus one.
void check_rank(const std::vector<int64_t>& shape, const char* name, const char* dims) {
  if (!shape.empty() && shape.size() <= static_cast<size_t>(flashcore::kMaxDims)) return;
  const std::string expected(dims);
  const auto rank = 1 + std::count(expected.begin(), expected.end(), ',');
  std::string text = std::string(name) + " must have " + std::to_string(rank) +
                     (rank == 1 ? " dimension " : " dimensions ") + expected + ", got " +
                     std::to_string(shape.size()) + " (shape [";
  for (size_t i = 0; i < shape.size(); ++i) text += (i ? ", " : "") + std::to_string(shape[i]);
  throw Error(text + "])");
}

template <typename Array>
std::vector<int64_t> shape_of(const Array& array) {
  std::vector<int64_t> shape(array.ndim());
  for (size_t i = 0; i < array.ndim(); ++i) shape[i] = static_cast<int64_t>(array.shape(i));
  return shape;
}

// str(value) of a Python object (nb::str of an attribute accessor would take it as a str as is).
std::string text_of(nb::handle value) { return nb::str(value).c_str(); }

// An argument nanobind could not import (DLPack, then the buffer protocol): an array of a dtype
// DLPack has no code for (NumPy object, str, datetime, float128, big-endian...) is named with
// its own dtype; anything else is not an array.
[[noreturn]] void throw_not_importable(nb::handle value, const char* name) {
  if (nb::hasattr(value, "dtype") && nb::hasattr(value, "shape")) {
    throw Error(std::string(name) + " has dtype " + text_of(nb::object(value.attr("dtype"))) +
                ", expected float16, bfloat16 or float32");
  }
  throw ArgumentTypeError(std::string(name) +
                          " must be a NumPy array, a torch.Tensor or a DLPack array (CuPy, JAX), "
                          "got " + text_of(nb::object(value.type().attr("__name__"))));
}

// Inputs may be read-only (e.g. NumPy views of constants).
InputArray input_array(nb::handle value, const char* name) {
  InputArray array;
  if (!nb::try_cast(value, array, /*convert=*/false)) throw_not_importable(value, name);
  return array;
}

// Outputs must be writable: a read-only array (NumPy with flags.writeable=False, any DLPack
// export flagged read-only) is named as such rather than left to a generic signature mismatch.
// `why` says what is written there ("the result is written into out", by default).
OutputArray output_array(nb::handle value, const char* name, const std::string& why = "") {
  OutputArray array;
  if (nb::try_cast(value, array, /*convert=*/false)) return array;
  InputArray read_only;
  if (nb::try_cast(value, read_only, /*convert=*/false)) {
    throw Error(std::string(name) + " is read-only: " +
                (why.empty() ? "the result is written into " + std::string(name) : why) +
                ", so pass a writable array (a NumPy array with flags.writeable=False is "
                "read-only)");
  }
  throw_not_importable(value, name);
}

// An empty tensor's strides carry no meaning (NumPy exports zeros for them): give it row-major
// ones so that stride checks only ever judge tensors that have elements.
void normalize_empty_strides(TensorView& view) {
  if (view.numel() != 0) return;
  int64_t stride = 1;
  for (int i = view.ndim - 1; i >= 0; --i) {
    view.strides[i] = stride;
    stride *= view.shape[i] > 0 ? view.shape[i] : 1;
  }
}

// The dtype of an index tensor of the serving layouts (cu_seqlens, page_table, ...): int32 only,
// as the kernels read them; an int64 tensor (torch's default) is named, not converted.
DType index_dtype_of(const nb::dlpack::dtype& dt, const char* name) {
  if (dt.lanes == 1 && static_cast<nb::dlpack::dtype_code>(dt.code) == nb::dlpack::dtype_code::Int &&
      dt.bits == kBitsInt32) {
    return DType::kInt32;
  }
  throw Error(std::string(name) + " must be int32, got " + describe_dtype(dt));
}

// What a tensor slot expects: its dimensions as messages name them (nullptr: those of a dense
// call) and whether it holds indices (int32) rather than values (float16/bfloat16/float32).
struct Slot {
  const char* dims = nullptr;
  bool index = false;
};

const char* dims_of(const char* name, Slot slot) {
  return slot.dims != nullptr ? slot.dims : dense_dims(name);
}

template <typename Array>
TensorView view_of(const Array& array, const char* name, Slot slot = {}) {
  check_rank(shape_of(array), name, dims_of(name, slot));
  TensorView view;
  view.data = const_cast<void*>(static_cast<const void*>(array.data()));
  view.dtype = slot.index ? index_dtype_of(array.dtype(), name) : dtype_of(array.dtype(), name);
  view.device = device_of(array.device_type(), array.device_id(), name);
  view.ndim = static_cast<int>(array.ndim());
  for (size_t i = 0; i < array.ndim(); ++i) {
    view.shape[i] = static_cast<int64_t>(array.shape(i));
    view.strides[i] = array.stride(i);
  }
  normalize_empty_strides(view);
  return view;
}

TensorView view_of_raw(const RawTensor& raw, const char* name, Slot slot = {}) {
  const auto& [data_ptr, dtype_code, device_code, device_index, shape, strides] = raw;
  check_rank(shape, name, dims_of(name, slot));
  if (strides.size() != shape.size()) {
    throw Error(std::string(name) + " has " + std::to_string(strides.size()) + " strides for " +
                std::to_string(shape.size()) + " dimensions");
  }
  TensorView view;
  view.data = reinterpret_cast<void*>(data_ptr);
  switch (dtype_code) {
    case kRawFloat16: view.dtype = DType::kFloat16; break;
    case kRawBFloat16: view.dtype = DType::kBFloat16; break;
    case kRawFloat32: view.dtype = DType::kFloat32; break;
    case kRawInt32: view.dtype = DType::kInt32; break;
    default:
      throw Error(std::string(name) + " has raw dtype code " + std::to_string(dtype_code) +
                  ", expected 0 (float16), 1 (bfloat16), 2 (float32) or 3 (int32)");
  }
  if (slot.index && view.dtype != DType::kInt32) {
    throw Error(std::string(name) + " must be int32, got " + flashcore::to_string(view.dtype));
  }
  if (device_code != kRawCPU && device_code != kRawCUDA) {
    throw Error(std::string(name) + " has raw device code " + std::to_string(device_code) +
                ", expected 0 (cpu) or 1 (cuda)");
  }
  view.device = device_code == kRawCUDA ? Device{DeviceType::kCUDA, device_index}
                                        : Device{DeviceType::kCPU, 0};
  view.ndim = static_cast<int>(shape.size());
  for (size_t i = 0; i < shape.size(); ++i) {
    view.shape[i] = shape[i];
    view.strides[i] = strides[i];
  }
  normalize_empty_strides(view);
  return view;
}

flashcore::AttentionArgs make_args(TensorView q, TensorView k, TensorView v, TensorView out,
                                   std::optional<TensorView> lse,
                                   std::optional<float> softmax_scale, bool causal,
                                   const std::string& backend, uintptr_t stream,
                                   uintptr_t workspace, size_t workspace_bytes) {
  flashcore::AttentionArgs args;
  args.q = q;
  args.k = k;
  args.v = v;
  args.out = out;
  args.lse = lse;
  args.softmax_scale = softmax_scale;
  args.causal = causal;
  args.backend = flashcore::parse_backend(backend);
  args.stream = reinterpret_cast<CUstream_st*>(stream);
  args.workspace = reinterpret_cast<void*>(workspace);
  args.workspace_bytes = workspace_bytes;
  return args;
}

// Runs without the GIL: the CPU backend is multi-threaded and may take a while; the caller's
// Python objects keep every buffer alive for the duration of the call.
std::string run(const flashcore::AttentionArgs& args) {
  Backend ran;
  {
    nb::gil_scoped_release no_gil;
    ran = flashcore::attention_forward(args);
  }
  return flashcore::to_string(ran);
}

// The arrays of one DLPack call, imported in argument order so that the first bad argument is
// the one named. They live until the call returns: a producer may tie the memory's lifetime to
// its DLPack export.
struct DlpackArrays {
  InputArray q, k, v;
  OutputArray out;
  std::optional<OutputArray> lse;
};

DlpackArrays import_arrays(nb::handle q, nb::handle k, nb::handle v, nb::handle out,
                           nb::handle lse) {
  DlpackArrays arrays{input_array(q, "q"), input_array(k, "k"), input_array(v, "v"),
                      output_array(out, "out"), std::nullopt};
  if (!lse.is_none()) arrays.lse = output_array(lse, "lse");
  return arrays;
}

flashcore::AttentionArgs args_of_dlpack(const DlpackArrays& a,
                                        std::optional<float> softmax_scale, bool causal,
                                        const std::string& backend, uintptr_t stream,
                                        uintptr_t workspace, size_t workspace_bytes) {
  const TensorView q_view = view_of(a.q, "q"), k_view = view_of(a.k, "k"),
                   v_view = view_of(a.v, "v");
  const TensorView out_view = view_of(a.out, "out");
  std::optional<TensorView> lse_view;
  if (a.lse) lse_view = view_of(*a.lse, "lse");
  return make_args(q_view, k_view, v_view, out_view, lse_view, softmax_scale, causal, backend,
                   stream, workspace, workspace_bytes);
}

std::string forward_dlpack(nb::handle q, nb::handle k, nb::handle v, nb::handle out,
                           nb::handle lse, std::optional<float> softmax_scale, bool causal,
                           const std::string& backend, uintptr_t stream, uintptr_t workspace,
                           size_t workspace_bytes) {
  const DlpackArrays arrays = import_arrays(q, k, v, out, lse);
  return run(args_of_dlpack(arrays, softmax_scale, causal, backend, stream, workspace,
                            workspace_bytes));
}

// device_pointers_verified: the caller took every pointer from a tensor that knows its device
// (flashcore.torch); see AttentionArgs::device_pointers_verified.
std::string forward_raw(const RawTensor& q, const RawTensor& k, const RawTensor& v,
                        const RawTensor& out, const std::optional<RawTensor>& lse,
                        std::optional<float> softmax_scale, bool causal,
                        const std::string& backend, uintptr_t stream, uintptr_t workspace,
                        size_t workspace_bytes, bool device_pointers_verified) {
  const TensorView q_view = view_of_raw(q, "q"), k_view = view_of_raw(k, "k");
  const TensorView v_view = view_of_raw(v, "v"), out_view = view_of_raw(out, "out");
  std::optional<TensorView> lse_view;
  if (lse) lse_view = view_of_raw(*lse, "lse");
  flashcore::AttentionArgs args = make_args(q_view, k_view, v_view, out_view, lse_view,
                                            softmax_scale, causal, backend, stream, workspace,
                                            workspace_bytes);
  args.device_pointers_verified = device_pointers_verified;
  return run(args);
}

std::string select_dlpack(nb::handle q, nb::handle k, nb::handle v, nb::handle out,
                          nb::handle lse, std::optional<float> softmax_scale, bool causal,
                          const std::string& backend) {
  const DlpackArrays arrays = import_arrays(q, k, v, out, lse);
  return flashcore::to_string(flashcore::select_backend(args_of_dlpack(
      arrays, softmax_scale, causal, backend, /*stream=*/0, /*workspace=*/0,
      /*workspace_bytes=*/0)));
}

// Workspace bytes of a call on q and k (k sets the sm90 split-KV partials' size; without it the
// answer covers any k, see flashcore.h).
// `view` describes one tensor (view_of for DLPack arrays, view_of_raw for raw tuples).
template <class Tensor, class View>
size_t workspace_bytes_for(const Tensor& q, const std::optional<Tensor>& k, bool causal,
                           View view) {
  flashcore::AttentionArgs args;
  args.q = view(q, "q");
  if (k) args.k = view(*k, "k");
  args.causal = causal;
  return flashcore::attention_workspace_bytes(args);
}

// ---- serving layouts (flashcore.h): varlen, kv cache, page table, append -----------------------

// The tensors of a serving call, by AttentionArgs member; absent ones are empty. `Tensor` is
// nb::handle (any DLPack array) or RawTensor.
template <class Tensor>
struct ServingTensors {
  Tensor q, k, v, out;
  std::optional<Tensor> lse, cu_seqlens_q, cu_seqlens_k, seqused_k, cache_seqlens, page_table,
      k_new, v_new;
};

// What each slot expects in the layout these arguments select (only rank messages use the
// dimensions: every other check is the library's).
struct ServingSlots {
  Slot q, kv, lse, kv_new;
};

template <class Tensor>
ServingSlots slots_of(const ServingTensors<Tensor>& t) {
  ServingSlots slots;
  const bool packed_q = t.cu_seqlens_q.has_value();
  if (packed_q) {
    slots.q.dims = "[total_q, heads_q, head_dim]";
    slots.lse.dims = "[heads_q, total_q]";
    slots.kv_new.dims = "[total_q, heads_kv, head_dim]";
  } else {
    slots.kv_new.dims = "[batch, seqlen_new, heads_kv, head_dim]";
  }
  if (t.page_table) {
    slots.kv.dims = "[num_pages, page_size, heads_kv, head_dim]";
  } else if (t.cache_seqlens) {
    slots.kv.dims = "[batch, capacity, heads_kv, head_dim]";
  } else if (t.cu_seqlens_k) {
    slots.kv.dims = "[total_k, heads_kv, head_dim]";
  }
  return slots;
}

// AttentionArgs of a serving call. `view(tensor, name, slot, why)` makes one TensorView; `why`
// is non-empty for tensors the call writes (out, lse, and the cache when k_new is appended).
// Tensors are viewed in argument order, so that the first bad one is the one named.
template <class Tensor, class View>
flashcore::AttentionArgs serving_args(const ServingTensors<Tensor>& t, View view) {
  const ServingSlots slots = slots_of(t);
  const bool appends = t.k_new.has_value() || t.v_new.has_value();
  const std::string cache_written = "the new keys and values are written into the cache";
  flashcore::AttentionArgs args;
  args.q = view(t.q, "q", slots.q, "");
  args.k = view(t.k, "k", slots.kv, appends ? cache_written : "");
  args.v = view(t.v, "v", slots.kv, appends ? cache_written : "");
  args.out = view(t.out, "out", slots.q, "the result is written into out");
  if (t.lse) args.lse = view(*t.lse, "lse", slots.lse, "the result is written into lse");
  const auto index = [&](const std::optional<Tensor>& tensor, const char* name,
                         const char* dims) -> std::optional<TensorView> {
    if (!tensor) return std::nullopt;
    return view(*tensor, name, Slot{dims, /*index=*/true}, "");
  };
  args.cu_seqlens_q = index(t.cu_seqlens_q, "cu_seqlens_q", "[batch + 1]");
  args.cu_seqlens_k = index(t.cu_seqlens_k, "cu_seqlens_k", "[batch + 1]");
  args.seqused_k = index(t.seqused_k, "seqused_k", "[batch]");
  args.cache_seqlens = index(t.cache_seqlens, "cache_seqlens", "[batch]");
  args.page_table = index(t.page_table, "page_table", "[batch, max_pages_per_seq]");
  if (t.k_new) args.k_new = view(*t.k_new, "k_new", slots.kv_new, "");
  if (t.v_new) args.v_new = view(*t.v_new, "v_new", slots.kv_new, "");
  return args;
}

// The scalar arguments of a serving call.
struct ServingOptions {
  int max_seqlen_q = 0, max_seqlen_k = 0;
  std::optional<float> softmax_scale;
  bool causal = false, check_indices = false, device_pointers_verified = false;
  std::string backend = "auto";
  uintptr_t stream = 0;
};

// Sizes the call's workspace and, when it needs one, asks `allocate_workspace(nbytes)` for it:
// a (keep-alive object, device pointer) pair from the arrays' own allocator, held until the
// call returns. None (host arrays, or an allocator FlashCore does not know): no workspace.
std::string run_serving(flashcore::AttentionArgs args, const ServingOptions& o,
                        nb::handle allocate_workspace) {
  args.max_seqlen_q = o.max_seqlen_q;
  args.max_seqlen_k = o.max_seqlen_k;
  args.softmax_scale = o.softmax_scale;
  args.causal = o.causal;
  args.check_indices = o.check_indices;
  args.device_pointers_verified = o.device_pointers_verified;
  args.backend = flashcore::parse_backend(o.backend);
  args.stream = reinterpret_cast<CUstream_st*>(o.stream);
  nb::object workspace;
  if (!allocate_workspace.is_none()) {
    const size_t nbytes = flashcore::attention_workspace_bytes(args);
    if (nbytes != 0) {
      const nb::tuple allocation = nb::cast<nb::tuple>(allocate_workspace(nbytes));
      workspace = allocation[0];
      args.workspace = reinterpret_cast<void*>(nb::cast<uintptr_t>(allocation[1]));
      args.workspace_bytes = nbytes;
    }
  }
  return run(args);
}

std::optional<nb::handle> present(nb::handle value) {
  if (value.is_none()) return std::nullopt;
  return value;
}

std::string serving_dlpack(nb::handle q, nb::handle k, nb::handle v, nb::handle out,
                           nb::handle lse, nb::handle cu_seqlens_q, nb::handle cu_seqlens_k,
                           int max_seqlen_q, int max_seqlen_k, nb::handle seqused_k,
                           nb::handle cache_seqlens, nb::handle page_table, nb::handle k_new,
                           nb::handle v_new, std::optional<float> softmax_scale, bool causal,
                           const std::string& backend, uintptr_t stream, bool check_indices,
                           nb::handle allocate_workspace) {
  const ServingTensors<nb::handle> tensors{
      q, k, v, out, present(lse), present(cu_seqlens_q), present(cu_seqlens_k),
      present(seqused_k), present(cache_seqlens), present(page_table), present(k_new),
      present(v_new)};
  // The imported arrays live until the call returns (a producer may tie the memory's lifetime
  // to its DLPack export).
  std::vector<InputArray> inputs;
  std::vector<OutputArray> outputs;
  inputs.reserve(12);
  outputs.reserve(5);
  const auto view = [&](nb::handle value, const char* name, Slot slot, const std::string& why) {
    if (why.empty()) return view_of(inputs.emplace_back(input_array(value, name)), name, slot);
    return view_of(outputs.emplace_back(output_array(value, name, why)), name, slot);
  };
  ServingOptions options;
  options.max_seqlen_q = max_seqlen_q;
  options.max_seqlen_k = max_seqlen_k;
  options.softmax_scale = softmax_scale;
  options.causal = causal;
  options.check_indices = check_indices;
  options.backend = backend;
  options.stream = stream;
  return run_serving(serving_args(tensors, view), options, allocate_workspace);
}

std::string serving_raw(const RawTensor& q, const RawTensor& k, const RawTensor& v,
                        const RawTensor& out, const std::optional<RawTensor>& lse,
                        const std::optional<RawTensor>& cu_seqlens_q,
                        const std::optional<RawTensor>& cu_seqlens_k, int max_seqlen_q,
                        int max_seqlen_k, const std::optional<RawTensor>& seqused_k,
                        const std::optional<RawTensor>& cache_seqlens,
                        const std::optional<RawTensor>& page_table,
                        const std::optional<RawTensor>& k_new,
                        const std::optional<RawTensor>& v_new,
                        std::optional<float> softmax_scale, bool causal,
                        const std::string& backend, uintptr_t stream, bool check_indices,
                        nb::handle allocate_workspace, bool device_pointers_verified) {
  const ServingTensors<RawTensor> tensors{q,         k,          v,           out,
                                          lse,       cu_seqlens_q, cu_seqlens_k, seqused_k,
                                          cache_seqlens, page_table, k_new,   v_new};
  const auto view = [](const RawTensor& raw, const char* name, Slot slot, const std::string&) {
    return view_of_raw(raw, name, slot);
  };
  ServingOptions options;
  options.max_seqlen_q = max_seqlen_q;
  options.max_seqlen_k = max_seqlen_k;
  options.softmax_scale = softmax_scale;
  options.causal = causal;
  options.check_indices = check_indices;
  options.device_pointers_verified = device_pointers_verified;
  options.backend = backend;
  options.stream = stream;
  return run_serving(serving_args(tensors, view), options, allocate_workspace);
}
}  // namespace

NB_MODULE(_flashcore, m) {
  m.doc() = "FlashCore C++ bindings (use the flashcore package, not this module directly)";

  nb::exception<Error> flashcore_error(m, "FlashCoreError", PyExc_ValueError);
  // FlashCoreTypeError(FlashCoreError, TypeError): `except TypeError` catches a wrong-type
  // argument as Python code expects, and `except FlashCoreError` still catches every error.
  // Registered after FlashCoreError, so its translator is tried first.
  nb::object bases = nb::make_tuple(flashcore_error, nb::handle(PyExc_TypeError));
  nb::object type_error = nb::steal(
      PyErr_NewException("flashcore._flashcore.FlashCoreTypeError", bases.ptr(), nullptr));
  if (!type_error.is_valid()) throw nb::python_error();
  m.attr("FlashCoreTypeError") = type_error;
  nb::register_exception_translator(
      [](const std::exception_ptr& thrown, void* payload) {
        try {
          std::rethrow_exception(thrown);
        } catch (const ArgumentTypeError& error) {
          PyErr_SetString(static_cast<PyObject*>(payload), error.what());
        }
      },
      type_error.ptr());  // the module attribute keeps the type alive

  m.def("attention_forward", &forward_dlpack, nb::arg("q"), nb::arg("k"), nb::arg("v"),
        nb::arg("out"), nb::arg("lse").none() = nb::none(),
        nb::arg("softmax_scale").none() = nb::none(), nb::arg("causal") = false,
        nb::arg("backend") = "auto", nb::arg("stream") = 0, nb::arg("workspace") = 0,
        nb::arg("workspace_bytes") = 0,
        "Runs attention on DLPack tensors (BSHD). Returns the name of the backend that ran.");
  m.def("attention_forward_raw", &forward_raw, nb::arg("q"), nb::arg("k"), nb::arg("v"),
        nb::arg("out"), nb::arg("lse").none() = nb::none(),
        nb::arg("softmax_scale").none() = nb::none(), nb::arg("causal") = false,
        nb::arg("backend") = "auto", nb::arg("stream") = 0, nb::arg("workspace") = 0,
        nb::arg("workspace_bytes") = 0, nb::arg("device_pointers_verified") = false,
        "Like attention_forward, tensors given as (data_ptr, dtype_code, device_code, "
        "device_index, shape, strides) tuples.");
  m.def("attention_serving", &serving_dlpack, nb::arg("q"), nb::arg("k"), nb::arg("v"),
        nb::arg("out"), nb::arg("lse").none() = nb::none(),
        nb::arg("cu_seqlens_q").none() = nb::none(), nb::arg("cu_seqlens_k").none() = nb::none(),
        nb::arg("max_seqlen_q") = 0, nb::arg("max_seqlen_k") = 0,
        nb::arg("seqused_k").none() = nb::none(), nb::arg("cache_seqlens").none() = nb::none(),
        nb::arg("page_table").none() = nb::none(), nb::arg("k_new").none() = nb::none(),
        nb::arg("v_new").none() = nb::none(), nb::arg("softmax_scale").none() = nb::none(),
        nb::arg("causal") = false, nb::arg("backend") = "auto", nb::arg("stream") = 0,
        nb::arg("check_indices") = false, nb::arg("allocate_workspace").none() = nb::none(),
        "Runs a serving-layout call (varlen, kv cache) on DLPack tensors; the AttentionArgs "
        "member names. allocate_workspace(nbytes) -> (keep_alive, pointer), or None. Returns "
        "the name of the backend that ran.");
  m.def("attention_serving_raw", &serving_raw, nb::arg("q"), nb::arg("k"), nb::arg("v"),
        nb::arg("out"), nb::arg("lse").none() = nb::none(),
        nb::arg("cu_seqlens_q").none() = nb::none(), nb::arg("cu_seqlens_k").none() = nb::none(),
        nb::arg("max_seqlen_q") = 0, nb::arg("max_seqlen_k") = 0,
        nb::arg("seqused_k").none() = nb::none(), nb::arg("cache_seqlens").none() = nb::none(),
        nb::arg("page_table").none() = nb::none(), nb::arg("k_new").none() = nb::none(),
        nb::arg("v_new").none() = nb::none(), nb::arg("softmax_scale").none() = nb::none(),
        nb::arg("causal") = false, nb::arg("backend") = "auto", nb::arg("stream") = 0,
        nb::arg("check_indices") = false, nb::arg("allocate_workspace").none() = nb::none(),
        nb::arg("device_pointers_verified") = false,
        "Like attention_serving, tensors given as raw tensor tuples (dtype code 3: int32).");
  m.def("select_backend", &select_dlpack, nb::arg("q"), nb::arg("k"), nb::arg("v"),
        nb::arg("out"), nb::arg("lse").none() = nb::none(),
        nb::arg("softmax_scale").none() = nb::none(), nb::arg("causal") = false,
        nb::arg("backend") = "auto",
        "The backend attention_forward would run for these arguments, or FlashCoreError.");
  m.def(
      "attention_workspace_bytes",
      [](nb::handle q, nb::handle k, bool causal) {
        const InputArray q_array = input_array(q, "q");
        std::optional<InputArray> k_array;
        if (!k.is_none()) k_array = input_array(k, "k");
        return workspace_bytes_for(q_array, k_array, causal, [](const InputArray& a, const char* n) {
          return view_of(a, n);
        });
      },
      nb::arg("q"), nb::arg("k").none() = nb::none(), nb::arg("causal") = false,
      "Bytes of device workspace a call on q (and k) needs (0 on the host).");
  m.def(
      "attention_workspace_bytes_raw",
      [](const RawTensor& q, const std::optional<RawTensor>& k, bool causal) {
        return workspace_bytes_for(q, k, causal, [](const RawTensor& raw, const char* n) {
          return view_of_raw(raw, n);
        });
      },
      nb::arg("q"), nb::arg("k").none() = nb::none(), nb::arg("causal") = false,
      "attention_workspace_bytes for tensors given as raw tensor tuples.");
  m.def(
      "backend_available",
      [](const std::string& backend, int device_index) {
        return flashcore::backend_available(flashcore::parse_backend(backend), device_index);
      },
      nb::arg("backend"), nb::arg("device_index") = 0,
      "Whether a backend was compiled in and can run here (a GPU of the right arch present).");
  m.def(
      "supported_head_dims",
      [](const std::string& backend) {
        return flashcore::supported_head_dims(flashcore::parse_backend(backend));
      },
      nb::arg("backend"), "Head dims a backend has kernels for (empty: any head_dim).");
  m.def("version", &flashcore::version, "The library version string.");
}
