"""What a decode call replayed from a CUDA graph runs on the GPU, per implementation (FlashCore,
SDPA cuDNN, SDPA FA2): each kernel or memset of a few back-to-back calls with its duration and
the gap before it, from torch.profiler over one graph replay. decode_graph_timing.py gives the
time per call; this says where it goes (the attention kernel, the combine, the gaps).

    PYTHONPATH=<build>/python python3 dev/sm90/decode_anatomy.py 1 1024

Arguments: batch, seqlen_k (GQA 4:1, hq 32, hkv 8, d128, bf16, seqlen_q 1).
"""
import sys

import torch
from torch.profiler import ProfilerActivity, profile

from decode_graph_timing import HEAD_DIM, capture, implementations

CALLS_SHOWN = 4


def main():
    batch, seqlen_k = int(sys.argv[1]), int(sys.argv[2])
    heads_q, heads_kv = 32, 8
    gen = torch.Generator(device="cuda").manual_seed(0)

    def rand(*shape):
        return torch.randn(*shape, device="cuda", dtype=torch.bfloat16, generator=gen)

    q = rand(batch, 1, heads_q, HEAD_DIM)
    k, v = rand(batch, seqlen_k, heads_kv, HEAD_DIM), rand(batch, seqlen_k, heads_kv, HEAD_DIM)
    for name, call in implementations(q, k, v).items():
        graph = capture(call)
        for _ in range(3):
            graph.replay()
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            graph.replay()
            torch.cuda.synchronize()
        ops = sorted((e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA),
                     key=lambda e: e.time_range.start)
        print(f"{name}, b{batch} sk{seqlen_k}: {len(ops)} GPU ops in one replay; the first few "
              "(gap before, duration in us, name)")
        previous_end = None
        for op in ops[:CALLS_SHOWN * 3]:
            gap = "" if previous_end is None else f"{op.time_range.start - previous_end:6.2f}"
            print(f"  {gap:>6s} {op.time_range.end - op.time_range.start:7.2f}  {op.name[:80]}")
            previous_end = op.time_range.end
        if ops:
            span = ops[-1].time_range.end - ops[0].time_range.start
            print(f"  span of the replay: {span:.1f} us for {len(ops)} ops")


if __name__ == "__main__":
    main()
