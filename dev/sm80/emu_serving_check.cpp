// The sm80 kernel's serving layouts (varlen, contiguous and paged kv caches) on the host
// emulator (dev/sm80/emu), against the float64 oracle per sequence: the same ragged batches and
// NaN-filled unused slots as tests/cpp/test_gpu_serving.cpp, built by the same
// tests/cpp/serving_problem.h, with AttentionParams filled here as src/api fills them. The
// append is taken as done (the cache holds the new keys; seqused_k/seqlen_new still count them),
// since the append kernel is CUDA only. Build with AddressSanitizer so a read outside a tensor
// fails even where NaN would not show (repository root; see emu_check.cpp for the objects):
//   for f in testing/accuracy cpu/reference api/tensor; do
//     g++ -std=c++17 -O2 -I include -I src -c src/$f.cpp -o /tmp/$(basename $f).o; done
//   g++ -std=c++17 -O1 -g -fsanitize=address -mfma -ffp-contract=fast -pthread \
//       -include dev/sm80/emu/emu_runtime.h -I dev/sm80/emu -I include -I src -I tests/cpp -I dev/sm80 \
//       dev/sm80/emu_serving_check.cpp /tmp/accuracy.o /tmp/reference.o /tmp/tensor.o \
//       -o /tmp/emu_serving && /tmp/emu_serving [case]
#include <cstdio>
#include <thread>
#include <vector>

#include "cuda/sm80/forward_kernel.cuh"
#include "serving_problem.h"
#include "serving_params.h"

using flashcore::DType;
using flashcore::detail::AttentionParams;
using flashcore::test::ServingCase;
using flashcore::test::ServingLayout;
using flashcore::test::ServingProblem;

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

bool run_case(const ServingCase& c, uint64_t seed) {
  ServingProblem sp = flashcore::test::make_serving_problem(c, seed);
  // The emulator reads the cache as the append leaves it (the append kernel is CUDA only).
  AttentionParams p = flashcore::test::serving_params(sp, sp.c.append);
  if (p.page_table != nullptr) {
    dispatch<true>(p);
  } else {
    dispatch<false>(p);
  }
  std::vector<float> lse(sp.lse.bytes.size() / 4);
  std::memcpy(lse.data(), sp.lse.bytes.data(), sp.lse.bytes.size());
  bool ok = true;
  std::string worst;
  for (int b = 0; b < c.batch(); ++b) {
    const auto out = flashcore::test::sequence_out(sp, sp.out.bytes, b);
    const auto seq_lse = flashcore::test::sequence_lse(sp, lse, b);
    std::vector<int> rows(c.seqlens_q[b]);
    for (int i = 0; i < c.seqlens_q[b]; ++i) rows[i] = i;
    const auto report = flashcore::testing::check_accuracy(sp.shapes[b], sp.inputs[b], out.data(),
                                                           seq_lse.data(), rows);
    if (!report.pass) {
      ok = false;
      worst += "\n  seq " + std::to_string(b) + ": " + report.summary();
    }
  }
  // Rows no sequence owns (dense q past nothing; packed: none) stay poisoned: nothing to check.
  std::printf("%s %s%s\n", ok ? "PASS" : "FAIL", c.describe().c_str(), worst.c_str());
  std::fflush(stdout);
  return ok;
}

int main(int argc, char** argv) {
  const DType f16 = DType::kFloat16, b16 = DType::kBFloat16;
  std::vector<ServingCase> cases;
  const auto add = [&](ServingLayout layout, std::vector<int> q, std::vector<int> k, int hq, int hkv,
                       int d, DType dt, bool causal) -> ServingCase& {
    ServingCase c;
    c.layout = layout, c.seqlens_q = q, c.seqlens_k = k, c.heads_q = hq, c.heads_kv = hkv;
    c.head_dim = d, c.dtype = dt, c.causal = causal;
    cases.push_back(c);
    return cases.back();
  };
  for (bool causal : {false, true}) {
    add(ServingLayout::kVarlen, {1, 17, 0, 70}, {1, 65, 9, 130}, 2, 1, 128, f16, causal);
    add(ServingLayout::kVarlen, {130, 5}, {70, 200}, 2, 2, 64, b16, causal).seqused = true;
    for (int page : {1, 16, 64, 128, 5}) {
      ServingCase& c = add(ServingLayout::kPagedCache, {3, 1, 40}, {200, 1, 129}, 4, 1,
                           page == 128 ? 64 : 128, page == 16 ? b16 : f16, causal);
      c.page_size = page;
    }
    add(ServingLayout::kPagedCache, {2, 65}, {300, 65}, 2, 1, 64, b16, causal).page_size = 16;
    add(ServingLayout::kPagedCache, {1, 9}, {130, 9}, 2, 2, 256, f16, causal).page_size = 3;
    ServingCase& dense_q = add(ServingLayout::kPagedCache, {2, 2}, {70, 2}, 2, 1, 128, f16, causal);
    dense_q.packed_q = false, dense_q.page_size = 16, dense_q.append = true, dense_q.seqlen_new = 2;
    ServingCase& cache = add(ServingLayout::kContiguousCache, {5, 0, 20}, {100, 7, 20}, 2, 2, 256,
                             f16, causal);
    cache.append = true;
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
