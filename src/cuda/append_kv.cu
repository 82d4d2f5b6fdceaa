// The kv-cache append kernel: one thread per 16-byte chunk of a (sequence, new row, kv head)
// row of k_new, copying it and the same chunk of v_new into the cache.
//
// The flat index runs over batch x max_new x heads_kv x chunks (max_new: the most rows any
// sequence appends), in a grid-stride loop so any size fits one launch; rows past a sequence's
// own count are skipped. Consecutive threads take consecutive chunks of one row, so reads and
// writes are whole coalesced rows of a head.
#include "cuda/append_kv.h"

#include <cuda_runtime.h>

#include <string>

#include "cuda/check.h"

namespace flashcore::detail {
namespace {

constexpr int kChunkBytes = 16;                 // one uint4 per thread and tensor
constexpr int kElementBytes = 2;                // fp16 / bf16
constexpr int kChunkElems = kChunkBytes / kElementBytes;
constexpr int kThreadsPerBlock = 256;
constexpr int64_t kMaxBlocks = 1 << 16;         // the grid-stride loop covers the rest

// Strides of k_new or v_new in elements; batch_stride unused when the rows are packed.
struct NewRows {
  const uint16_t* data;
  int64_t batch_stride, row_stride, head_stride;
  int64_t rows;  // rows of the tensor per sequence (dense) or in total (packed)
};

__global__ void append_kv_kernel(const __grid_constant__ AttentionParams params, NewRows k_new,
                                 NewRows v_new, int max_new, int chunks) {
  const int64_t total = int64_t(params.batch) * max_new * params.heads_kv * chunks;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total;
       i += int64_t(gridDim.x) * blockDim.x) {
    int64_t rest = i;
    const int chunk = int(rest % chunks);
    rest /= chunks;
    const int head = int(rest % params.heads_kv);
    rest /= params.heads_kv;
    const int r = int(rest % max_new);
    const int b = int(rest / max_new);
    if (r >= params.appended_k_of(b)) continue;
    // The slot in the cache: dropped when cache_seqlens[b] puts it outside the capacity.
    const int64_t slot = int64_t(params.seqused_k[b]) + r;
    if (slot < 0 || slot >= params.seqlen_k) continue;
    // The source row: packed rows are q's (cu_seqlens_q), clamped into k_new's rows.
    int64_t k_src, v_src;
    if (params.appends_packed) {
      const int64_t row = AttentionParams::packed_start(params.cu_seqlens_q, params.total_q, b) + r;
      if (row >= k_new.rows) continue;
      k_src = row * k_new.row_stride;
      v_src = row * v_new.row_stride;
    } else {
      if (r >= k_new.rows) continue;
      k_src = b * k_new.batch_stride + r * k_new.row_stride;
      v_src = b * v_new.batch_stride + r * v_new.row_stride;
    }
    const int64_t column = int64_t(chunk) * kChunkElems;
    k_src += head * k_new.head_stride + column;
    v_src += head * v_new.head_stride + column;
    const int64_t k_dst = params.k_offset(b, int(slot), head) + column;
    const int64_t v_dst = params.v_offset(b, int(slot), head) + column;
    auto* k_cache = static_cast<uint16_t*>(const_cast<void*>(params.k));
    auto* v_cache = static_cast<uint16_t*>(const_cast<void*>(params.v));
    *reinterpret_cast<uint4*>(k_cache + k_dst) =
        *reinterpret_cast<const uint4*>(k_new.data + k_src);
    *reinterpret_cast<uint4*>(v_cache + v_dst) =
        *reinterpret_cast<const uint4*>(v_new.data + v_src);
  }
}

bool aligned(int64_t value_bytes) { return value_bytes % kChunkBytes == 0; }

// The strides of a dense [batch, rows, heads, d] or packed [rows, heads, d] k_new/v_new, after
// checking what the 16-byte copies need.
NewRows new_rows(const TensorView& t, const char* name, bool packed) {
  const auto fail = [&](const std::string& what) {
    throw Error(std::string(name) + ": " + what + " (the CUDA kv-cache append copies 16 bytes)");
  };
  if (dtype_size(t.dtype) != kElementBytes) {
    fail(std::string("dtype ") + to_string(t.dtype) + " is not 16-bit");
  }
  if (!aligned(int64_t(reinterpret_cast<uintptr_t>(t.data)))) {
    fail("data pointer is not 16-byte aligned");
  }
  for (int i = 0; i + 1 < t.ndim; ++i) {
    if (!aligned(t.strides[i] * kElementBytes)) {
      fail("stride " + std::to_string(i) + " = " + std::to_string(t.strides[i]) +
           " elements is not a multiple of 16 bytes");
    }
  }
  NewRows rows{static_cast<const uint16_t*>(t.data), 0, 0, 0, 0};
  if (packed) {
    rows.row_stride = t.strides[0], rows.head_stride = t.strides[1], rows.rows = t.shape[0];
  } else {
    rows.batch_stride = t.strides[0], rows.row_stride = t.strides[1];
    rows.head_stride = t.strides[2], rows.rows = t.shape[1];
  }
  return rows;
}

}  // namespace

void append_kv_cuda(const AttentionParams& params, const TensorView& k_new,
                    const TensorView& v_new) {
  if (params.seqused_k == nullptr) throw Error("kv-cache append without cache_seqlens");
  if (params.head_dim % kChunkElems != 0) {
    throw Error("head_dim=" + std::to_string(params.head_dim) +
                ": the CUDA kv-cache append needs a multiple of 8");
  }
  const NewRows k_rows = new_rows(k_new, "k_new", params.appends_packed);
  const NewRows v_rows = new_rows(v_new, "v_new", params.appends_packed);
  // Packed appends follow q's sequences, of at most seqlen_q (max_seqlen_q) rows each.
  const int max_new = params.appends_packed ? params.seqlen_q : params.seqlen_new;
  const int chunks = params.head_dim / kChunkElems;
  const int64_t total = int64_t(params.batch) * max_new * params.heads_kv * chunks;
  if (total == 0) return;
  const int64_t blocks = (total + kThreadsPerBlock - 1) / kThreadsPerBlock;
  const int grid = int(blocks < kMaxBlocks ? blocks : kMaxBlocks);
  append_kv_kernel<<<grid, kThreadsPerBlock, 0, reinterpret_cast<cudaStream_t>(params.stream)>>>(
      params, k_rows, v_rows, max_new, chunks);
  FLASHCORE_CHECK_LAUNCH();
}

}  // namespace flashcore::detail
