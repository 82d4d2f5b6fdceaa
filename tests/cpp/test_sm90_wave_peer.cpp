// The wave-peer choice of the Hopper launcher (cuda/sm90/wave_peer.h, tile_table.h's wave_peer):
// on the shapes timed in run 187 (docs/kernels.md), H100, 132 SMs, the choice must pick the row
// that ran faster there: the d128 non-causal 192-row tiles (three consumers) or their peer's
// 128-row tiles (two).
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <string>

#include "cuda/sm90/tile_config.h"
#include "cuda/sm90/wave_peer.h"

namespace flashcore::detail {
namespace {

constexpr int kH100Sms = 132;

struct TimedShape {
  const char* name;
  int batch, seqlen, heads;
  bool peer_ran_faster;  // run 187: the 128-row tiles' time over the 192-row ones' < 1
};

// Dense tiles: batch x heads x query blocks.
int64_t dense_tiles(int batch, int heads, int seqlen_q, int block_m) {
  return int64_t(batch) * heads * ((seqlen_q + block_m - 1) / block_m);
}

// Whether the launcher runs row `row_index`'s wave peer for a dense d128 call, on an H100.
bool peer_chosen(bool causal, int row_index, int batch, int seqlen_q, int seqlen_k, int heads) {
  const Sm90TuningRow row = sm90_tuning_row(128, causal, row_index);
  if (row.wave_peer < 0) return false;
  const Sm90TuningRow peer = sm90_tuning_row(128, causal, row.wave_peer);
  const int block_m = row.consumers * kSm90RowsPerConsumer;
  const int peer_block_m = peer.consumers * kSm90RowsPerConsumer;
  return sm90_wave_peer_chosen(causal, seqlen_q, seqlen_k,
                               dense_tiles(batch, heads, seqlen_q, block_m), block_m,
                               dense_tiles(batch, heads, seqlen_q, peer_block_m), peer_block_m,
                               row.wave_peer_cost_pct, kH100Sms);
}

bool peer_chosen(const TimedShape& s, int row_index) {
  return peer_chosen(/*causal=*/false, row_index, s.batch, s.seqlen, s.seqlen, s.heads);
}

// The bucket's row index for a d128 non-causal call (rows ascend by max_seqlen_q).
int bucket_row(int seqlen) {
  int index = 0;
  while (sm90_tuning_row(128, false, index).max_seqlen_q < seqlen) ++index;
  return index;
}

TEST(Sm90WavePeer, PicksTheRowThatRanFasterOnTheTimedShapes) {
  const TimedShape shapes[] = {
      // name, batch, seqlen, heads, whether the 128-row tiles ran faster (their time ratio)
      {"flux 1024x1024", 1, 4608, 24, true},     // 1.033x as fast
      {"flux 1360x768", 1, 4592, 24, true},      // 1.030
      {"flux 768x768", 1, 2816, 24, true},       // 1.078
      {"flux 1024x768", 1, 3584, 24, false},     // 0.975
      {"flux 512x512", 1, 1536, 24, false},      // 0.976
      {"flux 1024x1024 b2", 2, 4608, 24, false}, // 0.932
      {"wan2.1 1.3b", 1, 32760, 12, false},      // 0.933
      {"grid 16k", 1, 16384, 16, false},         // 0.949
      {"grid 8k", 2, 8192, 16, false},           // 0.951
      {"grid 4k", 4, 4096, 16, false},           // 0.989
      {"grid 2k", 8, 2048, 16, false},           // 0.955
      {"grid 1k", 16, 1024, 16, true},           // 1.048
  };
  for (const TimedShape& s : shapes) {
    const int row = bucket_row(s.seqlen);
    ASSERT_GE(sm90_tuning_row(128, false, row).wave_peer, 0) << s.name;
    EXPECT_EQ(peer_chosen(s, row), s.peer_ran_faster) << s.name;
  }
}

// The d128 causal call's choice between the row above 2k and its peer (the last row).
bool causal_peer_chosen(int batch, int seqlen_q, int seqlen_k, int heads) {
  return peer_chosen(/*causal=*/true, sm90_row_count(128, true) - 1, batch, seqlen_q, seqlen_k,
                     heads);
}

TEST(Sm90WavePeer, CausalRowsCountWavesOnlyForEvenTiles) {
  EXPECT_FALSE(sm90_causal_tiles_even(4096, 4096));
  EXPECT_FALSE(sm90_causal_tiles_even(2048, 4095));
  EXPECT_TRUE(sm90_causal_tiles_even(2048, 4096));
  // Run 232 (docs/kernels.md): Llama-3-8B's 4k chunk of 32k keys (32 query heads) ran 0.98x as
  // fast in 192-row tiles, 704 of them (5.3 waves on 132 SMs) against 1024 (7.8).
  EXPECT_TRUE(causal_peer_chosen(1, 4096, 32768, 32));
  // Prefills whose queries are their keys keep the 192-row tiles at any wave count.
  EXPECT_FALSE(causal_peer_chosen(1, 4096, 4096, 32));
  EXPECT_FALSE(causal_peer_chosen(2, 3000, 3000, 28));
  EXPECT_FALSE(causal_peer_chosen(1, 16384, 16384, 16));
}

TEST(Sm90WavePeer, WavesAndTies) {
  EXPECT_EQ(sm90_tile_waves(576, 132), 5);  // Flux: 4 full waves and 48 tiles
  EXPECT_EQ(sm90_tile_waves(528, 132), 4);
  EXPECT_EQ(sm90_tile_waves(1, 132), 1);
  EXPECT_EQ(sm90_tile_waves(0, 132), 0);
  // Equal time: the row's own tiles.
  EXPECT_FALSE(sm90_wave_peer_ends_sooner(132, 192, 264, 96, 100, 132));
  EXPECT_TRUE(sm90_wave_peer_ends_sooner(132, 192, 264, 96, 99, 132));
  // One wave each: shorter tiles end sooner at any cost under their height ratio.
  EXPECT_TRUE(sm90_wave_peer_ends_sooner(10, 192, 15, 128, 149, 132));
  EXPECT_FALSE(sm90_wave_peer_ends_sooner(10, 192, 15, 128, 150, 132));
}

TEST(Sm90WavePeer, EnvironmentSwitchIsChecked) {
  // Read once per process; a bad value throws and leaves it unread, so the next call reads again.
  ASSERT_EQ(setenv("FLASHCORE_SM90_WAVE_PEERS", "yes", 1), 0);
  try {
    sm90_wave_peers_enabled();
    ADD_FAILURE() << "FLASHCORE_SM90_WAVE_PEERS=yes was accepted";
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("FLASHCORE_SM90_WAVE_PEERS must be 0"),
              std::string::npos)
        << error.what();
    EXPECT_NE(std::string(error.what()).find("got 'yes'"), std::string::npos) << error.what();
  }
  ASSERT_EQ(setenv("FLASHCORE_SM90_WAVE_PEERS", "0", 1), 0);
  EXPECT_FALSE(sm90_wave_peers_enabled());
  ASSERT_EQ(unsetenv("FLASHCORE_SM90_WAVE_PEERS"), 0);
  EXPECT_FALSE(sm90_wave_peers_enabled());  // read once: still the first value read
}

}  // namespace
}  // namespace flashcore::detail
