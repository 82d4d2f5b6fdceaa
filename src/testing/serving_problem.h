// A ragged batch in one of the serving layouts, built from per-sequence dense problems, so each
// sequence's output can be checked against the float64 reference of that sequence run alone
// (issue 25's rule). Shared by the tests and flashcore-bench. Unused key rows, cache slots and
// pages hold NaN (all bits set): a backend that reads one fails the accuracy check.
//
//   ServingShape    what the batch is (layout, lengths, heads, ...)
//   ServingIndices  the index tensors' values and the sizes they imply (cheap: no data)
//   ServingProblem  host data for every tensor, the args over it, and the checks
//   serving_args    AttentionArgs over any memory (host, device, made-up addresses)
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "flashcore/flashcore.h"
#include "testing/accuracy.h"

namespace flashcore::testing {

enum class KvLayout { kVarlen, kCache, kPaged };

const char* to_string(KvLayout layout);

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
  bool shuffle_pages = true;  // paged: pages in a random order (else sequence by sequence)
  int heads_q = 8, heads_kv = 2, head_dim = 64;
  DType dtype = DType::kFloat16;
  std::optional<DType> out_dtype;  // fp8 only: bf16 (default) or fp16 (ProblemShape::out_dtype)
  bool causal = false;

  int batch() const { return static_cast<int>(q_lens.size()); }
  bool q_is_packed() const { return packed_q || kv == KvLayout::kVarlen; }
  int new_of(int b) const { return !append ? 0 : packed_q ? q_lens[b] : seqlen_new; }
  // "paged page16 q[1,1] k[17,4096] hq32 hkv8 d128 bf16 causal"
  std::string describe() const;
  DType output_dtype() const;  // of out: dtype, or for fp8 inputs out_dtype (bf16 by default)
  // Sequence b as a dense problem of its own.
  ProblemShape sequence(int b) const;
  // Sum over the sequences of their dense FLOPs (visible pairs, ProblemShape::flops).
  double flops() const;
};

// The index tensors of a shape and the sizes they imply. Paged: each sequence owns
// ceil(k_len / page_size) pages (shuffled or in order), 3 spare pages exist, and table entries
// past a sequence's pages hold values no backend may read (out of range both ways).
struct ServingIndices {
  std::vector<int32_t> cu_q, cu_k;  // cu_k: varlen only
  std::vector<int32_t> lengths;     // seqused_k (varlen) or cache_seqlens
  std::vector<int32_t> page_table;  // [batch, table_width]
  int64_t total_q = 0;
  int64_t kv_rows = 0;  // rows of k/v: total_k, batch * capacity or num_pages * page_size
  int max_k_rows = 0, capacity = 0, table_width = 0, num_pages = 0;

  ServingIndices(const ServingShape& shape, uint64_t seed);
  // Row of k/v (rows of heads_kv * head_dim) holding token t of sequence b in a cache.
  size_t cache_slot(const ServingShape& shape, int b, int t) const;
};

// Where each tensor lives; index tensors may live elsewhere than the data (made-up addresses).
struct ServingPointers {
  void *q = nullptr, *out = nullptr, *k = nullptr, *v = nullptr;
  void *k_new = nullptr, *v_new = nullptr;
  float* lse = nullptr;
  float *q_descale = nullptr, *k_descale = nullptr, *v_descale = nullptr;  // fp8: [batch, hkv]
  int32_t *cu_q = nullptr, *cu_k = nullptr, *lengths = nullptr, *page_table = nullptr;
};

// Bytes of each data tensor (what to allocate for ServingPointers).
struct ServingBytes {
  size_t q = 0, k = 0, k_new = 0, lse = 0;  // v like k, v_new like k_new
  size_t out = 0;      // like q, in the output dtype (fp8 inputs: bf16 or fp16)
  size_t descale = 0;  // each of q/k/v_descale (fp8 only; 0 otherwise)
};
ServingBytes serving_bytes(const ServingShape& shape, const ServingIndices& indices);

// The call's args over the given memory, all on `device`.
AttentionArgs serving_args(const ServingShape& shape, const ServingIndices& indices,
                           const ServingPointers& at, Device device, Backend backend);

// Host data of every tensor, and the checks of a finished call.
class ServingProblem {
 public:
  explicit ServingProblem(const ServingShape& shape, uint64_t seed = 7, float stddev = 1.0f);

  AttentionArgs args(Backend backend = Backend::kCPU);
  // Host pointers of every tensor (what a GPU run uploads).
  ServingPointers host_pointers();

  // The accuracy rule on sequence b's rows of out and lse (host copies laid out like this
  // problem's own out/lse; nullptr: its own), against b run alone.
  AccuracyReport check_sequence(int b, int max_rows = 96, const uint8_t* out = nullptr,
                                const float* lse = nullptr) const;
  // The rule over the whole call: every sequence's errors against twice the largest of their
  // baselines' (plus the slack), the worst sequence named.
  AccuracyReport check_all(int max_rows, const uint8_t* out = nullptr,
                           const float* lse = nullptr) const;

  // "" when the cache holds every key of sequence b (old and appended) at its slots, bit for
  // bit; else the first mismatch.
  std::string cache_mismatch(int b) const;
  // Cache slots of no sequence are still NaN (all bits set): the append wrote nothing else.
  bool free_slots_untouched() const;

  const ServingShape& shape() const { return s_; }
  ServingIndices& indices() { return ix_; }
  std::vector<int32_t>& cache_seqlens() { return ix_.lengths; }
  std::vector<int32_t>& page_table() { return ix_.page_table; }
  std::vector<int32_t>& cu_seqlens_q() { return ix_.cu_q; }
  std::vector<int32_t>& cu_seqlens_k() { return ix_.cu_k; }
  int table_width() const { return ix_.table_width; }
  int num_pages() const { return ix_.num_pages; }

 private:
  void fill_keys();
  void fill_new_kv();

  ServingShape s_;
  ServingIndices ix_;
  size_t q_row_bytes_ = 0, kv_row_bytes_ = 0, out_row_bytes_ = 0;
  std::vector<HostTensors> inputs_;
  std::vector<uint8_t> q_, out_, k_, v_, k_new_, v_new_;
  std::vector<float> q_descale_, k_descale_, v_descale_;  // fp8: each sequence's, [batch, hkv]
  std::vector<float> lse_;
};

}  // namespace flashcore::testing
