// FlashCore public host API.
//
// Everything a caller needs: non-owning tensor views, the arguments of one attention call, and
// the call itself. No CUDA header is included: a stream is passed as the opaque CUstream_st*
// that cudaStream_t and CUstream both are.
//
// Semantics (see shared ARCHITECTURE.md):
//   q   [batch, seqlen_q, heads_q,  head_dim]     out like q
//   k,v [batch, seqlen_k, heads_kv, head_dim]     lse [batch, heads_q, seqlen_q] float32 (optional)
//   any strides (in elements) with the last dimension contiguous; base pointers 16-byte aligned.
//   out = softmax(q k^T * softmax_scale) v, softmax_scale defaults to 1/sqrt(head_dim).
//   causal: query i sees key j <= i + seqlen_k - seqlen_q (bottom-right aligned).
//   A query row with no visible key gives out = 0 and lse = -inf.
//   GQA/MQA: heads_q a multiple of heads_kv; query head h reads kv head h / (heads_q / heads_kv).
//   A zero-sized batch, sequence or head count is a valid no-op.
//
// FP8 (e4m3fn, as torch.float8_e4m3fn): q, k and v all kFloat8E4M3; out kBFloat16 or kFloat16
// (its dtype is the output type); lse float32 as always. Optional float32 descale factors
// q_descale, k_descale, v_descale of shape [batch, heads_kv] (FlashAttention-3's convention; any
// non-negative strides; on q's device; absent = 1) give the values the call attends over:
//   q_deq[b, :, h] = float(q[b, :, h]) * q_descale[b][h / (heads_q / heads_kv)]
//   k_deq[b, :, g] = float(k[b, :, g]) * k_descale[b][g],  v_deq likewise with v_descale
//   out = softmax(q_deq k_deq^T * softmax_scale) v_deq   (softmax_scale: 1/sqrt(head_dim))
// float() of an e4m3fn value is exact (no infinities; 0x7F and 0xFF are NaN; the largest finite
// value is 448). In the serving layouts batch b is sequence b (k_new/v_new are fp8 like the
// cache). Runs on the cpu, reference and sm90 backends, in every layout; sm80 refuses fp8 (FP8
// tensor cores start at sm89).
//
// Serving layouts (docs/serving.md), chosen by which optional arguments are set:
//   varlen    cu_seqlens_q and cu_seqlens_k: q/out [total_q, heads_q, head_dim] and k/v
//             [total_k, heads_kv, head_dim] hold the sequences back to back; sequence b is rows
//             cu_seqlens_q[b] .. cu_seqlens_q[b+1] of q (and likewise of k). lse is
//             [heads_q, total_q]. max_seqlen_q/max_seqlen_k bound every sequence's length.
//   kv cache  cache_seqlens: k/v are a cache that already holds cache_seqlens[b] tokens of
//             sequence b, either contiguous [batch, capacity, heads_kv, head_dim] or, with
//             page_table, paged [num_pages, page_size, heads_kv, head_dim] where token t of
//             sequence b lives in page page_table[b][t / page_size], slot t % page_size. q is
//             dense [batch, seqlen_q, heads_q, head_dim], or packed with cu_seqlens_q (chunked
//             prefill). k_new/v_new, when given, are written into the cache at cache_seqlens[b]
//             before attending, and then count as keys: [batch, seqlen_new, heads_kv, head_dim],
//             or packed like q ([total_q, heads_kv, head_dim]) with cu_seqlens_q. cache_seqlens
//             itself is not changed (the caller advances it).
//   Causal masks stay bottom-right per sequence. Slots past a sequence's length and pages not in
//   its table are never read. Index values on the GPU (cu_seqlens, page_table, cache_seqlens)
//   are not checked on the host unless check_indices is set (it synchronizes); wrong values give
//   wrong answers but never a read or write outside the given tensors.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

struct CUstream_st;

namespace flashcore {

// Every error the library reports: invalid arguments (the message names the argument, the value
// and what was expected) and CUDA failures (the message carries the CUDA error string).
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// kInt32 is for the index tensors of the serving layouts (cu_seqlens, page_table, ...) only.
// kFloat8E4M3 is float8 e4m3fn (1 sign, 4 exponent bits of bias 7, 3 mantissa bits; no inf;
// 0x7F/0xFF NaN; max 448), for q/k/v (and k_new/v_new) of an FP8 call (see the top of this file).
enum class DType : uint8_t { kFloat16, kBFloat16, kFloat32, kInt32, kFloat8E4M3 };
enum class DeviceType : uint8_t { kCPU, kCUDA };

struct Device {
  DeviceType type = DeviceType::kCPU;
  int index = 0;
};

// kAuto picks the fastest backend that supports the call: sm90 on Hopper, sm80 on Ampere and
// later, cpu for host tensors. kReference is the float64 oracle the tests compare against.
enum class Backend : uint8_t { kAuto, kReference, kCPU, kSM80, kSM90 };

inline constexpr int kMaxDims = 4;

// A non-owning view of a strided tensor. Shape and strides are in elements.
struct TensorView {
  void* data = nullptr;
  DType dtype = DType::kFloat16;
  Device device{};
  int ndim = 0;
  std::array<int64_t, kMaxDims> shape{};
  std::array<int64_t, kMaxDims> strides{};

  int64_t numel() const;
  bool is_contiguous() const;
};

// A contiguous (row-major) view of the given shape.
TensorView make_tensor(void* data, DType dtype, Device device, std::vector<int64_t> shape);

// A view with explicit strides (in elements), e.g. a BHSD tensor seen as BSHD.
TensorView make_strided_tensor(void* data, DType dtype, Device device, std::vector<int64_t> shape,
                               std::vector<int64_t> strides);

struct AttentionArgs {
  TensorView q;
  TensorView k;
  TensorView v;
  TensorView out;
  std::optional<TensorView> lse;        // float32 [batch, heads_q, seqlen_q], last dim contiguous
  std::optional<float> softmax_scale;   // default 1/sqrt(head_dim)
  bool causal = false;
  Backend backend = Backend::kAuto;
  CUstream_st* stream = nullptr;        // CUDA backends only; nullptr is the legacy default stream
  // Scratch device memory for the CUDA backends (the persistent schedules' tile counters and,
  // on sm90, the partial results of decode-sized calls that split their keys over several CTAs),
  // so that the library never allocates on the forward path. Contract: memory of the tensors'
  // device, 4-byte aligned, at least attention_workspace_bytes(args) bytes. The library zeroes
  // what it uses with a small kernel on args.stream before the launch (no host sync, legal
  // under CUDA graph capture), so any buffer works, fresh or reused; it must not be used by
  // anything else until the call's work on args.stream has finished. Without a workspace the
  // sm90 backend falls back to a small static pool of counters that concurrent launches on
  // different streams (or graph replays) may share: pass a workspace when launches can overlap.
  // Without one, calls that would split their keys (batch-1 decode, say) run unsplit, slower.
  void* workspace = nullptr;
  size_t workspace_bytes = 0;
  // Set by callers whose tensors carry their device (PyTorch's, as flashcore.torch passes them,
  // or an engine's own allocations): it vouches that every data pointer, and the workspace, is
  // memory of q's device. The CUDA backends then skip the driver query per pointer that checks
  // it (cudaPointerGetAttributes: 1.3 us for the five of a decode call on an H100 host, of ~10 us
  // the library spends before its launches). Every other check still runs. Left false, a host
  // pointer marked as CUDA is an Error.
  bool device_pointers_verified = false;

  // --- serving layouts (see the top of this file); all int32, on q's device ---
  std::optional<TensorView> cu_seqlens_q;  // [batch + 1]: q/out (and lse) packed
  std::optional<TensorView> cu_seqlens_k;  // [batch + 1]: k/v packed (not with a kv cache)
  // With cu_seqlens_q / cu_seqlens_k: no sequence is longer (given by the caller so that no
  // device-to-host copy is needed; sequences longer than this are cut).
  int max_seqlen_q = 0;
  int max_seqlen_k = 0;
  std::optional<TensorView> seqused_k;      // [batch], varlen only: keys of b are its first seqused_k[b]
  std::optional<TensorView> cache_seqlens;  // [batch]: selects the kv-cache layout
  std::optional<TensorView> page_table;     // [batch, max_pages_per_seq]: a paged cache
  std::optional<TensorView> k_new;          // appended to the cache before attending
  std::optional<TensorView> v_new;
  // Copies the index tensors to the host (a synchronization on CUDA) and checks their values:
  // cu_seqlens non-decreasing within the tensors, pages in range, caches not overflowed. The
  // FLASHCORE_CHECK_INDICES=1 environment variable turns it on for every call.
  bool check_indices = false;

  // --- FP8 inputs only (q/k/v kFloat8E4M3; see the top of this file) ---
  // float32 [batch, heads_kv] dequantization factors, per (batch entry or sequence, kv head), any
  // non-negative strides, on q's device; absent means 1. q_descale is indexed by the kv head of
  // each query head (h / (heads_q / heads_kv)). Setting one with non-fp8 inputs is an Error.
  std::optional<TensorView> q_descale;
  std::optional<TensorView> k_descale;
  std::optional<TensorView> v_descale;
};

// Validates every argument (throws Error before anything runs), picks the backend and runs.
// CUDA backends are asynchronous on args.stream. Returns the backend that ran.
Backend attention_forward(const AttentionArgs& args);

// Bytes of workspace the call needs: 0 for host tensors (cpu/reference); on a CUDA device two
// uint32 tile counters (8 bytes), or for a call the sm90 kernel runs with split keys (a
// power-of-two GQA group, seqlen_q <= 64, too few tiles to fill the GPU) its partial results
// too, (head_dim + 1) floats per (split, batch, head, query row). Depends on the shapes of q and
// k, causal and the device: always ask rather than hard-code. With args.k left empty the answer
// holds for any k (at most the SMs x 192 x (head_dim + 1) x 4 bytes of a split call).
size_t attention_workspace_bytes(const AttentionArgs& args);

// The backend attention_forward would choose, or an Error explaining why none fits.
Backend select_backend(const AttentionArgs& args);

// Whether a backend was compiled in and can run on this machine (a GPU of the right arch present).
bool backend_available(Backend backend, int device_index = 0);

// Head dimensions a backend has kernels for (empty for cpu/reference: any head_dim works).
std::vector<int> supported_head_dims(Backend backend);

const char* to_string(Backend backend);
const char* to_string(DType dtype);
size_t dtype_size(DType dtype);
// Parses "auto", "reference", "cpu", "sm80", "sm90"; throws Error naming the value otherwise.
Backend parse_backend(const std::string& name);
// Parses "fp16"/"float16", "bf16"/"bfloat16", "fp32"/"float32", "int32" and
// "fp8"/"fp8_e4m3"/"float8_e4m3fn" (to_string gives "fp8_e4m3").
DType parse_dtype(const std::string& name);

const char* version();

}  // namespace flashcore
