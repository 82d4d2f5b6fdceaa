// TMA (sm90 bulk tensor copies): device-side loads and stores of tiles described by a CUtensorMap.
// The map lives in kernel parameter space (`const __grid_constant__ CUtensorMap`); its generic
// address is what the instructions take. Coordinates are element indices, innermost first.
// Host-side map encoding: src/cuda/sm90/tensor_map.h.
#pragma once

#include <cuda.h>  // CUtensorMap (type only; nothing from libcuda is linked)

#include <cstdint>

#include "cuda/ptx/mbarrier.cuh"

namespace flashcore::detail {

// Pulls the descriptor into the cache ahead of the first copy that uses it.
__device__ __forceinline__ void tma_prefetch_descriptor(const CUtensorMap* map) {
  asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<uint64_t>(map)) : "memory");
}

// Loads the box at (c0, c1, c2, c3) into shared memory at `dst` and completes its bytes on
// `barrier` (which must expect them: mbarrier_arrive_expect_tx). Elements outside the tensor are
// zero-filled and still count towards the bytes.
__device__ __forceinline__ void tma_load_4d(void* dst, const CUtensorMap* map, uint64_t* barrier,
                                            int c0, int c1, int c2, int c3) {
  asm volatile(
      "cp.async.bulk.tensor.4d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%3, %4, %5, %6}], [%2];\n" ::"r"(smem_u32(dst)),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(smem_u32(barrier)), "r"(c0), "r"(c1), "r"(c2),
      "r"(c3)
      : "memory");
}

// tma_load_4d into every CTA of the cluster whose bit is set in `cta_mask`: the box lands at the
// same shared-memory offset `dst` in each, and its bytes complete on the barrier at offset
// `barrier` of each (every one of those barriers must expect them).
__device__ __forceinline__ void tma_load_4d_multicast(void* dst, const CUtensorMap* map,
                                                      uint64_t* barrier, int c0, int c1, int c2,
                                                      int c3, uint16_t cta_mask) {
  asm volatile(
      "cp.async.bulk.tensor.4d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
      ".multicast::cluster [%0], [%1, {%3, %4, %5, %6}], [%2], %7;\n" ::"r"(smem_u32(dst)),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(smem_u32(barrier)), "r"(c0), "r"(c1), "r"(c2),
      "r"(c3), "h"(cta_mask)
      : "memory");
}

// Stores the shared-memory box at `src` to (c0, c1, c2, c3); elements outside the tensor are not
// written. Writers of `src` must fence_proxy_async_shared() and synchronize before this call.
__device__ __forceinline__ void tma_store_4d(const CUtensorMap* map, const void* src, int c0, int c1,
                                             int c2, int c3) {
  asm volatile(
      "cp.async.bulk.tensor.4d.global.shared::cta.tile.bulk_group [%0, {%2, %3, %4, %5}], [%1];\n" ::
          "l"(reinterpret_cast<uint64_t>(map)),
      "r"(smem_u32(src)), "r"(c0), "r"(c1), "r"(c2), "r"(c3)
      : "memory");
}

// 5-D forms of the two above, for maps whose rows interleave two dimensions (the Hopper kernel's
// query heads of a KV group packed into one tile: (head_dim, head in group, seqlen, kv head,
// batch), src/cuda/sm90/tensor_map.h).
__device__ __forceinline__ void tma_load_5d(void* dst, const CUtensorMap* map, uint64_t* barrier,
                                            int c0, int c1, int c2, int c3, int c4) {
  asm volatile(
      "cp.async.bulk.tensor.5d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%3, %4, %5, %6, %7}], [%2];\n" ::"r"(smem_u32(dst)),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(smem_u32(barrier)), "r"(c0), "r"(c1), "r"(c2),
      "r"(c3), "r"(c4)
      : "memory");
}

__device__ __forceinline__ void tma_store_5d(const CUtensorMap* map, const void* src, int c0, int c1,
                                             int c2, int c3, int c4) {
  asm volatile(
      "cp.async.bulk.tensor.5d.global.shared::cta.tile.bulk_group"
      " [%0, {%2, %3, %4, %5, %6}], [%1];\n" ::"l"(reinterpret_cast<uint64_t>(map)),
      "r"(smem_u32(src)), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(c4)
      : "memory");
}

__device__ __forceinline__ void tma_store_commit_group() {
  asm volatile("cp.async.bulk.commit_group;\n" ::: "memory");
}

// Waits until every committed store has read its shared memory (the buffer may be rewritten; the
// global writes may still be in flight).
__device__ __forceinline__ void tma_store_wait_reads() {
  asm volatile("cp.async.bulk.wait_group.read 0;\n" ::: "memory");
}

// Waits until every committed store has finished (global writes done, shared memory free).
__device__ __forceinline__ void tma_store_wait_all() {
  asm volatile("cp.async.bulk.wait_group 0;\n" ::: "memory");
}

}  // namespace flashcore::detail
