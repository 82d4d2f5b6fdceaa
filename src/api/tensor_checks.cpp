#include "api/tensor_checks.h"

#include <climits>
#include <cstdint>
#include <sstream>

#include "api/validate.h"

namespace flashcore::detail {

void fail(const std::string& message) { throw Error(message); }

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

void check_rank(const char* name, const TensorView& t, const DimNames& dims) {
  if (t.ndim != dims.rank) {
    fail(std::string(name) + " must have " + std::to_string(dims.rank) + " dimensions " +
         dims.text + ", got " + std::to_string(t.ndim) + " (shape " + shape_string(t) + ")");
  }
}

void check_tensor(const char* name, const TensorView& t, const DimNames& dims) {
  check_rank(name, t, dims);
  const int rank = dims.rank;
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

void check_same_dim(const char* name_a, const TensorView& a, int dim_a, const char* name_b,
                    const TensorView& b, int dim_b, const char* dim_name) {
  if (a.shape[dim_a] != b.shape[dim_b]) {
    fail(std::string(dim_name) + " of " + name_a + " (" + std::to_string(a.shape[dim_a]) +
         ") does not match " + dim_name + " of " + name_b + " (" +
         std::to_string(b.shape[dim_b]) + ")");
  }
}

void check_same_device(const char* name_a, const TensorView& a, const char* name_b,
                       const TensorView& b) {
  if (a.device.type != b.device.type || a.device.index != b.device.index) {
    fail(std::string(name_a) + " on " + device_name(a.device) + " but " + name_b + " on " +
         device_name(b.device));
  }
}

namespace {

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

}  // namespace

void check_no_overlap(const char* name_a, const TensorView& a, const char* name_b,
                      const TensorView& b, const char* why) {
  ByteRange ra = byte_range(a), rb = byte_range(b);
  if (ra.begin == ra.end || rb.begin == rb.end) return;
  if (ra.begin < rb.end && rb.begin < ra.end) {
    fail(std::string(name_a) + " overlaps " + name_b + " in memory (" + name_a + " at " +
         address_string(a.data) + ", " + name_b + " at " + address_string(b.data) + "); " + why);
  }
}

void check_cuda_alignment(const char* name, const TensorView& t, const DimNames& dims) {
  if (reinterpret_cast<uintptr_t>(t.data) % kCudaAlignmentBytes != 0) {
    fail(std::string("data pointer of ") + name + " (" + address_string(t.data) +
         ") must be " + std::to_string(kCudaAlignmentBytes) + "-byte aligned for CUDA backends");
  }
  const int64_t element_bytes = static_cast<int64_t>(dtype_size(t.dtype));
  for (int i = 0; i < t.ndim - 1; ++i) {
    const int64_t stride_bytes = t.strides[i] * element_bytes;
    if (t.shape[i] > 1 && stride_bytes % kCudaAlignmentBytes != 0) {
      fail(std::string(dims.names[i]) + " stride of " + name + " is " +
           std::to_string(t.strides[i]) + " elements (" + std::to_string(stride_bytes) +
           " bytes); CUDA backends need a multiple of " + std::to_string(kCudaAlignmentBytes) +
           " bytes so every row stays aligned");
    }
  }
}

void check_index_tensor(const char* name, const TensorView& t, const DimNames& dims,
                        const TensorView& device_of) {
  if (t.dtype != DType::kInt32) {
    fail(std::string(name) + " must be int32, got " + to_string(t.dtype));
  }
  check_tensor(name, t, dims);  // rank, sizes, last dim contiguous, pointer
  check_same_device(name, t, "q", device_of);
}

}  // namespace flashcore::detail
