// The host side of the Hopper kernel's timelines (cuda/sm90/trace.cuh) for the dev tools that
// compile a kernel with FLASHCORE_SM90_TRACE into their own translation unit (check_sm90 --trace,
// dev/fp8/trace_fp8.cu): the device buffers behind g_sm90_trace, and the last launch's events as
// the CSV dev/sm90/trace_report.py reads. g_sm90_trace is static in each translation unit, so the
// one that compiles the kernels must include this header.
#pragma once

#ifndef FLASHCORE_SM90_TRACE
#error "trace_recorder.h needs a build with -DFLASHCORE_SM90_TRACE"
#endif

#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "cuda/sm90/trace.cuh"

namespace flashcore::detail {

class Sm90TraceRecorder {
 public:
  // Allocates the event buffers and points the kernels' g_sm90_trace at them.
  Sm90TraceRecorder() {
    check(cudaMalloc(&events_, kSlots * kSm90TraceCapacity * sizeof(uint64_t)), "cudaMalloc");
    check(cudaMalloc(&counts_, kSlots * sizeof(uint32_t)), "cudaMalloc");
    check(cudaMalloc(&spans_, kSpanWords * sizeof(uint64_t)), "cudaMalloc");
    const Sm90TraceBuffer buffer{events_, counts_, spans_};
    check(cudaMemcpyToSymbol(g_sm90_trace, &buffer, sizeof(buffer)), "cudaMemcpyToSymbol");
    reset();
  }

  // Forgets what earlier launches recorded (each launch starts its own counts from 0; a span's
  // end is the latest any launch wrote, and a CTA of a larger earlier grid would stay).
  void reset() {
    check(cudaMemset(counts_, 0, kSlots * sizeof(uint32_t)), "cudaMemset");
    check(cudaMemset(spans_, 0, kSpanWords * sizeof(uint64_t)), "cudaMemset");
  }

  // The last launch's events as `cta,warpgroup,event,clock` rows, and beside them (PATH with
  // _spans before .csv) every CTA's span as `cta,start_ns,end_ns`; exits on failure.
  void write_csv(const std::string& path) const {
    write_events(path);
    write_spans(path.substr(0, path.rfind('.')) + "_spans.csv");
  }

 private:
  static constexpr size_t kSlots = size_t(kSm90TraceCtas) * kSm90TraceRoles;
  static constexpr size_t kSpanWords = size_t(kSm90TraceSpanCtas) * 2;

  static FILE* open(const std::string& path) {
    FILE* f = std::fopen(path.c_str(), "w");
    if (f == nullptr) {
      std::fprintf(stderr, "cannot write %s\n", path.c_str());
      std::exit(1);
    }
    return f;
  }

  template <class T>
  static std::vector<T> to_host(const T* device, size_t count) {
    std::vector<T> host(count);
    check(cudaMemcpy(host.data(), device, count * sizeof(T), cudaMemcpyDeviceToHost), "cudaMemcpy");
    return host;
  }

  void write_spans(const std::string& path) const {
    const std::vector<uint64_t> spans = to_host(spans_, kSpanWords);
    FILE* f = open(path);
    std::fprintf(f, "cta,start_ns,end_ns\n");
    for (size_t cta = 0; cta < kSm90TraceSpanCtas; ++cta) {
      if (spans[2 * cta] == 0) continue;  // no such CTA in the last launch
      std::fprintf(f, "%zu,%llu,%llu\n", cta, static_cast<unsigned long long>(spans[2 * cta]),
                   static_cast<unsigned long long>(spans[2 * cta + 1]));
    }
    std::fclose(f);
  }

  void write_events(const std::string& path) const {
    const std::vector<uint64_t> events = to_host(events_, kSlots * kSm90TraceCapacity);
    const std::vector<uint32_t> counts = to_host(counts_, kSlots);
    FILE* f = open(path);
    std::fprintf(f, "cta,warpgroup,event,clock\n");
    for (size_t slot = 0; slot < kSlots; ++slot) {
      for (uint32_t i = 0; i < counts[slot]; ++i) {
        const uint64_t word = events[slot * kSm90TraceCapacity + i];
        std::fprintf(f, "%zu,%zu,%u,%llu\n", slot / kSm90TraceRoles, slot % kSm90TraceRoles,
                     unsigned(word >> kSm90TraceClockBits),
                     static_cast<unsigned long long>(word & kSm90TraceClockMask));
      }
    }
    std::fclose(f);
    std::printf("trace %s\n", path.c_str());
  }

  static void check(cudaError_t status, const char* what) {
    if (status == cudaSuccess) return;
    std::fprintf(stderr, "%s: %s\n", what, cudaGetErrorString(status));
    std::exit(1);
  }
  uint64_t* events_ = nullptr;
  uint32_t* counts_ = nullptr;
  uint64_t* spans_ = nullptr;
};

}  // namespace flashcore::detail
