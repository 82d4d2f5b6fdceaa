// AttentionParams of a tests/cpp/serving_problem.h batch, filled as src/api fills them from the
// flashcore.h serving arguments, pointing at the problem's host buffers: the dev checks that
// drive the sm80 kernel without the API (the host emulator, and check_serving on a GPU after
// swapping in device pointers) share it.
#pragma once

#include <cmath>

#include "common/params.h"
#include "serving_problem.h"

namespace flashcore::test {

using flashcore::detail::AttentionParams;

// cache_appended: point k/v at the expected caches (the append taken as done).
inline AttentionParams serving_params(ServingProblem& sp, bool cache_appended) {
  const ServingCase& c = sp.c;
  AttentionParams p;
  p.dtype = c.dtype, p.batch = c.batch(), p.heads_q = c.heads_q, p.heads_kv = c.heads_kv;
  p.head_dim = c.head_dim, p.causal = c.causal;
  p.set_softmax_scale(1.0f / std::sqrt(float(c.head_dim)));
  const int64_t d = c.head_dim;
  p.q = sp.q.bytes.data(), p.out = sp.out.bytes.data();
  p.lse = reinterpret_cast<float*>(sp.lse.bytes.data());
  p.q_row_stride = p.o_row_stride = c.heads_q * d, p.q_head_stride = p.o_head_stride = d;
  p.seqlen_q = sp.max_seqlen_q, p.seqlen_k = sp.max_seqlen_k;
  if (sp.q.shape.size() == 3) {
    p.cu_seqlens_q = sp.cu_seqlens_q.data(), p.total_q = int(sp.q.shape[0]);
    p.lse_head_stride = p.total_q;
  } else {
    p.q_batch_stride = p.o_batch_stride = sp.max_seqlen_q * p.q_row_stride;
    p.lse_head_stride = sp.max_seqlen_q, p.lse_batch_stride = c.heads_q * p.lse_head_stride;
  }
  p.k = (cache_appended ? sp.expected_k_cache : sp.k).bytes.data();
  p.v = (cache_appended ? sp.expected_v_cache : sp.v).bytes.data();
  p.k_row_stride = p.v_row_stride = c.heads_kv * d, p.k_head_stride = p.v_head_stride = d;
  p.k_batch_stride = p.v_batch_stride = sp.k.shape.size() == 4 ? sp.k.shape[1] * p.k_row_stride : 0;
  if (c.layout == ServingLayout::kVarlen) {
    p.cu_seqlens_k = sp.cu_seqlens_k.data(), p.total_k = int(sp.k.shape[0]);
    if (c.seqused) p.seqused_k = sp.seqused_k.data();
  } else {
    p.seqused_k = sp.cache_seqlens.data();
    if (c.append) {
      p.appends_packed = c.packed_q;
      p.seqlen_new = c.packed_q ? 0 : c.seqlen_new;
    }
  }
  if (c.layout == ServingLayout::kPagedCache) {
    p.page_table = sp.page_table.data(), p.page_table_stride = sp.page_table_width;
    p.page_size = c.page_size, p.num_pages = int(sp.k.shape[0]);
  }
  return p;
}

}  // namespace flashcore::test
