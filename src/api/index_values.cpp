// The values of the serving layouts' index tensors, checked on the host. Host tensors are read
// in place (a few thousand ints at most: cheap next to any attention); CUDA tensors are copied
// on the call's stream and synchronized, which is why only check_indices asks for it.
#include <cstdlib>
#include <cstring>
#include <vector>

#include "api/validate_serving.h"

#ifdef FLASHCORE_HAS_CUDA
#include <cuda_runtime.h>

#include "cuda/check.h"
#endif

namespace flashcore::detail {
namespace {

std::string str(int64_t value) { return std::to_string(value); }

// A [rows, width] host copy of an int32 index tensor (1-D tensors are one row); rows are
// contiguous in the copy whatever the tensor's row stride.
struct HostIndices {
  std::vector<int32_t> values;
  int64_t width = 0;
  int32_t at(int64_t row, int64_t col) const { return values[row * width + col]; }
  int32_t operator[](int64_t i) const { return values[i]; }
};

HostIndices read_indices(const TensorView& t, CUstream_st* stream) {
  HostIndices host;
  const int64_t rows = t.ndim == 2 ? t.shape[0] : 1;
  host.width = t.shape[t.ndim - 1];
  host.values.resize(size_t(rows * host.width));
  if (host.values.empty()) return host;
  const int64_t row_stride = t.ndim == 2 ? t.strides[0] : host.width;
  const size_t row_bytes = size_t(host.width) * sizeof(int32_t);
  const auto* source = static_cast<const int32_t*>(t.data);
  if (t.device.type == DeviceType::kCPU) {
    for (int64_t r = 0; r < rows; ++r) {
      std::memcpy(&host.values[r * host.width], source + r * row_stride, row_bytes);
    }
    return host;
  }
#ifdef FLASHCORE_HAS_CUDA
  auto* cuda_stream = reinterpret_cast<cudaStream_t>(stream);
  FLASHCORE_CUDA_CHECK(cudaMemcpy2DAsync(host.values.data(), row_bytes, source,
                                         size_t(row_stride) * sizeof(int32_t), row_bytes,
                                         size_t(rows), cudaMemcpyDeviceToHost, cuda_stream));
  FLASHCORE_CUDA_CHECK(cudaStreamSynchronize(cuda_stream));
#else
  (void)stream;
  fail("cannot read the CUDA index tensors for check_indices: CUDA was not compiled in");
#endif
  return host;
}

// cu_seqlens: cu[0] >= 0, non-decreasing, cu[batch] <= total, every length <= max_seqlen.
void check_cu_seqlens(const char* name, const HostIndices& cu, int batch, int64_t total,
                      const char* total_name, const char* max_name, int max_seqlen) {
  auto entry = [&](int b) { return std::string(name) + "[" + str(b) + "]=" + str(cu[b]); };
  if (cu[0] < 0) fail(entry(0) + " is negative");
  for (int b = 0; b < batch; ++b) {
    if (cu[b + 1] < cu[b]) {
      fail(std::string(name) + " decreases at sequence " + str(b) + ": " + entry(b) + " > " +
           entry(b + 1));
    }
  }
  if (cu[batch] > total) {
    fail(entry(batch) + " is past " + total_name + "=" + str(total) +
         ", the rows of the packed tensor");
  }
  for (int b = 0; b < batch; ++b) {
    const int64_t length = cu[b + 1] - int64_t(cu[b]);
    if (length > max_seqlen) {
      fail("sequence " + str(b) + " has " + str(length) + " rows (" + entry(b) + ", " +
           entry(b + 1) + "), more than " + max_name + "=" + str(max_seqlen));
    }
  }
}

}  // namespace

bool index_values_checked(const AttentionArgs& args) {
  if (args.q.device.type == DeviceType::kCPU || args.check_indices) return true;
  const char* env = std::getenv("FLASHCORE_CHECK_INDICES");
  return env != nullptr && std::strcmp(env, "1") == 0;
}

void check_index_values(const AttentionArgs& args, const AttentionParams& p) {
  const int batch = p.batch;
  HostIndices cu_q, cu_k;
  if (args.cu_seqlens_q) {
    cu_q = read_indices(*args.cu_seqlens_q, args.stream);
    check_cu_seqlens("cu_seqlens_q", cu_q, batch, p.total_q, "total_q", "max_seqlen_q",
                     args.max_seqlen_q);
  }
  if (args.cu_seqlens_k) {
    cu_k = read_indices(*args.cu_seqlens_k, args.stream);
    check_cu_seqlens("cu_seqlens_k", cu_k, batch, p.total_k, "total_k", "max_seqlen_k",
                     args.max_seqlen_k);
  }
  if (args.seqused_k) {
    const HostIndices used = read_indices(*args.seqused_k, args.stream);
    for (int b = 0; b < batch; ++b) {
      const int64_t keys = cu_k[b + 1] - int64_t(cu_k[b]);
      if (used[b] < 0 || used[b] > keys) {
        fail("seqused_k[" + str(b) + "]=" + str(used[b]) + " is outside [0, " + str(keys) +
             "], the keys of sequence " + str(b) + " in cu_seqlens_k");
      }
    }
  }
  if (!args.cache_seqlens) return;

  const HostIndices lengths = read_indices(*args.cache_seqlens, args.stream);
  HostIndices pages;
  if (args.page_table) pages = read_indices(*args.page_table, args.stream);
  for (int b = 0; b < batch; ++b) {
    const std::string at = "cache_seqlens[" + str(b) + "]=" + str(lengths[b]);
    if (lengths[b] < 0) fail(at + " is negative");
    // New tokens of b: seqlen_new each, or as many as its (packed) queries.
    const int64_t appended = !args.k_new           ? 0
                             : args.cu_seqlens_q ? cu_q[b + 1] - int64_t(cu_q[b])
                                                 : p.seqlen_new;
    const int64_t used = lengths[b] + appended;
    if (used > p.seqlen_k) {
      fail(at + (appended ? " plus " + str(appended) + " new tokens" : std::string()) +
           " is more than the cache's " + str(p.seqlen_k) + " slots per sequence" +
           (args.page_table ? " (page_table width " + str(pages.width) + " x page_size " +
                                  str(p.page_size) + ")"
                            : std::string()));
    }
    if (!args.page_table) continue;
    const int64_t used_pages = (used + p.page_size - 1) / p.page_size;
    for (int64_t slot = 0; slot < used_pages; ++slot) {
      const int32_t page = pages.at(b, slot);
      if (page < 0 || page >= p.num_pages) {
        fail("page_table[" + str(b) + "][" + str(slot) + "]=" + str(page) +
             " is out of range: the cache has " + str(p.num_pages) + " pages (sequence " + str(b) +
             " uses slots 0.." + str(used_pages - 1) + " of its row for " + str(used) +
             " tokens)");
      }
    }
  }
}

}  // namespace flashcore::detail
