// Host launcher of the Hopper kernel: picks the tuning row for this call's head_dim, mask and
// seqlen_q, and the waves of its tiles (or the packed GQA kernel for short queries), builds the
// four tensor maps from the sequence layout, raises the kernel's dynamic shared-memory limit
// once, and launches on params.stream as many CTAs as the row's scheduler asks for (zeroing the
// caller's tile counters first when it claims tiles). Packed calls launch as programmatic
// dependents of the kernel before them (launch_dependent.h); those with too few tiles split
// their keys and launch the combine kernel after, and those of at most 64 rows a tile run the
// decode kernel (decode_kernel.cuh) where decode_dispatch.h says. Throws Error for anything it
// cannot run, e.g. strides a tensor map cannot describe (auto selection already sends those
// calls to sm80).
#pragma once

#include <cuda_runtime.h>

#include <atomic>
#include <climits>
#include <cstdint>
#include <string>
#include <type_traits>

#include "common/params.h"
#include "cuda/check.h"
#include "cuda/common/smem_attribute.cuh"
#include "cuda/sm90/cluster.cuh"
#include "cuda/sm90/cluster_scheduler.cuh"
#include "cuda/sm90/decode_dispatch.h"
#include "cuda/sm90/decode_kernel.cuh"
#include "cuda/sm90/kernel.cuh"
#include "cuda/sm90/launch_cluster.h"
#include "cuda/sm90/launch_dependent.h"
#include "cuda/sm90/pipeline.cuh"
#include "cuda/sm90/scheduler.cuh"
#include "cuda/sm90/sequence_layout.h"
#include "cuda/sm90/split_combine.cuh"
#include "cuda/sm90/tensor_map.h"
#include "cuda/sm90/tile_config.h"
#include "cuda/sm90/wave_peer.h"

namespace flashcore::detail {

// Tile counters of one persistent launch: the caller's workspace when params carries one, else the
// next slot of the kernel's static pool (round-robin; see Sm90TileCounters for the limit).
inline Sm90TileCounters sm90_tile_counters(const AttentionParams& params) {
  static std::atomic<uint32_t> next_pool_slot{0};
  Sm90TileCounters counters;
  counters.workspace = params.tile_counters;
  if (counters.workspace == nullptr) {
    counters.pool_slot = next_pool_slot.fetch_add(1, std::memory_order_relaxed) %
                         static_cast<uint32_t>(kSm90TileCounterPoolSlots);
  }
  return counters;
}

// Split-KV of a packed call (sm90_kv_split_plan), only with the caller's workspace: the
// partial results live there, behind the tile counters. attention_workspace_bytes sized it with
// the same plan, and validation checked the size.
template <class Config>
Sm90KvSplit sm90_kv_split_of(const AttentionParams& params, int num_sms) {
  Sm90KvSplit kv_split;
  if (!Config::kPacksGroups || params.tile_counters == nullptr) return kv_split;
  const Sm90KvSplitPlan plan =
      sm90_kv_split_plan(params.batch, params.heads_q, params.heads_kv, params.seqlen_q,
                         params.seqlen_k, params.head_dim, params.causal, num_sms);
  if (plan.splits <= 1) return kv_split;
  // attention_workspace_bytes sized the caller's workspace for this plan; a smaller one (a
  // layout it was not sized for) runs unsplit rather than writing past it.
  const int64_t needed = sm90_kv_split_workspace_bytes(plan, params.batch, params.heads_q,
                                                       params.seqlen_q, params.head_dim);
  if (int64_t(params.workspace_bytes) < needed) return kv_split;
  kv_split.splits = plan.splits;
  kv_split.blocks_per_split = plan.blocks_per_split;
  kv_split.o_partial = reinterpret_cast<float*>(reinterpret_cast<uint8_t*>(params.tile_counters) +
                                                kSm90SplitWorkspaceOffset);
  kv_split.lse_partial = kv_split.o_partial + kv_split.row(params, plan.splits, 0, 0, 0) *
                                                  params.head_dim;
  return kv_split;
}

// The decode kernel (decode_kernel.cuh) of a packed call: one CTA per tile and split, as a
// programmatic dependent of the kernel before it.
template <class Config, class Layout, bool kCausal, bool kWritesSplits>
void launch_sm90_decode(const AttentionParams& params, const CUtensorMap& map_q,
                        const CUtensorMap& map_k, const CUtensorMap& map_v,
                        const Sm90KvSplit& kv_split, int64_t num_tiles) {
  constexpr auto kernel = sm90_decode_kernel<Config, Layout, kCausal, kWritesSplits>;
  constexpr int kSmemBytes = Sm90DecodeSmem<Config>::kBytes;
  raise_dynamic_smem_limit_once<kernel>(kSmemBytes, params.device_index);
  FLASHCORE_CUDA_CHECK(sm90_launch_dependent(kernel, static_cast<unsigned int>(num_tiles),
                                             Sm90DecodeRoles<Layout>::kThreads, kSmemBytes,
                                             params.stream, map_q, map_k, map_v, params,
                                             kv_split));
}

// SMs a launch may fill: the validated call's (the device's less FLASHCORE_SM_MARGIN), else the
// current device's (dev/ sweeps that fill AttentionParams themselves).
inline int sm90_launch_sms(const AttentionParams& params) {
  if (params.num_sms > 0) return params.num_sms;
  int device = 0, num_sms = 0;
  FLASHCORE_CUDA_CHECK(cudaGetDevice(&device));
  FLASHCORE_CUDA_CHECK(cudaDeviceGetAttribute(&num_sms, cudaDevAttrMultiProcessorCount, device));
  return num_sms;
}

// The kernel of an explicit tile configuration (tuning sweeps in dev/ pass rows of their own).
template <class Config, bool kCausal, class Layout = Sm90DenseLayout,
          class Scheduler = typename Sm90RowScheduler<Config, Layout, kCausal>::type>
void run_sm90_forward_configured(const AttentionParams& params) {
  constexpr int kHeadDim = Config::kHeadDim;
  constexpr DType kDType = Config::kDType;
  if (sm90_kernel_head_dim(params.head_dim, Config::kElementBytes) != kHeadDim ||
      params.head_dim > Config::kComputedHeadDim) {
    throw Error("sm90 backend: kernel for head_dim " + std::to_string(kHeadDim) +
                " (computing " + std::to_string(Config::kComputedHeadDim) +
                " columns) called with head_dim " + std::to_string(params.head_dim));
  }
  if (Config::kPacksGroups &&
      !sm90_packs_query_groups(params.heads_q, params.heads_kv, params.seqlen_q)) {
    throw Error("sm90 backend: packed GQA kernel called with heads_q " +
                std::to_string(params.heads_q) + ", heads_kv " + std::to_string(params.heads_kv) +
                ", seqlen_q " + std::to_string(params.seqlen_q) +
                " (needs a power-of-two group of at most 64 and seqlen_q <= 64)");
  }
  // The tensor maps carry the call's head_dim, the boxes the kernel's: a padded head_dim's
  // extra columns are zero-filled on the Q, K and V loads and dropped by the O store.
  const int head_dim = params.head_dim;
  if (params.batch == 0 || params.seqlen_q == 0 || params.heads_q == 0) return;
  const int num_sms = sm90_launch_sms(params);
  Sm90KvSplit kv_split = sm90_kv_split_of<Config>(params, num_sms);
  const int64_t num_tiles = sm90_num_tiles<Config, Layout>(params, kv_split.splits);
  if (num_tiles > INT_MAX) {
    throw Error("sm90 backend: " + std::to_string(num_tiles) +
                " output tiles (batch x heads_q x seqlen_q / BLOCK_M) exceed the grid limit " +
                std::to_string(INT_MAX));
  }

  // Q and O: one 64-row slab per box, of one head, or packed of every query head of a KV group.
  // O is of the output type (fp8 inputs: fp16 or bf16).
  const auto q_or_o_map = [&](const BshdTensor& tensor, DType dtype) {
    if constexpr (Config::kPacksGroups) {
      return make_group_packed_tensor_map(tensor, dtype, params.group_size(),
                                          Config::kRowsPerConsumer);
    } else {
      return make_bshd_tensor_map(tensor, dtype, Config::kRowsPerConsumer);
    }
  };
  const CUtensorMap map_q = q_or_o_map(Layout::q_tensor(params), kDType);
  BshdTensor k = Layout::k_tensor(params);
  BshdTensor v = Layout::v_tensor(params);
  if (Layout::max_seqlen_k(params) == 0) {
    // No KV tile is ever loaded (every row gets out = 0, lse = -inf), but the maps must still
    // encode: point them at one row of q, which exists.
    k = v = BshdTensor{"k/v (empty, aliased to q)", params.q, head_dim, 1, 1, 1,
                       head_dim, head_dim, head_dim};
  }
  // A paged cache's boxes are page runs (Sm90ServingLayout::for_each_kv_box); a clustered row's
  // CTAs load a share of each block each (cluster.cuh).
  constexpr int kClusterSize = Sm90SchedulerClusterSize<Scheduler>::value;
  const int kv_box_rows = Layout::template kv_box_rows<Config::kBlockN>(params) / kClusterSize;
  const CUtensorMap map_k = make_bshd_tensor_map(k, kDType, kv_box_rows);
  const CUtensorMap map_v = make_bshd_tensor_map(v, kDType, kv_box_rows);
  // Built for every call, the decode kernel's too: its encode checks out's pointer and strides
  // (16-byte multiples), which that kernel's paired 16-bit stores rely on.
  const CUtensorMap map_o = q_or_o_map(Layout::o_tensor(params), Config::kOutDType);

  const int64_t grid = Scheduler::grid_size(num_tiles, num_sms);
  // The combine launches at the attention kernel's start only onto SMs that grid leaves idle
  // (crowded onto a few idle SMs it ran slower than launched late: docs/kernels.md).
  if (kv_split.splits > 1) {
    kv_split.early_dependents = grid + sm90_combine_blocks(params) <= num_sms;
  }
  // The general kernel (kernel.cuh), after zeroing the tile counters of a launch that claims
  // tiles in the caller's workspace. Packed launches, and those claiming launches, are
  // programmatic dependents of the kernel before them (launch_dependent.h), whose end then
  // overlaps their prologue.
  const auto launch_forward_kernel = [&] {
    using Mainloop = Sm90Mainloop<Config, Layout, kCausal>;
    using Epilogue = Sm90Epilogue<Config::kOutDType, Config, Layout>;
    constexpr auto kernel = sm90_forward_kernel<Layout, Mainloop, Epilogue, Scheduler>;
    raise_dynamic_smem_limit_once<kernel>(Config::kSmemBytes, params.device_index);
    Sm90TileCounters tile_counters;
    bool after_zeroing = false;
    if constexpr (Scheduler::kClaimsTiles) {
      tile_counters = sm90_tile_counters(params);
      if (tile_counters.workspace != nullptr) {  // the caller's memory: any content, zero it
        sm90_zero_tile_counters<kTileCounterCount>
            <<<1, kSm90ZeroCountersThreads, 0, params.stream>>>(tile_counters.workspace);
        FLASHCORE_CHECK_LAUNCH();
        after_zeroing = true;
      }
    }
    if constexpr (kClusterSize > 1) {
      // One cluster per cluster tile, persistent rows no more than fit the device at once.
      int64_t clusters = Scheduler::cluster_tiles_of(params);
      if constexpr (Scheduler::kPersistent) {
        const int fit = sm90_max_active_clusters<kernel>(kClusterSize, Config::kThreads,
                                                         Config::kSmemBytes, params.device_index);
        clusters = clusters < num_sms / kClusterSize ? clusters : num_sms / kClusterSize;
        clusters = fit > 0 && fit < clusters ? fit : clusters;
        clusters = clusters > 0 ? clusters : 1;
      }
      FLASHCORE_CUDA_CHECK(sm90_launch_cluster(
          kernel, static_cast<unsigned int>(clusters * kClusterSize), Config::kThreads,
          Config::kSmemBytes, params.stream, kClusterSize, map_q, map_k, map_v, map_o, params,
          tile_counters, kv_split));
    } else if (Config::kPacksGroups || after_zeroing) {
      FLASHCORE_CUDA_CHECK(sm90_launch_dependent(kernel, static_cast<unsigned int>(grid),
                                                 Config::kThreads, Config::kSmemBytes,
                                                 params.stream, map_q, map_k, map_v, map_o,
                                                 params, tile_counters, kv_split));
    } else {
      kernel<<<static_cast<unsigned int>(grid), Config::kThreads, Config::kSmemBytes,
               params.stream>>>(map_q, map_k, map_v, map_o, params, tile_counters, kv_split);
      FLASHCORE_CHECK_LAUNCH();
    }
  };
  if constexpr (Config::kPacksGroups) {
    // The decode kernel claims no tiles, so the calls it runs zero no tile counters.
    using DecodeLayout = Sm90DecodeLayoutOf<Layout>;
    if (sm90_packed_call_runs_decode_kernel<Layout, Config::kHeadDim, Config::kBlockN,
                                            Config::kRowsPerConsumer>(params, num_tiles,
                                                                      num_sms)) {
      if (kv_split.splits > 1) {
        launch_sm90_decode<Config, DecodeLayout, kCausal, true>(params, map_q, map_k, map_v,
                                                                kv_split, num_tiles);
      } else {
        launch_sm90_decode<Config, DecodeLayout, kCausal, false>(params, map_q, map_k, map_v,
                                                                 kv_split, num_tiles);
      }
    } else {
      launch_forward_kernel();
    }
  } else {
    launch_forward_kernel();
  }
  if constexpr (Config::kPacksGroups) {  // only packed calls split their keys
    if (kv_split.splits > 1) launch_sm90_combine_kv_splits<kDType>(params, kv_split);
  }
}

// Row kRow of the tuning table for (kHeadDim, kCausal), or its wave peer where its tiles end
// sooner (wave_peer.h). Each row is one kernel instantiation per layout in the instance's
// translation unit (a wave peer is an earlier row: no kernel of its own).
// kOutDType: out's dtype (the input dtype, except for fp8 inputs); kComputedHeadDim: the
// head_dim columns the GEMMs compute (Sm90TileConfig; 0: all).
template <DType kDType, int kHeadDim, bool kCausal, class Layout, int kRow, DType kOutDType,
          int kComputedHeadDim>
void run_sm90_forward_row(const AttentionParams& params) {
  using Config = Sm90TableConfig<kHeadDim, kCausal, kRow, kDType, /*kPacksGroups=*/false,
                                 kOutDType, kComputedHeadDim>;
  // Dense calls only: a ragged batch's tile count (every sequence at the longest's length) says
  // little about its waves.
  constexpr int kWavePeer = Config::kRow.wave_peer;
  if constexpr (kWavePeer >= 0 && kSm90IsDenseLayout<Layout>) {
    using Peer = Sm90TableConfig<kHeadDim, kCausal, kWavePeer, kDType, /*kPacksGroups=*/false,
                                 kOutDType, kComputedHeadDim>;
    if (sm90_wave_peers_enabled() &&
        sm90_wave_peer_chosen(kCausal, params.seqlen_q, params.seqlen_k,
                              sm90_num_tiles<Config, Layout>(params), Config::kBlockM,
                              sm90_num_tiles<Peer, Layout>(params), Peer::kBlockM,
                              Config::kRow.wave_peer_cost_pct, sm90_launch_sms(params))) {
      run_sm90_forward_configured<Peer, kCausal, Layout>(params);
      return;
    }
  }
  if constexpr (std::is_same_v<Layout, Sm90ServingLayout>) {
    // Calls whose K/V blocks all come in TMA boxes: the kernels without the gather.
    if (!Layout::template needs_gather<Config::kBlockN>(params)) {
      run_sm90_forward_configured<Config, kCausal, Sm90ServingTmaLayout>(params);
      return;
    }
  }
  run_sm90_forward_configured<Config, kCausal, Layout>(params);
}

// The first row from kRow on whose bucket holds `bucket_length` (sm90_bucket_row's test),
// passing the dense-only rows in the serving layouts (their kernels there would repeat the next
// row's).
template <DType kDType, int kHeadDim, bool kCausal, class Layout, int kRow,
          DType kOutDType = kDType, int kComputedHeadDim = 0>
void run_sm90_forward_from_row(const AttentionParams& params, int64_t bucket_length) {
  constexpr int kBytes = Sm90ElementTraits<kDType>::kBytes;
  constexpr Sm90TuningRow kBucket = sm90_tuning_row(kHeadDim, kCausal, kRow, kBytes);
  constexpr bool kPassed = kBucket.dense_only && !kSm90IsDenseLayout<Layout>;
  // The last row holds every length and is never dense-only (sm90_rows_ordered).
  if constexpr (kRow + 1 < sm90_row_count(kHeadDim, kCausal, kBytes)) {
    if (kPassed || bucket_length > kBucket.max_seqlen_q) {
      run_sm90_forward_from_row<kDType, kHeadDim, kCausal, Layout, kRow + 1, kOutDType,
                                kComputedHeadDim>(params, bucket_length);
      return;
    }
  }
  if constexpr (!kPassed) {
    run_sm90_forward_row<kDType, kHeadDim, kCausal, Layout, kRow, kOutDType, kComputedHeadDim>(
        params);
  }
}

// The tile table's row for this call: its bucket length (sm90_bucket_length of the longest
// sequences), computed once, picks it.
template <DType kDType, int kHeadDim, bool kCausal, class Layout, DType kOutDType = kDType,
          int kComputedHeadDim = 0>
void run_sm90_forward_bucketed(const AttentionParams& params) {
  constexpr int kBytes = Sm90ElementTraits<kDType>::kBytes;
  run_sm90_forward_from_row<kDType, kHeadDim, kCausal, Layout, 0, kOutDType, kComputedHeadDim>(
      params, sm90_bucket_length(params.seqlen_q, params.seqlen_k, kCausal, kBytes));
}

// Packed GQA tiles (sm90_packs_query_groups): the row sm90_packed_row names, its kernel built
// with Config::kPacksGroups.
template <DType kDType, int kHeadDim, bool kCausal, class Layout>
void run_sm90_forward_packed(const AttentionParams& params) {
  using Config = Sm90TableConfig<kHeadDim, kCausal, kSm90PackedRowIndex, kDType,
                                 /*kPacksGroups=*/true>;
  run_sm90_forward_configured<Config, kCausal, Layout>(params);
}

template <DType kDType, int kKernelHeadDim, bool kCausal, class Layout>
void run_sm90_forward_in_layout(const AttentionParams& params) {
  if (sm90_packs_query_groups(params.heads_q, params.heads_kv, params.seqlen_q)) {
    run_sm90_forward_packed<kDType, kKernelHeadDim, kCausal, Layout>(params);
    return;
  }
  run_sm90_forward_bucketed<kDType, kKernelHeadDim, kCausal, Layout>(params);
}

// The library's entry: packed GQA tiles where they pay, else the tile table's row for this
// call's length bucket, in the dense layout or the serving one (varlen, kv caches). A head_dim
// that is not a multiple of 64 (96) runs the next one's kernels (sm90_kernel_head_dim).
// FP8 (e4m3) inputs: unpacked tiles (packed GQA tiles are 16-bit only), in the dense layout or
// the serving one, one kernel per output type (fp16, bf16).
// A padded head_dim (64, 96 on d128 tiles) computes its own columns only
// (Sm90TileConfig::kComputedHeadDim): kernels of its own; 64 also has rows of its own.
template <int kHeadDim, int kKernelHeadDim, bool kCausal, class Layout>
void run_sm90_forward_fp8(const AttentionParams& params) {
  constexpr DType kFp8 = DType::kFloat8E4M3;
  using Element = Sm90ElementTraits<kFp8>;
  constexpr int kComputedHeadDim = sm90_round_up(kHeadDim, Element::kWgmmaK);
  // The call's head_dim's own rows where the table has them (d64), else the kernel's.
  constexpr int kRowHeadDim =
      sm90_row_count(kHeadDim, kCausal, Element::kBytes) > 0 ? kHeadDim : kKernelHeadDim;
  if (params.output_dtype() == DType::kFloat16) {
    run_sm90_forward_bucketed<kFp8, kRowHeadDim, kCausal, Layout, DType::kFloat16,
                              kComputedHeadDim>(params);
  } else if (params.output_dtype() == DType::kBFloat16) {
    run_sm90_forward_bucketed<kFp8, kRowHeadDim, kCausal, Layout, DType::kBFloat16,
                              kComputedHeadDim>(params);
  } else {
    throw Error("sm90 backend: fp8_e4m3 inputs write out in fp16 or bf16, got out dtype " +
                std::to_string(static_cast<int>(params.output_dtype())));
  }
}

template <DType kDType, int kHeadDim, bool kCausal, class Layout>
void run_sm90_forward_with_layout(const AttentionParams& params) {
  constexpr int kKernelHeadDim =
      sm90_kernel_head_dim(kHeadDim, Sm90ElementTraits<kDType>::kBytes);
  if constexpr (kDType == DType::kFloat8E4M3) {
    run_sm90_forward_fp8<kHeadDim, kKernelHeadDim, kCausal, Layout>(params);
  } else {
    run_sm90_forward_in_layout<kDType, kKernelHeadDim, kCausal, Layout>(params);
  }
}

template <DType kDType, int kHeadDim, bool kCausal>
void run_sm90_forward(const AttentionParams& params) {
  if (params.is_dense()) {
    run_sm90_forward_with_layout<kDType, kHeadDim, kCausal, Sm90DenseLayout>(params);
  } else {
    run_sm90_forward_with_layout<kDType, kHeadDim, kCausal, Sm90ServingLayout>(params);
  }
}

}  // namespace flashcore::detail
