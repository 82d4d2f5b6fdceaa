// The general Hopper kernel's mainloop policy: the producer's loads of a tile (producer.cuh) and
// a consumer's GEMMs and softmax over its KV blocks (consumer_overlap.cuh), for one element type
// (Config::Element), sequence layout and mask. The kernel (kernel.cuh) composes it with an
// epilogue and a scheduler; a consumer hands its accumulators to the epilogue at the end of each
// tile (consume<kComputes, Epilogue>), so O never leaves the registers of the function that
// computed it.
#pragma once

#include <cuda.h>

#include <type_traits>

#include "common/params.h"
#include "cuda/common/mask.cuh"
#include "cuda/sm90/cluster.cuh"
#include "cuda/sm90/consumer_overlap.cuh"
#include "cuda/sm90/pipeline.cuh"
#include "cuda/sm90/producer.cuh"
#include "cuda/sm90/smem_layout.cuh"
#include "cuda/sm90/softmax.cuh"

namespace flashcore::detail {

template <class Config_, class Layout_, bool kCausal_>
struct Sm90Mainloop {
  using Config = Config_;
  using Layout = Layout_;
  static constexpr bool kCausal = kCausal_;
  static constexpr DType kDType = Config::kDType;
  using Turns = std::conditional_t<kSm90TakesTurns<Config, Layout>,
                                   PingPongTurns<Config::kConsumerWarpgroups,
                                                 kSm90FirstTurn<Config, Layout>>,
                                   NoTurns>;

  // The KV blocks `tile`'s rows visit (packed: of those, the tile's split).
  __device__ __forceinline__ static KvTileRange kv_tiles(const MaskPolicy<kCausal>& mask,
                                                         const Sm90Tile& tile, int group_shift,
                                                         const Sm90KvSplit& kv_split) {
    return sm90_kv_tiles<Config>(mask, tile, group_shift, kv_split);
  }

  // KV blocks at the end of the tile's range that no row of `consumer` sees (passed without
  // GEMMs where the row's switch says so), and whether the consumer computes at all: a consumer
  // with no query row, or whose rows see no key, only keeps the tile's protocol.
  __device__ __forceinline__ static int dead_blocks(const MaskPolicy<kCausal>& mask,
                                                    const Sm90Tile& tile, int consumer,
                                                    int group_shift, const KvTileRange& kv_tiles) {
    if constexpr (!Config::kSkipsDeadBlocks) return 0;
    return sm90_dead_blocks<Config>(mask, tile, consumer, group_shift, kv_tiles);
  }
  __device__ __forceinline__ static bool computes(const AttentionParams& params,
                                                  const Sm90Tile& tile, int slab_row_begin,
                                                  int group_shift, const KvTileRange& kv_tiles,
                                                  int dead_blocks) {
    const int rows = sm90_tile_query_rows<Layout>(params, tile, group_shift);
    const bool sees_keys = dead_blocks == 0 || dead_blocks < kv_tiles.count();
    // Clustered, always: with an odd m-block count a cluster's second CTA has no row at all.
    constexpr bool kSkipsRowless =
        Config::kSkipsRowlessConsumers || Sm90ClusterShape<Config, Layout>::kClustered;
    return (!kSkipsRowless || sm90_slab_has_rows<Config>(slab_row_begin, rows)) && sees_keys;
  }

  // Producer: every load of one tile (by producer lane `lane`), and the claim and decode of the
  // next tile (claim_next, decode_next) on the way (producer.cuh).
  template <class Scheduler, class ClaimNext, class DecodeNext>
  __device__ __forceinline__ static void load(const Sm90SmemLayout<Config>& smem,
                                              const Sm90TensorMaps& maps,
                                              const AttentionParams& params,
                                              const Scheduler& scheduler, const Sm90Tile& tile,
                                              const KvTileRange& kv_tiles, int group_shift,
                                              Sm90TileLoopState<Config::kStages>& state,
                                              int lane, ClaimNext&& claim_next,
                                              DecodeNext&& decode_next) {
    sm90_produce<Config, Layout>(smem, maps, params, scheduler, tile, kv_tiles, group_shift,
                                 state, lane, claim_next, decode_next);
  }

  // Consumer: one tile, computed (kComputes) or only its protocol kept, then stored by Epilogue.
  template <bool kComputes, class Epilogue>
  __device__ __forceinline__ static void consume(const Sm90SmemLayout<Config>& smem,
                                                 const CUtensorMap* map_o,
                                                 const AttentionParams& params,
                                                 const Sm90KvSplit& kv_split,
                                                 const Sm90Tile& tile, const KvTileRange& kv_tiles,
                                                 int dead_blocks, int slab_row_begin,
                                                 int consumer, int thread_in_warpgroup,
                                                 Sm90TileLoopState<Config::kStages>& state,
                                                 const Sm90QRelease& release, const Turns& turns) {
    sm90_consume_tile<kComputes, Epilogue, kDType, Config, Layout, kCausal>(
        smem, map_o, params, kv_split, tile, kv_tiles, dead_blocks, slab_row_begin, consumer,
        thread_in_warpgroup, state, release, turns);
  }
};

}  // namespace flashcore::detail
