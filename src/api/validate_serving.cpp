// Shapes of the serving layouts. A call's layout follows from its optional arguments:
//   cu_seqlens_q + cu_seqlens_k          varlen: q/out [total_q, hq, d], k/v [total_k, hkv, d]
//   cache_seqlens                        contiguous cache: k/v [batch, capacity, hkv, d]
//   cache_seqlens + page_table           paged cache: k/v [num_pages, page_size, hkv, d]
//   ... + cu_seqlens_q (with a cache)    q/out packed [total_q, hq, d]
//   ... + k_new/v_new (with a cache)     appended at cache_seqlens before attending
// batch is cu_seqlens_q.shape[0] - 1 or cache_seqlens.shape[0]; every other batch-sized tensor
// must agree with it.
#include "api/validate_serving.h"

#include <algorithm>
#include <climits>

namespace flashcore::detail {
namespace {

constexpr DimNames kPackedQDims{3, "[total_q, heads_q, head_dim]",
                                {"total_q", "heads_q", "head_dim"}};
constexpr DimNames kPackedKvDims{3, "[total_k, heads_kv, head_dim]",
                                 {"total_k", "heads_kv", "head_dim"}};
constexpr DimNames kCacheDims{4, "[batch, capacity, heads_kv, head_dim]",
                              {"batch", "capacity", "heads_kv", "head_dim"}};
constexpr DimNames kPagedDims{4, "[num_pages, page_size, heads_kv, head_dim]",
                              {"num_pages", "page_size", "heads_kv", "head_dim"}};
constexpr DimNames kNewDenseDims{4, "[batch, seqlen_new, heads_kv, head_dim]",
                                 {"batch", "seqlen_new", "heads_kv", "head_dim"}};
constexpr DimNames kNewPackedDims{3, "[total_q, heads_kv, head_dim]",
                                  {"total_q", "heads_kv", "head_dim"}};
constexpr DimNames kCuSeqlensDims{1, "[batch + 1]", {"batch + 1"}};
constexpr DimNames kPerSequenceDims{1, "[batch]", {"batch"}};
constexpr DimNames kPageTableDims{2, "[batch, max_pages_per_seq]", {"batch", "max_pages_per_seq"}};

std::string str(int64_t value) { return std::to_string(value); }

// Tensor `name`'s dim `dim` must be `expected` (what `what` says it is).
void check_size(const char* name, const TensorView& t, int dim, const DimNames& dims,
                int64_t expected, const std::string& what) {
  if (t.shape[dim] != expected) {
    fail(std::string(dims.names[dim]) + " of " + name + " (" + str(t.shape[dim]) +
         ") does not match " + what + " (" + str(expected) + ")");
  }
}

void check_same_shape(const char* name_a, const TensorView& a, const char* name_b,
                      const TensorView& b) {
  if (a.shape != b.shape) {
    fail(std::string(name_a) + " and " + name_b + " must have the same shape, got " + name_a +
         " " + shape_string(a) + " and " + name_b + " " + shape_string(b));
  }
}

// Slots per sequence of a cache, and how that number comes about, for error messages.
std::string capacity_text(const TensorView& k, const TensorView* page_table, int64_t capacity) {
  if (page_table == nullptr) return str(capacity) + " slots per sequence (dim 1 of k)";
  return str(capacity) + " slots per sequence (page_table width " + str(page_table->shape[1]) +
         " x page_size " + str(k.shape[1]) + (k.shape[0] == 0 ? ", and the cache has 0 pages" : "") +
         ")";
}

// The cache's slots per sequence: its seqlen dim, or the page table's width times page_size (0
// when there are no pages at all, so that nothing is ever read from an empty cache).
int64_t cache_capacity(const AttentionArgs& args, const ServingLayout& layout) {
  if (!layout.paged) return args.k.shape[1];
  if (args.k.shape[0] == 0) return 0;
  return args.page_table->shape[1] * args.k.shape[1];
}

// cu_seqlens_q/_k, seqused_k, cache_seqlens and page_table: dtype, rank, device, batch. Returns
// the batch.
int64_t check_index_shapes(const AttentionArgs& args, const ServingLayout& layout) {
  int64_t batch = -1;
  const char* batch_from = "";
  auto agree = [&](const char* name, int64_t value, int64_t offset) {
    if (batch < 0) {
      batch = value - offset, batch_from = name;
      return;
    }
    if (value - offset != batch) {
      fail(std::string(name) + " has " + str(value) + " entries, but batch" +
           (offset ? " + 1 = " : " = ") + str(batch + offset) + " (from " + batch_from + ")");
    }
  };
  if (layout.packed_q) {
    const TensorView& cu = *args.cu_seqlens_q;
    check_index_tensor("cu_seqlens_q", cu, kCuSeqlensDims, args.q);
    if (cu.shape[0] < 1) fail("cu_seqlens_q must have batch + 1 >= 1 entries, got 0");
    agree("cu_seqlens_q", cu.shape[0], 1);
  }
  if (layout.cache) {
    check_index_tensor("cache_seqlens", *args.cache_seqlens, kPerSequenceDims, args.q);
    agree("cache_seqlens", args.cache_seqlens->shape[0], 0);
  }
  if (layout.packed_kv) {
    check_index_tensor("cu_seqlens_k", *args.cu_seqlens_k, kCuSeqlensDims, args.q);
    agree("cu_seqlens_k", args.cu_seqlens_k->shape[0], 1);
  }
  if (args.seqused_k) {
    check_index_tensor("seqused_k", *args.seqused_k, kPerSequenceDims, args.q);
    agree("seqused_k", args.seqused_k->shape[0], 0);
  }
  if (layout.paged) {
    check_index_tensor("page_table", *args.page_table, kPageTableDims, args.q);
    agree("page_table", args.page_table->shape[0], 0);
  }
  return batch;
}

// The packed length bound of q or k: max_seqlen must be given when there are rows to attend.
int64_t packed_seqlen(const char* max_name, int max_seqlen, const char* tensor, int64_t total,
                      int64_t batch) {
  if (max_seqlen <= 0 && total > 0 && batch > 0) {
    fail(std::string(max_name) + "=" + str(max_seqlen) + " but " + tensor + " has " + str(total) +
         " packed rows; pass the longest sequence's length (no device-to-host copy is made to "
         "find it)");
  }
  return std::min<int64_t>(max_seqlen, total);
}

void check_new_kv(const AttentionArgs& args, const ServingLayout& layout, const CallShape& s,
                  int64_t capacity) {
  const TensorView &k_new = *args.k_new, &v_new = *args.v_new;
  const DimNames& dims = layout.packed_q ? kNewPackedDims : kNewDenseDims;
  check_tensor("k_new", k_new, dims);
  check_tensor("v_new", v_new, dims);
  check_same_shape("k_new", k_new, "v_new", v_new);
  for (auto [name, t] : {std::pair{"k_new", &k_new}, {"v_new", &v_new}}) {
    if (args.k.dtype == DType::kFloat8E4M3 && t->dtype != args.k.dtype) {
      fail(std::string(name) + " must be fp8_e4m3 like the cache it is appended to (k, v), got " +
           to_string(t->dtype));
    }
    if (t->dtype != args.q.dtype) {
      fail(std::string("dtype of ") + name + " (" + to_string(t->dtype) +
           ") does not match dtype of q (" + to_string(args.q.dtype) + ")");
    }
    check_same_device(name, *t, "q", args.q);
  }
  const int r = dims.rank;
  if (layout.packed_q) {
    check_size("k_new", k_new, 0, dims, args.q.shape[0], "total_q of q, packed like it");
  } else {
    check_size("k_new", k_new, 0, dims, s.batch, "the batch");
    if (k_new.shape[1] > capacity) {
      fail("k_new has seqlen_new=" + str(k_new.shape[1]) + " new tokens per sequence, more than "
           "the cache holds: " + capacity_text(args.k, layout.paged ? &*args.page_table : nullptr,
                                               capacity));
    }
  }
  check_size("k_new", k_new, r - 2, dims, s.heads_kv, "heads_kv of the cache");
  check_size("k_new", k_new, r - 1, dims, s.head_dim, "head_dim of q");
}

}  // namespace

ServingLayout serving_layout(const AttentionArgs& args) {
  ServingLayout layout;
  layout.packed_q = args.cu_seqlens_q.has_value();
  layout.packed_kv = args.cu_seqlens_k.has_value();
  layout.cache = args.cache_seqlens.has_value();
  layout.paged = args.page_table.has_value();
  layout.append = args.k_new.has_value();
  if (layout.packed_kv && layout.cache) {
    fail("cu_seqlens_k and cache_seqlens cannot be combined: cu_seqlens_k packs k/v (varlen), "
         "cache_seqlens makes k/v a kv cache");
  }
  if (layout.packed_kv && !layout.packed_q) {
    fail("cu_seqlens_k is set but cu_seqlens_q is not: varlen packs q and k/v alike");
  }
  if (layout.packed_q && !layout.packed_kv && !layout.cache) {
    fail("cu_seqlens_q is set without cu_seqlens_k (varlen) or cache_seqlens (a kv cache with "
         "packed q)");
  }
  if (args.seqused_k && !layout.packed_kv) {
    fail("seqused_k is set without cu_seqlens_k: it limits varlen keys (a kv cache's lengths "
         "are cache_seqlens)");
  }
  if (layout.paged && !layout.cache) {
    fail("page_table is set without cache_seqlens: a paged cache needs its lengths");
  }
  if (args.k_new.has_value() != args.v_new.has_value()) {
    fail(std::string(args.k_new ? "k_new is set but v_new is not" : "v_new is set but k_new is "
                                                                     "not") +
         "; an append needs both");
  }
  if (layout.append && !layout.cache) {
    fail("k_new/v_new are set without cache_seqlens: new tokens are appended to a kv cache");
  }
  if (args.max_seqlen_q < 0) fail("max_seqlen_q must be >= 0, got " + str(args.max_seqlen_q));
  if (args.max_seqlen_k < 0) fail("max_seqlen_k must be >= 0, got " + str(args.max_seqlen_k));
  return layout;
}

std::string layout_name(const ServingLayout& layout) {
  std::string name = layout.packed_kv ? "varlen"
                     : layout.paged   ? "paged kv cache"
                     : layout.cache   ? "kv cache"
                                      : "dense";
  if (layout.cache && layout.packed_q) name += " (packed q)";
  if (layout.append) name += " + append";
  return name;
}

ServingLayout serving_layout(const AttentionParams& p) {
  ServingLayout layout;
  layout.packed_q = p.cu_seqlens_q != nullptr;
  layout.packed_kv = p.cu_seqlens_k != nullptr;
  layout.paged = p.page_table != nullptr;
  layout.cache = layout.paged || (p.seqused_k != nullptr && !layout.packed_kv);
  layout.append = p.seqlen_new > 0 || p.appends_packed;
  return layout;
}

std::string layout_name(const AttentionParams& p) { return layout_name(serving_layout(p)); }

CallShape check_serving_shapes(const AttentionArgs& args, const ServingLayout& layout) {
  const TensorView &q = args.q, &k = args.k, &v = args.v, &out = args.out;
  CallShape s;
  s.q_dims = layout.packed_q ? kPackedQDims : kDenseDims;
  s.kv_dims = layout.packed_kv ? kPackedKvDims : layout.paged ? kPagedDims : kCacheDims;
  check_tensor("q", q, s.q_dims);
  check_tensor("k", k, s.kv_dims);
  check_tensor("v", v, s.kv_dims);
  check_tensor("out", out, s.q_dims);
  check_same_shape("k", k, "v", v);
  for (int dim = 0; dim < s.q_dims.rank; ++dim) {
    check_same_dim("out", out, dim, "q", q, dim, s.q_dims.names[dim]);
  }
  const int qr = s.q_dims.rank, kr = s.kv_dims.rank;
  s.heads_q = q.shape[qr - 2];
  s.head_dim = q.shape[qr - 1];
  s.heads_kv = k.shape[kr - 2];
  check_same_dim("q", q, qr - 1, "k", k, kr - 1, "head_dim");

  s.batch = check_index_shapes(args, layout);
  if (!layout.packed_q) check_size("q", q, 0, s.q_dims, s.batch, "the batch of cache_seqlens");
  if (layout.cache && !layout.paged) {
    check_size("k", k, 0, s.kv_dims, s.batch, "the batch of cache_seqlens");
  }

  s.seqlen_q = layout.packed_q ? packed_seqlen("max_seqlen_q", args.max_seqlen_q, "q",
                                               q.shape[0], s.batch)
                               : q.shape[1];
  if (layout.packed_kv) {
    s.seqlen_k = packed_seqlen("max_seqlen_k", args.max_seqlen_k, "k", k.shape[0], s.batch);
  } else {
    if (layout.paged && k.shape[1] == 0) {
      fail("page_size=0: k, the paged cache " + std::string(kPagedDims.text) + ", has shape " +
           shape_string(k) + "; a page needs at least one slot");
    }
    if (layout.paged && args.page_table->shape[1] * k.shape[1] > INT_MAX) {
      fail("page_table width " + str(args.page_table->shape[1]) + " x page_size " +
           str(k.shape[1]) + " is more slots per sequence than the supported " + str(INT_MAX));
    }
    s.seqlen_k = cache_capacity(args, layout);
    if (args.max_seqlen_k > s.seqlen_k) {
      fail("max_seqlen_k=" + str(args.max_seqlen_k) + " is more than the cache holds: " +
           capacity_text(k, layout.paged ? &*args.page_table : nullptr, s.seqlen_k));
    }
  }
  if (layout.append) check_new_kv(args, layout, s, s.seqlen_k);

  if (layout.packed_q) {
    s.lse_shape = {s.heads_q, q.shape[0]};
    s.lse_text = "[heads_q, total_q]";
  } else {
    s.lse_shape = {s.batch, s.heads_q, s.seqlen_q};
  }
  return s;
}

void check_serving_overlaps(const AttentionArgs& args, const ServingLayout& layout) {
  const std::pair<const char*, const TensorView*> indices[] = {
      {"cu_seqlens_q", args.cu_seqlens_q ? &*args.cu_seqlens_q : nullptr},
      {"cu_seqlens_k", args.cu_seqlens_k ? &*args.cu_seqlens_k : nullptr},
      {"seqused_k", args.seqused_k ? &*args.seqused_k : nullptr},
      {"cache_seqlens", args.cache_seqlens ? &*args.cache_seqlens : nullptr},
      {"page_table", args.page_table ? &*args.page_table : nullptr}};
  for (auto [name, t] : indices) {
    if (t == nullptr) continue;
    check_no_overlap("out", args.out, name, *t);
    if (args.lse) check_no_overlap("lse", *args.lse, name, *t);
    if (layout.append) {
      check_no_overlap("k", args.k, name, *t, "the append writes the cache");
      check_no_overlap("v", args.v, name, *t, "the append writes the cache");
    }
  }
  if (!layout.append) return;
  for (auto [name, t] : {std::pair{"k_new", &*args.k_new}, {"v_new", &*args.v_new}}) {
    check_no_overlap("out", args.out, name, *t);
    if (args.lse) check_no_overlap("lse", *args.lse, name, *t);
    check_no_overlap(name, *t, "k", args.k, "new tokens must not alias the cache they go to");
    check_no_overlap(name, *t, "v", args.v, "new tokens must not alias the cache they go to");
  }
}

void check_serving_cuda_alignment(const AttentionArgs& args, const ServingLayout& layout) {
  if (!layout.append) return;
  const DimNames& dims = layout.packed_q ? kNewPackedDims : kNewDenseDims;
  check_cuda_alignment("k_new", *args.k_new, dims);
  check_cuda_alignment("v_new", *args.v_new, dims);
}

void fill_serving_params(const AttentionArgs& args, const ServingLayout& layout,
                         AttentionParams& p) {
  auto index_data = [](const std::optional<TensorView>& t) {
    return t ? static_cast<const int32_t*>(t->data) : nullptr;
  };
  if (layout.packed_q) {
    p.cu_seqlens_q = index_data(args.cu_seqlens_q);
    p.total_q = static_cast<int>(args.q.shape[0]);
  }
  if (layout.packed_kv) {
    p.cu_seqlens_k = index_data(args.cu_seqlens_k);
    p.total_k = static_cast<int>(args.k.shape[0]);
    p.seqused_k = index_data(args.seqused_k);
  }
  if (layout.cache) p.seqused_k = index_data(args.cache_seqlens);
  if (layout.paged) {
    p.page_table = index_data(args.page_table);
    p.page_table_stride = args.page_table->strides[0];
    p.page_size = static_cast<int>(args.k.shape[1]);
    p.num_pages = static_cast<int>(args.k.shape[0]);
  }
  if (layout.append) {
    p.appends_packed = layout.packed_q;
    p.seqlen_new = layout.packed_q ? 0 : static_cast<int>(args.k_new->shape[1]);
  }
}

AppendParams append_params(const AttentionArgs& args) {
  AppendParams a;
  if (!args.k_new) return a;
  const TensorView &k = *args.k_new, &v = *args.v_new;
  const int r = k.ndim;  // 4: [batch, seqlen_new, ...]; 3: packed like q
  a.k_new = k.data;
  a.v_new = v.data;
  a.k_batch_stride = r == 4 ? k.strides[0] : 0;
  a.v_batch_stride = r == 4 ? v.strides[0] : 0;
  a.k_row_stride = k.strides[r - 3], a.k_head_stride = k.strides[r - 2];
  a.v_row_stride = v.strides[r - 3], a.v_head_stride = v.strides[r - 2];
  return a;
}

}  // namespace flashcore::detail
