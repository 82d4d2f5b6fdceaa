// V^T in shared memory for the FP8 kernel: FP8 wgmma reads its B operand K-major only, so
// O += P V needs V as head_dim rows of keys. Warps 1-3 of the producer warpgroup (the
// "transposer"; warp 0 issues the TMA loads) turn each V stage, as TMA landed it, into a V^T stage:
//
//   TMA thread                      transposer (96 threads)                consumers
//   wait v_raw_empty[s]  <--------- arrive v_raw_empty[s]
//   TMA V_j -> v_full[s] ---------> wait v_full[s]
//                                   wait v_empty[s] <--------------------- arrive v_empty[s]
//                                   V[s] -> V^T[s]; fence.proxy.async        (after P V_{j-S})
//                                   arrive vt_full[s] -------------------> wait vt_full[s]; P V
//   (after the last tile)
//   wait v_raw_empty; stop = 1; arrive v_full --> stop
//
// The transposer walks the V stages in ring order without knowing the tiles (the TMA thread and
// it make the same V loads in the same order), so it needs no scheduler: the TMA thread ends it.
//
// The key order inside V^T is permuted so that P goes from the S accumulator to the A operand
// of the e4m3 wgmma without moving data between lanes. Within every 32 keys (one k32 step), A
// position p = 16h + 4t + e (h, e in 0..1 / 0..3, t = lane % 4: byte e of the thread's register
// 2h (row g) or 2h + 1 (row g + 8)) holds key 16h + 8(e / 2) + 2t + e % 2, which is exactly where
// the fp32 accumulator keeps it (columns 8i + 2t + {0, 1}, i = 2h + e / 2). V^T's column p holds
// the same key, so the sum over p is the sum over keys (fp8_a_position_key).
// dev/sm90/v_transpose_model.py replays the addresses on the host, and dev/sm90/protocol_model.py
// the barriers: keep both in step.
#pragma once

#include <cstdint>

#include "common/params.h"
#include "cuda/common/accumulator_layout.h"
#include "cuda/ptx/fence.cuh"
#include "cuda/ptx/ldmatrix.cuh"
#include "cuda/ptx/mbarrier.cuh"
#include "cuda/ptx/smem_descriptor.cuh"
#include "cuda/ptx/stmatrix.cuh"
#include "cuda/sm90/kv_tail.cuh"
#include "cuda/sm90/named_barriers.h"
#include "cuda/sm90/paged_gather.cuh"
#include "cuda/sm90/pipeline.cuh"
#include "cuda/sm90/smem_layout.cuh"

namespace flashcore::detail {

// Warps of the producer warpgroup that transpose V (all but warp 0, which issues the loads).
constexpr int kSm90TransposerFirstWarp = 1;
constexpr int kSm90TransposerThreads = 96;


// V (BLOCK_N keys x head_dim bytes, as TMA wrote it: column blocks of 128 head_dim bytes, the
// 16-byte chunk c of row r at chunk position c ^ (r % 8)) into V^T (head_dim rows x BLOCK_N keys
// in the permuted order, column blocks of 128 keys, swizzled alike) by transposer thread `thread`
// of kSm90TransposerThreads. A unit is one warp's 32 keys x 16 head_dim bytes (one k32 step of
// one 16-byte chunk): ldmatrix.trans reads it as four 8-key x 8-pair matrices, four PRMTs split
// the pairs into bytes, stmatrix writes four 8-row x 16-byte matrices of V^T. The warps deal
// the units round.
//
// ldmatrix.trans: lane l gets, of matrix m (keys 8m..8m+7), head_dim pair p = l / 4 (bytes 2p,
// 2p + 1) of keys 8m + 2t, 8m + 2t + 1 (t = l % 4): bytes [k 2t: 2p][k 2t: 2p+1][k 2t+1: 2p]
// [k 2t+1: 2p+1]. Bytes 0 and 2 of matrices 0 and 1 (PRMT 0x6420) are head_dim byte 2p of keys
// 2t, 2t + 1, 8 + 2t, 9 + 2t: positions 4t..4t+3 of V^T row 2p (fp8_a_position_key), bytes 1
// and 3 (0x7531) row 2p + 1; matrices 2 and 3 give positions 16 + 4t.. likewise. stmatrix puts
// lane l's register i at bytes 4t.. of matrix i's row p, so each lane stores those four words as
// they are. Which of its rows 2p, 2p + 1 a lane gives matrix 0 (and the other one matrix 1)
// alternates with p >= 4, so that a matrix's 8 rows fall on 8 different rows modulo 8, hence 8
// different swizzled chunks: both instructions are free of bank conflicts (the rows of one
// ldmatrix matrix are 8 consecutive keys, all 8 swizzles). sm90_transpose_v_stage is the entry.
//
// The units of warp kWarp (kWarp, kWarp + kWarps, ...), unrolled: every unit's offsets are
// constants, so a unit is its two addresses (an add and an xor each: the swizzle's xor only
// touches address bits 4-6, which the lane bases hold and the unit offsets leave zero), the
// ldmatrix, four PRMTs and the stmatrix.
template <class Config, uint32_t kWarp, uint32_t kWarps>
__device__ __forceinline__ void sm90_transpose_warp_units(uint32_t v_lane, uint32_t vt_lane,
                                                          uint32_t first_bytes,
                                                          uint32_t second_bytes) {
  constexpr uint32_t kBlockN = Config::kBlockN;
  constexpr uint32_t kRow = kSwizzleBytes;                // bytes of a swizzled row
  constexpr uint32_t kKeySteps = kBlockN / 32;            // 32-key blocks
  // V^T has a row for each computed head_dim column (Config::kVtRows): a padded call's zero
  // columns are neither transposed nor read.
  constexpr uint32_t kUnits = kKeySteps * (Config::kComputedHeadDim / 16);
  constexpr uint32_t kVBlockBytes = kBlockN * kRow;       // a V column block (128 dims)
  constexpr uint32_t kVtBlockBytes = Config::kVtRows * kRow;  // a V^T column block (128 keys)
  // Unit u is key step u % kKeySteps of 16-byte head_dim chunk u / kKeySteps.
  const auto load = [v_lane](uint32_t unit, uint32_t (&words)[4]) {
    const uint32_t key_step = unit % kKeySteps, chunk = unit / kKeySteps;
    ldmatrix_x4_trans(words, (v_lane + (chunk / 8) * kVBlockBytes + key_step * 32 * kRow) ^
                                 ((chunk % 8) << 4));
  };
  uint32_t words[4];
  if constexpr (kWarp < kUnits) load(kWarp, words);
#pragma unroll
  for (uint32_t unit = kWarp; unit < kUnits; unit += kWarps) {
    const uint32_t key_step = unit % kKeySteps, chunk = unit / kKeySteps;
    const uint32_t rows[4] = {__byte_perm(words[0], words[1], first_bytes),
                              __byte_perm(words[0], words[1], second_bytes),
                              __byte_perm(words[2], words[3], first_bytes),
                              __byte_perm(words[2], words[3], second_bytes)};
    if (unit + kWarps < kUnits) load(unit + kWarps, words);  // out before this unit's store
    stmatrix_x4((vt_lane + (key_step / 4) * kVtBlockBytes + chunk * 16 * kRow) ^
                    ((2 * (key_step % 4)) << 4),
                rows);
  }
}

// One V stage into its V^T stage (what the units are: above), by transposer thread `thread`.
// Each warp's units are compile-time (a branch per warp), so no unit address is computed in a
// loop; d256's 22 units a warp leave the 24-register producer two spilled words per stage.
template <class Config>
__device__ __forceinline__ void sm90_transpose_v_stage(const uint8_t* v, uint8_t* vt, int thread) {
  constexpr uint32_t kRow = kSwizzleBytes;
  constexpr uint32_t kWarps = kSm90TransposerThreads / 32;
  constexpr uint32_t kEvenBytes = 0x6420, kOddBytes = 0x7531;  // PRMT: bytes 0, 2 / 1, 3 of two
  static_assert(Config::kBlockN % 32 == 0 && Config::kComputedHeadDim % 16 == 0,
                "whole k32 steps and 16-byte chunks");
  static_assert(kWarps == 3, "the units are dealt to three warps below");
  const uint32_t lane = static_cast<uint32_t>(thread) % 32;
  const uint32_t warp = static_cast<uint32_t>(thread) / 32;
  // The row this lane addresses: key 8 (lane / 8) + lane % 8 of V for ldmatrix (whose swizzle,
  // the key modulo 8, is lane % 8); for stmatrix row lane % 8 of matrix lane / 8, V^T row
  // 2 (lane % 8) + odd of the chunk's 16 (swizzle: that row modulo 8), in the positions' half
  // h = lane / 16 (chunk 2 (key_step % 4) + h, so h goes into the lane's swizzle bits too).
  const uint32_t row = lane % 8, matrix = lane / 8;
  const uint32_t odd = (matrix % 2) ^ (row >= 4 ? 1u : 0u);
  const uint32_t vt_row = 2 * row + odd;
  const uint32_t v_lane = shared_address(v) + (8 * matrix + row) * kRow + (row << 4);
  const uint32_t vt_lane =
      shared_address(vt) + vt_row * kRow + (((matrix / 2) ^ (vt_row % 8)) << 4);
  // The words this lane stores: rows 2p and 2p + 1 to matrices 0 / 1 (or 1 / 0 when p >= 4).
  const uint32_t first_bytes = lane / 4 < 4 ? kEvenBytes : kOddBytes;
  const uint32_t second_bytes = lane / 4 < 4 ? kOddBytes : kEvenBytes;
  if (warp == 0) {
    sm90_transpose_warp_units<Config, 0, kWarps>(v_lane, vt_lane, first_bytes, second_bytes);
  } else if (warp == 1) {
    sm90_transpose_warp_units<Config, 1, kWarps>(v_lane, vt_lane, first_bytes, second_bytes);
  } else {
    sm90_transpose_warp_units<Config, 2, kWarps>(v_lane, vt_lane, first_bytes, second_bytes);
  }
}

// The transposer's loop over the V stages, until the TMA thread says stop (sm90_stop_transposer).
// Where the layout's V blocks can end in rows of anything (a cache's unused slots, the next
// packed sequence), the block of a sequence's last key has its rows past it zeroed first: their
// P is 0, but 0 x NaN is not (kv_tail.cuh).
template <class Config, class Layout>
__device__ __forceinline__ void sm90_transpose_v(const Sm90SmemLayout<Config>& smem,
                                                 const AttentionParams& params,
                                                 RingPosition<Config::kStages> ring, int thread) {
  for (;;) {
    mbarrier_wait_parity(smem.v_full(ring.stage), ring.phase);
    if (*smem.transposer_stop() != 0) return;
    // The consumers have finished the P V that read this V^T stage one trip round the ring ago.
    mbarrier_wait_parity(smem.v_empty(ring.stage), ring.phase ^ 1);
    if (Layout::kv_tail_may_hold_garbage(params)) {
      const int keys = *smem.v_keys(ring.stage);  // the same for every thread
      if (keys < Config::kBlockN) {
        sm90_zero_v_rows<Config, kSm90TransposerThreads>(
            smem.v_tile(ring.stage), keys, thread, sm90_barrier_id(Sm90NamedBarrier::kTransposer));
      }
    }
    sm90_transpose_v_stage<Config>(smem.v_tile(ring.stage), smem.vt_tile(ring.stage), thread);
    fence_proxy_async_shared();  // wgmma (the async proxy) reads what these stores wrote
    mbarrier_arrive(smem.vt_full(ring.stage));
    mbarrier_arrive(smem.v_raw_empty(ring.stage));
    ring.advance();
  }
}

// The TMA thread, after its last V load (`ring`: the V ring position after it): once the
// transposer has read every V loaded (the last load of each stage: the empty phase before each
// of the next kStages positions; a stage never loaded passes at once), the stop word and plain
// arrivals on the v_full the transposer waits on next, which complete that phase with no bytes:
// as many as a load's (one, or each gathering lane's where the layout gathers small pages).
// Waiting for every stage, not just the next one, keeps a V still to be transposed from seeing
// the stop word.
template <class Config, class Layout>
__device__ __forceinline__ void sm90_stop_transposer(const Sm90SmemLayout<Config>& smem,
                                                     const AttentionParams& params,
                                                     const RingPosition<Config::kStages> ring) {
  RingPosition<Config::kStages> position = ring;
  for (int i = 0; i < Config::kStages; ++i) {
    mbarrier_wait_parity(smem.v_raw_empty(position.stage), position.phase ^ 1);
    position.advance();
  }
  *smem.transposer_stop() = 1;
  // release: the stop word is seen after the wait
  mbarrier_arrive(smem.v_full(ring.stage),
                  Layout::template kv_full_arrivals<Config::kBlockN, kSm90GatherLanes>(params));
}

}  // namespace flashcore::detail
