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
#include "cuda/ptx/mbarrier.cuh"
#include "cuda/ptx/smem_descriptor.cuh"
#include "cuda/sm90/pipeline.cuh"
#include "cuda/sm90/smem_layout.cuh"

namespace flashcore::detail {

// Warps of the producer warpgroup that transpose V (all but warp 0, which issues the loads).
constexpr int kSm90TransposerFirstWarp = 1;
constexpr int kSm90TransposerThreads = 96;


// V (BLOCK_N keys x head_dim bytes, as TMA wrote it: column blocks of 128 head_dim bytes, the
// 16-byte chunk c of row r at chunk position c ^ (r % 8)) into V^T (head_dim rows x BLOCK_N keys
// in the permuted order, column blocks of 128 keys, swizzled alike) by transposer thread `thread`
// of kSm90TransposerThreads. A unit is 4 keys x 4 head_dim bytes: four 32-bit loads, a 4 x 4 byte
// transpose in registers (PRMT), four 32-bit stores. A lane always takes the same place in a
// 32-key x 16-byte block (8 key groups x 4 head_dim groups, which spreads the swizzled loads over
// 16 banks); the warps take the blocks in turn. The row of every load and store modulo 8, hence
// its swizzle, is then fixed per thread, and the loop only adds block offsets.
template <class Config>
__device__ __forceinline__ void sm90_transpose_v_stage(const uint8_t* v, uint8_t* vt, int thread) {
  constexpr uint32_t kBlockN = Config::kBlockN, kHeadDim = Config::kHeadDim;
  constexpr uint32_t kRow = kSwizzleBytes;                // bytes of a swizzled row
  constexpr uint32_t kKeySteps = kBlockN / 32;            // 32-key blocks
  constexpr uint32_t kDimChunks = kHeadDim / 16;          // 16-byte head_dim blocks
  constexpr uint32_t kVBlockBytes = kBlockN * kRow;       // a V column block (128 dims)
  constexpr uint32_t kVtBlockBytes = kHeadDim * kRow;     // a V^T column block (128 keys)
  constexpr uint32_t kWarps = kSm90TransposerThreads / 32;
  static_assert(kBlockN % 32 == 0 && kHeadDim % 16 == 0, "whole k32 steps and 16-byte chunks");
  static_assert(kSm90TransposerThreads % 32 == 0, "whole warps");
  const uint32_t lane = static_cast<uint32_t>(thread) % 32;
  const uint32_t warp = static_cast<uint32_t>(thread) / 32;
  const uint32_t lane_keys = lane % 8, lane_dims = lane / 8;
  // Positions 4 lane_keys + e hold keys k, k + 1, k + 8, k + 9 of each 32 (fp8_a_position_key):
  // key k + 8 (e / 2) + e % 2 is row k + ... of V, and as k is even its swizzle (the row modulo 8)
  // is (k % 8) ^ (e % 2). Row 4 lane_dims + r of V^T (modulo 8) is (4 lane_dims % 8) ^ r. So the
  // per-thread state is three words, and e and r only add constants (immediate offsets).
  const uint32_t first_key = static_cast<uint32_t>(fp8_a_position_key(4 * lane_keys));
  const uint32_t v_row = first_key * kRow + 4 * lane_dims;
  const uint32_t key_swizzle = first_key % 8;
  const uint32_t vt_row = 4 * lane_dims * kRow + (4 * lane_keys) % 16;
  const uint32_t vt_swizzle = (4 * lane_dims) % 8 ^ lane_keys / 4;
  for (uint32_t block = warp; block < kKeySteps * kDimChunks; block += kWarps) {
    const uint32_t key_step = block % kKeySteps, dim_chunk = block / kKeySteps;
    const uint32_t v_base = (dim_chunk / 8) * kVBlockBytes + key_step * 32 * kRow + v_row;
    const uint32_t chunk = (dim_chunk % 8) ^ key_swizzle;
    uint32_t w[4];
#pragma unroll
    for (uint32_t e = 0; e < 4; ++e) {
      w[e] = *reinterpret_cast<const uint32_t*>(v + v_base + (8 * (e / 2) + e % 2) * kRow +
                                                ((chunk ^ (e % 2)) << 4));
    }
    // w[e] byte r = V[key_e][dim + r]; row dim + r of V^T gets byte r of w[0..3].
    const uint32_t lo01 = __byte_perm(w[0], w[1], 0x5140), hi01 = __byte_perm(w[0], w[1], 0x7362);
    const uint32_t lo23 = __byte_perm(w[2], w[3], 0x5140), hi23 = __byte_perm(w[2], w[3], 0x7362);
    const uint32_t rows[4] = {__byte_perm(lo01, lo23, 0x5410), __byte_perm(lo01, lo23, 0x7632),
                              __byte_perm(hi01, hi23, 0x5410), __byte_perm(hi01, hi23, 0x7632)};
    // V^T rows 16 dim_chunk + 4 lane_dims + r, positions 32 key_step + 4 lane_keys + 0..3.
    const uint32_t vt_base = (key_step / 4) * kVtBlockBytes + dim_chunk * 16 * kRow + vt_row;
    const uint32_t vt_chunk = (2 * (key_step % 4)) ^ vt_swizzle;
#pragma unroll
    for (uint32_t r = 0; r < 4; ++r) {
      *reinterpret_cast<uint32_t*>(vt + vt_base + r * kRow + ((vt_chunk ^ r) << 4)) = rows[r];
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
