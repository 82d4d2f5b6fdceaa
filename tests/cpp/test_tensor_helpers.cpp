// The public tensor and enum helpers of flashcore.h: make_tensor / make_strided_tensor, parsing,
// dtype sizes, version.
#include <gtest/gtest.h>

#include <string>

#include "flashcore/flashcore.h"

namespace flashcore {
namespace {

constexpr Device kCpu{DeviceType::kCPU, 0};

TEST(TensorHelpers, StridedTensorChecksVectorSizes) {
  try {
    make_strided_tensor(nullptr, DType::kFloat16, kCpu, {1, 2, 3, 4}, {24, 12, 4});
    FAIL() << "no error";
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("strides must have as many entries as shape (4), "
                                             "got 3"), std::string::npos) << error.what();
  }
  EXPECT_THROW(make_tensor(nullptr, DType::kFloat16, kCpu, {1, 2, 3, 4, 5}), Error);
  TensorView t = make_tensor(nullptr, DType::kBFloat16, kCpu, {2, 3, 4, 5});
  EXPECT_EQ(t.numel(), 120);
  EXPECT_TRUE(t.is_contiguous());
  EXPECT_EQ(t.strides[0], 60);
  t.strides[1] = 40;
  EXPECT_FALSE(t.is_contiguous());
}

TEST(TensorHelpers, ParsingNamesValueAndChoices) {
  EXPECT_EQ(parse_backend("sm90"), Backend::kSM90);
  EXPECT_EQ(parse_backend("reference"), Backend::kReference);
  EXPECT_EQ(parse_dtype("bfloat16"), DType::kBFloat16);
  EXPECT_EQ(parse_dtype("fp32"), DType::kFloat32);
  try {
    parse_backend("sm70");
    FAIL() << "no error";
  } catch (const Error& error) {
    const std::string message = error.what();
    EXPECT_NE(message.find("'sm70'"), std::string::npos) << message;
    EXPECT_NE(message.find("auto, reference, cpu, sm80, sm90"), std::string::npos) << message;
  }
  try {
    parse_dtype("int8");
    FAIL() << "no error";
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("'int8'"), std::string::npos) << error.what();
    EXPECT_NE(std::string(error.what()).find("bf16"), std::string::npos) << error.what();
  }
  EXPECT_EQ(dtype_size(DType::kFloat32), 4u);
  EXPECT_EQ(dtype_size(DType::kBFloat16), 2u);
  EXPECT_STREQ(version(), "0.1.0");
  EXPECT_TRUE(supported_head_dims(Backend::kCPU).empty());
  EXPECT_TRUE(backend_available(Backend::kCPU));
}

}  // namespace
}  // namespace flashcore
