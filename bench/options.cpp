#include "options.h"

#include <cerrno>
#include <cstdlib>
#include <functional>
#include <map>
#include <optional>

#include "api/validate.h"

namespace flashcore::bench {
namespace {

// Parses a whole decimal integer in [min_value, max_value]; the flag name goes into the error,
// and `why` (the reason for the bounds, if any) after it.
int64_t parse_integer(const std::string& flag, const std::string& text, int64_t min_value,
                      int64_t max_value, const std::string& why = "") {
  errno = 0;
  char* end = nullptr;
  const long long value = std::strtoll(text.c_str(), &end, 10);
  if (text.empty() || end != text.c_str() + text.size() || errno == ERANGE || value < min_value ||
      value > max_value) {
    throw UsageError(flag + " expects an integer in [" + std::to_string(min_value) + ", " +
                     std::to_string(max_value) + "], got '" + text + "'" + why);
  }
  return value;
}

// Sizes beyond this would overflow the int fields of the API long before any GPU runs them.
constexpr int64_t kMaxDimension = 1 << 30;

// The largest head_dim of any FlashCore kernel (the library's own bound, api/validate.h). The
// cpu and reference backends would take more, but they stand in for and check the kernels:
// beyond it there is nothing to measure, and the float64 check grows with head_dim.
constexpr int64_t kMaxHeadDim = detail::kMaxCudaHeadDim;

constexpr int64_t kMaxIterations = 1000000;

bool is_known_layout(const std::string& name) {
  return name == "dense" || name == "varlen" || name == "cache" || name == "paged";
}

// "8192,4096,17": sequence lengths of a ragged batch, each in [0, kMaxDimension].
std::vector<int> parse_lengths(const std::string& text) {
  std::vector<int> lengths;
  size_t begin = 0;
  while (true) {
    const size_t comma = text.find(',', begin);
    const std::string item = text.substr(begin, comma == std::string::npos ? std::string::npos
                                                                            : comma - begin);
    lengths.push_back(static_cast<int>(parse_integer("", item, 0, kMaxDimension,
                                                     " (a comma-separated list of lengths)")));
    if (comma == std::string::npos) return lengths;
    begin = comma + 1;
  }
}

bool is_known_grid(const std::string& name) {
  return name == "default" || name == "small" || name == "standard" || name == "llm";
}

// A value that --seqlen or --heads sets for two fields, each of which its own flag overrides in
// whatever order the flags come (--heads-kv 2 --heads 8 is hq 8, hkv 2, as is the reverse).
struct PairedDimension {
  std::optional<int> both;           // --seqlen / --heads
  std::optional<int> first, second;  // --seqlen-q / --heads-q, --seqlen-k / --heads-kv

  // Fields given by no flag keep their defaults, except that with `second_follows_first` an
  // unset second takes the first's value.
  void resolve(int& first_field, int& second_field, bool second_follows_first) const {
    first_field = first.value_or(both.value_or(first_field));
    const int second_default = second_follows_first ? first_field : second_field;
    second_field = second.value_or(both.value_or(second_default));
  }
};

// GQA/MQA: each key/value head serves heads_q / heads_kv query heads, so the division must be
// exact. Checked here to name the flags; the library would only report it at run time.
void check_heads(const BenchOptions& options) {
  if (options.heads_q % options.heads_kv != 0) {
    throw UsageError("--heads-q " + std::to_string(options.heads_q) +
                     " is not a multiple of --heads-kv " + std::to_string(options.heads_kv) +
                     ": each key/value head serves heads-q / heads-kv query heads (GQA/MQA); "
                     "--heads N sets both");
  }
}

// --seqlens and --page-size belong to the serving layouts, --grid to the dense one; a ragged
// batch is sized by its list, not by --batch.
void check_layout_flags(const BenchOptions& options) {
  const bool serving = options.layout != "dense";
  if (!options.seqlens.empty() && !serving) {
    throw UsageError("--seqlens needs --layout varlen, cache or paged (a dense batch has one "
                     "length: --seqlen)");
  }
  if (!options.grid.empty() && serving) {
    throw UsageError("--grid " + options.grid + " is dense; --layout " + options.layout +
                     " runs one config");
  }
  if (!options.seqlens.empty() && options.batch_given) {
    throw UsageError("--batch " + std::to_string(options.batch) + " and --seqlens: the batch "
                     "is the number of --seqlens entries");
  }
}

}  // namespace

BenchOptions parse_options(const std::vector<std::string>& args) {
  BenchOptions options;
  PairedDimension seqlens, heads;
  using Handler = std::function<void(const std::string&)>;
  auto paired = [&](std::optional<int>* slot) {
    return [&options, slot](const std::string& value) {
      options.shape_given = true;
      *slot = static_cast<int>(parse_integer("", value, 1, kMaxDimension));
    };
  };
  // Flags that take a value; their handlers throw UsageError with an empty flag name that is
  // filled in below, so each message names the flag exactly as typed.
  const std::map<std::string, Handler> valued = {
      {"--batch",
       [&](const std::string& v) {
         options.shape_given = options.batch_given = true;
         options.batch = static_cast<int>(parse_integer("", v, 1, kMaxDimension));
       }},
      {"--layout",
       [&](const std::string& v) {
         if (!is_known_layout(v)) {
           throw UsageError(" expects dense, varlen, cache or paged, got '" + v + "'");
         }
         options.shape_given = options.shape_given || v != "dense";
         options.layout = v;
       }},
      {"--seqlens",
       [&](const std::string& v) {
         options.shape_given = true;
         options.seqlens = parse_lengths(v);
       }},
      {"--page-size",
       [&](const std::string& v) {
         options.page_size = static_cast<int>(parse_integer("", v, 1, kMaxDimension));
       }},
      {"--seqlen-q", paired(&seqlens.first)},
      {"--seqlen-k", paired(&seqlens.second)},
      {"--seqlen", paired(&seqlens.both)},
      {"--heads-q", paired(&heads.first)},
      {"--heads-kv", paired(&heads.second)},
      {"--heads", paired(&heads.both)},
      {"--head-dim",
       [&](const std::string& v) {
         options.shape_given = true;
         options.head_dim = static_cast<int>(parse_integer(
             "", v, 1, kMaxHeadDim,
             ": " + std::to_string(kMaxHeadDim) +
                 " is the largest head_dim of FlashCore's kernels"));
       }},
      {"--dtype",
       [&](const std::string& v) {
         try {
           options.dtype = parse_dtype(v);
         } catch (const Error&) {
           throw UsageError(" expects fp16, bf16, fp32 or fp8, got '" + v + "'");
         }
       }},
      {"--backend",
       [&](const std::string& v) {
         if (v != "all") {
           try {
             parse_backend(v);
           } catch (const Error&) {
             throw UsageError(" expects auto, cpu, reference, sm80, sm90 or all, got '" + v + "'");
           }
         }
         options.backend = v;
       }},
      {"--iters",
       [&](const std::string& v) {
         options.iters = static_cast<int>(parse_integer("", v, 1, kMaxIterations));
       }},
      {"--warmup",
       [&](const std::string& v) {
         options.warmup = static_cast<int>(parse_integer("", v, 0, kMaxIterations));
       }},
      {"--check-rows",
       [&](const std::string& v) {
         options.check_rows = static_cast<int>(parse_integer("", v, 1, kMaxDimension));
       }},
      {"--grid",
       [&](const std::string& v) {
         if (!is_known_grid(v)) {
           throw UsageError(" expects standard, llm, small or default, got '" + v + "'");
         }
         options.grid = v;
       }},
      {"--json",
       [&](const std::string& v) {
         if (v.empty()) {
           throw UsageError(" needs a file name, or - for standard output");
         }
         options.json_path = v;
       }},
      {"--seed",
       [&](const std::string& v) {
         options.seed = static_cast<uint64_t>(parse_integer("", v, 0, INT64_MAX));
       }},
  };

  for (size_t i = 0; i < args.size(); ++i) {
    std::string flag = args[i];
    std::string value;
    bool has_inline_value = false;
    if (const size_t eq = flag.find('='); flag.rfind("--", 0) == 0 && eq != std::string::npos) {
      value = flag.substr(eq + 1);  // --flag=value
      flag = flag.substr(0, eq);
      has_inline_value = true;
    }
    if (flag == "--help" || flag == "-h") {
      options.help = true;
      continue;
    }
    if (flag == "--causal") {
      options.causal = true;
      continue;
    }
    const auto handler = valued.find(flag);
    if (handler == valued.end()) {
      throw UsageError("unknown flag '" + args[i] + "'");
    }
    if (!has_inline_value) {
      if (i + 1 >= args.size()) {
        throw UsageError(flag + " needs a value");
      }
      value = args[++i];
    }
    try {
      handler->second(value);
    } catch (const UsageError& error) {
      throw UsageError(flag + error.what());
    }
  }

  if (!options.grid.empty() && options.shape_given) {
    throw UsageError("--grid " + options.grid +
                     " defines its own shapes: drop --batch/--seqlen*/--heads*/--head-dim "
                     "(--dtype and --causal filter a grid)");
  }
  options.seqlen_q_given = seqlens.first.has_value() || seqlens.both.has_value();
  check_layout_flags(options);
  // --seqlen-q 1 alone is decode against the default 512 keys; --heads-q 32 alone is 32 heads of
  // plain attention (MHA), not a GQA ratio against the default 4 key/value heads.
  seqlens.resolve(options.seqlen_q, options.seqlen_k, /*second_follows_first=*/false);
  heads.resolve(options.heads_q, options.heads_kv, /*second_follows_first=*/true);
  check_heads(options);
  return options;
}

std::string usage_text() {
  return R"(usage: flashcore-bench [flags]

Times FlashCore attention forward and checks every result against the float64 reference
(BENCHMARKS.md rule). With no flags: a small default (batch 1, heads 4, seqlen 512, head_dim 64,
fp16, causal and non-causal) on the best backend present, plus the reference backend.

one config (any of these selects single-config mode):
  --batch N            batch size (1)
  --seqlen N           sets --seqlen-q and --seqlen-k (512)
  --seqlen-q N         query length; wins over --seqlen in any order
  --seqlen-k N         key/value length; wins over --seqlen in any order
  --heads N            sets --heads-q and --heads-kv (4)
  --heads-q N          query heads; wins over --heads in any order
  --heads-kv N         key/value heads (default: heads-q); heads-q must be a multiple (GQA/MQA)
  --head-dim N         head dimension, 1..256 (64); GPU backends: the head dims they have
                       kernels for (64, 96, 128, 256 in a full build)
  --dtype T            fp16 | bf16 | fp32 | fp8 (fp16); GPU backends take fp16 and bf16, and
                       sm90 fp8 in every layout.
                       fp8 (e4m3): inputs quantized per (batch, kv head) with descale =
                       amax / 448, out bf16, checked by the FP8 rule (2x the fp8 baseline's
                       error + 1e-3); the cpu, reference and sm90 backends run it, sm80
                       says why not. Without other flags: the default config in this dtype; on
                       a grid: keep only this dtype
  --causal             bottom-right causal mask; without other flags or on a grid: keep only
                       the causal configs

serving layouts (one config; FLOPs count the visible pairs of each sequence):
  --layout L           dense | varlen | cache | paged (dense)
                       varlen: q and k/v packed with cu_seqlens (prefill of a ragged batch)
                       cache: decode against a contiguous kv cache [batch, capacity, ...]
                       paged: decode against a paged kv cache (pages in a shuffled order)
  --seqlens L,L,...    the sequences' lengths (keys; for varlen queries too), e.g.
                       8192,4096,2048,17,1; without it: --batch sequences of --seqlen-k
  --seqlen-q N         varlen: each sequence's last min(N, L) queries (chunked prefill);
                       cache/paged: queries per sequence (1: a decode step, the default)
  --page-size N        tokens per page of a paged cache, 1..: (16)

grids (instead of one config):
  --grid NAME          default: the no-flag default
                       small: tails, GQA/MQA, seqlen_q != seqlen_k (seconds, any backend)
                       standard: BENCHMARKS.md grid (bf16, fp16; head_dim 64/128/256; seqlen
                         512..16k, batch 16384/seqlen, heads 2048/head_dim; both masks) plus the
                         original FlashCore config and GQA prefill. GPU backends only.
                       llm: the model shapes of bench/llm_shapes.txt (Llama-3 GQA causal
                         prefill 2k-32k, MQA, Gemma d256, DiT non-causal, chunked prefill;
                         bf16). GPU backends only.

run:
  --backend B          auto | cpu | reference | sm80 | sm90 | all (every available backend that
                       can run the configs) (auto). sm80 and sm90 need a CUDA device.
  --iters N            timed runs (GPU 30, cpu 5, reference 1); the median is reported
  --warmup N           untimed runs after the checked first run (GPU 10, cpu 1, reference 0)
  --check-rows N       query rows per (batch, head) checked against the float64 reference
                       (64; 16 on the GPU grids, where the host-side check dominates)
  --seed N             input seed (default: fresh each run, printed for reproduction)
  --json FILE          also write every result as a JSON array to FILE (opened before the
                       run); --json - writes it to standard output and the table to stderr
  --help               this text

Flags are checked before anything runs: shapes, dtypes and head dims the chosen backends
cannot run, a missing GPU, a config larger than memory and an unwritable --json FILE are
usage errors.

examples:
  flashcore-bench                                # the default config, best backend + reference
  flashcore-bench --seqlen 4096 --head-dim 128 --causal --backend cpu          # one config
  flashcore-bench --heads-q 32 --heads-kv 8 --seqlen-q 1 --seqlen-k 8192      # a GQA decode step
  flashcore-bench --layout varlen --seqlens 8192,4096,2048,1024,512,256,128,64,17,1 \
      --heads-q 32 --heads-kv 8 --head-dim 128 --dtype bf16 --causal   # ragged prefill
  flashcore-bench --layout paged --page-size 16 --batch 64 --seqlen-k 4096 \
      --heads-q 32 --heads-kv 8 --head-dim 128 --dtype bf16           # paged decode
  flashcore-bench --dtype fp8 --seqlen 1024 --heads-q 8 --heads-kv 2 --causal --backend cpu
  flashcore-bench --grid standard --json results.json      # the BENCHMARKS.md grid (GPU only)
  flashcore-bench --grid llm                               # model shapes (GPU only)
  flashcore-bench --grid small --json - > small.json       # JSON on stdout, the table on stderr

exit code: 0 all results pass; 1 a failed check (an accuracy failure or a run that raised an
error); 2 a usage error (bad flags or values; nothing was run).
)";
}

}  // namespace flashcore::bench
