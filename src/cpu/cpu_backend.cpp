// Loop structure, per (batch, head, block of kQueryBlock rows):
//   load Q block as float (unscaled: products of 16-bit inputs are then exact in float, and the
//   scale is applied to S once, as the GPU kernels do)
//   for each block of kKeyBlock keys the block can see:
//     load K transposed [d][keys] and V [keys][d] as float
//     S = Q K^T                      (register-tiled 4 x 8 micro-kernel)
//     online softmax per row: new max, rescale running sum and O, P = exp(S - max)
//     O += P V over the keys each row sees (same micro-kernel; masked keys are skipped, never
//     multiplied by P = 0, since 0 * NaN or 0 * Inf in a hidden V row would still be NaN)
//   out = O / sum, lse = max + log(sum); a row that saw no key gets out = 0, lse = -inf
#include "cpu/cpu_backend.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "cpu/element_io.h"
#include "cpu/parallel.h"

namespace flashcore::detail {
namespace {

// 64 x 64 float tiles keep S, the K/V tiles and the Q/O blocks of head_dim 128 within ~130 KB,
// i.e. inside a core's L2.
constexpr int kQueryBlock = 64;
constexpr int kKeyBlock = 64;
// Micro-kernel tile: 4 x 8 float accumulators fit in 8 of the 16 SSE registers.
constexpr int kTileRows = 4;
constexpr int kTileCols = 8;
static_assert(kQueryBlock % kTileRows == 0 && kKeyBlock % kTileCols == 0);
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

int round_up(int value, int multiple) { return (value + multiple - 1) / multiple * multiple; }

#if defined(__GNUC__)
// GCC/Clang generic vectors (SSE on x86-64, NEON on arm64): the auto-vectoriser spills a 4 x 8
// accumulator tile to the stack, explicit 4-float vectors keep it in registers.
typedef float Float4 __attribute__((vector_size(16)));
inline Float4 load4(const float* p) {
  Float4 v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}
inline void store4(float* p, Float4 v) { std::memcpy(p, &v, sizeof(v)); }

// c[r][n] (+)= sum_k a[r][k] * b[k][n] for a kTileRows x kTileCols tile.
inline void gemm_tile(const float* a, int lda, const float* b, int ldb, int depth, float* c,
                      int ldc, bool accumulate) {
  static_assert(kTileCols == 8, "two Float4 per tile row");
  Float4 acc[kTileRows][2];
  for (int r = 0; r < kTileRows; ++r) {
    acc[r][0] = accumulate ? load4(c + r * ldc) : Float4{};
    acc[r][1] = accumulate ? load4(c + r * ldc + 4) : Float4{};
  }
  for (int k = 0; k < depth; ++k) {
    const Float4 b0 = load4(b + size_t(k) * ldb), b1 = load4(b + size_t(k) * ldb + 4);
    for (int r = 0; r < kTileRows; ++r) {
      const float a_rk = a[size_t(r) * lda + k];
      acc[r][0] += a_rk * b0;
      acc[r][1] += a_rk * b1;
    }
  }
  for (int r = 0; r < kTileRows; ++r) {
    store4(c + r * ldc, acc[r][0]);
    store4(c + r * ldc + 4, acc[r][1]);
  }
}
#else
// c[r][n] (+)= sum_k a[r][k] * b[k][n] for a kTileRows x kTileCols tile.
inline void gemm_tile(const float* a, int lda, const float* b, int ldb, int depth, float* c,
                      int ldc, bool accumulate) {
  float acc[kTileRows][kTileCols];
  for (int r = 0; r < kTileRows; ++r)
    for (int n = 0; n < kTileCols; ++n) acc[r][n] = accumulate ? c[r * ldc + n] : 0.0f;
  for (int k = 0; k < depth; ++k) {
    const float* b_row = b + size_t(k) * ldb;
    for (int r = 0; r < kTileRows; ++r) {
      const float a_rk = a[size_t(r) * lda + k];
      for (int n = 0; n < kTileCols; ++n) acc[r][n] += a_rk * b_row[n];
    }
  }
  for (int r = 0; r < kTileRows; ++r)
    for (int n = 0; n < kTileCols; ++n) c[r * ldc + n] = acc[r][n];
}
#endif

// Per-thread buffers. Rows and columns are padded to the micro-kernel tile; padding is
// zero-initialised, then holds stale values, and its results are never read (a padding key's V
// row is never multiplied in: O += P V runs over visible keys only).
struct Workspace {
  int d, d_pad;
  std::vector<float> q, o, k_t, v, s, row_max, row_sum, correction;
  std::vector<int> visible;  // keys of the current key block each row sees (a prefix)
  explicit Workspace(int head_dim)
      : d(head_dim), d_pad(round_up(head_dim, kTileCols)), q(size_t(kQueryBlock) * d),
        o(size_t(kQueryBlock) * d_pad), k_t(size_t(d) * kKeyBlock), v(size_t(kKeyBlock) * d_pad),
        s(size_t(kQueryBlock) * kKeyBlock), row_max(kQueryBlock), row_sum(kQueryBlock),
        correction(kQueryBlock), visible(kQueryBlock) {}
};

void load_kv_block(const AttentionParams& p, int b, int kv_head, int n_begin, int keys,
                   Workspace& w) {
  for (int j = 0; j < keys; ++j) {
    const int64_t k_offset = p.k_offset(b, n_begin + j, kv_head);
    const int64_t v_offset = p.v_offset(b, n_begin + j, kv_head);
    for (int c = 0; c < w.d; ++c) {
      w.k_t[size_t(c) * kKeyBlock + j] = load_element(p.dtype, p.k, k_offset + c);
      w.v[size_t(j) * w.d_pad + c] = load_element(p.dtype, p.v, v_offset + c);
    }
  }
}

// Turns row i of S into P in place (masked and padding keys get 0) and updates max/sum. Only the
// first `visible` scores are read: a masked key's score may be NaN or Inf (from K). score_scale
// is the softmax scale times, for fp8 inputs, q's and k's descales.
void softmax_row(float score_scale, int visible, int i, Workspace& w) {
  float* s = &w.s[size_t(i) * kKeyBlock];
  if (visible == 0) {
    std::fill(s, s + kKeyBlock, 0.0f);
    w.correction[i] = 1.0f;
    return;
  }
  float block_max = kNegInf;
  for (int j = 0; j < visible; ++j) block_max = std::max(block_max, s[j] *= score_scale);
  const float new_max = std::max(w.row_max[i], block_max);
  w.correction[i] = std::exp(w.row_max[i] - new_max);  // exp(-inf) = 0 on the first block
  float block_sum = 0;
  for (int j = 0; j < visible; ++j) block_sum += (s[j] = std::exp(s[j] - new_max));
  std::fill(s + visible, s + kKeyBlock, 0.0f);
  w.row_sum[i] = w.row_sum[i] * w.correction[i] + block_sum;
  w.row_max[i] = new_max;
}

// O += P V for rows [0, rows) of the block, each over the first w.visible[row] keys only. Visible
// counts never decrease down a block (row i + 1 sees every key row i sees), so a tile of
// kTileRows rows runs the micro-kernel over the keys its first row sees, which all its rows see,
// and adds the rest of each row's keys (at most kTileRows - 1, on the causal diagonal) one by
// one. Keys a row does not see are never read for it: their P is 0, but 0 * NaN and 0 * Inf
// are NaN, so an unwritten or poisoned V row would otherwise leak into rows it is hidden from.
void accumulate_pv(int rows, Workspace& w) {
  const int d = w.d, d_pad = w.d_pad;
  for (int i = 0; i < rows; i += kTileRows) {
    const int shared_keys = w.visible[i];
    if (shared_keys > 0) {
      for (int c = 0; c < d_pad; c += kTileCols) {
        gemm_tile(&w.s[size_t(i) * kKeyBlock], kKeyBlock, &w.v[c], d_pad, shared_keys,
                  &w.o[size_t(i) * d_pad + c], d_pad, true);
      }
    }
    for (int r = i + 1; r < std::min(i + kTileRows, rows); ++r) {
      const float* p_row = &w.s[size_t(r) * kKeyBlock];
      float* o = &w.o[size_t(r) * d_pad];
      for (int j = shared_keys; j < w.visible[r]; ++j) {
        const float* v_row = &w.v[size_t(j) * d_pad];
        for (int c = 0; c < d; ++c) o[c] += p_row[j] * v_row[c];
      }
    }
  }
}

void attend_block(const AttentionParams& p, int b, int h, int m_begin, Workspace& w) {
  const int d = p.head_dim, d_pad = w.d_pad, seqlen_k = p.seqlen_k_of(b);
  const int m_end = std::min(m_begin + kQueryBlock, p.seqlen_q_of(b));
  if (m_end <= m_begin) return;  // past the end of a shorter sequence of a packed batch
  const int rows = m_end - m_begin, rows_pad = round_up(rows, kTileRows);
  const int kv_head = p.kv_head_of(h), offset = p.causal_offset(b);
  // fp8: S is computed on the stored e4m3 values (their products are exact in float) and the
  // descales are folded into the score scale and the output, as an FP8 kernel applies them;
  // the math is the attention of the dequantized inputs. Other dtypes: both factors are 1.
  const float score_scale =
      p.softmax_scale * p.q_descale_of(b, kv_head) * p.k_descale_of(b, kv_head);
  const float out_scale = p.v_descale_of(b, kv_head);

  for (int i = 0; i < rows; ++i) {
    const int64_t q_offset = p.q_offset(b, m_begin + i, h);
    for (int c = 0; c < d; ++c) w.q[size_t(i) * d + c] = load_element(p.dtype, p.q, q_offset + c);
  }
  std::fill(w.o.begin(), w.o.end(), 0.0f);
  std::fill(w.row_max.begin(), w.row_max.end(), kNegInf);
  std::fill(w.row_sum.begin(), w.row_sum.end(), 0.0f);

  // One past the last key any row of the block may see.
  const int key_end = p.causal ? std::clamp(m_end + offset, 0, seqlen_k) : seqlen_k;
  for (int n_begin = 0; n_begin < key_end; n_begin += kKeyBlock) {
    const int keys = std::min(kKeyBlock, key_end - n_begin);
    const int keys_pad = round_up(keys, kTileCols);
    load_kv_block(p, b, kv_head, n_begin, keys, w);

    for (int i = 0; i < rows_pad; i += kTileRows) {
      for (int j = 0; j < keys_pad; j += kTileCols) {
        gemm_tile(&w.q[size_t(i) * d], d, &w.k_t[j], kKeyBlock, d, &w.s[size_t(i) * kKeyBlock + j],
                  kKeyBlock, false);
      }
    }
    for (int i = 0; i < rows; ++i) {
      // Causal: key n_begin + j is visible iff n_begin + j <= row + offset.
      int visible = keys;
      if (p.causal) visible = std::clamp(m_begin + i + offset + 1 - n_begin, 0, keys);
      w.visible[i] = visible;
      softmax_row(score_scale, visible, i, w);
      float* o = &w.o[size_t(i) * d_pad];
      for (int c = 0; c < d; ++c) o[c] *= w.correction[i];
    }
    accumulate_pv(rows, w);
  }

  for (int i = 0; i < rows; ++i) {
    const int row = m_begin + i;
    const bool empty = w.row_sum[i] == 0.0f;
    const float inverse = empty ? 0.0f : out_scale / w.row_sum[i];
    const int64_t o_offset = p.o_offset(b, row, h);
    const DType out_dtype = p.output_dtype();
    for (int c = 0; c < d; ++c) {
      store_element(out_dtype, p.out, o_offset + c, w.o[size_t(i) * d_pad + c] * inverse);
    }
    if (p.lse != nullptr) {
      p.lse[p.lse_offset(b, h, row)] = empty ? kNegInf : w.row_max[i] + std::log(w.row_sum[i]);
    }
  }
}

}  // namespace

void run_cpu_backend(const AttentionParams& p) {
  // p.seqlen_q bounds every sequence's queries (max_seqlen_q when packed); blocks past a
  // sequence's own length return at once.
  const int query_blocks = (p.seqlen_q + kQueryBlock - 1) / kQueryBlock;
  const int64_t items = int64_t(p.batch) * p.heads_q * query_blocks;
  if (items == 0 || p.head_dim == 0) return;
  parallel_for(items, [&](int64_t item) {
    const int block = static_cast<int>(item % query_blocks);
    const int64_t bh = item / query_blocks;
    const int h = static_cast<int>(bh % p.heads_q), b = static_cast<int>(bh / p.heads_q);
    Workspace workspace(p.head_dim);  // ~130 KB at d128; allocating per block is noise
    attend_block(p, b, h, block * kQueryBlock, workspace);
  });
}

}  // namespace flashcore::detail
