// Proxy fences (sm90): order ordinary ("generic proxy") shared-memory accesses against the
// "async proxy" that TMA (cp.async.bulk) and wgmma use to read and write shared memory.
#pragma once

namespace flashcore::detail {

// Call in every thread that wrote shared memory with ordinary stores before a barrier after which
// TMA stores or wgmma read that memory (and after which those engines' writes are read back).
__device__ __forceinline__ void fence_proxy_async_shared() {
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}

}  // namespace flashcore::detail
