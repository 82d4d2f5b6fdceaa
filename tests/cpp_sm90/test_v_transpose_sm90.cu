// Device test of the FP8 kernel's V transpose (cuda/sm90/v_transpose.cuh: ldmatrix.trans, byte
// permutes and stmatrix by the 96 transposer threads) on random bytes, for the fp8 rows' tile
// shapes: V^T[d][p] must be V[32 (p / 32) + fp8_a_position_key(p % 32)][d], both in 128-byte
// swizzled column blocks, V^T with a row for each computed head_dim column only (V's columns past
// them, a padded call's zeros, are never read). dev/sm90/v_transpose_model.py checks the same on
// the host from the PTX definitions; this checks the instructions.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <sstream>
#include <vector>

#include "cuda/common/accumulator_layout.h"
#include "cuda/sm90/v_transpose.cuh"
#include "sm90_test_util.h"

namespace flashcore::sm90_test {
namespace {

using namespace flashcore::detail;

template <int kHeadDim_, int kBlockN_, int kComputedHeadDim_ = kHeadDim_>
struct TransposeShape {
  static constexpr int kHeadDim = kHeadDim_, kBlockN = kBlockN_;
  static constexpr int kComputedHeadDim = kComputedHeadDim_, kVtRows = kComputedHeadDim_;
};

template <class Shape>
constexpr int kVtBytes = ((Shape::kBlockN + 127) / 128) * 128 * Shape::kVtRows;

constexpr int kRowBytes = 128;

// Byte offset of (row, byte column) in column blocks of 128 bytes x `rows` rows, swizzled as TMA
// writes them (16-byte chunk c of row r at position c ^ (r % 8)).
int swizzled_offset(int rows, int row, int col) {
  return (col / kRowBytes) * rows * kRowBytes + row * kRowBytes +
         (((col % kRowBytes) / 16) ^ (row % 8)) * 16 + col % 16;
}

template <class Shape>
__global__ void __launch_bounds__(kSm90TransposerThreads) transpose_kernel(const uint8_t* v,
                                                                           uint8_t* vt) {
  constexpr int kVBytes = Shape::kBlockN * Shape::kHeadDim;
  extern __shared__ uint8_t smem_raw[];
  uint8_t* smem = align_to_swizzle_atom(smem_raw);
  uint8_t* v_tile = smem;
  uint8_t* vt_tile = smem + kVBytes;
  for (int i = threadIdx.x; i < kVBytes; i += blockDim.x) v_tile[i] = v[i];
  for (int i = threadIdx.x; i < kVtBytes<Shape>; i += blockDim.x) vt_tile[i] = 0;
  __syncthreads();
  sm90_transpose_v_stage<Shape>(v_tile, vt_tile, threadIdx.x);
  __syncthreads();
  for (int i = threadIdx.x; i < kVtBytes<Shape>; i += blockDim.x) vt[i] = vt_tile[i];
}

template <class Shape>
void check_transpose() {
  constexpr int kHeadDim = Shape::kHeadDim, kBlockN = Shape::kBlockN, kRows = Shape::kVtRows;
  constexpr int kVBytes = kBlockN * kHeadDim, kVtSize = kVtBytes<Shape>;
  std::mt19937 random(kHeadDim * 1000 + kBlockN);
  std::vector<uint8_t> v_rows(kVBytes), v_smem(kVBytes);  // v_rows[key * head_dim + d]
  for (uint8_t& byte : v_rows) byte = static_cast<uint8_t>(random());
  for (int key = 0; key < kBlockN; ++key)
    for (int d = 0; d < kHeadDim; ++d)
      v_smem[swizzled_offset(kBlockN, key, d)] = v_rows[key * kHeadDim + d];

  uint8_t *v_device = nullptr, *vt_device = nullptr;
  ASSERT_CUDA(cudaMalloc(&v_device, kVBytes));
  ASSERT_CUDA(cudaMalloc(&vt_device, kVtSize));
  ASSERT_CUDA(cudaMemcpy(v_device, v_smem.data(), kVBytes, cudaMemcpyHostToDevice));
  const int smem_bytes = kVBytes + kVtSize + kSmemSlack;
  ASSERT_CUDA(cudaFuncSetAttribute(transpose_kernel<Shape>,
                                   cudaFuncAttributeMaxDynamicSharedMemorySize, smem_bytes));
  transpose_kernel<Shape><<<1, kSm90TransposerThreads, smem_bytes>>>(v_device, vt_device);
  ASSERT_CUDA(cudaGetLastError());
  ASSERT_CUDA(cudaDeviceSynchronize());
  std::vector<uint8_t> vt(kVtSize);
  ASSERT_CUDA(cudaMemcpy(vt.data(), vt_device, kVtSize, cudaMemcpyDeviceToHost));
  ASSERT_CUDA(cudaFree(v_device));
  ASSERT_CUDA(cudaFree(vt_device));

  int wrong = 0;
  std::ostringstream first;
  for (int d = 0; d < kRows; ++d) {
    for (int p = 0; p < kBlockN; ++p) {
      const int key = 32 * (p / 32) + fp8_a_position_key(p % 32);
      const int got = vt[swizzled_offset(kRows, d, p)];
      const int want = v_rows[key * kHeadDim + d];
      if (got != want && wrong++ == 0)
        first << "V^T[" << d << "][" << p << "] = " << got << ", V[" << key << "][" << d
              << "] = " << want;
    }
  }
  EXPECT_EQ(wrong, 0) << "d" << kRows << " of " << kHeadDim << " n" << kBlockN << ": " << wrong
                      << " wrong bytes, the first " << first.str();
}

// The fp8 rows of the tile table (d128 n128 / n192, d256 n128, d64 n128 / n160 on d128 tiles)
// and the other widths a tuning run may take: a partial second V^T column block (n160, n224),
// fewer keys than a block (n96), d96 on d128 tiles.
TEST(Sm90VTranspose, MatchesThePermutedKeyOrder) {
  SKIP_WITHOUT_SM90();
  check_transpose<TransposeShape<128, 128>>();
  check_transpose<TransposeShape<256, 128>>();
  check_transpose<TransposeShape<256, 96>>();
  check_transpose<TransposeShape<128, 160>>();
  check_transpose<TransposeShape<128, 224>>();
  check_transpose<TransposeShape<128, 192>>();
  check_transpose<TransposeShape<128, 128, 64>>();
  check_transpose<TransposeShape<128, 160, 64>>();
  check_transpose<TransposeShape<128, 128, 96>>();
}

}  // namespace
}  // namespace flashcore::sm90_test
