// Device test of the thread-block cluster wrappers, in the way the clustered Hopper rows use them
// (src/cuda/sm90/cluster.cuh): two CTAs of a cluster each load half of a 64-row box with
// tma_load_4d_multicast into both CTAs' shared memory, each CTA's full barrier expecting the whole
// box; each CTA releases the buffer on its own empty barrier and on the peer's
// (mbarrier_arrive_cluster at cluster_map_shared's address), which expects both; three phases,
// the second with the second half partly past the sequence end and the third with it wholly past
// (zero-filled, its bytes still counted). Both CTAs must read the whole box in every phase.
#include <cuda.h>

#include <string>
#include <vector>

#include "cuda/ptx/cluster.cuh"
#include "cuda/ptx/mbarrier.cuh"
#include "cuda/ptx/smem_descriptor.cuh"
#include "cuda/ptx/tma.cuh"
#include "sm90_test_util.h"

namespace flashcore::sm90_test {
namespace {

using namespace flashcore::detail;

constexpr int kBatch = 2, kSeqlen = 100, kHeads = 3, kHeadDim = 64;
constexpr int kBoxRows = 64, kBoxCols = 64, kClusterSize = 2;
constexpr int kShareRows = kBoxRows / kClusterSize;  // rows one CTA loads for both
constexpr int kBoxBytes = kBoxRows * kBoxCols * 2;
constexpr int kPhases = 3;
struct Box {
  int row, head, batch;
};
struct Boxes {  // one per phase, passed to the kernel by value
  Box at[kPhases];
};
// Inside; rows 64..127 (the second half has rows 96..99 only); rows 80..143 (the second half
// wholly past the end).
constexpr Boxes kBoxes{{{16, 1, 0}, {64, 2, 1}, {80, 0, 1}}};

__global__ void __cluster_dims__(kClusterSize, 1, 1) __launch_bounds__(128)
    cluster_multicast_kernel(const __grid_constant__ CUtensorMap map, Boxes boxes,
                             uint16_t* loaded, uint32_t* ranks) {
  extern __shared__ __align__(16) uint8_t smem_raw[];
  __shared__ uint64_t full, empty;
  const uint32_t rank = cluster_cta_rank();
  if (threadIdx.x == 0) {
    mbarrier_init(&full, 1);
    mbarrier_init(&empty, kClusterSize);  // this CTA's release and the peer's
    mbarrier_init_fence();
    ranks[blockIdx.x] = rank;
  }
  __syncthreads();
  cluster_sync();  // both CTAs' barriers exist before any multicast or remote arrival
  uint8_t* tile = align_to_swizzle_atom(smem_raw);
  for (int phase = 0; phase < kPhases; ++phase) {
    if (threadIdx.x == 0) {
      mbarrier_wait_parity(&empty, (phase & 1) ^ 1);  // both CTAs read the previous box
      mbarrier_arrive_expect_tx(&full, kBoxBytes);     // the whole box: both shares land here
      const int share_row = static_cast<int>(rank) * kShareRows;
      tma_load_4d_multicast(tile + share_row * kSwizzleBytes, &map, &full, 0,
                            boxes.at[phase].row + share_row, boxes.at[phase].head,
                            boxes.at[phase].batch, (1u << kClusterSize) - 1);
    }
    mbarrier_wait_parity(&full, phase & 1);
    uint16_t* out = loaded + (size_t(blockIdx.x) * kPhases + phase) * kBoxRows * kBoxCols;
    for (int i = threadIdx.x; i < kBoxRows * kBoxCols; i += blockDim.x) {
      const int r = i / kBoxCols, c = i % kBoxCols;
      out[i] = *reinterpret_cast<const uint16_t*>(tile + swizzled_offset<kBoxRows>(r, c));
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      mbarrier_arrive(&empty);
      mbarrier_arrive_cluster(cluster_map_shared(smem_u32(&empty), rank ^ 1u));
    }
  }
  cluster_sync();  // no CTA exits while the peer may still arrive on its barrier
}

TEST(Sm90Cluster, MulticastHalvesAndRemoteReleases) {
  SKIP_WITHOUT_SM90();
  const size_t numel = size_t(kBatch) * kSeqlen * kHeads * kHeadDim;
  std::vector<uint16_t> input(numel);
  for (size_t i = 0; i < numel; ++i) input[i] = static_cast<uint16_t>(i % 60000 + 1);  // never 0
  DeviceBuffer<uint16_t> in_dev(input);
  DeviceBuffer<uint16_t> loaded(size_t(kClusterSize) * kPhases * kBoxRows * kBoxCols);
  DeviceBuffer<uint32_t> ranks(std::vector<uint32_t>(kClusterSize, 99));
  const BshdTensor tensor{"in", in_dev.ptr, kHeadDim, kSeqlen, kHeads, kBatch,
                          kHeads * kHeadDim, kHeadDim, int64_t(kSeqlen) * kHeads * kHeadDim};
  const CUtensorMap map = make_bshd_tensor_map(tensor, DType::kFloat16, kShareRows);
  const int smem = kBoxBytes + kSmemSlack;
  ASSERT_CUDA(cudaFuncSetAttribute(cluster_multicast_kernel,
                                   cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  cluster_multicast_kernel<<<kClusterSize, 128, smem>>>(map, kBoxes, loaded.ptr, ranks.ptr);
  ASSERT_CUDA(cudaGetLastError());
  ASSERT_CUDA(synchronize_or_exit(::testing::UnitTest::GetInstance()->current_test_info()->name()));

  const std::vector<uint32_t> got_ranks = ranks.to_host();
  for (int cta = 0; cta < kClusterSize; ++cta) EXPECT_EQ(got_ranks[cta], uint32_t(cta));
  const std::vector<uint16_t> got = loaded.to_host();
  for (int cta = 0; cta < kClusterSize; ++cta) {
    for (int phase = 0; phase < kPhases; ++phase) {
      const Box& box = kBoxes.at[phase];
      std::vector<float> expected(kBoxRows * kBoxCols), actual(kBoxRows * kBoxCols);
      for (int r = 0; r < kBoxRows; ++r)
        for (int c = 0; c < kBoxCols; ++c) {
          const int row = box.row + r;
          expected[r * kBoxCols + c] =
              row < kSeqlen
                  ? input[((size_t(box.batch) * kSeqlen + row) * kHeads + box.head) * kHeadDim + c]
                  : 0.0f;
          actual[r * kBoxCols + c] =
              got[((size_t(cta) * kPhases + phase) * kBoxRows + r) * kBoxCols + c];
        }
      EXPECT_TRUE(matrices_equal("CTA " + std::to_string(cta) + ", phase " +
                                     std::to_string(phase) + ": both halves of the box (rows >= " +
                                     std::to_string(kSeqlen - box.row) + " zero)",
                                 expected, actual, kBoxRows, kBoxCols));
    }
  }
}

}  // namespace
}  // namespace flashcore::sm90_test
