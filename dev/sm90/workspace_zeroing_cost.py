"""What zeroing the tile counters in the caller's workspace costs a causal call, as CUDA-graph
replays: per config three graphs of 10 calls, FlashCore as flashcore.torch calls it (a fresh
workspace from torch's allocator, its counters zeroed on the stream before each causal launch),
FlashCore without a workspace (the library's static counter pool: nothing to zero; safe here,
one stream and no overlapping launches) and FA3 (fa3_fwd_interface, its own zeroing included),
replayed in interleaved rounds; each figure the median time per call over the rounds.

Until 46f4743 the zeroing was a cudaMemsetAsync before a plain launch: 0.5-1.3% of the short
causal calls' time on an H200 (docs/kernels.md, run 359); since then a one-warp kernel that
the launch depends on (PDL). The non-causal config is the control: it claims no tiles and
zeroes nothing, so its two FlashCore columns should agree.

    PYTHONPATH=<build>/python:<fa3 site> python3 dev/sm90/workspace_zeroing_cost.py [--rounds 24]
"""
import argparse
import os
import statistics
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "bench"))
import compare_accuracy  # noqa: E402  (the fp8 draw compare.py makes)
import flashcore  # noqa: E402
import flashcore.torch as flashcore_torch  # noqa: E402
from fa3_fwd_interface import flash_attn_func  # noqa: E402

# (dtype, batch, seqlen, heads_q, heads_kv, head_dim, causal): the short causal calls where the
# zeroing weighs most, Llama-3-8B's 2k prefill, one longer call and the non-causal control.
CONFIGS = [
    ("bf16", 32, 512, 16, 16, 128, True), ("bf16", 16, 1024, 16, 16, 128, True),
    ("bf16", 8, 2048, 16, 16, 128, True), ("bf16", 8, 2048, 32, 8, 128, True),
    ("bf16", 4, 4096, 16, 16, 128, True), ("fp8", 8, 2048, 16, 16, 128, True),
    ("bf16", 8, 2048, 16, 16, 128, False),
]
CALLS_PER_GRAPH = 10
REPLAYS_PER_ROUND = 5


def inputs(dtype, batch, seqlen, heads_q, heads_kv, head_dim):
    """q, k, v and the keyword arguments both implementations take (fp8: the descales)."""
    if dtype == "fp8":
        (q, q_descale), (k, k_descale), (v, v_descale) = (
            compare_accuracy.quantize_fp8(
                torch.randn(batch, seqlen, heads, head_dim, device="cuda"), heads_kv)
            for heads in (heads_q, heads_kv, heads_kv))
        return q, k, v, dict(q_descale=q_descale, k_descale=k_descale, v_descale=v_descale)
    q = torch.randn(batch, seqlen, heads_q, head_dim, device="cuda", dtype=torch.bfloat16)
    k, v = (torch.randn(batch, seqlen, heads_kv, head_dim, device="cuda", dtype=torch.bfloat16)
            for _ in range(2))
    return q, k, v, {}


def capture(call):
    """A graph of CALLS_PER_GRAPH calls, after warm-up calls on a side stream."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            call()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(CALLS_PER_GRAPH):
            call()
    return graph


def ms_per_call(graph):
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(REPLAYS_PER_ROUND):
        graph.replay()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / (REPLAYS_PER_ROUND * CALLS_PER_GRAPH)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=24)
    args = parser.parse_args()
    with_workspace = flashcore_torch._workspace
    print("| config | workspace ms | no workspace ms | FA3 ms | workspace / none | "
          "workspace / FA3 |")
    print("|---|---|---|---|---|---|")
    for dtype, batch, seqlen, heads_q, heads_kv, head_dim, causal in CONFIGS:
        torch.manual_seed(0)
        q, k, v, extra = inputs(dtype, batch, seqlen, heads_q, heads_kv, head_dim)
        call = lambda: flashcore.attention(q, k, v, causal=causal, **extra)  # noqa: E731
        graphs = {"workspace": capture(call)}
        flashcore_torch._workspace = lambda *unused, **unused_kw: None
        try:
            graphs["none"] = capture(call)
        finally:
            flashcore_torch._workspace = with_workspace
        graphs["fa3"] = capture(lambda: flash_attn_func(
            q, k, v, softmax_scale=head_dim ** -0.5, causal=causal, **extra))
        names = list(graphs)
        times = {name: [] for name in names}
        for round_index in range(args.rounds):  # each graph first in turn
            shift = round_index % len(names)
            for name in names[shift:] + names[:shift]:
                times[name].append(ms_per_call(graphs[name]))
        ms = {name: statistics.median(values) for name, values in times.items()}
        label = (f"{dtype} b{batch} s{seqlen} {heads_q}/{heads_kv} d{head_dim} "
                 f"{'causal' if causal else 'non-causal'}")
        print(f"| {label} | {ms['workspace']:.4f} | {ms['none']:.4f} | {ms['fa3']:.4f} | "
              f"{ms['workspace'] / ms['none']:.4f} | {ms['workspace'] / ms['fa3']:.4f} |",
              flush=True)


if __name__ == "__main__":
    main()
