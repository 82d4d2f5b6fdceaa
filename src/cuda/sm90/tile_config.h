// The Hopper kernel's tile table: rows per (head_dim, causal, seqlen_q bucket), everything else
// derived from them.
//
// A CTA is a producer warpgroup (TMA) and two or three consumers that each own 64 query rows (the
// wgmma M), so BLOCK_M = 128 or 192. Per consumer thread the registers hold the O accumulator
// (64 x head_dim / 128 threads) plus S (64 x BLOCK_N / 128) plus P as 16-bit pairs (half of S);
// that must fit in kConsumerRegisters with room for addresses and softmax state.
//   d64 : O 32 + S 64 + P 32 = 128 regs; smem 16K Q + 2 x 2 x 16K K/V = 80 KB
//   d128: O 64 + S 64 + P 32 = 160 regs; smem 32K Q + 2 x 2 x 32K K/V = 160 KB
//         (three consumers at n80: O 64 + S 40 + P 20 = 124 regs of 160; 48K Q + 80 KB K/V)
//   d256: O 128 + S 40 + P 20 = 188 regs; smem 64K Q + 2 x 2 x 40K K/V = 224 KB (of 227 KB)
// BLOCK_N is a multiple of 16 (the K of the P V wgmma) and at most 256 (wgmma N, TMA box rows).
#pragma once

#include <cstdint>
#include <initializer_list>

namespace flashcore::detail {

// How the consumer warpgroups order their work (see consumer.cuh and consumer_overlap.cuh).
enum class Sm90Schedule : int {
  kPlain = 0,            // stage 2: QK^T, softmax, PV in turn; kept as the safe reference
  kOverlapPingPong = 1,  // stage 3: QK^T of tile t+1 beside PV of tile t, warpgroups take turns
  kPersistent = 2,       // stage 4: kOverlapPingPong in persistent CTAs (one per SM) claiming
                         // tiles dynamically, the next tile's loads overlapping this epilogue
  kPersistentPlain = 3,  // kPlain consumers in persistent CTAs
  kOverlapOnly = 4,      // kOverlapPingPong without the turn barriers (measures what they do)
};

constexpr bool sm90_is_persistent(Sm90Schedule schedule) {
  return schedule == Sm90Schedule::kPersistent || schedule == Sm90Schedule::kPersistentPlain;
}
// Persistent CTAs take their tiles in a fixed stride (blockIdx.x, + gridDim.x, ...) when every
// tile costs the same (no mask); under a causal mask tiles differ by up to seqlen / BLOCK_N KV
// steps, so CTAs claim the next tile through a global counter instead and the ones that drew short
// tiles take more. The fixed stride needs no counter, so no reset on the stream before the launch.
constexpr bool sm90_claims_tiles(Sm90Schedule schedule, bool causal) {
  return sm90_is_persistent(schedule) && causal;
}
// Where a persistent CTA stages a consumer's O for its TMA store (one-tile CTAs always use the Q
// slab: there is no next tile to load). Sm90TileConfig::kPersistentOStaging picks it.
enum class Sm90OStaging : int {
  kQSlab = 0,      // the consumer's Q slab: the next Q loads only after the store has read it
  kOwnBuffer = 1,  // a buffer of its own past the K/V ring: Q goes back after the last S = Q K^T
  kVRing = 2,      // a V stage (no room for a buffer): Q goes back after the last S = Q K^T too
};

constexpr bool sm90_is_overlapped(Sm90Schedule schedule) {
  return schedule == Sm90Schedule::kOverlapPingPong || schedule == Sm90Schedule::kPersistent ||
         schedule == Sm90Schedule::kOverlapOnly;
}

// MiB of K/V per L2 section of the tile order (Sm90TileOrder). 8 beat 24, 16 and 4 by 1-4% at
// 1k-16k on the H200 (persistent CTAs claim tiles dynamically, so small sections cost no balance).
constexpr int kSm90L2ReuseMiB = 8;

struct Sm90TileShape {
  int head_dim;
  bool causal;
  int max_seqlen_q;       // the row serves calls with seqlen_q up to this (kAnySeqlen: all)
  int block_n;            // keys per K/V tile
  int stages;             // K/V tiles in flight in the shared-memory ring
  Sm90Schedule schedule;  // what run_sm90_forward launches
  int consumers;          // consumer warpgroups of 64 query rows: BLOCK_M = 64 x consumers
  int l2_reuse_mib = kSm90L2ReuseMiB;  // the tile order's L2 section (Sm90TileConfig)
};

constexpr int kAnySeqlen = 0x7fffffff;

// Elements of one 128-byte swizzled row (16-bit types): the width of a column block, which is
// both a TMA box's inner dimension and the unit the tiles' head_dim is built from.
constexpr int kSm90BoxCols = 64;

// Query rows of one consumer warpgroup: the wgmma M. BLOCK_M = consumers x this.
constexpr int kSm90RowsPerConsumer = 64;

// The persistent schedules' tile slot behind the mbarriers: the decoded Sm90Tile (five ints,
// pipeline.cuh checks the size) that the producer hands the consumers with each Q.
constexpr int kSm90TileSlotBytes = 32;

// The table: the fastest correct configuration per head_dim, mask and sequence length measured
// on an H200 (bf16, standard grid batch 16384 / seqlen, heads 2048 / head_dim, 512..16k;
// docs/kernels_sm90.md has the sweeps behind each row). Per (head_dim, causal) 1 to
// kSm90MaxRowsPerMask rows by ascending max_seqlen_q (the row serves seqlen_q up to it), the last
// with kAnySeqlen; each row is one more kernel in every instance's translation unit.
// TFLOPS in the comments: H200, bf16, 8 MiB L2 sections, variants interleaved in one process
// (dev/sm90/results/2026-11-21-h200-buckets/: time_a.log the sweep, confirm.log / time_b.log the
// defaults beside the previous rows; same-config duplicates agree within 3%).
constexpr int kSm90MaxRowsPerMask = 4;
constexpr Sm90TileShape kSm90TileTable[] = {
    // d64: BLOCK_M 192 (three consumers, FA3's choice): 507-541 at 4k-16k vs 420-460 with two.
    // 3 stages tie with 2 (two timing passes; one earlier pass read +7% at 16k, not reproduced).
    {64, false, 4096, 128, 2, Sm90Schedule::kPersistent, 3},  // 334/399/477/502 at 512..4k
    // > 4k: one CTA per tile reads +5-7% over persistent on the H100 (538 / 555 vs 514-534 /
    // 518-526 at 8k / 16k, dev/sm90/results/2026-11-21-h100-turns/sweep.log) and read +7% at 16k
    // in one of two H200 passes; tie at 4k.
    {64, false, kAnySeqlen, 128, 2, Sm90Schedule::kOverlapPingPong, 3},
    // causal <= 512: three consumers and three stages. 512 = 128 + 192 + 192 from row -64 leaves
    // a block past the diagonal of the upper slabs of two tiles, which lost to BLOCK_M 128 (241
    // vs 227-234, H100) until those slabs passed their dead blocks (sm90_dead_blocks): 253 / 253
    // against 242 / 241 for two consumers, 246 with two stages (two interleaved sweeps,
    // dev/sm90/results/2026-11-22-h100-dead-blocks/sweep_512_*.log).
    {64, true, 512, 128, 3, Sm90Schedule::kPersistent, 3},
    // causal <= 1k: three consumers since the partial block goes first (095ba5f): 330 vs 322
    // with two, 335 with 24 MiB L2 sections (the same in two calls; one earlier call 338 vs
    // 325). At 2k the larger sections lose (415 vs 425), so only this row has them
    // (dev/sm90/results/2026-11-21-h100-d64-causal-1k).
    {64, true, 1024, 128, 2, Sm90Schedule::kPersistent, 3, 24},
    // > 1k: 385 / 439 / 507 / 522 at 2k / 4k / 8k / 16k; overlap n128 s3 (the old > 4k row)
    // 360 / 427 / 503 / 522.
    {64, true, kAnySeqlen, 128, 2, Sm90Schedule::kPersistent, 3},
    // d128 non-causal <= 512: persistent n128 s2 (own O staging), 512 at 512.
    // 1k-4k: three consumers at n80 (BLOCK_M 192; O 64 + S 40 + P 20 fit 160 registers, n96
    // spills): H100 sweeps 657 / 690 at 2k / 4k against 621 / 663 for n128 two consumers, 489
    // vs 512 at 512; standard grid bf16 1.03x cuDNN at 2k / 4k against 0.99 / 1.00
    // (dev/sm90/results/2026-11-21-h100-d128-three-consumers). The third consumer fills the
    // tensor pipe while two run their softmax, as for d64. At 1k they tied (585 vs 589) until
    // the m-block-fastest tile order and the bit-prefix mask (1024 = 12 x 80 + 64 masks a block
    // per tile): 584 / 586 against 565 / 572 in two interleaved sweeps
    // (dev/sm90/results/2026-11-22-h100-dead-blocks/sweep_d128_1k_*.log).
    // > 4k: the sweeps read 721 / 718 at 8k / 16k against 695 / 664 for overlap n176, but in the
    // grid (cuDNN interleaved) bf16 read 688 / 658 against 694 / 668 and fp16 638 / 582 against
    // 665 / 602: overlap n176 stays there.
    {128, false, 512, 128, 2, Sm90Schedule::kPersistent, 2},
    {128, false, 4096, 80, 2, Sm90Schedule::kPersistent, 3},
    {128, false, kAnySeqlen, 176, 2, Sm90Schedule::kOverlapPingPong, 2},
    // causal <= 512: 4 MiB L2 sections, 334 / 334 against 327 / 326 with 8 (the same sweeps;
    // at 1k 4 MiB read 466 / 468 against 469 / 470).
    {128, true, 512, 128, 2, Sm90Schedule::kPersistent, 2, 4},
    {128, true, 4096, 128, 2, Sm90Schedule::kPersistent, 2},  // 323/441/537/597 at 512..4k
    // Causal with three consumers at n80 lost 4-10% at 512-4k and tied at 8k / 16k.
    {128, true, kAnySeqlen, 160, 2, Sm90Schedule::kPersistent, 2},  // 640 / 675 at 8k / 16k
    // d256: 80 not 128: two 40 KB stages and the 64 KB Q fit 227 KB of shared memory. n64: 2-15%
    // slower everywhere.
    // Persistent at every length since O is staged in the V ring (Q handed back before the
    // epilogue): H100, 490/633/708/776/813/779 at 512..16k vs overlap 470/577/630/736/779/735
    // (dev/sm90/results/2026-11-21-h100-o-in-v-ring/sweep.log; with O in the Q slab overlap
    // won above 4k).
    {256, false, kAnySeqlen, 80, 2, Sm90Schedule::kPersistent, 2},
    // causal: persistent ties or beats overlap at every length, so one kernel, not two:
    // H100 311/473/565/638/692/787 at 512..16k vs overlap 288/433/525/617/674/779.
    {256, true, kAnySeqlen, 80, 2, Sm90Schedule::kPersistent, 2},
};

// How many rows (head_dim, causal) has, and its index-th row in table order (rows of one
// (head_dim, causal) are listed by ascending max_seqlen_q, the last with kAnySeqlen).
constexpr int sm90_row_count(int head_dim, bool causal) {
  int count = 0;
  for (const Sm90TileShape& shape : kSm90TileTable)
    count += (shape.head_dim == head_dim && shape.causal == causal) ? 1 : 0;
  return count;
}

constexpr Sm90TileShape sm90_tile_row(int head_dim, bool causal, int index) {
  Sm90TileShape found{0, false, 0, 0, 0, Sm90Schedule::kPlain, 2};
  int seen = 0;
  for (const Sm90TileShape& shape : kSm90TileTable) {
    if (shape.head_dim == head_dim && shape.causal == causal) {
      if (seen == index) return shape;
      ++seen;
    }
  }
  return found;
}

// The rows of every (head_dim, causal) cover all lengths in ascending order: the launcher walks
// them with if constexpr, so a wrong order would silently skip a bucket.
constexpr bool sm90_rows_ordered() {
  for (int head_dim : {64, 128, 256}) {
    for (bool causal : {false, true}) {
      const int rows = sm90_row_count(head_dim, causal);
      if (rows == 0 || rows > kSm90MaxRowsPerMask) return false;
      if (sm90_tile_row(head_dim, causal, rows - 1).max_seqlen_q != kAnySeqlen) return false;
      for (int i = 1; i < rows; ++i)
        if (sm90_tile_row(head_dim, causal, i - 1).max_seqlen_q >=
            sm90_tile_row(head_dim, causal, i).max_seqlen_q)
          return false;
    }
  }
  return true;
}
static_assert(sm90_rows_ordered(), "kSm90TileTable: 1-4 rows per (head_dim, causal), ascending "
                                   "max_seqlen_q, the last one kAnySeqlen");

// The kernel head_dim that serves a call's head_dim: the next multiple of 64, the width of a
// 128-byte swizzled column block that the tiles are built from. 96 runs the 128 kernels, which
// compute the zero-filled extra columns too: a third more tensor work than a 96-wide tile, but no
// kernels of its own to tune or compile (docs/kernels_sm90.md has its figures).
constexpr int sm90_kernel_head_dim(int head_dim) {
  return (head_dim + kSm90BoxCols - 1) / kSm90BoxCols * kSm90BoxCols;
}

// The general (longest-sequence) row: the defaults of Sm90TileConfig.
constexpr Sm90TileShape sm90_tile_shape(int head_dim, bool causal = false) {
  return sm90_tile_row(head_dim, causal, sm90_row_count(head_dim, causal) - 1);
}

// The schedule run_sm90_forward uses: the table's row, or for experiments every head_dim forced
// to one schedule at build time with -DFLASHCORE_SM90_SCHEDULE=0|1|2|3|4.
constexpr Sm90Schedule sm90_default_schedule(const Sm90TileShape& row) {
#ifdef FLASHCORE_SM90_SCHEDULE
  return row.head_dim > 0 ? static_cast<Sm90Schedule>(FLASHCORE_SM90_SCHEDULE)
                          : Sm90Schedule::kPlain;
#else
  return row.schedule;
#endif
}

// GQA tiles with the query heads of a KV group packed into their rows (Sm90TileConfig::
// kPacksGroups): row r of a tile is query position r / G of the group's head r % G, so one tile
// reads the group's K/V once for all G heads. Unpacked, a call with few query rows gives every
// query head a tile of its own that is mostly empty rows, and each of those tiles reads the
// group's K/V again: decode (seqlen_q 1, GQA 4:1, d128) ran at 1.4 TB/s of K/V against cuDNN's
// 3.0 (docs/results/2026-11-21_h100_a683102_decode). Packed when G is a power of two (the row
// split is a shift) of at most 64 (a consumer's 64-row slab holds whole positions) and seqlen_q
// is at most half a 128-row tile: from there on unpacked tiles are mostly full and the G tiles of
// a group share its K/V through the L2 (the tile order's sections). G = 1 (MHA) packs nothing
// but takes the packed kernels too, for their split-KV (below) and rowless-consumer skipping.
constexpr int kSm90MaxPackedGroup = 64;
constexpr int kSm90MaxPackedSeqlenQ = 64;

constexpr bool sm90_packs_query_groups(int heads_q, int heads_kv, int seqlen_q) {
  if (heads_kv <= 0 || heads_q % heads_kv != 0) return false;
  const int group = heads_q / heads_kv;
  const bool power_of_two = (group & (group - 1)) == 0;
  return group >= 1 && power_of_two && group <= kSm90MaxPackedGroup &&
         seqlen_q <= kSm90MaxPackedSeqlenQ;
}

// The tile row of packed calls: the table's shortest-sequence row (persistent at every head_dim),
// whose own bucket holds every length that is packed. Its 2 K/V stages: a third tied on the
// H200 (decode at batch 16-64, geomean / cuDNN 0.868 vs 0.867,
// docs/results/2026-11-21_h200_85fec3f_packed_stages); one consumer with two CTAs per SM won on
// the H200 and lost on the H100 (docs/results/2026-11-21_one_consumer_decode_not_kept).
constexpr Sm90TileShape sm90_packed_tile_shape(int head_dim, bool causal) {
  return sm90_tile_row(head_dim, causal, 0);
}

// The largest BLOCK_M of a packed tile (it bounds the split-KV partials, validate.cpp), and a
// check that every packed row serves every packed length.
constexpr int sm90_max_packed_block_m() {
  int block_m = 0;
  for (int head_dim : {64, 128, 256}) {
    for (bool causal : {false, true}) {
      const Sm90TileShape shape = sm90_packed_tile_shape(head_dim, causal);
      if (shape.max_seqlen_q < kSm90MaxPackedSeqlenQ) return -1;
      const int rows = shape.consumers * kSm90RowsPerConsumer;
      block_m = rows > block_m ? rows : block_m;
    }
  }
  return block_m;
}
static_assert(sm90_max_packed_block_m() > 0,
              "packed calls run a row that serves their lengths unpacked");

// Split-KV for packed calls with few tiles: decode at batch 1 runs one tile per KV head (8 for
// Llama-3-8B) on a 132-SM card, each walking every key alone (0.24-0.37x cuDNN at 16k keys,
// docs/results/2026-11-21_h100_b099331_packed). When the tiles fill at most half the SMs, each
// tile's KV blocks are cut into contiguous splits, one CTA each; every split writes its O
// (normalized by its own row sum, fp32) and lse to the caller's workspace, and a combine kernel
// weights the splits by their lse (split_combine.cuh). A split keeps at least
// kSm90MinKvBlocksPerSplit KV blocks; the limit binds only for short KV (1k keys: 8 splits of
// one block against 4 of two). H100, ncu at batch-1 decode (GQA 4:1, d128; attention + combine,
// us; dev/sm90/decode_kernels.py): 2 blocks 15.6 / 18.8 / 34.6 at 1k / 4k / 16k keys, 4 blocks
// 17.9 / 19.2 / 36.3, 1 block 14.7 / 19.1 / 35.2 (the same plan as 2 at 4k and 16k); cuDNN
// 12.1 / 18.0 / 33.4. Replayed as CUDA graphs (dev/sm90/decode_graph_timing.py), 1k keys: 1
// block 8.5 / 9.7 us a call against 8.8 / 10.6 for 2 (back to back / behind an elementwise
// kernel; dev/sm90/results/2026-11-21-h100-pdl).
#ifdef FLASHCORE_SM90_MIN_KV_BLOCKS_PER_SPLIT  // experiments: set it for every TU (C++ and CUDA)
constexpr int kSm90MinKvBlocksPerSplit = FLASHCORE_SM90_MIN_KV_BLOCKS_PER_SPLIT;
#else
constexpr int kSm90MinKvBlocksPerSplit = 1;
#endif
constexpr int kSm90MaxKvSplits = 64;

struct Sm90KvSplitPlan {
  int splits = 1;            // 1: no split
  int blocks_per_split = 0;  // KV blocks (BLOCK_N keys) per split
};

// The plan of a call, from its shape and the device's SM count. The launcher and
// attention_workspace_bytes both take it from here, so the workspace a caller sizes is the one
// the launch uses.
constexpr Sm90KvSplitPlan sm90_kv_split_plan(int batch, int heads_q, int heads_kv, int seqlen_q,
                                             int seqlen_k, int head_dim, bool causal,
                                             int num_sms) {
  const Sm90KvSplitPlan none;
  if (!sm90_packs_query_groups(heads_q, heads_kv, seqlen_q) || batch <= 0 || seqlen_q <= 0 ||
      seqlen_k <= 0 || num_sms <= 0) {
    return none;
  }
  const Sm90TileShape shape = sm90_packed_tile_shape(sm90_kernel_head_dim(head_dim), causal);
  if (shape.block_n <= 0) return none;  // no kernel for this head_dim
  const int64_t rows = int64_t(seqlen_q) * (heads_q / heads_kv);
  const int64_t block_m = int64_t(kSm90RowsPerConsumer) * shape.consumers;
  const int64_t tiles = (rows + block_m - 1) / block_m * heads_kv * batch;
  if (2 * tiles > num_sms) return none;
  const int kv_blocks = (seqlen_k + shape.block_n - 1) / shape.block_n;
  int64_t splits = num_sms / tiles;
  const int64_t by_work = (kv_blocks + kSm90MinKvBlocksPerSplit - 1) / kSm90MinKvBlocksPerSplit;
  splits = splits < by_work ? splits : by_work;
  splits = splits < kSm90MaxKvSplits ? splits : kSm90MaxKvSplits;
  if (splits <= 1) return none;
  Sm90KvSplitPlan plan;
  plan.blocks_per_split = static_cast<int>((kv_blocks + splits - 1) / splits);
  plan.splits = (kv_blocks + plan.blocks_per_split - 1) / plan.blocks_per_split;  // none empty
  return plan;
}

// Workspace of a split call past the tile counters: per split, O (head_dim floats) and lse of
// every (batch, head, query row).
// Bytes before the partials: the tile counters (8 bytes) come first, and the partials start on
// a 256-byte boundary of the workspace, so the combine kernel's loads of a row start aligned to
// whole L2 sectors whatever the counters grow to.
constexpr int64_t kSm90SplitWorkspaceOffset = 256;
constexpr int64_t sm90_kv_split_workspace_bytes(const Sm90KvSplitPlan& plan, int batch,
                                                int heads_q, int seqlen_q, int head_dim) {
  if (plan.splits <= 1) return 0;
  return kSm90SplitWorkspaceOffset + int64_t(plan.splits) * batch * heads_q * seqlen_q *
                                         (head_dim + 1) * int64_t(sizeof(float));
}

// A tile configuration; the defaults are the table's row, explicit values are for tuning sweeps
// (dev/sm90/check_sm90 --sweep). kPacksGroups_: the tiles' rows hold the query heads of a KV
// group (sm90_packs_query_groups).
template <int kHeadDim_, int kBlockN_ = sm90_tile_shape(kHeadDim_).block_n,
          int kStages_ = sm90_tile_shape(kHeadDim_).stages,
          int kConsumers_ = sm90_tile_shape(kHeadDim_).consumers,
          int kL2ReuseMiB_ = kSm90L2ReuseMiB, bool kPacksGroups_ = false>
struct Sm90TileConfig {
  static_assert(kBlockN_ > 0 && kStages_ > 0, "head_dim has no row in kSm90TileTable");
  static_assert(kConsumers_ == 2 || kConsumers_ == 3, "2 or 3 consumer warpgroups");

  static constexpr int kHeadDim = kHeadDim_;
  static constexpr bool kPacksGroups = kPacksGroups_;
  static constexpr int kConsumerWarpgroups = kConsumers_;
  // Bytes of K and V that the CTAs running at one time should share through the L2 (50 MB on an
  // H100 / H200): the tile order's section size (Sm90TileOrder).
  static constexpr int64_t kL2ReuseBytes = int64_t(kL2ReuseMiB_) << 20;
  static constexpr int kRowsPerConsumer = kSm90RowsPerConsumer;
  static_assert(!kPacksGroups || kRowsPerConsumer % kSm90MaxPackedGroup == 0,
                "packed tiles: every slab must start at a whole query position");
  static constexpr int kBlockM = kConsumerWarpgroups * kRowsPerConsumer;
  static constexpr int kBlockN = kBlockN_;
  static constexpr int kStages = kStages_;
  static constexpr int kThreadsPerWarpgroup = 128;
  static constexpr int kThreads = (1 + kConsumerWarpgroups) * kThreadsPerWarpgroup;
  static constexpr int kConsumerThreads = kConsumerWarpgroups * kThreadsPerWarpgroup;

  // setmaxnreg budgets: 40 x 128 + 232 x 256 = 24 x 128 + 240 x 256 = 64512 <= 65536 registers
  // of the SM; at launch __launch_bounds__(384, 1) caps every thread at 168 (65536 / 384, rounded
  // down to 8). Tiles whose O + S + P registers plus ~40 for addresses and softmax state pass 232
  // take the 24 / 240 split (the producer loop fits 24).
  // Three consumers (BLOCK_M 192, 512 threads): 24 x 128 + 160 x 384 = 64512.
  static constexpr int kConsumerRegisterEstimate = kHeadDim / 2 + kBlockN / 2 + kBlockN / 4 + 40;
  static constexpr bool kWideConsumers = kConsumerRegisterEstimate > 232;
  static constexpr int kProducerRegisters = kConsumers_ == 3 ? 24 : kWideConsumers ? 24 : 40;
  static constexpr int kConsumerRegisters = kConsumers_ == 3 ? 160 : kWideConsumers ? 240 : 232;
  static_assert(kConsumers_ == 2 || kConsumerRegisterEstimate <= 160 + 8,
                "three consumers leave 160 registers each: O + S + P of this tile do not fit");

  // Where the overlapped consumer rescales O (consumer_overlap.cuh): between its QK^T and P V
  // issues instead of after P V completes. H100, library default A B A B
  // (dev/sm90/results/2026-11-21-h100-rescale): d128 +1.4-3% at 4k-16k and GQA, short lengths
  // +-1%; d64 -2..-5% at 8k-16k (three consumers: the multiplies sit inside the turn the other
  // two wait for); d256 +-2%. So d128 only.
  static constexpr bool kRescaleUnderQk = kHeadDim == 128;
  // Lazy rescaling of O (softmax.cuh). H100, A B A B against the eager kernel
  // (dev/sm90/results/2026-11-21-h100-lazy-rescale): d256 +0.6..+5.2% (128 multiplies per step
  // after the P V wait), d128 +0..+3%; d64 (three consumers at 160 registers, 32 multiplies)
  // lost 3-7% at 2k-16k non-causal with it. fp16 (with an exact second max, softmax.cuh): d128
  // non-causal 2k / 4k +10% / +9%, d256 +4-10% (dev/sm90/results/2026-11-21-h100-fp16-lazy).
  static constexpr bool kLazyRescale = kHeadDim != 64;
  // Causal masks start at each warp's own diagonal block (sm90_warp_first_masked) rather than the
  // tile's first row's. H100, A B A B (dev/sm90/results/2026-11-21-h100-warp-mask): d256 causal
  // 1k-16k +2.6..+5.8% (a 128-row tile spans two or three 80-column blocks); d64 causal 8k -2%
  // in three alternations (the code moved, not the work), d128 within the spread. So d256 only.
  static constexpr bool kWarpMaskStart = kHeadDim == 256;
  // Causal consumers pass the turns of the KV blocks past their own rows' diagonal without GEMMs
  // (sm90_dead_blocks). Three consumers only: H100, A B C / C B A against 737ee40, d64 causal 1k
  // +3.9% (a 192-row tile's first slab is a 128-key block short of its last), 2k +0.6%; with two
  // consumers d256 causal lost 4% at 2k-16k, and d64 causal 512 (then 128-row tiles on 128-key
  // blocks, no dead block) 4% from the code alone (dev/sm90/results/2026-11-22-h100-dead-blocks).
  static constexpr bool kSkipsDeadBlocks = kConsumers_ == 3;

  static constexpr int kElementBytes = 2;  // fp16 / bf16
  static constexpr int kBoxCols = kSm90BoxCols;  // one 128-byte swizzled row per TMA box
  static constexpr int kColumnBlocks = kHeadDim / kBoxCols;
  static_assert(kHeadDim % kBoxCols == 0, "head_dim must be a multiple of 64 for 128B swizzle");
  static_assert(kBlockN % 16 == 0 && kBlockN <= 256, "BLOCK_N: multiple of 16, at most 256");

  // Shared-memory tiles, each a multiple of the 1024-byte swizzle atom.
  static constexpr int kQSlabBytes = kRowsPerConsumer * kHeadDim * kElementBytes;  // one consumer
  static constexpr int kQBytes = kConsumerWarpgroups * kQSlabBytes;
  static constexpr int kKVTileBytes = kBlockN * kHeadDim * kElementBytes;
  // mbarriers (8 bytes each): q full/empty, k/v full/empty per stage, one o_free per consumer;
  // then the persistent schedules' tile slot (smem_layout.cuh lays them out in this order)
  static constexpr int kBarrierCount = 2 + 4 * kStages + kConsumerWarpgroups;
  static constexpr int kBarrierBytes = 8 * kBarrierCount + kSm90TileSlotBytes;
  static constexpr int kAlignmentSlack = 1024;  // dynamic smem base is only 16-byte aligned
  static constexpr int kMaxSmemBytes = 227 * 1024;
  static constexpr int kCoreSmemBytes =
      kQBytes + 2 * kStages * kKVTileBytes + kBarrierBytes + kAlignmentSlack;
  static_assert(kCoreSmemBytes <= kMaxSmemBytes, "tile does not fit the 227 KB of shared memory");
  // Where it fits, O is staged for its TMA store in a buffer of its own instead of the Q slabs, so
  // a persistent CTA can load the next tile's Q as soon as the last S = Q K^T has completed
  // (before the epilogue) instead of after the O store has read the slab.
  static constexpr bool kSeparateOStaging = kCoreSmemBytes + kQBytes <= kMaxSmemBytes;
  static constexpr int kSmemBytes = kCoreSmemBytes + (kSeparateOStaging ? kQBytes : 0);
  // Where no separate buffer fits (d256 n80: 64 KB Q + 160 KB K/V), a persistent CTA stages O in
  // the V stages instead, consumer c's in the stage c places past the tile's last V (each 32 KB
  // slab in a 40 KB stage), once every consumer has read the V there. Q then goes back after the
  // last S = Q K^T as with a separate buffer, and the next tile's Q loads under this epilogue
  // instead of after it: staged in the Q slab, the d256 tile boundary took ~2 main-loop periods
  // against ~0.9 for d128 (dev/sm90/results/2026-11-21-h100-trace). The producer loads V into a
  // staging stage only after that consumer's O store has read it (o_free; producer.cuh).
  static constexpr bool kOStagingInVRing = !kSeparateOStaging && kKVTileBytes >= kQSlabBytes &&
                                           kStages >= kConsumerWarpgroups;
  static constexpr Sm90OStaging kPersistentOStaging = kSeparateOStaging  ? Sm90OStaging::kOwnBuffer
                                                      : kOStagingInVRing ? Sm90OStaging::kVRing
                                                                         : Sm90OStaging::kQSlab;
  // Arrivals that free the Q slabs for the next tile (persistent schedules): every consumer thread,
  // after its last S wgmma completed (O staged in its own buffer or the V ring) or after the O
  // store has read the slab.
  // Each thread arrives itself, so its read of the tile slot is ordered before the producer's next
  // write by the mbarrier alone (racecheck sees that; a chain through a named barrier it did not).
  static constexpr int kQEmptyArrivals = kConsumerThreads;
};

// Row geometry of the query blocks (pure integer functions, so host tests can check them).

// First query row of block `m_block`. Without a mask, block m starts at m x BLOCK_M. Under a
// causal mask the blocks move up by whole 64-row slabs, as far as the length allows, so that
// the partial block (seqlen_q not a multiple of BLOCK_M) is the first one, whose rows see the
// fewest keys; fewer than 64 empty rows stay at the end of the last block. Aligned to the
// start, the partial block was the last one and visited every KV tile for a fraction of its
// rows: at 1k with BLOCK_M 192, 8 KV steps for 64 rows, against 1 step at the top; over the
// blocks of a head, 32 KV steps against 27. The first block then starts at a negative row, a
// multiple of 64: the slabs before row 0 are neither loaded nor stored (TMA faults on a negative
// coordinate: an illegal instruction on the H100), and their consumers have no row
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
