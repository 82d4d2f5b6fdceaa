// A consumer warpgroup of the Hopper kernel: intra-warpgroup overlap plus ping-pong between the
// consumer warpgroups.
//
// Overlap: the QK^T of tile t+1 and the P V of tile t are issued together, in one turn.
//
//   S0 = Q K0^T; softmax(S0) -> P0
//   for t = 1 .. n-1:   issue S_t = Q K_t^T, issue O += P_{t-1} V_{t-1}
//                       wait S_t; softmax(S_t)
//                       (K_t released once S_t is done)
//                       wait P V; release V_{t-1}; O *= correction_t; P_t = S_t
//   O += P_{n-1} V_{n-1}; release
// ptxas places the P V wait (WARPGROUP.DEPBAR, which has no register inputs) itself: anywhere
// in its basic block before the first use of O or P. The steps are written so that a step's
// softmax is one basic block (Sm90StepMask below); ptxas then issues the wait after the row
// maxima and the first exponentials, which thus run beside the consumer's own P V, and the rest
// of the softmax beside the other consumer's GEMMs. With Config::kPvWaitAfterSoftmax a basic
// block ends after the softmax (basic_block_end), so the wait follows every exponential. With
// Config::kStepPairs the unmasked steps run two to a loop iteration from ring stage 0, so their
// stages are constants. With Config::kRescaleUnderQk the O *= correction moves to just before
// the P V that adds to O (between the two issues), so the multiplies run while S = Q K^T is on
// the tensor cores.
//
// Ping-pong: a warpgroup issues its GEMMs only on its turn, so while one warpgroup's GEMMs run the
// other does its softmax. Turns go round strictly through one named barrier of 256 threads per
// consumer (consumer c syncs on its turn barrier and, right after issuing, arrives on the next
// one's). The rotation lasts the CTA's life, across tiles: every consumer takes n + 1 turns per
// tile (same n), so the rotation is in step at each tile boundary, and the first turn's consumer
// (kSm90FirstTurn) issues the next tile's first S = Q K^T as soon as the consumer before it has
// issued its last P V, under the other consumers' epilogues. The kernel calls start() and finish()
// once (see PingPongTurns). Rows with Sm90Switch::kNoPingPong take no turns (NoTurns): the FP8
// rows, as in FA3's FP8 kernel that transposes V in shared memory (measured in docs/kernels.md, run
// 120). With Config::kLeaderWaitsKv the consumer of each step's first turn alone waits for the
// step's K and V, and the turns order the others after it (FA3's step; at step_once below).
//
// A consumer with no query row in the tile, or whose rows see no key, runs the same function
// with kComputes = false: every barrier wait and arrival and every turn in the same order, so the
// producer and the other consumers see one protocol, but no GEMM and no softmax. One function, so
// the two can never drift apart (a mismatch deadlocks the CTA); two instantiations, so the
// computing loop carries no branch of the passing one.
//
// `state` carries the ring position and the Q phase across tiles; `release` says when the Q slab
// goes back to the producer (persistent schedulers).
#pragma once

#include <type_traits>

#include "cuda/common/mask.cuh"
#include "cuda/ptx/mbarrier.cuh"
#include "cuda/ptx/named_barrier.cuh"
#include "cuda/ptx/schedule.cuh"
#include "cuda/ptx/wgmma.cuh"
#include "cuda/sm90/cluster.cuh"
#include "cuda/sm90/consumer.cuh"
#include "cuda/sm90/kv_tail.cuh"
#include "cuda/sm90/named_barriers.h"
#include "cuda/sm90/paged_gather.cuh"
#include "cuda/sm90/pipeline.cuh"
#include "cuda/sm90/sequence_layout.h"
#include "cuda/sm90/smem_layout.cuh"
#include "cuda/sm90/softmax.cuh"
#include "cuda/sm90/trace.cuh"

namespace flashcore::detail {

// Each turn barrier has 256 threads: the owner's sync plus the previous consumer's arrival.
constexpr uint32_t kTurnBarrierThreads = 256;

// Whether one consumer, the leader, waits for every consumer's K and V in the KV steps
// (Config::kLeaderWaitsKv): in the dense layout's unpacked tiles, the ones timed. Packed tiles and
// the serving layouts keep every consumer's waits before its turn: their d256 kernels spilled with
// the switch (the serving causal steps inside the consumers), and a gathered block's proxy fence
// after the waits is each reading thread's own.
template <class Config, class Layout>
inline constexpr bool kSm90LeaderWaits =
    Config::kLeaderWaitsKv && !Config::kPacksGroups && kSm90IsDenseLayout<Layout>;

// Whether the consumers take ping-pong turns: the row's choice (Config::kPingPong), and on rows
// with Config::kTurnsWhereLeaderWaits only in the kernels where the leader waits.
template <class Config, class Layout>
inline constexpr bool kSm90TakesTurns =
    Config::kPingPong && (!Config::kTurnsWhereLeaderWaits || kSm90LeaderWaits<Config, Layout>);

// The consumer of each KV step's first turn, the leader where kSm90LeaderWaits. The leader must
// compute on every block another consumer computes on (a block it passes as dead it waits for only
// after its turn, sm90_pass_dead_blocks): consumer 0 where every consumer walks the same blocks,
// the last on rows that pass dead blocks, whose slab (the tile's last rows, which see the most keys
// under a causal mask) passes the fewest (sm90_dead_blocks). Consumer 0 elsewhere: with the last
// consumer first the d128 causal rows up to 2k, which pass none, ran 0.963-0.993x (run 312).
template <class Config, class Layout>
inline constexpr int kSm90FirstTurn =
    kSm90LeaderWaits<Config, Layout> && Config::kSkipsDeadBlocks ? Config::kConsumerWarpgroups - 1
                                                                 : 0;

// Turns go round 0, 1, .., kConsumers-1, 0, ..., consumer kFirst taking the first: each KV step
// is then a turn of every consumer, kFirst's first.
template <int kConsumers, int kFirst>
struct PingPongTurns {
  static_assert(kConsumers <= kSm90MaxConsumers, "one turn barrier per consumer");
  static_assert(kFirst >= 0 && kFirst < kConsumers, "the first turn is a consumer's");
  int consumer;
  __device__ __forceinline__ static uint32_t barrier(int owner) {
    return sm90_barrier_id(Sm90NamedBarrier::kTurnFirst, owner);
  }
  __device__ __forceinline__ void begin() const {
    named_barrier_sync(barrier(consumer), kTurnBarrierThreads);
  }
  __device__ __forceinline__ void end() const {
    named_barrier_arrive(barrier((consumer + 1) % kConsumers), kTurnBarrierThreads);
  }
  // Once per CTA, before its first tile: the consumer before kFirst hands it the first turn.
  __device__ __forceinline__ void start() const {
    if (consumer == (kFirst + kConsumers - 1) % kConsumers) {
      named_barrier_arrive(barrier(kFirst), kTurnBarrierThreads);
    }
  }
  // Once per CTA, after its last tile: kFirst takes the hand-over of the last turn, so every
  // barrier ends with as many arrivals as syncs.
  __device__ __forceinline__ void finish() const {
    if (consumer == kFirst) named_barrier_sync(barrier(kFirst), kTurnBarrierThreads);
  }
};

// Consumers that issue their GEMMs whenever their operands are ready (Sm90Switch::kNoPingPong):
// the turns of PingPongTurns, all free.
struct NoTurns {
  int consumer;
  __device__ __forceinline__ void begin() const {}
  __device__ __forceinline__ void end() const {}
  __device__ __forceinline__ void start() const {}
  __device__ __forceinline__ void finish() const {}
};

// The turns of the KV blocks that none of this consumer's rows see (sm90_dead_blocks), taken
// before its first S: one turn each with no GEMM, so the rotation keeps its n + 1 turns per tile,
// and K and V released once loaded (waiting for each load keeps every arrival in the phase it
// belongs to). The turn is handed on before those waits, so the next consumer's GEMMs never
// queue behind them.
template <class Config, class Layout, class Turns>
__device__ __forceinline__ void sm90_pass_dead_blocks(const Sm90SmemLayout<Config>& smem,
                                                      int dead_blocks,
                                                      RingPosition<Config::kStages>& ring,
                                                      const Turns& turns) {
  for (int block = 0; block < dead_blocks; ++block) {
    turns.begin();
    turns.end();
    mbarrier_wait_parity(smem.k_full(ring.stage), ring.phase);
    sm90_release_kv_stage<Config, Layout>(smem.k_empty(ring.stage));
    mbarrier_wait_parity(smem.pv_full(ring.stage), ring.phase);
    sm90_release_kv_stage<Config, Layout>(smem.v_empty(ring.stage));
    ring.advance();
  }
}

// Which steps of a consumer's KV loop (after the first) apply the mask. With one loop that
// tests each block (kTested), the mask is a branch between S and its P, where ptxas starts a
// basic block and puts the P V wait at its top: the whole softmax waits for the consumer's own
// P V. Two loops, the masked steps (kAll) then the others (kNone), keep the step one basic
// block, and ptxas issues the wait after the row maxima and the first exponentials (as in
// FA3's SASS): the softmax then needs less of the other consumer's GEMM time to hide in. Rows
// with Sm90Switch::kSoftmaxAfterPv keep the one loop (d256 16-bit, whose causal rows ran 2-3%
// slower split and non-causal rows no faster; docs/kernels.md, runs 132 and 140).
enum class Sm90StepMask { kNone, kAll, kTested };
constexpr std::integral_constant<Sm90StepMask, Sm90StepMask::kNone> kStepsUnmasked{};
constexpr std::integral_constant<Sm90StepMask, Sm90StepMask::kAll> kStepsMasked{};
constexpr std::integral_constant<Sm90StepMask, Sm90StepMask::kTested> kStepsTested{};

// One tile of consumer `consumer`: O and the row statistics of its rows (kComputes), or only the
// tile's protocol (see the top of this file) with O = 0; then the Epilogue stores O and hands the
// consumer's buffers back.
template <bool kComputes, class Epilogue, DType kDType, class Config, class Layout, bool kCausal,
          class Turns>
__device__ __forceinline__ void sm90_consume_tile(const Sm90SmemLayout<Config>& smem,
                                                  const CUtensorMap* map_o,
                                                  const AttentionParams& params,
                                                  const Sm90KvSplit& kv_split,
                                                  const Sm90Tile& tile,
                                                  const KvTileRange& kv_tiles, int dead_blocks,
                                                  int slab_row_begin, int consumer,
                                                  int thread_in_warpgroup,
                                                  Sm90TileLoopState<Config::kStages>& state,
                                                  const Sm90QRelease& release,
                                                  const Turns& turns) {
  using Math = Sm90ConsumerMath<kDType, Config>;
  const Sm90ThreadRows<Config, Layout, kCausal> rows(params, tile, consumer, thread_in_warpgroup);
  const uint32_t q_slab = smem_u32(smem.q_slab(consumer));
  const float scale_log2 = Math::scale_log2(params, tile);

  float o[Math::kOAccRegs];
#pragma unroll
  for (int i = 0; i < Math::kOAccRegs; ++i) o[i] = 0.0f;
  OnlineSoftmaxRows softmax;
  float s[Math::kSAccRegs];
  uint32_t p[Math::kPSteps][4];
  float correction[2];
  // Lazy rescaling (softmax.cuh), the first two tiles' max taken exactly.
  constexpr bool kLazy = Config::kLazyRescale;
  // Whether O needs this step's correction: lazily only if a row of this warp moved its max;
  // otherwise always, as the multiplies cost less than the vote.
  bool rescale = !kLazy;

  sm90_trace(Sm90Event::kTileBegin);
  mbarrier_wait_parity(smem.q_full(), state.q_phase);
  sm90_trace(Sm90Event::kQReady);
  RingPosition<Config::kStages>& ring = state.ring;
  sm90_pass_dead_blocks<Config, Layout>(smem, dead_blocks, ring, turns);
  const int num_tiles = kv_tiles.count() - dead_blocks;
  int first_masked = 0;
  if constexpr (kComputes) first_masked = sm90_warp_first_masked(rows, kv_tiles);
  // The caller's slab_row_begin where it decided that this consumer has no row (what it proved
  // about the slab then folds the epilogue's row checks).
  const int epilogue_row_begin = kComputes ? rows.slab_row_begin : slab_row_begin;
  Sm90RowTotals totals;  // read by the epilogue only where the row takes them early
  if (num_tiles == 0) release.after_last_qk();
  if (num_tiles > 0) {
    // Prologue: S of the first tile alone.
    mbarrier_wait_parity(smem.k_full(ring.stage), ring.phase);
    sm90_kv_block_landed<Config, Layout>(params);
    sm90_trace(Sm90Event::kKReady);
    turns.begin();
    sm90_trace(Sm90Event::kTurn);
    if constexpr (kComputes) Math::issue_qk(s, q_slab, smem_u32(smem.k_tile(ring.stage)));
    turns.end();
    sm90_trace(Sm90Event::kIssued);
    if constexpr (kComputes) {
      wgmma_wait_group<0>();
      fence_accumulators(s);
    }
    sm90_trace(Sm90Event::kSReady);
    sm90_release_kv_stage<Config, Layout>(smem.k_empty(ring.stage));
    if (num_tiles == 1) release.after_last_qk();
    int n_block = kv_tiles.tile_at(dead_blocks);
    if constexpr (kComputes) {
      if (n_block >= first_masked) {
        mask_columns(s, n_block * Config::kBlockN + rows.lane_col, rows.col_limit[0],
                     rows.col_limit[1]);
      }
      // O is still 0: scaling it by this is a no-op.
      sm90_softmax_update<Config>(softmax, s, scale_log2, correction);
      accumulator_to_a_fragments<kDType>(s, p);
    }
    sm90_trace(Sm90Event::kSoftmaxDone);
    // The first block this consumer multiplies by V is the only one that can end past the keys.
    // Its rows past them are zeroed here, once it lands, rather than in the step that takes its
    // P V: a branch there would split every step's basic block, and the steps run as one block
    // in the dense kernels. (FP8: the transposer zeroes those rows before it writes V^T,
    // v_transpose.cuh.)
    if constexpr (kComputes && !Config::kTransposesV) {
      const int garbage_row = sm90_v_garbage_row<Config, Layout>(params, tile, n_block);
      if (garbage_row < Config::kBlockN) {
        mbarrier_wait_parity(smem.pv_full(ring.stage), ring.phase);
        sm90_zero_v_rows<Config>(smem.v_tile(ring.stage), garbage_row, thread_in_warpgroup,
                                 sm90_barrier_id(Sm90NamedBarrier::kEpilogueFirst, consumer));
      }
    }

    [[maybe_unused]] const bool never = Config::kPvWaitAfterSoftmax && opaque_false();
    // kSm90LeaderWaits (FA3's ping-pong step): the consumer of a step's first turn (the leader,
    // kSm90FirstTurn) alone waits, for the step's K before its turn and for the previous block's V
    // in its turn after the S = Q K^T issue (the producer loads V_{j-1} after K_j). The others
    // begin the step's turn after the leader's turn of that step has issued both GEMMs (every
    // consumer takes one turn per KV block, its turns of dead blocks included): the mbarrier's
    // phase makes the TMA's bytes visible to the leader, the turn barrier orders the other
    // consumers' wgmma reads after its waits.
    constexpr bool kLeaderWaits = kSm90LeaderWaits<Config, Layout>;
    const bool leads = consumer == kSm90FirstTurn<Config, Layout>;
    // One step of the loop, its mask as `mask_steps` says.
    const auto step_once = [&](int step, auto mask_steps) {
      [[maybe_unused]] constexpr Sm90StepMask kMask = decltype(mask_steps)::value;
      const RingPosition<Config::kStages> previous = ring;
      ring.advance();
      --n_block;
      if (!kLeaderWaits || leads) {
        mbarrier_wait_parity(smem.k_full(ring.stage), ring.phase);
        sm90_trace(Sm90Event::kKReady);
      }
      if constexpr (!kLeaderWaits) {
        mbarrier_wait_parity(smem.pv_full(previous.stage), previous.phase);
        sm90_kv_block_landed<Config, Layout>(params);
        sm90_trace(Sm90Event::kVReady);
      }
      turns.begin();
      sm90_trace(Sm90Event::kTurn);
      if constexpr (kComputes) {
        Math::issue_qk(s, q_slab, smem_u32(smem.k_tile(ring.stage)));
        if (Config::kRescaleUnderQk && rescale) scale_rows(o, correction);  // under S = Q K^T
      }
      if (kLeaderWaits && leads) {
        mbarrier_wait_parity(smem.pv_full(previous.stage), previous.phase);
        sm90_trace(Sm90Event::kVReady);
      }
      if constexpr (kComputes) Math::issue_pv(o, p, smem_u32(smem.pv_tile(previous.stage)));
      turns.end();
      sm90_trace(Sm90Event::kIssued);

      if constexpr (kComputes) {
        wgmma_wait_group<1>();  // S done; P V may still run
        fence_accumulators(s);
      }
      sm90_trace(Sm90Event::kSReady);
      sm90_release_kv_stage<Config, Layout>(smem.k_empty(ring.stage));
      if (step == num_tiles - 1) release.after_last_qk();
      if constexpr (kComputes) {
        if (kMask == Sm90StepMask::kAll ||
            (kMask == Sm90StepMask::kTested && n_block >= first_masked)) {
          mask_columns(s, n_block * Config::kBlockN + rows.lane_col, rows.col_limit[0],
                       rows.col_limit[1]);
        }
        const float allowance =
            (!kLazy || step == 1) ? 0.0f : Config::Element::kStaleMaxLog2;
        const bool moved =
            sm90_softmax_update<Config>(softmax, s, scale_log2, correction, allowance);
        if (kLazy) rescale = __any_sync(0xffffffff, moved);
        sm90_trace(Sm90Event::kSoftmaxDone);
        // Both row sums take every exponential of the step.
        if constexpr (Config::kPvWaitAfterSoftmax)
          basic_block_end(never, softmax.row_sum[0] + softmax.row_sum[1]);
        wgmma_wait_group<0>();  // P V done: its stage and the P registers are free
        fence_accumulators(o);
        sm90_trace(Sm90Event::kPvDone);
      }
      sm90_release_kv_stage<Config, Layout>(smem.v_empty(previous.stage));
      if constexpr (kComputes) {
        if (!Config::kRescaleUnderQk && rescale) scale_rows(o, correction);
        accumulator_to_a_fragments<kDType>(s, p);
      }
    };
    if constexpr (Config::kSoftmaxAfterPv) {
      for (int step = 1; step < num_tiles; ++step) step_once(step, kStepsTested);
    } else {
      // The masked steps come first (the blocks run last to first): those whose block lies at
      // or past the tile's first_masked. Not the warp's own (kWarpMaskStart): every warp of the
      // warpgroup must run the same loop, since its wgmma instructions are collective; the mask
      // of a block a warp sees whole changes nothing.
      const int masked_steps = kv_tiles.tile_at(dead_blocks) - kv_tiles.first_masked + 1;
      const int masked_end = masked_steps < num_tiles ? masked_steps : num_tiles;
      int step = 1;
      for (; step < masked_end; ++step) step_once(step, kStepsMasked);
      if constexpr (Config::kStepPairs) {
        // Pairs start at ring stage 0, so both steps' stages are constants; a step alone first
        // takes the ring there, and one after the pairs ends an odd count.
        if (step < num_tiles && ring.stage != 0) step_once(step++, kStepsUnmasked);
        for (; step + 1 < num_tiles; step += 2) {
          ring.stage = 0;  // what it holds: two advances from 0 come back to 0
          step_once(step, kStepsUnmasked);
          step_once(step + 1, kStepsUnmasked);
        }
        if (step < num_tiles) step_once(step, kStepsUnmasked);
      } else {
        for (; step < num_tiles; ++step) step_once(step, kStepsUnmasked);
      }
    }

    // Epilogue of the loop: P V of the last tile.
    mbarrier_wait_parity(smem.pv_full(ring.stage), ring.phase);
    sm90_kv_block_landed<Config, Layout>(params);
    sm90_trace(Sm90Event::kVReady);
    turns.begin();
    sm90_trace(Sm90Event::kTurn);
    if constexpr (kComputes) {
      if (Config::kRescaleUnderQk && rescale) scale_rows(o, correction);
      Math::issue_pv(o, p, smem_u32(smem.pv_tile(ring.stage)));
    }
    turns.end();
    sm90_trace(Sm90Event::kIssued);
    // The softmax is final once the last P is taken: with kTotalsUnderPv the row totals go under
    // its P V. (The wait stays in this branch: ptxas serializes every wgmma of a kernel where
    // some path from an issue reaches a read of its accumulators without the wait.)
    if constexpr (Config::kTotalsUnderPv) {
      totals = Epilogue::row_totals(softmax, params, kv_split, tile, epilogue_row_begin,
                                    thread_in_warpgroup);
    }
    if constexpr (kComputes) {
      wgmma_wait_group<0>();
      fence_accumulators(o);
    }
    sm90_trace(Sm90Event::kPvDone);
    sm90_release_kv_stage<Config, Layout>(smem.v_empty(ring.stage));
    ring.advance();  // in step with the producer, which advanced after its last load
  } else if constexpr (Config::kTotalsUnderPv) {
    totals = Epilogue::row_totals(softmax, params, kv_split, tile, epilogue_row_begin,
                                  thread_in_warpgroup);
  }

  Epilogue::store(o, softmax, totals, smem, map_o, params, kv_split, tile, epilogue_row_begin,
                  consumer, thread_in_warpgroup, state, release);
  sm90_trace(Sm90Event::kEpilogueDone);
}

}  // namespace flashcore::detail
