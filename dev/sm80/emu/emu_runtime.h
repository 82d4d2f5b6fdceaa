// Host emulation of the CUDA features the sm80 kernel uses, so the kernel's index arithmetic
// (fragment layouts, swizzle, masking, pipeline barriers) can be checked on a machine with no GPU.
// Every CUDA thread of a CTA is a std::thread; warp-collective instructions (mma, ldmatrix,
// shuffles) exchange through per-warp slots between two warp barriers. The emulated mma and
// ldmatrix follow the PTX ISA's fragment figures, written independently of the kernel's code.
// Force-included (-include) before the kernel headers; see dev/sm80/emu_check.cpp.
#pragma once

#include <atomic>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <thread>

#define __device__
#define __host__
#define __global__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __grid_constant__
#define __shared__
#define __align__(n) __attribute__((aligned(n)))

struct dim3 {
  unsigned x = 1, y = 1, z = 1;
};
inline thread_local dim3 threadIdx;
inline thread_local dim3 blockIdx;
inline dim3 gridDim;

namespace emu {

class Barrier {
 public:
  explicit Barrier(int count) : count_(count) {}
  void wait() {
    const int generation = generation_.load();
    if (arrived_.fetch_add(1) + 1 == count_) {
      arrived_.store(0);
      generation_.fetch_add(1);
    } else {
      while (generation_.load() == generation) std::this_thread::yield();
    }
  }

 private:
  int count_;
  std::atomic<int> arrived_{0};
  std::atomic<int> generation_{0};
};

struct WarpSlots {
  Barrier barrier{32};
  uint32_t a[32][4];
  uint32_t b[32][2];
  uint32_t address[32];
  uint64_t value[32];
};

constexpr int kMaxWarps = 8;
inline std::atomic<long> ldmatrix_phases{0};
inline std::atomic<long> ldmatrix_conflicts{0};  // phases whose 8 rows share a bank group
inline std::atomic<long> cp_async_copies{0};      // 16-byte cp.async issued (zero-fill too)
inline Barrier* block_barrier = nullptr;
inline WarpSlots warps[kMaxWarps];

inline int lane() { return threadIdx.x & 31; }
inline WarpSlots& warp() { return warps[threadIdx.x >> 5]; }

template <typename T>
T exchange(T value, int src_lane) {
  static_assert(sizeof(T) <= 8, "one slot per lane");
  WarpSlots& w = warp();
  uint64_t bits = 0;
  std::memcpy(&bits, &value, sizeof(T));
  w.value[lane()] = bits;
  w.barrier.wait();
  bits = w.value[src_lane];
  w.barrier.wait();
  T result;
  std::memcpy(&result, &bits, sizeof(T));
  return result;
}

}  // namespace emu

namespace flashcore::detail {
constexpr size_t kEmuSharedBytes = 256 * 1024;
alignas(128) inline unsigned char smem[kEmuSharedBytes];
}  // namespace flashcore::detail

inline void __syncthreads() { emu::block_barrier->wait(); }
template <typename T>
T __shfl_xor_sync(unsigned, T value, int lane_mask) {
  return emu::exchange(value, emu::lane() ^ lane_mask);
}
template <typename T>
T __shfl_sync(unsigned, T value, int src_lane) {
  return emu::exchange(value, src_lane);
}
inline size_t __cvta_generic_to_shared(const void* ptr) {
  return static_cast<const unsigned char*>(ptr) - flashcore::detail::smem;
}
inline float __frcp_rn(float x) { return 1.0f / x; }
// Never fused into an FMA on the GPU; noinline keeps g++ -ffp-contract=fast from fusing it here.
__attribute__((noinline)) inline float __fmul_rn(float a, float b) { return a * b; }
struct alignas(16) uint4 {
  unsigned x, y, z, w;
};
