"""One prefill call per implementation (FlashCore, FA3 where fa3_fwd_interface imports, and for
16-bit inputs SDPA cuDNN and FA2) on a standard-grid shape, for a profiler to read each
implementation's kernels: name, grid, block, registers, shared memory, duration. Written to ask how
cuDNN runs the 1k configs where FlashCore's tile boundary and last partial wave cost it 2-3%; the
fp8 configs ask the same of FA3's FP8 kernel.

    ncu --section LaunchStats --section SpeedOfLight python3 dev/sm90/prefill_kernels.py \
        1024 128 0 [bf16|fp16|fp8]

Arguments: seqlen, head_dim, causal (0 / 1), dtype (bf16 unless given); batch 16384 / seqlen,
heads 2048 / head_dim (BENCHMARKS.md's standard grid). Past 16k the batch stays 1 and the heads
shrink with the length (32k: half the heads), so every length has the grid's tiles. fp8: e4m3
inputs of std-1 normals, descales 1, out bf16.
"""
import os
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

import flashcore.torch as fct

try:
    import fa3_fwd_interface as fa3
except ImportError:
    fa3 = None

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench"))
from compare_grids import STANDARD_HIDDEN, STANDARD_TOKENS  # noqa: E402

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp8": torch.float8_e4m3fn}


def main():
    seqlen, head_dim, causal = int(sys.argv[1]), int(sys.argv[2]), bool(int(sys.argv[3]))
    dtype = DTYPES[sys.argv[4] if len(sys.argv) > 4 else "bf16"]
    batch = max(1, STANDARD_TOKENS // seqlen)
    grid_heads = STANDARD_HIDDEN // head_dim  # the heads of every config up to 16k
    heads = grid_heads * STANDARD_TOKENS // (batch * seqlen)
    if heads < 1:
        sys.exit(f"seqlen {seqlen}: longer than the grid's {STANDARD_TOKENS * grid_heads} tokens "
                 "x heads, so no head is left")
    gen = torch.Generator(device="cuda").manual_seed(0)

    def rand(*shape):
        x = torch.randn(*shape, device="cuda", dtype=torch.bfloat16, generator=gen)
        return x.to(dtype)

    q, k, v = (rand(batch, seqlen, heads, head_dim) for _ in range(3))  # BSHD
    out = fct.attention(q, k, v, causal=causal)
    if fa3 is not None and dtype != torch.float16:
        result = fa3.flash_attn_func(q, k, v, causal=causal)
        fa3_out = result[0] if isinstance(result, tuple) else result
        err = (out.float() - fa3_out.float()).abs().max().item()
        print(f"FA3: max |flashcore - fa3| = {err:.2e}")
    if dtype == torch.float8_e4m3fn:  # SDPA has no FP8 path
        torch.cuda.synchronize()
        return
    qt, kt, vt = (t.transpose(1, 2) for t in (q, k, v))  # BHSD for SDPA
    for backend in (SDPBackend.CUDNN_ATTENTION, SDPBackend.FLASH_ATTENTION):
        with sdpa_kernel(backend):
            ref = F.scaled_dot_product_attention(qt, kt, vt, is_causal=causal).transpose(1, 2)
        err = (out.float() - ref.float()).abs().max().item()
        print(f"{backend.name}: max |flashcore - sdpa| = {err:.2e}")
    torch.cuda.synchronize()


if __name__ == "__main__":
    main()
