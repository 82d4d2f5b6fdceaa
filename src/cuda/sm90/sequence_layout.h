// Sequence layouts of the Hopper kernels: how long a batch entry's query and key sequences are,
// and where a row of Q/O or K/V lives in its tensor map. The producers' loads, the epilogue's
// store, every count of blocks and the host's tensor-map construction ask the layout; nothing
// else in src/cuda/sm90 reads a sequence length or a batch stride. A new layout (varlen
// cu_seqlens, a paged KV cache) is a new struct with these members.
#pragma once

#include <cstdint>

#include "common/params.h"
#include "cuda/common/mask.cuh"
#include "cuda/sm90/tensor_map.h"

namespace flashcore::detail {

// A row's coordinates in a 4-D tensor map over (head_dim, seqlen, heads, batch), the column
// block's offset aside.
struct TmaRowCoord {
  int row;
  int head;
  int batch;
};

// Dense BSHD tensors: every batch entry has the call's seqlen_q and seqlen_k rows.
struct Sm90DenseLayout {
  FC_HOST_DEVICE static int seqlen_q(const AttentionParams& params, int batch) {
    return params.seqlen_q_of(batch);
  }
  FC_HOST_DEVICE static int seqlen_k(const AttentionParams& params, int batch) {
    return params.seqlen_k_of(batch);
  }
  // The longest sequences of the call: what grids and L2 sections are sized by.
  FC_HOST_DEVICE static int max_seqlen_q(const AttentionParams& params) { return params.seqlen_q; }
  FC_HOST_DEVICE static int max_seqlen_k(const AttentionParams& params) { return params.seqlen_k; }

  template <bool kCausal>
  FC_HOST_DEVICE static MaskPolicy<kCausal> mask(const AttentionParams& params, int batch) {
    return MaskPolicy<kCausal>(params, batch);
  }

  // Query row (or packed position) `row` of head `head` of batch entry `batch`, in Q's and O's map.
  FC_HOST_DEVICE static TmaRowCoord q_row(int batch, int head, int row) {
    return {row, head, batch};
  }
  // Key `key` of KV head `kv_head` of batch entry `batch`, in K's and V's maps.
  FC_HOST_DEVICE static TmaRowCoord kv_row(int batch, int kv_head, int key) {
    return {key, kv_head, batch};
  }

  // The tensors the host's tensor maps describe (head_dim: the call's, not the kernel's): Q and
  // O hold seqlen_q rows of heads_q heads, K and V seqlen_k rows of heads_kv heads.
  static BshdTensor q_tensor(const AttentionParams& p) {
    return rows_of(p, "q", p.q, true, p.q_row_stride, p.q_head_stride, p.q_batch_stride);
  }
  static BshdTensor o_tensor(const AttentionParams& p) {
    return rows_of(p, "out", p.out, true, p.o_row_stride, p.o_head_stride, p.o_batch_stride);
  }
  static BshdTensor k_tensor(const AttentionParams& p) {
    return rows_of(p, "k", p.k, false, p.k_row_stride, p.k_head_stride, p.k_batch_stride);
  }
  static BshdTensor v_tensor(const AttentionParams& p) {
    return rows_of(p, "v", p.v, false, p.v_row_stride, p.v_head_stride, p.v_batch_stride);
  }

 private:
  static BshdTensor rows_of(const AttentionParams& p, const char* name, const void* data,
                            bool query_side, int64_t row_stride, int64_t head_stride,
                            int64_t batch_stride) {
    return {name,     data,       p.head_dim,  query_side ? p.seqlen_q : p.seqlen_k,
            query_side ? p.heads_q : p.heads_kv, p.batch, row_stride, head_stride, batch_stride};
  }
};

}  // namespace flashcore::detail
