// Sequence layouts of the Hopper kernels: how long a batch entry's query and key sequences are,
// and where a row of Q/O or K/V lives in its tensor map. The producers' loads, the epilogue's
// store, every count of blocks and the host's tensor-map construction ask the layout; nothing
// else in src/cuda/sm90 reads a sequence length or a batch stride. Two layouts: dense BSHD
// tensors, and the serving layouts of flashcore.h (packed varlen q/k, a contiguous or paged KV
// cache), which one struct serves by reading the call's index arrays through the params'
// clamping accessors.
#pragma once

#include <cstdint>
#include <type_traits>

#include "common/params.h"
#include "cuda/sm90/tensor_map.h"

namespace flashcore::detail {

// A row's coordinates in a 4-D tensor map over (head_dim, seqlen, heads, batch), the column
// block's offset aside. For a paged cache `row` is the slot in the page and `batch` the page.
struct TmaRowCoord {
  int row;
  int head;
  int batch;
};

// The largest power of two dividing `n` (n > 0).
FC_HOST_DEVICE int lowest_power_of_two_factor(int n) { return n & -n; }

// Dense BSHD tensors: every batch entry has the call's seqlen_q and seqlen_k rows.
struct Sm90DenseLayout {
  // Whether q can be packed (cu_seqlens_q): the tile order then walks the sequences' own blocks.
  static constexpr bool kMayPackQ = false;
  // Whether every sequence has the call's seqlen_q and seqlen_k (else the tiles carry their
  // sequence's: Sm90Tile).
  static constexpr bool kUniformLengths = true;
  // The call's lengths themselves (the accessors would test the serving arrays for null).
  FC_HOST_DEVICE static int seqlen_q(const AttentionParams& params, int /*batch*/) {
    return params.seqlen_q;
  }
  FC_HOST_DEVICE static int seqlen_k(const AttentionParams& params, int /*batch*/) {
    return params.seqlen_k;
  }
  // The longest sequences of the call: what grids and L2 sections are sized by.
  FC_HOST_DEVICE static int max_seqlen_q(const AttentionParams& params) { return params.seqlen_q; }
  FC_HOST_DEVICE static int max_seqlen_k(const AttentionParams& params) { return params.seqlen_k; }

  // The first row of batch entry `batch` in a packed q, and in packed K/V: none here.
  FC_HOST_DEVICE static int q_start(const AttentionParams& /*params*/, int /*batch*/) { return 0; }
  FC_HOST_DEVICE static int k_start(const AttentionParams& /*params*/, int /*batch*/) { return 0; }

  // Query row (or packed position) `row` of head `head` of batch entry `batch`, whose sequence
  // starts at packed row `q_start` (q_start above), in Q's and O's map.
  FC_HOST_DEVICE static TmaRowCoord q_row(const AttentionParams& /*params*/, int batch,
                                          int /*q_start*/, int head, int row) {
    return {row, head, batch};
  }
  // Threads of the producer warp that issue K/V loads: one (the block is one box).
  static constexpr int kProducerLanes = 1;
  // The TMA boxes of a KV block of kBlockN keys from `first_key` of batch entry `batch` (whose
  // keys start at packed row `k_start`: k_start above) that producer lane `lane` issues:
  // fn(row in the block, its map coordinates). Dense: one box of the whole block, lane 0's.
  template <int kBlockN, class Fn>
  __device__ __forceinline__ static void for_each_kv_box(const AttentionParams& /*params*/,
                                                         int batch, int /*k_start*/, int kv_head,
                                                         int first_key, int /*lane*/, Fn&& fn) {
    fn(0, TmaRowCoord{first_key, kv_head, batch});
  }
  // Rows of a K/V box (the maps' box) and whether rows past a sequence's keys inside a loaded
  // block can hold anything but keys of the call (NaN in a cache's unused slots, say): the
  // consumers then zero them in V before P V (0 x NaN would reach O). Dense: the map's per-batch
  // seqlen makes TMA fill them with zeros.
  template <int kBlockN>
  FC_HOST_DEVICE static int kv_box_rows(const AttentionParams& /*params*/) { return kBlockN; }
  FC_HOST_DEVICE static bool kv_tail_may_hold_garbage(const AttentionParams& /*params*/) {
    return false;
  }
  // Whether K/V blocks are gathered with cp.async (paged_gather.cuh) instead of TMA, and the
  // arrivals a block's full barrier then expects: one arming arrival, or one from each of the
  // kGatherThreads threads that gather the block's K (or V).
  template <int kBlockN>
  FC_HOST_DEVICE static bool kv_gathered(const AttentionParams& /*params*/) { return false; }
  template <int kBlockN, int kGatherThreads>
  FC_HOST_DEVICE static uint32_t kv_full_arrivals(const AttentionParams& /*params*/) { return 1; }
  // Whether O's map can hold rows past a sequence's end that belong to another sequence: the
  // epilogue then stores a slab that crosses the end with ordinary bounded stores.
  FC_HOST_DEVICE static bool o_rows_overrun(const AttentionParams& /*params*/) { return false; }

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
  template <bool kGathersSmallPages, int kMinTmaBoxRows>
  friend struct Sm90ServingLayoutOf;
  static BshdTensor rows_of(const AttentionParams& p, const char* name, const void* data,
                            bool query_side, int64_t row_stride, int64_t head_stride,
                            int64_t batch_stride) {
    return {name,     data,       p.head_dim,  query_side ? p.seqlen_q : p.seqlen_k,
            query_side ? p.heads_q : p.heads_kv, p.batch, row_stride, head_stride, batch_stride};
  }
};

// The dense layout's kernels: the table's choices tuned on dense calls alone (clusters, the
// leader's waits, wave peers, dense_only rows) apply in these and nowhere else.
template <class Layout>
inline constexpr bool kSm90IsDenseLayout = std::is_same_v<Layout, Sm90DenseLayout>;

// Pages whose TMA boxes would hold fewer rows than this are gathered by the general kernel's
// producer warp with cp.async: one-row boxes ran at 0.48 TB/s (page 1, H200), 16-row ones at
// 3.9 TB/s.
inline constexpr int kSm90MinTmaBoxRows = 8;
// The decode kernel's: its four producer warps gather page-16 decode (b64 x 4096) at 0.97-0.98x
// the contiguous cache's rate on an H200, where 16-row boxes ran at 0.91-0.94x; on an H100 the two
// run within 2% of each other (docs/kernels.md, runs 201 and 217-219).
inline constexpr int kSm90DecodeMinTmaBoxRows = 32;

// The serving layouts (flashcore.h): q dense or packed (cu_seqlens_q), K/V dense, packed
// (cu_seqlens_k), a contiguous cache or a paged one. Packed tensors are seen as one batch entry of
// total rows, a paged cache as a batch of pages; lengths and offsets come from the params'
// accessors, which clamp every index they read into the tensors.
//   - Packed q: a tile's last slab may reach into the next sequence's rows. Its Q rows there are
//     loaded and computed but never stored (o_rows_overrun: bounded stores).
//   - Paged K/V: a block's keys come in boxes of kv_box_rows rows, the largest power of two that
//     divides both page_size and kBlockN, so that a box never crosses a page. Slots past the
//     sequence's keys in its last block (a page's unused tail, pages past the table's used ones,
//     a packed buffer's rows past the last sequence) are loaded but masked in S and zeroed in V
//     (kv_tail_may_hold_garbage).
//   - kGathersSmallPages: whether the kernels carry the cp.async gather of pages too small for
//     TMA boxes (kv_gathered). The launcher runs the kernels without it (Sm90ServingTmaLayout)
//     for every call whose blocks all come in boxes: the gather's code took registers from the
//     producer warpgroup, whose FP8 kernels spilled 256-316 bytes with it and 92-100 without
//     (docs/kernels.md, run 165).
//   - kMinTmaBoxRows: pages whose boxes would hold fewer rows are gathered (kv_gathered): the
//     general kernel's kSm90MinTmaBoxRows, the decode kernel's kSm90DecodeMinTmaBoxRows.
template <bool kGathersSmallPages, int kMinTmaBoxRows = kSm90MinTmaBoxRows>
struct Sm90ServingLayoutOf {
  static constexpr bool kMayPackQ = true;
  static constexpr bool kUniformLengths = false;
  FC_HOST_DEVICE static int seqlen_q(const AttentionParams& params, int batch) {
    return params.seqlen_q_of(batch);
  }
  FC_HOST_DEVICE static int seqlen_k(const AttentionParams& params, int batch) {
    return params.seqlen_k_of(batch);
  }
  FC_HOST_DEVICE static int max_seqlen_q(const AttentionParams& params) { return params.seqlen_q; }
  FC_HOST_DEVICE static int max_seqlen_k(const AttentionParams& params) { return params.seqlen_k; }

  FC_HOST_DEVICE static int q_start(const AttentionParams& params, int batch) {
    if (params.cu_seqlens_q == nullptr) return 0;
    return AttentionParams::packed_start(params.cu_seqlens_q, params.total_q, batch);
  }

  FC_HOST_DEVICE static int k_start(const AttentionParams& params, int batch) {
    if (params.cu_seqlens_k == nullptr) return 0;
    return AttentionParams::packed_start(params.cu_seqlens_k, params.total_k, batch);
  }

  FC_HOST_DEVICE static TmaRowCoord q_row(const AttentionParams& params, int batch, int q_start,
                                          int head, int row) {
    if (params.cu_seqlens_q == nullptr) return {row, head, batch};
    return {q_start + row, head, 0};
  }

  // A paged block is up to kBlockN boxes (page_size 1): the producer warp's 32 lanes share them,
  // so their page-table reads and TMA issues overlap instead of queueing behind one thread.
  static constexpr int kProducerLanes = 32;
  template <int kBlockN, class Fn>
  __device__ __forceinline__ static void for_each_kv_box(const AttentionParams& params, int batch,
                                                         int k_start, int kv_head, int first_key,
                                                         int lane, Fn&& fn) {
    if (params.page_table != nullptr) {
      const int box_rows = kv_box_rows<kBlockN>(params);
      for (int row = lane * box_rows; row < kBlockN; row += kProducerLanes * box_rows) {
        const int key = first_key + row;
        const int64_t entry = batch * params.page_table_stride + key / params.page_size;
        // Keys past the table's width (a block's tail past the capacity) read its last entry.
        const int64_t last_entry = (batch + 1) * params.page_table_stride - 1;
        const int page = AttentionParams::clamp_int(
            params.page_table[entry < last_entry ? entry : last_entry], 0, params.num_pages - 1);
        fn(row, TmaRowCoord{key % params.page_size, kv_head, page});
      }
    } else if (lane != 0) {
      return;  // one box, lane 0's
    } else if (params.cu_seqlens_k != nullptr) {
      fn(0, TmaRowCoord{k_start + first_key, kv_head, 0});
    } else {
      fn(0, TmaRowCoord{first_key, kv_head, batch});
    }
  }
  template <int kBlockN>
  FC_HOST_DEVICE static int kv_box_rows(const AttentionParams& params) {
    if (params.page_table == nullptr) return kBlockN;
    const int page_factor = lowest_power_of_two_factor(params.page_size);
    const int block_factor = lowest_power_of_two_factor(kBlockN);
    return page_factor < block_factor ? page_factor : block_factor;
  }
  // Every serving layout can: a cache holds unused slots past each sequence's keys, and packed
  // K/V may run on past the last sequence's (a buffer larger than cu_seqlens_k[batch]).
  FC_HOST_DEVICE static bool kv_tail_may_hold_garbage(const AttentionParams& /*params*/) {
    return true;
  }
  FC_HOST_DEVICE static bool o_rows_overrun(const AttentionParams& params) {
    return params.cu_seqlens_q != nullptr;
  }
  template <int kBlockN>
  FC_HOST_DEVICE static bool kv_gathered(const AttentionParams& params) {
    return kGathersSmallPages && needs_gather<kBlockN>(params);
  }
  // Whether a call's pages are too small for TMA boxes (which kernel runs it: launch.cuh).
  template <int kBlockN>
  FC_HOST_DEVICE static bool needs_gather(const AttentionParams& params) {
    return params.page_table != nullptr && kv_box_rows<kBlockN>(params) < kMinTmaBoxRows;
  }
  template <int kBlockN, int kGatherThreads>
  FC_HOST_DEVICE static uint32_t kv_full_arrivals(const AttentionParams& params) {
    return kv_gathered<kBlockN>(params) ? kGatherThreads : 1;
  }

  static BshdTensor q_tensor(const AttentionParams& p) {
    return query_side(p, "q", p.q, p.q_row_stride, p.q_head_stride, p.q_batch_stride);
  }
  static BshdTensor o_tensor(const AttentionParams& p) {
    return query_side(p, "out", p.out, p.o_row_stride, p.o_head_stride, p.o_batch_stride);
  }
  static BshdTensor k_tensor(const AttentionParams& p) {
    return key_side(p, "k", p.k, p.k_row_stride, p.k_head_stride, p.k_batch_stride);
  }
  static BshdTensor v_tensor(const AttentionParams& p) {
    return key_side(p, "v", p.v, p.v_row_stride, p.v_head_stride, p.v_batch_stride);
  }

 private:
  static BshdTensor query_side(const AttentionParams& p, const char* name, const void* data,
                               int64_t row_stride, int64_t head_stride, int64_t batch_stride) {
    if (p.cu_seqlens_q == nullptr) {
      return Sm90DenseLayout::rows_of(p, name, data, true, row_stride, head_stride, batch_stride);
    }
    return {name, data, p.head_dim, p.total_q, p.heads_q, 1, row_stride, head_stride, 0};
  }
  static BshdTensor key_side(const AttentionParams& p, const char* name, const void* data,
                             int64_t row_stride, int64_t head_stride, int64_t batch_stride) {
    if (p.page_table != nullptr) {
      return {name, data, p.head_dim, p.page_size, p.heads_kv, p.num_pages,
              row_stride, head_stride, batch_stride};
    }
    if (p.cu_seqlens_k != nullptr) {
      return {name, data, p.head_dim, p.total_k, p.heads_kv, 1, row_stride, head_stride, 0};
    }
    return Sm90DenseLayout::rows_of(p, name, data, false, row_stride, head_stride, batch_stride);
  }
};

using Sm90ServingLayout = Sm90ServingLayoutOf<true>;      // any serving call
using Sm90ServingTmaLayout = Sm90ServingLayoutOf<false>;  // calls whose K/V come in TMA boxes
// A serving call in the decode kernel (launch.cuh): it gathers pages whose boxes would hold
// fewer than 32 rows (page 16).
using Sm90ServingDecodeLayout = Sm90ServingLayoutOf<true, kSm90DecodeMinTmaBoxRows>;

}  // namespace flashcore::detail
