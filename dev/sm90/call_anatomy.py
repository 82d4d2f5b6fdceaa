"""What the GPU runs for one prefill call of each implementation (FlashCore through
flashcore.torch, SDPA cuDNN, SDPA FA2): every kernel and memset with its GPU duration and the
gap before it, from torch.profiler, plus each implementation's median time per call between
events (back to back, as bench/compare.py times it). Written to see what a causal FlashCore
call pays beside its kernel (the tile counters zeroed on the workspace).

    python3 dev/sm90/call_anatomy.py 1024 64 1

Arguments: seqlen, head_dim, causal (0 / 1). bf16, standard grid (batch 16384 / seqlen, heads
2048 / head_dim).
"""
import statistics
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.profiler import ProfilerActivity, profile

import flashcore.torch as fct


def implementations(q, k, v, causal):
    qt, kt, vt = (t.transpose(1, 2) for t in (q, k, v))

    def sdpa(backend):
        def call():
            with sdpa_kernel(backend):
                return F.scaled_dot_product_attention(qt, kt, vt, is_causal=causal)
        return call

    return {"flashcore": lambda: fct.attention(q, k, v, causal=causal),
            "cudnn": sdpa(SDPBackend.CUDNN_ATTENTION), "fa2": sdpa(SDPBackend.FLASH_ATTENTION)}


def median_us(call, iters=30):
    times = []
    for _ in range(iters):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        call()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1000.0)
    return statistics.median(times)


def gpu_ops(call):
    """(name, start us, duration us) of every GPU op of three back-to-back calls."""
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(3):
            call()
        torch.cuda.synchronize()
    ops = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    ops.sort(key=lambda e: e.time_range.start)
    return [(e.name, e.time_range.start, e.time_range.end - e.time_range.start) for e in ops]


def main():
    seqlen, head_dim, causal = int(sys.argv[1]), int(sys.argv[2]), bool(int(sys.argv[3]))
    batch, heads = 16384 // seqlen, 2048 // head_dim
    flops = 4 * batch * heads * seqlen * seqlen * head_dim / (2 if causal else 1)
    q, k, v = (torch.randn(batch, seqlen, heads, head_dim, device="cuda", dtype=torch.bfloat16)
               for _ in range(3))
    calls = implementations(q, k, v, causal)
    for call in calls.values():  # warm-up: module load, workspace, plans
        for _ in range(3):
            call()
    print(f"b{batch} s{seqlen} h{heads} d{head_dim} causal={causal}")
    for _ in range(2):  # two rounds, to see the spread
        for name, call in calls.items():
            us = median_us(call)
            print(f"  {name:9s} {us:8.1f} us/call  {flops / us / 1e6:6.1f} TFLOPS")
    for name, call in calls.items():
        print(f"  {name}: GPU ops of three calls (gap before, duration, name)")
        previous_end = None
        for op_name, start, duration in gpu_ops(call):
            gap = "" if previous_end is None else f"{start - previous_end:7.1f}"
            print(f"    {gap:>7s} {duration:8.1f}  {op_name[:90]}")
            previous_end = start + duration


if __name__ == "__main__":
    main()
