// The tensor conversions the module's entry points share (_flashcore.cpp, _flashcore_serving.cpp):
// a DLPack array or a raw tensor tuple in, a flashcore::TensorView out, with the errors the
// library would word (rank, dtype, device) for what a TensorView cannot even hold.
#pragma once

#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>

#include <cstdint>
#include <string>
#include <tuple>
#include <vector>

#include "flashcore/flashcore.h"

namespace flashcore::python {

namespace nb = nanobind;

// Inputs may be read-only (e.g. NumPy views of constants); outputs must be writable.
using InputArray = nb::ndarray<nb::ro>;
using OutputArray = nb::ndarray<>;

// (data_ptr, dtype code, device type code, device index, shape, strides in elements).
using RawTensor =
    std::tuple<uintptr_t, int, int, int, std::vector<int64_t>, std::vector<int64_t>>;
// Codes of RawTensor, mirrored in flashcore/_arrays.py (RAW_*).
enum RawDType : int {
  kRawFloat16 = 0,
  kRawBFloat16 = 1,
  kRawFloat32 = 2,
  kRawInt32 = 3,
  kRawFloat8E4M3 = 4,  // float8_e4m3fn (torch.float8_e4m3fn, ml_dtypes.float8_e4m3fn)
};
enum RawDevice : int { kRawCPU = 0, kRawCUDA = 1 };

// A wrong-type argument: raised as flashcore.FlashCoreTypeError (a FlashCoreError and a TypeError).
struct ArgumentTypeError : Error {
  using Error::Error;
};

// The dimensions of a tensor of a dense call, as the library's messages name them.
const char* dense_dims(const char* name);
// The library's rank message for a rank a TensorView cannot hold (0 or more than kMaxDims).
void check_rank(const std::vector<int64_t>& shape, const char* name, const char* dims);
DType dtype_of(const nb::dlpack::dtype& dt, const char* name);
DType index_dtype_of(const nb::dlpack::dtype& dt, const char* name);
DType scale_dtype_of(const nb::dlpack::dtype& dt, const char* name);
Device device_of(int dlpack_device_type, int device_id, const char* name);
void normalize_empty_strides(TensorView& view);

// Inputs may be read-only (e.g. NumPy views of constants).
InputArray input_array(nb::handle value, const char* name);
// Outputs must be writable; `why` says what is written there ("the result is written into
// NAME" by default).
OutputArray output_array(nb::handle value, const char* name, const std::string& why = "");

// What a tensor slot expects: its dimensions as messages name them (nullptr: those of a dense
// call) and whether it holds indices (int32) or fp8 descale factors (float32) rather than values
// (float16/bfloat16/float32/float8_e4m3fn).
struct Slot {
  const char* dims = nullptr;
  bool index = false;
  bool scale = false;
};

// The slot of q_descale/k_descale/v_descale: float32 [batch, heads_kv].
inline constexpr Slot kDescaleSlot{"[batch, heads_kv]", false, true};

const char* dims_of(const char* name, Slot slot);

template <typename Array>
std::vector<int64_t> shape_of(const Array& array) {
  std::vector<int64_t> shape(array.ndim());
  for (size_t i = 0; i < array.ndim(); ++i) shape[i] = static_cast<int64_t>(array.shape(i));
  return shape;
}

template <typename Array>
TensorView view_of(const Array& array, const char* name, Slot slot = {}) {
  check_rank(shape_of(array), name, dims_of(name, slot));
  TensorView view;
  view.data = const_cast<void*>(static_cast<const void*>(array.data()));
  view.dtype = slot.index   ? index_dtype_of(array.dtype(), name)
               : slot.scale ? scale_dtype_of(array.dtype(), name)
                            : dtype_of(array.dtype(), name);
  view.device = device_of(array.device_type(), array.device_id(), name);
  view.ndim = static_cast<int>(array.ndim());
  for (size_t i = 0; i < array.ndim(); ++i) {
    view.shape[i] = static_cast<int64_t>(array.shape(i));
    view.strides[i] = array.stride(i);
  }
  normalize_empty_strides(view);
  return view;
}

TensorView view_of_raw(const RawTensor& raw, const char* name, Slot slot = {});

// Runs the call without the GIL; returns the name of the backend that ran.
std::string run(const flashcore::AttentionArgs& args);

}  // namespace flashcore::python
