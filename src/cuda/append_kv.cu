// The kv-cache append kernel: one thread per 16-byte chunk of a (sequence, new row, kv head)
// row, copying that chunk of k_new and of v_new into the cache.
//
// The flat index runs over batch x max_new x heads_kv x chunks (max_new: the most rows any
// sequence may append), in a grid-stride loop so any size fits one launch; rows past a sequence's
// own count are skipped. Consecutive threads take consecutive chunks of one row, so reads and
// writes are whole coalesced rows of a head.
#include "cuda/append_kv.h"

#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "cuda/check.h"

namespace flashcore::detail {
namespace {

constexpr int kChunkBytes = 16;   // one uint4 per thread and tensor
constexpr int kThreadsPerBlock = 256;
constexpr int64_t kMaxBlocks = 1 << 16;  // the grid-stride loop covers the rest

// Element: an unsigned integer of the cache's element size (fp16 / bf16, or fp8: the bytes are
// copied as they are), so that the params' element offsets index it.
template <class Element>
__global__ void append_kv_kernel(const __grid_constant__ AttentionParams params,
                                 const __grid_constant__ AppendParams append, int max_new,
                                 int chunks) {
  constexpr int kChunkElems = kChunkBytes / sizeof(Element);
  const int64_t total = int64_t(params.batch) * max_new * params.heads_kv * chunks;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total;
       i += int64_t(gridDim.x) * blockDim.x) {
    int64_t rest = i;
    const int chunk = int(rest % chunks);
    rest /= chunks;
    const int head = int(rest % params.heads_kv);
    rest /= params.heads_kv;
    const int row = int(rest % max_new);
    const int b = int(rest / max_new);
    if (row >= AppendParams::rows_of(params, b)) continue;
    const int slot = AppendParams::first_slot(params, b) + row;  // < seqlen_k_of(b)
    const int64_t column = int64_t(chunk) * kChunkElems;
    const auto* k_new = static_cast<const Element*>(append.k_new);
    const auto* v_new = static_cast<const Element*>(append.v_new);
    auto* k_cache = static_cast<Element*>(const_cast<void*>(params.k));
    auto* v_cache = static_cast<Element*>(const_cast<void*>(params.v));
    *reinterpret_cast<uint4*>(k_cache + params.k_offset(b, slot, head) + column) =
        *reinterpret_cast<const uint4*>(k_new + append.k_new_offset(params, b, row, head) + column);
    *reinterpret_cast<uint4*>(v_cache + params.v_offset(b, slot, head) + column) =
        *reinterpret_cast<const uint4*>(v_new + append.v_new_offset(params, b, row, head) + column);
  }
}

void require_16_bytes(int64_t value_bytes, const char* name, const std::string& what) {
  if (value_bytes % kChunkBytes != 0) {
    throw Error(std::string(name) + ": " + what + " = " + std::to_string(value_bytes) +
                " bytes is not a multiple of 16 (the CUDA kv-cache append copies 16 bytes)");
  }
}

void require_chunk_copies(const void* data, int64_t batch_stride, int64_t row_stride,
                          int64_t head_stride, int64_t element_bytes, const char* name) {
  require_16_bytes(int64_t(reinterpret_cast<uintptr_t>(data)), name, "data pointer");
  require_16_bytes(batch_stride * element_bytes, name, "batch stride");
  require_16_bytes(row_stride * element_bytes, name, "row stride");
  require_16_bytes(head_stride * element_bytes, name, "head stride");
}

}  // namespace

void append_kv_cuda(const AttentionParams& params, const AppendParams& append) {
  if (!append.active()) return;
  if (params.seqused_k == nullptr) throw Error("kv-cache append without cache_seqlens");
  const int64_t element_bytes = int64_t(dtype_size(params.dtype));
  const int chunk_elems = kChunkBytes / int(element_bytes);
  if ((element_bytes != 1 && element_bytes != 2) || params.head_dim % chunk_elems != 0) {
    throw Error(std::string("the CUDA kv-cache append needs 16-bit or fp8 elements and a "
                            "head_dim of whole 16-byte chunks, not ") +
                to_string(params.dtype) + " head_dim=" + std::to_string(params.head_dim));
  }
  require_chunk_copies(append.k_new, append.k_batch_stride, append.k_row_stride,
                       append.k_head_stride, element_bytes, "k_new");
  require_chunk_copies(append.v_new, append.v_batch_stride, append.v_row_stride,
                       append.v_head_stride, element_bytes, "v_new");
  // Packed appends follow q's sequences, of at most seqlen_q (max_seqlen_q) rows each.
  const int max_new = params.appends_packed ? params.seqlen_q : params.seqlen_new;
  const int chunks = params.head_dim / chunk_elems;
  const int64_t total = int64_t(params.batch) * max_new * params.heads_kv * chunks;
  if (total == 0) return;
  const int64_t blocks = (total + kThreadsPerBlock - 1) / kThreadsPerBlock;
  const int grid = int(blocks < kMaxBlocks ? blocks : kMaxBlocks);
  const auto stream = reinterpret_cast<cudaStream_t>(params.stream);
  if (element_bytes == 1) {
    append_kv_kernel<uint8_t><<<grid, kThreadsPerBlock, 0, stream>>>(params, append, max_new,
                                                                     chunks);
  } else {
    append_kv_kernel<uint16_t><<<grid, kThreadsPerBlock, 0, stream>>>(params, append, max_new,
                                                                      chunks);
  }
  FLASHCORE_CHECK_LAUNCH();
}

}  // namespace flashcore::detail
