// Row geometry of the Hopper kernel's query blocks (cuda/sm90/tile_config.h), checked on the host
// for every length up to a few blocks: the slabs that hold rows cover [0, seqlen_q) exactly once,
// none of them starts before row 0 (TMA faults on a negative coordinate), and under a causal mask
// the empty rows of the partial block sit in the first block, in whole slabs. A GPU run can only
// show a wrong geometry as a wrong answer on the lengths it happens to test.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "cuda/common/accumulator_layout.h"
#include "cuda/sm90/tile_config.h"

namespace flashcore::detail {
namespace {

constexpr int kMaxSeqlen = 1000;  // > 5 blocks of 192 rows: every remainder, several times

template <class Config, bool kCausal>
void check_lengths() {
  for (int seqlen_q = 1; seqlen_q <= kMaxSeqlen; ++seqlen_q) {
    SCOPED_TRACE("BLOCK_M " + std::to_string(Config::kBlockM) + (kCausal ? " causal" : "") +
                 " seqlen_q " + std::to_string(seqlen_q));
    const int m_blocks = (seqlen_q + Config::kBlockM - 1) / Config::kBlockM;
    std::vector<int> covered(seqlen_q, 0);
    for (int m_block = 0; m_block < m_blocks; ++m_block) {
      const int block_begin = sm90_block_row_begin<Config, kCausal>(m_block, seqlen_q);
      if (!kCausal) EXPECT_EQ(block_begin, m_block * Config::kBlockM);
      int rows_in_block = 0;
      const int skipped = sm90_slabs_before_row_0<Config>(block_begin);  // the producer's count
      for (int consumer = 0; consumer < Config::kConsumerWarpgroups; ++consumer) {
        const int slab_begin = block_begin + consumer * Config::kRowsPerConsumer;
        // The producer skips exactly the slabs wholly before row 0, which hold no row.
        EXPECT_EQ(consumer < skipped, slab_begin + Config::kRowsPerConsumer <= 0)
            << "block " << m_block << " consumer " << consumer;
        if (consumer < skipped) EXPECT_FALSE(sm90_slab_has_rows<Config>(slab_begin, seqlen_q));
        if (!sm90_slab_has_rows<Config>(slab_begin, seqlen_q)) continue;
        ASSERT_GE(slab_begin, 0) << "a slab with rows would be loaded from a negative row";
        for (int row = slab_begin; row < slab_begin + Config::kRowsPerConsumer; ++row) {
          if (row < seqlen_q) {
            ++covered[row];
            ++rows_in_block;
          }
        }
      }
      // Unmasked, only the last block may be partial. Causal, the empty rows go to the first
      // block in whole slabs (its rows see the fewest keys); what is left, under a slab, stays
      // at the end of the last.
      const bool last = m_block == m_blocks - 1;
      if (!last && (!kCausal || m_block > 0)) {
        EXPECT_EQ(rows_in_block, Config::kBlockM) << "block " << m_block;
      }
      if (kCausal && last && m_blocks > 1) {
        EXPECT_GT(rows_in_block, Config::kBlockM - Config::kRowsPerConsumer) << "last block";
      }
    }
    for (int row = 0; row < seqlen_q; ++row) ASSERT_EQ(covered[row], 1) << "row " << row;
  }
}

// BLOCK_M 192 (three consumers) and 128 (two), as the tuning table uses them.
struct ThreeConsumerRow {
  static constexpr Sm90TuningRow kRow{64, false, kAnySeqlen, 128, 2, 3,
                                      Sm90Scheduling::kPersistent, kSm90L2SectionMiB,
                                      Sm90Switch::kNone};
};
struct TwoConsumerRow {
  static constexpr Sm90TuningRow kRow{128, false, kAnySeqlen, 128, 2, 2,
                                      Sm90Scheduling::kPersistent, kSm90L2SectionMiB,
                                      Sm90Switch::kNone};
};
using ThreeConsumers = Sm90TileConfig<ThreeConsumerRow, DType::kBFloat16>;
using TwoConsumers = Sm90TileConfig<TwoConsumerRow, DType::kBFloat16>;

TEST(Sm90RowGeometry, SlabsCoverEveryRowOnceWithoutNegativeCoordinates) {
  check_lengths<ThreeConsumers, false>();
  check_lengths<ThreeConsumers, true>();
  check_lengths<TwoConsumers, false>();
  check_lengths<TwoConsumers, true>();
}

TEST(Sm90RowGeometry, CausalPartialBlockComesFirst) {
  // 1k rows in blocks of 192: 5 x 192 + 64. The first block's two leading slabs lie before
  // row 0, so its one live slab holds rows 0-63, which see one KV tile, not eight.
  EXPECT_EQ((sm90_block_row_begin<ThreeConsumers, true>(0, 1024)), -128);
  EXPECT_EQ((sm90_block_row_begin<ThreeConsumers, true>(5, 1024)), 1024 - 192);
  EXPECT_EQ((sm90_block_row_begin<ThreeConsumers, false>(5, 1024)), 960);
  // 1000 rows in blocks of 128: 104 in the partial block; 24 empty rows are less than a slab,
  // so the blocks stay where they are.
  EXPECT_EQ((sm90_block_row_begin<TwoConsumers, true>(0, 1000)), 0);
  EXPECT_FALSE(sm90_slab_has_rows<ThreeConsumers>(-64, 1024));
  EXPECT_TRUE(sm90_slab_has_rows<ThreeConsumers>(0, 1024));
  EXPECT_FALSE(sm90_slab_has_rows<ThreeConsumers>(1024, 1024));
}

// Which calls pack a KV group's query heads into one tile's rows: a power-of-two group of 1 to
// 64 (a 64-row slab holds whole positions, the row split is a shift) and at most 64 query rows.
// Everything else keeps one head per tile.
TEST(Sm90RowGeometry, PackedGroupsOnlyWherePositionsFitWholeSlabs) {
  EXPECT_TRUE(sm90_packs_query_groups(32, 8, 1));    // decode, GQA 4:1
  EXPECT_TRUE(sm90_packs_query_groups(8, 1, 64));    // G 8, the longest packed length
  EXPECT_TRUE(sm90_packs_query_groups(64, 1, 1));    // MQA, G 64: one position per slab
  EXPECT_TRUE(sm90_packs_query_groups(4, 2, 17));    // G 2
  EXPECT_FALSE(sm90_packs_query_groups(8, 1, 65));   // unpacked tiles are more than half full
  EXPECT_TRUE(sm90_packs_query_groups(8, 8, 1));     // MHA: G 1, for split-KV
  EXPECT_FALSE(sm90_packs_query_groups(6, 2, 1));    // G 3: not a power of two
  EXPECT_FALSE(sm90_packs_query_groups(128, 1, 1));  // G 128: a position would span two slabs
  EXPECT_FALSE(sm90_packs_query_groups(8, 0, 1));
  EXPECT_FALSE(sm90_packs_query_groups(7, 2, 1));
}

// Split-KV plans: only packed calls whose tiles fill at most half the SMs split, and then the
// splits cover every KV block once (none empty), keep at least kSm90MinKvBlocksPerSplit blocks
// where the keys allow, and never give one SM more than one split of a tile.
TEST(Sm90RowGeometry, KvSplitPlansCoverEveryKvBlockOnce) {
  const std::pair<int, int> head_pairs[] = {{8, 2}, {32, 8}, {64, 1}, {32, 32}, {6, 2}};
  int split_plans = 0;
  for (int num_sms : {3, 132}) {
    for (int batch : {1, 2, 16, 64}) {
      for (auto [heads_q, heads_kv] : head_pairs) {
        for (int seqlen_q : {1, 4, 64, 65}) {
          for (int seqlen_k : {1, 100, 1000, 5003, 16384}) {
            for (int head_dim : {64, 96, 128, 256}) {
              for (bool causal : {false, true}) {
                const Sm90KvSplitPlan plan = sm90_kv_split_plan(
                    batch, heads_q, heads_kv, seqlen_q, seqlen_k, head_dim, causal, num_sms);
                if (plan.splits == 1) continue;
                ++split_plans;
                SCOPED_TRACE("b" + std::to_string(batch) + " hq" + std::to_string(heads_q) +
                             " hkv" + std::to_string(heads_kv) + " sq" +
                             std::to_string(seqlen_q) + " sk" + std::to_string(seqlen_k) + " d" +
                             std::to_string(head_dim) + (causal ? " causal" : "") + " sms " +
                             std::to_string(num_sms));
                ASSERT_TRUE(sm90_packs_query_groups(heads_q, heads_kv, seqlen_q));
                const Sm90TuningRow shape =
                    sm90_packed_row(sm90_kernel_head_dim(head_dim), causal);
                const int kv_blocks = (seqlen_k + shape.block_n - 1) / shape.block_n;
                const int block_m = 64 * shape.consumers;
                const int tiles =
                    (seqlen_q * (heads_q / heads_kv) + block_m - 1) / block_m * heads_kv * batch;
                EXPECT_LE(plan.splits, kSm90MaxKvSplits);
                EXPECT_LE(tiles * plan.splits, num_sms);
                EXPECT_GE(plan.splits * plan.blocks_per_split, kv_blocks) << "a block left out";
                EXPECT_LT((plan.splits - 1) * plan.blocks_per_split, kv_blocks) << "empty split";
                EXPECT_LE(plan.splits, (kv_blocks + kSm90MinKvBlocksPerSplit - 1) /
                                           kSm90MinKvBlocksPerSplit);
              }
            }
          }
        }
      }
    }
  }
  EXPECT_GT(split_plans, 100);
  // Batch-1 decode of Llama-3-8B (GQA 4:1, d128, 16k keys) on 132 SMs: 8 tiles, 16 splits of 8
  // KV blocks. Batch 16 fills 128 SMs unsplit.
  const Sm90KvSplitPlan decode = sm90_kv_split_plan(1, 32, 8, 1, 16384, 128, false, 132);
  EXPECT_EQ(decode.splits, 16);
  EXPECT_EQ(decode.blocks_per_split, 8);
  EXPECT_EQ(sm90_kv_split_plan(16, 32, 8, 1, 16384, 128, false, 132).splits, 1);
  EXPECT_EQ(sm90_kv_split_workspace_bytes(decode, 1, 32, 1, 128),
            kSm90SplitWorkspaceOffset + 16 * 32 * 129 * 4);
}

// FP8 P V: the A operand positions of a k32 step hold the keys the S accumulator already keeps in
// the same lane (fp8_a_position_key), a permutation of the step's 32 keys; the register and byte
// the conversion (accumulator_to_a_fragments, e4m3) reads for each position is that key's.
TEST(Sm90Fp8Layout, APositionsArePermutedKeysOfTheSameLane) {
  std::vector<int> seen(32, 0);
  for (int position = 0; position < 32; ++position) {
    const int key = fp8_a_position_key(position);
    ASSERT_GE(key, 0);
    ASSERT_LT(key, 32);
    ++seen[key];
  }
  for (int key = 0; key < 32; ++key) EXPECT_EQ(seen[key], 1) << "key " << key;
  for (int lane_in_quad = 0; lane_in_quad < 4; ++lane_in_quad) {
    for (int reg = 0; reg < 4; ++reg) {  // a[2h + r]: h the 16-column half, r the row half
      const int h = reg / 2, r = reg % 2;
      for (int byte = 0; byte < 4; ++byte) {
        const int position = 16 * h + 4 * lane_in_quad + byte;  // PTX ISA: k of (reg, byte)
        // The accumulator register the e4m3 conversion packs into that byte (k-step 0).
        const int acc = 8 * h + 2 * r + 4 * (byte / 2) + byte % 2;
        const int chunk = acc / kAccRegsPerChunk;
        EXPECT_EQ(acc_reg(chunk, r, byte % 2), acc);
        const int column = kAccChunkColumns * chunk + kAccPairColumns * lane_in_quad + byte % 2;
        EXPECT_EQ(column, fp8_a_position_key(position))
            << "lane " << lane_in_quad << " reg " << reg << " byte " << byte;
      }
    }
  }
}

// FP8 head dims and tiles: 64 and 96 run the d128 kernels (a column block is 128 bytes), and the
// fp8 rows fit shared memory with O staged in a buffer of its own (d128) or in a raw V stage
// (d256: 128 keys x 256 bytes hold a consumer's 64 rows of 16-bit O).
TEST(Sm90Fp8Layout, KernelHeadDimsAndTiles) {
  EXPECT_EQ(sm90_kernel_head_dim(64, 1), 128);
  EXPECT_EQ(sm90_kernel_head_dim(96, 1), 128);
  EXPECT_EQ(sm90_kernel_head_dim(128, 1), 128);
  EXPECT_EQ(sm90_kernel_head_dim(256, 1), 256);
  EXPECT_EQ(sm90_kernel_head_dim(64), 64);
  EXPECT_EQ(sm90_kernel_head_dim(96), 128);
  for (bool causal : {false, true}) {
    EXPECT_EQ(sm90_row_count(128, causal, 1), 2);  // n128 up to 2k, n192 above
    EXPECT_EQ(sm90_row_count(256, causal, 1), causal ? 1 : 2);  // non-causal: turns up to 2k
    EXPECT_EQ(sm90_row_count(64, causal, 1), 3);  // n128 up to 512 and 2k, n160 above
  }
  // FP8 d64 has rows of its own on d128 tiles (128-byte rows of zero-filled columns), computing
  // its 64 columns: three consumers fit 160 registers each, O in a buffer of its own.
  using D64 = Sm90TableConfig<64, true, 0, DType::kFloat8E4M3, false, DType::kBFloat16>;
  static_assert(D64::kHeadDim == 128 && D64::kComputedHeadDim == 64);
  static_assert(D64::kConsumerWarpgroups == 3 && D64::kConsumerRegisters == 160);
  EXPECT_EQ(D64::kPersistentOStaging, Sm90OStaging::kOwnBuffer);
  EXPECT_LE(D64::kSmemBytes, D64::kMaxSmemBytes);
  // V^T holds the 64 computed rows only.
  static_assert(D64::kVtRows == 64);
  EXPECT_EQ(D64::kVtTileBytes, 64 * 128);
  // 513 to 2k: three stages, 40 KB each, O still in a buffer of its own (192 KB).
  using D64Mid = Sm90TableConfig<64, false, 1, DType::kFloat8E4M3, false, DType::kBFloat16>;
  static_assert(D64Mid::kBlockN == 128 && D64Mid::kStages == 3);
  EXPECT_EQ(D64Mid::kPersistentOStaging, Sm90OStaging::kOwnBuffer);
  EXPECT_LE(D64Mid::kSmemBytes, D64Mid::kMaxSmemBytes);
  // Above 2k, 160-key blocks: V^T in two 128-key column blocks, the second holding 32 keys.
  using D64Long = Sm90TableConfig<64, false, 2, DType::kFloat8E4M3, false, DType::kBFloat16>;
  static_assert(D64Long::kBlockN == 160 && D64Long::kConsumerWarpgroups == 3);
  EXPECT_EQ(D64Long::kVtTileBytes, 2 * 64 * 128);
  EXPECT_LE(D64Long::kSmemBytes, D64Long::kMaxSmemBytes);
  using D128 = Sm90TableConfig<128, false, 0, DType::kFloat8E4M3, false, DType::kBFloat16>;
  using D256 = Sm90TableConfig<256, true, 0, DType::kFloat8E4M3, false, DType::kFloat16>;
  static_assert(D128::kTransposesV && D256::kTransposesV);
  EXPECT_EQ(D128::kPersistentOStaging, Sm90OStaging::kOwnBuffer);
  EXPECT_EQ(D256::kPersistentOStaging, Sm90OStaging::kVRing);
  EXPECT_EQ(D256::kKVTileBytes, D256::kOSlabBytes);
  EXPECT_LE(D128::kSmemBytes, D128::kMaxSmemBytes);
  EXPECT_LE(D256::kSmemBytes, D256::kMaxSmemBytes);
  EXPECT_EQ(D128::kVtTileBytes, 128 * 128);
  EXPECT_EQ(D128::kOSlabBytes, 2 * D128::kQSlabBytes);  // 16-bit O of 8-bit inputs
  // d128 n128 fits the 40 / 232 split; d256 n128 (O 128 + S 64 + P 16 + ~40) takes 24 / 240,
  // which the transposer's loop fits (v_transpose.cuh).
  EXPECT_EQ(D128::kConsumerRegisters, 232);
  EXPECT_EQ(D128::kProducerRegisters, 40);
  EXPECT_EQ(D256::kConsumerRegisters, 240);
  EXPECT_EQ(D256::kProducerRegisters, 24);
  EXPECT_EQ(D256::kVtTileBytes, 256 * 128);
  // d128 above 2k: 192 keys a block, V^T in two 128-key column blocks (the second half used),
  // O 64 + S 96 + P 24 + ~40 still within the 40 / 232 split, O in a buffer of its own.
  using D128Long = Sm90TableConfig<128, true, 1, DType::kFloat8E4M3, false, DType::kBFloat16>;
  static_assert(D128Long::kBlockN == 192 && D128Long::kVtKeyBlocks == 2);
  EXPECT_EQ(D128Long::kVtTileBytes, 2 * 128 * 128);
  EXPECT_EQ(D128Long::kConsumerRegisters, 232);
  EXPECT_EQ(D128Long::kPersistentOStaging, Sm90OStaging::kOwnBuffer);
  EXPECT_LE(D128Long::kSmemBytes, D128Long::kMaxSmemBytes);
  // d128 takes no ping-pong turns; d256 causal takes them where its leader waits (the dense
  // layout's unpacked tiles: consumer_overlap.cuh), as does d256 non-causal up to 2k only. The
  // 16-bit rows all take them.
  static_assert(!D128::kPingPong && !D128::kTurnsWhereLeaderWaits);
  static_assert(D256::kPingPong && D256::kLeaderWaitsKv && D256::kTurnsWhereLeaderWaits);
  using D256Short = Sm90TableConfig<256, false, 0, DType::kFloat8E4M3, false, DType::kBFloat16>;
  using D256Long = Sm90TableConfig<256, false, 1, DType::kFloat8E4M3, false, DType::kBFloat16>;
  static_assert(D256Short::kRow.max_seqlen_q == 2048 && D256Short::kTurnsWhereLeaderWaits);
  // Its serving kernels would be the next row's (no turns where no leader waits): dense only.
  static_assert(D256Short::kRow.dense_only && !D256Long::kRow.dense_only);
  static_assert(!D256Long::kPingPong && !D256Long::kTurnsWhereLeaderWaits);
  // The 16-bit configurations are what they were: no V^T, the same barriers.
  using Bf16 = Sm90TableConfig<128, false, 0, DType::kBFloat16>;
  static_assert(!Bf16::kTransposesV && Bf16::kVtTileBytes == 0 && Bf16::kPingPong);
  EXPECT_EQ(Bf16::kBarrierCount, 2 + 4 * Bf16::kStages + Bf16::kConsumerWarpgroups);
  EXPECT_EQ(Bf16::kOBytes, Bf16::kQBytes);
  // Both d256 kinds stage O in a V stage; in the FP8 one only the storing consumer thread waits
  // for the store's read, in the 16-bit one the producer stores O (the dense kernels; elsewhere
  // the consumer's whole warpgroup waits), with a store slot per consumer past the tile slot.
  using Bf16D256 = Sm90TableConfig<256, true, 0, DType::kBFloat16>;
  using Bf16D256Full = Sm90TableConfig<256, false, 0, DType::kBFloat16>;
  EXPECT_EQ(Bf16D256::kPersistentOStaging, Sm90OStaging::kVRing);
  static_assert(D256::kLoneStoreWait && !Bf16D256::kLoneStoreWait);
  static_assert(!D256::kProducerStoresO && D256::kOStoreSlotsBytes == 0);
  static_assert(Bf16D256::kProducerStoresO && Bf16D256Full::kProducerStoresO);
  EXPECT_EQ(Bf16D256::kOStoreSlotsBytes, 2 * kSm90OStoreSlotBytes);
  EXPECT_EQ(Bf16D256::kBarrierBytes,
            8 * Bf16D256::kBarrierCount + kSm90TileSlotBytes + 2 * kSm90OStoreSlotBytes);
  EXPECT_LE(Bf16D256::kSmemBytes, Bf16D256::kMaxSmemBytes);
  // Packed (decode) tiles have no slot to describe their stores: the consumer stores.
  using Bf16D256Packed = Sm90TableConfig<256, true, 0, DType::kBFloat16, true>;
  static_assert(!Bf16D256Packed::kProducerStoresO);
  static_assert(!D128::kLoneStoreWait && !D128::kProducerStoresO);  // O in a buffer of its own
  // The transposer's words: vt_full, v_raw_empty and v_keys per stage, and the stop word.
  EXPECT_EQ(D256::kBarrierCount,
            2 + 4 * D256::kStages + D256::kConsumerWarpgroups + 3 * D256::kStages + 1);
}

}  // namespace
}  // namespace flashcore::detail
