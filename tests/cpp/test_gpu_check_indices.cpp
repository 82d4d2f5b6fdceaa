// check_indices on CUDA tensors: the index tensors are copied to the host (a strided page table
// included) and a wrong value is an Error naming the sequence and the slot; without the option
// the same call validates (its values are the kernels' to survive). Validation only: no kernel
// runs, so this holds whichever CUDA backend will run the layouts.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "device_allocations.h"
#include "gpu_suite.h"
#include "testing/serving_problem.h"
#include "thrown_message.h"

namespace flashcore::test {
namespace {

using testing::KvLayout;
using testing::ServingPointers;
using testing::ServingProblem;
using testing::ServingShape;

// Device copies of every tensor of a ServingProblem; the page table's rows `pad` ints apart.
class DeviceProblem {
 public:
  DeviceProblem(ServingProblem& host, int pad) : host_(host), pad_(pad) {
    const testing::ServingBytes bytes = serving_bytes(host.shape(), host.indices());
    const ServingPointers h = host.host_pointers();
    at_.q = memory_.upload(h.q, bytes.q);
    at_.out = memory_.upload(h.out, bytes.q);
    at_.k = memory_.upload(h.k, bytes.k);
    at_.v = memory_.upload(h.v, bytes.k);
    at_.lse = static_cast<float*>(memory_.upload(h.lse, bytes.lse));
    at_.cu_q = memory_.upload_ints(host.cu_seqlens_q());
    at_.cu_k = memory_.upload_ints(host.cu_seqlens_k());
    at_.lengths = memory_.upload_ints(host.cache_seqlens());
    upload_page_table();
  }

  AttentionArgs args() {
    AttentionArgs a = serving_args(host_.shape(), host_.indices(), at_,
                                   Device{DeviceType::kCUDA, 0}, Backend::kAuto);
    if (a.page_table) {
      a.page_table->strides[0] = host_.table_width() + pad_;
    }
    return a;
  }

  // Rewrites the page table on the device from the host copy.
  void upload_page_table() {
    const int rows = host_.shape().batch(), width = host_.table_width();
    std::vector<int32_t> padded(size_t(rows) * (width + pad_), -99);
    for (int b = 0; b < rows; ++b) {
      for (int i = 0; i < width; ++i) {
        padded[size_t(b) * (width + pad_) + i] = host_.page_table()[size_t(b) * width + i];
      }
    }
    if (at_.page_table == nullptr) {
      at_.page_table = static_cast<int32_t*>(memory_.allocate(padded.size() * sizeof(int32_t)));
    }
    cudaMemcpy(at_.page_table, padded.data(), padded.size() * sizeof(int32_t),
               cudaMemcpyHostToDevice);
  }
  void upload_cu_seqlens_q() {
    cudaMemcpy(at_.cu_q, host_.cu_seqlens_q().data(),
               host_.cu_seqlens_q().size() * sizeof(int32_t), cudaMemcpyHostToDevice);
  }

 private:
  ServingProblem& host_;
  int pad_;
  ServingPointers at_;
  DeviceAllocations memory_;
};

ServingShape paged_decode() {
  ServingShape s;
  s.kv = KvLayout::kPaged;
  s.k_lens = {40, 70, 5};
  s.q_lens = {1, 1, 1};
  s.packed_q = false;
  s.page_size = 16;
  s.head_dim = 128;
  return s;
}

std::string error_of(const AttentionArgs& args) {
  return thrown_message([&] { select_backend(args); });
}

class CheckIndices : public ::testing::Test {
 protected:
  void SetUp() override {
    if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
  }
};

TEST_F(CheckIndices, PageOutOfRangeIsFoundOnlyWhenAsked) {
  ServingProblem host(paged_decode());
  DeviceProblem device(host, /*pad=*/3);  // a strided page table: the copy is 2-D
  AttentionArgs args = device.args();
  ASSERT_EQ(error_of(args), "");
  args.check_indices = true;
  ASSERT_EQ(error_of(args), "");  // the right values pass the check too

  host.page_table()[1 * host.table_width() + 4] = 1000;  // sequence 1's fifth page (70 tokens)
  device.upload_page_table();
  args.check_indices = false;
  EXPECT_EQ(error_of(args), "");  // not read without the option: no sync
  args.check_indices = true;
  const std::string message = error_of(args);
  EXPECT_NE(message.find("page_table[1][4]=1000 is out of range"), std::string::npos) << message;
  args.check_indices = false;
  setenv("FLASHCORE_CHECK_INDICES", "1", 1);
  EXPECT_NE(error_of(args).find("page_table[1][4]=1000"), std::string::npos);
  unsetenv("FLASHCORE_CHECK_INDICES");
}

TEST_F(CheckIndices, DecreasingCuSeqlens) {
  ServingShape s;
  s.kv = KvLayout::kVarlen;
  s.q_lens = {3, 4, 5};
  s.k_lens = {3, 4, 5};
  s.head_dim = 128;
  ServingProblem host(s);
  DeviceProblem device(host, 0);
  AttentionArgs args = device.args();
  args.check_indices = true;
  ASSERT_EQ(error_of(args), "");
  host.cu_seqlens_q() = {0, 3, 2, 12};
  device.upload_cu_seqlens_q();
  const std::string message = error_of(args);
  EXPECT_NE(message.find("cu_seqlens_q decreases at sequence 1"), std::string::npos) << message;
}

}  // namespace
}  // namespace flashcore::test

int main(int argc, char** argv) {
  return flashcore::test::run_gpu_suite(argc, argv, "GPU check_indices tests",
                                       {flashcore::Backend::kSM80, flashcore::Backend::kSM90});
}
