// The results table (stdout), progress lines (stderr) and the JSON file.
#pragma once

#include <ostream>
#include <string>
#include <vector>

#include "runner.h"

namespace flashcore::bench {

// The commit flashcore-bench was configured at (git rev-parse --short HEAD, or "unknown").
const char* build_commit();

// config | backend | median ms | TFLOPS | max err / tol | lse err / tol | result
void print_table(const std::vector<BenchRecord>& records, std::ostream& os);

// "[3/74] b32 sq512 ... sm90: 0.123 ms, 451.2 TFLOPS, pass" for long grids.
void print_progress(const BenchRecord& record, size_t index, size_t count, std::ostream& os);

// A JSON array with one object per record; throws flashcore::Error when the file can't be written.
void write_json(const std::vector<BenchRecord>& records, const std::string& path);

}  // namespace flashcore::bench
