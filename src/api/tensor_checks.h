// Checks of one tensor (or a pair) that every layout's validation shares. Each throws
// flashcore::Error naming the argument, the value and what was expected.
#pragma once

#include <array>
#include <string>

#include "flashcore/flashcore.h"

namespace flashcore::detail {

// How a tensor's dimensions are called in messages, e.g. {3, "[total_q, heads, head_dim]",
// {"total_q", "heads", "head_dim"}}.
struct DimNames {
  int rank;
  const char* text;
  std::array<const char*, kMaxDims> names;
};

inline constexpr DimNames kDenseDims{4, "[batch, seqlen, heads, head_dim]",
                                     {"batch", "seqlen", "heads", "head_dim"}};

[[noreturn]] void fail(const std::string& message);

std::string shape_string(const TensorView& t);
std::string address_string(const void* ptr);

// "q must have 4 dimensions [batch, seqlen, heads, head_dim], got 3 (shape [16, 4, 64])". The
// Python module words the ranks it checks itself the same way.
void check_rank(const char* name, const TensorView& t, const DimNames& dims);

// Rank, sizes, strides (non-negative, last one 1) and a non-null pointer when non-empty.
void check_tensor(const char* name, const TensorView& t, const DimNames& dims);

// dim `dim` of a and b are equal ("heads of k_new (4) does not match heads of k (2)").
void check_same_dim(const char* name_a, const TensorView& a, int dim_a, const char* name_b,
                    const TensorView& b, int dim_b, const char* dim_name);

void check_same_device(const char* name_a, const TensorView& a, const char* name_b,
                       const TensorView& b);

// The byte hulls of a and b are disjoint (empty tensors overlap nothing).
void check_no_overlap(const char* name_a, const TensorView& a, const char* name_b,
                      const TensorView& b, const char* why = "the output must not alias an input");

// Base pointer and the strides of every dim but the last keep rows 16-byte aligned.
void check_cuda_alignment(const char* name, const TensorView& t, const DimNames& dims);

// An int32 index tensor of the serving layouts: rank `dims.rank`, on `device_of`'s device, the
// last dim contiguous (1-D tensors are then contiguous).
void check_index_tensor(const char* name, const TensorView& t, const DimNames& dims,
                        const TensorView& device_of);

}  // namespace flashcore::detail
