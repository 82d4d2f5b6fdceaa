// Command-line options of flashcore-bench and their parser.
#pragma once

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "flashcore/flashcore.h"

namespace flashcore::bench {

// A bad flag or value: main prints the message and a pointer to --help, then exits with code 2.
class UsageError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct BenchOptions {
  // One config from flags (used when any shape flag is given and --grid is not).
  int batch = 1;
  int seqlen_q = 512;
  int seqlen_k = 512;
  int heads_q = 4;
  int heads_kv = 4;
  int head_dim = 64;
  std::optional<DType> dtype;  // grids: keep only this dtype
  bool causal = false;         // grids: keep only causal configs
  bool shape_given = false;    // a flag that sizes a single config was given
  bool seqlen_q_given = false; // --seqlen-q or --seqlen (paged decode defaults to 1 query)
  bool batch_given = false;

  // Serving layouts (one config): --layout varlen|cache|paged, a ragged batch from --seqlens
  // (else --batch sequences of --seqlen-k keys), --page-size for a paged cache.
  std::string layout = "dense";
  std::vector<int> seqlens;
  int page_size = 16;

  std::string backend = "auto";  // auto|cpu|reference|sm80|sm90|all
  std::optional<int> iters;      // timed runs (default depends on where the backend runs)
  std::optional<int> warmup;     // untimed runs after the checked one
  std::optional<int> check_rows; // query rows compared with the float64 reference
  std::string grid;              // "", "default", "small", "standard"
  std::string json_path;
  std::optional<uint64_t> seed;  // default: a fresh random seed, printed for reproduction
  bool help = false;
};

// Throws UsageError naming the flag and the value on anything it does not understand.
BenchOptions parse_options(const std::vector<std::string>& args);

// The --help text.
std::string usage_text();

}  // namespace flashcore::bench
