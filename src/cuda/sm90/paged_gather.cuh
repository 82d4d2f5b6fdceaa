// K/V blocks of a paged cache with small pages, gathered row by row with cp.async.
//
// TMA moves a box per instruction, and a box never crosses a page: with pages of a few tokens a
// 128-key block is hundreds of boxes, each costing the TMA unit tens of cycles (docs/kernels.md,
// runs 102-113). The producer's warps (the decode kernel's four, the general kernel's one)
// instead copy the block's rows themselves, 16 bytes per cp.async and a row's chunks on
// neighbouring lanes, into the 128-byte-swizzled layout TMA writes (16-byte chunk c of row r
// lands in chunk c ^ (r mod 8) of its row: the tile starts on a 1024-byte swizzle atom),
// zero-filling keys past the sequence and columns past head_dim. Each thread then arrives on the
// block's full barrier once its copies land (initialized for one arrival a gathering thread in
// this mode), and the consumers fence the async proxy after their wait, since wgmma reads what
// these generic-proxy writes put there.
#pragma once

#include <cstdint>

#include "common/params.h"
#include "cuda/ptx/cp_async.cuh"
#include "cuda/ptx/fence.cuh"
#include "cuda/ptx/mbarrier.cuh"
#include "cuda/ptx/prefetch.cuh"
#include "cuda/sm90/smem_layout.cuh"

namespace flashcore::detail {

constexpr int kSm90GatherLanes = 32;  // a gathering warp; the general kernel's gather is one

// Copies a one-warp gather unrolls (the general kernel's producer, 24-40 registers): unrolled
// fully it spilled kilobytes (docs/kernels.md, runs 107 and 113).
constexpr int kSm90OneWarpGatherUnroll = 4;

// Copies a gather of several warps unrolls at most: a d256 group is 32 one-row copies, which
// unrolled fully spilled in the decode kernel's 136-register producer warps (decode_kernel.cuh).
constexpr int kSm90GatherMaxUnroll = 16;

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

// Keys `n_block` x kBlockN .. + kBlockN of K (or V) of (batch, kv_head) into `dst`, by thread
// `thread` of kThreads gathering threads (whole warps), then its arrival on `full` (initialized
// for kThreads arrivals); after K, warp 0 prefetches the next blocks' page-table entries.
//
// The rows come in groups of 32, group g to warp g mod kWarps; lane l computes the address of
// row l of each of its warp's groups once (a page-table read, int64 arithmetic), and the copies
// take them by shuffle. A row's 16-byte chunks go to neighbouring lanes, so one warp-wide copy
// reads whole rows (d128 bf16: 16 lanes a row, two rows a copy) and uses every sector it touches.
// Unrolled, every destination offset is a constant of the lane and the copy: a copy costs a
// 64-bit shuffle, a compare and the cp.async (a copy of 25 instructions ran the page-1 decode at
// 11 us a block: docs/kernels.md, run 113).
template <class Config, int kThreads>
__device__ __forceinline__ void sm90_gather_kv_block(uint8_t* dst, uint64_t* full,
                                                     const AttentionParams& params, bool is_v,
                                                     int n_block, int kv_head, int batch,
                                                     int thread) {
  static_assert(kThreads % kSm90GatherLanes == 0, "the gather runs whole warps");
  constexpr int kWarps = kThreads / kSm90GatherLanes;
  constexpr int kChunkBytes = 16;
  constexpr int kChunksPerSwizzleRow = kSwizzleBytes / kChunkBytes;
  constexpr int kChunksPerRow = Config::kColumnBlocks * kChunksPerSwizzleRow;
  constexpr int kChunkElements = kChunkBytes / Config::kElementBytes;
  constexpr int kColumnBlockBytes = Config::kBlockN * kSwizzleBytes;
  constexpr int kLanesPerRow = kChunksPerRow < kSm90GatherLanes ? kChunksPerRow : kSm90GatherLanes;
  constexpr int kRowsPerCopy = kSm90GatherLanes / kLanesPerRow;
  constexpr int kChunksPerLane = kChunksPerRow / kLanesPerRow;
  constexpr int kGroups = (Config::kBlockN + kSm90GatherLanes - 1) / kSm90GatherLanes;
  constexpr int kGroupsPerWarp = (kGroups + kWarps - 1) / kWarps;
  // A group's copies, unrolled (fully up to d128) where the gather has registers to spare (the
  // decode kernel's producer warps).
  constexpr int kCopiesPerGroup = kSm90GatherLanes / kRowsPerCopy;
  constexpr int kSeveralWarpsUnroll =
      kCopiesPerGroup < kSm90GatherMaxUnroll ? kCopiesPerGroup : kSm90GatherMaxUnroll;
  constexpr int kUnroll = kWarps == 1 ? kSm90OneWarpGatherUnroll : kSeveralWarpsUnroll;
  static_assert(Config::kBlockN % kRowsPerCopy == 0, "a copy's rows are all in the block or none");
  // The 128-byte swizzle repeats every kChunksPerSwizzleRow rows (a 1024-byte atom).
  static_assert(kChunksPerSwizzleRow % kRowsPerCopy == 0, "a copy's rows share a swizzle atom");

  const int lane = thread % kSm90GatherLanes;
  const int warp = kWarps == 1 ? 0 : thread / kSm90GatherLanes;  // one warp: a constant
  const auto* base = static_cast<const uint8_t*>(is_v ? params.v : params.k);
  const int seqlen_k = params.seqlen_k_of(batch);
  const int first_key = n_block * Config::kBlockN;
  const int rows_in_sequence = seqlen_k - first_key;  // rows past it are zero-filled
  const int64_t page_stride = is_v ? params.v_batch_stride : params.k_batch_stride;
  const int64_t row_stride = is_v ? params.v_row_stride : params.k_row_stride;
  const int64_t head_offset =
      int64_t(kv_head) * (is_v ? params.v_head_stride : params.k_head_stride);
  // Lane l's row of each of the warp's groups: its first byte, or `base` past the sequence (read
  // as zeros, never touched).
  const uint8_t* row_source[kGroupsPerWarp];
#pragma unroll
  for (int i = 0; i < kGroupsPerWarp; ++i) {
    const int row = (warp + i * kWarps) * kSm90GatherLanes + lane;
    row_source[i] = base;
    if (row < Config::kBlockN && row < rows_in_sequence) {
      const int key = first_key + row;
      const int64_t slot = batch * params.page_table_stride + key / params.page_size;
      const int page = AttentionParams::clamp_int(params.page_table[slot], 0, params.num_pages - 1);
      row_source[i] = base + (page * page_stride + (key % params.page_size) * row_stride +
                              head_offset) * Config::kElementBytes;
    }
  }
  // This lane's part of every copy: row `row_in_copy` of it, chunks first_chunk + i x kLanesPerRow.
  const int row_in_copy = lane / kLanesPerRow;
  const int first_chunk = lane % kLanesPerRow;
  // Per chunk of the lane: whether its columns are the call's (a padded head_dim's are
  // zero-filled), its bytes into the source row (0 when not: every address stays in the tensor),
  // and its offset in the tile's row before the row's swizzle.
  bool column_valid[kChunksPerLane];
  int source_offset[kChunksPerLane];
  uint32_t chunk_offset[kChunksPerLane];
#pragma unroll
  for (int c = 0; c < kChunksPerLane; ++c) {
    const int chunk = first_chunk + c * kLanesPerRow;
    column_valid[c] = chunk * kChunkElements < params.head_dim;
    source_offset[c] = column_valid[c] ? chunk * kChunkBytes : 0;
    chunk_offset[c] = (chunk / kChunksPerSwizzleRow) * kColumnBlockBytes +
                      (chunk % kChunksPerSwizzleRow) * kChunkBytes;
  }
  const uint32_t dst_lane = smem_u32(dst) + row_in_copy * kSwizzleBytes;
#pragma unroll
  for (int i = 0; i < kGroupsPerWarp; ++i) {
    const int group = warp + i * kWarps;
    if (group >= kGroups) break;  // the same on every lane of the warp
#pragma unroll kUnroll
    for (int group_row = 0; group_row < kSm90GatherLanes; group_row += kRowsPerCopy) {
      const int copy_row = group * kSm90GatherLanes + group_row;  // the copy's first row
      if (copy_row >= Config::kBlockN) break;
      const uint8_t* source = reinterpret_cast<const uint8_t*>(__shfl_sync(
          0xffffffffu, reinterpret_cast<uintptr_t>(row_source[i]), group_row + row_in_copy));
      const bool row_valid = copy_row + row_in_copy < rows_in_sequence;
      // The 128-byte swizzle: chunk c of row r lands in chunk c ^ (r mod 8) of its row (8:
      // kChunksPerSwizzleRow); r mod 8 is (copy_row mod 8) + row_in_copy, copy_row a multiple
      // of kRowsPerCopy.
      const uint32_t swizzle =
          uint32_t((copy_row % kChunksPerSwizzleRow + row_in_copy) % kChunksPerSwizzleRow) *
          kChunkBytes;
#pragma unroll
      for (int c = 0; c < kChunksPerLane; ++c) {
        cp_async_16_zfill(dst_lane + copy_row * kSwizzleBytes + (chunk_offset[c] ^ swizzle),
                          source + source_offset[c], row_valid && column_valid[c]);
      }
    }
  }
  mbarrier_arrive_on_cp_async(full);
  if (!is_v && warp == 0) sm90_prefetch_page_entries<Config>(params, n_block, batch, seqlen_k, lane);
}

// After a consumer's wait on a K/V full barrier: gathered blocks were written through the
// generic proxy, which the wgmma that reads them (async proxy) must be fenced against.
template <class Config, class Layout>
__device__ __forceinline__ void sm90_kv_block_landed(const AttentionParams& params) {
  if (Layout::template kv_gathered<Config::kBlockN>(params)) fence_proxy_async_shared();
}

}  // namespace flashcore::detail
