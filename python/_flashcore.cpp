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
//   attention_serving(...) / attention_serving_raw(...)   (_flashcore_serving.cpp)
//                                                 the same with the serving layouts' arguments
//                                                 (varlen cu_seqlens, kv cache, page table,
//                                                 append; flashcore.h), kept apart so that the
//                                                 dense calls' argument parsing stays as short.
// Every call takes the fp8 descale factors q_descale, k_descale, v_descale (float32
// [batch, heads_kv], None: 1.0) as its last tensor arguments; out's dtype selects the output
// dtype of an fp8 call (bfloat16 or float16), as in the C++ API.
// The dense calls take an optional workspace (device pointer as an int, and its size in bytes)
// of at least attention_workspace_bytes(q, k, causal) bytes; the Python wrappers allocate it
// with the array's own allocator (torch's caching allocator: free, and safe under CUDA graph
// capture). The serving calls instead take that allocator as a callable, asked once the
// library has sized the call, so that one crossing into C++ both sizes and runs it.
// flashcore::Error becomes flashcore.FlashCoreError (a ValueError) with the same message; an
// argument of the wrong type (not an array at all) becomes flashcore.FlashCoreTypeError, which is
// both a FlashCoreError and a TypeError.
//
// Files: _flashcore_views.{h,cpp} turn arrays into TensorViews; _flashcore_serving.cpp holds the
// serving entry points; this file the dense ones and the module.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "_flashcore_views.h"
#include "flashcore/flashcore.h"

namespace nb = nanobind;
using flashcore::Error;
using flashcore::TensorView;
using namespace flashcore::python;

namespace flashcore::python {
// _flashcore_serving.cpp: attention_serving and attention_serving_raw.
void register_serving(nb::module_& m);
}  // namespace flashcore::python

namespace {

// The fp8 descale factors of a call (absent: 1.0).
struct Descales {
  std::optional<TensorView> q, k, v;
};

flashcore::AttentionArgs make_args(TensorView q, TensorView k, TensorView v, TensorView out,
                                   std::optional<TensorView> lse, const Descales& descales,
                                   std::optional<float> softmax_scale, bool causal,
                                   const std::string& backend, uintptr_t stream,
                                   uintptr_t workspace, size_t workspace_bytes) {
  flashcore::AttentionArgs args;
  args.q_descale = descales.q;
  args.k_descale = descales.k;
  args.v_descale = descales.v;
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

// The arrays of one DLPack call, imported in argument order so that the first bad argument is
// the one named. They live until the call returns: a producer may tie the memory's lifetime to
// its DLPack export.
struct DlpackArrays {
  InputArray q, k, v;
  OutputArray out;
  std::optional<OutputArray> lse;
  std::optional<InputArray> q_descale, k_descale, v_descale;
};

std::optional<InputArray> optional_input(nb::handle value, const char* name) {
  if (value.is_none()) return std::nullopt;
  return input_array(value, name);
}

DlpackArrays import_arrays(nb::handle q, nb::handle k, nb::handle v, nb::handle out,
                           nb::handle lse, nb::handle q_descale, nb::handle k_descale,
                           nb::handle v_descale) {
  DlpackArrays arrays{input_array(q, "q"), input_array(k, "k"), input_array(v, "v"),
                      output_array(out, "out")};
  if (!lse.is_none()) arrays.lse = output_array(lse, "lse");
  arrays.q_descale = optional_input(q_descale, "q_descale");
  arrays.k_descale = optional_input(k_descale, "k_descale");
  arrays.v_descale = optional_input(v_descale, "v_descale");
  return arrays;
}

std::optional<TensorView> descale_view(const std::optional<InputArray>& array,
                                       const char* name) {
  if (!array) return std::nullopt;
  return view_of(*array, name, kDescaleSlot);
}

std::optional<TensorView> descale_view_raw(const std::optional<RawTensor>& raw,
                                           const char* name) {
  if (!raw) return std::nullopt;
  return view_of_raw(*raw, name, kDescaleSlot);
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
  const Descales descales{descale_view(a.q_descale, "q_descale"),
                          descale_view(a.k_descale, "k_descale"),
                          descale_view(a.v_descale, "v_descale")};
  return make_args(q_view, k_view, v_view, out_view, lse_view, descales, softmax_scale, causal,
                   backend, stream, workspace, workspace_bytes);
}

std::string forward_dlpack(nb::handle q, nb::handle k, nb::handle v, nb::handle out,
                           nb::handle lse, std::optional<float> softmax_scale, bool causal,
                           const std::string& backend, uintptr_t stream, uintptr_t workspace,
                           size_t workspace_bytes, nb::handle q_descale, nb::handle k_descale,
                           nb::handle v_descale) {
  const DlpackArrays arrays = import_arrays(q, k, v, out, lse, q_descale, k_descale, v_descale);
  return run(args_of_dlpack(arrays, softmax_scale, causal, backend, stream, workspace,
                            workspace_bytes));
}

// device_pointers_verified: the caller took every pointer from a tensor that knows its device
// (flashcore.torch); see AttentionArgs::device_pointers_verified.
std::string forward_raw(const RawTensor& q, const RawTensor& k, const RawTensor& v,
                        const RawTensor& out, const std::optional<RawTensor>& lse,
                        std::optional<float> softmax_scale, bool causal,
                        const std::string& backend, uintptr_t stream, uintptr_t workspace,
                        size_t workspace_bytes, bool device_pointers_verified,
                        const std::optional<RawTensor>& q_descale,
                        const std::optional<RawTensor>& k_descale,
                        const std::optional<RawTensor>& v_descale) {
  const TensorView q_view = view_of_raw(q, "q"), k_view = view_of_raw(k, "k");
  const TensorView v_view = view_of_raw(v, "v"), out_view = view_of_raw(out, "out");
  std::optional<TensorView> lse_view;
  if (lse) lse_view = view_of_raw(*lse, "lse");
  const Descales descales{descale_view_raw(q_descale, "q_descale"),
                          descale_view_raw(k_descale, "k_descale"),
                          descale_view_raw(v_descale, "v_descale")};
  flashcore::AttentionArgs args = make_args(q_view, k_view, v_view, out_view, lse_view, descales,
                                            softmax_scale, causal, backend, stream, workspace,
                                            workspace_bytes);
  args.device_pointers_verified = device_pointers_verified;
  return run(args);
}

std::string select_dlpack(nb::handle q, nb::handle k, nb::handle v, nb::handle out,
                          nb::handle lse, std::optional<float> softmax_scale, bool causal,
                          const std::string& backend, nb::handle q_descale,
                          nb::handle k_descale, nb::handle v_descale) {
  const DlpackArrays arrays = import_arrays(q, k, v, out, lse, q_descale, k_descale, v_descale);
  return flashcore::to_string(flashcore::select_backend(args_of_dlpack(
      arrays, softmax_scale, causal, backend, /*stream=*/0, /*workspace=*/0,
      /*workspace_bytes=*/0)));
}

// select_backend for raw tensor tuples (NumPy bfloat16 and float8_e4m3fn arrays: no DLPack).
std::string select_raw(const RawTensor& q, const RawTensor& k, const RawTensor& v,
                       const RawTensor& out, std::optional<float> softmax_scale, bool causal,
                       const std::string& backend, const std::optional<RawTensor>& q_descale,
                       const std::optional<RawTensor>& k_descale,
                       const std::optional<RawTensor>& v_descale) {
  const Descales descales{descale_view_raw(q_descale, "q_descale"),
                          descale_view_raw(k_descale, "k_descale"),
                          descale_view_raw(v_descale, "v_descale")};
  return flashcore::to_string(flashcore::select_backend(make_args(
      view_of_raw(q, "q"), view_of_raw(k, "k"), view_of_raw(v, "v"), view_of_raw(out, "out"),
      std::nullopt, descales, softmax_scale, causal, backend, /*stream=*/0, /*workspace=*/0,
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
        nb::arg("workspace_bytes") = 0, nb::arg("q_descale").none() = nb::none(),
        nb::arg("k_descale").none() = nb::none(), nb::arg("v_descale").none() = nb::none(),
        "Runs attention on DLPack tensors (BSHD). Returns the name of the backend that ran.");
  m.def("attention_forward_raw", &forward_raw, nb::arg("q"), nb::arg("k"), nb::arg("v"),
        nb::arg("out"), nb::arg("lse").none() = nb::none(),
        nb::arg("softmax_scale").none() = nb::none(), nb::arg("causal") = false,
        nb::arg("backend") = "auto", nb::arg("stream") = 0, nb::arg("workspace") = 0,
        nb::arg("workspace_bytes") = 0, nb::arg("device_pointers_verified") = false,
        nb::arg("q_descale").none() = nb::none(), nb::arg("k_descale").none() = nb::none(),
        nb::arg("v_descale").none() = nb::none(),
        "Like attention_forward, tensors given as (data_ptr, dtype_code, device_code, "
        "device_index, shape, strides) tuples.");
  register_serving(m);
  m.def("select_backend", &select_dlpack, nb::arg("q"), nb::arg("k"), nb::arg("v"),
        nb::arg("out"), nb::arg("lse").none() = nb::none(),
        nb::arg("softmax_scale").none() = nb::none(), nb::arg("causal") = false,
        nb::arg("backend") = "auto", nb::arg("q_descale").none() = nb::none(),
        nb::arg("k_descale").none() = nb::none(), nb::arg("v_descale").none() = nb::none(),
        "The backend attention_forward would run for these arguments, or FlashCoreError.");
  m.def("select_backend_raw", &select_raw, nb::arg("q"), nb::arg("k"), nb::arg("v"),
        nb::arg("out"), nb::arg("softmax_scale").none() = nb::none(), nb::arg("causal") = false,
        nb::arg("backend") = "auto", nb::arg("q_descale").none() = nb::none(),
        nb::arg("k_descale").none() = nb::none(), nb::arg("v_descale").none() = nb::none(),
        "select_backend for tensors given as raw tensor tuples.");
  m.def(
      "attention_workspace_bytes",
      [](nb::handle q, nb::handle k, bool causal) {
        const InputArray q_array = input_array(q, "q");
        std::optional<InputArray> k_array;
        if (!k.is_none()) k_array = input_array(k, "k");
        const auto view = [](const InputArray& a, const char* n) { return view_of(a, n); };
        return workspace_bytes_for(q_array, k_array, causal, view);
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
