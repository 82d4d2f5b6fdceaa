// Host side of TMA: encodes the 4-D tensor maps over (head_dim, seqlen, heads, batch) that the
// Hopper kernel loads Q/K/V and stores O through, and the 5-D ones of its packed GQA tiles.
//
// A per-batch seqlen dimension (instead of flattening batch x seqlen) makes TMA zero-fill rows past
// a sequence's end on loads and drop them on stores, so tails need no special code. The driver
// function comes from cudaGetDriverEntryPointByVersion, so the library does not link libcuda.
#pragma once

#include <cuda.h>  // CUtensorMap and enums (types only)
#include <cudaTypedefs.h>  // PFN_cuTensorMapEncodeTiled
#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "common/params.h"
#include "cuda/check.h"
#include "cuda/sm90/tile_config.h"

namespace flashcore::detail {

// The stable ABI version of cuTensorMapEncodeTiled (introduced in CUDA 12.0).
constexpr unsigned int kTensorMapEncodeAbiVersion = 12000;
// TMA requires 16-byte aligned base addresses and global strides.
constexpr int64_t kTmaAlignmentBytes = 16;

inline PFN_cuTensorMapEncodeTiled_v12000 tensor_map_encoder() {
  static PFN_cuTensorMapEncodeTiled_v12000 encoder = [] {
    void* function = nullptr;
    cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
#if CUDART_VERSION >= 12050
    FLASHCORE_CUDA_CHECK(cudaGetDriverEntryPointByVersion(
        "cuTensorMapEncodeTiled", &function, kTensorMapEncodeAbiVersion, cudaEnableDefault, &found));
#else
    FLASHCORE_CUDA_CHECK(
        cudaGetDriverEntryPoint("cuTensorMapEncodeTiled", &function, cudaEnableDefault, &found));
#endif
    if (found != cudaDriverEntryPointSuccess || function == nullptr) {
      throw Error("sm90 backend: the CUDA driver has no cuTensorMapEncodeTiled (driver too old)");
    }
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(function);
  }();
  return encoder;
}

struct BshdTensor {
  const char* name;  // for error messages: "q", "k", "v", "out"
  const void* data;
  int head_dim, seqlen, heads, batch;
  int64_t row_stride, head_stride, batch_stride;  // in elements
};

// One dimension of a tensor map, innermost first: its size, its stride in elements (the first
// dimension's must be 1), its name for error messages, and the box's extent along it.
struct TensorMapDim {
  int64_t size;
  int64_t stride;
  const char* name;
  int box;
};

// Bytes of an element of the types the Hopper kernels load (Sm90ElementTraits on the device), and
// the elements of one 128-byte swizzled row: a box's inner extent.
inline int64_t tma_element_bytes(DType dtype) {
  if (dtype == DType::kFloat8E4M3) return 1;
  if (dtype != DType::kFloat16 && dtype != DType::kBFloat16) {
    throw Error("sm90 backend: tensor maps take fp16, bf16 or fp8_e4m3, got dtype " +
                std::to_string(static_cast<int>(dtype)));
  }
  return 2;
}
inline int tma_box_cols(DType dtype) {
  return static_cast<int>(kSm90SwizzleRowBytes / tma_element_bytes(dtype));
}

// Encodes `dims` of `tensor` with the 128-byte swizzle (the box's inner extent must be one
// swizzled row). Throws Error (so the API can fall back to sm80) when TMA cannot describe the
// strides.
template <int kRank>
CUtensorMap encode_tensor_map(const BshdTensor& tensor, DType dtype,
                              const TensorMapDim (&dims)[kRank]) {
  const int64_t kElementBytes = tma_element_bytes(dtype);
  const auto base = reinterpret_cast<uintptr_t>(tensor.data);
  if (base % kTmaAlignmentBytes != 0) {
    throw Error(std::string("sm90 backend: ") + tensor.name + " data pointer " +
                std::to_string(base) + " is not 16-byte aligned, which TMA requires");
  }
  cuuint64_t global_dim[kRank];
  cuuint64_t global_stride_bytes[kRank - 1];
  cuuint32_t box_dim[kRank];
  cuuint32_t element_strides[kRank];
  int64_t packed_bytes = kElementBytes;  // stride a dense tensor would have
  for (int i = 0; i < kRank; ++i) {
    global_dim[i] = static_cast<cuuint64_t>(dims[i].size);
    box_dim[i] = static_cast<cuuint32_t>(dims[i].box);
    element_strides[i] = 1;
    if (i > 0) {
      // A dimension of size 1 is never stepped over; give it the dense stride, whatever the
      // caller's stride is (PyTorch reports arbitrary strides for size-1 dims).
      int64_t bytes = dims[i].size == 1 ? packed_bytes : dims[i].stride * kElementBytes;
      if (bytes % kTmaAlignmentBytes != 0 || bytes >= (int64_t(1) << 40)) {
        throw Error(std::string("sm90 backend: stride of dim ") + dims[i].name + " of " +
                    tensor.name + " is " + std::to_string(dims[i].stride) +
                    " elements; TMA needs a multiple of 8 elements (16 bytes) below 2^39");
      }
      global_stride_bytes[i - 1] = static_cast<cuuint64_t>(bytes);
    }
    packed_bytes *= dims[i].size;
  }
  // e4m3 bytes travel as UINT8: TMA only moves them, wgmma reads them as e4m3.
  const CUtensorMapDataType data_type = dtype == DType::kBFloat16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16
                                        : dtype == DType::kFloat16 ? CU_TENSOR_MAP_DATA_TYPE_FLOAT16
                                                                   : CU_TENSOR_MAP_DATA_TYPE_UINT8;
  CUtensorMap map;
  const CUresult status = tensor_map_encoder()(
      &map, data_type, kRank, const_cast<void*>(tensor.data), global_dim, global_stride_bytes,
      box_dim, element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
      CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (status != CUDA_SUCCESS) {
    std::string box;
    for (int i = 0; i < kRank; ++i) box += (i > 0 ? ", " : "") + std::to_string(dims[i].box);
    throw Error(std::string("sm90 backend: cuTensorMapEncodeTiled failed for ") + tensor.name +
                " (CUresult " + std::to_string(static_cast<int>(status)) + "), shape [" +
                std::to_string(tensor.batch) + ", " + std::to_string(tensor.seqlen) + ", " +
                std::to_string(tensor.heads) + ", " + std::to_string(tensor.head_dim) +
                "], strides [" + std::to_string(tensor.batch_stride) + ", " +
                std::to_string(tensor.row_stride) + ", " + std::to_string(tensor.head_stride) +
                ", 1] elements, box [" + box + "] (innermost first)");
  }
  return map;
}

// Sizes clamp to 1 so that empty key sequences still encode (nothing is loaded from them).
inline int64_t at_least_1(int size) { return size > 0 ? size : 1; }

// The 4-D map over (head_dim, seqlen, heads, batch) with a box of (one 128-byte row, box_rows,
// 1, 1).
inline CUtensorMap make_bshd_tensor_map(const BshdTensor& tensor, DType dtype, int box_rows) {
  const TensorMapDim dims[4] = {
      {tensor.head_dim, 1, "head_dim", tma_box_cols(dtype)},
      {at_least_1(tensor.seqlen), tensor.row_stride, "seqlen", box_rows},
      {at_least_1(tensor.heads), tensor.head_stride, "heads", 1},
      {at_least_1(tensor.batch), tensor.batch_stride, "batch", 1}};
  return encode_tensor_map(tensor, dtype, dims);
}

// The 5-D map over (head_dim, head in group, seqlen, group, batch) of a tensor of
// `group` x `groups` heads, with a box of (one 128-byte row, group, box_rows / group, 1, 1): box
// row r is position r / group of head r % group, so one box holds every query head of a KV group
// (the Hopper kernel's packed tiles, Sm90TileConfig::kPacksGroups). `group` divides box_rows.
inline CUtensorMap make_group_packed_tensor_map(const BshdTensor& tensor, DType dtype, int group,
                                                int box_rows) {
  const TensorMapDim dims[5] = {
      {tensor.head_dim, 1, "head_dim", tma_box_cols(dtype)},
      {group, tensor.head_stride, "heads", group},
      {at_least_1(tensor.seqlen), tensor.row_stride, "seqlen", box_rows / group},
      {tensor.heads / group, group * tensor.head_stride, "heads (groups)", 1},
      {at_least_1(tensor.batch), tensor.batch_stride, "batch", 1}};
  return encode_tensor_map(tensor, dtype, dims);
}

}  // namespace flashcore::detail
