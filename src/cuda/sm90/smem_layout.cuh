// Where each tile of the Hopper kernel lives in dynamic shared memory.
//
//   [Q: consumer 0 slab | consumer 1 slab] [K stage 0 .. S-1] [V stage 0 .. S-1]
//   [O staging: consumer 0 | consumer 1, where it fits] [mbarriers]
//
// Every tile is a column-block tile (see cuda/ptx/smem_descriptor.cuh) starting on a 1024-byte
// boundary, as the 128-byte swizzle of TMA and wgmma requires. Where O has no buffer of its own,
// a persistent CTA stages it in a V stage (Config::kOStagingInVRing) and a one-tile CTA in the
// consumer's Q slab, once its last S = Q K^T has completed.
#pragma once

#include <cstdint>

#include "cuda/ptx/mbarrier.cuh"  // smem_u32
#include "cuda/ptx/smem_descriptor.cuh"
#include "cuda/sm90/tile_config.h"

namespace flashcore::detail {

struct Sm90Tile;  // pipeline.cuh

static_assert(kSwizzleBytes == kSm90SwizzleRowBytes, "one swizzled row for TMA and wgmma alike");

// The first swizzle atom at or after `dynamic_smem`: dynamic shared memory is only 16-byte
// aligned, and 128-byte swizzled tiles start on a whole atom (kAlignmentSlack pays the shift).
__device__ __forceinline__ uint8_t* align_to_swizzle_atom(uint8_t* dynamic_smem) {
  const uint32_t address = smem_u32(dynamic_smem);
  const uint32_t aligned = (address + kSwizzleAtomBytes - 1) & ~(kSwizzleAtomBytes - 1);
  return dynamic_smem + (aligned - address);
}

template <class Config>
struct Sm90SmemLayout {

  uint8_t* base;  // 1024-byte aligned

  // The same arithmetic as align_to_swizzle_atom, written out: calling it changed this kernel's
  // SASS (32 fewer instructions at d128) and made the packed d256 causal kernel spill 8 bytes.
  __device__ __forceinline__ explicit Sm90SmemLayout(uint8_t* dynamic_smem) {
    const uint32_t address = smem_u32(dynamic_smem);
    const uint32_t aligned = (address + kSwizzleAtomBytes - 1) & ~(kSwizzleAtomBytes - 1);
    base = dynamic_smem + (aligned - address);
  }

  __device__ __forceinline__ uint8_t* q_slab(int consumer) const {
    return base + consumer * Config::kQSlabBytes;
  }
  __device__ __forceinline__ uint8_t* k_tile(int stage) const {
    return base + Config::kQBytes + stage * Config::kKVTileBytes;
  }
  __device__ __forceinline__ uint8_t* v_tile(int stage) const {
    return base + Config::kQBytes + (Config::kStages + stage) * Config::kKVTileBytes;
  }
  // First byte past the K and V stages: the O staging buffers where they fit, then the barriers.
  __device__ __forceinline__ uint8_t* after_kv_ring() const {
    return base + Config::kQBytes + 2 * Config::kStages * Config::kKVTileBytes;
  }
  // O of a consumer for its TMA store: its own buffer where the tile leaves room, else the
  // consumer's Q slab (free once its last S = Q K^T has completed).
  __device__ __forceinline__ uint8_t* o_staging(int consumer) const {
    if constexpr (Config::kSeparateOStaging) {
      return after_kv_ring() + consumer * Config::kQSlabBytes;
    } else {
      return q_slab(consumer);
    }
  }
  __device__ __forceinline__ uint64_t* barriers() const {
    constexpr int kStagingBytes = Config::kSeparateOStaging ? Config::kQBytes : 0;
    return reinterpret_cast<uint64_t*>(after_kv_ring() + kStagingBytes);
  }
  // Q landed (one arrival: the producer's expect_tx, plus the TMA bytes).
  __device__ __forceinline__ uint64_t* q_full() const { return barriers(); }
  // K / V of a stage landed (one arrival plus bytes each).
  __device__ __forceinline__ uint64_t* k_full(int stage) const { return barriers() + 1 + stage; }
  __device__ __forceinline__ uint64_t* v_full(int stage) const {
    return barriers() + 1 + Config::kStages + stage;
  }
  // Both consumers finished reading K (their S = Q K^T completed) / V (O += P V completed) of a
  // stage; every consumer thread arrives. Separate, so K of the tile after next can load while the
  // overlapped consumers still hold V of the previous tile.
  __device__ __forceinline__ uint64_t* k_empty(int stage) const {
    return barriers() + 1 + 2 * Config::kStages + stage;
  }
  __device__ __forceinline__ uint64_t* v_empty(int stage) const {
    return barriers() + 1 + 3 * Config::kStages + stage;
  }
  // Persistent schedulers: both consumers are done with their Q slabs (Config::kQEmptyArrivals
  // arrivals), so the next tile's Q may be loaded.
  __device__ __forceinline__ uint64_t* q_empty() const {
    return barriers() + 1 + 4 * Config::kStages;
  }
  // Persistent schedulers with O staged in the V ring: consumer c's O store has read its V stage
  // (every thread of the consumer arrives), so the producer may load V there.
  __device__ __forceinline__ uint64_t* o_free(int consumer) const {
    return barriers() + 2 + 4 * Config::kStages + consumer;
  }
  // Persistent schedulers: the tile whose Q is now loading (m_block < 0: no more tiles), decoded
  // by the producer, so that the consumers start a tile without Sm90TileOrder::tile's integer
  // divisions on their critical path after Q lands. Written before the producer's arrival on
  // q_full, read after the consumers' wait; kSm90TileSlotBytes.
  __device__ __forceinline__ Sm90Tile* tile_slot() const {
    return reinterpret_cast<Sm90Tile*>(barriers() + Config::kBarrierCount);
  }
};

}  // namespace flashcore::detail
