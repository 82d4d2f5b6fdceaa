// Device tests of the wgmma wrappers with operands in exactly the layouts the Hopper kernel uses:
//   (a) SS: D (64 x N) = A (64 x K) * B^T, A and B K-major in 128B-swizzled column blocks loaded by
//       TMA, descriptors from kmajor_descriptor (the S = Q K^T GEMM).
//   (b) RS: O (64 x N) = P (64 x K) * V (K x N), P from registers in accumulator layout packed by
//       accumulator_to_a_fragments, V MN-major from TMA with the transpose bit (the O += P V GEMM).
//   (c) SS in e4m3 (m64nNk32): the FP8 S = Q K^T, both operands K-major, 128 e4m3 per swizzled
//       row, so one k32 step is 32 bytes as a 16-bit k16 step is.
// Inputs are k/4 values, so results must match a CPU GEMM exactly.
#include <cuda.h>

#include "cuda/ptx/mbarrier.cuh"
#include "cuda/ptx/smem_descriptor.cuh"
#include "cuda/ptx/tma.cuh"
#include "cuda/ptx/wgmma.cuh"
#include "sm90_test_util.h"

namespace flashcore::sm90_test {
namespace {

using namespace flashcore::detail;

constexpr int kRowsM = 64;                  // wgmma M: one warpgroup
constexpr int kWarpgroupThreads = 128;

// Writes a 64 x N accumulator held in wgmma layout to a row-major matrix.
template <int kAccRegs>
__device__ void store_accumulator(const float (&d)[kAccRegs], float* out, int cols) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int row = warp * 16 + lane / 4;
#pragma unroll
  for (int chunk = 0; chunk < kAccRegs / 4; ++chunk) {
    const int col = 8 * chunk + 2 * (lane % 4);
    out[row * cols + col] = d[4 * chunk];
    out[row * cols + col + 1] = d[4 * chunk + 1];
    out[(row + 8) * cols + col] = d[4 * chunk + 2];
    out[(row + 8) * cols + col + 1] = d[4 * chunk + 3];
  }
}

// Loads a row-major rows x cols matrix as cols/64 boxes of (64 cols, rows) into column blocks.
__device__ void load_column_blocks(uint8_t* dst, const CUtensorMap* map, uint64_t* bar, int rows,
                                   int cols) {
  for (int block = 0; block < cols / 64; ++block) {
    tma_load_4d(dst + block * rows * kSwizzleBytes, map, bar, block * 64, 0, 0, 0);
  }
}

template <DType kDType, int kN, int kK>
__global__ void __launch_bounds__(kWarpgroupThreads) wgmma_ss_kernel(
    const __grid_constant__ CUtensorMap map_a, const __grid_constant__ CUtensorMap map_b,
    float* out) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  extern __shared__ __align__(16) uint8_t smem_raw[];
  __shared__ uint64_t bar;
  uint8_t* a = align_to_swizzle_atom(smem_raw);
  uint8_t* b = a + kRowsM * kK * 2;
  if (threadIdx.x == 0) {
    mbarrier_init(&bar, 1);
    mbarrier_init_fence();
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    mbarrier_arrive_expect_tx(&bar, (kRowsM + kN) * kK * 2);
    load_column_blocks(a, &map_a, &bar, kRowsM, kK);
    load_column_blocks(b, &map_b, &bar, kN, kK);
  }
  mbarrier_wait_parity(&bar, 0);
  float d[kN / 2];
  wgmma_fence();
#pragma unroll
  for (int k = 0; k < kK / 16; ++k) {
    WgmmaM64K16<kDType, kN>::ss(d, kmajor_descriptor<kRowsM>(smem_u32(a), k),
                                kmajor_descriptor<kN>(smem_u32(b), k), k > 0 ? 1 : 0);
  }
  wgmma_commit_group();
  wgmma_wait_group<0>();
  fence_accumulators(d);
  store_accumulator(d, out, kN);
#endif
}

template <DType kDType, int kN, int kK>
__global__ void __launch_bounds__(kWarpgroupThreads) wgmma_rs_kernel(
    const __grid_constant__ CUtensorMap map_v, const float* p_matrix, float* out) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  extern __shared__ __align__(16) uint8_t smem_raw[];
  __shared__ uint64_t bar;
  uint8_t* v = align_to_swizzle_atom(smem_raw);
  if (threadIdx.x == 0) {
    mbarrier_init(&bar, 1);
    mbarrier_init_fence();
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    mbarrier_arrive_expect_tx(&bar, kK * kN * 2);
    load_column_blocks(v, &map_v, &bar, kK, kN);
  }
  // P (64 x K) read into accumulator layout, as the softmax leaves it in the kernel.
  float s[kK / 2];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int row = warp * 16 + lane / 4;
#pragma unroll
  for (int chunk = 0; chunk < kK / 8; ++chunk) {
    const int col = 8 * chunk + 2 * (lane % 4);
    s[4 * chunk] = p_matrix[row * kK + col];
    s[4 * chunk + 1] = p_matrix[row * kK + col + 1];
    s[4 * chunk + 2] = p_matrix[(row + 8) * kK + col];
    s[4 * chunk + 3] = p_matrix[(row + 8) * kK + col + 1];
  }
  uint32_t p[kK / 16][4];
  accumulator_to_a_fragments<kDType>(s, p);
  float o[kN / 2];
#pragma unroll
  for (int i = 0; i < kN / 2; ++i) o[i] = 0.0f;
  mbarrier_wait_parity(&bar, 0);
  wgmma_fence();
#pragma unroll
  for (int k = 0; k < kK / 16; ++k) {
    WgmmaM64K16<kDType, kN>::template rs<1>(o, p[k], mnmajor_descriptor<kK>(smem_u32(v), k), 1);
  }
  wgmma_commit_group();
  wgmma_wait_group<0>();
  fence_accumulators(o);
  store_accumulator(o, out, kN);
#endif
}

template <int kN, int kK>
__global__ void __launch_bounds__(kWarpgroupThreads) wgmma_e4m3_ss_kernel(
    const __grid_constant__ CUtensorMap map_a, const __grid_constant__ CUtensorMap map_b,
    float* out) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  constexpr int kColsPerBlock = kSwizzleBytes;  // e4m3: one byte per element
  extern __shared__ __align__(16) uint8_t smem_raw[];
  __shared__ uint64_t bar;
  uint8_t* a = align_to_swizzle_atom(smem_raw);
  uint8_t* b = a + kRowsM * kK;
  if (threadIdx.x == 0) {
    mbarrier_init(&bar, 1);
    mbarrier_init_fence();
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    mbarrier_arrive_expect_tx(&bar, (kRowsM + kN) * kK);
    for (int block = 0; block < kK / kColsPerBlock; ++block) {
      tma_load_4d(a + block * kRowsM * kSwizzleBytes, &map_a, &bar, block * kColsPerBlock, 0, 0,
                  0);
      tma_load_4d(b + block * kN * kSwizzleBytes, &map_b, &bar, block * kColsPerBlock, 0, 0, 0);
    }
  }
  mbarrier_wait_parity(&bar, 0);
  float d[kN / 2];
  wgmma_fence();
#pragma unroll
  for (int k = 0; k < kK / 32; ++k) {
    WgmmaM64K32E4M3<kN>::ss(d, kmajor_descriptor<kRowsM>(smem_u32(a), k),
                            kmajor_descriptor<kN>(smem_u32(b), k), k > 0 ? 1 : 0);
  }
  wgmma_commit_group();
  wgmma_wait_group<0>();
  fence_accumulators(d);
  store_accumulator(d, out, kN);
#endif
}

std::string case_name(const char* what, const char* dtype, int n, int k) {
  return std::string(what) + " " + dtype + " m64n" + std::to_string(n) + "k16 x " +
         std::to_string(k / 16) + " steps (K=" + std::to_string(k) + ")";
}

// The 64 x N product of A (64 x K, row-major) and B, in float: B is N x K (D = A B^T, the keys
// of a K tile) or K x N (D = A B, V row-major). The inputs are exact_values, so every sum is
// exact and the kernels must match it bit for bit.
std::vector<float> reference_product(const std::vector<float>& a, const std::vector<float>& b,
                                     int n_cols, int k_depth, bool b_is_n_by_k) {
  std::vector<float> product(size_t(kRowsM) * n_cols, 0.0f);
  for (int m = 0; m < kRowsM; ++m)
    for (int n = 0; n < n_cols; ++n) {
      float acc = 0.0f;
      for (int k = 0; k < k_depth; ++k) {
        const size_t b_index = b_is_n_by_k ? size_t(n) * k_depth + k : size_t(k) * n_cols + n;
        acc += a[size_t(m) * k_depth + k] * b[b_index];
      }
      product[size_t(m) * n_cols + n] = acc;
    }
  return product;
}

// D = A B^T with A: 64 x K, B: N x K (rows of B are the keys of a K tile).
template <DType kDType, int kN, int kK>
void check_ss() {
  const std::vector<float> a = exact_values(size_t(kRowsM) * kK, 1 + kN + kK);
  const std::vector<float> b = exact_values(size_t(kN) * kK, 7 + kN * kK);
  const std::vector<float> expected = reference_product(a, b, kN, kK, /*b_is_n_by_k=*/true);
  DeviceBuffer<uint16_t> a_dev(to_16bit<kDType>(a)), b_dev(to_16bit<kDType>(b));
  DeviceBuffer<float> out(expected.size());
  ASSERT_CUDA(cudaMemset(out.ptr, 0xFF, out.count * sizeof(float)));  // NaN if never written
  const CUtensorMap map_a = matrix_tensor_map(a_dev.ptr, kDType, kRowsM, kK, kRowsM, "a");
  const CUtensorMap map_b = matrix_tensor_map(b_dev.ptr, kDType, kN, kK, kN, "b");
  const int smem = (kRowsM + kN) * kK * 2 + kSmemSlack;
  auto kernel = wgmma_ss_kernel<kDType, kN, kK>;
  ASSERT_CUDA(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  kernel<<<1, kWarpgroupThreads, smem>>>(map_a, map_b, out.ptr);
  ASSERT_CUDA(cudaGetLastError());
  ASSERT_CUDA(synchronize_or_exit(case_name("wgmma SS", dtype_name<kDType>(), kN, kK)));
  EXPECT_TRUE(matrices_equal(case_name("wgmma SS (A,B K-major, 128B swizzle)", dtype_name<kDType>(),
                                       kN, kK),
                             expected, out.to_host(), kRowsM, kN));
}

// O = P V with P: 64 x K (registers), V: K x N row-major (MN-major B, transpose bit).
template <DType kDType, int kN, int kK>
void check_rs() {
  const std::vector<float> p = exact_values(size_t(kRowsM) * kK, 3 + kN + kK);
  const std::vector<float> v = exact_values(size_t(kK) * kN, 11 + kN * kK);
  const std::vector<float> expected = reference_product(p, v, kN, kK, /*b_is_n_by_k=*/false);
  DeviceBuffer<float> p_dev(p);
  DeviceBuffer<uint16_t> v_dev(to_16bit<kDType>(v));
  DeviceBuffer<float> out(expected.size());
  ASSERT_CUDA(cudaMemset(out.ptr, 0xFF, out.count * sizeof(float)));
  const CUtensorMap map_v = matrix_tensor_map(v_dev.ptr, kDType, kK, kN, kK, "v");
  const int smem = kK * kN * 2 + kSmemSlack;
  auto kernel = wgmma_rs_kernel<kDType, kN, kK>;
  ASSERT_CUDA(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  kernel<<<1, kWarpgroupThreads, smem>>>(map_v, p_dev.ptr, out.ptr);
  ASSERT_CUDA(cudaGetLastError());
  ASSERT_CUDA(synchronize_or_exit(case_name("wgmma RS", dtype_name<kDType>(), kN, kK)));
  EXPECT_TRUE(matrices_equal(case_name("wgmma RS (P in registers, V MN-major transposed)",
                                       dtype_name<kDType>(), kN, kK),
                             expected, out.to_host(), kRowsM, kN));
}

// D = A B^T in e4m3: A 64 x K, B N x K, both K-major.
template <int kN, int kK>
void check_e4m3_ss() {
  const std::vector<float> a = exact_values(size_t(kRowsM) * kK, 5 + kN + kK);
  const std::vector<float> b = exact_values(size_t(kN) * kK, 13 + kN * kK);
  const std::vector<float> expected = reference_product(a, b, kN, kK, /*b_is_n_by_k=*/true);
  DeviceBuffer<uint8_t> a_dev(to_e4m3(a)), b_dev(to_e4m3(b));
  DeviceBuffer<float> out(expected.size());
  ASSERT_CUDA(cudaMemset(out.ptr, 0xFF, out.count * sizeof(float)));  // NaN if never written
  const CUtensorMap map_a =
      matrix_tensor_map(a_dev.ptr, DType::kFloat8E4M3, kRowsM, kK, kRowsM, "a");
  const CUtensorMap map_b = matrix_tensor_map(b_dev.ptr, DType::kFloat8E4M3, kN, kK, kN, "b");
  const int smem = (kRowsM + kN) * kK + kSmemSlack;
  auto kernel = wgmma_e4m3_ss_kernel<kN, kK>;
  ASSERT_CUDA(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  kernel<<<1, kWarpgroupThreads, smem>>>(map_a, map_b, out.ptr);
  ASSERT_CUDA(cudaGetLastError());
  const std::string name = "wgmma SS e4m3 m64n" + std::to_string(kN) + "k32 x " +
                           std::to_string(kK / 32) + " steps (K=" + std::to_string(kK) + ")";
  ASSERT_CUDA(synchronize_or_exit(name));
  // Sums of k/4 products are multiples of 1/16 below 256 in magnitude: exact in fp32, and within
  // the FP8 tensor cores' narrower accumulation too, so any difference is a layout mistake.
  EXPECT_TRUE(matrices_equal(name, expected, out.to_host(), kRowsM, kN));
}

// The S = Q K^T shapes of the tile table: N = BLOCK_N, K = head_dim.
TEST(Sm90Wgmma, SsKMajorSwizzled) {
  SKIP_WITHOUT_SM90();
  check_ss<DType::kFloat16, 64, 64>();    // one column block, N = 64
  check_ss<DType::kFloat16, 128, 64>();   // d64 tile
  check_ss<DType::kBFloat16, 128, 128>(); // d128 tile: two column blocks along K
  check_ss<DType::kFloat16, 128, 128>();
  check_ss<DType::kBFloat16, 80, 256>();  // d256 tile: four column blocks, N not a power of 2
}

// The O += P V shapes: K = BLOCK_N (keys), N = head_dim.
TEST(Sm90Wgmma, RsRegisterAWithTransposedB) {
  SKIP_WITHOUT_SM90();
  check_rs<DType::kFloat16, 64, 16>();    // smallest: one K-step, one column block
  check_rs<DType::kFloat16, 64, 128>();   // d64 tile
  check_rs<DType::kBFloat16, 128, 128>(); // d128 tile: two column blocks along N (uses LBO)
  check_rs<DType::kFloat16, 128, 128>();
  check_rs<DType::kBFloat16, 256, 80>();  // d256 tile: four column blocks, 5 K-steps
}

// The FP8 S = Q K^T shapes: K = head_dim (128 e4m3 per column block), N = BLOCK_N.
TEST(Sm90Wgmma, E4m3SsKMajorSwizzled) {
  SKIP_WITHOUT_SM90();
  check_e4m3_ss<64, 128>();   // one column block along K
  check_e4m3_ss<128, 128>();  // d128 tile
  check_e4m3_ss<176, 256>();  // d256: two column blocks, N not a power of 2
}

}  // namespace
}  // namespace flashcore::sm90_test
