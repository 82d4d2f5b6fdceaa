// Host buffers of one ragged serving batch (flashcore.h "Serving layouts") and the per-sequence
// dense problems the float64 oracle checks it against.
//
// Every sequence b has its own random q [seqlens_q[b], heads_q, d] and k/v [seqlens_k[b],
// heads_kv, d] (testing::make_random_inputs, one seed per sequence); the builder scatters them
// into the layout and fills every slot no sequence owns with NaN (padding rows of packed k/v,
// keys past seqused_k, cache slots past a sequence's length, spare pages, the page table's
// unused entries point at a NaN page), so a kernel that reads one fails. With appends, the new
// keys are the last ones of each sequence: k_new/v_new hold them and the cache's slots for them
// start as NaN; `expected_k_cache/expected_v_cache` is the cache after a correct append.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <ostream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "flashcore/flashcore.h"
#include "testing/accuracy.h"

namespace flashcore::test {

enum class ServingLayout { kVarlen, kContiguousCache, kPagedCache };

inline const char* to_string(ServingLayout layout) {
  switch (layout) {
    case ServingLayout::kVarlen: return "varlen";
    case ServingLayout::kContiguousCache: return "cache";
    case ServingLayout::kPagedCache: return "paged";
  }
  return "?";
}

struct ServingCase {
  ServingLayout layout = ServingLayout::kVarlen;
  std::vector<int> seqlens_q;  // query rows of each sequence
  std::vector<int> seqlens_k;  // keys each sequence attends to (a cache's: old plus appended)
  int heads_q = 4, heads_kv = 1, head_dim = 128;
  DType dtype = DType::kBFloat16;
  bool causal = false;
  // Caches: q packed with cu_seqlens_q (else dense: every seqlens_q equal).
  bool packed_q = true;
  int page_size = 16;    // paged cache
  bool seqused = false;  // varlen: seqused_k shorter than each cu_seqlens_k range
  bool append = false;   // caches: the last keys come as k_new/v_new
  int seqlen_new = 0;    // dense appends (packed_q false): new rows per sequence

  int batch() const { return int(seqlens_q.size()); }
  // Keys sequence b appends: packed appends follow q's sequences.
  int appended(int b) const {
    if (!append) return 0;
    return packed_q ? seqlens_q[b] : seqlen_new;
  }
  std::string describe() const {
    std::ostringstream text;
    text << to_string(layout);
    if (layout == ServingLayout::kPagedCache) text << " page" << page_size;
    if (layout != ServingLayout::kVarlen) text << (packed_q ? " q-packed" : " q-dense");
    if (seqused) text << " seqused";
    if (append) text << " append";
    text << " hq" << heads_q << " hkv" << heads_kv << " d" << head_dim << " "
         << flashcore::to_string(dtype) << (causal ? " causal" : "") << " q/k";
    for (int b = 0; b < batch(); ++b) text << (b ? "," : " ") << seqlens_q[b] << "/" << seqlens_k[b];
    return text.str();
  }
};

// gtest prints a parameter with this, not as bytes.
inline void PrintTo(const ServingCase& c, std::ostream* os) { *os << c.describe(); }

// A tensor's host bytes with its shape and strides (elements), contiguous row-major.
struct HostView {
  std::vector<uint8_t> bytes;
  std::vector<int64_t> shape;
  DType dtype = DType::kFloat16;
};

struct ServingProblem {
  ServingCase c;
  std::vector<testing::ProblemShape> shapes;  // sequence b alone: batch 1
  std::vector<testing::HostTensors> inputs;   // its dense q, k, v

  HostView q, k, v, out, lse, k_new, v_new;  // k/v: the cache as the call gets it
  HostView expected_k_cache, expected_v_cache;  // caches with appends: after the call
  std::vector<int32_t> cu_seqlens_q, cu_seqlens_k, seqused_k, cache_seqlens, page_table;
  int64_t page_table_width = 0;
  int max_seqlen_q = 0, max_seqlen_k = 0;

  // Row `row` of sequence b in out (and q) and its lse index for head h.
  int64_t out_row(int b, int row) const {
    return c.layout == ServingLayout::kVarlen || c.packed_q
               ? int64_t(cu_seqlens_q[b]) + row
               : int64_t(b) * max_seqlen_q + row;
  }
  int64_t lse_index(int b, int h, int row) const {
    if (c.layout == ServingLayout::kVarlen || c.packed_q) {
      return int64_t(h) * cu_seqlens_q.back() + cu_seqlens_q[b] + row;
    }
    return (int64_t(b) * c.heads_q + h) * max_seqlen_q + row;
  }
};

namespace serving_detail {

inline constexpr uint8_t kNanByte = 0xFF;  // 0xFFFF: NaN in fp16 and bf16
inline constexpr int kPaddingRows = 3;     // NaN rows past every packed k/v and spare pages

inline HostView make_view(DType dtype, std::vector<int64_t> shape, uint8_t fill) {
  HostView view;
  view.dtype = dtype;
  view.shape = std::move(shape);
  int64_t elements = 1;
  for (int64_t extent : view.shape) elements *= extent;
  view.bytes.assign(size_t(elements) * dtype_size(dtype), fill);
  return view;
}

// Copies `rows` rows of `row_bytes` from src (contiguous) to dst at row `dst_row`.
inline void copy_rows(HostView& dst, int64_t dst_row, const uint8_t* src, int64_t rows,
                      size_t row_bytes) {
  if (rows > 0) std::memcpy(dst.bytes.data() + dst_row * row_bytes, src, size_t(rows) * row_bytes);
}

}  // namespace serving_detail

inline ServingProblem make_serving_problem(const ServingCase& c, uint64_t seed) {
  using namespace serving_detail;
  ServingProblem p;
  p.c = c;
  const int batch = c.batch();
  const int64_t d = c.head_dim;
  const size_t eb = dtype_size(c.dtype);
  const size_t q_row_bytes = size_t(c.heads_q) * d * eb, kv_row_bytes = size_t(c.heads_kv) * d * eb;
  for (int b = 0; b < batch; ++b) {
    testing::ProblemShape s;
    s.batch = 1, s.seqlen_q = c.seqlens_q[b], s.seqlen_k = c.seqlens_k[b];
    s.heads_q = c.heads_q, s.heads_kv = c.heads_kv, s.head_dim = c.head_dim;
    s.dtype = c.dtype, s.causal = c.causal;
    p.shapes.push_back(s);
    p.inputs.push_back(testing::make_random_inputs(s, seed + 7919 * b));
  }
  p.max_seqlen_q = *std::max_element(c.seqlens_q.begin(), c.seqlens_q.end());

  // q/out and lse: packed (varlen or packed_q) or dense [batch, seqlen_q].
  const bool packed_q = c.layout == ServingLayout::kVarlen || c.packed_q;
  p.cu_seqlens_q.assign(1, 0);
  for (int b = 0; b < batch; ++b) p.cu_seqlens_q.push_back(p.cu_seqlens_q.back() + c.seqlens_q[b]);
  const int64_t total_q = p.cu_seqlens_q.back();
  if (packed_q) {
    p.q = make_view(c.dtype, {total_q, c.heads_q, d}, kNanByte);
    p.lse = make_view(DType::kFloat32, {c.heads_q, total_q}, kNanByte);
  } else {
    p.q = make_view(c.dtype, {batch, p.max_seqlen_q, c.heads_q, d}, kNanByte);
    p.lse = make_view(DType::kFloat32, {batch, c.heads_q, p.max_seqlen_q}, kNanByte);
  }
  p.out = make_view(c.dtype, p.q.shape, kNanByte);
  for (int b = 0; b < batch; ++b) {
    copy_rows(p.q, p.out_row(b, 0), p.inputs[b].q.data(), c.seqlens_q[b], q_row_bytes);
  }
  if (!packed_q) p.cu_seqlens_q.clear();

  if (c.layout == ServingLayout::kVarlen) {
    // Sequence b owns rows [cu[b], cu[b+1]): its keys, then (seqused) as many NaN rows.
    p.cu_seqlens_k.assign(1, 0);
    for (int b = 0; b < batch; ++b) {
      const int owned = c.seqlens_k[b] * (c.seqused ? 2 : 1) + (c.seqused ? 1 : 0);
      p.cu_seqlens_k.push_back(p.cu_seqlens_k.back() + owned);
      p.max_seqlen_k = std::max(p.max_seqlen_k, owned);
      if (c.seqused) p.seqused_k.push_back(c.seqlens_k[b]);
    }
    const int64_t rows = p.cu_seqlens_k.back() + kPaddingRows;
    p.k = make_view(c.dtype, {rows, c.heads_kv, d}, kNanByte);
    p.v = make_view(c.dtype, {rows, c.heads_kv, d}, kNanByte);
    for (int b = 0; b < batch; ++b) {
      copy_rows(p.k, p.cu_seqlens_k[b], p.inputs[b].k.data(), c.seqlens_k[b], kv_row_bytes);
      copy_rows(p.v, p.cu_seqlens_k[b], p.inputs[b].v.data(), c.seqlens_k[b], kv_row_bytes);
    }
    return p;
  }

  // A kv cache: slot t of sequence b is at `cache_row(b, t)` of the flattened cache rows.
  std::vector<std::vector<int64_t>> pages(batch);  // paged: the pages of each sequence
  int64_t cache_rows = 0;
  if (c.layout == ServingLayout::kContiguousCache) {
    const int capacity = *std::max_element(c.seqlens_k.begin(), c.seqlens_k.end()) + kPaddingRows;
    p.max_seqlen_k = capacity;
    p.k = make_view(c.dtype, {batch, capacity, c.heads_kv, d}, kNanByte);
    cache_rows = int64_t(batch) * capacity;
  } else {
    const int ps = c.page_size;
    int64_t used = 0, width = 1;
    for (int b = 0; b < batch; ++b) {
      const int64_t n = (c.seqlens_k[b] + ps - 1) / ps;
      used += n;
      width = std::max(width, n + 1);  // one unused entry at least in every row
    }
    const int64_t num_pages = used + kPaddingRows;  // the spare ones stay NaN
    std::vector<int64_t> order(num_pages);
    std::iota(order.begin(), order.end(), 0);
    std::shuffle(order.begin(), order.end(), std::mt19937_64(seed));
    const int32_t nan_page = int32_t(order.back());  // a spare page
    p.page_table_width = width;
    p.page_table.assign(size_t(batch * width), nan_page);
    int64_t next = 0;
    for (int b = 0; b < batch; ++b) {
      for (int64_t i = 0; i * ps < c.seqlens_k[b]; ++i) {
        pages[b].push_back(order[next++]);
        p.page_table[b * width + i] = int32_t(pages[b].back());
      }
    }
    p.max_seqlen_k = int(width * ps);
    p.k = make_view(c.dtype, {num_pages, ps, c.heads_kv, d}, kNanByte);
    cache_rows = num_pages * ps;
  }
  const auto cache_row = [&](int b, int64_t t) -> int64_t {
    if (c.layout == ServingLayout::kContiguousCache) return int64_t(b) * p.max_seqlen_k + t;
    return pages[b][t / c.page_size] * c.page_size + t % c.page_size;
  };
  (void)cache_rows;
  p.v = p.k;
  p.expected_k_cache = p.k, p.expected_v_cache = p.k;
  // Dense appends: [batch, seqlen_new, heads_kv, d]; packed: like q.
  if (c.append) {
    const std::vector<int64_t> shape = c.packed_q
                                           ? std::vector<int64_t>{total_q, c.heads_kv, d}
                                           : std::vector<int64_t>{batch, c.seqlen_new, c.heads_kv, d};
    p.k_new = make_view(c.dtype, shape, kNanByte);
    p.v_new = p.k_new;
  }
  for (int b = 0; b < batch; ++b) {
    const int fresh = c.appended(b);
    const int old = c.seqlens_k[b] - fresh;  // the test cases keep this >= 0
    p.cache_seqlens.push_back(old);
    for (int64_t t = 0; t < c.seqlens_k[b]; ++t) {
      const uint8_t* k_row = p.inputs[b].k.data() + t * kv_row_bytes;
      const uint8_t* v_row = p.inputs[b].v.data() + t * kv_row_bytes;
      copy_rows(p.expected_k_cache, cache_row(b, t), k_row, 1, kv_row_bytes);
      copy_rows(p.expected_v_cache, cache_row(b, t), v_row, 1, kv_row_bytes);
      if (t < old) {
        copy_rows(p.k, cache_row(b, t), k_row, 1, kv_row_bytes);
        copy_rows(p.v, cache_row(b, t), v_row, 1, kv_row_bytes);
      } else {
        const int64_t new_row = c.packed_q ? p.cu_seqlens_q[b] + (t - old)
                                           : int64_t(b) * c.seqlen_new + (t - old);
        copy_rows(p.k_new, new_row, k_row, 1, kv_row_bytes);
        copy_rows(p.v_new, new_row, v_row, 1, kv_row_bytes);
      }
    }
  }
  if (!c.append) p.expected_k_cache.bytes.clear(), p.expected_v_cache.bytes.clear();
  return p;
}

// Sequence b's out rows (dense [1, sq, hq, d] bytes) and lse ([1, hq, sq]) from the batch's.
inline std::vector<uint8_t> sequence_out(const ServingProblem& p, const std::vector<uint8_t>& out,
                                         int b) {
  const size_t row_bytes = size_t(p.c.heads_q) * p.c.head_dim * dtype_size(p.c.dtype);
  const int rows = p.c.seqlens_q[b];
  std::vector<uint8_t> seq(size_t(rows) * row_bytes);
  if (rows > 0) std::memcpy(seq.data(), out.data() + p.out_row(b, 0) * row_bytes, seq.size());
  return seq;
}
inline std::vector<float> sequence_lse(const ServingProblem& p, const std::vector<float>& lse,
                                       int b) {
  std::vector<float> seq;
  for (int h = 0; h < p.c.heads_q; ++h) {
    for (int row = 0; row < p.c.seqlens_q[b]; ++row) seq.push_back(lse[p.lse_index(b, h, row)]);
  }
  return seq;
}

// "" when the downloaded cache equals the expected one, else where it first differs.
inline std::string cache_mismatch(const char* name, const std::vector<uint8_t>& got,
                                  const HostView& want, const ServingCase& c) {
  const size_t row_bytes = size_t(c.heads_kv) * c.head_dim * dtype_size(c.dtype);
  if (got.size() != want.bytes.size()) return std::string(name) + " cache size differs";
  for (size_t row = 0; row * row_bytes < want.bytes.size(); ++row) {
    if (std::memcmp(got.data() + row * row_bytes, want.bytes.data() + row * row_bytes,
                    row_bytes) != 0) {
      return std::string(name) + " cache row " + std::to_string(row) +
             " (flattened over pages/sequences) differs from the expected append";
    }
  }
  return "";
}

struct ServingVerdict {
  bool pass = true;
  std::string failures;  // one line per failing sequence or cache
  std::string closest;   // the passing sequence nearest its tolerance
};

// Checks the outputs of a run (host copies) per sequence against the float64 oracle on up to
// max_rows rows of each (every `stride`-th sequence, and the last), and with appends the caches.
inline ServingVerdict check_serving_outputs(const ServingProblem& p,
                                            const std::vector<uint8_t>& out,
                                            const std::vector<float>& lse,
                                            const std::vector<uint8_t>* k_cache,
                                            const std::vector<uint8_t>* v_cache, int max_rows,
                                            int stride = 1) {
  const ServingCase& c = p.c;
  ServingVerdict verdict;
  double closest_ratio = -1;
  for (int b = 0; b < c.batch(); ++b) {
    if (b % stride != 0 && b != c.batch() - 1) continue;
    const std::vector<uint8_t> seq_out = sequence_out(p, out, b);
    const std::vector<float> seq_lse = sequence_lse(p, lse, b);
    const testing::AccuracyReport report =
        testing::check_accuracy(p.shapes[b], p.inputs[b], seq_out.data(), seq_lse.data(),
                                testing::sample_rows(c.seqlens_q[b], max_rows));
    const double ratio = report.tol_out > 0 ? report.max_err_out / report.tol_out : 0;
    if (report.pass && ratio > closest_ratio) {
      closest_ratio = ratio;
      verdict.closest = "sequence " + std::to_string(b) + " " + report.summary();
    }
    if (!report.pass) {
      verdict.pass = false;
      verdict.failures += "\n  sequence " + std::to_string(b) + " (" + p.shapes[b].describe() +
                          "): " + report.summary();
    }
  }
  if (c.append && k_cache != nullptr && v_cache != nullptr) {
    for (const std::string& mismatch : {cache_mismatch("k", *k_cache, p.expected_k_cache, c),
                                        cache_mismatch("v", *v_cache, p.expected_v_cache, c)}) {
      if (!mismatch.empty()) verdict.pass = false, verdict.failures += "\n  " + mismatch;
    }
  }
  return verdict;
}

}  // namespace flashcore::test
