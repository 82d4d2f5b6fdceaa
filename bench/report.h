// The results table (stdout), progress lines (stderr) and the JSON file.
#pragma once

#include <fstream>
#include <memory>
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

// Where --json goes, opened before any run: "-" is standard output; any other path is created
// (or truncated) right away, so an unwritable one is a usage error naming the path and the OS
// error, not news after the whole run.
class JsonDestination {
 public:
  // Throws UsageError when the file cannot be opened for writing.
  explicit JsonDestination(const std::string& path);
  bool is_stdout() const { return file_ == nullptr; }
  const std::string& path() const { return path_; }
  std::ostream& stream();

 private:
  std::string path_;
  std::unique_ptr<std::ofstream> file_;  // null for standard output
};

// Writes a JSON array with one object per record; throws flashcore::Error when the write fails.
void write_json(const std::vector<BenchRecord>& records, JsonDestination& destination);

}  // namespace flashcore::bench
