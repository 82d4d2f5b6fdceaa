"""What zeroing the tile counters in the caller's workspace costs a causal call, as CUDA-graph
replays: per config three graphs, FlashCore as flashcore.torch calls it (a fresh workspace from
torch's allocator, its counters zeroed on the stream before each causal launch), FlashCore
without a workspace (the library's static counter pool: nothing to zero; safe here, one stream
and no overlapping launches) and FA3 (fa3_fwd_interface, its own zeroing included), replayed in
balanced rounds (decode_graph_timing's capture and time_graphs); each figure the median time per
call over the rounds.

Until 46f4743 the zeroing was a cudaMemsetAsync before a plain launch: 0.5-1.3% of the short
causal calls' time on an H200 (docs/kernels.md, run 359, taken with graphs of 10 calls and a
rotating order); since then a one-warp kernel that the launch depends on (PDL). The non-causal
config is the control: it claims no tiles and zeroes nothing, so its two FlashCore columns
should agree.

    PYTHONPATH=<build>/python:<fa3 site> python3 dev/sm90/workspace_zeroing_cost.py [--rounds 24]
"""
import argparse

import torch

import flashcore
import flashcore.torch as flashcore_torch
from fa3_fwd_interface import flash_attn_func

# decode_graph_timing puts bench/ on sys.path, where compare_grids lives; power_probe draws a
# config's inputs as compare.py does (fp8: compare_accuracy.fp8_inputs, with the descales).
from decode_graph_timing import capture, time_graphs
from power_probe import inputs
from compare_grids import Config  # noqa: E402

# The short causal calls where the zeroing weighs most, Llama-3-8B's 2k prefill, one longer
# call and the non-causal control (batch, seqlen_q, seqlen_k, heads_q, heads_kv, head_dim, dtype,
# causal).
CONFIGS = [
    Config(32, 512, 512, 16, 16, 128, "bf16", True),
    Config(16, 1024, 1024, 16, 16, 128, "bf16", True),
    Config(8, 2048, 2048, 16, 16, 128, "bf16", True),
    Config(8, 2048, 2048, 32, 8, 128, "bf16", True),
    Config(4, 4096, 4096, 16, 16, 128, "bf16", True),
    Config(8, 2048, 2048, 16, 16, 128, "fp8", True),
    Config(8, 2048, 2048, 16, 16, 128, "bf16", False),
]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=24)
    args = parser.parse_args()
    with_workspace = flashcore_torch._workspace
    print("| config | workspace us | no workspace us | FA3 us | workspace / none | "
          "workspace / FA3 |")
    print("|---|---|---|---|---|---|")
    for config in CONFIGS:
        torch.manual_seed(0)
        q, k, v, extra = inputs(config)
        causal = config.causal
        call = lambda: flashcore.attention(q, k, v, causal=causal, **extra)  # noqa: E731
        graphs = {"workspace": capture(call)}
        flashcore_torch._workspace = lambda *unused, **unused_kw: None
        try:
            graphs["none"] = capture(call)
        finally:
            flashcore_torch._workspace = with_workspace
        graphs["fa3"] = capture(lambda: flash_attn_func(
            q, k, v, softmax_scale=config.head_dim ** -0.5, causal=causal, **extra))
        _, us = time_graphs(graphs, args.rounds)
        print(f"| {config.describe()} | {us['workspace']:.1f} | {us['none']:.1f} | "
              f"{us['fa3']:.1f} | {us['workspace'] / us['none']:.4f} | "
              f"{us['workspace'] / us['fa3']:.4f} |", flush=True)


if __name__ == "__main__":
    main()
