#include "report.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <sstream>

#include "options.h"

#ifndef FLASHCORE_BENCH_COMMIT
#define FLASHCORE_BENCH_COMMIT "unknown"
#endif

namespace flashcore::bench {
namespace {

std::string fixed(double value, int digits) {
  std::ostringstream os;
  os << std::fixed << std::setprecision(digits) << value;
  return os.str();
}

std::string scientific(double value) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.2e", value);
  return text;
}

std::string backend_label(const BenchRecord& r) {
  if (r.backend_ran.empty() || r.backend_ran == r.backend) {
    return r.backend;
  }
  return r.backend + ":" + r.backend_ran;  // auto:sm90
}

std::string result_label(const BenchRecord& r) {
  if (!r.error.empty()) {
    return "ERROR";
  }
  return r.pass ? "pass" : "FAIL";
}

std::string error_cell(double err, double tol, bool checked) {
  return checked ? scientific(err) + " / " + scientific(tol) : "-";
}

// JSON string with the escapes the messages can need.
std::string quoted(const std::string& text) {
  std::string out = "\"";
  for (const char c : text) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char escaped[8];
          std::snprintf(escaped, sizeof(escaped), "\\u%04x", c);
          out += escaped;
        } else {
          out += c;
        }
    }
  }
  return out + "\"";
}

// Means standard output as a --json path (the usual command-line convention).
constexpr const char* kStdoutPath = "-";

// JSON has no NaN or Inf: those become null.
std::string number(double value) {
  if (!std::isfinite(value)) {
    return "null";
  }
  std::ostringstream os;
  os << std::setprecision(9) << value;
  return os.str();
}

}  // namespace

const char* build_commit() { return FLASHCORE_BENCH_COMMIT; }

void print_table(const std::vector<BenchRecord>& records, std::ostream& os) {
  const std::vector<std::string> header = {"config", "backend", "median ms", "TFLOPS",
                                           "max err / tol", "lse err / tol", "result"};
  std::vector<std::vector<std::string>> rows;
  for (const BenchRecord& r : records) {
    const bool ran = r.error.empty();
    const bool checked = r.accuracy.has_value();
    rows.push_back({config_text(r), backend_label(r), ran ? fixed(r.median_ms, 3) : "-",
                    ran ? fixed(r.tflops, r.tflops < 10 ? 3 : 1) : "-",
                    error_cell(checked ? r.accuracy->max_err_out : 0,
                               checked ? r.accuracy->tol_out : 0, checked),
                    error_cell(checked ? r.accuracy->max_err_lse : 0,
                               checked ? r.accuracy->tol_lse : 0, checked),
                    result_label(r)});
  }
  std::vector<size_t> width(header.size());
  for (size_t c = 0; c < header.size(); ++c) {
    width[c] = header[c].size();
    for (const auto& row : rows) {
      width[c] = std::max(width[c], row[c].size());
    }
  }
  auto print_row = [&](const std::vector<std::string>& cells) {
    for (size_t c = 0; c < cells.size(); ++c) {
      os << (c == 0 ? "" : " | ") << std::left << std::setw(static_cast<int>(width[c]))
         << cells[c];
    }
    os << "\n";
  };
  print_row(header);
  std::vector<std::string> rule;
  for (const size_t w : width) {
    rule.push_back(std::string(w, '-'));
  }
  print_row(rule);
  for (const auto& row : rows) {
    print_row(row);
  }
  // Failures get their full story under the table: the worst element or the error message.
  for (const BenchRecord& r : records) {
    if (!r.error.empty()) {
      os << "ERROR " << config_text(r) << " [" << r.backend << "]: " << r.error << "\n";
    } else if (!r.pass && r.accuracy) {
      os << "FAIL " << config_text(r) << " [" << backend_label(r)
         << "]: " << r.accuracy->summary() << "\n";
    }
  }
}

void print_progress(const BenchRecord& record, size_t index, size_t count, std::ostream& os) {
  os << "[" << index + 1 << "/" << count << "] " << config_text(record) << " "
     << backend_label(record) << ": ";
  if (!record.error.empty()) {
    os << "ERROR " << record.error << "\n";
  } else {
    os << fixed(record.median_ms, 3) << " ms, "
       << fixed(record.tflops, record.tflops < 10 ? 3 : 1) << " TFLOPS, " << result_label(record)
       << "\n";
  }
  os.flush();
}

JsonDestination::JsonDestination(const std::string& path) : path_(path) {
  if (path == kStdoutPath) {
    return;
  }
  errno = 0;
  file_ = std::make_unique<std::ofstream>(path);
  if (!*file_) {
    const int error = errno;  // the open(2) failure; std::ofstream reports only that it failed
    throw UsageError("--json " + path + ": cannot open for writing: " +
                     (error != 0 ? std::strerror(error) : "reason unknown"));
  }
}

std::ostream& JsonDestination::stream() { return file_ ? *file_ : std::cout; }

void write_json(const std::vector<BenchRecord>& records, JsonDestination& destination) {
  std::ostream& file = destination.stream();
  file << "[\n";
  for (size_t i = 0; i < records.size(); ++i) {
    const BenchRecord& r = records[i];
    const testing::ProblemShape& s = r.shape;
    file << "  {\"batch\": " << s.batch << ", \"seqlen_q\": " << s.seqlen_q
         << ", \"seqlen_k\": " << s.seqlen_k << ", \"heads_q\": " << s.heads_q
         << ", \"heads_kv\": " << s.heads_kv << ", \"head_dim\": " << s.head_dim
         << ", \"dtype\": " << quoted(to_string(s.dtype))
         << ", \"out_dtype\": " << quoted(to_string(s.output_dtype()))
         << ", \"causal\": " << (s.causal ? "true" : "false")
         << ", \"softmax_scale\": " << number(s.scale()) << ", \"flops\": " << number(record_flops(r));
    if (r.serving) {
      const testing::ServingShape& serving = *r.serving;
      auto list = [](const std::vector<int>& values) {
        std::string text = "[";
        for (size_t i = 0; i < values.size(); ++i) {
          text += (i ? ", " : "") + std::to_string(values[i]);
        }
        return text + "]";
      };
      file << ",\n   \"layout\": " << quoted(testing::to_string(serving.kv))
           << ", \"seqlens_q\": " << list(serving.q_lens)
           << ", \"seqlens_k\": " << list(serving.k_lens)
           << ", \"page_size\": " << (serving.kv == testing::KvLayout::kPaged
                                            ? std::to_string(serving.page_size)
                                            : "null");
    } else {
      file << ",\n   \"layout\": \"dense\"";
    }
    file
         << ",\n   \"backend\": " << quoted(r.backend)
         << ", \"backend_ran\": " << quoted(r.backend_ran) << ", \"device\": " << quoted(r.device)
         << ", \"commit\": " << quoted(build_commit()) << ", \"version\": " << quoted(version())
         << ", \"seed\": " << r.seed << ",\n   \"warmup\": " << r.warmup
         << ", \"iters\": " << r.iters << ", \"input_copies\": " << r.input_copies
         << ", \"median_ms\": " << (r.error.empty() ? number(r.median_ms) : "null")
         << ", \"min_ms\": " << (r.error.empty() ? number(r.min_ms) : "null")
         << ", \"tflops\": " << (r.error.empty() ? number(r.tflops) : "null");
    if (r.accuracy) {
      const testing::AccuracyReport& a = *r.accuracy;
      file << ",\n   \"max_err_out\": " << number(a.max_err_out)
           << ", \"baseline_err_out\": " << number(a.baseline_err_out)
           << ", \"tol_out\": " << number(a.tol_out)
           << ", \"max_err_lse\": " << number(a.max_err_lse)
           << ", \"baseline_err_lse\": " << number(a.baseline_err_lse)
           << ", \"tol_lse\": " << number(a.tol_lse)
           << ", \"nonfinite\": " << (a.nonfinite ? "true" : "false")
           << ", \"rows_checked\": " << a.rows_checked << ", \"worst\": " << quoted(a.worst);
    }
    file << ",\n   \"error\": " << (r.error.empty() ? "null" : quoted(r.error))
         << ", \"pass\": " << (r.pass ? "true" : "false") << "}"
         << (i + 1 < records.size() ? ",\n" : "\n");
  }
  file << "]\n";
  file.flush();
  if (!file) {
    throw Error("--json " + destination.path() + ": write failed");
  }
}

}  // namespace flashcore::bench
