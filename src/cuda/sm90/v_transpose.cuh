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

#include "cuda/common/accumulator_layout.h"
#include "cuda/ptx/fence.cuh"
#include "cuda/ptx/ldmatrix.cuh"
#include "cuda/ptx/mbarrier.cuh"
#include "cuda/ptx/smem_descriptor.cuh"
#include "cuda/ptx/stmatrix.cuh"
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
// the pairs into bytes, stmatrix writes four 8-row x 16-byte matrices of V^T. The warps take
// the units in turn.
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
// ldmatrix matrix are 8 consecutive keys, all 8 swizzles).
template <class Config>
__device__ __forceinline__ void sm90_transpose_v_stage(const uint8_t* v, uint8_t* vt, int thread) {
  constexpr uint32_t kBlockN = Config::kBlockN, kHeadDim = Config::kHeadDim;
  constexpr uint32_t kRow = kSwizzleBytes;                // bytes of a swizzled row
  constexpr uint32_t kKeySteps = kBlockN / 32;            // 32-key blocks
  constexpr uint32_t kDimChunks = kHeadDim / 16;          // 16-byte head_dim blocks
  constexpr uint32_t kUnits = kKeySteps * kDimChunks;
  constexpr uint32_t kVBlockBytes = kBlockN * kRow;       // a V column block (128 dims)
  constexpr uint32_t kVtBlockBytes = kHeadDim * kRow;     // a V^T column block (128 keys)
  constexpr uint32_t kWarps = kSm90TransposerThreads / 32;
  constexpr uint32_t kEvenBytes = 0x6420, kOddBytes = 0x7531;  // PRMT: bytes 0, 2 / 1, 3 of two
  static_assert(kBlockN % 32 == 0 && kHeadDim % 16 == 0, "whole k32 steps and 16-byte chunks");
  static_assert(kSm90TransposerThreads % 32 == 0, "whole warps");
  const uint32_t lane = static_cast<uint32_t>(thread) % 32;
  const uint32_t warp = static_cast<uint32_t>(thread) / 32;
  // The row this lane addresses: key 8 (lane / 8) + lane % 8 of V for ldmatrix; for stmatrix
  // row lane % 8 of matrix lane / 8, V^T row 2 (lane % 8) + odd of the chunk's 16, and the
  // positions' half h = lane / 16.
  const uint32_t row = lane % 8, matrix = lane / 8;
  const uint32_t v_lane = (8 * matrix + row) * kRow;
  const uint32_t odd = (matrix % 2) ^ (row >= 4 ? 1u : 0u);
  const uint32_t vt_row = 2 * row + odd;
  const uint32_t vt_lane = vt_row * kRow;
  const uint32_t vt_half = matrix / 2;
  // The words this lane stores: rows 2p and 2p + 1 to matrices 0 / 1 (or 1 / 0 when p >= 4).
  const uint32_t first_bytes = lane / 4 < 4 ? kEvenBytes : kOddBytes;
  const uint32_t second_bytes = lane / 4 < 4 ? kOddBytes : kEvenBytes;
  const uint32_t v_base = shared_address(v) + v_lane, vt_base = shared_address(vt) + vt_lane;
  const auto v_address = [&](uint32_t unit) {
    const uint32_t key_step = unit % kKeySteps, chunk = unit / kKeySteps;
    return v_base + (chunk / 8) * kVBlockBytes + key_step * 32 * kRow +
           (((chunk % 8) ^ row) << 4);
  };
  uint32_t words[4];
  if (warp < kUnits) ldmatrix_x4_trans(words, v_address(warp));
  // Rolled: unrolled, ptxas precomputes every unit's addresses and spills past the producer's
  // registers.
#pragma unroll 1
  for (uint32_t unit = warp; unit < kUnits; unit += kWarps) {
    const uint32_t key_step = unit % kKeySteps, chunk = unit / kKeySteps;
    const uint32_t rows[4] = {__byte_perm(words[0], words[1], first_bytes),
                              __byte_perm(words[0], words[1], second_bytes),
                              __byte_perm(words[2], words[3], first_bytes),
                              __byte_perm(words[2], words[3], second_bytes)};
    // The next unit's load goes out before this unit's store.
    if (unit + kWarps < kUnits) ldmatrix_x4_trans(words, v_address(unit + kWarps));
    const uint32_t position_chunk = 2 * (key_step % 4) + vt_half;
    stmatrix_x4(vt_base + (key_step / 4) * kVtBlockBytes + chunk * 16 * kRow +
                    ((position_chunk ^ (vt_row % 8)) << 4),
                rows);
  }
}

// The transposer's loop over the V stages, until the TMA thread says stop (sm90_stop_transposer).
template <class Config>
__device__ __forceinline__ void sm90_transpose_v(const Sm90SmemLayout<Config>& smem,
                                                 RingPosition<Config::kStages> ring, int thread) {
  for (;;) {
    mbarrier_wait_parity(smem.v_full(ring.stage), ring.phase);
    if (*smem.transposer_stop() != 0) return;
    // The consumers have finished the P V that read this V^T stage one trip round the ring ago.
    mbarrier_wait_parity(smem.v_empty(ring.stage), ring.phase ^ 1);
    sm90_transpose_v_stage<Config>(smem.v_tile(ring.stage), smem.vt_tile(ring.stage), thread);
    fence_proxy_async_shared();  // wgmma (the async proxy) reads what these stores wrote
    mbarrier_arrive(smem.vt_full(ring.stage));
    mbarrier_arrive(smem.v_raw_empty(ring.stage));
    ring.advance();
  }
}

// The TMA thread, after its last V load (`ring`: the V ring position after it): once the
// transposer has read every V loaded (the last load of each stage: the empty phase before each
// of the next kStages positions; a stage never loaded passes at once), the stop word and a plain
// arrival on the v_full the transposer waits on next, which completes that phase with no bytes.
// Waiting for every stage, not just the next one, keeps a V still to be transposed from seeing
// the stop word.
template <class Config>
__device__ __forceinline__ void sm90_stop_transposer(const Sm90SmemLayout<Config>& smem,
                                                     const RingPosition<Config::kStages> ring) {
  RingPosition<Config::kStages> position = ring;
  for (int i = 0; i < Config::kStages; ++i) {
    mbarrier_wait_parity(smem.v_raw_empty(position.stage), position.phase ^ 1);
    position.advance();
  }
  *smem.transposer_stop() = 1;
  mbarrier_arrive(smem.v_full(ring.stage));  // release: the stop word is seen after the wait
}

}  // namespace flashcore::detail
