// The serving layouts' entry points of flashcore._flashcore (flashcore.h "Serving layouts"):
// attention_serving for DLPack arrays and attention_serving_raw for raw tensor tuples, with
// every AttentionArgs member of varlen batches and kv caches. Kept apart from the dense calls so
// that their argument parsing stays as short. The workspace allocator is a callable asked once
// the library has sized the call: one crossing into C++ both sizes and runs it.
#include <nanobind/nanobind.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <optional>
#include <string>
#include <vector>

#include "_flashcore_views.h"

namespace flashcore::python {
namespace {

// The tensors of a serving call, by AttentionArgs member; absent ones are empty. `Tensor` is
// nb::handle (any DLPack array) or RawTensor.
template <class Tensor>
struct ServingTensors {
  Tensor q, k, v, out;
  std::optional<Tensor> lse, cu_seqlens_q, cu_seqlens_k, seqused_k, cache_seqlens, page_table,
      k_new, v_new, q_descale, k_descale, v_descale;
};

// What each slot expects in the layout these arguments select (only rank messages use the
// dimensions: every other check is the library's).
struct ServingSlots {
  Slot q, kv, lse, kv_new;
};

template <class Tensor>
ServingSlots slots_of(const ServingTensors<Tensor>& t) {
  ServingSlots slots;
  const bool packed_q = t.cu_seqlens_q.has_value();
  if (packed_q) {
    slots.q.dims = "[total_q, heads_q, head_dim]";
    slots.lse.dims = "[heads_q, total_q]";
    slots.kv_new.dims = "[total_q, heads_kv, head_dim]";
  } else {
    slots.kv_new.dims = "[batch, seqlen_new, heads_kv, head_dim]";
  }
  if (t.page_table) {
    slots.kv.dims = "[num_pages, page_size, heads_kv, head_dim]";
  } else if (t.cache_seqlens) {
    slots.kv.dims = "[batch, capacity, heads_kv, head_dim]";
  } else if (t.cu_seqlens_k) {
    slots.kv.dims = "[total_k, heads_kv, head_dim]";
  }
  return slots;
}

// AttentionArgs of a serving call. `view(tensor, name, slot, why)` makes one TensorView; `why`
// is non-empty for tensors the call writes (out, lse, and the cache when k_new is appended).
// Tensors are viewed in argument order, so that the first bad one is the one named.
template <class Tensor, class View>
flashcore::AttentionArgs serving_args(const ServingTensors<Tensor>& t, View view) {
  const ServingSlots slots = slots_of(t);
  const bool appends = t.k_new.has_value() || t.v_new.has_value();
  const std::string cache_written = "the new keys and values are written into the cache";
  flashcore::AttentionArgs args;
  args.q = view(t.q, "q", slots.q, "");
  args.k = view(t.k, "k", slots.kv, appends ? cache_written : "");
  args.v = view(t.v, "v", slots.kv, appends ? cache_written : "");
  args.out = view(t.out, "out", slots.q, "the result is written into out");
  if (t.lse) args.lse = view(*t.lse, "lse", slots.lse, "the result is written into lse");
  const auto index = [&](const std::optional<Tensor>& tensor, const char* name,
                         const char* dims) -> std::optional<TensorView> {
    if (!tensor) return std::nullopt;
    return view(*tensor, name, Slot{dims, /*index=*/true}, "");
  };
  args.cu_seqlens_q = index(t.cu_seqlens_q, "cu_seqlens_q", "[batch + 1]");
  args.cu_seqlens_k = index(t.cu_seqlens_k, "cu_seqlens_k", "[batch + 1]");
  args.seqused_k = index(t.seqused_k, "seqused_k", "[batch]");
  args.cache_seqlens = index(t.cache_seqlens, "cache_seqlens", "[batch]");
  args.page_table = index(t.page_table, "page_table", "[batch, max_pages_per_seq]");
  if (t.k_new) args.k_new = view(*t.k_new, "k_new", slots.kv_new, "");
  if (t.v_new) args.v_new = view(*t.v_new, "v_new", slots.kv_new, "");
  const auto descale = [&](const std::optional<Tensor>& tensor,
                           const char* name) -> std::optional<TensorView> {
    if (!tensor) return std::nullopt;
    return view(*tensor, name, kDescaleSlot, "");
  };
  args.q_descale = descale(t.q_descale, "q_descale");
  args.k_descale = descale(t.k_descale, "k_descale");
  args.v_descale = descale(t.v_descale, "v_descale");
  return args;
}

// The scalar arguments of a serving call, aggregate-initialized in this order by both entries.
struct ServingOptions {
  int max_seqlen_q = 0, max_seqlen_k = 0;
  std::optional<float> softmax_scale;
  bool causal = false, check_indices = false, device_pointers_verified = false;
  std::string backend = "auto";
  uintptr_t stream = 0;
};

// Sizes the call's workspace and, when it needs one, asks `allocate_workspace(nbytes)` for it:
// a (keep-alive object, device pointer) pair from the arrays' own allocator, held until the
// call returns. None (host arrays, or an allocator FlashCore does not know): no workspace.
std::string run_serving(flashcore::AttentionArgs args, const ServingOptions& o,
                        nb::handle allocate_workspace) {
  args.max_seqlen_q = o.max_seqlen_q;
  args.max_seqlen_k = o.max_seqlen_k;
  args.softmax_scale = o.softmax_scale;
  args.causal = o.causal;
  args.check_indices = o.check_indices;
  args.device_pointers_verified = o.device_pointers_verified;
  args.backend = flashcore::parse_backend(o.backend);
  args.stream = reinterpret_cast<CUstream_st*>(o.stream);
  nb::object workspace;
  if (!allocate_workspace.is_none()) {
    const size_t nbytes = flashcore::attention_workspace_bytes(args);
    if (nbytes != 0) {
      const nb::tuple allocation = nb::cast<nb::tuple>(allocate_workspace(nbytes));
      workspace = allocation[0];
      args.workspace = reinterpret_cast<void*>(nb::cast<uintptr_t>(allocation[1]));
      args.workspace_bytes = nbytes;
    }
  }
  return run(args);
}

std::optional<nb::handle> present(nb::handle value) {
  if (value.is_none()) return std::nullopt;
  return value;
}

std::string serving_dlpack(nb::handle q, nb::handle k, nb::handle v, nb::handle out,
                           nb::handle lse, nb::handle cu_seqlens_q, nb::handle cu_seqlens_k,
                           int max_seqlen_q, int max_seqlen_k, nb::handle seqused_k,
                           nb::handle cache_seqlens, nb::handle page_table, nb::handle k_new,
                           nb::handle v_new, std::optional<float> softmax_scale, bool causal,
                           const std::string& backend, uintptr_t stream, bool check_indices,
                           nb::handle allocate_workspace, nb::handle q_descale,
                           nb::handle k_descale, nb::handle v_descale) {
  const ServingTensors<nb::handle> tensors{
      q, k, v, out, present(lse), present(cu_seqlens_q), present(cu_seqlens_k),
      present(seqused_k), present(cache_seqlens), present(page_table), present(k_new),
      present(v_new), present(q_descale), present(k_descale), present(v_descale)};
  // The imported arrays live until the call returns (a producer may tie the memory's lifetime
  // to its DLPack export).
  std::vector<InputArray> inputs;
  std::vector<OutputArray> outputs;
  inputs.reserve(15);
  outputs.reserve(5);
  const auto view = [&](nb::handle value, const char* name, Slot slot, const std::string& why) {
    if (why.empty()) return view_of(inputs.emplace_back(input_array(value, name)), name, slot);
    return view_of(outputs.emplace_back(output_array(value, name, why)), name, slot);
  };
  const ServingOptions options{max_seqlen_q,  max_seqlen_k, softmax_scale,
                               causal,        check_indices, /*device_pointers_verified=*/false,
                               backend,       stream};
  return run_serving(serving_args(tensors, view), options, allocate_workspace);
}

std::string serving_raw(const RawTensor& q, const RawTensor& k, const RawTensor& v,
                        const RawTensor& out, const std::optional<RawTensor>& lse,
                        const std::optional<RawTensor>& cu_seqlens_q,
                        const std::optional<RawTensor>& cu_seqlens_k, int max_seqlen_q,
                        int max_seqlen_k, const std::optional<RawTensor>& seqused_k,
                        const std::optional<RawTensor>& cache_seqlens,
                        const std::optional<RawTensor>& page_table,
                        const std::optional<RawTensor>& k_new,
                        const std::optional<RawTensor>& v_new,
                        std::optional<float> softmax_scale, bool causal,
                        const std::string& backend, uintptr_t stream, bool check_indices,
                        nb::handle allocate_workspace, bool device_pointers_verified,
                        const std::optional<RawTensor>& q_descale,
                        const std::optional<RawTensor>& k_descale,
                        const std::optional<RawTensor>& v_descale) {
  const ServingTensors<RawTensor> tensors{q,         k,          v,           out,
                                          lse,       cu_seqlens_q, cu_seqlens_k, seqused_k,
                                          cache_seqlens, page_table, k_new,   v_new,
                                          q_descale, k_descale,   v_descale};
  const auto view = [](const RawTensor& raw, const char* name, Slot slot, const std::string&) {
    return view_of_raw(raw, name, slot);
  };
  const ServingOptions options{max_seqlen_q,  max_seqlen_k,  softmax_scale,
                               causal,        check_indices, device_pointers_verified,
                               backend,       stream};
  return run_serving(serving_args(tensors, view), options, allocate_workspace);
}

}  // namespace

void register_serving(nb::module_& m) {
  m.def("attention_serving", &serving_dlpack, nb::arg("q"), nb::arg("k"), nb::arg("v"),
        nb::arg("out"), nb::arg("lse").none() = nb::none(),
        nb::arg("cu_seqlens_q").none() = nb::none(), nb::arg("cu_seqlens_k").none() = nb::none(),
        nb::arg("max_seqlen_q") = 0, nb::arg("max_seqlen_k") = 0,
        nb::arg("seqused_k").none() = nb::none(), nb::arg("cache_seqlens").none() = nb::none(),
        nb::arg("page_table").none() = nb::none(), nb::arg("k_new").none() = nb::none(),
        nb::arg("v_new").none() = nb::none(), nb::arg("softmax_scale").none() = nb::none(),
        nb::arg("causal") = false, nb::arg("backend") = "auto", nb::arg("stream") = 0,
        nb::arg("check_indices") = false, nb::arg("allocate_workspace").none() = nb::none(),
        nb::arg("q_descale").none() = nb::none(), nb::arg("k_descale").none() = nb::none(),
        nb::arg("v_descale").none() = nb::none(),
        "Runs a serving-layout call (varlen, kv cache) on DLPack tensors; the AttentionArgs "
        "member names. allocate_workspace(nbytes) -> (keep_alive, pointer), or None. Returns "
        "the name of the backend that ran.");
  m.def("attention_serving_raw", &serving_raw, nb::arg("q"), nb::arg("k"), nb::arg("v"),
        nb::arg("out"), nb::arg("lse").none() = nb::none(),
        nb::arg("cu_seqlens_q").none() = nb::none(), nb::arg("cu_seqlens_k").none() = nb::none(),
        nb::arg("max_seqlen_q") = 0, nb::arg("max_seqlen_k") = 0,
        nb::arg("seqused_k").none() = nb::none(), nb::arg("cache_seqlens").none() = nb::none(),
        nb::arg("page_table").none() = nb::none(), nb::arg("k_new").none() = nb::none(),
        nb::arg("v_new").none() = nb::none(), nb::arg("softmax_scale").none() = nb::none(),
        nb::arg("causal") = false, nb::arg("backend") = "auto", nb::arg("stream") = 0,
        nb::arg("check_indices") = false, nb::arg("allocate_workspace").none() = nb::none(),
        nb::arg("device_pointers_verified") = false, nb::arg("q_descale").none() = nb::none(),
        nb::arg("k_descale").none() = nb::none(), nb::arg("v_descale").none() = nb::none(),
        "Like attention_serving, tensors given as raw tensor tuples (dtype code 3: int32).");
}

}  // namespace flashcore::python
