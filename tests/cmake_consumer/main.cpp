// Runs a small attention on the CPU through the installed package and checks one value:
// with one key, every query's output is that key's value row.
#include <cmath>
#include <cstdio>
#include <vector>

#include <flashcore/flashcore.h>

int main() {
  const flashcore::Device cpu{flashcore::DeviceType::kCPU, 0};
  const int64_t seqlen_q = 3, head_dim = 4;
  std::vector<float> q(seqlen_q * head_dim, 0.5f), k(head_dim, 1.0f), out(seqlen_q * head_dim);
  std::vector<float> v = {1.0f, 2.0f, 3.0f, 4.0f};

  flashcore::AttentionArgs args;
  args.q = flashcore::make_tensor(q.data(), flashcore::DType::kFloat32, cpu, {1, seqlen_q, 1, head_dim});
  args.k = flashcore::make_tensor(k.data(), flashcore::DType::kFloat32, cpu, {1, 1, 1, head_dim});
  args.v = flashcore::make_tensor(v.data(), flashcore::DType::kFloat32, cpu, {1, 1, 1, head_dim});
  args.out = flashcore::make_tensor(out.data(), flashcore::DType::kFloat32, cpu, {1, seqlen_q, 1, head_dim});
  flashcore::Backend ran = flashcore::attention_forward(args);

  std::printf("flashcore %s ran %s: out[2][3] = %g\n", flashcore::version(),
              flashcore::to_string(ran), out[2 * head_dim + 3]);
  return std::fabs(out[2 * head_dim + 3] - 4.0f) < 1e-6f ? 0 : 1;
}
