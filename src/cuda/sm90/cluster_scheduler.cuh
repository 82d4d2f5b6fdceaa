// The cluster scheduler of the Hopper kernel: clusters of Sm90ClusterShape::kSize CTAs
// (cluster.cuh) taking cluster tiles with a fixed stride (persistent rows: as many clusters as fit
// at once), or one cluster tile per cluster (one-tile rows). A cluster tile is kSize consecutive
// m-blocks of one (batch, head); CTA r of the cluster computes m-block kSize x t + r, so both
// CTAs visit the same K/V blocks in the same order and share every block's loads. Every CTA of a
// cluster walks the same cluster tiles (same first index, same stride), so their K/V rings stay
// in step across tiles.
//
// An odd number of m-blocks leaves the last CTA of a head's last cluster tile without rows
// (m-block == m_blocks): it still loads its Q (zero-filled past the sequence), its share of K/V
// and keeps every barrier, while its consumers pass the tile without GEMMs (rowless consumers)
// and store nothing. The m-blocks of a head rotate by the round their first cluster tile is in
// (as Sm90TileOrder's), so the rowless tile moves from cluster to cluster.
//
// The members are Sm90PersistentScheduler's, or for one-tile rows Sm90SingleTileScheduler's
// (scheduler.cuh), and the kernel's loops are the same.
#pragma once

#include <climits>
#include <cstdint>
#include <type_traits>

#include "common/params.h"
#include "cuda/common/mask.cuh"
#include "cuda/ptx/cluster.cuh"
#include "cuda/ptx/mbarrier.cuh"
#include "cuda/sm90/cluster.cuh"
#include "cuda/sm90/pipeline.cuh"
#include "cuda/sm90/scheduler.cuh"
#include "cuda/sm90/smem_layout.cuh"
#include "cuda/sm90/tile_config.h"

namespace flashcore::detail {

template <class Config, class Layout, bool kCausal>
struct Sm90ClusterScheduler {
  static constexpr bool kPersistent = Config::kPersistent;
  static constexpr bool kClaimsTiles = false;
  static constexpr int kClusterSize = Sm90ClusterShape<Config, Layout>::kSize;
  static_assert(kClusterSize > 1 && !kCausal && !Config::kPacksGroups && !Layout::kMayPackQ,
                "the cluster scheduler pairs dense non-causal tiles");

  // Two ints only: the producer runs in 24 or 32 registers. The cluster's index, its rank and the
  // stride (clusters in the grid) come from blockIdx.x and gridDim.x: the clusters are 1-D along
  // x (launch_cluster.h).
  int tiles_per_head;  // cluster tiles of a (batch, head): ceil(m_blocks / kClusterSize)
  int cluster_tiles;   // of the launch

  // Cluster tiles of a call: the most clusters worth launching.
  FC_HOST_DEVICE static int64_t cluster_tiles_of(const AttentionParams& params) {
    return int64_t(ceil_div(sm90_m_blocks<Config, Layout>(params), kClusterSize)) *
           params.heads_q * params.batch;
  }
  // CTAs for `num_tiles` tiles on `num_sms` SMs, whole clusters (the launcher then takes the
  // exact count from cluster_tiles_of, and for persistent rows the clusters that fit at once:
  // launch_cluster.h).
  static int64_t grid_size(int64_t num_tiles, int num_sms) {
    const int64_t wanted = (num_tiles + kClusterSize - 1) / kClusterSize;
    if (!kPersistent) return kClusterSize * wanted;
    const int64_t fit = num_sms / kClusterSize > 0 ? num_sms / kClusterSize : 1;
    return kClusterSize * (wanted < fit ? wanted : fit);
  }

  __device__ __forceinline__ Sm90ClusterScheduler(const AttentionParams& params,
                                                  const Sm90TileCounters& /*counters*/)
      : tiles_per_head(ceil_div(sm90_m_blocks<Config, Layout>(params), kClusterSize)),
        cluster_tiles(tiles_per_head * params.heads_q * params.batch) {}

  __device__ __forceinline__ int group_shift() const { return 0; }
  __device__ __forceinline__ static int clusters() {
    return static_cast<int>(gridDim.x) / kClusterSize;
  }
  __device__ __forceinline__ int first_index() const {
    return static_cast<int>(blockIdx.x) / kClusterSize;
  }
  // Past the last cluster tile: INT_MAX, which ends the kernel's loop (its bound counts CTA tiles).
  __device__ __forceinline__ int next_index(int index) const {
    if constexpr (!kPersistent) return INT_MAX;
    const int next = index + clusters();
    return next < cluster_tiles ? next : INT_MAX;
  }

  // This CTA's tile of cluster tile `index` (< cluster_tiles: first_index and next_index see to
  // it): m-block fastest (consecutive clusters take one head's blocks, as Sm90TileOrder's
  // non-causal order does for CTAs).
  __device__ __forceinline__ Sm90Tile tile(const AttentionParams& params, int index) const {
    Sm90Tile tile;
    const int pair = index / tiles_per_head;  // (head, batch)
    const int in_head = index - pair * tiles_per_head;
    const int round = (index - in_head) / clusters();
    const int cluster_m_block = tiles_per_head - 1 - (in_head + round) % tiles_per_head;
    tile.m_block = cluster_m_block * kClusterSize + sm90_cluster_rank<Config, Layout>();
    tile.head = pair % params.heads_q;
    tile.batch = pair / params.heads_q;
    tile.sequence = sm90_resolve_sequence<Layout>(params, tile.batch);
    tile.row_begin = sm90_block_row_begin<Config, kCausal>(
        tile.m_block, sm90_tile_query_rows<Layout>(params, tile, 0));
    tile.kv_split = 0;
    return tile;
  }

  // Persistent: as Sm90PersistentScheduler's (the tile goes to the consumers with its Q, then
  // m_block -1 says there is no further one). One tile: as Sm90SingleTileScheduler's (the
  // consumers decode their CTA's only tile themselves).
  __device__ __forceinline__ void publish(Sm90Tile* slot, const Sm90Tile& tile) const {
    if constexpr (kPersistent) sm90_publish_tile<Config, Layout>(slot, tile);
  }
  __device__ __forceinline__ void producer_done(const Sm90SmemLayout<Config>& smem,
                                                uint32_t q_phase) const {
    if constexpr (kPersistent) {
      mbarrier_wait_parity(smem.q_empty(), q_phase ^ 1);
      smem.tile_slot()->m_block = -1;
      mbarrier_arrive(smem.q_full());
    }
  }
  __device__ __forceinline__ bool consumer_tile(const AttentionParams& params,
                                                const Sm90SmemLayout<Config>& smem,
                                                uint32_t q_phase, Sm90Tile& tile) const {
    if constexpr (kPersistent) {
      mbarrier_wait_parity(smem.q_full(), q_phase);
      tile = sm90_receive_tile<Config, Layout>(smem.tile_slot());
      return tile.m_block >= 0;
    } else {
      tile = this->tile(params, first_index());
      return true;
    }
  }
};

// The scheduler of a tuning row in a layout: the cluster scheduler where the row clusters in it
// (Sm90ClusterShape), else Sm90SchedulerFor's.
template <class Config, class Layout, bool kCausal,
          bool kClustered = Sm90ClusterShape<Config, Layout>::kClustered>
struct Sm90RowScheduler {
  using type = typename Sm90SchedulerFor<Config, Layout, kCausal>::type;
};
template <class Config, class Layout, bool kCausal>
struct Sm90RowScheduler<Config, Layout, kCausal, true> {
  using type = Sm90ClusterScheduler<Config, Layout, kCausal>;
};

// The cluster size a scheduler launches with (1: schedulers without kClusterSize).
template <class Scheduler, class = void>
struct Sm90SchedulerClusterSize {
  static constexpr int value = 1;
};
template <class Scheduler>
struct Sm90SchedulerClusterSize<Scheduler, std::void_t<decltype(Scheduler::kClusterSize)>> {
  static constexpr int value = Scheduler::kClusterSize;
};

// The bound of the producer's walk over tile indices: the launch's tiles, or for the cluster
// scheduler, whose next_index ends the walk itself (INT_MAX), a constant (no 64-bit bound live in
// the producer's registers).
template <class Scheduler, class Config, class Layout>
__device__ __forceinline__ int64_t sm90_tile_index_bound(const AttentionParams& params,
                                                         int kv_splits) {
  if constexpr (Sm90SchedulerClusterSize<Scheduler>::value > 1) {
    return INT_MAX;
  } else {
    return sm90_num_tiles<Config, Layout>(params, kv_splits);
  }
}

}  // namespace flashcore::detail
