// Which of a tuning row and its wave peer (tile_table.h) runs a call: the one whose tiles end
// sooner. A persistent CTA runs its tiles one after another, so a launch of `tiles` output tiles
// on `ctas` CTAs takes ceil(tiles / ctas) tiles' time: Flux's 4608 tokens x 24 heads are 576
// tiles of 192 rows, 4.4 waves on 132 SMs, the fifth one 36% full, and 864 tiles of 128 rows,
// 6.5 waves, the seventh 55% full. Pure integer functions: host tests check them.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <string>

#include "flashcore/flashcore.h"

namespace flashcore::detail {

// Tiles' time of a persistent launch: the waves of `tiles` over `ctas`, the last one partial.
constexpr int64_t sm90_tile_waves(int64_t tiles, int ctas) {
  return ctas > 0 ? (tiles + ctas - 1) / ctas : tiles;
}

// Whether the peer's tiles end sooner than the row's own: waves x rows a tile x time a row
// (the row's 100%, the peer's `peer_cost_pct`), the row's where they tie.
constexpr bool sm90_wave_peer_ends_sooner(int64_t tiles, int block_m, int64_t peer_tiles,
                                          int peer_block_m, int peer_cost_pct, int ctas) {
  return sm90_tile_waves(peer_tiles, ctas) * peer_block_m * peer_cost_pct <
         sm90_tile_waves(tiles, ctas) * block_m * 100;
}

// Keys a query at least, for a causal launch's tiles to count as about as long as one another:
// with twice as many keys as queries the first query block sees at least half the keys of the
// last (a chunked prefill). Fewer, and the tiles run from a block's keys to all of them.
constexpr int64_t kSm90EvenCausalKeysPerQuery = 2;

// Whether a causal launch's tiles are about as long as one another, so that its waves bound it
// as above. A causal tile's keys grow with its query block, and the claiming scheduler hands the
// longest out first, so CTAs end within a short tile of one another whatever the tile count;
// but where the queries are the last of many more keys every tile sees nearly all of them.
constexpr bool sm90_causal_tiles_even(int64_t seqlen_q, int64_t seqlen_k) {
  return seqlen_k >= kSm90EvenCausalKeysPerQuery * seqlen_q;
}

// The launcher's choice for a dense call of a row with a wave peer: the peer where its tiles end
// sooner, and for a causal call only where the waves bound it (sm90_causal_tiles_even).
constexpr bool sm90_wave_peer_chosen(bool causal, int64_t seqlen_q, int64_t seqlen_k,
                                     int64_t tiles, int block_m, int64_t peer_tiles,
                                     int peer_block_m, int peer_cost_pct, int ctas) {
  return (!causal || sm90_causal_tiles_even(seqlen_q, seqlen_k)) &&
         sm90_wave_peer_ends_sooner(tiles, block_m, peer_tiles, peer_block_m, peer_cost_pct,
                                    ctas);
}

// FLASHCORE_SM90_WAVE_PEERS=0 turns the choice off, so that every call runs its bucket's row
// (the GPU tests of the rows themselves); read once per process.
inline bool sm90_wave_peers_enabled() {
  static const bool enabled = [] {
    const char* env = std::getenv("FLASHCORE_SM90_WAVE_PEERS");
    if (env == nullptr || *env == '\0') return true;
    const std::string value = env;
    if (value != "0" && value != "1") {
      throw Error("FLASHCORE_SM90_WAVE_PEERS must be 0 (every call runs its seqlen bucket's "
                  "tuning row) or 1 (the default: a row's wave peer where its tiles end "
                  "sooner), got '" + value + "'");
    }
    return value == "1";
  }();
  return enabled;
}

}  // namespace flashcore::detail
