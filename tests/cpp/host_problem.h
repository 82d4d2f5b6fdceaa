// Host tensors for one attention problem in the layouts the tests need: contiguous BSHD, BHSD
// (seen as BSHD through strides) and q/k/v as slices of one packed qkv tensor.
#pragma once

#include <cstdint>
#include <cstring>
#include <vector>

#include "flashcore/flashcore.h"
#include "testing/accuracy.h"

namespace flashcore::test {

enum class Layout { kBSHD, kBHSD, kPackedQKV };

inline const char* to_string(Layout layout) {
  switch (layout) {
    case Layout::kBSHD: return "bshd";
    case Layout::kBHSD: return "bhsd";
    case Layout::kPackedQKV: return "packed_qkv";
  }
  return "?";
}

// Strides (elements) of a [b, s, h, d] view stored in `layout`; for packed qkv the row holds
// heads_q + 2 * heads_kv heads and `head_offset` says where this tensor's heads start.
struct ViewGeometry {
  std::vector<int64_t> strides;
  int64_t offset = 0;  // elements from the buffer start
};

inline ViewGeometry geometry(Layout layout, int64_t b, int64_t s, int64_t h, int64_t d,
                             int64_t packed_heads = 0, int64_t head_offset = 0) {
  (void)b;
  switch (layout) {
    case Layout::kBSHD: return {{s * h * d, h * d, d, 1}, 0};
    case Layout::kBHSD: return {{h * s * d, d, s * d, 1}, 0};
    case Layout::kPackedQKV:
      return {{s * packed_heads * d, packed_heads * d, d, 1}, head_offset * d};
  }
  return {};
}

// Copies a contiguous BSHD tensor (dtype bits) into a strided destination.
inline void scatter_bshd(const std::vector<uint8_t>& src, uint8_t* dst_base,
                         const ViewGeometry& g, int64_t b, int64_t s, int64_t h, int64_t d,
                         size_t element_bytes) {
  for (int64_t ib = 0; ib < b; ++ib)
    for (int64_t is = 0; is < s; ++is)
      for (int64_t ih = 0; ih < h; ++ih) {
        const size_t src_index = size_t(((ib * s + is) * h + ih) * d);
        const int64_t dst_index =
            g.offset + ib * g.strides[0] + is * g.strides[1] + ih * g.strides[2];
        std::memcpy(dst_base + dst_index * element_bytes, &src[src_index * element_bytes],
                    size_t(d) * element_bytes);
      }
}

// Element count of the buffer a layout needs for q, k and v together (packed) or one tensor.
inline int64_t buffer_elements(Layout layout, int64_t b, int64_t s, int64_t h, int64_t d,
                               int64_t packed_heads) {
  return layout == Layout::kPackedQKV ? b * s * packed_heads * d : b * s * h * d;
}

}  // namespace flashcore::test
