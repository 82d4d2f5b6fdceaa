// A timeline of the Hopper kernel, for development only (dev/sm90/trace_sm90.sh). Compiled out
// unless FLASHCORE_SM90_TRACE is defined, so the library's kernels carry none of it.
//
// With it defined, thread 0 of every warpgroup of the first kSm90TraceCtas CTAs records each
// Sm90Event it passes as one 64-bit word, the event in the top byte and the SM's clock below, into
// a buffer the tool hands over (g_sm90_trace, set by check_sm90 --trace). Per-tile costs that
// ncu's stall samples spread over many lines show up here as gaps between events.
//
// Tracing is not free: one thread per warpgroup, but each event is a clock read, a shared-memory
// counter and a global store on the consumer's critical path, so a traced kernel runs slower and
// tiles already near their register budget spill (d64 with three consumers, d256 n80): read gaps
// as relative, not as the untraced kernel's.
#pragma once

#include <cstdint>

namespace flashcore::detail {

// What a warpgroup has just finished doing. The consumers' events follow consumer_overlap.cuh's
// loop; the producer's follow producer.cuh.
enum class Sm90Event : uint8_t {
  kTileBegin = 1,     // consumer: tile known (slot read), before waiting for its Q
  kQReady = 2,        // consumer: q_full waited
  kKReady = 3,        // consumer: k_full waited
  kVReady = 4,        // consumer: v_full waited
  kTurn = 5,          // consumer: its ping-pong turn came (about to issue GEMMs)
  kIssued = 6,        // consumer: GEMMs issued, turn passed on
  kSReady = 7,        // consumer: S = Q K^T completed
  kSoftmaxDone = 8,   // consumer: P computed
  kPvDone = 9,        // consumer: O += P V completed
  kEpilogueDone = 10, // consumer: O handed to the TMA store
  kOStagingFree = 11, // consumer: its O staging buffer is free (normalized O still in registers)
  kOStaged = 12,      // consumer: O written to the staging buffer, every thread past the barrier
  kClaimed = 20,      // producer: next tile known
  kKSlotFree = 21,    // producer: k_empty waited (K load issued next)
  kVSlotFree = 22,    // producer: v_empty waited (V load issued next)
  kQSlotFree = 23,    // producer: q_empty waited (Q load issued next)
};

constexpr int kSm90TraceCtas = 4;             // CTAs traced: a few suffice, they run alike
constexpr int kSm90TraceWarpgroupThreads = 128;  // thread 0 of each records its role's events
constexpr int kSm90TraceRoles = 4;            // warpgroups: producer + up to 3 consumers
// Events kept per (CTA, warpgroup), later ones dropped: ~8 per KV step, so 16 tiles of 128 steps.
constexpr int kSm90TraceCapacity = 1 << 14;
// An event word: the Sm90Event in the top byte, the SM clock's low 56 bits below (2^56 clocks
// are over a year at 2 GHz, so a launch never wraps).
constexpr int kSm90TraceClockBits = 56;
constexpr uint64_t kSm90TraceClockMask = (uint64_t(1) << kSm90TraceClockBits) - 1;

// CTAs whose span the tool records besides (every CTA of a grid up to a few waves).
constexpr int kSm90TraceSpanCtas = 1024;

#ifdef FLASHCORE_SM90_TRACE
struct Sm90TraceBuffer {
  uint64_t* events;  // [kSm90TraceCtas][kSm90TraceRoles][kSm90TraceCapacity]
  uint32_t* counts;  // [kSm90TraceCtas][kSm90TraceRoles], events recorded by the last launch
  // [kSm90TraceSpanCtas][2]: each CTA's start and the end of its last warpgroup in the GPU's
  // global nanosecond timer, which every SM reads alike (the SM clocks of the events above are
  // each SM's own): where a launch's time goes outside the CTAs' tile loops (start, imbalance,
  // the last CTA's end). Sm90TraceRecorder::reset zeroes it.
  uint64_t* spans;
};
static __constant__ Sm90TraceBuffer g_sm90_trace;

__device__ __forceinline__ uint32_t* sm90_trace_counter() {
  __shared__ uint32_t count[kSm90TraceRoles];
  return count;
}

// Once per launch, by thread 0, before the CTA's first __syncthreads.
__device__ __forceinline__ void sm90_trace_reset() {
  for (int role = 0; role < kSm90TraceRoles; ++role) sm90_trace_counter()[role] = 0;
}

__device__ __forceinline__ void sm90_trace(Sm90Event event) {
  if (threadIdx.x % kSm90TraceWarpgroupThreads != 0 || blockIdx.x >= kSm90TraceCtas ||
      g_sm90_trace.events == nullptr) {
    return;
  }
  const int role = threadIdx.x / kSm90TraceWarpgroupThreads;
  const uint32_t index = sm90_trace_counter()[role];
  if (index >= kSm90TraceCapacity) return;
  const int slot = blockIdx.x * kSm90TraceRoles + role;
  const uint64_t clock = clock64() & kSm90TraceClockMask;
  g_sm90_trace.events[uint64_t(slot) * kSm90TraceCapacity + index] =
      (uint64_t(event) << kSm90TraceClockBits) | clock;
  sm90_trace_counter()[role] = index + 1;
  g_sm90_trace.counts[slot] = index + 1;
}

__device__ __forceinline__ uint64_t sm90_trace_global_ns() {
  uint64_t ns;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(ns));
  return ns;
}

// At the kernel's first instruction, by thread 0.
__device__ __forceinline__ void sm90_trace_span_begin() {
  if (threadIdx.x != 0 || blockIdx.x >= kSm90TraceSpanCtas || g_sm90_trace.spans == nullptr) return;
  g_sm90_trace.spans[2 * blockIdx.x] = sm90_trace_global_ns();
}

// At the kernel's end, by thread 0 of every warpgroup: the CTA's end is its latest.
__device__ __forceinline__ void sm90_trace_span_end() {
  if (threadIdx.x % kSm90TraceWarpgroupThreads != 0 || blockIdx.x >= kSm90TraceSpanCtas ||
      g_sm90_trace.spans == nullptr) {
    return;
  }
  atomicMax(reinterpret_cast<unsigned long long*>(&g_sm90_trace.spans[2 * blockIdx.x + 1]),
            static_cast<unsigned long long>(sm90_trace_global_ns()));
}
#else
__device__ __forceinline__ void sm90_trace_reset() {}
__device__ __forceinline__ void sm90_trace(Sm90Event) {}
__device__ __forceinline__ void sm90_trace_span_begin() {}
__device__ __forceinline__ void sm90_trace_span_end() {}
#endif

}  // namespace flashcore::detail
