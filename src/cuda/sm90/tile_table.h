// The Hopper kernel's tuning table: one row per (head_dim, mask, length bucket), with every
// choice the kernel makes named in the row. Nothing else in src/ picks a tile or a switch; the
// measurements behind each row are in docs/kernels.md ("The tuning table").
//
// A row's tile: BLOCK_M = 64 query rows per consumer warpgroup (the wgmma M) x `consumers`,
// BLOCK_N keys per K/V stage, `stages` K/V stages in shared memory. Its registers per consumer
// thread are O (64 x head_dim / 128 threads) + S (64 x BLOCK_N / 128) + P (half of S), which
// must fit the consumer's setmaxnreg budget (tile_config.h checks it):
//   d64 , 3 consumers, n128: O 32 + S 64 + P 32 = 128 of 160
//   d128, 2 consumers, n128: O 64 + S 64 + P 32 = 160 of 232; 3 consumers, n80: 124 of 160
//   d256, 2 consumers, n80 : O 128 + S 40 + P 20 = 188 of 240
#pragma once

#include <cstdint>
#include <initializer_list>

namespace flashcore::detail {

// How the CTAs of a launch take their tiles (scheduler.cuh has the types).
enum class Sm90Scheduling : int {
  kOneTilePerCta = 0,  // one CTA per output tile
  kPersistent = 1,     // one CTA per SM, tile after tile: a fixed stride, or claimed (causal)
};

// The row's switches of the consumer math, each measured per row (docs/kernels.md).
enum class Sm90Switch : unsigned {
  kNone = 0,
  // O *= correction between the QK^T and PV issues, under S = Q K^T (consumer_overlap.cuh).
  kRescaleUnderQk = 1u << 0,
  // O rescaled only when a row's max moved by more than the element type's kStaleMaxLog2
  // (tile_config.h, softmax.cuh).
  kLazyRescale = 1u << 1,
  // Causal masks start at each warp's own diagonal block, not the tile's first row's.
  kWarpMaskStart = 1u << 2,
  // Causal consumers pass the KV blocks past their own rows' diagonal without GEMMs.
  kSkipDeadBlocks = 1u << 3,
  // Persistent consumers whose 64 rows lie outside the sequence pass the tile without GEMMs.
  kSkipRowlessConsumers = 1u << 4,
  // The consumers issue their GEMMs without taking turns (no ping-pong, consumer_overlap.cuh).
  kNoPingPong = 1u << 5,
  // One loop over the KV steps that tests each block for the mask, which makes ptxas put the
  // P V wait at the top of the softmax (consumer_overlap.cuh); otherwise the masked and the
  // unmasked steps run as two loops and the softmax starts beside the consumer's own P V.
  kSoftmaxAfterPv = 1u << 7,
  // O staged in a V stage (Sm90OStaging::kVRing) goes back to the producer once the store has read
  // it, and only the thread that stored it waits for that: the consumer's other threads arrive on
  // o_free at once and start the next tile. Otherwise the whole warpgroup waits for the read.
  kLoneStoreWait = 1u << 8,
  // A tile's row totals (the quad-reduced sums, MUFU reciprocal and log2) and its lse stores go
  // between the last P V's issue and its wait, under that P V, instead of after it.
  kTotalsUnderPv = 1u << 9,
  // The wgmma shared-memory descriptors of a tile's k-steps as the tile's base descriptor plus a
  // constant, one add a wgmma, instead of each encoded from its address (smem_descriptor.cuh):
  // 5-16% fewer instructions a KV step. On the 16-bit non-causal rows 1.002-1.015x, on the fp8
  // rows 1.001-1.008x; the 16-bit causal rows ran the LLM shapes 0.992-0.996x with it (runs
  // 177-180): the d64 causal rows and the d128 causal row up to 512 queries keep the encoded
  // ones. The d128 causal row above 2k (three consumers) takes it, and the d256 causal row:
  // 0.999x / 1.005x over the grid's d256 causal configs and 1.014x / 1.009x on the Gemma-like 8k
  // in two H200 runs (docs/kernels.md, runs 320 and 322; 0.964x there in run 248 on the H100,
  // before its leader's waits). So does the d128 causal row up to 2k since its leader's waits:
  // 1.005x over eight 1k-2k configs in 14 H200 passes, none below 0.999x, the untouched
  // controls 0.998-1.003x (run 363).
  kStepDescriptors = 1u << 10,
  // A consumer's wait for its own P V after the softmax's last exponential (consumer_overlap.cuh),
  // where ptxas would put it after about a third of them. The fp8 d64 rows of 160 keys ran
  // 1.006-1.020x with it at 4k-16k (three consumers hide the P moves that then follow the wait);
  // the fp8 d128 / d256 rows 0.91-0.99x, the 16-bit d128 rows the LLM shapes 0.966x
  // (docs/kernels.md, runs 275-276).
  kPvWaitAfterSoftmax = 1u << 11,
  // The unmasked KV steps in pairs that start at ring stage 0 (two-stage rows), so each step's
  // stage, barrier and descriptor addresses are constants. Needs kPvWaitAfterSoftmax, whose
  // block end keeps each step's P V wait after its exponentials: without it ptxas put the first
  // step's wait before them and the pairs ran 0.983x on the fp8 rows (run 274). With it the fp8
  // d64 rows of 160 keys ran 1.006-1.026x at 4k-16k (the step 511 -> 496 instructions), the fp8
  // d128 / d256 rows 0.907-0.972x (docs/kernels.md, runs 278-281).
  kStepPairs = 1u << 12,
  // The softmax takes row 0's max and the exponentials of its first chunks (kRow0ExpFirstChunks,
  // tile_config.h) in a basic block of their own, before row 1's max (softmax.cuh): the first
  // exponential issues once row 0's max is known, with row 1's FMNMX between the next ones, as in
  // FA3's step (in the d256 step 41 instructions after the first FMNMX; 70, after both rows'
  // maxima, without). The 16-bit d256 rows ran 1.007x / 1.009x with it over 512-16k in two runs;
  // the 16-bit d64 rows 0.966-1.014x, the d128 rows 0.968-1.045x, the d128 causal rows alone
  // 0.984x; the fp8 d128 and d256 rows 0.984x (d128 non-causal above 2k 0.920-0.946x)
  // (docs/kernels.md, runs 299-301 and 319).
  kRow0ExpFirst = 1u << 13,
  // In the KV steps only the leader waits for the pipelines, for the step's K before its turn and
  // for the previous block's V in its turn after the S = Q K^T issue; the others' turns of a step
  // follow the leader's (FA3's ping-pong step). Rows with turns; the leader is consumer 0, or on
  // rows with kSkipDeadBlocks the last consumer, which passes the fewest blocks (kSm90FirstTurn).
  // The dense layout's unpacked tiles only, the ones timed (consumer_overlap.cuh). FlashCore / FA3
  // over the configs of the rows that take it, against without: d128 +0.8% / +1.5% (2k causal +0.8%
  // / +2.7%), d256 +0.1% / +0.3% in two runs; with both waits before the leader's turn +0.2%
  // (docs/kernels.md, runs 305-307). The d128 non-causal rows of three consumers (whose
  // kSkipDeadBlocks passed no block: a mask without causality hides none) ran their 2k-16k configs
  // 1.009-1.018x with it; the d64 non-causal rows 0.986-1.006x, and keep every consumer's waits
  // (run 309). Led by the last consumer, the d128 causal row above 2k ran 4k-16k 1.017-1.026x and
  // its LLM shapes up to 1.023x; the d64 causal rows 0.996-1.007x, and keep every consumer's waits
  // (run 311).
  kLeaderWaitsKv = 1u << 14,
  // Ping-pong turns only in the kernels where the leader waits (kSm90LeaderWaits: the dense
  // layout's unpacked tiles); the serving layouts' and the packed tiles' consumers issue without
  // turns. Needs kLeaderWaitsKv. FlashCore / FA3 on the fp8 d256 rows with turns and the
  // leader's waits, against neither: the grid's 512-2k configs 1.016-1.061x (2k causal 1.023 /
  // 0.988 in two runs; 1.005-1.030x in a third), the causal 4k-16k 1.001-1.016x, non-causal 8k
  // / 16k 0.975x (so that row keeps none); with every consumer's waits, as the serving kernels
  // would take them, the dense configs 0.980-1.025x and the serving calls 0.3-0.6% slower
  // (docs/kernels.md, runs 315-318).
  kTurnsWhereLeaderWaits = 1u << 15,
  // O staged in a V stage (Sm90OStaging::kVRing) is stored by the producer's TMA thread: the
  // consumer stages O, describes the store (Sm90OStoreSlot), arrives on o_free and starts its next
  // tile at once; the producer, which waits for that stage before its next V load there anyway,
  // issues the store, waits until the store has read the stage and loads V (producer.cuh).
  // Otherwise a consumer thread stores O and waits for that read, and so does its warpgroup (with
  // kLoneStoreWait that thread's warp), which holds the warpgroup's next S = Q K^T. Dense layout
  // only (kSm90ProducerStoresO). Against FA3 in the same processes, the 16-bit d256 rows ran the
  // grid's d256 configs 1.008x / 1.012x as fast with it in two runs (non-causal 512-2k
  // 1.006-1.033x); the fp8 d256 rows 1.005x, then 0.983x with the later consumers' stores probed
  // (producer.cuh), their 24-register producer spilling more, and the causal row alone unprobed
  // 0.994x: they keep kLoneStoreWait (docs/kernels.md, runs 340-343).
  kProducerStoresO = 1u << 16,
};
constexpr Sm90Switch operator|(Sm90Switch a, Sm90Switch b) {
  return static_cast<Sm90Switch>(static_cast<unsigned>(a) | static_cast<unsigned>(b));
}

constexpr int kAnySeqlen = 0x7fffffff;
// MiB of K/V per L2 section of the tile order (Sm90TileOrder); rows may override it.
constexpr int kSm90L2SectionMiB = 8;

struct Sm90TuningRow {
  int head_dim;
  bool causal;
  // The row serves calls whose bucket length (sm90_bucket_length: seqlen_q, in fp8 the keys a
  // query row sees) is up to this (kAnySeqlen: all).
  int max_seqlen_q;
  int block_n;
  int stages;
  int consumers;  // consumer warpgroups: BLOCK_M = 64 x consumers
  Sm90Scheduling scheduling;
  int l2_section_mib;
  Sm90Switch switches;
  // CTAs per thread-block cluster along the query tiles (1 or 2): a cluster's CTAs compute query
  // tiles of one (batch, head) and each loads 1 / cluster_m of every K/V block, multicast to all
  // of them (cluster.cuh). Non-causal rows only; layouts other than the dense one run the row
  // unclustered.
  int cluster_m = 1;
  // Bytes of an input element: 2 for the fp16 / bf16 rows, 1 for the fp8 (e4m3) rows.
  int input_bytes = 2;
  // One 4-score chunk in this many takes its softmax exponentials on the FMA pipe (exp2_fma)
  // instead of MUFU.EX2; 0: none. FP8 needs an exponential per score for half the tensor work of
  // 16 bits: at d128 as many MUFU.EX2 cycles as tensor cycles, at d256 half as many.
  int fma_exp_period = 0;
  // A persistent row of shorter tiles (its index among this row's (head_dim, mask, input bytes)
  // rows; -1: none) that a dense call of this row's bucket runs instead where its tiles end
  // sooner: a persistent CTA runs its tiles one after another, so a launch takes ceil(tiles /
  // SMs) tiles' time, and tall tiles leave more of the last wave's SMs idle (wave_peer.h).
  int wave_peer = -1;
  // The peer's time per query row over this row's when both fill every SM, in percent: what
  // shorter tiles cost in the steady state (more tile boundaries, no cluster), measured.
  int wave_peer_cost_pct = 100;
  // Dense calls only: the serving layouts' calls of this bucket run the next row, whose serving
  // kernels this row's would repeat (its switches differing only in the dense kernels', e.g.
  // kTurnsWhereLeaderWaits), so they are not built twice. Never the last row.
  bool dense_only = false;

  constexpr bool has(Sm90Switch flag) const {
    return (static_cast<unsigned>(switches) & static_cast<unsigned>(flag)) != 0;
  }
  constexpr bool persistent() const { return scheduling == Sm90Scheduling::kPersistent; }
};

// Per (head_dim, causal) 1 to kSm90MaxRowsPerMask rows by ascending max_seqlen_q, the last with
// kAnySeqlen (sm90_rows_ordered checks it); each row is one kernel in its instance's TU.
constexpr int kSm90MaxRowsPerMask = 4;

namespace sm90_table {  // short names for the table below only
constexpr Sm90Scheduling kOne = Sm90Scheduling::kOneTilePerCta;
constexpr Sm90Scheduling kPers = Sm90Scheduling::kPersistent;
constexpr int kL2 = kSm90L2SectionMiB;
constexpr Sm90Switch kNone = Sm90Switch::kNone;
constexpr Sm90Switch kUnderQk = Sm90Switch::kRescaleUnderQk;
constexpr Sm90Switch kLazy = Sm90Switch::kLazyRescale;
constexpr Sm90Switch kWarpMask = Sm90Switch::kWarpMaskStart;
constexpr Sm90Switch kDead = Sm90Switch::kSkipDeadBlocks;
constexpr Sm90Switch kRowless = Sm90Switch::kSkipRowlessConsumers;
constexpr Sm90Switch kNoPingPong = Sm90Switch::kNoPingPong;
constexpr Sm90Switch kAfterPv = Sm90Switch::kSoftmaxAfterPv;
constexpr Sm90Switch kLoneWait = Sm90Switch::kLoneStoreWait;
constexpr Sm90Switch kTotalsUnderPv = Sm90Switch::kTotalsUnderPv;
constexpr Sm90Switch kStepDesc = Sm90Switch::kStepDescriptors;
constexpr Sm90Switch kLateWait = Sm90Switch::kPvWaitAfterSoftmax;
constexpr Sm90Switch kPairs = Sm90Switch::kStepPairs;
constexpr Sm90Switch kRow0First = Sm90Switch::kRow0ExpFirst;
constexpr Sm90Switch kLeaderWaits = Sm90Switch::kLeaderWaitsKv;
constexpr Sm90Switch kLeaderTurns = Sm90Switch::kTurnsWhereLeaderWaits;
constexpr Sm90Switch kProducerStores = Sm90Switch::kProducerStoresO;
}  // namespace sm90_table

constexpr Sm90TuningRow kSm90TuningTable[] = {
    // clang-format off
    //  hd  causal  max_seqlen_q  n  stages cons sched  L2 MiB  switches
    {  64, false,  4096,       128, 2, 3, sm90_table::kPers, sm90_table::kL2,
       sm90_table::kDead | sm90_table::kRowless | sm90_table::kStepDesc},
    {  64, false,  kAnySeqlen, 128, 2, 3, sm90_table::kOne,  sm90_table::kL2,
       sm90_table::kDead | sm90_table::kStepDesc},
    {  64, true,   512,        128, 3, 3, sm90_table::kPers, sm90_table::kL2,
       sm90_table::kDead | sm90_table::kRowless},
    {  64, true,   1024,       128, 2, 3, sm90_table::kPers, 24,
       sm90_table::kDead | sm90_table::kRowless},
    {  64, true,   kAnySeqlen, 128, 2, 3, sm90_table::kPers, sm90_table::kL2,
       sm90_table::kDead | sm90_table::kRowless},
    { 128, false,  512,        128, 2, 2, sm90_table::kPers, sm90_table::kL2,
       sm90_table::kUnderQk | sm90_table::kLazy | sm90_table::kStepDesc |
       sm90_table::kLeaderWaits},
    // Clusters of two above 2k only: on the H100 they ran 1k / 2k at 0.965 / 0.960 of this row
    // unclustered and 4k-16k at 1.037-1.039 (docs/kernels.md, run 110).
    // Both yield to the 512 row (two consumers, 128-row tiles) where the waves favour its
    // tiles. Its time a row, fitted per shape from the waves, was 1.02-1.09x theirs (run 187);
    // at 106% the choice picks the faster row on all 11 shapes timed there (Flux 4608 x 24
    // heads 1.02-1.03x as fast with the 512 row, Wan 32760 x 12 heads 0.933x; the grid's 1k,
    // which the 512 row takes, within the noise over three runs: docs/kernels.md, runs 187-191).
    { 128, false,  2048,        80, 2, 3, sm90_table::kPers, sm90_table::kL2,
       sm90_table::kUnderQk | sm90_table::kLazy | sm90_table::kRowless | sm90_table::kStepDesc |
       sm90_table::kLeaderWaits, /*cluster_m=*/1, /*input_bytes=*/2, /*fma_exp_period=*/0,
       /*wave_peer=*/0, /*wave_peer_cost_pct=*/106},
    { 128, false,  kAnySeqlen,  80, 2, 3, sm90_table::kPers, sm90_table::kL2,
       sm90_table::kUnderQk | sm90_table::kLazy | sm90_table::kRowless | sm90_table::kStepDesc |
       sm90_table::kLeaderWaits, /*cluster_m=*/2, /*input_bytes=*/2, /*fma_exp_period=*/0,
       /*wave_peer=*/0, /*wave_peer_cost_pct=*/106},
    { 128, true,   512,        128, 2, 2, sm90_table::kPers, 4,
       sm90_table::kUnderQk | sm90_table::kLazy | sm90_table::kLeaderWaits},
    // Up to 2k queries, and where a chunked prefill's tiles fill the waves better (below), two
    // consumers at n128: above 4k they ran 1.02-1.05x as fast as n160 (docs/kernels.md, run 133).
    { 128, true,   2048,       128, 2, 2, sm90_table::kPers, sm90_table::kL2,
       sm90_table::kUnderQk | sm90_table::kLazy | sm90_table::kLeaderWaits | sm90_table::kStepDesc},
    // Above 2k, three consumers at n80 (192-row tiles, 2/3 of n128's K/V bytes a score) in 32 MiB
    // L2 sections. As graph replays against the n128 row: 8k-32k 1.02-1.04x (GQA 4:1 and 8:1,
    // MQA, 16-head MHA), Qwen-like 3000 x 2 1.05x, 4k 0.98-1.01x, 2k 0.93-0.99x (so not there;
    // led by the last consumer, 1k / 2k 0.959-1.017x, run 314).
    // At 8 MiB sections the 16-head calls ran 1-4% slower under ncu: theirs held a head or two,
    // fewer tiles than SMs (docs/kernels.md, runs 231-234). A chunked prefill's tiles are about
    // as long as one another, so their waves count (wave_peer.h, sm90_causal_tiles_even): the
    // n128 row's 128-row tiles fill them better at Llama-3-8B's 4k of 32k. The peer's cost a
    // query row, 103%: under ncu the n128 row took 1.018-1.030x this row's time where both fill
    // every SM (16 heads at 4k / 16k, Llama-3-8B 4k; run 233).
    { 128, true,   kAnySeqlen,  80, 2, 3, sm90_table::kPers, 32,
       sm90_table::kUnderQk | sm90_table::kLazy | sm90_table::kDead | sm90_table::kRowless |
       sm90_table::kStepDesc | sm90_table::kLeaderWaits, /*cluster_m=*/1, /*input_bytes=*/2,
       /*fma_exp_period=*/0, /*wave_peer=*/1, /*wave_peer_cost_pct=*/103},
    // d256 keeps the softmax after its P V: split into masked and unmasked loops its causal row
    // ran 0.97-0.98x as fast, its non-causal row 1.00x (docs/kernels.md, runs 132 and 140).
    // Causal: 16 MiB L2 sections. At 8, a section held one head's 64 tiles at 8k (two heads' at
    // 4k, ...), fewer than the SMs, so the last section's longest tile started among the
    // launch's last claims and ran on alone. At 16 (128 tiles a section, as the d128 rows hold
    // at 8) the MHA grid ran 4k / 8k 1.07-1.09x as fast in two runs, 1k / 2k / 16k within
    // +-3%; the Gemma-like GQA 8k, whose sections held 128 tiles already, 0.97-0.99x
    // (docs/kernels.md, runs 193-194).
    { 256, false,  kAnySeqlen,  80, 2, 2, sm90_table::kPers, sm90_table::kL2,
       sm90_table::kLazy | sm90_table::kWarpMask | sm90_table::kAfterPv | sm90_table::kStepDesc |
       sm90_table::kRow0First | sm90_table::kLeaderWaits | sm90_table::kProducerStores},
    { 256, true,   kAnySeqlen,  80, 2, 2, sm90_table::kPers, 16,
       sm90_table::kLazy | sm90_table::kWarpMask | sm90_table::kAfterPv | sm90_table::kRow0First |
       sm90_table::kStepDesc | sm90_table::kLeaderWaits | sm90_table::kProducerStores},
    // FP8 (e4m3) rows: head_dim 64, 128 and 256 (64 runs d128 tiles on zero-filled columns,
    // computing its own: sm90_kernel_head_dim). Per stage K + V (TMA) + V^T (transposed by the
    // producer warpgroup; rows for the computed head_dim only, so d64's are half as many);
    // the measurements are in docs/kernels.md ("FP8 kernel").
    //   d64  n128, 3 consumers: Q 24 KB + 2 x (16 + 16 + 8) KB + O staging 48 KB = 152 KB;
    //              registers O 32 + S 64 + P 16 + ~40 = 152 of 160. 1.13x as fast as the d128
    //              row (2 consumers) computing 64 columns; with the FMA-pipe exponentials 1.09x,
    //              with turns 1.10x (run 147). From 513 to 2048 query rows three stages (192
    //              KB, O still in a buffer of its own): 1k / 2k non-causal 1.017-1.028x, 1k
    //              causal 1.014-1.019x, 2k causal 0.997-1.002x in two runs; 512 ran 0.977-0.979x
    //              with them and keeps two (runs 261 and 263)
    //        n160 above 2k (FA3's d64 fp8 tile, 192 x 160): Q 24 KB + 2 x (20 + 20 + 16) KB + O
    //              48 KB = 184 KB; registers 32 + 80 + 20 + ~40 = 172 over 160 as estimated, and
    //              ptxas fits the consumers without a spill. 4% fewer instructions a score: at
    //              4k-16k 1.009-1.022x as fast as n128 (run 240; run 159 read +0-2.6%). The P V
    //              wait after the softmax (kLateWait) and the steps in pairs (kPairs): measured
    //              at the switches
    //        A 192-row tile whose last rows lie past the sequence (non-causal) or whose first
    //              slabs lie before row 0 (causal: sm90_block_row_begin) leaves consumers without
    //              rows, and under a causal mask the upper slabs see fewer KV blocks than the
    //              tile: the rowless consumers pass their tile (kRowless) and the others their
    //              dead blocks (kDead) without GEMMs. Non-causal 512 / 1k / 2k / 4k 1.052 /
    //              1.038 / 1.010 / 1.017x as fast with kRowless, 8k / 16k (one partial tile in
    //              43 / 86) 0.996 / 0.999x; causal with both 512 / 1k / 2k 1.032 / 1.020 /
    //              1.002x, but the n160 row 4k 0.985x (all three passes slower), 8k / 16k 1.000
    //              / 0.999x, so it keeps neither (run 329)
    //   d128 n128 up to 2k: Q 16 KB + 2 x (16 + 16 + 16) KB + O staging 32 KB = 144 KB;
    //              registers O 64 + S 64 + P 16 + ~40 = 184 of 232
    //        n192 above 2k: Q 16 KB + 2 x (24 + 24 + 32) KB + O 32 KB = 208 KB (V^T in two
    //              128-key column blocks, the second half used); registers O 64 + S 96 + P 24
    //              + ~40 = 224 of 232, no spill. 1.03-1.06x as fast as n128 at 4k-16k,
    //              0.99-1.00x at 2k, 0.93-0.95x at 1k (run 157); n160 and n192 with turns
    //              gained less
    //   d256 n128: Q 32 KB + 2 x (32 + 32 + 32) KB = 224 KB, no room for the 64 KB of O
    //              staging: O staged in the raw V stages (32 KB each, run 145: 1.06x as fast
    //              as stored from registers); registers O 128 + S 64 + P 16 + ~40 = 248,
    //              the 24 / 240 split (n96 at 232 ran 0.8x as fast at 4k and 16k, run 118;
    //              the producer's TMA thread spills 32 bytes at 24)
    //   d128 non-causal above 2k with lazy rescaling (the max moves past 0.75 log2 units, P <=
    //              2^8.75, under e4m3's 448): a step skips O's 64 multiplies when no row of the
    //              warp moved, 1.03-1.04x as fast at 4k-16k (run 253). Up to 2k it gained 1.01x
    //              and raised the 1k config's worst out error from 1.17x FA3's to 1.32x (the
    //              largest P is no longer exactly 256: run 257), so that row stays eager. The
    //              causal rows are lazy, with their row totals under the last P V: above 2k
    //              8k-16k 1.014-1.024x, Llama-3-8B 8k-32k 1.018-1.020x, chunked prefills
    //              1.007-1.028x in two runs (without the totals under P V 0.97-1.01x: runs
    //              334-335); up to 2k 512-2k 1.005-1.010x, Llama-3-8B 2k x 8 1.018x, a chunk of
    //              512 over 1280 keys 1.015x, its worst out error 1.16x FA3's there (1.00x
    //              eager; run 337). d64 and d256 ran -4..+2% lazy and stay eager
    //   All without ping-pong turns: +0-5% (run 120; at d128 / d256 with turns again 0.997x, run
    //   153; d128 with turns and the leader's waits 0.958-1.004x, run 315, d64 0.910-0.984x,
    //   run 319), but d256 up to 2k and causal, which take them where the leader waits
    //   (kLeaderTurns, runs 315-318); d128 / d256 with 1 exponential in 8 on the FMA pipe: +3%
    //   (run 126); d256 with 1 in 16 1.008-1.011x over 1k-16k in two runs, none 0.969x, d128
    //   with 1 in 16 1.001x, none 0.988x (runs 255-256); d128 n224 against n192: 0.952x at 24 /
    //   240 registers (the producer spills), 0.972x at 40 / 232, where nothing spills (runs
    //   183-184; 0.77x in run 119). In d256 only the storing thread waits for the O store's
    //   read (kLoneWait): 1.02-1.04x (the 16-bit d256 rows, which take turns, ran their causal
    //   configs 0.98x with it; runs 146 and 148). In d256 the row totals go under the tile's
    //   last P V (kTotalsUnderPv): 1.029x over 1k-16k, every config 1.006x or more (run 176;
    //   the 16-bit d256 rows 0.996x). So they do in d128 but on the lazy non-causal row above
    //   2k: 512-2k 1.015-1.071x, causal 4k-16k 1.002-1.024x; the lazy row ran 0.968-0.984x with
    //   them and d64 0.980-1.013x (runs 325-326).
    {  64, false,  512,        128, 2, 3, sm90_table::kPers, sm90_table::kL2,
       sm90_table::kRowless | sm90_table::kUnderQk | sm90_table::kNoPingPong |
       sm90_table::kStepDesc, /*cluster_m=*/1, /*input_bytes=*/1},
    {  64, false,  2048,       128, 3, 3, sm90_table::kPers, sm90_table::kL2,
       sm90_table::kRowless | sm90_table::kUnderQk | sm90_table::kNoPingPong |
       sm90_table::kStepDesc, /*cluster_m=*/1, /*input_bytes=*/1},
    {  64, false,  kAnySeqlen, 160, 2, 3, sm90_table::kPers, sm90_table::kL2,
       sm90_table::kRowless | sm90_table::kUnderQk | sm90_table::kNoPingPong |
       sm90_table::kStepDesc | sm90_table::kLateWait | sm90_table::kPairs, /*cluster_m=*/1,
       /*input_bytes=*/1},
    {  64, true,   512,        128, 2, 3, sm90_table::kPers, sm90_table::kL2,
       sm90_table::kDead | sm90_table::kRowless | sm90_table::kUnderQk | sm90_table::kNoPingPong |
       sm90_table::kStepDesc, /*cluster_m=*/1, /*input_bytes=*/1},
    {  64, true,   2048,       128, 3, 3, sm90_table::kPers, sm90_table::kL2,
       sm90_table::kDead | sm90_table::kRowless | sm90_table::kUnderQk | sm90_table::kNoPingPong |
       sm90_table::kStepDesc, /*cluster_m=*/1, /*input_bytes=*/1},
    {  64, true,   kAnySeqlen, 160, 2, 3, sm90_table::kPers, sm90_table::kL2,
       sm90_table::kUnderQk | sm90_table::kNoPingPong | sm90_table::kStepDesc |
       sm90_table::kLateWait | sm90_table::kPairs, /*cluster_m=*/1, /*input_bytes=*/1},
    { 128, false,  2048,       128, 2, 2, sm90_table::kPers, sm90_table::kL2,
       sm90_table::kUnderQk | sm90_table::kNoPingPong | sm90_table::kTotalsUnderPv |
       sm90_table::kStepDesc, /*cluster_m=*/1, /*input_bytes=*/1, /*fma_exp_period=*/8},
    { 128, false,  kAnySeqlen, 192, 2, 2, sm90_table::kPers, sm90_table::kL2,
       sm90_table::kUnderQk | sm90_table::kLazy | sm90_table::kNoPingPong |
       sm90_table::kStepDesc, /*cluster_m=*/1, /*input_bytes=*/1, /*fma_exp_period=*/8},
    { 128, true,   2048,       128, 2, 2, sm90_table::kPers, sm90_table::kL2,
       sm90_table::kUnderQk | sm90_table::kLazy | sm90_table::kNoPingPong |
       sm90_table::kTotalsUnderPv | sm90_table::kStepDesc, /*cluster_m=*/1, /*input_bytes=*/1,
       /*fma_exp_period=*/8},
    { 128, true,   kAnySeqlen, 192, 2, 2, sm90_table::kPers, sm90_table::kL2,
       sm90_table::kUnderQk | sm90_table::kLazy | sm90_table::kNoPingPong |
       sm90_table::kTotalsUnderPv | sm90_table::kStepDesc, /*cluster_m=*/1, /*input_bytes=*/1,
       /*fma_exp_period=*/8},
    { 256, false,  2048,       128, 2, 2, sm90_table::kPers, sm90_table::kL2,
       sm90_table::kWarpMask | sm90_table::kLoneWait | sm90_table::kTotalsUnderPv |
       sm90_table::kStepDesc | sm90_table::kLeaderWaits | sm90_table::kLeaderTurns,
       /*cluster_m=*/1, /*input_bytes=*/1, /*fma_exp_period=*/16, /*wave_peer=*/-1,
       /*wave_peer_cost_pct=*/100, /*dense_only=*/true},
    { 256, false,  kAnySeqlen, 128, 2, 2, sm90_table::kPers, sm90_table::kL2,
       sm90_table::kWarpMask | sm90_table::kNoPingPong |
       sm90_table::kLoneWait | sm90_table::kTotalsUnderPv | sm90_table::kStepDesc,
       /*cluster_m=*/1, /*input_bytes=*/1, /*fma_exp_period=*/16},
    // Causal: 16 MiB L2 sections, as the 16-bit d256 causal row. At 8 the section of a chunked
    // prefill of 2k queries over 8k keys (16 / 8 heads) held 64 tiles of 49-64 KV blocks, fewer
    // than the SMs, so the last section's longest tiles were among the launch's last claims: at
    // 16 that chunk ran 1.035-1.046x as fast, 4k over 16k keys 1.015-1.029x, FlashCore / FA3
    // over the grid's d256 causal configs 0.993 -> 0.999; at 32 the 512 config ran 0.92x
    // (docs/kernels.md, run 335).
    { 256, true,   kAnySeqlen, 128, 2, 2, sm90_table::kPers, 16,
       sm90_table::kWarpMask | sm90_table::kLoneWait | sm90_table::kTotalsUnderPv |
       sm90_table::kStepDesc | sm90_table::kLeaderWaits | sm90_table::kLeaderTurns,
       /*cluster_m=*/1, /*input_bytes=*/1, /*fma_exp_period=*/16},
    // clang-format on
};

// How many rows (head_dim, causal, input element bytes) has, and its index-th row in table order.
constexpr int sm90_row_count(int head_dim, bool causal, int input_bytes = 2) {
  int count = 0;
  for (const Sm90TuningRow& row : kSm90TuningTable)
    count += (row.head_dim == head_dim && row.causal == causal && row.input_bytes == input_bytes)
                 ? 1
                 : 0;
  return count;
}

constexpr Sm90TuningRow sm90_tuning_row(int head_dim, bool causal, int index,
                                        int input_bytes = 2) {
  int seen = 0;
  for (const Sm90TuningRow& row : kSm90TuningTable) {
    if (row.head_dim == head_dim && row.causal == causal && row.input_bytes == input_bytes) {
      if (seen == index) return row;
      ++seen;
    }
  }
  return Sm90TuningRow{0, false, 0, 0, 0, 2, Sm90Scheduling::kOneTilePerCta, kSm90L2SectionMiB,
                       Sm90Switch::kNone};
}

// The length whose bucket picks a call's row (the first row whose max_seqlen_q holds it). 16-bit
// rows: seqlen_q, on which their buckets and wave peers were measured. FP8 rows: where a query
// row sees more keys than seqlen_q (chunked prefill and KV caches, seqlen_q < seqlen_k; cross
// attention), the square length whose rows see as many on average: 2 seqlen_k - seqlen_q under
// a causal mask (bottom-right aligned), seqlen_k without. Such calls' tiles are as long as a
// long square call's, and run its row (the fp8 d128 rows of 192 keys): chunked prefills of 512-2k
// queries over 4k-16k keys and a 1k x 8k cross attention at d128 1.070-1.095x as fast as on the
// n128 row up to 2k queries, d64 1.035x, d256 within the noise; a paged cache of 512 queries over
// 2k-8k keys 1.20x (docs/kernels.md, run 331).
constexpr int64_t sm90_bucket_length(int seqlen_q, int seqlen_k, bool causal, int input_bytes) {
  if (input_bytes != 1) return seqlen_q;
  const int64_t keys = causal ? 2 * int64_t(seqlen_k) - seqlen_q : int64_t(seqlen_k);
  return keys > seqlen_q ? keys : seqlen_q;
}

// The index of the row a dense call of this bucket length runs: the first row whose
// max_seqlen_q holds it, the last one holding every length (sm90_rows_ordered). The launcher
// walks the rows with the same test (launch.cuh, run_sm90_forward_from_row), passing the
// dense-only rows in the serving layouts; before any wave peer (wave_peer.h).
constexpr int sm90_bucket_row(int head_dim, bool causal, int input_bytes, int64_t bucket_length) {
  const int rows = sm90_row_count(head_dim, causal, input_bytes);
  for (int i = 0; i + 1 < rows; ++i)
    if (bucket_length <= sm90_tuning_row(head_dim, causal, i, input_bytes).max_seqlen_q) return i;
  return rows - 1;
}

// The rows of every (head_dim, causal) cover all lengths in ascending order: the launcher walks
// them with if constexpr, so a wrong order would silently skip a bucket.
constexpr bool sm90_rows_ordered(std::initializer_list<int> head_dims, int input_bytes) {
  for (int head_dim : head_dims) {
    for (bool causal : {false, true}) {
      const int rows = sm90_row_count(head_dim, causal, input_bytes);
      if (rows == 0 || rows > kSm90MaxRowsPerMask) return false;
      const Sm90TuningRow last = sm90_tuning_row(head_dim, causal, rows - 1, input_bytes);
      if (last.max_seqlen_q != kAnySeqlen || last.dense_only) return false;
      for (int i = 1; i < rows; ++i)
        if (sm90_tuning_row(head_dim, causal, i - 1, input_bytes).max_seqlen_q >=
            sm90_tuning_row(head_dim, causal, i, input_bytes).max_seqlen_q)
          return false;
    }
  }
  return true;
}
static_assert(sm90_rows_ordered({64, 128, 256}, 2) && sm90_rows_ordered({64, 128, 256}, 1),
              "kSm90TuningTable: 1-4 rows per (head_dim, causal, input bytes), ascending "
              "max_seqlen_q, the last one kAnySeqlen and not dense_only");

// A wave peer is an earlier row of the same (head_dim, mask, input bytes) with fewer consumers,
// both persistent (wave_peer.h counts waves over one CTA an SM), at a cost of at least the
// row's own (a cheaper shorter tile would be the bucket's row).
constexpr bool sm90_wave_peers_valid() {
  for (const Sm90TuningRow& row : kSm90TuningTable) {
    if (row.wave_peer < 0) continue;
    if (row.wave_peer >= sm90_row_count(row.head_dim, row.causal, row.input_bytes)) return false;
    const Sm90TuningRow peer =
        sm90_tuning_row(row.head_dim, row.causal, row.wave_peer, row.input_bytes);
    if (peer.max_seqlen_q >= row.max_seqlen_q || peer.consumers >= row.consumers ||
        !peer.persistent() || !row.persistent() || peer.wave_peer >= 0 ||
        row.wave_peer_cost_pct < 100)
      return false;
  }
  return true;
}
static_assert(sm90_wave_peers_valid(),
              "kSm90TuningTable: a wave peer is an earlier persistent row of the same mask with "
              "fewer consumers and no peer of its own, at a cost of 100% or more");

// Row kIndex of (kHeadDim, kCausal, kInputBytes) as a type: the tile configuration's template
// argument (tile_config.h). Tuning sweeps (dev/) pass types of their own with a `kRow` of any
// shape.
template <int kHeadDim, bool kCausal, int kIndex, int kInputBytes = 2>
struct Sm90TableRow {
  static constexpr Sm90TuningRow kRow = sm90_tuning_row(kHeadDim, kCausal, kIndex, kInputBytes);
  static_assert(kRow.block_n > 0, "no such row in kSm90TuningTable");
};

// Elements of one 128-byte swizzled row of a 16-bit type: the head_dim granularity of the
// kernels (a column block), and the inner extent of every TMA box.
constexpr int kSm90HeadDimGranule = 64;

// The kernel head_dim that serves a call's head_dim: the next multiple of a column block (64
// 16-bit or 128 8-bit elements). 96 runs the 128 kernels, which compute the zero-filled extra
// columns too; in fp8, 64 does as well.
constexpr int sm90_round_up(int value, int multiple) {
  return (value + multiple - 1) / multiple * multiple;
}
constexpr int sm90_kernel_head_dim(int head_dim, int input_bytes = 2) {
  return sm90_round_up(head_dim, kSm90HeadDimGranule * 2 / input_bytes);
}

// The row of packed calls (kv_split_plan.h): the shortest-sequence row, whose bucket holds every
// packed length (kv_split_plan.h checks it).
constexpr int kSm90PackedRowIndex = 0;
constexpr Sm90TuningRow sm90_packed_row(int head_dim, bool causal) {
  return sm90_tuning_row(head_dim, causal, kSm90PackedRowIndex);
}

}  // namespace flashcore::detail
