"""Host cost of the pieces of one flashcore.torch.attention call, timed on CPU tensors (no GPU
needed). The CUDA path adds the CUDA API calls (see README.md) but the Python wrapper, the custom
op dispatch, nanobind conversion and validation are the same code.

    PYTHONPATH=<build>/python python dev/host_overhead/time_host_pieces_cpu.py
"""
import time

import torch

import flashcore
import flashcore.torch as ft
from flashcore import _flashcore

CALLS = 20000  # enough for a stable per-call mean of microsecond-scale pieces
# Decode shape with a 1-row KV cache: the CPU kernel itself costs next to nothing.
BATCH, SEQ_Q, SEQ_K, HEADS_Q, HEADS_KV, HEAD_DIM = 1, 1, 1, 32, 8, 128


def per_call_us(fn):
    for _ in range(CALLS // 10):
        fn()
    start = time.perf_counter()
    for _ in range(CALLS):
        fn()
    return (time.perf_counter() - start) / CALLS * 1e6


def main():
    torch.set_num_threads(1)
    q = torch.randn(BATCH, SEQ_Q, HEADS_Q, HEAD_DIM, dtype=torch.bfloat16)
    k = torch.randn(BATCH, SEQ_K, HEADS_KV, HEAD_DIM, dtype=torch.bfloat16)
    v = torch.randn_like(k)
    out = torch.empty_like(q)
    raw = [ft._raw(n, t) for n, t in (("q", q), ("k", k), ("v", v), ("out", out))]
    qh, kh, vh = (t.transpose(1, 2) for t in (q, k, v))
    rows = {
        "raw entry (nanobind + validate + cpu kernel)":
            lambda: _flashcore.attention_forward_raw(*raw, None, None, True, "cpu", 0),
        "_raw() x4 (python tuples)":
            lambda: [ft._raw(n, t) for n, t in (("q", q), ("k", k), ("v", v), ("out", out))],
        "torch.empty out":
            lambda: torch.empty(q.shape, dtype=q.dtype, device=q.device),
        "flashcore.torch.attention bshd (custom op)":
            lambda: ft.attention(q, k, v, causal=True),
        "flashcore.torch.attention bhsd (custom op)":
            lambda: ft.attention(qh, kh, vh, causal=True, layout="bhsd"),
        "sdpa (cpu, same shape, reference point)":
            lambda: torch.nn.functional.scaled_dot_product_attention(
                qh, kh, vh, is_causal=False, enable_gqa=True),
    }
    with torch.inference_mode():
        for name, fn in rows.items():
            print(f"{per_call_us(fn):8.2f} us  {name}")


if __name__ == "__main__":
    main()
