"""One paged-KV decode call, for kernel timing under Nsight Compute: FlashCore (torch) or
FlashAttention-3 through JAX (flash_attn3_jax, which must run in a process of its own).

JAX adds tens of microseconds of dispatch to every call, so wall-clock timing would measure
JAX; tools/device/serving.sh runs this script under `ncu` and reads each kernel's
gpu__time_duration instead, for both implementations, with the same cache control.

    python3 bench/paged_decode_anchor.py --impl fa3-jax --batch 64 --keys 4096 --page-size 16
    python3 bench/paged_decode_anchor.py --impl flashcore --batch 64 --keys 4096 --page-size 16

The pages of every sequence are a random permutation of the pool (as a server's free list
leaves them), 32 query heads over 8 KV heads, head_dim 128, bf16, one query token.
"""

import argparse
import json
import sys

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
    parser.add_argument("--splits", type=int, default=1, help="FA3's num_splits")
    parser.add_argument("--calls", type=int, default=5, help="calls after one warm-up call")
    return parser.parse_args(argv)


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

    to = lambda a: jnp.asarray(a, dtype=jnp.bfloat16)  # noqa: E731
    seqlens = jnp.full((args.batch,), args.keys, dtype=jnp.int32)
    table = None if page_table is None else jnp.asarray(page_table)
    call = jax.jit(lambda q, k, v, s, t: flash_mha_with_kvcache(
        q, k, v, cache_seqlens=s, page_table=t, num_splits=args.splits))
    qj, kj, vj = to(q), to(k), to(v)
    for _ in range(1 + args.calls):
        out = call(qj, kj, vj, seqlens, table)
    out.block_until_ready()
    return np.asarray(out.astype(jnp.float32))


def run_flashcore(args, q, k, v, page_table):
    import torch

    import flashcore

    to = lambda a: torch.from_numpy(a).to("cuda", torch.bfloat16)  # noqa: E731
    seqlens = torch.full((args.batch,), args.keys, dtype=torch.int32, device="cuda")
    table = None if page_table is None else torch.from_numpy(page_table).cuda()
    qt, kt, vt = to(q), to(k), to(v)
    for _ in range(1 + args.calls):
        out = flashcore.attention_with_kvcache(qt, kt, vt, seqlens, page_table=table)
    torch.cuda.synchronize()
    return out.float().cpu().numpy()


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    q, k, v, page_table = make_inputs(args)
    run = run_fa3_jax if args.impl == "fa3-jax" else run_flashcore
    out = run(args, q, k, v, page_table)
    print(json.dumps({"impl": args.impl, "batch": args.batch, "keys": args.keys,
                      "page_size": args.page_size, "finite": bool(np.isfinite(out).all()),
                      "out_abs_mean": float(np.abs(out).mean())}))


if __name__ == "__main__":
    main()
