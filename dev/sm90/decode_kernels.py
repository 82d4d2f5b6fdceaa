"""One decode call per implementation (FlashCore, SDPA cuDNN, SDPA FA2), for a profiler to time
their kernels alone: at decode sizes compare.py's per-call figures include host time, since
calls of 10-40 us are queued no faster than the Python wrappers run.

    ncu --metrics gpu__time_duration.sum python3 dev/sm90/decode_kernels.py 1 16384

Arguments: batch, seqlen_k (GQA 4:1, hq 32, hkv 8, d128, bf16, seqlen_q 1).
"""
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

import flashcore.torch as fct


def main():
    batch, seqlen_k = int(sys.argv[1]), int(sys.argv[2])
    heads_q, heads_kv, head_dim = 32, 8, 128
    gen = torch.Generator(device="cuda").manual_seed(0)

    def rand(*shape):
        return torch.randn(*shape, device="cuda", dtype=torch.bfloat16, generator=gen)

    q = rand(batch, 1, heads_q, head_dim)  # BSHD
    k = rand(batch, seqlen_k, heads_kv, head_dim)
    v = rand(batch, seqlen_k, heads_kv, head_dim)
    out = fct.attention(q, k, v)
    qt, kt, vt = (t.transpose(1, 2) for t in (q, k, v))  # BHSD for SDPA
    for backend in (SDPBackend.CUDNN_ATTENTION, SDPBackend.FLASH_ATTENTION):
        with sdpa_kernel(backend):
            ref = F.scaled_dot_product_attention(qt, kt, vt, enable_gqa=True).transpose(1, 2)
        err = (out.float() - ref.float()).abs().max().item()
        print(f"{backend.name}: max |flashcore - sdpa| = {err:.2e}")
    torch.cuda.synchronize()


if __name__ == "__main__":
    main()
