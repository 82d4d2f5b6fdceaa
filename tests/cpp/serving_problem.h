// A ragged batch in one of the serving layouts, built from per-sequence dense problems, so each
// sequence's output can be checked against the float64 reference of that sequence run alone
// (issue 25's rule). Unused key rows, cache slots and pages hold NaN (all bits set): a backend
// that reads them fails the accuracy check.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "flashcore/flashcore.h"
#include "testing/accuracy.h"

namespace flashcore::test {

enum class KvLayout { kVarlen, kCache, kPaged };

inline const char* to_string(KvLayout layout) {
  switch (layout) {
    case KvLayout::kVarlen: return "varlen";
    case KvLayout::kCache: return "cache";
    case KvLayout::kPaged: return "paged";
  }
  return "?";
}

struct ServingShape {
  KvLayout kv = KvLayout::kVarlen;
  std::vector<int> q_lens;  // queries per sequence (all equal when q is dense)
  std::vector<int> k_lens;  // keys per sequence, counting a cache's appended tokens
  bool packed_q = true;     // always with varlen; with a cache, cu_seqlens_q (else q is dense)
  bool append = false;      // caches: the last new_of(b) keys come in k_new/v_new
  int seqlen_new = 1;       // new tokens per sequence with dense q (packed q: its queries)
  int page_size = 16;
  int slack = 5;            // NaN key rows (varlen, with seqused_k) / free slots (cache) per seq
  bool seqused = false;     // varlen: each sequence's keys followed by `slack` NaN rows
  int heads_q = 8, heads_kv = 2, head_dim = 64;
  DType dtype = DType::kFloat16;
  bool causal = false;

  int batch() const { return static_cast<int>(q_lens.size()); }
  int new_of(int b) const { return !append ? 0 : packed_q ? q_lens[b] : seqlen_new; }

  std::string describe() const {
    std::ostringstream text;
    text << to_string(kv) << (kv != KvLayout::kVarlen && packed_q ? " packed_q" : "")
         << (append ? " append" : "") << (seqused ? " seqused" : "") << " q[";
    for (int b = 0; b < batch(); ++b) text << (b ? "," : "") << q_lens[b];
    text << "] k[";
    for (int b = 0; b < batch(); ++b) text << (b ? "," : "") << k_lens[b];
    text << "] hq" << heads_q << " hkv" << heads_kv << " d" << head_dim << " "
         << flashcore::to_string(dtype) << (causal ? " causal" : "");
    if (kv == KvLayout::kPaged) text << " page" << page_size;
    return text.str();
  }

  // Sequence b as a dense problem of its own.
  testing::ProblemShape sequence(int b) const {
    testing::ProblemShape s;
    s.batch = 1, s.seqlen_q = q_lens[b], s.seqlen_k = k_lens[b];
    s.heads_q = heads_q, s.heads_kv = heads_kv, s.head_dim = head_dim;
    s.dtype = dtype, s.causal = causal;
    return s;
  }
};

// Owns every buffer of one call; args() views them.
class ServingProblem {
 public:
  explicit ServingProblem(const ServingShape& shape, uint64_t seed = 7, float stddev = 1.0f)
      : s_(shape), eb_(dtype_size(shape.dtype)) {
    const int batch = s_.batch();
    q_row_bytes_ = size_t(s_.heads_q) * s_.head_dim * eb_;
    kv_row_bytes_ = size_t(s_.heads_kv) * s_.head_dim * eb_;
    for (int b = 0; b < batch; ++b) {
      inputs_.push_back(testing::make_random_inputs(s_.sequence(b), seed + 101 * b, stddev));
    }
    cu_q_.assign(batch + 1, 0);
    for (int b = 0; b < batch; ++b) cu_q_[b + 1] = cu_q_[b] + s_.q_lens[b];
    total_q_ = cu_q_[batch];
    for (int b = 0; b < batch; ++b) append_bytes(q_, inputs_[b].q);
    out_.assign(q_.size(), 0xFF);
    lse_.resize(size_t(total_q_) * s_.heads_q);
    std::memset(lse_.data(), 0xFF, lse_.size() * sizeof(float));
    switch (s_.kv) {
      case KvLayout::kVarlen: build_varlen(); break;
      case KvLayout::kCache: build_cache(); break;
      case KvLayout::kPaged: build_paged(seed); break;
    }
    if (s_.append) build_new_kv();
  }

  AttentionArgs args(Backend backend = Backend::kCPU) {
    const Device cpu{DeviceType::kCPU, 0};
    const DType dt = s_.dtype;
    const int64_t hq = s_.heads_q, hkv = s_.heads_kv, d = s_.head_dim, batch = s_.batch();
    AttentionArgs a;
    const bool packed = s_.packed_q || s_.kv == KvLayout::kVarlen;
    const int64_t sq = batch ? s_.q_lens[0] : 0;
    if (packed) {
      a.q = make_tensor(q_.data(), dt, cpu, {total_q_, hq, d});
      a.out = make_tensor(out_.data(), dt, cpu, {total_q_, hq, d});
      a.lse = make_tensor(lse_.data(), DType::kFloat32, cpu, {hq, total_q_});
      a.cu_seqlens_q = make_tensor(cu_q_.data(), DType::kInt32, cpu, {batch + 1});
      a.max_seqlen_q = batch ? *std::max_element(s_.q_lens.begin(), s_.q_lens.end()) : 0;
    } else {
      a.q = make_tensor(q_.data(), dt, cpu, {batch, sq, hq, d});
      a.out = make_tensor(out_.data(), dt, cpu, {batch, sq, hq, d});
      a.lse = make_tensor(lse_.data(), DType::kFloat32, cpu, {batch, hq, sq});
    }
    switch (s_.kv) {
      case KvLayout::kVarlen:
        a.k = make_tensor(k_.data(), dt, cpu, {kv_rows_, hkv, d});
        a.v = make_tensor(v_.data(), dt, cpu, {kv_rows_, hkv, d});
        a.cu_seqlens_k = make_tensor(cu_k_.data(), DType::kInt32, cpu, {batch + 1});
        a.max_seqlen_k = max_k_rows_;
        if (s_.seqused) a.seqused_k = make_tensor(lengths_.data(), DType::kInt32, cpu, {batch});
        break;
      case KvLayout::kCache:
        a.k = make_tensor(k_.data(), dt, cpu, {batch, capacity_, hkv, d});
        a.v = make_tensor(v_.data(), dt, cpu, {batch, capacity_, hkv, d});
        a.cache_seqlens = make_tensor(lengths_.data(), DType::kInt32, cpu, {batch});
        break;
      case KvLayout::kPaged:
        a.k = make_tensor(k_.data(), dt, cpu, {num_pages_, s_.page_size, hkv, d});
        a.v = make_tensor(v_.data(), dt, cpu, {num_pages_, s_.page_size, hkv, d});
        a.cache_seqlens = make_tensor(lengths_.data(), DType::kInt32, cpu, {batch});
        a.page_table = make_tensor(page_table_.data(), DType::kInt32, cpu, {batch, table_width_});
        break;
    }
    if (s_.append) {
      if (packed) {
        a.k_new = make_tensor(k_new_.data(), dt, cpu, {total_q_, hkv, d});
        a.v_new = make_tensor(v_new_.data(), dt, cpu, {total_q_, hkv, d});
      } else {
        a.k_new = make_tensor(k_new_.data(), dt, cpu, {batch, s_.seqlen_new, hkv, d});
        a.v_new = make_tensor(v_new_.data(), dt, cpu, {batch, s_.seqlen_new, hkv, d});
      }
    }
    a.causal = s_.causal;
    a.backend = backend;
    return a;
  }

  // The accuracy rule on sequence b's rows of out and lse, against b run alone.
  testing::AccuracyReport check_sequence(int b, int max_rows = 96) const {
    const testing::ProblemShape seq = s_.sequence(b);
    const int lq = s_.q_lens[b], hq = s_.heads_q;
    const bool packed = s_.packed_q || s_.kv == KvLayout::kVarlen;
    std::vector<float> lse(size_t(hq) * lq);
    for (int h = 0; h < hq; ++h) {
      for (int r = 0; r < lq; ++r) {
        lse[size_t(h) * lq + r] = packed ? lse_[size_t(h) * total_q_ + cu_q_[b] + r]
                                         : lse_[(size_t(b) * hq + h) * lq + r];
      }
    }
    return testing::check_accuracy(seq, inputs_[b], &out_[cu_q_[b] * q_row_bytes_], lse.data(),
                                   testing::sample_rows(lq, max_rows));
  }

  // Whether the cache holds every key of sequence b (its old tokens and the appended ones) at
  // the slots the layout says, bit for bit; "" when it does, else the first mismatch.
  std::string cache_mismatch(int b) const {
    const int lk = s_.k_lens[b];
    for (int t = 0; t < lk; ++t) {
      const size_t slot = cache_slot(b, t) * kv_row_bytes_;
      const size_t source = size_t(t) * kv_row_bytes_;
      if (std::memcmp(&k_[slot], &inputs_[b].k[source], kv_row_bytes_) != 0 ||
          std::memcmp(&v_[slot], &inputs_[b].v[source], kv_row_bytes_) != 0) {
        return "sequence " + std::to_string(b) + " token " + std::to_string(t);
      }
    }
    return "";
  }

  // Cache slots that hold no key of any sequence and must still be NaN (all bits set) after
  // the call: the append wrote nothing beyond each sequence's new tokens.
  bool free_slots_untouched() const {
    std::vector<bool> used(k_.size() / kv_row_bytes_, false);
    for (int b = 0; b < s_.batch(); ++b) {
      for (int t = 0; t < s_.k_lens[b]; ++t) used[cache_slot(b, t)] = true;
    }
    for (size_t slot = 0; slot < used.size(); ++slot) {
      if (used[slot]) continue;
      for (size_t i = 0; i < kv_row_bytes_; ++i) {
        if (k_[slot * kv_row_bytes_ + i] != 0xFF || v_[slot * kv_row_bytes_ + i] != 0xFF) {
          return false;
        }
      }
    }
    return true;
  }

  const ServingShape& shape() const { return s_; }
  std::vector<int32_t>& cache_seqlens() { return lengths_; }
  std::vector<int32_t>& page_table() { return page_table_; }
  std::vector<int32_t>& cu_seqlens_q() { return cu_q_; }
  std::vector<int32_t>& cu_seqlens_k() { return cu_k_; }
  int table_width() const { return table_width_; }
  int num_pages() const { return num_pages_; }

 private:
  static void append_bytes(std::vector<uint8_t>& dst, const std::vector<uint8_t>& src) {
    dst.insert(dst.end(), src.begin(), src.end());
  }

  // Row index (in kv rows of heads_kv * head_dim) of token t of sequence b in the cache.
  size_t cache_slot(int b, int t) const {
    if (s_.kv == KvLayout::kPaged) {
      const int page = page_table_[size_t(b) * table_width_ + t / s_.page_size];
      return size_t(page) * s_.page_size + t % s_.page_size;
    }
    return size_t(b) * capacity_ + t;
  }

  void build_varlen() {
    const int batch = s_.batch(), pad = s_.seqused ? s_.slack : 0;
    cu_k_.assign(batch + 1, 0);
    lengths_.assign(batch, 0);
    for (int b = 0; b < batch; ++b) {
      append_bytes(k_, inputs_[b].k);
      append_bytes(v_, inputs_[b].v);
      k_.resize(k_.size() + pad * kv_row_bytes_, 0xFF);
      v_.resize(v_.size() + pad * kv_row_bytes_, 0xFF);
      cu_k_[b + 1] = cu_k_[b] + s_.k_lens[b] + pad;
      lengths_[b] = s_.k_lens[b];
      max_k_rows_ = std::max(max_k_rows_, s_.k_lens[b] + pad);
    }
    kv_rows_ = cu_k_[batch];
  }

  // Old tokens (all but the appended ones) of every sequence into its cache slots.
  void fill_old_tokens() {
    lengths_.assign(s_.batch(), 0);
    for (int b = 0; b < s_.batch(); ++b) {
      lengths_[b] = s_.k_lens[b] - s_.new_of(b);
      for (int t = 0; t < lengths_[b]; ++t) {
        std::memcpy(&k_[cache_slot(b, t) * kv_row_bytes_], &inputs_[b].k[t * kv_row_bytes_],
                    kv_row_bytes_);
        std::memcpy(&v_[cache_slot(b, t) * kv_row_bytes_], &inputs_[b].v[t * kv_row_bytes_],
                    kv_row_bytes_);
      }
    }
  }

  void build_cache() {
    const int batch = s_.batch();
    capacity_ = (batch ? *std::max_element(s_.k_lens.begin(), s_.k_lens.end()) : 0) + s_.slack;
    k_.assign(size_t(batch) * capacity_ * kv_row_bytes_, 0xFF);
    v_.assign(k_.size(), 0xFF);
    fill_old_tokens();
  }

  // Pages in a shuffled order, a few spare NaN pages, and table entries past each sequence's
  // pages holding values no backend may read (out of range both ways).
  void build_paged(uint64_t seed) {
    const int batch = s_.batch(), ps = s_.page_size;
    std::vector<int> pages_of(batch);
    int pages = 3;  // spare
    table_width_ = 1;
    for (int b = 0; b < batch; ++b) {
      pages_of[b] = (s_.k_lens[b] + ps - 1) / ps;
      pages += pages_of[b];
      table_width_ = std::max(table_width_, pages_of[b] + 1);
    }
    num_pages_ = pages;
    std::vector<int32_t> order(pages);
    std::iota(order.begin(), order.end(), 0);
    std::shuffle(order.begin(), order.end(), std::mt19937_64(seed));
    page_table_.assign(size_t(batch) * table_width_, 0);
    int next = 0;
    for (int b = 0; b < batch; ++b) {
      for (int i = 0; i < table_width_; ++i) {
        page_table_[size_t(b) * table_width_ + i] =
            i < pages_of[b] ? order[next++] : (i % 2 ? -7 : 1 << 30);
      }
    }
    k_.assign(size_t(num_pages_) * ps * kv_row_bytes_, 0xFF);
    v_.assign(k_.size(), 0xFF);
    fill_old_tokens();
  }

  // The appended tokens: dense [batch, seqlen_new, ...] or packed like q.
  void build_new_kv() {
    for (int b = 0; b < s_.batch(); ++b) {
      const int first = s_.k_lens[b] - s_.new_of(b);
      const auto begin = size_t(first) * kv_row_bytes_, end = size_t(s_.k_lens[b]) * kv_row_bytes_;
      k_new_.insert(k_new_.end(), inputs_[b].k.begin() + begin, inputs_[b].k.begin() + end);
      v_new_.insert(v_new_.end(), inputs_[b].v.begin() + begin, inputs_[b].v.begin() + end);
    }
  }

  ServingShape s_;
  size_t eb_, q_row_bytes_ = 0, kv_row_bytes_ = 0;
  std::vector<testing::HostTensors> inputs_;
  std::vector<uint8_t> q_, out_, k_, v_, k_new_, v_new_;
  std::vector<float> lse_;
  std::vector<int32_t> cu_q_, cu_k_, lengths_, page_table_;
  int64_t total_q_ = 0, kv_rows_ = 0;
  int max_k_rows_ = 0, capacity_ = 0, table_width_ = 0, num_pages_ = 0;
};

}  // namespace flashcore::test
