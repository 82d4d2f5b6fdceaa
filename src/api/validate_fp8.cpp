#include "api/validate_fp8.h"

#include <string>
#include <utility>

#include "api/tensor_checks.h"

namespace flashcore::detail {
namespace {

constexpr DimNames kDescaleDims{2, "[batch, heads_kv]", {"batch", "heads_kv"}};

std::string str(int64_t value) { return std::to_string(value); }

bool is_fp8(DType dtype) { return dtype == DType::kFloat8E4M3; }

struct NamedDescale {
  const char* name;
  const std::optional<TensorView>* tensor;
};

NamedDescale descales_of(const AttentionArgs& args, int i) {
  const NamedDescale all[] = {{"q_descale", &args.q_descale},
                              {"k_descale", &args.k_descale},
                              {"v_descale", &args.v_descale}};
  return all[i];
}
constexpr int kDescaleCount = 3;

}  // namespace

void check_dtypes(const AttentionArgs& args) {
  const TensorView &q = args.q, &k = args.k, &v = args.v, &out = args.out;
  if (q.dtype == DType::kInt32) {
    fail("dtype of q must be fp16, bf16, fp32 or fp8_e4m3, got int32 (int32 is for the index "
         "tensors)");
  }
  const bool fp8 = is_fp8(q.dtype);
  for (auto [name, t] : {std::pair{"k", &k}, {"v", &v}}) {
    if (t->dtype != q.dtype) {
      fail(std::string("dtype of ") + name + " (" + to_string(t->dtype) +
           ") does not match dtype of q (" + to_string(q.dtype) + ")" +
           (fp8 || is_fp8(t->dtype) ? ": an fp8 call takes q, k and v all in fp8_e4m3" : ""));
    }
  }
  if (fp8) {
    if (out.dtype != DType::kBFloat16 && out.dtype != DType::kFloat16) {
      fail(std::string("out must be bf16 or fp16 when q, k and v are fp8_e4m3 (out's dtype is "
                       "the output type), got ") + to_string(out.dtype));
    }
    return;
  }
  if (out.dtype != q.dtype) {
    fail(std::string("dtype of out (") + to_string(out.dtype) + ") does not match dtype of q (" +
         to_string(q.dtype) + ")" +
         (is_fp8(out.dtype) ? ": fp8_e4m3 is an input dtype (out is bf16 or fp16)" : ""));
  }
}

void check_descales(const AttentionArgs& args, int64_t batch, int64_t heads_kv) {
  for (int i = 0; i < kDescaleCount; ++i) {
    const auto [name, optional] = descales_of(args, i);
    if (!optional->has_value()) continue;
    const TensorView& t = **optional;
    if (!is_fp8(args.q.dtype)) {
      fail(std::string(name) + " is set but q is " + to_string(args.q.dtype) +
           "; descale factors only apply to fp8_e4m3 inputs");
    }
    if (t.dtype != DType::kFloat32) {
      fail(std::string(name) + " must be fp32, got " + to_string(t.dtype));
    }
    check_rank(name, t, kDescaleDims);
    if (t.shape[0] != batch || t.shape[1] != heads_kv) {
      fail(std::string(name) + " must have shape [" + str(batch) + ", " + str(heads_kv) +
           "] ([batch, heads_kv]), got " + shape_string(t));
    }
    for (int dim = 0; dim < kDescaleDims.rank; ++dim) {
      if (t.strides[dim] < 0) {
        fail(std::string("stride of dim ") + str(dim) + " of " + name + " must be >= 0, got " +
             str(t.strides[dim]));
      }
    }
    if (t.numel() > 0 && t.data == nullptr) {
      fail(std::string(name) + " has a null data pointer but " + str(t.numel()) + " elements " +
           shape_string(t));
    }
    if (reinterpret_cast<uintptr_t>(t.data) % alignof(float) != 0) {
      fail(std::string("data pointer of ") + name + " (" + address_string(t.data) +
           ") must be " + str(alignof(float)) + "-byte aligned (float32)");
    }
    check_same_device(name, t, "q", args.q);
    check_no_overlap("out", args.out, name, t);
    if (args.lse) check_no_overlap("lse", *args.lse, name, t);
    if (args.k_new) {
      check_no_overlap("k", args.k, name, t, "the append writes the cache");
      check_no_overlap("v", args.v, name, t, "the append writes the cache");
    }
  }
}

void fill_fp8_params(const AttentionArgs& args, AttentionParams& p) {
  p.out_dtype = args.out.dtype;
  auto fill = [](const std::optional<TensorView>& t, const float*& data, int64_t& batch_stride,
                 int64_t& head_stride) {
    if (!t) return;
    data = static_cast<const float*>(t->data);
    batch_stride = t->strides[0];
    head_stride = t->strides[1];
  };
  fill(args.q_descale, p.q_descale, p.q_descale_batch_stride, p.q_descale_head_stride);
  fill(args.k_descale, p.k_descale, p.k_descale_batch_stride, p.k_descale_head_stride);
  fill(args.v_descale, p.v_descale, p.v_descale_batch_stride, p.v_descale_head_stride);
}

}  // namespace flashcore::detail
