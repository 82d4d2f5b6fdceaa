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

}  // namespace flashcore::detail
