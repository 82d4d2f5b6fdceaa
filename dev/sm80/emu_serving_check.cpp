// The sm80 kernel's serving layouts (varlen, contiguous and paged kv caches) on the host
// emulator (dev/sm80/emu), against the float64 oracle per sequence: the ragged batches of
// testing::ServingProblem (NaN in every unused row, slot and page), with AttentionParams from
// the API's own validation of the call's args over host memory and the host append run first
// (the append kernel is CUDA only). Build with AddressSanitizer so a read outside a tensor fails
// even where NaN would not show (repository root; a CPU-only build supplies the libraries):
//   cmake -S . -B build-cpu -G Ninja -DFLASHCORE_ENABLE_CUDA=OFF -DFLASHCORE_BUILD_PYTHON=OFF
//   ninja -C build-cpu flashcore flashcore_testing
//   g++ -std=c++17 -O1 -g -fsanitize=address -mfma -ffp-contract=fast -pthread
//       -include dev/sm80/emu/emu_runtime.h -I dev/sm80/emu -I include -I src
//       dev/sm80/emu_serving_check.cpp build-cpu/src/libflashcore_testing.a
//       build-cpu/src/libflashcore.a -o /tmp/emu_serving
//   /tmp/emu_serving [case]   (22 cases, ~2 minutes)
#include <cstdio>
#include <thread>
#include <vector>

#include "api/validate.h"
#include "api/validate_serving.h"
#include "common/append.h"
#include "cuda/sm80/forward_kernel.cuh"
#include "testing/serving_problem.h"

using flashcore::DType;
using flashcore::detail::AttentionParams;
using flashcore::testing::KvLayout;
using flashcore::testing::ServingProblem;
using flashcore::testing::ServingShape;

template <DType kDType, int kHeadDim, bool kCausal, bool kPaged>
void run_emulated(const AttentionParams& params) {
  using Shape = flashcore::detail::Sm80ForwardTraits<kDType, kHeadDim, kCausal>;
  gridDim = {unsigned((params.seqlen_q + Shape::kBlockM - 1) / Shape::kBlockM),
             unsigned(params.heads_q), unsigned(params.batch)};
  for (unsigned z = 0; z < gridDim.z; ++z) {
    for (unsigned y = 0; y < gridDim.y; ++y) {
      for (unsigned x = 0; x < gridDim.x; ++x) {
        emu::Barrier block(Shape::kThreads);
        emu::block_barrier = &block;
        std::memset(flashcore::detail::smem, 0xff, Shape::kSmemBytes);  // NaN, not zeros
        std::vector<std::thread> threads;
        for (int t = 0; t < Shape::kThreads; ++t) {
          threads.emplace_back([&, t] {
            threadIdx = {unsigned(t), 0, 0};
            blockIdx = {x, y, z};
            flashcore::detail::sm80_forward_kernel<kDType, kHeadDim, kCausal, kPaged>(params);
          });
        }
        for (auto& th : threads) th.join();
      }
    }
  }
}

template <bool kPaged>
void dispatch(const AttentionParams& p) {
#define FC_CASE(DT, HD)                                                                       \
  if (p.dtype == DT && p.head_dim == HD) {                                                    \
    return p.causal ? run_emulated<DT, HD, true, kPaged>(p) : run_emulated<DT, HD, false, kPaged>(p); \
  }
  FC_CASE(DType::kFloat16, 64)
  FC_CASE(DType::kFloat16, 128)
  FC_CASE(DType::kFloat16, 256)
  FC_CASE(DType::kBFloat16, 64)
  FC_CASE(DType::kBFloat16, 128)
#undef FC_CASE
  std::abort();
}

bool run_case(const ServingShape& shape, uint64_t seed) {
  ServingProblem problem(shape, seed);
  const flashcore::AttentionArgs args = problem.args(flashcore::Backend::kCPU);
  const AttentionParams p = flashcore::detail::validate_common(args);
  const flashcore::detail::AppendParams append = flashcore::detail::append_params(args);
  if (append.active()) flashcore::detail::append_kv_host(p, append);
  if (p.page_table != nullptr) {
    dispatch<true>(p);
  } else {
    dispatch<false>(p);
  }
  bool ok = true;
  std::string failures;
  for (int b = 0; b < shape.batch(); ++b) {
    const auto report = problem.check_sequence(b, 1 << 20);
    if (!report.pass) ok = false, failures += "\n  seq " + std::to_string(b) + ": " + report.summary();
  }
  std::printf("%s %s%s\n", ok ? "PASS" : "FAIL", shape.describe().c_str(), failures.c_str());
  std::fflush(stdout);
  return ok;
}

int main(int argc, char** argv) {
  const DType f16 = DType::kFloat16, b16 = DType::kBFloat16;
  std::vector<ServingShape> cases;
  const auto add = [&](KvLayout kv, std::vector<int> q, std::vector<int> k, int hq, int hkv, int d,
                       DType dt, bool causal) -> ServingShape& {
    ServingShape s;
    s.kv = kv, s.q_lens = q, s.k_lens = k, s.heads_q = hq, s.heads_kv = hkv;
    s.head_dim = d, s.dtype = dt, s.causal = causal;
    cases.push_back(s);
    return cases.back();
  };
  for (bool causal : {false, true}) {
    add(KvLayout::kVarlen, {1, 17, 0, 70}, {1, 65, 9, 130}, 2, 1, 128, f16, causal);
    add(KvLayout::kVarlen, {130, 5}, {70, 200}, 2, 2, 64, b16, causal).seqused = true;
    for (int page : {1, 16, 64, 128, 5}) {  // d128: gathered rows, one page per tile at 64
      ServingShape& s = add(KvLayout::kPaged, {3, 1, 40}, {200, 1, 129}, 4, 1,
                            page == 128 ? 64 : 128, page == 16 ? b16 : f16, causal);
      s.page_size = page;
    }
    add(KvLayout::kPaged, {2, 65}, {300, 65}, 2, 1, 64, b16, causal).page_size = 16;  // d64 gather
    add(KvLayout::kPaged, {1, 9}, {130, 9}, 2, 2, 256, f16, causal).page_size = 3;
    ServingShape& dense_q = add(KvLayout::kPaged, {2, 2}, {70, 2}, 2, 1, 128, f16, causal);
    dense_q.packed_q = false, dense_q.page_size = 16, dense_q.append = true, dense_q.seqlen_new = 2;
    add(KvLayout::kCache, {5, 0, 20}, {100, 7, 20}, 2, 2, 256, f16, causal).append = true;
  }
  const int only = argc > 1 ? std::atoi(argv[1]) : -1;
  int failures = 0;
  for (size_t i = 0; i < cases.size(); ++i) {
    if (only >= 0 && int(i) != only) continue;
    failures += run_case(cases[i], 300 + i) ? 0 : 1;
  }
  std::printf("%d failure(s)\n", failures);
  return failures ? 1 : 0;
}
