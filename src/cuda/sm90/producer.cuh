// The producer of the Hopper kernel: one thread of warpgroup 0 issues every TMA load of a tile.
//
//   (persistent: wait q_empty)
//   Q (once per tile)   -> q_full
//   for each KV tile j (last to first, the order the consumers visit them):
//     wait kv_empty[s]  (both consumers released the stage)
//     K tile j          -> k_full[s]   (separate barrier: S = Q K^T starts before V lands)
//     V tile j          -> v_full[s]
#pragma once

#include <cuda.h>

#include "cuda/ptx/mbarrier.cuh"
#include "cuda/ptx/tma.cuh"
#include "cuda/sm90/pipeline.cuh"
#include "cuda/sm90/smem_layout.cuh"

namespace flashcore::detail {

struct Sm90TensorMaps {
  const CUtensorMap* q;
  const CUtensorMap* k;
  const CUtensorMap* v;
  const CUtensorMap* o;
};

template <class Config>
__device__ __forceinline__ void sm90_load_q(const Sm90SmemLayout<Config>& smem,
                                            const Sm90TensorMaps& maps, const Sm90Tile& tile) {
  constexpr int kBoxBytesQ = Config::kRowsPerConsumer * kSwizzleBytes;
  const int m_begin = tile.m_block * Config::kBlockM;
  mbarrier_arrive_expect_tx(smem.q_full(), Config::kQBytes);
#pragma unroll
  for (int consumer = 0; consumer < Config::kConsumerWarpgroups; ++consumer) {
#pragma unroll
    for (int block = 0; block < Config::kColumnBlocks; ++block) {
      tma_load_4d(smem.q_slab(consumer) + block * kBoxBytesQ, maps.q, smem.q_full(),
                  block * Config::kBoxCols, m_begin + consumer * Config::kRowsPerConsumer,
                  tile.head, tile.batch);
    }
  }
}

// Loads K and V of the KV tile visited at `step` into the ring's next stage.
template <class Config>
__device__ __forceinline__ void sm90_load_kv(const Sm90SmemLayout<Config>& smem,
                                             const Sm90TensorMaps& maps, const Sm90Tile& tile,
                                             int kv_head, const KvTileRange& kv_tiles, int step,
                                             RingPosition<Config::kStages>& ring) {
  constexpr int kBoxBytesKV = Config::kBlockN * kSwizzleBytes;
  const int n_begin = (kv_tiles.end - 1 - step) * Config::kBlockN;
  mbarrier_wait_parity(smem.kv_empty(ring.stage), ring.phase ^ 1);
  mbarrier_arrive_expect_tx(smem.k_full(ring.stage), Config::kKVTileBytes);
#pragma unroll
  for (int block = 0; block < Config::kColumnBlocks; ++block) {
    tma_load_4d(smem.k_tile(ring.stage) + block * kBoxBytesKV, maps.k, smem.k_full(ring.stage),
                block * Config::kBoxCols, n_begin, kv_head, tile.batch);
  }
  mbarrier_arrive_expect_tx(smem.v_full(ring.stage), Config::kKVTileBytes);
#pragma unroll
  for (int block = 0; block < Config::kColumnBlocks; ++block) {
    tma_load_4d(smem.v_tile(ring.stage) + block * kBoxBytesKV, maps.v, smem.v_full(ring.stage),
                block * Config::kBoxCols, n_begin, kv_head, tile.batch);
  }
  ring.advance();
}

// All loads of one output tile. With `persistent`, the Q slabs may still hold the previous tile
// (its Q, or its O being stored): the first K/V tile is loaded before waiting for q_empty, so it
// lands under the previous tile's epilogue.
template <class Config>
__device__ __forceinline__ void sm90_produce(const Sm90SmemLayout<Config>& smem,
                                             const Sm90TensorMaps& maps,
                                             const AttentionParams& params, const Sm90Tile& tile,
                                             const KvTileRange& kv_tiles, bool persistent,
                                             Sm90TileLoopState<Config::kStages>& state) {
  const int kv_head = params.kv_head_of(tile.head);
  const int count = kv_tiles.count();
  int step = 0;
  if (persistent) {
    if (count > 0) sm90_load_kv(smem, maps, tile, kv_head, kv_tiles, step++, state.ring);
    mbarrier_wait_parity(smem.q_empty(), state.q_phase ^ 1);
  }
  sm90_load_q(smem, maps, tile);
  for (; step < count; ++step) sm90_load_kv(smem, maps, tile, kv_head, kv_tiles, step, state.ring);
  state.q_phase ^= 1;
}

}  // namespace flashcore::detail
