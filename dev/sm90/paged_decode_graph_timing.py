"""GPU time per decode call over a KV cache in each of its layouts, replayed as CUDA graphs: the
dense call (flashcore.torch.attention), a contiguous cache and paged caches of every page size
issue 25 asks to be fast, 256 down to 1 (attention_with_kvcache). Every layout holds the same
keys and values, so the layouts' times compare the K/V addressing alone; issue 25 asks paged
decode at 95% of the contiguous cache's rate. The pages of every sequence are a random
permutation of the pool, as a server's free list leaves them.

    PYTHONPATH=<build>/python python3 dev/sm90/paged_decode_graph_timing.py [--json out.json]
        [--page-sizes 256,128,64,32,16,1]

Shapes: seqlen_q 1, GQA 32 / 8 heads, d128, bf16, at batch 64 x 4096 keys, 16 x 8192 and
1 x 32768 (split-KV). Rounds in balanced Latin-square orders (bench/compare_runner.py); the
figure is the median over rounds. Each layout's output is checked against the dense call's.
"""
import argparse
import sys

import torch

import flashcore.torch as fct

from decode_graph_timing import capture, time_graphs, write_run

REPLAYS = 5  # timed replays of a graph per round
ROUNDS = 8  # at least; rounded up to whole balanced squares
SHAPES = [(64, 4096), (16, 8192), (1, 32768)]  # (batch, keys)
HEADS_Q, HEADS_KV, HEAD_DIM = 32, 8, 128
# A decode reads pages of 32 rows and more in TMA boxes and gathers smaller ones with its
# producer warps (kSm90DecodeMinTmaBoxRows, sequence_layout.h).
PAGE_SIZES = (256, 128, 64, 32, 16, 1)
# Same keys, different addressing: the layouts may differ by the order of their sums only (the
# split plans differ), a few bf16 roundings of the output's largest values.
MAX_DIFF_OF_LARGEST = 2e-2


def paged(cache, page_size, gen):
    """cache [b, s, h, d] as pages [b * s / page_size, page_size, h, d] in a shuffled order,
    and the page table that finds them."""
    b, s, h, d = cache.shape
    pages_per_seq = s // page_size
    order = torch.randperm(b * pages_per_seq, generator=gen, device="cpu").cuda()
    pages = torch.empty(b * pages_per_seq, page_size, h, d, device="cuda", dtype=cache.dtype)
    pages[order] = cache.reshape(b * pages_per_seq, page_size, h, d)
    return pages, order.to(torch.int32).reshape(b, pages_per_seq)


def layouts(q, k, v, gen, page_sizes):
    batch, keys = k.shape[0], k.shape[1]
    seqlens = torch.full((batch,), keys, device="cuda", dtype=torch.int32)
    calls = {"dense": lambda: fct.attention(q, k, v),
             "contiguous": lambda: fct.attention_with_kvcache(q, k, v, seqlens)}
    for page_size in page_sizes:
        k_pages, table = paged(k, page_size, gen)
        v_pages = torch.empty_like(k_pages)
        v_pages[table.reshape(-1).long()] = v.reshape(v_pages.shape)

        def call(k_pages=k_pages, v_pages=v_pages, table=table):
            return fct.attention_with_kvcache(q, k_pages, v_pages, seqlens, page_table=table)
        calls[f"page{page_size}"] = call
    return calls


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--json")
    parser.add_argument("--page-sizes", default=",".join(map(str, PAGE_SIZES)),
                        help="comma list of page sizes, each dividing every shape's keys")
    args = parser.parse_args()
    try:
        page_sizes = [int(size) for size in args.page_sizes.split(",") if size]
    except ValueError:
        page_sizes = []
    if not page_sizes or any(size < 1 or keys % size for size in page_sizes for _, keys in SHAPES):
        parser.error(f"--page-sizes: each must divide {[keys for _, keys in SHAPES]}, got "
                     f"{args.page_sizes!r}")
    gen = torch.Generator(device="cuda").manual_seed(0)
    cpu_gen = torch.Generator().manual_seed(0)
    records, failed = [], False
    for batch, keys in SHAPES:
        def rand(*shape):
            return torch.randn(*shape, device="cuda", dtype=torch.bfloat16, generator=gen)
        q = rand(batch, 1, HEADS_Q, HEAD_DIM)
        k, v = rand(batch, keys, HEADS_KV, HEAD_DIM), rand(batch, keys, HEADS_KV, HEAD_DIM)
        calls = layouts(q, k, v, cpu_gen, page_sizes)
        reference = calls["dense"]().float()
        errors = {name: (call().float() - reference).abs().max().item()
                  for name, call in calls.items()}
        largest = reference.abs().max().item()
        failed |= any(error > MAX_DIFF_OF_LARGEST * largest for error in errors.values())
        graphs = {name: capture(call) for name, call in calls.items()}
        times, median = time_graphs(graphs, ROUNDS, REPLAYS)
        kv_bytes = 2 * batch * keys * HEADS_KV * HEAD_DIM * k.element_size()
        records.append({"batch": batch, "seqlen_k": keys, "heads_q": HEADS_Q,
                        "heads_kv": HEADS_KV, "pattern": "b2b", "us_per_call": median,
                        "samples": times, "max_abs_diff_vs_dense": errors,
                        "kv_bytes": kv_bytes})
        cells = "  ".join(f"{name} {median[name]:7.2f} us {kv_bytes / median[name] / 1e6:5.2f} "
                          f"TB/s" for name in calls)
        print(f"b{batch:<3} sk{keys:<6} {cells}", flush=True)
        print("  / contiguous: " + "  ".join(
            f"{name} {median['contiguous'] / median[name]:.3f}" for name in calls), flush=True)
        print(f"  max |diff| vs dense (largest |out| {largest:.2e}): " + "  ".join(
            f"{name} {error:.1e}" for name, error in errors.items()), flush=True)
    if args.json:
        write_run(args.json, records, REPLAYS, ROUNDS)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
