// Thread-block clusters of the Hopper kernel: the CTAs of a cluster (Config::kRow.cluster_m, 2)
// compute query tiles of the same (batch, head) and so read the same K/V blocks in the same
// order (cluster_scheduler.cuh pairs the tiles). Each CTA's producer loads its 1 / cluster share
// of the rows of every K/V block and multicasts it into the same stage of every CTA of the
// cluster: each block leaves the L2 once per cluster instead of once per CTA.
//
//   CTA 0 producer                           CTA 1 producer
//   wait k_empty[s] (both CTAs' consumers)   wait k_empty[s] (both CTAs' consumers)
//   arm k_full[s]: the whole block's bytes   arm k_full[s]: the whole block's bytes
//   TMA rows [0, n/2)  -> CTA 0 and CTA 1    TMA rows [n/2, n) -> CTA 0 and CTA 1
//
//   consumers of each CTA: wait k_full[s] (both halves landed), S = Q K^T, then arrive on their
//   own k_empty[s] (every thread) and on the peer's (one lane per warp, remote): a stage is
//   rewritten only once the consumers of both CTAs have released it, since either CTA's next
//   load writes into both. A peer's bytes can complete on a full barrier before this CTA armed
//   it: the phase cannot complete without the arming arrival, and the transaction count may go
//   below zero meanwhile.
//
// Start: every barrier is initialized before any CTA of the cluster issues a multicast or a
// remote arrival (cluster_sync after the inits). End: no CTA exits while a peer may still write
// its shared memory or arrive on its barriers: the producer waits until both CTAs' consumers
// released every stage it loaded (sm90_cluster_producer_tail; the peer's consumers only finish
// after the multicasts into their CTA landed), then all threads of the cluster meet once more.
//
// Q, O, q_empty and the tile slot stay per CTA: each CTA loads and stores its own query rows.
// Only dense layouts cluster (a paged or packed block is not one box per CTA share); the serving
// layouts run the same row unclustered.
#pragma once

#include <cstdint>
#include <type_traits>

#include "common/params.h"
#include "cuda/ptx/cluster.cuh"
#include "cuda/ptx/mbarrier.cuh"
#include "cuda/ptx/smem_descriptor.cuh"
#include "cuda/ptx/tma.cuh"
#include "cuda/sm90/pipeline.cuh"
#include "cuda/sm90/sequence_layout.h"
#include "cuda/sm90/smem_layout.cuh"
#include "cuda/sm90/tile_config.h"

namespace flashcore::detail {

// The cluster a (tile configuration, layout) runs in: Config::kRow.cluster_m CTAs for dense
// unpacked kernels, else one (the serving layouts and packed tiles run the row unclustered).
template <class Config, class Layout>
struct Sm90ClusterShape {
  static constexpr bool kEligible = kSm90IsDenseLayout<Layout> && !Config::kPacksGroups;
  static constexpr int kSize = kEligible ? Config::kRow.cluster_m : 1;
  static constexpr bool kClustered = kSize > 1;
  // Rows of each K/V block that one CTA loads for the cluster.
  static constexpr int kRowsPerCta = Config::kBlockN / kSize;
  static constexpr uint16_t kAllCtas = static_cast<uint16_t>((1u << kSize) - 1);

  // The producer's setmaxnreg budget: with three consumers 32 clustered (the multicast loads and
  // the cluster tile order spill in 24; FA3's split for three consumers), else the row's.
  static constexpr int kProducerRegisters =
      kClustered && Config::kConsumerWarpgroups == 3 ? 32 : Config::kProducerRegisters;
  static_assert(kProducerRegisters * Config::kThreadsPerWarpgroup +
                        Config::kConsumerRegisters * Config::kConsumerThreads <=
                    kSm90RegistersPerSm,
                "setmaxnreg budgets past the SM's 64K registers");

  static_assert(Config::kRow.cluster_m == 1 || Config::kRow.cluster_m == 2,
                "cluster_m: 1 or 2 CTAs per cluster");
  static_assert(!kClustered || !Config::kRow.causal,
                "clusters: non-causal rows (a cluster's tiles visit the same K/V blocks)");
  static_assert(!kClustered || !Config::kOStagingInVRing,
                "clusters: a peer's multicast writes the V ring, so O cannot be staged there");
  static_assert(kRowsPerCta % (kSwizzleAtomBytes / kSwizzleBytes) == 0,
                "each CTA's share of a K/V block must be whole 1024-byte swizzle atoms");
};

// This CTA's rank in its cluster: the launch's clusters are 1-D along a 1-D grid
// (launch_cluster.h), so the rank is blockIdx.x's remainder (%cluster_ctarank, without the
// special-register read).
template <class Config, class Layout>
__device__ __forceinline__ int sm90_cluster_rank() {
  return static_cast<int>(blockIdx.x % Sm90ClusterShape<Config, Layout>::kSize);
}

// Arrivals that release a K or V stage: every consumer thread of this CTA, and one lane per
// consumer warp of every peer CTA (sm90_release_kv_stage).
template <class Config, class Layout>
FC_HOST_DEVICE constexpr uint32_t sm90_kv_empty_arrivals() {
  constexpr int kPeers = Sm90ClusterShape<Config, Layout>::kSize - 1;
  return Config::kConsumerThreads + kPeers * (Config::kConsumerThreads / 32);
}

// A consumer thread is done reading a K or V stage (its wgmma completed): it arrives on its own
// CTA's empty barrier and, clustered, each warp's lane 0 (once every lane got here) on the
// peer's, whose producer multicasts into this CTA's stage too.
template <class Config, class Layout>
__device__ __forceinline__ void sm90_release_kv_stage(uint64_t* empty) {
  mbarrier_arrive(empty);
  if constexpr (Sm90ClusterShape<Config, Layout>::kClustered) {
    static_assert(Sm90ClusterShape<Config, Layout>::kSize == 2, "one peer");
    __syncwarp();
    if (threadIdx.x % 32 == 0) {
      const uint32_t peer = static_cast<uint32_t>(sm90_cluster_rank<Config, Layout>() ^ 1);
      mbarrier_arrive_cluster(cluster_map_shared(smem_u32(empty), peer));
    }
  }
}

// Arms `full` for the whole K/V block `n_block` (every CTA's share lands on it), then loads this
// CTA's share of its rows, every column block, into `dst` of every CTA of the cluster. The
// tensor maps' boxes are kRowsPerCta rows (launch.cuh); a share starts on a swizzle atom, so the
// rows land where one box of the whole block would have put them.
template <class Config, class Layout>
__device__ __forceinline__ void sm90_arm_and_load_kv_share(uint8_t* dst, const CUtensorMap* map,
                                                           uint64_t* full,
                                                           const AttentionParams& params,
                                                           int n_block, int kv_head, int batch) {
  using Shape = Sm90ClusterShape<Config, Layout>;
  constexpr int kBoxBytesKV = Config::kBlockN * kSwizzleBytes;  // one column block of the block
  mbarrier_arrive_expect_tx(full, Config::kKVTileBytes);
  const int share_row = sm90_cluster_rank<Config, Layout>() * Shape::kRowsPerCta;
  // Dense: one box coordinate, the block's first key (Sm90ClusterShape admits no other layout).
  Layout::template for_each_kv_box<Config::kBlockN>(
      params, batch, /*k_start=*/0, kv_head, n_block * Config::kBlockN, 0,
      [&](int box_row, const TmaRowCoord& at) {
#pragma unroll
        for (int block = 0; block < Config::kColumnBlocks; ++block) {
          tma_load_4d_multicast(dst + block * kBoxBytesKV + (box_row + share_row) * kSwizzleBytes,
                                map, full, block * Config::kBoxCols, at.row + share_row, at.head,
                                at.batch, Shape::kAllCtas);
        }
      });
}

// Clustered kernels: every thread of the cluster, after the barrier inits and before the end.
template <class Config, class Layout>
__device__ __forceinline__ void sm90_cluster_sync() {
  if constexpr (Sm90ClusterShape<Config, Layout>::kClustered) cluster_sync();
}

// Clustered producers after their last load: waits until the consumers of every CTA released
// each stage (the next trip round the ring, as if loading again; a stage never loaded passes at
// once), so no peer arrives on this CTA's barriers after it exits.
template <class Config, class Layout>
__device__ __forceinline__ void sm90_cluster_producer_tail(const Sm90SmemLayout<Config>& smem,
                                                           RingPosition<Config::kStages> ring) {
  if constexpr (Sm90ClusterShape<Config, Layout>::kClustered) {
#pragma unroll
    for (int i = 0; i < Config::kStages; ++i) {
      mbarrier_wait_parity(smem.k_empty(ring.stage), ring.phase ^ 1);
      mbarrier_wait_parity(smem.v_empty(ring.stage), ring.phase ^ 1);
      ring.advance();
    }
  }
}

}  // namespace flashcore::detail
