"""One paged-KV decode call, for kernel timing under Nsight Compute: FlashCore (torch) or
FlashAttention-3 through JAX (flash_attn3_jax, which must run in a process of its own).

JAX adds tens of microseconds of dispatch to every call, so wall-clock timing of one call would
measure JAX; tools/device/serving.sh runs this script under `ncu` and reads each kernel's
gpu__time_duration instead, for both implementations, with the same cache control. ncu runs
each kernel alone, though, where a server's decode steps follow one another: --wall-calls N
times N calls issued back to back (wall clock, after the --calls ones; the median of
--wall-rounds rounds), which the GPU bounds when a call's dispatch is shorter than its kernels
(batch 64 x 4096 keys: ~360 us of kernel against ~40 us of JAX dispatch). That time includes
what lies between two kernels: the launch gap, and for FlashCore the next call's start beside
the previous one's last tiles (programmatic dependent launch).

    python3 bench/paged_decode_anchor.py --impl fa3-jax --batch 64 --keys 4096 --page-size 16
    python3 bench/paged_decode_anchor.py --impl flashcore --batch 64 --keys 4096 --page-size 16

The pages of every sequence are a random permutation of the pool (as a server's free list
leaves them), 32 query heads over 8 KV heads, head_dim 128, bf16 (or --dtype fp16), one query
token.
"""

import argparse
import json
import statistics
import sys
import time

import numpy as np


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--impl", choices=("flashcore", "fa3-jax"), required=True)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--keys", type=int, default=4096, help="cached keys per sequence")
    parser.add_argument("--page-size", type=int, default=16, help="0: a contiguous cache")
    parser.add_argument("--heads-q", type=int, default=32)
    parser.add_argument("--heads-kv", type=int, default=8)
    parser.add_argument("--head-dim", type=int, default=128)
    parser.add_argument("--dtype", choices=("bf16", "fp16"), default="bf16")
    parser.add_argument("--splits", type=int, default=1, help="FA3's num_splits")
    parser.add_argument("--calls", type=int, default=5, help="calls after one warm-up call")
    parser.add_argument("--wall-calls", type=int, default=0,
                        help="then time this many calls back to back, wall clock (0: none)")
    parser.add_argument("--wall-rounds", type=int, default=3)
    args = parser.parse_args(argv)
    if args.calls < 0 or args.wall_calls < 0 or args.wall_rounds < 1:
        parser.error(f"--calls and --wall-calls must be >= 0 and --wall-rounds >= 1, got "
                     f"{args.calls}, {args.wall_calls} and {args.wall_rounds}")
    return args


def wall_us_per_call(call, sync, calls, rounds):
    """Median over rounds of the wall time of `calls` back-to-back calls, per call (us)."""
    times = []
    for _ in range(rounds):
        sync(call())
        start = time.perf_counter()
        for _ in range(calls):
            out = call()
        sync(out)
        times.append((time.perf_counter() - start) / calls * 1e6)
    return statistics.median(times)


def make_inputs(args):
    """float32 arrays: q [b, 1, hq, d], caches, page table [b, pages] (None when contiguous)."""
    rng = np.random.default_rng(0)
    b, d = args.batch, args.head_dim
    q = rng.standard_normal((b, 1, args.heads_q, d), dtype=np.float32)
    if args.page_size == 0:
        shape = (b, args.keys, args.heads_kv, d)
        return q, rng.standard_normal(shape, dtype=np.float32), \
            rng.standard_normal(shape, dtype=np.float32), None
    pages_per_seq = -(-args.keys // args.page_size)
    num_pages = b * pages_per_seq
    shape = (num_pages, args.page_size, args.heads_kv, d)
    page_table = rng.permutation(num_pages).astype(np.int32).reshape(b, pages_per_seq)
    return q, rng.standard_normal(shape, dtype=np.float32), \
        rng.standard_normal(shape, dtype=np.float32), page_table


def run_fa3_jax(args, q, k, v, page_table):
    import jax
    import jax.numpy as jnp
    from flash_attn3_jax import flash_mha_with_kvcache

    dtype = jnp.bfloat16 if args.dtype == "bf16" else jnp.float16
    to = lambda a: jnp.asarray(a, dtype=dtype)  # noqa: E731
    seqlens = jnp.full((args.batch,), args.keys, dtype=jnp.int32)
    table = None if page_table is None else jnp.asarray(page_table)
    call = jax.jit(lambda q, k, v, s, t: flash_mha_with_kvcache(
        q, k, v, cache_seqlens=s, page_table=t, num_splits=args.splits))
    qj, kj, vj = to(q), to(k), to(v)
    for _ in range(1 + args.calls):
        out = call(qj, kj, vj, seqlens, table)
    out.block_until_ready()
    wall = None
    if args.wall_calls:
        wall = wall_us_per_call(lambda: call(qj, kj, vj, seqlens, table),
                                lambda o: o.block_until_ready(), args.wall_calls,
                                args.wall_rounds)
    return np.asarray(out.astype(jnp.float32)), wall


def run_flashcore(args, q, k, v, page_table):
    import torch

    import flashcore

    dtype = torch.bfloat16 if args.dtype == "bf16" else torch.float16
    to = lambda a: torch.from_numpy(a).to("cuda", dtype)  # noqa: E731
    seqlens = torch.full((args.batch,), args.keys, dtype=torch.int32, device="cuda")
    table = None if page_table is None else torch.from_numpy(page_table).cuda()
    qt, kt, vt = to(q), to(k), to(v)
    call = lambda: flashcore.attention_with_kvcache(qt, kt, vt, seqlens,  # noqa: E731
                                                    page_table=table)
    for _ in range(1 + args.calls):
        out = call()
    torch.cuda.synchronize()
    wall = None
    if args.wall_calls:
        wall = wall_us_per_call(call, lambda _: torch.cuda.synchronize(), args.wall_calls,
                                args.wall_rounds)
    return out.float().cpu().numpy(), wall


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    q, k, v, page_table = make_inputs(args)
    run = run_fa3_jax if args.impl == "fa3-jax" else run_flashcore
    out, wall = run(args, q, k, v, page_table)
    print(json.dumps({"impl": args.impl, "batch": args.batch, "keys": args.keys,
                      "page_size": args.page_size, "dtype": args.dtype,
                      "finite": bool(np.isfinite(out).all()),
                      "out_abs_mean": float(np.abs(out).mean()),
                      "wall_us_per_call": wall}))


if __name__ == "__main__":
    main()
