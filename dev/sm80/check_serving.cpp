// The sm80 kernel and the CUDA kv-cache append on a GPU, driven through AttentionParams directly
// (dev/sm80/serving_params.h) rather than the API: checks the kernels on every case of the
// serving suite (tests/cpp/serving_cases.h) before the API's validation of the serving arguments
// exists, with the suite's per-sequence float64 check and byte-exact cache check.
//
// Build (after building libflashcore in build-cuda; repository root), one command:
//   g++ -std=c++17 -O2 -I include -I src -I tests/cpp -I dev/sm80 -I /usr/local/cuda/include
//       dev/sm80/check_serving.cpp build-cuda/src/libflashcore_testing.a
//       build-cuda/src/libflashcore.a -L /usr/local/cuda/lib64 -lcudart_static -ldl -lrt
//       -pthread -o build-cuda/check_serving
// Run: build-cuda/check_serving [case-substring | wrong]   (exit status 1 if any case fails);
// under compute-sanitizer --tool memcheck with a substring (or "wrong") to keep it short.
#include <cuda_runtime.h>

#include <cstdio>
#include <cstring>
#include <memory>
#include <string>

#include "api/kernel_registry.h"
#include "cuda/append_kv.h"
#include "serving_cases.h"
#include "serving_params.h"

using namespace flashcore;
using namespace flashcore::test;

#define CHECK_CUDA(expr)                                                                   \
  do {                                                                                     \
    cudaError_t e_ = (expr);                                                               \
    if (e_ != cudaSuccess) {                                                               \
      std::printf("CUDA error %s at %s:%d\n", cudaGetErrorString(e_), __FILE__, __LINE__); \
      std::exit(2);                                                                        \
    }                                                                                      \
  } while (0)

// Device copy of a host vector, freed on scope exit.
struct DeviceCopy {
  void* ptr = nullptr;
  size_t bytes = 0;
  template <class T>
  explicit DeviceCopy(const std::vector<T>& host) : bytes(host.size() * sizeof(T)) {
    CHECK_CUDA(cudaMalloc(&ptr, bytes ? bytes : 16));
    if (bytes) CHECK_CUDA(cudaMemcpy(ptr, host.data(), bytes, cudaMemcpyHostToDevice));
  }
  ~DeviceCopy() { cudaFree(ptr); }
  template <class T>
  std::vector<T> download() const {
    std::vector<T> host(bytes / sizeof(T));
    CHECK_CUDA(cudaMemcpy(host.data(), ptr, bytes, cudaMemcpyDeviceToHost));
    return host;
  }
};

// Wrong index values (the GPU suite's WrongIndexValuesStayInsideTheTensors): pages past the
// cache and negative, cache_seqlens past the capacity and negative, decreasing cu_seqlens_q.
// Nothing is checked but that the kernels complete: run under compute-sanitizer memcheck.
void make_indices_wrong(ServingProblem& sp) {
  for (size_t i = 0; i < sp.page_table.size(); ++i) {
    sp.page_table[i] = (i % 3 == 0) ? 1 << 30 : (i % 3 == 1) ? -5 : sp.page_table[i];
  }
  sp.cache_seqlens = {1 << 30, -100, int32_t(sp.page_table_width * sp.c.page_size - 1)};
  sp.cu_seqlens_q = {0, 5, 2, 6};
}

bool run_case(const ServingCase& c, int stride, bool wrong_indices = false) {
  ServingProblem sp = make_serving_problem(c, 1234);
  if (wrong_indices) make_indices_wrong(sp);
  detail::AttentionParams p = serving_params(sp, false);
  DeviceCopy q(sp.q.bytes), k(sp.k.bytes), v(sp.v.bytes), out(sp.out.bytes), lse(sp.lse.bytes);
  DeviceCopy k_new(sp.k_new.bytes), v_new(sp.v_new.bytes);
  DeviceCopy cu_q(sp.cu_seqlens_q), cu_k(sp.cu_seqlens_k), used(sp.seqused_k);
  DeviceCopy cache_seqlens(sp.cache_seqlens), pages(sp.page_table);
  p.q = q.ptr, p.k = k.ptr, p.v = v.ptr, p.out = out.ptr, p.lse = static_cast<float*>(lse.ptr);
  if (p.cu_seqlens_q) p.cu_seqlens_q = static_cast<int32_t*>(cu_q.ptr);
  if (p.cu_seqlens_k) p.cu_seqlens_k = static_cast<int32_t*>(cu_k.ptr);
  if (p.page_table) p.page_table = static_cast<int32_t*>(pages.ptr);
  if (p.seqused_k) {
    p.seqused_k = static_cast<int32_t*>(c.layout == ServingLayout::kVarlen ? used.ptr
                                                                           : cache_seqlens.ptr);
  }
  if (c.append) {
    const flashcore::Device cuda{DeviceType::kCUDA, 0};
    detail::append_kv_cuda(p, make_tensor(k_new.ptr, c.dtype, cuda, sp.k_new.shape),
                           make_tensor(v_new.ptr, c.dtype, cuda, sp.v_new.shape));
  }
  // Decode (one query row) runs the unmasked kernel, as the API does.
  const bool causal_kernel = c.causal && p.seqlen_q != 1;
  detail::find_kernel(Backend::kSM80, c.dtype, c.head_dim, causal_kernel)(p);
  CHECK_CUDA(cudaDeviceSynchronize());
  if (wrong_indices) {
    std::printf("[sm80 direct] wrong index values, %s: completed\n", c.describe().c_str());
    return true;
  }
  const std::vector<uint8_t> k_after = k.download<uint8_t>(), v_after = v.download<uint8_t>();
  const ServingVerdict verdict =
      check_serving_outputs(sp, out.download<uint8_t>(), lse.download<float>(), &k_after,
                            &v_after, 64, stride);
  std::printf("[sm80 direct] %s: %s%s\n", c.describe().c_str(), verdict.pass ? "PASS" : "FAIL",
              verdict.pass ? ("; closest: " + verdict.closest).c_str() : verdict.failures.c_str());
  std::fflush(stdout);
  return verdict.pass;
}

int main(int argc, char** argv) {
  const std::string only = argc > 1 ? argv[1] : "";
  std::vector<ServingCase> cases = serving_case_list();
  int failures = 0, ran = 0;
  for (const ServingCase& c : cases) {
    if (!only.empty() && c.describe().find(only) == std::string::npos) continue;
    ++ran;
    failures += run_case(c, 1) ? 0 : 1;
  }
  for (int page : {1, 16}) {
    ServingCase c = make_case(ServingLayout::kPagedCache, {3, 1, 2}, {40, 9, 20}, 4, 1, 128,
                              DType::kBFloat16, true);
    c.page_size = page, c.append = true;
    if (only.empty() || only == "wrong") ++ran, failures += run_case(c, 1, true) ? 0 : 1;
  }
  // The suite's batch-64 decode.
  std::vector<int> q(64, 1), k(64);
  for (int b = 0; b < 64; ++b) k[b] = 4096 - 37 * (b % 5);
  ServingCase big = make_case(ServingLayout::kPagedCache, q, k, 8, 1, 128, DType::kBFloat16, true);
  big.packed_q = false, big.page_size = 16, big.append = true, big.seqlen_new = 1;
  if (only.empty()) ++ran, failures += run_case(big, 8) ? 0 : 1;
  std::printf("%d of %d case(s) failed\n", failures, ran);
  return failures ? 1 : 0;
}
