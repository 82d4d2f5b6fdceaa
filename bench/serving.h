// flashcore-bench's serving configs (--layout varlen|cache|paged): one ragged batch, built like
// the tests build theirs (testing/serving_problem.h), timed as a dense config is and checked
// sequence by sequence against the float64 reference of each sequence alone.
#pragma once

#include <string>

#include "options.h"
#include "runner.h"
#include "testing/serving_problem.h"

namespace flashcore::bench {

// The batch the options describe (options.layout is not "dense").
testing::ServingShape serving_shape_from_options(const BenchOptions& options);

// Bytes one run holds on the host (per-sequence inputs, the packed tensors, checked copies)
// and on the device (the packed tensors and index tensors).
MemoryNeed serving_memory_needed(const testing::ServingShape& shape);

// The library's reason to refuse the config on `backend`, or "". Touches no data: the index
// tensors are real host arrays (host backends check their values), the rest made-up addresses.
std::string serving_refusal_reason(const testing::ServingShape& shape, Backend backend);

// Never throws for a runtime failure of the backend: the message lands in record.error.
BenchRecord run_serving_benchmark(const testing::ServingShape& shape, Backend backend,
                                  const RunSettings& settings);

}  // namespace flashcore::bench
