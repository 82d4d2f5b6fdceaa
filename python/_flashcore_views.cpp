// The tensor conversions of _flashcore_views.h.
#include "_flashcore_views.h"

#include <algorithm>

namespace flashcore::python {

constexpr int kBitsFloat8 = 8;
constexpr int kBitsHalf = 16;
constexpr int kBitsSingle = 32;
constexpr int kBitsInt32 = 32;
constexpr int kBitsBool = 8;  // DLPack stores a bool in a byte
constexpr uint8_t kDLPackOpaqueHandle = 3;
// The dtypes of q, k, v and out, as the messages list them.
constexpr const char* kValueDtypes = "float16, bfloat16, float32 or float8_e4m3fn";

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
    if (code == nb::dlpack::dtype_code::Float8_E4M3FN && dt.bits == kBitsFloat8) {
      return DType::kFloat8E4M3;
    }
  }
  throw Error(std::string(name) + " has dtype " + describe_dtype(dt) + ", expected " +
              kValueDtypes);
}

// The dtype of q_descale/k_descale/v_descale: float32 only, as the kernels read them.
DType scale_dtype_of(const nb::dlpack::dtype& dt, const char* name) {
  const auto code = static_cast<nb::dlpack::dtype_code>(dt.code);
  if (dt.lanes == 1 && code == nb::dlpack::dtype_code::Float && dt.bits == kBitsSingle) {
    return DType::kFloat32;
  }
  throw Error(std::string(name) + " must be float32, got " + describe_dtype(dt));
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

// str(value) of a Python object (nb::str of an attribute accessor would take it as a str as is).
std::string text_of(nb::handle value) { return nb::str(value).c_str(); }

// An argument nanobind could not import (DLPack, then the buffer protocol): an array of a dtype
// DLPack has no code for (NumPy object, str, datetime, float128, big-endian...) is named with
// its own dtype; anything else is not an array.
[[noreturn]] void throw_not_importable(nb::handle value, const char* name) {
  if (nb::hasattr(value, "dtype") && nb::hasattr(value, "shape")) {
    throw Error(std::string(name) + " has dtype " + text_of(nb::object(value.attr("dtype"))) +
                ", expected " + kValueDtypes);
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
OutputArray output_array(nb::handle value, const char* name, const std::string& why) {
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
  const auto code = static_cast<nb::dlpack::dtype_code>(dt.code);
  if (dt.lanes == 1 && code == nb::dlpack::dtype_code::Int && dt.bits == kBitsInt32) {
    return DType::kInt32;
  }
  throw Error(std::string(name) + " must be int32, got " + describe_dtype(dt));
}

const char* dims_of(const char* name, Slot slot) {
  return slot.dims != nullptr ? slot.dims : dense_dims(name);
}

TensorView view_of_raw(const RawTensor& raw, const char* name, Slot slot) {
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
    case kRawFloat8E4M3: view.dtype = DType::kFloat8E4M3; break;
    default:
      throw Error(std::string(name) + " has raw dtype code " + std::to_string(dtype_code) +
                  ", expected 0 (float16), 1 (bfloat16), 2 (float32), 3 (int32) or 4 "
                  "(float8_e4m3fn)");
  }
  if (slot.index && view.dtype != DType::kInt32) {
    throw Error(std::string(name) + " must be int32, got " + flashcore::to_string(view.dtype));
  }
  if (slot.scale && view.dtype != DType::kFloat32) {
    throw Error(std::string(name) + " must be float32, got " + flashcore::to_string(view.dtype));
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

}  // namespace flashcore::python
