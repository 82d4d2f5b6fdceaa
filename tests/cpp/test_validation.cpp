// Every validation error: thrown before anything runs, naming the argument and the value.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "api/backend.h"
#include "api/validate.h"
#include "api/validate_serving.h"
#include "thrown_message.h"
#include "flashcore/flashcore.h"
#include "testing/serving_problem.h"
#include "thrown_message.h"

namespace flashcore {
namespace {

constexpr Device kCpu{DeviceType::kCPU, 0};
constexpr Device kCuda0{DeviceType::kCUDA, 0};

// Fake, well-aligned device addresses, far apart: validation never dereferences CUDA pointers.
void* fake_device_ptr(uintptr_t slot) { return reinterpret_cast<void*>((slot + 1) << 32); }

// Runs validation and returns the error message ("" when nothing was thrown).
std::string error_of(const AttentionArgs& args) {
  return test::thrown_message([&] { select_backend(args); });
}

#define EXPECT_ERROR_MENTIONS(args, ...)                                          \
  do {                                                                            \
    const std::string message_ = error_of(args);                                  \
    ASSERT_FALSE(message_.empty()) << "no error thrown";                          \
    for (const char* part_ : {__VA_ARGS__}) {                                     \
      EXPECT_NE(message_.find(part_), std::string::npos)                          \
          << "message \"" << message_ << "\" lacks \"" << part_ << "\"";          \
    }                                                                             \
  } while (0)

// Valid host args: b2 sq16 sk24 hq8 hkv2 d64 fp16, owning their buffers.
class Validation : public ::testing::Test {
 protected:
  static constexpr int64_t kB = 2, kSq = 16, kSk = 24, kHq = 8, kHkv = 2, kD = 64;
  std::vector<uint16_t> q_buf = std::vector<uint16_t>(kB * kSq * kHq * kD);
  std::vector<uint16_t> k_buf = std::vector<uint16_t>(kB * kSk * kHkv * kD);
  std::vector<uint16_t> v_buf = std::vector<uint16_t>(kB * kSk * kHkv * kD);
  std::vector<uint16_t> o_buf = std::vector<uint16_t>(kB * kSq * kHq * kD);
  std::vector<float> lse_buf = std::vector<float>(kB * kHq * kSq);
  AttentionArgs args;

  void SetUp() override {
    args.q = make_tensor(q_buf.data(), DType::kFloat16, kCpu, {kB, kSq, kHq, kD});
    args.k = make_tensor(k_buf.data(), DType::kFloat16, kCpu, {kB, kSk, kHkv, kD});
    args.v = make_tensor(v_buf.data(), DType::kFloat16, kCpu, {kB, kSk, kHkv, kD});
    args.out = make_tensor(o_buf.data(), DType::kFloat16, kCpu, {kB, kSq, kHq, kD});
    ASSERT_EQ(error_of(args), "");
  }

  // The same shapes as CUDA tensors at fake device addresses.
  void move_to_cuda() {
    TensorView* views[] = {&args.q, &args.k, &args.v, &args.out};
    for (uintptr_t i = 0; i < 4; ++i) {
      views[i]->device = kCuda0;
      views[i]->data = fake_device_ptr(i);
    }
  }

  bool cuda_backends_can_see_fakes() const {
    // With a real GPU present, fake pointers fail the device-memory check first.
    return backend_available(Backend::kSM80) || backend_available(Backend::kSM90);
  }
};

// One wording for every tensor (the Python module uses it too: tests/python/test_errors.py).
TEST_F(Validation, TensorsMustBe4D) {
  args.q = make_tensor(q_buf.data(), DType::kFloat16, kCpu, {kB * kSq, kHq, kD});
  EXPECT_EQ(error_of(args),
            "q must have 4 dimensions [batch, seqlen, heads, head_dim], got 3 (shape [32, 8, 64])");
  SetUp();
  args.k = make_tensor(k_buf.data(), DType::kFloat16, kCpu, {kB, kSk, kHkv * kD});
  EXPECT_ERROR_MENTIONS(args, "k must have 4 dimensions [batch, seqlen, heads, head_dim]",
                        "got 3 (shape [2, 24, 128])");
  SetUp();
  args.out = make_tensor(o_buf.data(), DType::kFloat16, kCpu, {kB, kSq, kHq * kD});
  EXPECT_ERROR_MENTIONS(args, "out must have 4 dimensions [batch, seqlen, heads, head_dim]",
                        "got 3 (shape [2, 16, 512])");
  SetUp();
  args.v = make_tensor(v_buf.data(), DType::kFloat16, kCpu, {kB * kSk * kHkv * kD});
  EXPECT_ERROR_MENTIONS(args, "v must have 4 dimensions [batch, seqlen, heads, head_dim]",
                        "got 1 (shape [6144])");
}

TEST_F(Validation, HeadsQMustBeMultipleOfHeadsKv) {
  std::vector<uint16_t> big_q(kB * kSq * 32 * kD), big_o(big_q.size()), kv(kB * kSk * 6 * kD),
      kv2(kv.size());
  args.q = make_tensor(big_q.data(), DType::kFloat16, kCpu, {kB, kSq, 32, kD});
  args.out = make_tensor(big_o.data(), DType::kFloat16, kCpu, {kB, kSq, 32, kD});
  args.k = make_tensor(kv.data(), DType::kFloat16, kCpu, {kB, kSk, 6, kD});
  args.v = make_tensor(kv2.data(), DType::kFloat16, kCpu, {kB, kSk, 6, kD});
  EXPECT_ERROR_MENTIONS(args, "heads_q=32 is not a multiple of heads_kv=6");
}

TEST_F(Validation, BatchMismatchNamesBothTensors) {
  args.k.shape[0] = args.v.shape[0] = 1;
  EXPECT_ERROR_MENTIONS(args, "batch of q (2)", "batch of k (1)");
}

TEST_F(Validation, HeadDimMismatchNamesBothTensors) {
  args.k.shape[3] = args.v.shape[3] = 32;
  EXPECT_ERROR_MENTIONS(args, "head_dim of q (64)", "head_dim of k (32)");
}

TEST_F(Validation, OutShapeMustMatchQ) {
  args.out.shape[1] = 8;
  EXPECT_ERROR_MENTIONS(args, "seqlen of out (8)", "seqlen of q (16)");
}

TEST_F(Validation, KAndVShapesMustMatch) {
  args.v.shape[1] = 20;
  EXPECT_ERROR_MENTIONS(args, "k and v must have the same shape", "[2, 24, 2, 64]",
                        "[2, 20, 2, 64]");
}

TEST_F(Validation, DtypeMismatchNamesBothDtypes) {
  args.k.dtype = DType::kBFloat16;
  EXPECT_ERROR_MENTIONS(args, "dtype of k (bf16)", "dtype of q (fp16)");
}

TEST_F(Validation, Fp32OnlyOnHostBackends) {
  move_to_cuda();
  for (TensorView* t : {&args.q, &args.k, &args.v, &args.out}) t->dtype = DType::kFloat32;
  EXPECT_ERROR_MENTIONS(args, "fp32", "cpu and reference backends");
}

TEST_F(Validation, LastDimStrideMustBeOne) {
  args.k.strides[3] = 3;
  EXPECT_ERROR_MENTIONS(args, "stride of last dim of k must be 1, got 3");
}

TEST_F(Validation, CudaBasePointerMustBe16ByteAligned) {
  move_to_cuda();
  args.q.data = static_cast<char*>(args.q.data) + 8;
  EXPECT_ERROR_MENTIONS(args, "data pointer of q", "16-byte aligned");
  const std::string message = error_of(args);
  char address[32];
  std::snprintf(address, sizeof(address), "%p", args.q.data);
  EXPECT_NE(message.find(address), std::string::npos) << message << " lacks " << address;
}

TEST_F(Validation, CudaRowStridesMustKeepRowsAligned) {
  move_to_cuda();
  args.k.strides[1] = kHkv * kD + 4;  // 4 fp16 = 8 bytes of padding per row
  args.v.strides[1] = kHkv * kD + 4;
  EXPECT_ERROR_MENTIONS(args, "seqlen stride of k is 132 elements (264 bytes)", "multiple of 16");
}

TEST_F(Validation, HostTensorsMayHaveAnyStride) {
  args.k.strides[1] = args.v.strides[1] = kHkv * kD + 4;
  std::vector<uint16_t> k(kB * kSk * (kHkv * kD + 4)), v(k.size());
  args.k.data = k.data(), args.v.data = v.data();
  EXPECT_EQ(error_of(args), "");
}

TEST_F(Validation, DevicesMustMatch) {
  move_to_cuda();
  args.k.device = kCpu;
  EXPECT_ERROR_MENTIONS(args, "q on cuda:0 but k on cpu");
  move_to_cuda();
  args.out.device = Device{DeviceType::kCUDA, 1};
  EXPECT_ERROR_MENTIONS(args, "q on cuda:0 but out on cuda:1");
}

#ifdef FLASHCORE_HAS_CUDA
TEST_F(Validation, CudaTensorMustBeDeviceMemory) {
  if (!backend_available(Backend::kSM80) && !backend_available(Backend::kSM90)) {
    GTEST_SKIP() << "no CUDA device: the device-memory check needs one";
  }
  for (TensorView* t : {&args.q, &args.k, &args.v, &args.out}) t->device = kCuda0;
  EXPECT_ERROR_MENTIONS(args, "q is marked as on cuda:0", "is not memory of that device");
}
#endif

// Device properties are read once per process: asking about an absent index, then a present one,
// then the absent one again must give the same answers as the first time (the per-device table
// must not be sized, filled or indexed by whichever index came first).
TEST_F(Validation, DeviceAnswersDoNotDependOnCallOrder) {
  constexpr int kAbsentIndex = 1000;  // no machine has this many GPUs
  for (Backend backend : {Backend::kSM80, Backend::kSM90}) {
    const bool first = backend_available(backend, 0);
    EXPECT_FALSE(backend_available(backend, kAbsentIndex));
    EXPECT_FALSE(backend_available(backend, -1));
    EXPECT_EQ(backend_available(backend, 0), first);
    EXPECT_FALSE(backend_available(backend, kAbsentIndex));
  }
}

#ifdef FLASHCORE_HAS_CUDA
TEST_F(Validation, AbsentDeviceIndexIsNamedEveryCall) {
  move_to_cuda();
  const std::string on_device_0 = error_of(args);
  for (int repeat = 0; repeat < 2; ++repeat) {
    for (TensorView* t : {&args.q, &args.k, &args.v, &args.out}) {
      t->device = Device{DeviceType::kCUDA, 7};
    }
    EXPECT_ERROR_MENTIONS(args, "q is on cuda:7 but there is no such CUDA device");
    move_to_cuda();
    EXPECT_EQ(error_of(args), on_device_0);  // unchanged by the absent index in between
  }
}

TEST_F(Validation, RepeatedHostPointerMarkedCudaIsStillRejected) {
  if (!backend_available(Backend::kSM80) && !backend_available(Backend::kSM90)) {
    GTEST_SKIP() << "no CUDA device: the device-memory check needs one";
  }
  move_to_cuda();
  // k and v share one host buffer: the repeat must not be waved through by the first check.
  std::vector<uint16_t> host(args.k.numel());
  args.q.data = args.out.data = nullptr;
  args.q.shape[1] = args.out.shape[1] = 0;  // no query rows: q/out have no memory to check
  args.k.data = args.v.data = host.data();
  EXPECT_ERROR_MENTIONS(args, "k is marked as on cuda:0", "is not memory of that device");
}
#endif

// Bottom-right causal with one query row sees every key, so decode steps take the unmasked
// kernels (no tile counters to zero); two rows already need the mask.
TEST_F(Validation, OneCausalQueryRowRunsUnmasked) {
  EXPECT_FALSE(detail::needs_causal_mask(true, 1));
  EXPECT_TRUE(detail::needs_causal_mask(true, 2));
  EXPECT_FALSE(detail::needs_causal_mask(false, 2));
  args.causal = true;
  EXPECT_TRUE(detail::validate_common(args).causal);  // 16 query rows
  std::vector<uint16_t> one_row(kB * kHq * kD);
  args.q = make_tensor(one_row.data(), DType::kFloat16, kCpu, {kB, 1, kHq, kD});
  args.out = make_tensor(o_buf.data(), DType::kFloat16, kCpu, {kB, 1, kHq, kD});
  EXPECT_FALSE(detail::validate_common(args).causal);
}

TEST_F(Validation, WorkspaceBytesDependOnTheDevice) {
  EXPECT_EQ(attention_workspace_bytes(args), 0u);  // host backends need no workspace
  move_to_cuda();
  EXPECT_EQ(attention_workspace_bytes(args), 8u);  // two uint32 tile counters
}

TEST_F(Validation, WorkspaceSmallerThanRequiredNamesBothSizes) {
  move_to_cuda();
  args.workspace = fake_device_ptr(4);
  args.workspace_bytes = 4;
  EXPECT_ERROR_MENTIONS(args, "workspace_bytes=4", "smaller than the 8 bytes",
                        "attention_workspace_bytes");
}

TEST_F(Validation, WorkspaceBytesWithoutPointer) {
  move_to_cuda();
  args.workspace_bytes = 8;
  EXPECT_ERROR_MENTIONS(args, "workspace is null but workspace_bytes=8");
}

TEST_F(Validation, WorkspaceMustBe4ByteAligned) {
  move_to_cuda();
  args.workspace = static_cast<char*>(fake_device_ptr(4)) + 2;
  args.workspace_bytes = 16;
  EXPECT_ERROR_MENTIONS(args, "workspace pointer", "must be 4-byte aligned");
  const std::string message = error_of(args);
  char address[32];
  std::snprintf(address, sizeof(address), "%p", args.workspace);
  EXPECT_NE(message.find(address), std::string::npos) << message << " lacks " << address;
}

TEST_F(Validation, HostCallsAcceptAndIgnoreAWorkspace) {
  uint32_t counters[2] = {};
  args.workspace = counters;
  args.workspace_bytes = sizeof(counters);
  EXPECT_EQ(error_of(args), "");
}

TEST_F(Validation, OutMustNotAliasInputs) {
  args.out.data = args.q.data;
  EXPECT_ERROR_MENTIONS(args, "out overlaps q");
  SetUp();
  // Partial overlap: out starts inside v.
  std::vector<uint16_t> shared(v_buf.size() + o_buf.size());
  args.v.data = shared.data();
  args.out.data = shared.data() + v_buf.size() - 64;
  EXPECT_ERROR_MENTIONS(args, "out overlaps v");
}

TEST_F(Validation, LseShapeDtypeStrideAndDevice) {
  args.lse = make_tensor(lse_buf.data(), DType::kFloat32, kCpu, {kB, kHq, kSq});
  EXPECT_EQ(error_of(args), "");
  args.lse = make_tensor(lse_buf.data(), DType::kFloat32, kCpu, {kB, kSq, kHq});
  EXPECT_ERROR_MENTIONS(args, "lse must have shape [2, 8, 16]", "got [2, 16, 8]");
  args.lse = make_tensor(lse_buf.data(), DType::kFloat32, kCpu, {kB * kHq * kSq});
  EXPECT_ERROR_MENTIONS(args, "lse must have 3 dimensions [batch, heads_q, seqlen_q], got 1",
                        "(shape [256])");
  args.lse = make_tensor(lse_buf.data(), DType::kFloat16, kCpu, {kB, kHq, kSq});
  EXPECT_ERROR_MENTIONS(args, "lse must be fp32, got fp16");
  args.lse = make_strided_tensor(lse_buf.data(), DType::kFloat32, kCpu, {kB, kHq, kSq / 2},
                                 {kHq * kSq, kSq, 2});
  args.lse->shape[2] = kSq;
  EXPECT_ERROR_MENTIONS(args, "stride of last dim of lse must be 1, got 2");
  args.lse = make_tensor(lse_buf.data(), DType::kFloat32, kCuda0, {kB, kHq, kSq});
  EXPECT_ERROR_MENTIONS(args, "lse on cuda:0 but q on cpu");
}

TEST_F(Validation, SoftmaxScaleMustBeFinitePositive) {
  for (float scale : {0.0f, -1.0f, std::numeric_limits<float>::infinity(), std::nanf("")}) {
    args.softmax_scale = scale;
    EXPECT_ERROR_MENTIONS(args, "softmax_scale must be finite and > 0, got");
  }
  args.softmax_scale = -1.0f;
  EXPECT_ERROR_MENTIONS(args, "got -1");
}

TEST_F(Validation, HeadDimMustBePositive) {
  for (TensorView* t : {&args.q, &args.k, &args.v, &args.out}) t->shape[3] = 0;
  EXPECT_ERROR_MENTIONS(args, "head_dim must be > 0, got head_dim=0");
}

TEST_F(Validation, CudaHeadDimAtMost256) {
  move_to_cuda();
  for (TensorView* t : {&args.q, &args.k, &args.v, &args.out}) t->shape[3] = 512;
  EXPECT_ERROR_MENTIONS(args, "head_dim=512 is larger than 256");
}

// "head_dim=80 is not supported by backend sm90; supported: ..." needs a CUDA backend that can run:
// test_gpu_attention.cpp covers it on a device.

TEST_F(Validation, ExplicitBackendMustBeAvailable) {
  if (cuda_backends_can_see_fakes() || backend_available(Backend::kSM90)) {
    GTEST_SKIP() << "backend sm90 is available here";
  }
  move_to_cuda();
  args.backend = Backend::kSM90;
  EXPECT_ERROR_MENTIONS(args, "backend sm90 requested but not available");
}

TEST_F(Validation, AutoOnCudaTensorsWithoutCudaBackendsExplains) {
  if (cuda_backends_can_see_fakes()) GTEST_SKIP() << "a CUDA backend is available here";
  move_to_cuda();
  const std::string message = error_of(args);
  EXPECT_FALSE(message.empty());
  EXPECT_NE(message.find("cuda:0"), std::string::npos) << message;
}

TEST_F(Validation, BackendMustMatchTensorDevice) {
  move_to_cuda();
  args.backend = Backend::kCPU;
  EXPECT_ERROR_MENTIONS(args, "backend cpu needs host tensors, but q is on cuda:0");
  args.backend = Backend::kReference;
  EXPECT_ERROR_MENTIONS(args, "backend reference needs host tensors");
  SetUp();
  args.backend = Backend::kSM80;
  EXPECT_ERROR_MENTIONS(args, "backend sm80 needs CUDA tensors, but q is on cpu");
}

TEST_F(Validation, NegativeSizes) {
  args.q.shape[1] = -1;
  EXPECT_ERROR_MENTIONS(args, "size of dim 1 of q must be >= 0, got -1");
}

TEST_F(Validation, NullPointerWithElements) {
  args.v.data = nullptr;
  EXPECT_ERROR_MENTIONS(args, "v has a null data pointer", "6144 elements");
}

TEST_F(Validation, ZeroSizesAreValid) {
  args.q.shape[1] = args.out.shape[1] = 0;
  EXPECT_EQ(error_of(args), "");
  SetUp();
  args.k.shape[1] = args.v.shape[1] = 0;
  EXPECT_EQ(error_of(args), "");
}

TEST_F(Validation, ParamsCarryDefaultScaleAndStrides) {
  args.lse = make_tensor(lse_buf.data(), DType::kFloat32, kCpu, {kB, kHq, kSq});
  detail::AttentionParams p = detail::validate_common(args);
  EXPECT_FLOAT_EQ(p.softmax_scale, 0.125f);
  EXPECT_FLOAT_EQ(p.softmax_scale_log2, 0.125f * 1.44269504f);
  EXPECT_EQ(p.q_row_stride, kHq * kD);
  EXPECT_EQ(p.k_batch_stride, kSk * kHkv * kD);
  EXPECT_EQ(p.lse_head_stride, kSq);
  EXPECT_EQ(p.group_size(), 4);
  args.softmax_scale = 0.3f;
  EXPECT_FLOAT_EQ(detail::validate_common(args).softmax_scale, 0.3f);
}

}  // namespace
}  // namespace flashcore

// --- serving layouts (flashcore.h "Serving layouts") ---
namespace flashcore {
namespace {

using testing::KvLayout;
using testing::ServingProblem;
using testing::ServingShape;

ServingShape small_serving(KvLayout kv, bool append = false, bool packed_q = true) {
  ServingShape s;
  s.kv = kv;
  s.q_lens = packed_q ? std::vector<int>{3, 0, 5} : std::vector<int>{1, 1, 1};
  s.k_lens = {20, 7, 40};
  s.packed_q = packed_q;
  s.append = append;
  s.page_size = 16;
  s.causal = true;
  return s;
}

// The problem's valid args validate; each test then breaks one thing.
class ServingValidation : public ::testing::Test {
 protected:
  ServingProblem varlen{small_serving(KvLayout::kVarlen)};
  ServingProblem paged{small_serving(KvLayout::kPaged, true)};           // packed q + append
  ServingProblem decode{small_serving(KvLayout::kPaged, true, false)};   // dense q, 1 new token
  ServingProblem contiguous{small_serving(KvLayout::kCache)};
  std::vector<uint16_t> spare = std::vector<uint16_t>(1 << 16);
  std::vector<int32_t> spare_ints = std::vector<int32_t>(64);

  void SetUp() override {
    for (ServingProblem* p : {&varlen, &paged, &decode, &contiguous}) {
      ASSERT_EQ(error_of(p->args()), "") << p->shape().describe();
    }
  }
};

TEST_F(ServingValidation, CombinationsThatMeanNothing) {
  AttentionArgs a = varlen.args();
  a.cache_seqlens = contiguous.args().cache_seqlens;
  EXPECT_ERROR_MENTIONS(a, "cu_seqlens_k and cache_seqlens cannot be combined");
  a = varlen.args();
  a.cu_seqlens_q.reset();
  EXPECT_ERROR_MENTIONS(a, "cu_seqlens_k is set but cu_seqlens_q is not");
  a = varlen.args();
  a.cu_seqlens_k.reset();
  EXPECT_ERROR_MENTIONS(a, "cu_seqlens_q is set without cu_seqlens_k", "cache_seqlens");
  a = contiguous.args();
  a.seqused_k = a.cache_seqlens;
  EXPECT_ERROR_MENTIONS(a, "seqused_k is set without cu_seqlens_k");
  a = decode.args();
  a.cache_seqlens.reset();
  a.k_new.reset(), a.v_new.reset();
  EXPECT_ERROR_MENTIONS(a, "page_table is set without cache_seqlens");
  a = paged.args();
  a.v_new.reset();
  EXPECT_ERROR_MENTIONS(a, "k_new is set but v_new is not");
  a = paged.args();
  a.k_new.reset();
  EXPECT_ERROR_MENTIONS(a, "v_new is set but k_new is not");
  a = varlen.args();
  a.k_new = paged.args().k_new, a.v_new = paged.args().v_new;
  EXPECT_ERROR_MENTIONS(a, "k_new/v_new are set without cache_seqlens");
}

TEST_F(ServingValidation, PackedRanks) {
  AttentionArgs a = varlen.args();
  a.q = make_tensor(spare.data(), DType::kFloat16, kCpu, {1, 8, 8, 64});
  EXPECT_ERROR_MENTIONS(a, "q must have 3 dimensions [total_q, heads_q, head_dim], got 4");
  a = varlen.args();
  a.k.ndim = 4, a.k.shape[3] = 1;
  EXPECT_ERROR_MENTIONS(a, "k must have 3 dimensions [total_k, heads_kv, head_dim], got 4");
  a = paged.args();
  a.k = make_tensor(spare.data(), DType::kFloat16, kCpu, {64, 2, 64});
  EXPECT_ERROR_MENTIONS(a, "k must have 4 dimensions [num_pages, page_size, heads_kv, head_dim]");
}

TEST_F(ServingValidation, IndexTensorsMustBeInt32) {
  AttentionArgs a = varlen.args();
  a.cu_seqlens_q->dtype = DType::kFloat16;
  EXPECT_ERROR_MENTIONS(a, "cu_seqlens_q must be int32, got fp16");
  a = paged.args();
  a.page_table->dtype = DType::kFloat32;
  EXPECT_ERROR_MENTIONS(a, "page_table must be int32, got fp32");
  a = paged.args();
  a.cache_seqlens->dtype = DType::kBFloat16;
  EXPECT_ERROR_MENTIONS(a, "cache_seqlens must be int32, got bf16");
}

TEST_F(ServingValidation, IndexTensorRanksStridesAndDevice) {
  AttentionArgs a = varlen.args();
  a.cu_seqlens_k = make_tensor(spare_ints.data(), DType::kInt32, kCpu, {2, 2});
  EXPECT_ERROR_MENTIONS(a, "cu_seqlens_k must have 1 dimensions [batch + 1], got 2");
  a = varlen.args();
  a.cu_seqlens_q = make_strided_tensor(spare_ints.data(), DType::kInt32, kCpu, {4}, {2});
  EXPECT_ERROR_MENTIONS(a, "stride of last dim of cu_seqlens_q must be 1, got 2");
  a = paged.args();
  a.page_table->strides[1] = 2;
  EXPECT_ERROR_MENTIONS(a, "stride of last dim of page_table must be 1, got 2");
  a = paged.args();
  a.cache_seqlens->device = kCuda0;
  EXPECT_ERROR_MENTIONS(a, "cache_seqlens on cuda:0 but q on cpu");
}

TEST_F(ServingValidation, BatchSizedTensorsMustAgree) {
  AttentionArgs a = varlen.args();
  a.cu_seqlens_k->shape[0] = 5;
  EXPECT_ERROR_MENTIONS(a, "cu_seqlens_k has 5 entries, but batch + 1 = 4 (from cu_seqlens_q)");
  a = paged.args();
  a.cache_seqlens->shape[0] = 2;
  EXPECT_ERROR_MENTIONS(a, "cache_seqlens has 2 entries, but batch = 3 (from cu_seqlens_q)");
  a = decode.args();
  a.page_table->shape[0] = 2;
  EXPECT_ERROR_MENTIONS(a, "page_table has 2 entries, but batch = 3 (from cache_seqlens)");
  a = decode.args();
  a.q.shape[0] = a.out.shape[0] = 2;
  EXPECT_ERROR_MENTIONS(a, "batch of q (2) does not match the batch of cache_seqlens (3)");
  a = contiguous.args();
  a.k.shape[0] = a.v.shape[0] = 4;
  EXPECT_ERROR_MENTIONS(a, "batch of k (4) does not match the batch of cache_seqlens (3)");
  a = varlen.args();
  a.cu_seqlens_q->shape[0] = 0;
  a.cu_seqlens_k->shape[0] = 0;
  EXPECT_ERROR_MENTIONS(a, "cu_seqlens_q must have batch + 1 >= 1 entries, got 0");
}

TEST_F(ServingValidation, PageSizeZero) {
  AttentionArgs a = paged.args();
  a.k.shape[1] = a.v.shape[1] = 0;
  EXPECT_ERROR_MENTIONS(a, "page_size=0", "[num_pages, page_size, heads_kv, head_dim]");
}

TEST_F(ServingValidation, CacheShapesMustMatch) {
  AttentionArgs a = paged.args();
  a.v.shape[0] -= 1;
  EXPECT_ERROR_MENTIONS(a, "k and v must have the same shape");
  a = paged.args();
  a.k.shape[3] = a.v.shape[3] = 32;
  EXPECT_ERROR_MENTIONS(a, "head_dim of q (64) does not match head_dim of k (32)");
}

TEST_F(ServingValidation, NewTokensShapesAndDtypes) {
  AttentionArgs a = paged.args();
  a.v_new->shape[0] -= 1;
  EXPECT_ERROR_MENTIONS(a, "k_new and v_new must have the same shape");
  a = paged.args();
  a.k_new->shape[1] = a.v_new->shape[1] = 1;
  EXPECT_ERROR_MENTIONS(a, "heads_kv of k_new (1) does not match heads_kv of the cache (2)");
  a = paged.args();
  a.k_new->shape[0] = a.v_new->shape[0] = 7;
  EXPECT_ERROR_MENTIONS(a, "total_q of k_new (7) does not match total_q of q");
  a = paged.args();
  a.v_new->dtype = DType::kBFloat16;
  EXPECT_ERROR_MENTIONS(a, "dtype of v_new (bf16) does not match dtype of q (fp16)");
  a = decode.args();
  a.k_new = make_tensor(spare.data(), DType::kFloat16, kCpu, {3 * 2 * 64});
  EXPECT_ERROR_MENTIONS(a, "k_new must have 4 dimensions [batch, seqlen_new, heads_kv, head_dim]");
}

TEST_F(ServingValidation, NewTokensLargerThanTheCache) {
  AttentionArgs a = decode.args();
  // page_table width 4 (3 pages of 16 for 40 keys, and a spare column): 64 slots.
  a.k_new = make_tensor(spare.data(), DType::kFloat16, kCpu, {3, 65, 2, 64});
  a.v_new = make_tensor(spare.data() + 3 * 65 * 2 * 64, DType::kFloat16, kCpu, {3, 65, 2, 64});
  ASSERT_LE(2 * 3 * 65 * 2 * 64, int(spare.size()));
  EXPECT_ERROR_MENTIONS(a, "k_new has seqlen_new=65 new tokens per sequence",
                        "64 slots per sequence (page_table width 4 x page_size 16)");
}

TEST_F(ServingValidation, MaxSeqlens) {
  AttentionArgs a = varlen.args();
  a.max_seqlen_q = 0;
  EXPECT_ERROR_MENTIONS(a, "max_seqlen_q=0 but q has 8 packed rows");
  a = varlen.args();
  a.max_seqlen_k = -2;
  EXPECT_ERROR_MENTIONS(a, "max_seqlen_k must be >= 0, got -2");
  a = paged.args();
  a.max_seqlen_k = 100;
  EXPECT_ERROR_MENTIONS(a, "max_seqlen_k=100 is more than the cache holds",
                        "64 slots per sequence (page_table width 4 x page_size 16)");
}

TEST_F(ServingValidation, PackedLseShape) {
  AttentionArgs a = varlen.args();
  a.lse = make_tensor(spare.data(), DType::kFloat32, kCpu, {3, 8, 5});
  EXPECT_ERROR_MENTIONS(a, "lse must have 2 dimensions [heads_q, total_q], got 3");
  a.lse = make_tensor(spare.data(), DType::kFloat32, kCpu, {8, 9});
  EXPECT_ERROR_MENTIONS(a, "lse must have shape [8, 8] (heads_q, total_q), got [8, 9]");
}

TEST_F(ServingValidation, Int32QIsRejected) {
  AttentionArgs a = varlen.args();
  for (TensorView* t : {&a.q, &a.k, &a.v, &a.out}) t->dtype = DType::kInt32;
  EXPECT_ERROR_MENTIONS(a, "dtype of q must be fp16, bf16, fp32 or fp8_e4m3, got int32");
}

TEST_F(ServingValidation, CuSeqlensValues) {
  std::vector<int32_t>& cu = varlen.cu_seqlens_q();  // {0, 3, 3, 8}
  cu = {0, 3, 2, 8};
  EXPECT_ERROR_MENTIONS(varlen.args(), "cu_seqlens_q decreases at sequence 1",
                        "cu_seqlens_q[1]=3 > cu_seqlens_q[2]=2");
  cu = {-1, 3, 3, 8};
  EXPECT_ERROR_MENTIONS(varlen.args(), "cu_seqlens_q[0]=-1 is negative");
  cu = {0, 3, 3, 9};
  EXPECT_ERROR_MENTIONS(varlen.args(), "cu_seqlens_q[3]=9 is past total_q=8");
  cu = {0, 1, 1, 8};
  EXPECT_ERROR_MENTIONS(varlen.args(), "sequence 2 has 7 rows", "more than max_seqlen_q=5");
  cu = {0, 3, 3, 8};
  std::vector<int32_t>& cu_k = varlen.cu_seqlens_k();  // {0, 20, 27, 67}
  cu_k[3] = 68;
  EXPECT_ERROR_MENTIONS(varlen.args(), "cu_seqlens_k[3]=68 is past total_k=67");
}

TEST_F(ServingValidation, SequsedKValues) {
  AttentionArgs a = varlen.args();
  std::vector<int32_t> used = {20, 8, 0};
  a.seqused_k = make_tensor(used.data(), DType::kInt32, kCpu, {3});
  EXPECT_ERROR_MENTIONS(a, "seqused_k[1]=8 is outside [0, 7], the keys of sequence 1");
  used[1] = -1;
  EXPECT_ERROR_MENTIONS(a, "seqused_k[1]=-1 is outside [0, 7]");
}

TEST_F(ServingValidation, CacheSeqlensValues) {
  std::vector<int32_t>& lengths = paged.cache_seqlens();  // {17, 7, 35}, new {3, 0, 5}
  lengths[2] = 60;
  EXPECT_ERROR_MENTIONS(paged.args(), "cache_seqlens[2]=60 plus 5 new tokens is more than the "
                        "cache's 64 slots per sequence (page_table width 4 x page_size 16)");
  lengths[2] = -4;
  EXPECT_ERROR_MENTIONS(paged.args(), "cache_seqlens[2]=-4 is negative");
  std::vector<int32_t>& contiguous_lengths = contiguous.cache_seqlens();  // capacity 45
  contiguous_lengths[0] = 46;
  EXPECT_ERROR_MENTIONS(contiguous.args(), "cache_seqlens[0]=46 is more than the cache's 45 "
                        "slots per sequence");
}

TEST_F(ServingValidation, PageIndicesInRangeForEveryUsedSlot) {
  std::vector<int32_t>& table = paged.page_table();  // width 4; sequence 2 uses 3 pages
  const int width = paged.table_width();
  table[2 * width + 2] = 1000;
  const std::string pages = "the cache has " + std::to_string(paged.num_pages()) + " pages";
  EXPECT_ERROR_MENTIONS(paged.args(), "page_table[2][2]=1000 is out of range", pages.c_str());
  table[2 * width + 2] = -1;
  EXPECT_ERROR_MENTIONS(paged.args(), "page_table[2][2]=-1 is out of range");
  table[2 * width + 2] = 0;
  table[2 * width + 3] = 1000;  // past the 40 tokens of sequence 2: never read, not checked
  EXPECT_EQ(error_of(paged.args()), "");
}

TEST_F(ServingValidation, OverlapsWithNewTokensAndTheCache) {
  AttentionArgs a = paged.args();
  a.k_new->data = a.k.data;
  EXPECT_ERROR_MENTIONS(a, "k_new overlaps k", "must not alias the cache");
  a = paged.args();
  a.out.data = a.v_new->data;
  EXPECT_ERROR_MENTIONS(a, "out overlaps v_new");
  a = varlen.args();
  a.lse.reset();
  a.out.data = spare.data();  // out's 8 rows, with cu_seqlens_q inside them
  std::memcpy(spare.data() + 64, varlen.cu_seqlens_q().data(), 4 * sizeof(int32_t));
  a.cu_seqlens_q->data = spare.data() + 64;
  EXPECT_ERROR_MENTIONS(a, "out overlaps cu_seqlens_q");
}

TEST_F(ServingValidation, ParamsOfEachLayout) {
  detail::AttentionParams v = detail::validate_common(varlen.args());
  EXPECT_EQ(v.batch, 3);
  EXPECT_EQ(v.seqlen_q, 5);   // max_seqlen_q
  EXPECT_EQ(v.seqlen_k, 40);  // max_seqlen_k
  EXPECT_EQ(v.total_q, 8);
  EXPECT_EQ(v.total_k, 67);
  EXPECT_EQ(v.q_batch_stride, 0);
  EXPECT_EQ(v.q_row_stride, 8 * 64);
  EXPECT_EQ(v.lse_head_stride, 8);
  EXPECT_EQ(v.seqlen_q_of(2), 5);
  EXPECT_EQ(v.seqlen_k_of(1), 7);
  EXPECT_FALSE(v.is_dense());

  detail::AttentionParams p = detail::validate_common(paged.args());
  EXPECT_EQ(p.page_size, 16);
  EXPECT_EQ(p.num_pages, paged.num_pages());
  EXPECT_EQ(p.page_table_stride, 4);
  EXPECT_EQ(p.seqlen_k, 64);  // capacity: width 4 x page 16
  EXPECT_TRUE(p.appends_packed);
  EXPECT_EQ(p.seqlen_k_of(0), 20);  // 17 cached + 3 new
  EXPECT_EQ(p.causal_offset(0), 17);

  detail::AttentionParams d = detail::validate_common(decode.args());
  EXPECT_EQ(d.seqlen_new, 1);
  EXPECT_FALSE(d.appends_packed);
  EXPECT_FALSE(d.causal);  // one query row sees every key
  EXPECT_EQ(d.seqlen_k_of(2), 40);
}

TEST_F(ServingValidation, EveryBackendRunsEveryLayout) {
  detail::AttentionParams p = detail::validate_common(paged.args());
  for (Backend backend : {Backend::kSM90, Backend::kSM80, Backend::kCPU, Backend::kReference}) {
    EXPECT_EQ(detail::unsupported_reason(backend, p.dtype, detail::serving_layout(p)), "");
  }
  EXPECT_EQ(detail::layout_name(p), "paged kv cache (packed q) + append");
  EXPECT_EQ(detail::layout_name(detail::validate_common(varlen.args())), "varlen");
  EXPECT_EQ(detail::layout_name(detail::validate_common(contiguous.args())),
            "kv cache (packed q)");
}

TEST_F(ServingValidation, CudaIndexValuesAreReadOnlyWhenAsked) {
  AttentionArgs a = paged.args();
  EXPECT_TRUE(detail::index_values_checked(a));  // host tensors: always
  a.q.device = kCuda0;
  EXPECT_FALSE(detail::index_values_checked(a));
  a.check_indices = true;
  EXPECT_TRUE(detail::index_values_checked(a));
  a.check_indices = false;
  setenv("FLASHCORE_CHECK_INDICES", "1", 1);
  EXPECT_TRUE(detail::index_values_checked(a));
  unsetenv("FLASHCORE_CHECK_INDICES");
}

TEST_F(ServingValidation, WorkspaceOfServingCallsIsTheTileCounters) {
  AttentionArgs a = paged.args();
  EXPECT_EQ(attention_workspace_bytes(a), 0u);
  for (TensorView* t : {&a.q, &a.k, &a.v, &a.out}) t->device = kCuda0;
  EXPECT_EQ(attention_workspace_bytes(a), 8u);
}

// --- FP8 (issue 26): dtype rules, descales, the backends that refuse it ---

// Valid fp8 host args: b2 sq16 sk24 hq8 hkv2 d64, out bf16, all three descales [2, 2].
class Fp8Validation : public Validation {
 protected:
  std::vector<uint8_t> q8 = std::vector<uint8_t>(kB * kSq * kHq * kD);
  std::vector<uint8_t> k8 = std::vector<uint8_t>(kB * kSk * kHkv * kD);
  std::vector<uint8_t> v8 = std::vector<uint8_t>(kB * kSk * kHkv * kD);
  std::vector<float> scales = std::vector<float>(3 * kB * kHkv, 1.0f);

  void SetUp() override {
    fp16_args();
    args.q = make_tensor(q8.data(), DType::kFloat8E4M3, kCpu, {kB, kSq, kHq, kD});
    args.k = make_tensor(k8.data(), DType::kFloat8E4M3, kCpu, {kB, kSk, kHkv, kD});
    args.v = make_tensor(v8.data(), DType::kFloat8E4M3, kCpu, {kB, kSk, kHkv, kD});
    args.out = make_tensor(o_buf.data(), DType::kBFloat16, kCpu, {kB, kSq, kHq, kD});
    args.q_descale = descale(0);
    args.k_descale = descale(1);
    args.v_descale = descale(2);
    ASSERT_EQ(error_of(args), "");
    EXPECT_EQ(select_backend(args), Backend::kCPU);
  }
  // The base fixture's valid fp16 args, with no descales.
  void fp16_args() {
    args = AttentionArgs{};
    Validation::SetUp();
  }
  TensorView descale(int i) {
    return make_tensor(scales.data() + i * kB * kHkv, DType::kFloat32, kCpu, {kB, kHkv});
  }
};

TEST_F(Fp8Validation, QKVAllFp8) {
  args.k.dtype = DType::kBFloat16;
  EXPECT_ERROR_MENTIONS(args, "dtype of k (bf16) does not match dtype of q (fp8_e4m3)",
                        "q, k and v all in fp8_e4m3");
  SetUp();
  args.v.dtype = DType::kFloat16;
  EXPECT_ERROR_MENTIONS(args, "dtype of v (fp16) does not match dtype of q (fp8_e4m3)");
  SetUp();
  args.q.dtype = DType::kBFloat16;
  args.q_descale.reset(), args.k_descale.reset(), args.v_descale.reset();
  EXPECT_ERROR_MENTIONS(args, "dtype of k (fp8_e4m3) does not match dtype of q (bf16)");
}

TEST_F(Fp8Validation, OutIsBf16OrFp16) {
  args.out.dtype = DType::kFloat16;
  EXPECT_EQ(error_of(args), "");
  for (DType bad : {DType::kFloat32, DType::kFloat8E4M3}) {
    args.out.dtype = bad;
    EXPECT_ERROR_MENTIONS(args, "out must be bf16 or fp16 when q, k and v are fp8_e4m3",
                          (std::string("got ") + to_string(bad)).c_str());
  }
  // An fp8 out with fp16 inputs names both dtypes and what fp8 is for.
  fp16_args();
  args.out.dtype = DType::kFloat8E4M3;
  EXPECT_ERROR_MENTIONS(args, "dtype of out (fp8_e4m3) does not match dtype of q (fp16)",
                        "fp8_e4m3 is an input dtype");
}

TEST_F(Fp8Validation, DescalesOnlyWithFp8Inputs) {
  TensorView scale = descale(1);
  fp16_args();
  args.k_descale = scale;
  EXPECT_ERROR_MENTIONS(args, "k_descale is set but q is fp16",
                        "descale factors only apply to fp8_e4m3 inputs");
}

TEST_F(Fp8Validation, DescaleDtypeRankShapeStridesPointerDevice) {
  args.q_descale->dtype = DType::kFloat16;
  EXPECT_ERROR_MENTIONS(args, "q_descale must be fp32, got fp16");
  SetUp();
  args.k_descale = make_tensor(scales.data(), DType::kFloat32, kCpu, {kB * kHkv});
  EXPECT_ERROR_MENTIONS(args, "k_descale must have 2 dimensions [batch, heads_kv], got 1");
  SetUp();
  args.v_descale = make_tensor(scales.data(), DType::kFloat32, kCpu, {kB, kHq});  // heads_q
  EXPECT_ERROR_MENTIONS(args, "v_descale must have shape [2, 2] ([batch, heads_kv]), got [2, 8]");
  SetUp();
  args.q_descale = make_tensor(scales.data(), DType::kFloat32, kCpu, {1, kHkv});
  EXPECT_ERROR_MENTIONS(args, "q_descale must have shape [2, 2]", "got [1, 2]");
  SetUp();
  args.k_descale->strides[1] = -1;
  EXPECT_ERROR_MENTIONS(args, "stride of dim 1 of k_descale must be >= 0, got -1");
  SetUp();
  args.v_descale->data = nullptr;
  EXPECT_ERROR_MENTIONS(args, "v_descale has a null data pointer but 4 elements [2, 2]");
  SetUp();
  args.q_descale->data = reinterpret_cast<uint8_t*>(scales.data()) + 2;
  EXPECT_ERROR_MENTIONS(args, "data pointer of q_descale", "must be 4-byte aligned (float32)");
  SetUp();
  args.k_descale->device = kCuda0;
  EXPECT_ERROR_MENTIONS(args, "k_descale on cuda:0 but q on cpu");
  SetUp();
  args.v_descale->data = o_buf.data();  // the output's memory
  EXPECT_ERROR_MENTIONS(args, "out overlaps v_descale");
}

TEST_F(Fp8Validation, StridedAndAbsentDescalesAreValid) {
  args.q_descale = make_strided_tensor(scales.data(), DType::kFloat32, kCpu, {kB, kHkv}, {0, 0});
  args.k_descale = make_strided_tensor(scales.data(), DType::kFloat32, kCpu, {kB, kHkv}, {1, kB});
  args.v_descale.reset();
  EXPECT_EQ(error_of(args), "");
  detail::AttentionParams p = detail::validate_common(args);
  EXPECT_EQ(p.out_dtype, DType::kBFloat16);
  EXPECT_EQ(p.output_dtype(), DType::kBFloat16);
  EXPECT_EQ(p.k_descale_batch_stride, 1);
  EXPECT_EQ(p.k_descale_head_stride, kB);
  EXPECT_EQ(p.q_descale_batch_stride, 0);
  EXPECT_EQ(p.v_descale, nullptr);
  EXPECT_EQ(p.v_descale_of(1, 1), 1.0f);
}

// What the CUDA backends say about fp8, the same on any machine (said before availability):
// sm80 refuses it, sm90 runs it in every layout.
TEST_F(Fp8Validation, Sm80RefusesSm90RunsEveryLayout) {
  args.q_descale.reset(), args.k_descale.reset(), args.v_descale.reset();
  move_to_cuda();
  args.backend = Backend::kSM80;
  EXPECT_ERROR_MENTIONS(args, "dtype fp8_e4m3 needs FP8 tensor cores (sm89+); backend sm80 does "
                              "not run it");
  args.backend = Backend::kSM90;
  EXPECT_EQ(error_of(args).find("fp8_e4m3"), std::string::npos) << error_of(args);
  const detail::ServingLayout dense;
  detail::ServingLayout varlen;
  varlen.packed_q = varlen.packed_kv = true;
  detail::ServingLayout paged;
  paged.cache = paged.paged = true;
  for (const detail::ServingLayout& layout : {dense, varlen, paged}) {
    EXPECT_EQ(detail::unsupported_reason(Backend::kSM90, DType::kFloat8E4M3, layout), "");
    EXPECT_EQ(detail::unsupported_reason(Backend::kSM90, DType::kBFloat16, layout), "");
    // auto picks sm90 for fp8 in any layout; asked for sm80 by name, the call is refused.
    detail::check_cuda_backends_run(Backend::kAuto, DType::kFloat8E4M3, layout);
    detail::check_cuda_backends_run(Backend::kSM90, DType::kFloat8E4M3, layout);
    const std::string sm80_error = test::thrown_message(
        [&] { detail::check_cuda_backends_run(Backend::kSM80, DType::kFloat8E4M3, layout); });
    EXPECT_NE(sm80_error.find("dtype fp8_e4m3 needs FP8 tensor cores"), std::string::npos)
        << sm80_error;
  }
}

TEST_F(ServingValidation, Fp8CacheTakesFp8NewTokens) {
  ServingShape shape = small_serving(KvLayout::kPaged, true);
  shape.dtype = DType::kFloat8E4M3;
  ServingProblem fp8(shape);
  AttentionArgs a = fp8.args();
  ASSERT_EQ(error_of(a), "");
  a.k_new->dtype = DType::kBFloat16;
  EXPECT_ERROR_MENTIONS(a, "k_new must be fp8_e4m3 like the cache it is appended to (k, v), "
                           "got bf16");
  a = fp8.args();
  a.q_descale = make_tensor(spare.data(), DType::kFloat32, kCpu, {2, 2});  // batch is 3
  EXPECT_ERROR_MENTIONS(a, "q_descale must have shape [3, 2] ([batch, heads_kv]), got [2, 2]");
  a = fp8.args();
  a.k_descale = make_tensor(fp8.host_pointers().k, DType::kFloat32, kCpu, {3, 2});
  EXPECT_ERROR_MENTIONS(a, "k overlaps k_descale", "the append writes the cache");
}

}  // namespace
}  // namespace flashcore
