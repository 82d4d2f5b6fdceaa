// Device tests of TMA, mbarrier, named barriers and setmaxnreg, in the way the Hopper kernel uses
// them:
//   (c) mbarrier expect_tx + TMA 4-D loads of a BSHD tensor through two barrier phases, including a
//       box that runs past the sequence end (must be zero-filled), read back with the 128B swizzle
//       formula; then ordinary swizzled stores + fence.proxy.async + TMA store of a box that runs
//       past the sequence end (those rows must not be written). The same through the 5-D map of
//       packed GQA tiles (query heads of a group interleaved in the box's rows).
//   (d) a 384-thread kernel with setmaxnreg (producer dec, consumers inc), a 256-thread named
//       barrier between the consumer warpgroups, and an mbarrier that needs 256 arrivals.
#include <cuda.h>

#include <sstream>
#include <string>
#include <vector>

#include "cuda/ptx/fence.cuh"
#include "cuda/ptx/mbarrier.cuh"
#include "cuda/ptx/named_barrier.cuh"
#include "cuda/ptx/setmaxnreg.cuh"
#include "cuda/ptx/smem_descriptor.cuh"
#include "cuda/ptx/tma.cuh"
#include "sm90_test_util.h"

namespace flashcore::sm90_test {
namespace {

using namespace flashcore::detail;

// BSHD tensor of the round trip: a sequence length that is not a multiple of the box.
constexpr int kBatch = 2, kSeqlen = 100, kHeads = 3, kHeadDim = 128;
constexpr int kBoxRows = 64, kBoxCols = 64;
constexpr int kBoxBytes = kBoxRows * kBoxCols * 2;
// Box coordinates (col, row, head, batch): first a box that runs past the end (rows 64..127 of
// 100), then one fully inside.
struct Box {
  int col, row, head, batch;
};
constexpr Box kTailBox{64, 64, 2, 1};
constexpr Box kInsideBox{0, 16, 1, 0};

// The pieces both TMA round-trip kernels share: the swizzle-aligned tile and its barrier, the
// loaded tile read back in (row, column) order, and the pattern tile(r, c) = 1000 + 64 r + c
// (raw 16-bit values) written with ordinary stores for the TMA store to read.
__device__ uint8_t* tile_with_barrier(uint8_t* smem_raw, uint64_t* bar) {
  if (threadIdx.x == 0) {
    mbarrier_init(bar, 1);
    mbarrier_init_fence();
  }
  __syncthreads();
  return align_to_swizzle_atom(smem_raw);
}

__device__ void read_tile(const uint8_t* tile, uint16_t* out) {
  for (int i = threadIdx.x; i < kBoxRows * kBoxCols; i += blockDim.x) {
    const int r = i / kBoxCols, c = i % kBoxCols;
    out[i] = *reinterpret_cast<const uint16_t*>(tile + swizzled_offset<kBoxRows>(r, c));
  }
  __syncthreads();  // everyone read the tile before it is overwritten
}

__device__ void write_pattern_for_store(uint8_t* tile) {
  for (int i = threadIdx.x; i < kBoxRows * kBoxCols; i += blockDim.x) {
    const int r = i / kBoxCols, c = i % kBoxCols;
    *reinterpret_cast<uint16_t*>(tile + swizzled_offset<kBoxRows>(r, c)) =
        static_cast<uint16_t>(1000 + 64 * r + c);
  }
  fence_proxy_async_shared();  // the TMA store reads what the ordinary stores wrote
  __syncthreads();
}

__global__ void __launch_bounds__(128) tma_round_trip_kernel(
    const __grid_constant__ CUtensorMap map_in, const __grid_constant__ CUtensorMap map_out,
    uint16_t* loaded, Box tail_box, Box inside_box) {
  extern __shared__ __align__(16) uint8_t smem_raw[];
  __shared__ uint64_t bar;
  uint8_t* tile = tile_with_barrier(smem_raw, &bar);
  const Box boxes[2] = {tail_box, inside_box};
  for (int phase = 0; phase < 2; ++phase) {
    if (threadIdx.x == 0) {
      mbarrier_arrive_expect_tx(&bar, kBoxBytes);
      tma_load_4d(tile, &map_in, &bar, boxes[phase].col, boxes[phase].row, boxes[phase].head,
                  boxes[phase].batch);
    }
    mbarrier_wait_parity(&bar, phase);
    read_tile(tile, loaded + phase * kBoxRows * kBoxCols);
  }
  write_pattern_for_store(tile);
  if (threadIdx.x == 0) {
    tma_store_4d(&map_out, tile, tail_box.col, tail_box.row, tail_box.head, tail_box.batch);
    tma_store_commit_group();
    tma_store_wait_all();
  }
}

size_t bshd_index(int b, int s, int h, int d) {
  return ((size_t(b) * kSeqlen + s) * kHeads + h) * kHeadDim + d;
}

// Elements of a [kBatch, kSeqlen, heads, head_dim] tensor read back after a TMA store that differ
// from want(b, s, h, d): "" when none, else how many and the first 8.
template <class Want>
std::string store_mismatches(const std::vector<uint16_t>& out, int heads, int head_dim,
                             Want want) {
  int wrong = 0;
  std::ostringstream first;
  for (int b = 0; b < kBatch; ++b)
    for (int s = 0; s < kSeqlen; ++s)
      for (int h = 0; h < heads; ++h)
        for (int d = 0; d < head_dim; ++d) {
          const uint16_t expected = want(b, s, h, d);
          const uint16_t have = out[((size_t(b) * kSeqlen + s) * heads + h) * head_dim + d];
          if (expected != have && wrong++ < 8)
            first << "\n  (batch " << b << ", row " << s << ", head " << h << ", col " << d
                  << "): expected " << expected << ", got " << have;
        }
  return wrong == 0 ? "" : std::to_string(wrong) + " elements wrong; first:" + first.str();
}

TEST(Sm90Tma, LoadPhasesZeroFillAndClippedStore) {
  SKIP_WITHOUT_SM90();
  const size_t numel = size_t(kBatch) * kSeqlen * kHeads * kHeadDim;
  std::vector<uint16_t> input(numel);
  for (size_t i = 0; i < numel; ++i) input[i] = static_cast<uint16_t>(i % 60000 + 1);  // never 0
  constexpr uint16_t kSentinel = 0xBEEF;
  DeviceBuffer<uint16_t> in_dev(input), out_dev(std::vector<uint16_t>(numel, kSentinel));
  DeviceBuffer<uint16_t> loaded(2 * kBoxRows * kBoxCols);
  const BshdTensor in_tensor{"in", in_dev.ptr, kHeadDim, kSeqlen, kHeads, kBatch,
                             kHeads * kHeadDim, kHeadDim, int64_t(kSeqlen) * kHeads * kHeadDim};
  BshdTensor out_tensor = in_tensor;
  out_tensor.name = "out";
  out_tensor.data = out_dev.ptr;
  const CUtensorMap map_in = make_bshd_tensor_map(in_tensor, DType::kFloat16, kBoxRows);
  const CUtensorMap map_out = make_bshd_tensor_map(out_tensor, DType::kFloat16, kBoxRows);
  const int smem = kBoxBytes + kSmemSlack;
  ASSERT_CUDA(cudaFuncSetAttribute(tma_round_trip_kernel,
                                   cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  tma_round_trip_kernel<<<1, 128, smem>>>(map_in, map_out, loaded.ptr, kTailBox, kInsideBox);
  ASSERT_CUDA(cudaGetLastError());
  ASSERT_CUDA(synchronize_or_exit(::testing::UnitTest::GetInstance()->current_test_info()->name()));

  // Loads: phase 0 is the tail box (rows past 100 zero), phase 1 the inside box.
  const std::vector<uint16_t> got = loaded.to_host();
  const Box boxes[2] = {kTailBox, kInsideBox};
  for (int phase = 0; phase < 2; ++phase) {
    std::vector<float> expected(kBoxRows * kBoxCols), actual(kBoxRows * kBoxCols);
    const Box& box = boxes[phase];
    for (int r = 0; r < kBoxRows; ++r)
      for (int c = 0; c < kBoxCols; ++c) {
        const int row = box.row + r;
        expected[r * kBoxCols + c] =
            row < kSeqlen ? input[bshd_index(box.batch, row, box.head, box.col + c)] : 0.0f;
        actual[r * kBoxCols + c] = got[phase * kBoxRows * kBoxCols + r * kBoxCols + c];
      }
    EXPECT_TRUE(matrices_equal(std::string("TMA load (raw 16-bit patterns), barrier phase ") +
                                   std::to_string(phase) + (phase == 0 ? " (tail box: rows >= " +
                                   std::to_string(kSeqlen - box.row) + " must be 0)" : ""),
                               expected, actual, kBoxRows, kBoxCols));
  }

  // Store: only rows 64..99 of (batch 1, head 2, cols 64..127) change.
  const std::string wrong = store_mismatches(out_dev.to_host(), kHeads, kHeadDim,
                                             [&](int b, int s, int h, int d) {
    const int r = s - kTailBox.row, c = d - kTailBox.col;
    const bool inside = b == kTailBox.batch && h == kTailBox.head && r >= 0 && r < kBoxRows &&
                        c >= 0 && c < kBoxCols;
    return inside ? static_cast<uint16_t>(1000 + 64 * r + c) : kSentinel;
  });
  EXPECT_EQ(wrong, "") << "TMA store of a box clipped at seqlen " << kSeqlen;
}

// (c') The 5-D maps of packed GQA tiles (make_group_packed_tensor_map): a box of 64 rows holds
// 16 positions of the 4 query heads of one KV group, row r = position r / 4 of head r % 4.
// Loaded from a box that runs past the sequence end (zero-filled rows), then a pattern stored
// back through the same map (rows past the end dropped, other heads and groups untouched).
constexpr int kPackedHeads = 8, kGroup = 4, kPackedHeadDim = 64;
constexpr int kPackedPositions = kBoxRows / kGroup;
struct PackedBox {
  int position, group, batch;
};
constexpr PackedBox kPackedTailBox{90, 1, 1};  // positions 90..105 of 100

__global__ void __launch_bounds__(128) tma_packed_round_trip_kernel(
    const __grid_constant__ CUtensorMap map, uint16_t* loaded, PackedBox box) {
  extern __shared__ __align__(16) uint8_t smem_raw[];
  __shared__ uint64_t bar;
  uint8_t* tile = tile_with_barrier(smem_raw, &bar);
  if (threadIdx.x == 0) {
    mbarrier_arrive_expect_tx(&bar, kBoxBytes);
    tma_load_5d(tile, &map, &bar, 0, 0, box.position, box.group, box.batch);
  }
  mbarrier_wait_parity(&bar, 0);
  read_tile(tile, loaded);
  write_pattern_for_store(tile);
  if (threadIdx.x == 0) {
    tma_store_5d(&map, tile, 0, 0, box.position, box.group, box.batch);
    tma_store_commit_group();
    tma_store_wait_all();
  }
}

TEST(Sm90Tma, PackedGroupBoxInterleavesHeadsAndClipsAtTheEnd) {
  SKIP_WITHOUT_SM90();
  const auto index = [](int b, int s, int h, int d) {
    return ((size_t(b) * kSeqlen + s) * kPackedHeads + h) * kPackedHeadDim + d;
  };
  const size_t numel = size_t(kBatch) * kSeqlen * kPackedHeads * kPackedHeadDim;
  std::vector<uint16_t> input(numel);
  for (size_t i = 0; i < numel; ++i) input[i] = static_cast<uint16_t>(i % 60000 + 1);  // never 0
  DeviceBuffer<uint16_t> tensor(input);
  DeviceBuffer<uint16_t> loaded(kBoxRows * kBoxCols);
  const BshdTensor view{"packed", tensor.ptr, kPackedHeadDim, kSeqlen, kPackedHeads, kBatch,
                        kPackedHeads * kPackedHeadDim, kPackedHeadDim,
                        int64_t(kSeqlen) * kPackedHeads * kPackedHeadDim};
  const CUtensorMap map =
      detail::make_group_packed_tensor_map(view, DType::kBFloat16, kGroup, kBoxRows);
  const int smem = kBoxBytes + kSmemSlack;
  ASSERT_CUDA(cudaFuncSetAttribute(tma_packed_round_trip_kernel,
                                   cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  tma_packed_round_trip_kernel<<<1, 128, smem>>>(map, loaded.ptr, kPackedTailBox);
  ASSERT_CUDA(cudaGetLastError());
  ASSERT_CUDA(synchronize_or_exit(::testing::UnitTest::GetInstance()->current_test_info()->name()));

  const PackedBox& box = kPackedTailBox;
  const std::vector<uint16_t> got = loaded.to_host();
  std::vector<float> expected(kBoxRows * kBoxCols), actual(kBoxRows * kBoxCols);
  for (int r = 0; r < kBoxRows; ++r)
    for (int c = 0; c < kBoxCols; ++c) {
      const int position = box.position + r / kGroup, head = box.group * kGroup + r % kGroup;
      expected[r * kBoxCols + c] =
          position < kSeqlen ? input[index(box.batch, position, head, c)] : 0.0f;
      actual[r * kBoxCols + c] = got[r * kBoxCols + c];
    }
  EXPECT_TRUE(matrices_equal("5-D TMA load of a packed group (row r = position r / 4 of head "
                             "r % 4; positions >= 100 must be 0)",
                             expected, actual, kBoxRows, kBoxCols));

  // Store: positions 90..99 of heads 4..7 of batch 1 take the pattern, nothing else changes.
  const std::string wrong = store_mismatches(tensor.to_host(), kPackedHeads, kPackedHeadDim,
                                             [&](int b, int s, int h, int d) {
    const int p = s - box.position, g = h - box.group * kGroup;
    const bool inside =
        b == box.batch && p >= 0 && p < kPackedPositions && g >= 0 && g < kGroup;
    return inside ? static_cast<uint16_t>(1000 + 64 * (p * kGroup + g) + d)
                  : input[index(b, s, h, d)];
  });
  EXPECT_EQ(wrong, "") << "5-D TMA store of a packed group clipped at seqlen " << kSeqlen;
}

// (d) Warp specialization skeleton: producer warpgroup gives registers back, consumers take them,
// consumers exchange values through a 256-thread named barrier, and all 256 arrive on an mbarrier
// the producer waits for (the kv_empty pattern).
constexpr int kThreads = 384, kConsumerThreads = 256;
constexpr uint32_t kConsumerBarrierId = 3;

__global__ void __launch_bounds__(kThreads, 1) warp_specialization_kernel(int* out) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  __shared__ int exchange[kConsumerThreads];
  __shared__ uint64_t released;
  if (threadIdx.x == 0) {
    mbarrier_init(&released, kConsumerThreads);
    mbarrier_init_fence();
  }
  __syncthreads();
  const int warpgroup = __shfl_sync(0xffffffff, static_cast<int>(threadIdx.x) / 128, 0);
  if (warpgroup == 0) {
    setmaxnreg_dec<40>();
    if (threadIdx.x == 0) {
      mbarrier_wait_parity(&released, 0);
      out[kConsumerThreads] = 1;  // reached only after all 256 consumer arrivals
    }
  } else {
    setmaxnreg_inc<232>();
    const int c = threadIdx.x - 128;
    exchange[c] = 3 * c + 1;
    named_barrier_sync(kConsumerBarrierId, kConsumerThreads);
    out[c] = exchange[(c + 128) % kConsumerThreads];  // the other warpgroup's value
    mbarrier_arrive(&released);
  }
#endif
}

TEST(Sm90Barriers, NamedBarrierSetmaxnregAndMbarrierArrivals) {
  SKIP_WITHOUT_SM90();
  DeviceBuffer<int> out(kConsumerThreads + 1);
  ASSERT_CUDA(cudaMemset(out.ptr, 0, out.count * sizeof(int)));
  warp_specialization_kernel<<<1, kThreads>>>(out.ptr);
  ASSERT_CUDA(cudaGetLastError());
  ASSERT_CUDA(synchronize_or_exit(::testing::UnitTest::GetInstance()->current_test_info()->name()));
  const std::vector<int> got = out.to_host();
  for (int c = 0; c < kConsumerThreads; ++c) {
    const int want = 3 * ((c + 128) % kConsumerThreads) + 1;
    ASSERT_EQ(got[c], want) << "consumer thread " << c << " read the wrong value across the "
                            << "named barrier (id " << kConsumerBarrierId << ", 256 threads)";
  }
  EXPECT_EQ(got[kConsumerThreads], 1) << "producer never saw the 256 mbarrier arrivals";
}

}  // namespace
}  // namespace flashcore::sm90_test
