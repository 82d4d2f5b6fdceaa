// Bookkeeping shared by the producer and the consumers of the Hopper kernel: which output tile a CTA
// computes, and the position in the K/V stage ring. Both roles derive their loop bounds from the
// same functions here and from MaskPolicy::kv_tiles, so they can never disagree on a trip count.
#pragma once

#include <cstdint>

#include "common/params.h"
#include "cuda/common/mask.cuh"
#include "cuda/sm90/tile_config.h"

namespace flashcore::detail {

struct Sm90Tile {
  int m_block;  // which BLOCK_M rows of the query sequence
  int head;     // query head
  int batch;
};

// Number of CTAs (one per output tile) the kernel is launched with.
template <class Config>
FC_HOST_DEVICE int64_t sm90_num_tiles(const AttentionParams& params) {
  const int64_t m_blocks = ceil_div(params.seqlen_q, Config::kBlockM);
  return m_blocks * params.heads_q * params.batch;
}

// Tile `index` of the launch. The m-block is the slowest coordinate and runs backwards, so the
// blocks with the most keys to visit under a causal mask (the last rows) start first, over all
// heads and batches, and the short ones fill the tail of the launch.
template <class Config>
__device__ __forceinline__ Sm90Tile sm90_tile_of(const AttentionParams& params, int index) {
  const int m_blocks = ceil_div(params.seqlen_q, Config::kBlockM);
  const int heads_times_batch = params.heads_q * params.batch;
  Sm90Tile tile;
  tile.m_block = m_blocks - 1 - index / heads_times_batch;
  const int rest = index % heads_times_batch;
  tile.head = rest % params.heads_q;
  tile.batch = rest / params.heads_q;
  return tile;
}

// Position in the ring of K/V stages: the stage to use and the parity of the barrier phase that
// marks it full (consumers wait for `phase`) or empty (the producer waits for `phase ^ 1`, which
// passes at once on the first trip round the ring).
template <int kStages>
struct RingPosition {
  int stage = 0;
  uint32_t phase = 0;
  __device__ __forceinline__ void advance() {
    if (++stage == kStages) {
      stage = 0;
      phase ^= 1;
    }
  }
};

// What carries from one tile to the next when a CTA computes several (persistent schedule): the
// ring position, and the parity of the Q barriers' current phase (q_full / q_empty complete once
// per tile). A non-persistent CTA uses a fresh one for its single tile.
template <int kStages>
struct Sm90TileLoopState {
  RingPosition<kStages> ring;
  uint32_t q_phase = 0;
};

}  // namespace flashcore::detail
