// TensorView helpers, names of enums, parsing and the version string.
#include <sstream>
#include <string>
#include <vector>

#include "flashcore/flashcore.h"

#ifndef FLASHCORE_VERSION
#define FLASHCORE_VERSION "0.1.0"
#endif

namespace flashcore {
namespace {

std::string join_sizes(const std::vector<int64_t>& values) {
  std::ostringstream text;
  text << "[";
  for (size_t i = 0; i < values.size(); ++i) text << (i ? ", " : "") << values[i];
  text << "]";
  return text.str();
}

void check_rank(const char* argument, const std::vector<int64_t>& values) {
  if (values.empty() || values.size() > static_cast<size_t>(kMaxDims)) {
    throw Error(std::string(argument) + " must have 1 to " + std::to_string(kMaxDims) +
                " entries, got " + std::to_string(values.size()) + " " + join_sizes(values));
  }
}

}  // namespace

int64_t TensorView::numel() const {
  if (ndim == 0) return 0;
  int64_t count = 1;
  for (int i = 0; i < ndim; ++i) count *= shape[i];
  return count;
}

bool TensorView::is_contiguous() const {
  int64_t expected = 1;
  for (int i = ndim - 1; i >= 0; --i) {
    if (shape[i] != 1 && strides[i] != expected) return false;
    expected *= shape[i];
  }
  return true;
}

TensorView make_tensor(void* data, DType dtype, Device device, std::vector<int64_t> shape) {
  check_rank("shape", shape);
  std::vector<int64_t> strides(shape.size());
  int64_t stride = 1;
  for (size_t i = shape.size(); i-- > 0;) {
    strides[i] = stride;
    stride *= shape[i];
  }
  return make_strided_tensor(data, dtype, device, std::move(shape), std::move(strides));
}

TensorView make_strided_tensor(void* data, DType dtype, Device device, std::vector<int64_t> shape,
                               std::vector<int64_t> strides) {
  check_rank("shape", shape);
  if (strides.size() != shape.size()) {
    throw Error("strides must have as many entries as shape (" + std::to_string(shape.size()) +
                "), got " + std::to_string(strides.size()) + " " + join_sizes(strides));
  }
  TensorView view;
  view.data = data;
  view.dtype = dtype;
  view.device = device;
  view.ndim = static_cast<int>(shape.size());
  for (size_t i = 0; i < shape.size(); ++i) {
    view.shape[i] = shape[i];
    view.strides[i] = strides[i];
  }
  return view;
}

const char* to_string(Backend backend) {
  switch (backend) {
    case Backend::kAuto: return "auto";
    case Backend::kReference: return "reference";
    case Backend::kCPU: return "cpu";
    case Backend::kSM80: return "sm80";
    case Backend::kSM90: return "sm90";
  }
  return "unknown";
}

const char* to_string(DType dtype) {
  switch (dtype) {
    case DType::kFloat16: return "fp16";
    case DType::kBFloat16: return "bf16";
    case DType::kFloat32: return "fp32";
    case DType::kInt32: return "int32";
    case DType::kFloat8E4M3: return "fp8_e4m3";
  }
  return "unknown";
}

size_t dtype_size(DType dtype) {
  switch (dtype) {
    case DType::kFloat16:
    case DType::kBFloat16: return 2;
    case DType::kFloat32:
    case DType::kInt32: return 4;
    case DType::kFloat8E4M3: return 1;
  }
  return 0;
}

Backend parse_backend(const std::string& name) {
  for (Backend backend : {Backend::kAuto, Backend::kReference, Backend::kCPU, Backend::kSM80,
                          Backend::kSM90}) {
    if (name == to_string(backend)) return backend;
  }
  throw Error("unknown backend '" + name + "'; expected one of: auto, reference, cpu, sm80, sm90");
}

DType parse_dtype(const std::string& name) {
  if (name == "fp16" || name == "float16") return DType::kFloat16;
  if (name == "bf16" || name == "bfloat16") return DType::kBFloat16;
  if (name == "fp32" || name == "float32") return DType::kFloat32;
  if (name == "int32") return DType::kInt32;
  if (name == "fp8" || name == "fp8_e4m3" || name == "float8_e4m3fn") return DType::kFloat8E4M3;
  throw Error("unknown dtype '" + name +
              "'; expected one of: fp16 (float16), bf16 (bfloat16), fp32 (float32), int32, "
              "fp8 (fp8_e4m3, float8_e4m3fn)");
}

const char* version() { return FLASHCORE_VERSION; }

}  // namespace flashcore
