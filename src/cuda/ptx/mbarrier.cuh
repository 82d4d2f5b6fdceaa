// mbarrier (sm90): a 64-bit shared-memory barrier with an arrival count and a transaction (byte)
// count. TMA loads complete bytes on it (complete_tx), threads arrive on it, and waiters poll the
// parity of its phase: phase k completes when all arrivals and all expected bytes of phase k are in,
// and try_wait.parity(k & 1) then succeeds. A fresh barrier is in phase 0, so waiting for parity 1
// succeeds at once ("the phase before the first has completed") - producers start there.
#pragma once

#include <cstdint>

namespace flashcore::detail {

__device__ __forceinline__ uint32_t smem_u32(const void* pointer) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(pointer));
}

__device__ __forceinline__ void mbarrier_init(uint64_t* barrier, uint32_t arrival_count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(smem_u32(barrier)),
               "r"(arrival_count)
               : "memory");
}

// After the inits and before the CTA barrier that publishes them: makes the initialized barriers
// visible to the async proxy (TMA complete_tx) as well as to other threads.
__device__ __forceinline__ void mbarrier_init_fence() {
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}

// One arrival plus `bytes` more expected transaction bytes for the current phase.
__device__ __forceinline__ void mbarrier_arrive_expect_tx(uint64_t* barrier, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(
                   smem_u32(barrier)),
               "r"(bytes)
               : "memory");
}

__device__ __forceinline__ void mbarrier_arrive(uint64_t* barrier) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(smem_u32(barrier)) : "memory");
}

// `count` arrivals at once by this thread (count >= 1).
__device__ __forceinline__ void mbarrier_arrive(uint64_t* barrier, uint32_t count) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0], %1;\n" ::"r"(smem_u32(barrier)),
               "r"(count)
               : "memory");
}

// One arrival on a barrier of another CTA of the cluster (`cluster_address`: cluster_map_shared
// of the barrier's offset). The default .release.cta semantics, as CUTLASS's ClusterBarrier:
// .release.cluster compiles to MEMBAR.ALL.GPU before every arrival. Enough where the arrival only
// says that this CTA's async-proxy reads (wgmma) have completed: no ordinary writes to publish.
__device__ __forceinline__ void mbarrier_arrive_cluster(uint32_t cluster_address) {
  asm volatile("mbarrier.arrive.shared::cluster.b64 _, [%0];\n" ::"r"(cluster_address)
               : "memory");
}

// An arrival on `barrier` once every cp.async this thread issued before it has landed; .noinc:
// it counts as one of the arrivals the barrier was initialized to expect.
__device__ __forceinline__ void mbarrier_arrive_on_cp_async(uint64_t* barrier) {
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(smem_u32(barrier))
               : "memory");
}

// A parity query: `op` (try_wait or test_wait) on `barrier` sets a predicate, given as 0 / 1 in
// the uint32_t `done`.
#define FLASHCORE_MBARRIER_PARITY_QUERY(op, done, barrier, parity)      \
  asm volatile(                                                         \
      "{\n"                                                             \
      ".reg .pred ready;\n"                                             \
      "mbarrier." op ".parity.shared::cta.b64 ready, [%1], %2;\n"       \
      "selp.u32 %0, 1, 0, ready;\n"                                     \
      "}\n"                                                             \
      : "=r"(done)                                                      \
      : "r"(smem_u32(barrier)), "r"(parity)                             \
      : "memory")

// True once the phase with the given parity has completed (does not block for long: the hardware
// may suspend the thread for a bounded time before answering false).
__device__ __forceinline__ bool mbarrier_try_wait_parity(uint64_t* barrier, uint32_t parity) {
  uint32_t done;
  FLASHCORE_MBARRIER_PARITY_QUERY("try_wait", done, barrier, parity);
  return done != 0;
}

// The same, never blocking (a probe).
__device__ __forceinline__ bool mbarrier_test_wait_parity(uint64_t* barrier, uint32_t parity) {
  uint32_t done;
  FLASHCORE_MBARRIER_PARITY_QUERY("test_wait", done, barrier, parity);
  return done != 0;
}
#undef FLASHCORE_MBARRIER_PARITY_QUERY

__device__ __forceinline__ void mbarrier_wait_parity(uint64_t* barrier, uint32_t parity) {
  while (!mbarrier_try_wait_parity(barrier, parity)) {
  }
}

}  // namespace flashcore::detail
