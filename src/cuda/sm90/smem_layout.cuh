// Where each tile of the Hopper kernel lives in dynamic shared memory.
//
//   [Q: consumer 0 slab | consumer 1 slab] [K stage 0 .. S-1] [V stage 0 .. S-1]
//   [V^T stage 0 .. S-1: FP8 only] [O staging: consumer 0 | consumer 1, where it fits]
//   [mbarriers]
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

struct Sm90Tile;        // pipeline.cuh
struct Sm90OStoreSlot;  // pipeline.cuh

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
  // FP8: V^T of a stage (head_dim rows of BLOCK_N keys, K-major), written by the producer
  // warpgroup's transposer from v_tile(stage) (v_transpose.cuh).
  __device__ __forceinline__ uint8_t* vt_tile(int stage) const {
    return base + Config::kQBytes + 2 * Config::kStages * Config::kKVTileBytes +
           stage * Config::kVtTileBytes;
  }
  // First byte past the K and V stages (and V^T): the O staging buffers where they fit, then the
  // barriers.
  __device__ __forceinline__ uint8_t* after_kv_ring() const {
    return base + Config::kQBytes + 2 * Config::kStages * Config::kKVTileBytes +
           Config::kStages * Config::kVtTileBytes;
  }
  // O of a consumer for its TMA store: its own buffer where the tile leaves room, else the
  // consumer's Q slab (free once its last S = Q K^T has completed).
  __device__ __forceinline__ uint8_t* o_staging(int consumer) const {
    if constexpr (Config::kSeparateOStaging) {
      return after_kv_ring() + consumer * Config::kOSlabBytes;
    } else {
      return q_slab(consumer);
    }
  }
  __device__ __forceinline__ uint64_t* barriers() const {
    constexpr int kStagingBytes = Config::kSeparateOStaging ? Config::kOBytes : 0;
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
  // (every thread of the consumer arrives), so the producer may load V there; with
  // Config::kProducerStoresO: consumer c's O is staged there (its thread 0 arrives), for the
  // producer to store before it loads V there.
  __device__ __forceinline__ uint64_t* o_free(int consumer) const {
    return barriers() + 2 + 4 * Config::kStages + consumer;
  }
  // FP8 (Config::kTransposesV): V^T of a stage written (every transposer thread arrives), and
  // the V stage read by the transposer, so the next TMA load may overwrite it (likewise).
  __device__ __forceinline__ uint64_t* vt_full(int stage) const {
    return barriers() + 2 + 4 * Config::kStages + Config::kConsumerWarpgroups + stage;
  }
  __device__ __forceinline__ uint64_t* v_raw_empty(int stage) const {
    return barriers() + 2 + 5 * Config::kStages + Config::kConsumerWarpgroups + stage;
  }
  // FP8: set by the producer after its last V load, then signalled through the next v_full:
  // the transposer, which walks V stages without knowing the tiles, stops there.
  __device__ __forceinline__ volatile uint32_t* transposer_stop() const {
    return reinterpret_cast<volatile uint32_t*>(barriers() + 2 + 6 * Config::kStages +
                                                Config::kConsumerWarpgroups);
  }
  // FP8 in layouts whose K/V blocks can end in rows of anything (kv_tail_may_hold_garbage): per
  // stage, the keys of the sequence in the V block loaded there (kBlockN when it has no tail),
  // written by the TMA thread before that load's arrival on v_full and read by the transposer
  // after its wait, which zeroes the rows past them.
  __device__ __forceinline__ volatile int* v_keys(int stage) const {
    return reinterpret_cast<volatile int*>(barriers() + 3 + 6 * Config::kStages +
                                           Config::kConsumerWarpgroups + stage);
  }
  // What the consumers' O += P V reads and waits for: V as loaded, or V^T (FP8).
  __device__ __forceinline__ uint8_t* pv_tile(int stage) const {
    if constexpr (Config::kTransposesV) {
      return vt_tile(stage);
    } else {
      return v_tile(stage);
    }
  }
  __device__ __forceinline__ uint64_t* pv_full(int stage) const {
    if constexpr (Config::kTransposesV) {
      return vt_full(stage);
    } else {
      return v_full(stage);
    }
  }
  // What the TMA thread waits for before loading V into a stage: the consumers' release, or with
  // V transposed the transposer's (the consumers release V^T to the transposer).
  __device__ __forceinline__ uint64_t* v_load_empty(int stage) const {
    if constexpr (Config::kTransposesV) {
      return v_raw_empty(stage);
    } else {
      return v_empty(stage);
    }
  }
  // Persistent schedulers: the tile whose Q is now loading (m_block < 0: no more tiles), decoded
  // by the producer, so that the consumers start a tile without Sm90TileOrder::tile's integer
  // divisions on their critical path after Q lands. Written before the producer's arrival on
  // q_full, read after the consumers' wait; kSm90TileSlotBytes.
  __device__ __forceinline__ Sm90Tile* tile_slot() const {
    return reinterpret_cast<Sm90Tile*>(barriers() + Config::kBarrierCount);
  }
  // Config::kProducerStoresO: consumer c's staged O for the producer's store (Sm90OStoreSlot),
  // written before its arrival on o_free, read after the producer's wait; kSm90OStoreSlotBytes
  // each, past the tile slot.
  __device__ __forceinline__ Sm90OStoreSlot* o_store_slot(int consumer) const {
    uint8_t* slots = reinterpret_cast<uint8_t*>(barriers() + Config::kBarrierCount) +
                     kSm90TileSlotBytes;
    return reinterpret_cast<Sm90OStoreSlot*>(slots) + consumer;
  }
};

}  // namespace flashcore::detail
