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
#pragma once

#include <cstdint>

#include "cuda/common/accumulator_layout.h"
#include "cuda/ptx/fence.cuh"
#include "cuda/ptx/mbarrier.cuh"
#include "cuda/ptx/smem_descriptor.cuh"
#include "cuda/sm90/pipeline.cuh"
#include "cuda/sm90/smem_layout.cuh"

namespace flashcore::detail {

// Warps of the producer warpgroup that transpose V (all but warp 0, which issues the loads).
constexpr int kSm90TransposerFirstWarp = 1;
constexpr int kSm90TransposerThreads = 96;


// Byte offset of (row, byte column) in a tile of 128-byte-swizzled column blocks of `kRows` rows:
// the 16-byte chunk c of a row r sits at chunk position c ^ (r % 8).
template <int kRows>
__device__ __forceinline__ uint32_t swizzled_byte_offset(int row, int byte_col) {
  const int block = byte_col / kSwizzleBytes;
  const int chunk = (byte_col % kSwizzleBytes) / 16;
  return block * (kRows * kSwizzleBytes) + row * kSwizzleBytes + ((chunk ^ (row % 8)) * 16) +
         byte_col % 16;
}

// V (BLOCK_N keys x head_dim bytes, as TMA wrote it: column blocks of 128 head_dim bytes) into
// V^T (head_dim rows x BLOCK_N keys in the permuted order, column blocks of 128 keys) by transposer
// thread `thread` of kSm90TransposerThreads. Each unit is 4 keys x 4 head_dim bytes: four 32-bit
// loads, a 4 x 4 byte transpose in registers (PRMT), four 32-bit stores. Consecutive lanes take 4
// head_dim groups by 8 key groups, which spreads the swizzled loads over 16 banks.
template <class Config>
__device__ __forceinline__ void sm90_transpose_v_stage(const uint8_t* v, uint8_t* vt, int thread) {
  constexpr int kBlockN = Config::kBlockN, kHeadDim = Config::kHeadDim;
  constexpr int kKeyGroups = kBlockN / 4;   // units along the keys
  constexpr int kUnits = kKeyGroups * (kHeadDim / 4);
  constexpr int kKeyGroupsPerLaneGroup = 8;  // one 32-key step
  constexpr int kDimGroupsPerLaneGroup = 4;  // one 16-byte chunk of head_dim
  static_assert(kBlockN % 32 == 0 && kHeadDim % 16 == 0, "whole k32 steps and 16-byte chunks");
  for (int unit = thread; unit < kUnits; unit += kSm90TransposerThreads) {
    const int lane_keys = unit % kKeyGroupsPerLaneGroup;
    const int lane_dims = (unit / kKeyGroupsPerLaneGroup) % kDimGroupsPerLaneGroup;
    const int rest = unit / (kKeyGroupsPerLaneGroup * kDimGroupsPerLaneGroup);
    constexpr int kKeySteps = kBlockN / 32;
    const int key_step = rest % kKeySteps;
    const int dim_chunk = rest / kKeySteps;
    const int dim = 16 * dim_chunk + 4 * lane_dims;          // first of 4 head_dim bytes
    const int position = 32 * key_step + 4 * lane_keys;      // first of 4 V^T positions
    const int first_key = 32 * key_step + fp8_a_position_key(4 * lane_keys);
    // Positions p..p+3 hold keys k, k + 1, k + 8, k + 9 (fp8_a_position_key).
    uint32_t w[4];
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int key = first_key + 8 * (e / 2) + e % 2;
      w[e] = *reinterpret_cast<const uint32_t*>(v + swizzled_byte_offset<kBlockN>(key, dim));
    }
    // w[e] byte r = V[key_e][dim + r]; row dim + r of V^T gets byte r of w[0..3].
    const uint32_t lo01 = __byte_perm(w[0], w[1], 0x5140), hi01 = __byte_perm(w[0], w[1], 0x7362);
    const uint32_t lo23 = __byte_perm(w[2], w[3], 0x5140), hi23 = __byte_perm(w[2], w[3], 0x7362);
    const uint32_t rows[4] = {__byte_perm(lo01, lo23, 0x5410), __byte_perm(lo01, lo23, 0x7632),
                              __byte_perm(hi01, hi23, 0x5410), __byte_perm(hi01, hi23, 0x7632)};
#pragma unroll
    for (int r = 0; r < 4; ++r) {
      *reinterpret_cast<uint32_t*>(vt + swizzled_byte_offset<kHeadDim>(dim + r, position)) =
          rows[r];
    }
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
