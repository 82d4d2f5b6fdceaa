// Loop structure, per (batch, head, block of kQueryBlock rows):
//   load Q block as float (unscaled: products of 16-bit inputs are then exact in float, and the
//   scale is applied to S once, as the GPU kernels do)
//   for each block of kKeyBlock keys the block can see:
//     load K transposed [d][keys] and V [keys][d] as float
//     S = Q K^T (inner loop over keys, so it vectorises without reassociation)
//     online softmax: new row max, rescale running sum and O, P = exp(S - max)
//     O += P V (inner loop over head_dim)
//   out = O / sum, lse = max + log(sum)
#include "cpu/cpu_backend.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "cpu/element_io.h"
#include "cpu/parallel.h"

namespace flashcore::detail {
namespace {

// 64 x 64 float tiles keep S, the K/V tiles and the Q/O blocks of head_dim 128 within ~200 KB,
// i.e. inside a core's L2.
constexpr int kQueryBlock = 64;
constexpr int kKeyBlock = 64;
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

struct Workspace {
  std::vector<float> q, o, k_t, v, s, row_max, row_sum;
  explicit Workspace(int d)
      : q(size_t(kQueryBlock) * d), o(size_t(kQueryBlock) * d), k_t(size_t(d) * kKeyBlock),
        v(size_t(kKeyBlock) * d), s(size_t(kQueryBlock) * kKeyBlock), row_max(kQueryBlock),
        row_sum(kQueryBlock) {}
};

void attend_block(const AttentionParams& p, int b, int h, int m_begin, Workspace& w) {
  const int d = p.head_dim, seqlen_k = p.seqlen_k_of(b);
  const int m_end = std::min(m_begin + kQueryBlock, p.seqlen_q_of(b));
  const int rows = m_end - m_begin, kv_head = p.kv_head_of(h);
  const int offset = p.causal_offset(b);

  for (int i = 0; i < rows; ++i) {
    for (int c = 0; c < d; ++c) {
      w.q[size_t(i) * d + c] = load_element(p.dtype, p.q, p.q_offset(b, m_begin + i, h) + c);
    }
  }
  std::fill(w.o.begin(), w.o.end(), 0.0f);
  std::fill(w.row_max.begin(), w.row_max.end(), kNegInf);
  std::fill(w.row_sum.begin(), w.row_sum.end(), 0.0f);

  // The last key any row of the block may see, exclusive.
  const int key_end = p.causal ? std::clamp(m_end - 1 + offset + 1, 0, seqlen_k) : seqlen_k;
  for (int n_begin = 0; n_begin < key_end; n_begin += kKeyBlock) {
    const int keys = std::min(kKeyBlock, key_end - n_begin);
    for (int j = 0; j < keys; ++j) {
      for (int c = 0; c < d; ++c) {
        w.k_t[size_t(c) * kKeyBlock + j] =
            load_element(p.dtype, p.k, p.k_offset(b, n_begin + j, kv_head) + c);
        w.v[size_t(j) * d + c] = load_element(p.dtype, p.v, p.v_offset(b, n_begin + j, kv_head) + c);
      }
    }
    for (int i = 0; i < rows; ++i) {
      float* s = &w.s[size_t(i) * kKeyBlock];
      std::fill(s, s + keys, 0.0f);
      const float* q = &w.q[size_t(i) * d];
      for (int c = 0; c < d; ++c) {
        const float qc = q[c];
        const float* k_row = &w.k_t[size_t(c) * kKeyBlock];
        for (int j = 0; j < keys; ++j) s[j] += qc * k_row[j];
      }
      for (int j = 0; j < keys; ++j) s[j] *= p.softmax_scale;
      // Causal: key n_begin + j is visible iff n_begin + j <= row + offset.
      int visible = keys;
      if (p.causal) visible = std::clamp(m_begin + i + offset + 1 - n_begin, 0, keys);
      if (visible == 0) continue;

      float block_max = kNegInf;
      for (int j = 0; j < visible; ++j) block_max = std::max(block_max, s[j]);
      const float new_max = std::max(w.row_max[i], block_max);
      const float correction = std::exp(w.row_max[i] - new_max);  // exp(-inf) = 0 on first block
      float block_sum = 0;
      for (int j = 0; j < visible; ++j) block_sum += (s[j] = std::exp(s[j] - new_max));
      w.row_sum[i] = w.row_sum[i] * correction + block_sum;
      w.row_max[i] = new_max;

      float* o = &w.o[size_t(i) * d];
      for (int c = 0; c < d; ++c) o[c] *= correction;
      for (int j = 0; j < visible; ++j) {
        const float pj = s[j];
        const float* v_row = &w.v[size_t(j) * d];
        for (int c = 0; c < d; ++c) o[c] += pj * v_row[c];
      }
    }
  }

  for (int i = 0; i < rows; ++i) {
    const int row = m_begin + i;
    const bool empty = w.row_sum[i] == 0.0f;
    const float inverse = empty ? 0.0f : 1.0f / w.row_sum[i];
    for (int c = 0; c < d; ++c) {
      store_element(p.dtype, p.out, p.o_offset(b, row, h) + c, w.o[size_t(i) * d + c] * inverse);
    }
    if (p.lse != nullptr) {
      p.lse[p.lse_offset(b, h, row)] = empty ? kNegInf : w.row_max[i] + std::log(w.row_sum[i]);
    }
  }
}

}  // namespace

void run_cpu_backend(const AttentionParams& p) {
  const int query_blocks = (p.seqlen_q + kQueryBlock - 1) / kQueryBlock;
  const int64_t items = int64_t(p.batch) * p.heads_q * query_blocks;
  if (items == 0 || p.head_dim == 0) return;
  parallel_for(items, [&](int64_t item) {
    const int block = static_cast<int>(item % query_blocks);
    const int64_t bh = item / query_blocks;
    const int h = static_cast<int>(bh % p.heads_q), b = static_cast<int>(bh / p.heads_q);
    Workspace workspace(p.head_dim);  // a few KB; allocating per block is noise next to the math
    attend_block(p, b, h, block * kQueryBlock, workspace);
  });
}

}  // namespace flashcore::detail
