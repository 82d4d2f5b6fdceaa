"""GPU time per decode call with the host out of the picture: each implementation's calls are
captured in a CUDA graph and the graph is replayed between two events, so every stream op of a
call counts (memsets, kernels, the gaps between them) and no Python or launch cost does. This
is what an inference engine that replays decode steps as graphs pays per call.
ncu (dev/sm90/ncu_decode.sh) times kernels alone and misses memsets and gaps; compare.py times
one call at a time, host included.

    PYTHONPATH=<build>/python python3 dev/sm90/decode_graph_timing.py [--json out.json]

Implementations: FlashCore (flashcore.torch.attention, BSHD, workspace from torch), SDPA pinned
to cuDNN and to FlashAttention-2 (BHSD views, enable_gqa). Shapes: seqlen_q 1, d128, bf16,
GQA 4:1 (hq 32, hkv 8) at batch 1 / 16 / 64 and MHA (hq = hkv = 32) at batch 1. The rounds'
orders form a balanced Latin square (bench/compare_runner.py: each implementation in every place
and right after every other one equally often; a rotation had put FlashCore right after FA2 in
every round); the figure is the median over rounds.

Two patterns per shape: attention calls back to back ("b2b"), and each call preceded by an
elementwise kernel that writes q ("dep"), as a model's RoPE / cache write precedes attention:
a kernel that overlaps its start with the previous attention call's end gains in the first and
only what the elementwise kernel leaves it in the second. The second is what a decode step sees.
"""
import argparse
import json
import os
import statistics
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

import flashcore.torch as fct

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "bench"))
from compare_runner import balanced_rounds  # noqa: E402

CALLS_PER_GRAPH = 20  # calls in one graph: one replay's launch cost spread thin
REPLAYS = 10          # timed replays per round
ROUNDS = 5  # at least; rounded up to whole balanced squares (6 for three implementations)
# (batch, seqlen_k, heads_q, heads_kv)
SHAPES = [(1, 1024, 32, 8), (1, 4096, 32, 8), (1, 16384, 32, 8), (16, 1024, 32, 8),
          (16, 4096, 32, 8), (64, 4096, 32, 8), (1, 4096, 32, 32), (1, 16384, 32, 32)]
HEAD_DIM = 128


def implementations(q, k, v):
    qt, kt, vt = (t.transpose(1, 2) for t in (q, k, v))  # BHSD views for SDPA

    def sdpa(backend):
        def call():
            with sdpa_kernel(backend):
                return F.scaled_dot_product_attention(qt, kt, vt, enable_gqa=True)
        return call

    return {"flashcore": lambda: fct.attention(q, k, v),
            "cudnn": sdpa(SDPBackend.CUDNN_ATTENTION),
            "fa2": sdpa(SDPBackend.FLASH_ATTENTION)}


def capture(call, before=None):
    """A graph of CALLS_PER_GRAPH calls, each after `before` if given (after eager warm-up on a
    side stream, as torch asks)."""
    def step():
        if before is not None:
            before()
        call()
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(3):
            step()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(CALLS_PER_GRAPH):
            step()
    return graph


def time_graph(graph, replays=REPLAYS):
    graph.replay()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(replays):
        graph.replay()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) * 1e3 / (replays * CALLS_PER_GRAPH)  # us per call


def time_graphs(graphs, rounds, replays=REPLAYS):
    """Each graph of {name: graph} replayed in balanced rounds: the samples ({name: [us per
    call]}) and their medians."""
    times = {name: [] for name in graphs}
    for order in balanced_rounds(list(graphs), rounds):
        for name in order:
            times[name].append(time_graph(graphs[name], replays))
    return times, {name: statistics.median(t) for name, t in times.items()}


def write_run(path, records, replays=REPLAYS, rounds=ROUNDS):
    """The run's records with the device and the timing's settings, as JSON (what
    summarize_graph_timing.py reads)."""
    with open(path, "w") as f:
        json.dump({"device": torch.cuda.get_device_name(), "torch": torch.__version__,
                   "calls_per_graph": CALLS_PER_GRAPH, "replays": replays,
                   "rounds_at_least": rounds, "records": records}, f, indent=1)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--json")
    args = parser.parse_args()
    gen = torch.Generator(device="cuda").manual_seed(0)
    records = []
    for batch, seqlen_k, heads_q, heads_kv in SHAPES:
        def rand(*shape):
            return torch.randn(*shape, device="cuda", dtype=torch.bfloat16, generator=gen)
        q = rand(batch, 1, heads_q, HEAD_DIM)
        k, v = rand(batch, seqlen_k, heads_kv, HEAD_DIM), rand(batch, seqlen_k, heads_kv, HEAD_DIM)
        calls = implementations(q, k, v)
        ref = calls["cudnn"]().transpose(1, 2).float()
        touch_q = lambda: q.mul_(1.0)  # noqa: E731  (writes q: the call depends on it)
        for pattern, before in (("b2b", None), ("dep", touch_q)):
            graphs, errors = {}, {}
            for name, call in calls.items():
                try:
                    out = call()
                    out = out if name == "flashcore" else out.transpose(1, 2)
                    errors[name] = (out.float() - ref).abs().max().item()
                    graphs[name] = capture(call, before)
                except RuntimeError as error:  # an implementation that cannot run or be captured
                    print(f"b{batch} sk{seqlen_k} hq{heads_q} hkv{heads_kv} {name}: {error}")
            names = list(graphs)
            times, median = time_graphs(graphs, ROUNDS)
            records.append({"batch": batch, "seqlen_k": seqlen_k, "heads_q": heads_q,
                            "heads_kv": heads_kv, "pattern": pattern, "us_per_call": median,
                            "samples": times, "max_abs_err_vs_cudnn": errors})
            cells = "  ".join(f"{name} {median[name]:7.2f}" for name in names)
            ratios = "  ".join(f"vs {name} {median[name] / median['flashcore']:.2f}"
                               for name in names if name != "flashcore" and "flashcore" in median)
            print(f"{pattern} b{batch:<3} sk{seqlen_k:<6} hq{heads_q} hkv{heads_kv}  us/call: "
                  f"{cells}  flashcore speedup: {ratios}", flush=True)
            del graphs
    if args.json:
        write_run(args.json, records)


if __name__ == "__main__":
    main()
