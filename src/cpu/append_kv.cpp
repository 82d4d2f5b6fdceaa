// append_kv_host: the cpu and reference backends' cache append. Row by row through the shared
// accessors (common/append.h), so the host writes exactly the slots the CUDA kernel writes and
// the attention then reads. Elements are copied as bits: the cache keeps k_new's values exactly.
// One thread: a page table that gives two sequences the same page (a caller's bug the value
// checks do not look for) then only mixes their tokens, with no data race; and the copy is
// memcpy-bound, small next to the attention that follows.
#include <cstring>

#include "common/append.h"

namespace flashcore::detail {

void append_kv_host(const AttentionParams& p, const AppendParams& a) {
  if (!a.active() || p.batch == 0 || p.heads_kv == 0) return;
  const size_t element_bytes = dtype_size(p.dtype);
  const size_t row_bytes = size_t(p.head_dim) * element_bytes;
  auto* k_cache = static_cast<char*>(const_cast<void*>(p.k));
  auto* v_cache = static_cast<char*>(const_cast<void*>(p.v));
  const auto* k_new = static_cast<const char*>(a.k_new);
  const auto* v_new = static_cast<const char*>(a.v_new);
  for (int b = 0; b < p.batch; ++b) {
    const int first = AppendParams::first_slot(p, b), rows = AppendParams::rows_of(p, b);
    for (int r = 0; r < rows; ++r) {
      for (int h = 0; h < p.heads_kv; ++h) {
        std::memcpy(k_cache + p.k_offset(b, first + r, h) * element_bytes,
                    k_new + a.k_new_offset(p, b, r, h) * element_bytes, row_bytes);
        std::memcpy(v_cache + p.v_offset(b, first + r, h) * element_bytes,
                    v_new + a.v_new_offset(p, b, r, h) * element_bytes, row_bytes);
      }
    }
  }
}

}  // namespace flashcore::detail
