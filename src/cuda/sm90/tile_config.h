// The Hopper kernel's tile configuration: everything derived from one tuning row (tile_table.h)
// and the element type, plus the pure row geometry of query blocks (host tests check it).
#pragma once

#include <cstdint>

#include "cpu/fp8_convert.h"
#include "cuda/sm90/kv_split_plan.h"
#include "cuda/sm90/tile_table.h"
#include "flashcore/flashcore.h"

namespace flashcore::detail {

// Bytes of one 128-byte-swizzled shared-memory row: the TMA box's inner extent and the unit the
// tiles' head_dim is built from (cuda/ptx/smem_descriptor.cuh lays the rows out).
constexpr int kSm90SwizzleRowBytes = 128;
// One wgmma reads 32 bytes of each row of a K-major operand: its K is 32 / element bytes.
constexpr int kSm90WgmmaKBytes = 32;

// The element type's share of the configuration: what a new input type (FP8) changes.
// FP8 (e4m3): one byte, so a 128-byte column block holds 128 elements and a wgmma K-step 32;
// and V goes through a transpose in shared memory (kTransposesV), because FP8 wgmma reads its B
// operand K-major only (P V needs V^T: head_dim rows of keys).
template <DType kDType>
struct Sm90ElementTraits {
  static_assert(kDType == DType::kFloat16 || kDType == DType::kBFloat16 ||
                    kDType == DType::kFloat8E4M3,
                "the sm90 kernels take fp16, bf16 or fp8_e4m3");
  static constexpr DType kType = kDType;
  static constexpr int kBytes = kDType == DType::kFloat8E4M3 ? 1 : 2;
  static constexpr int kBoxCols = kSm90SwizzleRowBytes / kBytes;  // elements of a column block
  static constexpr int kWgmmaK = kSm90WgmmaKBytes / kBytes;
  static constexpr bool kTransposesV = kDType == DType::kFloat8E4M3;
  // P = exp2(s - max + kPOffsetLog2) (softmax.cuh): in e4m3, P in [0, 256] instead of [0, 1], so
  // probabilities stay e4m3 normals down to 2^-14 instead of 2^-6, and round to zero below 2^-18
  // instead of 2^-10 (FA3's FP8 takes the same offset).
  static constexpr int kPOffsetLog2 = kDType == DType::kFloat8E4M3 ? 8 : 0;
  // How far a row's scores may rise above its max (log2 units) before the lazy rescale moves it
  // (softmax.cuh): P then reaches 2^(kPOffsetLog2 + kStaleMaxLog2). 16 bits: 2^8, far from
  // overflow. e4m3: 2^8.75 = 430, under its largest finite value, 448.
  static constexpr float kStaleMaxLog2 = kDType == DType::kFloat8E4M3 ? 0.75f : 8.0f;
  // e4m3 holds every P: 2^a <= 1 + a for a in [0, 1] (2^a is convex and meets 1 + a at both
  // ends), so P <= 2^kPOffsetLog2 x (1 + kStaleMaxLog2) = 448 bounds it.
  static_assert(kDType != DType::kFloat8E4M3 ||
                    (kStaleMaxLog2 >= 0.0f && kStaleMaxLog2 <= 1.0f &&
                     float(1 << kPOffsetLog2) * (1.0f + kStaleMaxLog2) <= kFp8E4M3Max),
                "a lazy max lets P pass e4m3's largest value");
};

// Bytes of an output element: O is fp16 or bf16 (fp8 inputs write either, params.out_dtype).
constexpr int kSm90OutputBytes = 2;

// Where a persistent CTA stages a consumer's O for its TMA store (one-tile CTAs always use the Q
// slab: there is no next tile to load). Sm90TileConfig::kPersistentOStaging picks it.
enum class Sm90OStaging : int {
  kQSlab = 0,      // the consumer's Q slab: the next Q loads only after the store has read it
  kOwnBuffer = 1,  // a buffer of its own past the K/V ring: Q goes back after the last S = Q K^T
  kVRing = 2,      // a V stage (no room for a buffer): Q goes back after the last S = Q K^T too
  kRegisters = 3,  // none (FP8, V stages smaller than O): O goes out from registers, Q back
                   // after the last S = Q K^T
};

// The persistent schedulers' tile slot behind the mbarriers: the decoded Sm90Tile (nine ints,
// pipeline.cuh checks the size; 16-byte multiples) that the producer hands the consumers with
// each Q.
constexpr int kSm90TileSlotBytes = 48;

// Where the producer stores O (Sm90Switch::kProducerStoresO): per consumer, the staged O's TMA
// coordinates (Sm90OStoreSlot, pipeline.cuh), written before the consumer's arrival on o_free.
constexpr int kSm90OStoreSlotBytes = 16;

// Shared memory a CTA may take on sm90: 227 KB of the SM's 228
// (cudaDevAttrMaxSharedMemoryPerBlockOptin).
constexpr int kSm90MaxSmemBytes = 227 * 1024;

// An SM's register file: 64K 32-bit registers, the pool that __launch_bounds__ caps and
// setmaxnreg budgets divide. A thread's registers come in units of 8 (setmaxnreg's counts too).
constexpr int kSm90RegistersPerSm = 65536;
constexpr int kSm90RegisterUnit = 8;

// Row: a type with a `static constexpr Sm90TuningRow kRow` (Sm90TableRow, or a sweep's own).
// kPacksGroups_: the tiles' rows hold the query heads of a KV group (sm90_packs_query_groups).
// kOutDType_: the dtype of out (the input dtype, except for fp8 inputs: fp16 or bf16).
// kComputedHeadDim_: the head_dim columns the GEMMs compute (0: the row's head_dim). A call whose
// head_dim the kernel pads (FP8 d64 and d96 on d128 tiles) computes its own, rounded up to a
// wgmma K: the zero-filled columns past it add nothing to S = Q K^T, and (FP8) the columns of O
// past it are the call's padding, which the O store drops; so S takes those K-steps only, O = P V^T
// that N, and the transposer those rows of V^T. (FP8 d64 has rows of its own; d96 runs the d128
// rows and passes 96.)
template <class Row, DType kDType_, bool kPacksGroups_ = false, DType kOutDType_ = kDType_,
          int kComputedHeadDim_ = 0>
struct Sm90TileConfig {
  static constexpr Sm90TuningRow kRow = Row::kRow;
  using Element = Sm90ElementTraits<kDType_>;
  static constexpr DType kDType = kDType_;
  static constexpr DType kOutDType = kOutDType_;
  static_assert(kOutDType == DType::kFloat16 || kOutDType == DType::kBFloat16,
                "out is fp16 or bf16");
  static_assert(kRow.block_n > 0 && kRow.stages > 0, "empty tuning row");
  static_assert(kRow.input_bytes == Element::kBytes, "a tuning row of another input type");
  static_assert(kRow.consumers == 2 || kRow.consumers == 3, "2 or 3 consumer warpgroups");

  // A row names the call head_dim it serves; its kernel pads it to whole 128-byte column blocks
  // (an FP8 d64 row runs d128 tiles) and computes the row's columns only.
  static constexpr int kHeadDim = sm90_kernel_head_dim(kRow.head_dim, Element::kBytes);
  static constexpr int kComputedHeadDim =
      kComputedHeadDim_ == 0 ? sm90_round_up(kRow.head_dim, Element::kWgmmaK) : kComputedHeadDim_;
  static_assert(kComputedHeadDim <= kHeadDim && kComputedHeadDim % Element::kWgmmaK == 0,
                "S = Q K^T takes whole wgmma K-steps of the kernel's head_dim");
  static_assert(kComputedHeadDim == kHeadDim || Element::kTransposesV,
                "16-bit kernels compute every column (P V reads V MN-major in column blocks)");
  static constexpr bool kPacksGroups = kPacksGroups_;
  static constexpr bool kPersistent = kRow.persistent();
  static constexpr int kConsumerWarpgroups = kRow.consumers;
  // Bytes of K and V that the CTAs running at one time should share through the L2 (50 MB on an
  // H100 / H200): the tile order's section size (Sm90TileOrder).
  static constexpr int64_t kL2ReuseBytes = int64_t(kRow.l2_section_mib) << 20;
  static constexpr int kRowsPerConsumer = kSm90RowsPerConsumer;
  static_assert(!kPacksGroups || kRowsPerConsumer % kSm90MaxPackedGroup == 0,
                "packed tiles: every slab must start at a whole query position");
  static constexpr int kBlockM = kConsumerWarpgroups * kRowsPerConsumer;
  static constexpr int kBlockN = kRow.block_n;
  static constexpr int kStages = kRow.stages;
  static constexpr int kThreadsPerWarpgroup = 128;
  static constexpr int kThreads = (1 + kConsumerWarpgroups) * kThreadsPerWarpgroup;
  static constexpr int kConsumerThreads = kConsumerWarpgroups * kThreadsPerWarpgroup;

  // setmaxnreg budgets: 40 x 128 + 232 x 256 = 24 x 128 + 240 x 256 = 64512 <= 65536 registers
  // of the SM; at launch __launch_bounds__(384, 1) caps every thread at 168 (65536 / 384, rounded
  // down to 8). Tiles whose O + S + P registers plus ~40 for addresses and softmax state pass 232
  // take the 24 / 240 split (the producer loop fits 24).
  // Three consumers (BLOCK_M 192, 512 threads): 24 x 128 + 160 x 384 = 64512.
  // P holds 64 x BLOCK_N elements of Element::kBytes over 128 threads: BLOCK_N / 4 registers
  // in 16 bits, BLOCK_N / 8 in fp8.
  // The FP8 V transpose (v_transpose.cuh) runs in 24 registers too (d256: two words spilled a
  // stage, and the TMA thread one 8-byte word a K/V block).
  // Three consumers may pass 160 by this much: the estimate's ~40 is generous there, and the fp8
  // d64 n160 row (estimate 172) compiles its consumers into 160 without a spill (ptxas -v).
  static constexpr int kThreeConsumerEstimateSlack = 12;
  static constexpr int kConsumerRegisterEstimate =
      kComputedHeadDim / 2 + kBlockN / 2 + kBlockN * Element::kBytes / 8 + 40;
  static constexpr bool kWideConsumers = kConsumerRegisterEstimate > 232;
  static constexpr int kProducerRegisters =
      kConsumerWarpgroups == 3 ? 24 : kWideConsumers ? 24 : 40;
  static constexpr int kConsumerRegisters =
      kConsumerWarpgroups == 3 ? 160 : kWideConsumers ? 240 : 232;
  static_assert(kConsumerWarpgroups == 2 ||
                    kConsumerRegisterEstimate <= 160 + kThreeConsumerEstimateSlack,
                "three consumers leave 160 registers each: O + S + P of this tile do not fit");

  // The row's switches (tile_table.h says what each does).
  static constexpr bool kRescaleUnderQk = kRow.has(Sm90Switch::kRescaleUnderQk);
  static constexpr bool kLazyRescale = kRow.has(Sm90Switch::kLazyRescale);
  static constexpr bool kWarpMaskStart = kRow.has(Sm90Switch::kWarpMaskStart);
  static constexpr bool kSkipsDeadBlocks = kRow.has(Sm90Switch::kSkipDeadBlocks);
  static constexpr bool kPingPong = !kRow.has(Sm90Switch::kNoPingPong);
  static constexpr bool kSoftmaxAfterPv = kRow.has(Sm90Switch::kSoftmaxAfterPv);
  static constexpr bool kTotalsUnderPv = kRow.has(Sm90Switch::kTotalsUnderPv);
  static constexpr bool kStepDescriptors = kRow.has(Sm90Switch::kStepDescriptors);
  static constexpr bool kPvWaitAfterSoftmax = kRow.has(Sm90Switch::kPvWaitAfterSoftmax);
  static constexpr bool kStepPairs = kRow.has(Sm90Switch::kStepPairs);
  static_assert(!kStepPairs || kStages == 2, "kStepPairs: two K/V stages, so a pair starts at 0");
  static_assert(!kStepPairs || !kSoftmaxAfterPv, "kStepPairs: the unmasked steps' own loop");
  static_assert(!kStepPairs || kPvWaitAfterSoftmax,
                "kStepPairs: with kPvWaitAfterSoftmax, or ptxas may wait before the exponentials");
  // The other consumers' turns stand in for their waits only where turns go round (the leader
  // and the kernels that take it: consumer_overlap.cuh).
  static constexpr bool kLeaderWaitsKv = kRow.has(Sm90Switch::kLeaderWaitsKv);
  static_assert(!kLeaderWaitsKv || kPingPong, "kLeaderWaitsKv: on rows with ping-pong turns");
  static constexpr bool kTurnsWhereLeaderWaits = kRow.has(Sm90Switch::kTurnsWhereLeaderWaits);
  static_assert(!kTurnsWhereLeaderWaits || kLeaderWaitsKv,
                "kTurnsWhereLeaderWaits: on rows with kLeaderWaitsKv");
  // Chunks of row 0 whose exponentials come before row 1's max (softmax.cuh); 0: none. Four
  // chunks (8 exponentials) start the MUFU pipe before row 1's FMNMX, the one count measured. Not
  // in packed tiles (the decode kernel's too): the d256 packed kernel spilled 20 bytes with it.
  static constexpr int kRow0ExpFirstChunks = 4;
  static constexpr int kRow0FirstChunks =
      kRow.has(Sm90Switch::kRow0ExpFirst) && !kPacksGroups ? kRow0ExpFirstChunks : 0;
  static constexpr int kFmaExpPeriod = kRow.fma_exp_period;
  static_assert(kFmaExpPeriod >= 0, "fma_exp_period: 0 (none) or one chunk in that many");
  // Packed tiles always skip: a decode tile has G rows of its 64 x consumers.
  static constexpr bool kSkipsRowlessConsumers =
      kPersistent && (kRow.has(Sm90Switch::kSkipRowlessConsumers) || kPacksGroups);

  static constexpr int kElementBytes = Element::kBytes;
  static constexpr int kBoxCols = Element::kBoxCols;  // one swizzled row per TMA box
  static constexpr int kColumnBlocks = kHeadDim / kBoxCols;
  static_assert(kHeadDim % kBoxCols == 0, "head_dim must be whole 128-byte column blocks");
  static_assert(kBlockN % Element::kWgmmaK == 0 && kBlockN <= 256,
                "BLOCK_N: a multiple of the P V wgmma's K, at most 256 (wgmma N, TMA box rows)");
  // O (the output type, 16 bits) in the same column blocks of 64 elements as 16-bit inputs.
  static constexpr int kOutBoxCols = kSm90SwizzleRowBytes / kSm90OutputBytes;
  static constexpr int kOutColumnBlocks = kHeadDim / kOutBoxCols;

  // V transposed in shared memory (FP8): the producer warpgroup writes V^T of each V stage into a
  // stage of its own, K-major in column blocks of 128 keys (the last one partly used when 128
  // does not divide BLOCK_N). Its rows are the computed head_dim columns only (a padded call's
  // zero columns have no V^T rows: O = P V^T takes kComputedHeadDim of them), so FP8 d64 holds
  // half the V^T bytes of its d128 tiles. kComputedHeadDim is whole fp8 wgmma K-steps (32, checked
  // above), so a column block is whole 8-row swizzle atoms.
  static constexpr bool kTransposesV = Element::kTransposesV;
  static constexpr int kVtRows = kComputedHeadDim;
  static constexpr int kVtKeyBlocks = (kBlockN + kSm90SwizzleRowBytes - 1) / kSm90SwizzleRowBytes;
  static constexpr int kVtTileBytes =
      kTransposesV ? kVtKeyBlocks * kVtRows * kSm90SwizzleRowBytes : 0;

  // Shared-memory tiles, each a multiple of the 1024-byte swizzle atom.
  static constexpr int kQSlabBytes = kRowsPerConsumer * kHeadDim * kElementBytes;  // one consumer
  static constexpr int kQBytes = kConsumerWarpgroups * kQSlabBytes;
  static constexpr int kKVTileBytes = kBlockN * kHeadDim * kElementBytes;
  // O of one consumer staged for its TMA store (16-bit output: twice the Q slab in FP8).
  static constexpr int kOSlabBytes = kRowsPerConsumer * kHeadDim * kSm90OutputBytes;
  static constexpr int kOBytes = kConsumerWarpgroups * kOSlabBytes;
  // mbarriers (8 bytes each): q full/empty, k/v full/empty per stage, one o_free per consumer;
  // with V transposed, vt_full and v_raw_empty per stage, the transposer's stop word and its
  // v_keys word per stage (8 bytes each too); then the persistent schedulers' tile slot and,
  // where the producer stores O, one store slot per consumer (smem_layout.cuh lays them out in
  // this order)
  static constexpr int kTransposeBarriers = kTransposesV ? 3 * kStages + 1 : 0;
  static constexpr int kBarrierCount = 2 + 4 * kStages + kConsumerWarpgroups + kTransposeBarriers;
  // (By the row's switch alone, not kProducerStoresO below: that follows kOStagingInVRing, which
  // follows these bytes. A packed kernel of such a row keeps 32 unused bytes.)
  static constexpr int kOStoreSlotsBytes =
      kRow.has(Sm90Switch::kProducerStoresO) ? kConsumerWarpgroups * kSm90OStoreSlotBytes : 0;
  static constexpr int kBarrierBytes = 8 * kBarrierCount + kSm90TileSlotBytes + kOStoreSlotsBytes;
  static constexpr int kAlignmentSlack = 1024;  // dynamic smem base is only 16-byte aligned
  static constexpr int kMaxSmemBytes = kSm90MaxSmemBytes;
  static constexpr int kCoreSmemBytes = kQBytes + 2 * kStages * kKVTileBytes +
                                        kStages * kVtTileBytes + kBarrierBytes + kAlignmentSlack;
  static_assert(kCoreSmemBytes <= kMaxSmemBytes, "tile does not fit the 227 KB of shared memory");
  // Where it fits, O is staged for its TMA store in a buffer of its own instead of the Q slabs, so
  // a persistent CTA can load the next tile's Q as soon as the last S = Q K^T has completed
  // (before the epilogue) instead of after the O store has read the slab.
  static constexpr bool kSeparateOStaging = kCoreSmemBytes + kOBytes <= kMaxSmemBytes;
  static constexpr int kSmemBytes = kCoreSmemBytes + (kSeparateOStaging ? kOBytes : 0);
  // Where no separate buffer fits (d256 n80: 64 KB Q + 160 KB K/V; FP8 d256 n128: 224 KB), a
  // persistent CTA stages O in the V stages instead, consumer c's in the stage c places past the
  // tile's last V (a stage holds a consumer's 16-bit O), once every reader of the V there is done:
  // the consumers, or with V transposed the transposer (the consumers read V^T). Q then goes back
  // after the last S = Q K^T as with a separate buffer, and the next tile's Q loads under this
  // epilogue. The producer loads V into a staging stage only after that consumer's O store has
  // read it (o_free; producer.cuh). Where a stage is smaller than O (FP8, 8-bit V against 16-bit
  // O, at fewer keys than 2 x 64 rows), O goes out from registers (kRegisters).
  static constexpr bool kOStagingInVRing = !kSeparateOStaging && kKVTileBytes >= kOSlabBytes &&
                                           kStages >= kConsumerWarpgroups;
  static constexpr bool kLoneStoreWait = kOStagingInVRing && kRow.has(Sm90Switch::kLoneStoreWait);
  // The producer stores O staged in the V ring (tile_table.h, kProducerStoresO): persistent
  // unpacked tiles only, whose store the consumer describes in a slot (Sm90OStoreSlot).
  static constexpr bool kProducerStoresO =
      kOStagingInVRing && !kPacksGroups && kRow.has(Sm90Switch::kProducerStoresO);
  static constexpr Sm90OStaging kPersistentOStaging = kSeparateOStaging  ? Sm90OStaging::kOwnBuffer
                                                      : kOStagingInVRing ? Sm90OStaging::kVRing
                                                      : kTransposesV     ? Sm90OStaging::kRegisters
                                                                         : Sm90OStaging::kQSlab;
  static_assert(!kTransposesV || (kPersistent && !kPacksGroups),
                "FP8 tiles: persistent rows only (O is never staged in a Q slab), no packed GQA");
  // Arrivals that free the Q slabs for the next tile (persistent schedulers): every consumer
  // thread, after its last S wgmma completed (O staged in its own buffer or the V ring) or after
  // the O store has read the slab. Each thread arrives itself, so its read of the tile slot is
  // ordered before the producer's next write by the mbarrier alone.
  static constexpr int kQEmptyArrivals = kConsumerThreads;
};

// The configuration of row kIndex of (kHeadDim, kCausal).
template <int kHeadDim, bool kCausal, int kIndex, DType kDType, bool kPacksGroups = false,
          DType kOutDType = kDType, int kComputedHeadDim = 0>
using Sm90TableConfig =
    Sm90TileConfig<Sm90TableRow<kHeadDim, kCausal, kIndex, Sm90ElementTraits<kDType>::kBytes>,
                   kDType, kPacksGroups, kOutDType, kComputedHeadDim>;

// Row geometry of the query blocks (pure integer functions, so host tests can check them).

// First query row of block `m_block`. Without a mask, block m starts at m x BLOCK_M. Under a
// causal mask the blocks move up by whole 64-row slabs, as far as the length allows, so that
// the partial block (seqlen_q not a multiple of BLOCK_M) is the first one, whose rows see the
// fewest keys; fewer than 64 empty rows stay at the end of the last block. The first block then
// starts at a negative row, a multiple of 64: the slabs before row 0 are neither loaded nor
// stored (TMA faults on a negative coordinate), and their consumers have no row
// (sm90_slab_has_rows).
template <class Config, bool kCausal>
constexpr int sm90_block_row_begin(int m_block, int seqlen_q) {
  const int partial = seqlen_q % Config::kBlockM;
  const int empty_rows = partial != 0 ? Config::kBlockM - partial : 0;
  const int slabs_up = kCausal ? empty_rows / Config::kRowsPerConsumer : 0;
  const int shift = slabs_up * Config::kRowsPerConsumer;
  return m_block * Config::kBlockM - shift;
}

// Slabs of a block that lie wholly before row 0 (a causal first block starts at a multiple of
// 64 below it): the producer loads no Q for them, and their consumers have no row.
template <class Config>
constexpr int sm90_slabs_before_row_0(int block_row_begin) {
  return block_row_begin < 0 ? -block_row_begin / Config::kRowsPerConsumer : 0;
}

// Whether a 64-row slab starting at `slab_row_begin` holds a row of the sequence: past its end
// (the last block of a length that BLOCK_M does not divide, unmasked) or, causal, wholly before
// its start (the first block, sm90_block_row_begin) it holds none.
template <class Config>
constexpr bool sm90_slab_has_rows(int slab_row_begin, int seqlen_q) {
  return slab_row_begin < seqlen_q && slab_row_begin + Config::kRowsPerConsumer > 0;
}

}  // namespace flashcore::detail
