// Mask policies: which (query row, key column) pairs are visible, and which KV tiles a query tile
// must visit. Producer and consumer roles of a kernel both take their loop bounds from here, so
// the trip count is computed in exactly one place.
#pragma once

#include "common/params.h"
#include "cuda/common/accumulator_layout.h"

namespace flashcore::detail {

FC_HOST_DEVICE int ceil_div(int a, int b) { return (a + b - 1) / b; }

// How many of a thread's columns of a row lie before the row's limit, `until_limit` columns past
// the thread's first column, in the wgmma accumulator layout (accumulator_layout.h): in each
// 8-column chunk a thread holds a pair of adjacent columns, so its j-th column is 8 (j / 2) +
// j % 2 past its first and the visible ones are a prefix. Right for any sign (the shift rounds
// down, the mask leaves the remainder in [0, 8)); not clamped to the thread's column count.
FC_HOST_DEVICE int thread_columns_before(int until_limit) {
  const int rest = until_limit & (kAccChunkColumns - 1);
  const int columns = kAccPairColumns * (until_limit >> kAccChunkShift) +
                      (rest < kAccPairColumns ? rest : kAccPairColumns);
  return columns > 0 ? columns : 0;
}

// The KV tiles [begin, end) a query tile visits, and the first tile from which elements need a
// per-element mask (tiles before it are fully visible and skip the mask arithmetic).
struct KvTileRange {
  int begin = 0;
  int end = 0;
  int first_masked = 0;
  FC_HOST_DEVICE int count() const { return end > begin ? end - begin : 0; }
  // The tile visited at `step`: last to first, so the masked tiles (at the end) come first and a
  // causal row's diagonal tile is its first.
  FC_HOST_DEVICE int tile_at(int step) const { return end - 1 - step; }
};

template <bool kCausal>
struct MaskPolicy {
  static constexpr bool kIsCausal = kCausal;

  int seqlen_q;
  int seqlen_k;
  int causal_offset;  // query row i sees key column j iff j <= i + causal_offset

  FC_HOST_DEVICE MaskPolicy(const AttentionParams& params, int batch_index)
      : MaskPolicy(params.seqlen_q_of(batch_index), params.seqlen_k_of(batch_index)) {}
  // Bottom-right alignment of a sequence of these lengths.
  FC_HOST_DEVICE MaskPolicy(int seqlen_q_, int seqlen_k_)
      : seqlen_q(seqlen_q_), seqlen_k(seqlen_k_), causal_offset(seqlen_k_ - seqlen_q_) {}

  // KV tiles of block_n columns visited by the query rows [m_begin, m_begin + block_m).
  // m_begin < 0 (an sm90 causal partial block): rows before 0 do not exist; first_masked is
  // then 0, which masks more tiles than needed, never fewer.
  FC_HOST_DEVICE KvTileRange kv_tiles(int m_begin, int block_m, int block_n) const {
    KvTileRange range;
    int key_end = seqlen_k;  // one past the last column any row of the tile may see
    if (kCausal) {
      const int last_row = min_int(m_begin + block_m, seqlen_q) - 1;
      key_end = min_int(key_end, last_row + causal_offset + 1);
    }
    range.end = key_end > 0 ? ceil_div(key_end, block_n) : 0;
    // Tiles from first_masked on hold a column past seqlen_k or past the diagonal of the tile's
    // first row.
    int first_unsafe_col = seqlen_k;
    if (kCausal) first_unsafe_col = min_int(first_unsafe_col, m_begin + causal_offset + 1);
    first_unsafe_col = first_unsafe_col > 0 ? first_unsafe_col : 0;
    range.first_masked = first_unsafe_col / block_n;
    return range;
  }

  // How many tiles at the end of `range` (the tiles of a larger block of rows) none of the rows
  // [m_begin, m_begin + block_m) sees a key of: under a causal mask the last tiles of a block can
  // lie wholly past the diagonal of its first rows. All of `range` when those rows see no key.
  FC_HOST_DEVICE int trailing_hidden_tiles(const KvTileRange& range, int m_begin, int block_m,
                                           int block_n) const {
    const int own_end = kv_tiles(m_begin, block_m, block_n).end;
    const int seen_end = own_end > range.begin ? own_end : range.begin;
    return range.end > seen_end ? range.end - seen_end : 0;
  }

  FC_HOST_DEVICE bool visible(int row, int col) const {
    if (col >= seqlen_k) return false;
    return !kCausal || col <= row + causal_offset;
  }

  // One past the last visible column of a row (columns [0, limit) are visible).
  FC_HOST_DEVICE int col_limit(int row) const {
    if (!kCausal) return seqlen_k;
    return min_int(seqlen_k, row + causal_offset + 1);
  }

 private:
  FC_HOST_DEVICE static int min_int(int a, int b) { return a < b ? a : b; }
};

}  // namespace flashcore::detail
