"""One prefill call per implementation (FlashCore, SDPA cuDNN, SDPA FA2) on a standard-grid
shape, for a profiler to read each implementation's kernels: name, grid, block, registers,
shared memory and duration. Written to ask how cuDNN runs the 1k configs where FlashCore's
tile boundary and last partial wave cost it 2-3%.

    ncu --section LaunchStats --section SpeedOfLight python3 dev/sm90/prefill_kernels.py \
        1024 128 0

Arguments: seqlen, head_dim, causal (0 / 1). bf16; batch 16384 / seqlen, heads 2048 / head_dim
(BENCHMARKS.md's standard grid).
"""
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

import flashcore.torch as fct


def main():
    seqlen, head_dim, causal = int(sys.argv[1]), int(sys.argv[2]), bool(int(sys.argv[3]))
    batch, heads = 16384 // seqlen, 2048 // head_dim
    gen = torch.Generator(device="cuda").manual_seed(0)

    def rand(*shape):
        return torch.randn(*shape, device="cuda", dtype=torch.bfloat16, generator=gen)

    q, k, v = (rand(batch, seqlen, heads, head_dim) for _ in range(3))  # BSHD
    out = fct.attention(q, k, v, causal=causal)
    qt, kt, vt = (t.transpose(1, 2) for t in (q, k, v))  # BHSD for SDPA
    for backend in (SDPBackend.CUDNN_ATTENTION, SDPBackend.FLASH_ATTENTION):
        with sdpa_kernel(backend):
            ref = F.scaled_dot_product_attention(qt, kt, vt, is_causal=causal).transpose(1, 2)
        err = (out.float() - ref.float()).abs().max().item()
        print(f"{backend.name}: max |flashcore - sdpa| = {err:.2e}")
    torch.cuda.synchronize()


if __name__ == "__main__":
    main()
