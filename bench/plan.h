// What one invocation of flashcore-bench runs: its configs and backends, settled and checked
// before anything runs, so that every mistake in the flags is a usage error (exit 2) and not an
// ERROR row (or an hour of runs) later.
#pragma once

#include <vector>

#include "flashcore/flashcore.h"
#include "options.h"
#include "testing/accuracy.h"
#include "testing/serving_problem.h"

namespace flashcore::bench {

struct BenchPlan {
  std::vector<testing::ProblemShape> shapes;
  std::vector<testing::ServingShape> serving;  // --layout varlen|cache|paged (then no shapes)
  std::vector<Backend> backends;  // each runs every shape
};

// The configs and backends the options ask for. Throws UsageError when a GPU backend is asked
// for and there is no GPU, when a config cannot fit this machine's memory, or when the library
// would refuse a config on a backend it was explicitly asked for (--backend all drops such a
// backend with a note instead). Prints notes to stderr.
BenchPlan make_plan(const BenchOptions& options);

}  // namespace flashcore::bench
