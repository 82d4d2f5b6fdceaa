// Every validation error: thrown before anything runs, naming the argument and the value.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "api/validate.h"
#include "flashcore/flashcore.h"
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
// kernels (no tile-counter memset); two rows already need the mask.
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
