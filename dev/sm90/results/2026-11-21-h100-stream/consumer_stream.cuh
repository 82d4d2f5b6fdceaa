// A consumer warpgroup of the persistent Hopper kernel that runs all of its CTA's tiles as one
// stream of turns: a tile's last O += P V is issued in the same turn as the next tile's first
// S = Q K^T, like any other KV step.
//
//   tile 0:    [S_0]            softmax
//              [S_1 + PV_0]     softmax ...   (sm90_overlapped_steps)
//   tile 1:    [S'_0 + PV_n-1]  softmax(S'_0); wait PV_n-1; epilogue of tile 0
//              [S'_1 + PV'_0]   ...
//   last tile: ...              [PV_n-1] alone; epilogue
//
// Per tile, sm90_consume_overlapped issues its first S and its last P V alone, so at each tile
// boundary the tensor cores get one GEMM per consumer turn while the consumer waits for its own S
// and (the turn before) runs its epilogue: the epilogue and the first softmax both have to fit
// under a single GEMM of the other consumers. Here they run under two, and the tensor cores see
// the same QK^T + P V turns across the boundary as inside a tile.
//
// Needs O staged in its own buffer (Config::kSeparateOStaging) and two Q buffers
// (Config::kQBuffers): the next tile's first S is issued before this tile's O is written out, and
// the next tile's Q must already be there when this tile's last S has only just been issued. With
// one Q buffer the stream measured 1-8% slower than the per-tile schedule (H100, 2k: -6..-8%):
// the Q load (after the last S of the tile has completed) sat on the critical path of every turn
// behind it. Tiles alternate between the two buffers; the producer loads the next tile's Q as soon
// as it knows the tile (after this tile's last K/V load), so claiming is not moved earlier.
#pragma once

#include "cuda/common/mask.cuh"
#include "cuda/ptx/mbarrier.cuh"
#include "cuda/ptx/wgmma.cuh"
#include "cuda/sm90/consumer.cuh"
#include "cuda/sm90/consumer_overlap.cuh"
#include "cuda/sm90/epilogue.cuh"
#include "cuda/sm90/pipeline.cuh"
#include "cuda/sm90/smem_layout.cuh"
#include "cuda/sm90/softmax.cuh"

namespace flashcore::detail {

// The consumer's next tile, once its Q has landed: the index (-1: no more tiles) and the Q buffer
// that holds it; `q` moves on to the buffer after.
struct Sm90NextTile {
  int index;
  int q_buffer;
};
template <class Config>
__device__ __forceinline__ Sm90NextTile sm90_next_tile(const Sm90SmemLayout<Config>& smem,
                                                       int consumer,
                                                       RingPosition<Config::kQBuffers>& q) {
  mbarrier_wait_parity(smem.q_full(consumer, q.stage), q.phase);
  const Sm90NextTile next{*static_cast<volatile int*>(smem.tile_slot(consumer, q.stage)),
                          q.stage};
  q.advance();
  return next;
}

// What a consumer needs of its tile: where it is, its KV tiles, the rows it owns, its Q slab and
// how to hand that slab back.
template <class Config, bool kCausal>
struct Sm90TileWork {
  Sm90Tile tile;
  KvTileRange kv_tiles;
  Sm90ThreadRows<Config, kCausal> rows;
  uint32_t q_slab;
  Sm90QRelease release;
  __device__ __forceinline__ Sm90TileWork(const Sm90SmemLayout<Config>& smem,
                                          const AttentionParams& params, const Sm90NextTile& next,
                                          int consumer, int thread_in_warpgroup)
      : tile(sm90_tile_of<Config>(params, next.index)),
        kv_tiles(MaskPolicy<kCausal>(params, tile.batch)
                     .kv_tiles(tile.m_block * Config::kBlockM, Config::kBlockM, Config::kBlockN)),
        rows(params, tile, consumer, thread_in_warpgroup),
        q_slab(smem_u32(smem.q_slab(consumer, next.q_buffer))),
        release{smem.q_empty(consumer, next.q_buffer), /*early=*/true} {}
};

// Every branch below leaves no wgmma in flight where paths join: a wgmma issued on one path only
// (say, "issue the previous tile's P V if there is one") makes ptxas serialize every wgmma of the
// kernel (warning C7518). So the first tile of a run of tiles is peeled off, and inside the run
// every tile has a predecessor whose P V is pending.
template <DType kDType, class Config, bool kCausal, class Turns>
__device__ __forceinline__ void sm90_consume_stream(const Sm90SmemLayout<Config>& smem,
                                                    const CUtensorMap* map_o,
                                                    const AttentionParams& params, int consumer,
                                                    int thread_in_warpgroup,
                                                    Sm90TileLoopState<Config>& state,
                                                    const Turns& turns) {
  static_assert(Config::kSeparateOStaging && Config::kQBuffers == 2,
                "the stream needs O staged apart from Q and two Q buffers");
  using Math = Sm90ConsumerMath<kDType, Config>;
  uint8_t* const o_staging = smem.o_staging(consumer);
  const float scale_log2 = params.softmax_scale_log2;

  float o[Math::kOAccRegs];
  float s[Math::kSAccRegs];
  uint32_t p[Math::kPSteps][4];
  float correction[2];
  OnlineSoftmaxRows softmax;
  RingPosition<Config::kStages>& ring = state.ring;

  Sm90NextTile upcoming = sm90_next_tile(smem, consumer, state.q);
  while (upcoming.index >= 0) {
    const Sm90TileWork<Config, kCausal> first(smem, params, upcoming, consumer,
                                              thread_in_warpgroup);
    softmax = OnlineSoftmaxRows();
#pragma unroll
    for (int i = 0; i < Math::kOAccRegs; ++i) o[i] = 0.0f;
    if (first.kv_tiles.count() == 0) {  // no visible key (causal, seqlen_q > seqlen_k): out = 0
      first.release.after_last_qk();
      sm90_epilogue<kDType, Config>(o, softmax, o_staging, map_o, params, first.tile.head,
                                    first.tile.batch, first.rows.slab_row_begin, consumer,
                                    thread_in_warpgroup, first.release);
      upcoming = sm90_next_tile(smem, consumer, state.q);
      continue;
    }

    // The run's first tile: its first S alone.
    mbarrier_wait_parity(smem.k_full(ring.stage), ring.phase);
    turns.begin();
    Math::issue_qk(s, first.q_slab, smem_u32(smem.k_tile(ring.stage)));
    turns.end();
    wgmma_wait_group<0>();
    fence_accumulators(s);
    mbarrier_arrive(smem.k_empty(ring.stage));
    if (first.kv_tiles.count() == 1) first.release.after_last_qk();
    sm90_mask_and_softmax(s, first.kv_tiles.end - 1, first.kv_tiles, first.rows, scale_log2,
                          softmax, correction);
    accumulator_to_a_fragments<kDType>(s, p);
    sm90_overlapped_steps<kDType>(o, s, p, correction, softmax, ring, smem, first.q_slab,
                                  first.kv_tiles, first.rows, scale_log2, first.release, turns);

    // The pending tile: its last P V (P in registers, V at `pending_v`) is still to be issued.
    RingPosition<Config::kStages> pending_v = ring;
    Sm90Tile pending_tile = first.tile;
    int pending_row_begin = first.rows.slab_row_begin;
    const Sm90QRelease release = first.release;  // for the epilogue: O has its own staging
    while (true) {
      ring.advance();  // in step with the producer, which advanced after its last load
      upcoming = sm90_next_tile(smem, consumer, state.q);
      if (upcoming.index < 0) break;
      const Sm90TileWork<Config, kCausal> next(smem, params, upcoming, consumer,
                                               thread_in_warpgroup);
      const int count = next.kv_tiles.count();
      if (count == 0) break;  // the outer loop stores it, after the pending tile

      // The next tile's first S, beside the pending tile's last P V.
      mbarrier_wait_parity(smem.k_full(ring.stage), ring.phase);
      mbarrier_wait_parity(smem.v_full(pending_v.stage), pending_v.phase);
      turns.begin();
      Math::issue_qk(s, next.q_slab, smem_u32(smem.k_tile(ring.stage)));
      // As in sm90_overlapped_last_pv: without kRescaleUnderQk, O was rescaled by the last
      // correction when the step before completed.
      if (Config::kRescaleUnderQk) scale_rows(o, correction);
      Math::issue_pv(o, p, smem_u32(smem.v_tile(pending_v.stage)));
      turns.end();
      wgmma_wait_group<1>();  // S done; the pending P V may still run
      fence_accumulators(s);
      mbarrier_arrive(smem.k_empty(ring.stage));
      if (count == 1) next.release.after_last_qk();
      OnlineSoftmaxRows next_softmax;
      sm90_mask_and_softmax(s, next.kv_tiles.end - 1, next.kv_tiles, next.rows, scale_log2,
                            next_softmax, correction);  // O of the next tile starts at 0
      wgmma_wait_group<0>();  // the pending tile's O is complete
      fence_accumulators(o);
      mbarrier_arrive(smem.v_empty(pending_v.stage));
      accumulator_to_a_fragments<kDType>(s, p);  // S dies here, before the epilogue's registers
      sm90_epilogue<kDType, Config>(o, softmax, o_staging, map_o, params, pending_tile.head,
                                    pending_tile.batch, pending_row_begin, consumer,
                                    thread_in_warpgroup, release);
#pragma unroll
      for (int i = 0; i < Math::kOAccRegs; ++i) o[i] = 0.0f;
      softmax = next_softmax;

      sm90_overlapped_steps<kDType>(o, s, p, correction, softmax, ring, smem, next.q_slab,
                                    next.kv_tiles, next.rows, scale_log2, next.release, turns);
      pending_v = ring;
      pending_tile = next.tile;
      pending_row_begin = next.rows.slab_row_begin;
    }
    // The run ends (no further tile, or one without keys): the pending tile's last P V alone.
    sm90_overlapped_last_pv<kDType>(o, p, correction, pending_v, smem, turns);
    sm90_epilogue<kDType, Config>(o, softmax, o_staging, map_o, params, pending_tile.head,
                                  pending_tile.batch, pending_row_begin, consumer,
                                  thread_in_warpgroup, release);
  }
}

}  // namespace flashcore::detail
