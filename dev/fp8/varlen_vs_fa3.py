"""FP8 (e4m3) varlen prefill: FlashCore's sm90 kernel in the serving layout against FA3's
flash_attn_varlen_func (the fa3-fwd wheel, same process), and against FlashCore's own dense FP8
kernel on an equal-length batch of the same total tokens. CUDA-graph replays, interleaved
rounds; every output compared with FA3's (max |difference|, bf16 out) before timing.

    PYTHONPATH=build/python:/tmp/fa3 python3 dev/fp8/varlen_vs_fa3.py [--rounds 6]

The ragged batch is issue 25's (8192 + 4096 + ... + 17 + 1 tokens, 32 / 8 heads, d128, causal),
quantized per (sequence, kv head) with descale = amax / 448.
"""

import argparse
import os
import statistics
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench"))
import flashcore  # noqa: E402
import fa3_fwd_interface as fa3  # noqa: E402
from compare import GRAPH_CALLS  # noqa: E402
from compare_accuracy import quantize_fp8_packed  # noqa: E402
from compare_runner import balanced_rounds, capture_graph  # noqa: E402

LENGTHS = (8192, 4096, 2048, 1024, 512, 256, 128, 64, 17, 1)
HEADS_Q, HEADS_KV, HEAD_DIM = 32, 8, 128
# The dense comparison: the ragged batch's tokens as equal sequences of this length.
EQUAL_LENGTH = 4096


def graph_time(fn, replays):
    """Median ms per call over `replays` replays of a graph of GRAPH_CALLS calls."""
    graph = capture_graph([fn], GRAPH_CALLS, None)
    times = []
    for _ in range(replays):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / GRAPH_CALLS)
    return statistics.median(times)


def causal_flops(lengths):
    """FLOPs of the visible (query, key) pairs: QK^T and PV, 2 x 2 x d each."""
    return sum(4 * HEAD_DIM * HEADS_Q * n * (n + 1) / 2 for n in lengths)


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=6,
                        help="interleaved rounds (at least; whole balanced squares of 6)")
    parser.add_argument("--replays", type=int, default=20, help="graph replays per timing")
    args = parser.parse_args(argv)
    torch.manual_seed(0)
    total = sum(LENGTHS)
    cu = torch.tensor([0] + list(torch.tensor(LENGTHS).cumsum(0)), dtype=torch.int32,
                      device="cuda")
    q = torch.randn(total, HEADS_Q, HEAD_DIM, device="cuda")
    k = torch.randn(total, HEADS_KV, HEAD_DIM, device="cuda")
    v = torch.randn(total, HEADS_KV, HEAD_DIM, device="cuda")
    (q8, qd), (k8, kd), (v8, vd) = (quantize_fp8_packed(x, LENGTHS, HEADS_KV) for x in (q, k, v))
    longest = max(LENGTHS)
    descales = dict(q_descale=qd, k_descale=kd, v_descale=vd)

    def ours():
        return flashcore.attention_varlen(q8, k8, v8, cu, cu, longest, longest, causal=True,
                                          **descales)

    def theirs():
        out = fa3.flash_attn_varlen_func(q8, k8, v8, cu, cu, longest, longest, causal=True,
                                         **descales)
        return out[0] if isinstance(out, tuple) else out

    # FlashCore's dense FP8 kernel on the same tokens as equal sequences (batch x length).
    equal = EQUAL_LENGTH
    batch = total // equal
    qe, ke, ve = (x[:batch * equal].reshape(batch, equal, x.shape[1], HEAD_DIM)
                  for x in (q8, k8, v8))
    dense_descales = {name: d[:1].expand(batch, -1).contiguous() for name, d in descales.items()}

    def dense():
        return flashcore.attention(qe, ke, ve, causal=True, **dense_descales)

    difference = (ours().float() - theirs().float()).abs().max().item()
    print(f"max |flashcore - fa3| over the ragged batch: {difference:.3e}")
    flops = {"flashcore": causal_flops(LENGTHS), "fa3": causal_flops(LENGTHS),
             "dense": causal_flops([equal] * batch)}
    times = {name: [] for name in flops}
    timed = (("flashcore", ours), ("fa3", theirs), ("dense", dense))
    # Each in every place and right after every other one equally often (the clock follows the
    # power of the last kernels run): whole balanced squares of rounds.
    schedule = balanced_rounds(timed, args.rounds)
    for order in schedule:
        for name, fn in order:
            times[name].append(graph_time(fn, args.replays))
    tflops = {name: flops[name] / (statistics.median(t) * 1e-3) / 1e12
              for name, t in times.items()}
    print(f"ragged {'+'.join(map(str, LENGTHS))} tokens, {HEADS_Q}/{HEADS_KV} heads, "
          f"d{HEAD_DIM}, causal, fp8 (bf16 out); {len(schedule)} rounds")
    for name, value in tflops.items():
        label = {"dense": f"flashcore dense {batch} x {equal}"}.get(name, name)
        print(f"  {label:28s} {statistics.median(times[name]):8.4f} ms {value:7.1f} TFLOPS")
    print(f"  flashcore varlen / fa3 varlen: {tflops['flashcore'] / tflops['fa3']:.3f}")
    print(f"  flashcore varlen / its dense (TFLOPS): "
          f"{tflops['flashcore'] / tflops['dense']:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
