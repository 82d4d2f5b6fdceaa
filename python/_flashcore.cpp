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
// Both take an optional workspace (device pointer as an int, and its size in bytes) of at least
// attention_workspace_bytes(q, k, causal) bytes; the Python wrappers allocate it with the array's
// own allocator (torch's caching allocator: free, and safe under CUDA graph capture).
// flashcore::Error becomes flashcore.FlashCoreError (a ValueError) with the same message; an
// argument of the wrong type (not an array at all) becomes flashcore.FlashCoreTypeError, which is
// both a FlashCoreError and a TypeError.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

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
enum RawDType : int { kRawFloat16 = 0, kRawBFloat16 = 1, kRawFloat32 = 2 };
enum RawDevice : int { kRawCPU = 0, kRawCUDA = 1 };

constexpr int kBitsHalf = 16;
constexpr int kBitsSingle = 32;
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

// The library's rank message (validate.cpp), for the ranks a TensorView cannot hold: one wording
// for every tensor wherever the check runs.
void check_rank(const std::vector<int64_t>& shape, const char* name) {
  if (!shape.empty() && shape.size() <= static_cast<size_t>(flashcore::kMaxDims)) return;
  const bool is_lse = std::string(name) == "lse";
  std::string text = std::string(name) + " must have " + (is_lse ? "3" : "4") + " dimensions " +
                     (is_lse ? "[batch, heads_q, seqlen_q]" : "[batch, seqlen, heads, head_dim]") +
                     ", got " + std::to_string(shape.size()) + " (shape [";
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
OutputArray output_array(nb::handle value, const char* name) {
  OutputArray array;
  if (nb::try_cast(value, array, /*convert=*/false)) return array;
  InputArray read_only;
  if (nb::try_cast(value, read_only, /*convert=*/false)) {
    throw Error(std::string(name) + " is read-only: the result is written into " + name +
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

template <typename Array>
TensorView view_of(const Array& array, const char* name) {
  check_rank(shape_of(array), name);
  TensorView view;
  view.data = const_cast<void*>(static_cast<const void*>(array.data()));
  view.dtype = dtype_of(array.dtype(), name);
  view.device = device_of(array.device_type(), array.device_id(), name);
  view.ndim = static_cast<int>(array.ndim());
  for (size_t i = 0; i < array.ndim(); ++i) {
    view.shape[i] = static_cast<int64_t>(array.shape(i));
    view.strides[i] = array.stride(i);
  }
  normalize_empty_strides(view);
  return view;
}

TensorView view_of_raw(const RawTensor& raw, const char* name) {
  const auto& [data_ptr, dtype_code, device_code, device_index, shape, strides] = raw;
  check_rank(shape, name);
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
    default:
      throw Error(std::string(name) + " has raw dtype code " + std::to_string(dtype_code) +
                  ", expected 0 (float16), 1 (bfloat16) or 2 (float32)");
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
        return workspace_bytes_for(q_array, k_array, causal, view_of<InputArray>);
      },
      nb::arg("q"), nb::arg("k").none() = nb::none(), nb::arg("causal") = false,
      "Bytes of device workspace a call on q (and k) needs (0 on the host).");
  m.def(
      "attention_workspace_bytes_raw",
      [](const RawTensor& q, const std::optional<RawTensor>& k, bool causal) {
        return workspace_bytes_for(q, k, causal, view_of_raw);
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
