"""Host time of one eager decode call, stage by stage (flashcore.torch) and against SDPA.

compare.py times each call between its own pair of CUDA events, so where the host takes longer
than the kernels (batch-1 decode: ~7 us of kernels) it measures the host time from the first
event to the last launch. This script takes that host time apart: every stage of
flashcore.torch.attention is run alone in a loop and timed with the host clock (the GPU work
they queue is drained every few hundred calls), next to whole calls of FlashCore (the torch
entry and the generic flashcore.attention that compare.py calls) and SDPA's cuDNN and FA2
backends (the backend chosen once around the loop, as compare.py does), and compare.py's own
event timing of each.

    python3 dev/sm90/host_time.py [seqlen_k ...]      # default 1024 16384

Shape: decode, batch 1, seqlen_q 1, 32 query heads, 8 KV heads, head_dim 128, bf16 (BSHD).
"""
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

import contextlib

import flashcore
import flashcore.torch as fct
from flashcore import _flashcore

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
import compare_runner  # noqa: E402  (bench/ is not a package)

ITERS = 2000
DRAIN_EVERY = 200


def host_us(fn, iters=ITERS):
    """Median over 5 blocks of the host time per call, in microseconds."""
    blocks = []
    for _ in range(5):
        torch.cuda.synchronize()
        begin = time.perf_counter()
        for i in range(iters // 5):
            fn()
            if (i + 1) % DRAIN_EVERY == 0:
                torch.cuda.synchronize()
        blocks.append((time.perf_counter() - begin) * 1e6 / (iters // 5))
    return statistics.median(blocks)


def event_us(fn, runs=200):
    """compare.py's measure: each call between its own CUDA events, median in microseconds."""
    return statistics.median(compare_runner._gpu_runs_ms(fn, runs)) * 1e3


def main():
    seqlens = [int(a) for a in sys.argv[1:]] or [1024, 16384]
    for seqlen_k in seqlens:
        gen = torch.Generator(device="cuda").manual_seed(0)
        q = torch.randn(1, 1, 32, 128, device="cuda", dtype=torch.bfloat16, generator=gen)
        k = torch.randn(1, seqlen_k, 8, 128, device="cuda", dtype=torch.bfloat16, generator=gen)
        v = torch.randn_like(k)
        qt, kt, vt = (t.transpose(1, 2) for t in (q, k, v))
        out = torch.empty_like(q)
        q_raw, k_raw, v_raw = fct._raw("q", q), fct._raw("k", k), fct._raw("v", v)
        out_raw = fct._raw("out", out)
        stream = fct._current_stream(q)
        nbytes = _flashcore.attention_workspace_bytes_raw(q_raw, k_raw, False)
        workspace = q.new_empty((max(nbytes, 1),), dtype=torch.uint8)

        def sdpa():
            F.scaled_dot_product_attention(qt, kt, vt, enable_gqa=True)

        no_context = contextlib.nullcontext
        stages = {  # name: (call, context entered around its loop)
            "flashcore.attention (generic entry, compare.py's)": (
                lambda: flashcore.attention(q, k, v), no_context),
            "flashcore.torch.attention": (lambda: fct.attention(q, k, v), no_context),
            "  _check_common": (lambda: fct._check_common(q, k, v, "bshd"), no_context),
            "  _dispatcher_has_work": (lambda: fct._dispatcher_has_work(q, k, v), no_context),
            "  backend_name": (lambda: fct._arrays.backend_name("auto"), no_context),
            "  _raw x 4": (lambda: (fct._raw("q", q), fct._raw("k", k), fct._raw("v", v),
                                    fct._raw("out", out)), no_context),
            "  torch.empty_like (out)": (lambda: torch.empty_like(q), no_context),
            "  _current_stream": (lambda: fct._current_stream(q), no_context),
            "  attention_workspace_bytes_raw": (
                lambda: _flashcore.attention_workspace_bytes_raw(q_raw, k_raw, False),
                no_context),
            "  q.new_empty (workspace)": (
                lambda: q.new_empty((nbytes,), dtype=torch.uint8), no_context),
            "  attention_forward_raw, pointers checked (C++: checks, maps, launches)": (
                lambda: _flashcore.attention_forward_raw(
                    q_raw, k_raw, v_raw, out_raw, None, None, False, "auto", stream,
                    workspace.data_ptr(), nbytes, False), no_context),
            "  attention_forward_raw, pointers verified by the caller": (
                lambda: _flashcore.attention_forward_raw(
                    q_raw, k_raw, v_raw, out_raw, None, None, False, "auto", stream,
                    workspace.data_ptr(), nbytes, True), no_context),
            "SDPA cuDNN": (sdpa, lambda: sdpa_kernel(SDPBackend.CUDNN_ATTENTION)),
            "SDPA FA2": (sdpa, lambda: sdpa_kernel(SDPBackend.FLASH_ATTENTION)),
        }
        for fn, context in stages.values():  # warm-up: allocator, cuDNN plans, lazy loads
            with context():
                for _ in range(50):
                    fn()
        torch.cuda.synchronize()
        print(f"\n== decode b1 sq1 sk{seqlen_k} hq32 hkv8 d128 bf16 (workspace {nbytes} B)")
        print("| stage | host us / call |")
        print("|---|---|")
        for name, (fn, context) in stages.items():
            with context():
                print(f"| {name} | {host_us(fn):.1f} |")
        for name in ("flashcore.attention (generic entry, compare.py's)",
                     "flashcore.torch.attention", "SDPA cuDNN", "SDPA FA2"):
            fn, context = stages[name]
            with context():
                print(f"| events per call (compare.py's measure), {name.split(' (')[0]} | "
                      f"{event_us(fn):.1f} |")


if __name__ == "__main__":
    main()
