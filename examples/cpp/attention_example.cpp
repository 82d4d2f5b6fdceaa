// FlashCore from C++: attention over host tensors on the cpu backend.
// With CUDA tensors (device pointers, Device{DeviceType::kCUDA, 0}) the same call picks sm90/sm80.
#include <cstdio>
#include <vector>

#include <flashcore/flashcore.h>

int main() {
  using namespace flashcore;
  const int64_t batch = 1, seqlen = 128, heads = 4, head_dim = 64;
  std::vector<float> q(batch * seqlen * heads * head_dim), k(q.size()), v(q.size()), out(q.size());
  for (size_t i = 0; i < q.size(); ++i) {
    q[i] = 0.01f * float(i % 97);
    k[i] = 0.02f * float(i % 89);
    v[i] = float(i % 7);
  }

  const Device cpu{DeviceType::kCPU, 0};
  AttentionArgs args;  // layout [batch, seqlen, heads, head_dim]
  args.q = make_tensor(q.data(), DType::kFloat32, cpu, {batch, seqlen, heads, head_dim});
  args.k = make_tensor(k.data(), DType::kFloat32, cpu, {batch, seqlen, heads, head_dim});
  args.v = make_tensor(v.data(), DType::kFloat32, cpu, {batch, seqlen, heads, head_dim});
  args.out = make_tensor(out.data(), DType::kFloat32, cpu, {batch, seqlen, heads, head_dim});
  args.causal = true;

  Backend backend = attention_forward(args);
  std::printf("flashcore %s, backend %s: out[0] = %.4f\n", version(), to_string(backend), out[0]);
  return 0;
}
