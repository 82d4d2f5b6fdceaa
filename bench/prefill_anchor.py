"""One dense prefill shape, called a few times, for kernel timing under Nsight Compute: FlashCore
(torch), FlashAttention-3 through JAX (flash_attn3_jax: the FA3 build with fp16, which must run
in a process of its own) or the fa3-fwd wheel that compare.py times (bf16 only: it calibrates the
JAX build against the wheel).

The fa3-fwd wheel that compare.py times has no fp16 forward, so FlashCore's fp16 is measured
against FA3's here. JAX adds tens of microseconds of dispatch to every call, so wall-clock timing
would measure JAX; tools/device/prefill_jax.sh runs this script under `ncu` and reads each
kernel's gpu__time_duration instead, for both implementations, under the same clock control.

    python3 bench/prefill_anchor.py --impl fa3-jax --dtype fp16 --seqlen 4096 --head-dim 128
    python3 bench/prefill_anchor.py --impl flashcore --dtype fp16 --seqlen 4096 --head-dim 128

The standard grid's shapes by default: batch 16384 / seqlen, heads 2048 / head_dim, q, k and v
std-1 normals; --kv-heads makes k and v grouped-query (Llama-3-8B: --heads 32 --kv-heads 8).
"""

import argparse
import json
import sys

import numpy as np

from compare_grids import STANDARD_HIDDEN, STANDARD_TOKENS


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--impl", choices=("flashcore", "fa3-jax", "fa3"), required=True)
    parser.add_argument("--dtype", choices=("fp16", "bf16"), default="fp16")
    parser.add_argument("--seqlen", type=int, default=4096)
    parser.add_argument("--head-dim", type=int, default=128)
    parser.add_argument("--batch", type=int, help="default: 16384 / seqlen")
    parser.add_argument("--heads", type=int, help="query heads; default: 2048 / head_dim")
    parser.add_argument("--kv-heads", type=int, help="key / value heads; default: --heads")
    parser.add_argument("--causal", action="store_true")
    parser.add_argument("--calls", type=int, default=5, help="calls after one warm-up call")
    args = parser.parse_args(argv)
    for name in ("seqlen", "head_dim", "calls", "batch", "heads", "kv_heads"):
        value = getattr(args, name)
        if value is not None and value <= 0:
            parser.error(f"--{name.replace('_', '-')} must be positive, got {value}")
    args.batch = args.batch or max(1, STANDARD_TOKENS // args.seqlen)
    args.heads = args.heads or max(1, STANDARD_HIDDEN // args.head_dim)
    args.kv_heads = args.kv_heads or args.heads
    if args.heads % args.kv_heads:
        parser.error(f"--heads {args.heads} must be a multiple of --kv-heads {args.kv_heads}")
    return args


def make_inputs(args):
    """float32 q [batch, seqlen, heads, head_dim], k and v [batch, seqlen, kv_heads, head_dim]."""
    rng = np.random.default_rng(0)
    q_shape = (args.batch, args.seqlen, args.heads, args.head_dim)
    kv_shape = (args.batch, args.seqlen, args.kv_heads, args.head_dim)
    return tuple(rng.standard_normal(shape, dtype=np.float32)
                 for shape in (q_shape, kv_shape, kv_shape))


def run_fa3_jax(args, q, k, v):
    import jax
    import jax.numpy as jnp
    from flash_attn3_jax import flash_mha

    dtype = jnp.float16 if args.dtype == "fp16" else jnp.bfloat16
    call = jax.jit(lambda q, k, v: flash_mha(q, k, v, is_causal=args.causal))
    qj, kj, vj = (jnp.asarray(a, dtype=dtype) for a in (q, k, v))
    for _ in range(1 + args.calls):
        out = call(qj, kj, vj)
    out.block_until_ready()
    return np.asarray(out.astype(jnp.float32))


def run_fa3_wheel(args, q, k, v):
    if args.dtype != "bf16":
        raise SystemExit("prefill_anchor.py: the fa3-fwd wheel has no fp16 forward (bf16 only)")
    import torch
    from fa3_fwd_interface import flash_attn_func

    qt, kt, vt = (torch.from_numpy(a).to("cuda", torch.bfloat16) for a in (q, k, v))
    for _ in range(1 + args.calls):
        out = flash_attn_func(qt, kt, vt, causal=args.causal)
    torch.cuda.synchronize()
    return out.float().cpu().numpy()


def run_flashcore(args, q, k, v):
    import torch

    import flashcore

    dtype = torch.float16 if args.dtype == "fp16" else torch.bfloat16
    qt, kt, vt = (torch.from_numpy(a).to("cuda", dtype) for a in (q, k, v))
    for _ in range(1 + args.calls):
        out = flashcore.attention(qt, kt, vt, causal=args.causal)
    torch.cuda.synchronize()
    return out.float().cpu().numpy()


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    q, k, v = make_inputs(args)
    run = {"fa3-jax": run_fa3_jax, "fa3": run_fa3_wheel, "flashcore": run_flashcore}[args.impl]
    out = run(args, q, k, v)
    print(json.dumps({"impl": args.impl, "dtype": args.dtype, "batch": args.batch,
                      "seqlen": args.seqlen, "heads": args.heads, "kv_heads": args.kv_heads,
                      "head_dim": args.head_dim,
                      "causal": args.causal, "finite": bool(np.isfinite(out).all()),
                      "out_abs_mean": float(np.abs(out).mean())}))


if __name__ == "__main__":
    main()
