// Device test of cuda/ptx/schedule.cuh: opaque_false() is false on every thread of every block,
// and a loop whose iterations end a basic block with basic_block_end() computes what the same
// loop computes without it (the branch around the nanosleep and the store is never taken: a
// store to address 0 would fault the kernel). Where the blocks end in the SASS is what the
// kernel notebook checks (dev/sm90/sass_steps.py), not this test.
#include <cmath>
#include <vector>

#include "cuda/ptx/schedule.cuh"
#include "sm90_test_util.h"

namespace flashcore::sm90_test {
namespace {

using namespace flashcore::detail;

constexpr int kBlocks = 8;
constexpr int kThreads = 256;
constexpr int kSteps = 64;
// Terms 2^0 .. 2^-(kTerms - 1), each kSteps / kTerms times: 19 significant bits at most, so every
// partial sum is exact in float and the device's order of adds cannot change it.
constexpr int kTerms = 16;
static_assert(kSteps % kTerms == 0, "every term the same number of times");

// Per thread: whether opaque_false() was true, and a running sum over kSteps whose every step
// ends its basic block between a term and the add that reads it.
__global__ void schedule_kernel(int* flags, float* sums) {
  const int thread = blockIdx.x * blockDim.x + threadIdx.x;
  const bool never = opaque_false();
  float sum = 0.0f;
  for (int step = 0; step < kSteps; ++step) {
    const float x = ldexpf(1.0f, -((thread + step) % kTerms));
    basic_block_end(never, x);
    sum += x;
  }
  flags[thread] = never ? 1 : 0;
  sums[thread] = sum;
}

TEST(Sm90Schedule, OpaqueFalseIsFalseAndBlockEndsChangeNoResult) {
  SKIP_WITHOUT_SM90();
  constexpr int kCount = kBlocks * kThreads;
  DeviceBuffer<int> flags(kCount);
  DeviceBuffer<float> sums(kCount);
  ASSERT_CUDA(cudaMemset(flags.ptr, 0xFF, kCount * sizeof(int)));
  ASSERT_CUDA(cudaMemset(sums.ptr, 0xFF, kCount * sizeof(float)));  // NaN until written
  schedule_kernel<<<kBlocks, kThreads>>>(flags.ptr, sums.ptr);
  ASSERT_CUDA(cudaGetLastError());
  ASSERT_CUDA(synchronize_or_exit(::testing::UnitTest::GetInstance()->current_test_info()->name()));

  const std::vector<int> got_flags = flags.to_host();
  const std::vector<float> got_sums = sums.to_host();
  for (int thread = 0; thread < kCount; ++thread) {
    ASSERT_EQ(got_flags[thread], 0) << "thread " << thread << ": opaque_false() returned true";
    float expected = 0.0f;
    for (int step = 0; step < kSteps; ++step)
      expected += std::ldexp(1.0f, -((thread + step) % kTerms));
    ASSERT_EQ(got_sums[thread], expected) << "thread " << thread;
  }
}

}  // namespace
}  // namespace flashcore::sm90_test
