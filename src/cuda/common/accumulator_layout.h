// Where a wgmma m64nN fp32 accumulator keeps a thread's elements (PTX ISA, "wgmma .m64nNk16
// register fragments"; cuda/ptx/wgmma.cuh draws it): warp w of the warpgroup owns rows 16w..16w+15,
// lane l holds rows 16w + l / 4 and that + 8, and in every chunk of 8 columns the pair
// 8i + 2 (l % 4) + {0, 1}. Register d[4i + 2r + e] is row r's (0: the upper, 1: + 8) column
// 8i + 2 (l % 4) + e. The causal mask, its column count (thread_columns_before, tested on the
// host) and the epilogues take the layout from here, so it is host-compilable.
#pragma once

#include "common/params.h"  // FC_HOST_DEVICE

namespace flashcore::detail {

constexpr int kAccChunkShift = 3;
constexpr int kAccChunkColumns = 1 << kAccChunkShift;  // 8 columns per chunk
constexpr int kAccPairColumns = 2;                     // a thread's adjacent columns per chunk
constexpr int kAccLanesPerRow = kAccChunkColumns / kAccPairColumns;  // 4 lanes share a row
// A lane's first column in chunk i is kAccChunkColumns * i + kAccPairColumns * (lane %
// kAccLanesPerRow), written out where it is used: as a function it moved an IMAD into the
// decode kernel's main loop (cuobjdump), where the expression keeps the SASS as it was.

// Registers per chunk: a pair for each of the thread's two rows.
constexpr int kAccRegsPerChunk = 2 * kAccPairColumns;

// The register holding row `r`'s element `e` of chunk `chunk`.
FC_HOST_DEVICE constexpr int acc_reg(int chunk, int r, int e) {
  return kAccRegsPerChunk * chunk + kAccPairColumns * r + e;
}

// FP8 P V (e4m3 wgmma m64nNk32, A from registers): A position p (0..31) of a k32 step is byte
// p % 4 of register 2 (p / 16) + r (r: the row half) of lane t = (p % 16) / 4 of the quad. The
// FP8 kernel puts there the key (column of the step's 32) that the S accumulator already holds
// in that lane: chunk 2 (p / 16) + (p % 4) / 2, element p % 2, column 8 chunk + 2t + p % 2. V^T
// is written in the same key order (cuda/sm90/v_transpose.cuh), so the sum over positions is the
// sum over keys and P never moves between lanes.
FC_HOST_DEVICE constexpr int fp8_a_position_key(int position) {
  const int half = position / 16, lane_in_quad = (position % 16) / 4, byte = position % 4;
  const int chunk = 2 * half + byte / 2;
  return kAccChunkColumns * chunk + kAccPairColumns * lane_in_quad + byte % 2;
}

}  // namespace flashcore::detail
