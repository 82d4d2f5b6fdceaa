"""GPU time of a causal prefill batch as a dense call and as the same sequences packed into a
varlen call (flashcore.torch.attention / attention_varlen), bf16 and fp16, replayed as CUDA
graphs. Issue 25 asks varlen within 3% of the dense kernel on an equal-length batch; every call
of a shape (both layouts, both dtypes) takes its turn in the same balanced rounds, so the
layouts' and the dtypes' ratios come from one run.

    PYTHONPATH=<build>/python python3 dev/sm90/varlen_graph_timing.py [--json out.json]

Shapes: the serving grid's (bench/compare_serving_grid.py): GQA 32 / 8 heads, d128, causal,
equal-length batches b2 x 8192 and b8 x 2048, and the ragged batch (varlen only). The dtypes'
inputs hold the same values. Each varlen output is checked against the dense call's.
"""
import argparse
import sys

import torch

import flashcore.torch as fct

# decode_graph_timing puts bench/ on sys.path, where compare_serving_grid lives.
from decode_graph_timing import capture, time_graphs, write_run
from compare_serving_grid import (EQUAL_LENGTH_BATCHES, HEAD_DIM, HEADS_KV, HEADS_Q, VARLEN,
                                  VARLEN_LENGTHS, ServingConfig)

REPLAYS = 3  # timed replays of a graph per round
ROUNDS = 8  # at least; rounded up to whole balanced squares
DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}
# Same sums in another tile order: a few roundings of the output's largest values.
MAX_DIFF_OF_LARGEST = 2e-2


def causal_flops(lengths):
    """The serving grid's FLOP count of a causal prefill of these sequences."""
    return ServingConfig("varlen", VARLEN, tuple(lengths), tuple(lengths)).flops()


def varlen_call(q, k, v, lengths):
    """q/k/v [b, s, h, d] of equal lengths, or packed [total, h, d] with `lengths`."""
    if q.dim() == 4:
        q, k, v = (t.reshape(-1, *t.shape[2:]) for t in (q, k, v))
    cu = torch.tensor([0, *torch.tensor(lengths).cumsum(0).tolist()], dtype=torch.int32,
                      device="cuda")
    longest = max(lengths)
    return lambda: fct.attention_varlen(q, k, v, cu, cu, longest, longest, causal=True)


def calls_of(lengths, equal, gen):
    """Every call of a shape: {name: (call, dense reference name or None)}."""
    total = sum(lengths)
    q = torch.randn(total, HEADS_Q, HEAD_DIM, device="cuda", generator=gen)
    k = torch.randn(total, HEADS_KV, HEAD_DIM, device="cuda", generator=gen)
    v = torch.randn(total, HEADS_KV, HEAD_DIM, device="cuda", generator=gen)
    calls = {}
    for name, dtype in DTYPES.items():
        qd, kd, vd = (t.to(dtype) for t in (q, k, v))
        if equal:
            batch = len(lengths)
            qb, kb, vb = (t.reshape(batch, lengths[0], *t.shape[1:]) for t in (qd, kd, vd))
            calls[f"dense_{name}"] = (lambda qb=qb, kb=kb, vb=vb:
                                      fct.attention(qb, kb, vb, causal=True), None)
            calls[f"varlen_{name}"] = (varlen_call(qb, kb, vb, lengths), f"dense_{name}")
        else:
            calls[f"varlen_{name}"] = (varlen_call(qd, kd, vd, lengths), None)
    return calls


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--json")
    args = parser.parse_args()
    gen = torch.Generator(device="cuda").manual_seed(0)
    records, failed = [], False
    shapes = [((seqlen,) * batch, True) for batch, seqlen in EQUAL_LENGTH_BATCHES]
    shapes.append((VARLEN_LENGTHS, False))
    for lengths, equal in shapes:
        calls = calls_of(lengths, equal, gen)
        errors = {}
        for name, (call, reference) in calls.items():
            if reference is not None:
                out, ref = call().float(), calls[reference][0]().float()
                errors[name] = (out.reshape(ref.shape) - ref).abs().max().item()
                failed |= errors[name] > MAX_DIFF_OF_LARGEST * ref.abs().max().item()
        graphs = {name: capture(call) for name, (call, _) in calls.items()}
        times, median = time_graphs(graphs, ROUNDS, REPLAYS)
        flops = causal_flops(lengths)
        label = f"b{len(lengths)}x{lengths[0]}" if equal else "ragged"
        records.append({"shape": label, "lengths": list(lengths), "us_per_call": median,
                        "samples": times, "max_abs_diff_vs_dense": errors, "flops": flops})
        cells = "  ".join(f"{name} {median[name]:8.1f} us {flops / median[name] / 1e6:4.0f} "
                          f"TFLOPS" for name in calls)
        print(f"{label:<10} {cells}", flush=True)
        ratios = [f"{dtype} varlen / dense speed "
                  f"{median[f'dense_{dtype}'] / median[f'varlen_{dtype}']:.3f}"
                  for dtype in DTYPES if f"dense_{dtype}" in median]
        ratios.append("fp16 / bf16 varlen speed "
                      f"{median['varlen_bf16'] / median['varlen_fp16']:.3f}")
        print("  " + "  ".join(ratios), flush=True)
    if args.json:
        write_run(args.json, records, REPLAYS, ROUNDS)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
