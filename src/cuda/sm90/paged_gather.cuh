// K/V blocks of a paged cache with small pages, gathered row by row with cp.async.
//
// TMA moves a box per instruction, and a box never crosses a page: with pages of a few tokens a
// 128-key block is hundreds of boxes, and the TMA unit ran those at about 60 cycles each (page 1:
// 0.48 TB/s on an H200, docs/kernels.md). The producer warp's 32 lanes instead copy the block's
// rows themselves, 16 bytes per cp.async, into the same 128-byte-swizzled layout TMA writes
// (16-byte chunk c of row r lands in chunk c ^ (r mod 8) of its row: the tile starts on a
// 1024-byte swizzle atom), zero-filling keys past the sequence and columns past head_dim. Each
// lane then arrives on the block's full barrier once its copies land (initialized for 32
// arrivals in this mode), and the consumers fence the async proxy after their wait, since wgmma
// reads what these generic-proxy writes put there.
#pragma once

#include <cstdint>

#include "common/params.h"
#include "cuda/ptx/cp_async.cuh"
#include "cuda/ptx/fence.cuh"
#include "cuda/ptx/mbarrier.cuh"
#include "cuda/sm90/smem_layout.cuh"

namespace flashcore::detail {

constexpr int kSm90GatherLanes = 32;  // the producer warp

// Keys `n_block` x kBlockN .. + kBlockN of K (or V) of (batch, kv_head) into `dst`, by lane
// `lane` of the producer warp, then its arrival on `full`.
template <class Config>
__device__ __forceinline__ void sm90_gather_kv_block(uint8_t* dst, uint64_t* full,
                                                     const AttentionParams& params, bool is_v,
                                                     int n_block, int kv_head, int batch,
                                                     int lane) {
  constexpr int kChunkBytes = 16;
  constexpr int kChunksPerRow = kSwizzleBytes / kChunkBytes;
  constexpr int kChunkElements = kChunkBytes / Config::kElementBytes;
  constexpr int kColumnBlockBytes = Config::kBlockN * kSwizzleBytes;
  constexpr int kRowsPerLane = (Config::kBlockN + kSm90GatherLanes - 1) / kSm90GatherLanes;
  const auto* base = static_cast<const uint8_t*>(is_v ? params.v : params.k);
  const int seqlen_k = params.seqlen_k_of(batch);
  const uint32_t dst_address = smem_u32(dst);
  const int64_t batch_stride = is_v ? params.v_batch_stride : params.k_batch_stride;
  const int64_t row_stride = is_v ? params.v_row_stride : params.k_row_stride;
  const int64_t head_offset =
      int64_t(kv_head) * (is_v ? params.v_head_stride : params.k_head_stride);
  // Every row's page first, so a lane's page-table reads are in flight together instead of one
  // read's latency per row ahead of its copies (32-bit pages: the producer has 24-40 registers).
  // -1: a row past the block or a key past the sequence, zero-filled.
  int page[kRowsPerLane];
#pragma unroll
  for (int i = 0; i < kRowsPerLane; ++i) {
    const int row = lane + i * kSm90GatherLanes;
    const int key = n_block * Config::kBlockN + row;
    page[i] = -1;
    if (row < Config::kBlockN && key < seqlen_k) {
      const int64_t slot = batch * params.page_table_stride + key / params.page_size;
      page[i] = AttentionParams::clamp_int(params.page_table[slot], 0, params.num_pages - 1);
    }
  }
#pragma unroll
  for (int i = 0; i < kRowsPerLane; ++i) {
    const int row = lane + i * kSm90GatherLanes;
    if (row >= Config::kBlockN) break;
    const int key = n_block * Config::kBlockN + row;
    const bool key_valid = page[i] >= 0;
    const int64_t offset =
        key_valid ? page[i] * batch_stride + (key % params.page_size) * row_stride + head_offset
                  : 0;
    const uint8_t* src_row = base + offset * Config::kElementBytes;
    const uint32_t dst_row = dst_address + row * kSwizzleBytes;
#pragma unroll
    for (int block = 0; block < Config::kColumnBlocks; ++block) {
#pragma unroll 1
      for (int chunk = 0; chunk < kChunksPerRow; ++chunk) {
        const int column = block * Config::kBoxCols + chunk * kChunkElements;
        const bool valid = key_valid && column < params.head_dim;
        cp_async_16_zfill(
            dst_row + block * kColumnBlockBytes + ((chunk ^ (row & 7)) * kChunkBytes),
            valid ? src_row + column * Config::kElementBytes : base, valid);
      }
    }
  }
  mbarrier_arrive_on_cp_async(full);
}

// After a consumer's wait on a K/V full barrier: gathered blocks were written through the
// generic proxy, which the wgmma that reads them (async proxy) must be fenced against.
template <class Config, class Layout>
__device__ __forceinline__ void sm90_kv_block_landed(const AttentionParams& params) {
  if (Layout::template kv_gathered<Config::kBlockN>(params)) fence_proxy_async_shared();
}

}  // namespace flashcore::detail
