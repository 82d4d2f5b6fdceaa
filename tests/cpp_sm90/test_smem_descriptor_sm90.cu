// Device test of the stepped wgmma descriptors (cuda/ptx/smem_descriptor.cuh): for every tile
// start a kernel can have (1024-byte aligned, the whole tile inside the 227 KB of shared memory)
// and every k-step of the K-major and MN-major tiles the Hopper kernels read, the tile's base
// descriptor plus the step's offset equals the step's address encoded whole, bit for bit.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdint>

#include "cuda/ptx/smem_descriptor.cuh"
#include "cuda/sm90/tile_config.h"
#include "sm90_test_util.h"

namespace flashcore::sm90_test {
namespace {

constexpr uint32_t kSharedMemoryBytes = detail::kSm90MaxSmemBytes;
constexpr uint32_t kTileAlignment = detail::kSwizzleAtomBytes;

// Counts the (tile start, k-step) pairs whose two descriptors differ, over tiles of kRows rows
// and kColumnBlocks 128-byte column blocks; thread t takes tile start t x kTileAlignment.
template <int kRows, int kColumnBlocks, int kSteps, bool kMnMajor>
__global__ void count_mismatches(unsigned* mismatches) {
  constexpr uint32_t kTileBytes = kRows * kColumnBlocks * detail::kSwizzleBytes;
  const uint32_t tile = (blockIdx.x * blockDim.x + threadIdx.x) * kTileAlignment;
  if (tile + kTileBytes > kSharedMemoryBytes) return;
#pragma unroll
  for (int k = 0; k < kSteps; ++k) {
    const uint64_t stepped = kMnMajor ? detail::mnmajor_descriptor<kRows, true>(tile, k)
                                      : detail::kmajor_descriptor<kRows, true>(tile, k);
    const uint64_t encoded = kMnMajor ? detail::mnmajor_descriptor<kRows, false>(tile, k)
                                      : detail::kmajor_descriptor<kRows, false>(tile, k);
    if (stepped != encoded) atomicAdd(mismatches, 1u);
  }
}

template <int kRows, int kColumnBlocks, int kSteps, bool kMnMajor>
unsigned mismatches_on_device() {
  unsigned* count = nullptr;
  unsigned result = ~0u;
  EXPECT_EQ(cudaMalloc(&count, sizeof(unsigned)), cudaSuccess);
  EXPECT_EQ(cudaMemset(count, 0, sizeof(unsigned)), cudaSuccess);
  constexpr int kThreads = 256;
  constexpr int kStarts = kSharedMemoryBytes / kTileAlignment;
  count_mismatches<kRows, kColumnBlocks, kSteps, kMnMajor>
      <<<(kStarts + kThreads - 1) / kThreads, kThreads>>>(count);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_EQ(cudaMemcpy(&result, count, sizeof(unsigned), cudaMemcpyDeviceToHost), cudaSuccess);
  cudaFree(count);
  return result;
}

// K-major tiles, steps of 32 bytes along a row (16 elements of 16 bits, or fp8's 32): Q slabs
// (64 rows) and K blocks of 80 / 128 keys at d64 / d128 / d256 in 16 bits; fp8 d128 K blocks of
// 192 keys (one 128-byte column block) and V^T at 192 keys (128 rows, two key column blocks).
TEST(Sm90SmemDescriptor, SteppedKMajorEqualsEncoded) {
  SKIP_WITHOUT_SM90();
  EXPECT_EQ((mismatches_on_device<64, 1, 4, false>()), 0u);
  EXPECT_EQ((mismatches_on_device<64, 2, 8, false>()), 0u);
  EXPECT_EQ((mismatches_on_device<64, 4, 16, false>()), 0u);
  EXPECT_EQ((mismatches_on_device<80, 4, 16, false>()), 0u);
  EXPECT_EQ((mismatches_on_device<128, 2, 8, false>()), 0u);
  EXPECT_EQ((mismatches_on_device<192, 1, 4, false>()), 0u);
  EXPECT_EQ((mismatches_on_device<128, 2, 6, false>()), 0u);
}

// MN-major V tiles (16-bit P V), 16 keys a step: 80 and 128 keys of d128 / d256.
TEST(Sm90SmemDescriptor, SteppedMnMajorEqualsEncoded) {
  SKIP_WITHOUT_SM90();
  EXPECT_EQ((mismatches_on_device<80, 4, 5, true>()), 0u);
  EXPECT_EQ((mismatches_on_device<128, 2, 8, true>()), 0u);
}

}  // namespace
}  // namespace flashcore::sm90_test
