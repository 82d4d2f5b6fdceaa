// The serving cases the GPU suite (test_gpu_serving.cpp) and dev/sm80/check_serving.cpp run:
// ragged varlen batches, paged caches (pages 1/7/16/64/256) and contiguous caches, with and
// without append, GQA 1/4/8, head dims 64/128/256, bf16 and fp16, both masks.
#pragma once

#include <vector>

#include "serving_problem.h"

namespace flashcore::test {

inline ServingCase make_case(ServingLayout layout, std::vector<int> q, std::vector<int> k, int hq,
                      int hkv, int d, DType dtype, bool causal) {
  ServingCase c;
  c.layout = layout, c.seqlens_q = std::move(q), c.seqlens_k = std::move(k);
  c.heads_q = hq, c.heads_kv = hkv, c.head_dim = d, c.dtype = dtype, c.causal = causal;
  return c;
}

// GQA 1, 4 and 8 across head dims 64, 128 and 256 and both dtypes, each case both masks.
struct HeadConfig {
  int heads_q, heads_kv, head_dim;
  DType dtype;
};
inline constexpr HeadConfig kHeadConfigs[] = {{4, 4, 64, DType::kFloat16},
                                       {8, 2, 128, DType::kBFloat16},
                                       {8, 1, 256, DType::kFloat16}};

// The suite's cases: every serving layout, sm80 and sm90 alike.
inline std::vector<ServingCase> serving_case_list() {
  std::vector<ServingCase> cases;
  const auto add = [&](ServingCase c) { cases.push_back(std::move(c)); };
  constexpr auto kVarlen = ServingLayout::kVarlen;
  constexpr auto kCache = ServingLayout::kContiguousCache;
  constexpr auto kPaged = ServingLayout::kPagedCache;
  for (bool causal : {false, true}) {
    for (const HeadConfig& h : kHeadConfigs) {
      // Ragged prefill: every tail length, a 0-length query with keys, q shorter and longer
      // than k (causal rows with no visible key).
      add(make_case(kVarlen, {1, 17, 64, 65, 1000, 0, 4097, 65, 17},
                    {1, 17, 64, 65, 1000, 33, 4097, 17, 200}, h.heads_q, h.heads_kv, h.head_dim,
                    h.dtype, causal));
      // Chunked prefill against a paged cache: packed q, its tokens appended.
      for (int page : {1, 16, 64, 256}) {
        ServingCase c = make_case(kPaged, {17, 0, 65, 1, 64}, {17 + 100, 5, 65, 4097, 64 + 300},
                                  h.heads_q, h.heads_kv, h.head_dim, h.dtype, causal);
        c.page_size = page, c.append = true;
        add(c);
      }
    }
    // Decode on a paged cache, every page size, dense q of one row: with the step's token
    // appended, and without (then a sequence with an empty cache too: out 0, lse -inf).
    for (int page : {1, 16, 64, 256}) {
      for (bool append : {false, true}) {
        ServingCase c = make_case(kPaged, {1, 1, 1, 1, 1, 1, 1},
                                  {1, 17, 64, 65, 1000, 4097, append ? 2 : 0}, 8, 2, 128,
                                  page == 16 ? DType::kFloat16 : DType::kBFloat16, causal);
        c.packed_q = false, c.page_size = page, c.append = append, c.seqlen_new = 1;
        add(c);
      }
    }
    // Speculative decoding: 4 dense query rows, 4 appended tokens, odd page size.
    ServingCase spec = make_case(kPaged, {4, 4, 4}, {4, 70, 1000}, 8, 1, 128, DType::kBFloat16,
                                 causal);
    spec.packed_q = false, spec.page_size = 7, spec.append = true, spec.seqlen_new = 4;
    add(spec);
    // Contiguous caches: decode with append, chunked prefill with append, no append.
    ServingCase decode = make_case(kCache, {1, 1, 1}, {1, 65, 4097}, 8, 2, 128, DType::kFloat16,
                                   causal);
    decode.packed_q = false, decode.append = true, decode.seqlen_new = 1;
    add(decode);
    ServingCase chunk = make_case(kCache, {65, 0, 17}, {1000, 9, 17}, 4, 1, 64, DType::kBFloat16,
                                  causal);
    chunk.append = true;
    add(chunk);
    add(make_case(kCache, {17, 1, 3}, {17, 4097, 0}, 8, 8, 256, DType::kBFloat16, causal));
    // Varlen with seqused_k shorter than each sequence's rows (NaN past it).
    ServingCase used = make_case(kVarlen, {65, 1, 0, 300}, {65, 1000, 7, 129}, 8, 2, 128,
                                 DType::kFloat16, causal);
    used.seqused = true;
    add(used);
  }
  return cases;
}

}  // namespace flashcore::test
