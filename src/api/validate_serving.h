// Validation of the serving layouts (flashcore.h "Serving layouts"): which layout a call asks
// for, the shapes of its tensors and index tensors, the AttentionParams fields they fill, and
// the values of its index tensors (always for host tensors, with check_indices for CUDA ones).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "api/tensor_checks.h"
#include "common/append.h"
#include "common/params.h"
#include "flashcore/flashcore.h"

namespace flashcore::detail {

// The layout is read off which optional arguments are set; serving_layout rejects combinations
// that mean nothing (cu_seqlens_k with a cache, k_new without v_new, ...).
struct ServingLayout {
  bool packed_q = false;   // cu_seqlens_q: q/out (and lse) packed
  bool packed_kv = false;  // cu_seqlens_k: varlen k/v
  bool cache = false;      // cache_seqlens: k/v are a kv cache
  bool paged = false;      // page_table: the cache is paged
  bool append = false;     // k_new/v_new written into the cache first

  bool dense() const { return !packed_q && !packed_kv && !cache; }
};

ServingLayout serving_layout(const AttentionArgs& args);
// The layout of validated params (the same answer as for the args they came from).
ServingLayout serving_layout(const AttentionParams& params);

// "dense", "varlen", "kv cache", "paged kv cache", with " (packed q)" / " + append".
std::string layout_name(const ServingLayout& layout);
std::string layout_name(const AttentionParams& params);

// Sizes of a call, whatever its layout, for the checks every layout shares.
struct CallShape {
  int64_t batch = 0, seqlen_q = 0, seqlen_k = 0, heads_q = 0, heads_kv = 0, head_dim = 0;
  DimNames q_dims = kDenseDims;   // names of q's and out's dims
  DimNames kv_dims = kDenseDims;  // names of k's and v's dims
  std::vector<int64_t> lse_shape;  // the shape lse must have
  const char* lse_text = "[batch, heads_q, seqlen_q]";
};

// Ranks and shapes of q/k/v/out, the index tensors and k_new/v_new of a non-dense layout.
CallShape check_serving_shapes(const AttentionArgs& args, const ServingLayout& layout);

// Overlaps the serving tensors must avoid (out with k_new/v_new and the index tensors, k_new and
// v_new with the cache).
void check_serving_overlaps(const AttentionArgs& args, const ServingLayout& layout);

// Alignment of k_new/v_new for CUDA calls.
void check_serving_cuda_alignment(const AttentionArgs& args, const ServingLayout& layout);

// The pointers and sizes of the serving fields of params (q/k/v/out strides are set by the
// caller); seqlen_q/seqlen_k become the grid bounds (max_seqlen_q, a cache's capacity, ...).
void fill_serving_params(const AttentionArgs& args, const ServingLayout& layout,
                         AttentionParams& params);

// k_new/v_new as the append sees them (inactive when the call appends nothing).
AppendParams append_params(const AttentionArgs& args);

// Whether the index values are read on the host this call: always for host tensors; for CUDA
// tensors when args.check_indices or FLASHCORE_CHECK_INDICES=1.
bool index_values_checked(const AttentionArgs& args);

// Reads the index tensors (a copy and a stream sync for CUDA ones) and checks every value the
// call will use: cu_seqlens non-decreasing within the packed tensors and within max_seqlen_*,
// seqused_k within each sequence's keys, cache_seqlens plus the new tokens within the capacity,
// and every page a sequence uses within the cache. The error names the sequence and the slot.
void check_index_values(const AttentionArgs& args, const AttentionParams& params);

}  // namespace flashcore::detail
