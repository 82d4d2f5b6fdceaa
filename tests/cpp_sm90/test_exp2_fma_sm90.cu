// Device test of exp2_fma (cuda/common/numeric.cuh), the FMA-pipe 2^x that the fp8 rows take for
// one softmax exponential in 8 or 16 (Sm90TuningRow::fma_exp_period): relative error against
// std::exp2 over the range the softmax feeds it (x <= 8 with the fp8 P offset), exact values where
// the softmax relies on them (2^0, 2^8, and 0 for a masked -inf).
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "cuda/common/numeric.cuh"
#include "sm90_test_util.h"

namespace flashcore::sm90_test {
namespace {

__global__ void exp2_fma_kernel(const float* x, float* y, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = detail::exp2_fma(x[i]);
}

std::vector<float> exp2_fma_on_device(const std::vector<float>& x) {
  const int n = static_cast<int>(x.size());
  float *x_device = nullptr, *y_device = nullptr;
  std::vector<float> y(x.size());
  EXPECT_EQ(cudaMalloc(&x_device, n * sizeof(float)), cudaSuccess);
  EXPECT_EQ(cudaMalloc(&y_device, n * sizeof(float)), cudaSuccess);
  EXPECT_EQ(cudaMemcpy(x_device, x.data(), n * sizeof(float), cudaMemcpyHostToDevice),
            cudaSuccess);
  constexpr int kThreads = 256;
  exp2_fma_kernel<<<(n + kThreads - 1) / kThreads, kThreads>>>(x_device, y_device, n);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_EQ(cudaMemcpy(y.data(), y_device, n * sizeof(float), cudaMemcpyDeviceToHost),
            cudaSuccess);
  cudaFree(x_device);
  cudaFree(y_device);
  return y;
}

TEST(Sm90Exp2Fma, RelativeErrorAndExactPoints) {
  SKIP_WITHOUT_SM90();
  constexpr float kLowest = -126.0f, kHighest = 8.0f;  // normal results up to the fp8 P offset
  constexpr int kPoints = 1 << 20;
  constexpr double kRelativeBound = 5.2e-4;  // the cubic's fit on [-0.5, 0.5]
  std::vector<float> x(kPoints);
  for (int i = 0; i < kPoints; ++i) x[i] = kLowest + (kHighest - kLowest) * i / (kPoints - 1);
  const std::vector<float> y = exp2_fma_on_device(x);
  double worst = 0.0;
  float worst_at = 0.0f;
  for (int i = 0; i < kPoints; ++i) {
    const double want = std::exp2(double(x[i]));
    const double error = std::fabs(double(y[i]) - want) / want;
    if (!(error <= worst)) {
      worst = error;
      worst_at = x[i];
    }
  }
  EXPECT_LE(worst, kRelativeBound) << "worst relative error at x = " << worst_at;

  const std::vector<float> special = {0.0f, 8.0f, -127.0f, -200.0f, -INFINITY, -126.5f};
  const std::vector<float> got = exp2_fma_on_device(special);
  EXPECT_EQ(got[0], 1.0f);
  EXPECT_EQ(got[1], 256.0f);
  EXPECT_EQ(got[2], 0.0f);
  EXPECT_EQ(got[3], 0.0f);
  EXPECT_EQ(got[4], 0.0f) << "a masked score must contribute nothing";
  EXPECT_GE(got[5], 0.0f);
  EXPECT_LT(got[5], std::exp2(-126.0f)) << "below the normals: a small subnormal";
}

}  // namespace
}  // namespace flashcore::sm90_test
