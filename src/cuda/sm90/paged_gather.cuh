// K/V blocks of a paged cache with small pages, gathered row by row with cp.async.
//
// TMA moves a box per instruction, and a box never crosses a page: with pages of a few tokens a
// 128-key block is hundreds of boxes, each costing the TMA unit tens of cycles (docs/kernels.md,
// runs 102-110). The producer warp's 32 lanes instead copy the block's rows themselves, 16 bytes
// per cp.async and a row's chunks on neighbouring lanes, into the 128-byte-swizzled layout TMA
// writes (16-byte chunk c of row r lands in chunk c ^ (r mod 8) of its row: the tile starts on a
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
#include "cuda/ptx/prefetch.cuh"
#include "cuda/sm90/smem_layout.cuh"

namespace flashcore::detail {

constexpr int kSm90GatherLanes = 32;  // the producer warp

// Blocks a K gather prefetches the page-table entries of: the next ones the producer loads
// (blocks are walked downwards, mask.cuh), so their entries come from the L2 and not the DRAM
// when their turn comes: every gather waits on its page-table reads before it can copy.
constexpr int kSm90PageTablePrefetchBlocks = 2;

// Lines of page-table entries of blocks n_block - 1 .. n_block - kSm90PageTablePrefetchBlocks
// into the L2, by the producer warp's lanes.
template <class Config>
__device__ __forceinline__ void sm90_prefetch_page_entries(const AttentionParams& params,
                                                           int n_block, int batch, int seqlen_k,
                                                           int lane) {
  constexpr int kL2LineBytes = 128;  // what one prefetch.global.L2 brings in
  constexpr int kEntriesPerLine = kL2LineBytes / sizeof(int);
  const int* row = params.page_table + batch * params.page_table_stride;
#pragma unroll
  for (int ahead = 1; ahead <= kSm90PageTablePrefetchBlocks; ++ahead) {
    const int block = n_block - ahead;
    const int first_key = block * Config::kBlockN;
    if (block < 0 || first_key >= seqlen_k) continue;
    const int last_key = min(first_key + Config::kBlockN, seqlen_k) - 1;
    const int first_entry = first_key / params.page_size;
    const int last_entry = last_key / params.page_size;
    // One more line than the entries fill: they need not start on a line. Every address is an
    // entry of the block's (the last one for lines past it).
    const int lines = (last_entry - first_entry) / kEntriesPerLine + 2;
    for (int line = lane; line < lines; line += kSm90GatherLanes) {
      prefetch_global_l2(row + min(first_entry + line * kEntriesPerLine, last_entry));
    }
  }
}

// Keys `n_block` x kBlockN .. + kBlockN of K (or V) of (batch, kv_head) into `dst`, by lane
// `lane` of the producer warp, then its arrival on `full`; after K, the prefetch above.
template <class Config>
__device__ __forceinline__ void sm90_gather_kv_block(uint8_t* dst, uint64_t* full,
                                                     const AttentionParams& params, bool is_v,
                                                     int n_block, int kv_head, int batch,
                                                     int lane) {
  constexpr int kChunkBytes = 16;
  constexpr int kChunksPerSwizzleRow = kSwizzleBytes / kChunkBytes;
  constexpr int kChunksPerRow = Config::kColumnBlocks * kChunksPerSwizzleRow;
  constexpr int kChunkElements = kChunkBytes / Config::kElementBytes;
  constexpr int kColumnBlockBytes = Config::kBlockN * kSwizzleBytes;
  // A row's chunks go to neighbouring lanes, so one warp-wide copy reads whole rows (d128 bf16:
  // 16 lanes a row, two rows a copy) and every 32-byte sector it touches is used.
  constexpr int kLanesPerRow = kChunksPerRow < kSm90GatherLanes ? kChunksPerRow : kSm90GatherLanes;
  constexpr int kRowsPerCopy = kSm90GatherLanes / kLanesPerRow;
  constexpr int kChunksPerLane = kChunksPerRow / kLanesPerRow;
  constexpr int kPageGroups = (Config::kBlockN + kSm90GatherLanes - 1) / kSm90GatherLanes;
  static_assert(Config::kBlockN % kRowsPerCopy == 0, "a copy's rows are all in the block or none");

  const auto* base = static_cast<const uint8_t*>(is_v ? params.v : params.k);
  const int seqlen_k = params.seqlen_k_of(batch);
  const uint32_t dst_address = smem_u32(dst);
  const int64_t page_stride = is_v ? params.v_batch_stride : params.k_batch_stride;
  const int64_t row_stride = is_v ? params.v_row_stride : params.k_row_stride;
  const int64_t head_offset =
      int64_t(kv_head) * (is_v ? params.v_head_stride : params.k_head_stride);
  // Each row's source offset first, lane l holding row l + 32 g's in row_offset[g], so the
  // page-table reads are in flight together and the division by page_size is done once a row;
  // the copies take them by shuffle, unrolled so the warp issues them back to back. -1: a row
  // past the block or a key past the sequence, zero-filled.
  int64_t row_offset[kPageGroups];
#pragma unroll
  for (int g = 0; g < kPageGroups; ++g) {
    const int row = g * kSm90GatherLanes + lane;
    const int key = n_block * Config::kBlockN + row;
    row_offset[g] = -1;
    if (row < Config::kBlockN && key < seqlen_k) {
      const int64_t slot = batch * params.page_table_stride + key / params.page_size;
      const int page = AttentionParams::clamp_int(params.page_table[slot], 0, params.num_pages - 1);
      row_offset[g] = page * page_stride + (key % params.page_size) * row_stride + head_offset;
    }
  }
  const int row_in_copy = lane / kLanesPerRow;
  const int first_chunk = lane % kLanesPerRow;
#pragma unroll
  for (int g = 0; g < kPageGroups; ++g) {
#pragma unroll 4
    for (int group_row = 0; group_row < kSm90GatherLanes; group_row += kRowsPerCopy) {
      const int row = g * kSm90GatherLanes + group_row + row_in_copy;
      if (g * kSm90GatherLanes + group_row < Config::kBlockN) {  // the same on every lane
        const int64_t offset = __shfl_sync(0xffffffffu, row_offset[g], group_row + row_in_copy);
        const bool key_valid = offset >= 0;
        const uint8_t* src_row = base + (key_valid ? offset : 0) * Config::kElementBytes;
        const uint32_t dst_row = dst_address + row * kSwizzleBytes;
#pragma unroll
        for (int i = 0; i < kChunksPerLane; ++i) {
          const int chunk = first_chunk + i * kLanesPerRow;
          const int column = chunk * kChunkElements;
          const int swizzled = (chunk % kChunksPerSwizzleRow) ^ (row & 7);
          const bool valid = key_valid && column < params.head_dim;
          cp_async_16_zfill(dst_row + (chunk / kChunksPerSwizzleRow) * kColumnBlockBytes +
                                swizzled * kChunkBytes,
                            valid ? src_row + column * Config::kElementBytes : base, valid);
        }
      }
    }
  }
  mbarrier_arrive_on_cp_async(full);
  if (!is_v) sm90_prefetch_page_entries<Config>(params, n_block, batch, seqlen_k, lane);
}

// After a consumer's wait on a K/V full barrier: gathered blocks were written through the
// generic proxy, which the wgmma that reads them (async proxy) must be fenced against.
template <class Config, class Layout>
__device__ __forceinline__ void sm90_kv_block_landed(const AttentionParams& params) {
  if (Layout::template kv_gathered<Config::kBlockN>(params)) fence_proxy_async_shared();
}

}  // namespace flashcore::detail
