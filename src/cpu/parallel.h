// A minimal parallel-for over an index range with std::thread (no pool: CPU attention calls are
// long enough that thread start-up, ~tens of microseconds, does not matter).
#pragma once

#include <algorithm>
#include <cstdint>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

namespace flashcore::detail {

// Calls task(i) for every i in [0, count), spread over the machine's hardware threads in
// interleaved order so that expensive neighbouring items (e.g. causal rows) balance out.
template <typename Task>
void parallel_for(int64_t count, const Task& task) {
  if (count <= 0) return;
  int64_t workers = std::max<int64_t>(1, std::thread::hardware_concurrency());
  workers = std::min(workers, count);
  if (workers == 1) {
    for (int64_t i = 0; i < count; ++i) task(i);
    return;
  }
  std::exception_ptr failure;
  std::mutex failure_mutex;
  auto run = [&](int64_t worker) {
    try {
      for (int64_t i = worker; i < count; i += workers) task(i);
    } catch (...) {
      std::lock_guard<std::mutex> lock(failure_mutex);
      if (!failure) failure = std::current_exception();
    }
  };
  std::vector<std::thread> threads;
  threads.reserve(workers - 1);
  for (int64_t w = 1; w < workers; ++w) threads.emplace_back(run, w);
  run(0);
  for (std::thread& thread : threads) thread.join();
  if (failure) std::rethrow_exception(failure);
}

}  // namespace flashcore::detail
