// Device test of programmatic dependent launch (cuda/ptx/grid_dependency.cuh, launched through
// the library's sm90_launch_dependent), as the split-KV combine uses it: a primary kernel lets
// its dependent launch at once, then works for about a millisecond before writing its result;
// the dependent, launched with the attribute, waits in grid_dependency_wait and copies the
// result. Without the wait it would read the primary's buffer before the write. Whether the
// dependent really started early is printed, not checked: the hardware may also launch it after
// the primary has completed.
#include <cstdio>
#include <vector>

#include "cuda/ptx/grid_dependency.cuh"
#include "cuda/sm90/launch_dependent.h"
#include "sm90_test_util.h"

namespace flashcore::sm90_test {
namespace {

using namespace flashcore::detail;

constexpr int kValues = 4096;
constexpr long long kPrimaryClocks = 2'000'000;  // ~1 ms at 1.7-2 GHz: far longer than a launch

__global__ void primary_kernel(int* values, unsigned long long* primary_end) {
  grid_dependency_launch_dependents();
  const long long start = clock64();
  while (clock64() - start < kPrimaryClocks) {
  }
  for (int i = threadIdx.x; i < kValues; i += blockDim.x) values[i] = 3 * i + 1;
  __syncthreads();
  if (threadIdx.x == 0) {
    unsigned long long now;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
    *primary_end = now;
  }
}

__global__ void dependent_kernel(const int* values, int* copy,
                                 unsigned long long* dependent_start) {
  if (threadIdx.x == 0) {
    unsigned long long now;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
    *dependent_start = now;
  }
  grid_dependency_wait();
  for (int i = threadIdx.x; i < kValues; i += blockDim.x) copy[i] = values[i];
}

TEST(Sm90GridDependency, DependentWaitsForThePrimarysWrites) {
  SKIP_WITHOUT_SM90();
  DeviceBuffer<int> values(kValues), copy(kValues);
  DeviceBuffer<unsigned long long> times(2);
  ASSERT_CUDA(cudaMemset(values.ptr, 0, values.count * sizeof(int)));
  ASSERT_CUDA(cudaMemset(copy.ptr, 0xFF, copy.count * sizeof(int)));
  ASSERT_CUDA(cudaDeviceSynchronize());

  primary_kernel<<<1, 256>>>(values.ptr, times.ptr);
  ASSERT_CUDA(cudaGetLastError());
  ASSERT_CUDA(sm90_launch_dependent(dependent_kernel, dim3(1), dim3(256), 0, nullptr,
                                    static_cast<const int*>(values.ptr), copy.ptr,
                                    times.ptr + 1));
  ASSERT_CUDA(synchronize_or_exit(::testing::UnitTest::GetInstance()->current_test_info()->name()));

  const std::vector<int> got = copy.to_host();
  for (int i = 0; i < kValues; ++i) {
    ASSERT_EQ(got[i], 3 * i + 1) << "value " << i << ": the dependent read before the primary's "
                                 << "write (grid_dependency_wait did not hold it)";
  }
  const std::vector<unsigned long long> t = times.to_host();
  std::printf("[grid dependency] dependent started %s the primary's end (%lld ns)\n",
              t[1] < t[0] ? "before" : "after",
              static_cast<long long>(t[1]) - static_cast<long long>(t[0]));
}

}  // namespace
}  // namespace flashcore::sm90_test
