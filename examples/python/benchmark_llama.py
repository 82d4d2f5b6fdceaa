"""Prefill and decode time of a Llama-architecture model with FlashCore vs SDPA attention.

Builds the model from a config with random weights (no download) directly on the GPU, then for
each attention implementation (one model, switched with set_attn_implementation, so the weights
are identical) times, with CUDA events after warm-up:
  prefill  one forward over the prompt into a fresh DynamicCache (median of --iters)
  decode   --decode-steps greedy steps of one token on that cache (median per step)
and checks that FlashCore's prefill logits and greedy tokens agree with SDPA's.

    python examples/python/benchmark_llama.py --out llama.json          # issue 5's size
    python examples/python/benchmark_llama.py --layers 2 --prompt 512   # quick look
"""

import argparse
import json
import platform
import statistics
import subprocess
import sys
import time

import torch
import transformers

import flashcore
import flashcore.transformers

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--layers", type=int, default=8)
    p.add_argument("--hidden", type=int, default=4096)
    p.add_argument("--heads", type=int, default=32)
    p.add_argument("--kv-heads", type=int, default=8)
    p.add_argument("--head-dim", type=int, default=None, help="default hidden / heads")
    p.add_argument("--intermediate", type=int, default=14336)
    p.add_argument("--vocab", type=int, default=32000)
    p.add_argument("--prompt", type=int, default=4096, help="prompt length (tokens)")
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--decode-steps", type=int, default=32)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--iters", type=int, default=10, help="timed prefill runs")
    p.add_argument("--dtype", choices=sorted(DTYPES), default="bf16")
    p.add_argument("--device", default="cuda",
                   help="cuda (the benchmark) or cpu (a smoke test of the script, fp32)")
    p.add_argument("--out", help="write the results as JSON here")
    return p.parse_args(argv)


def build_model(args):
    cfg = transformers.LlamaConfig(
        vocab_size=args.vocab, hidden_size=args.hidden, intermediate_size=args.intermediate,
        num_hidden_layers=args.layers, num_attention_heads=args.heads,
        num_key_value_heads=args.kv_heads, head_dim=args.head_dim or args.hidden // args.heads,
        max_position_embeddings=args.prompt + 1024)
    torch.manual_seed(0)
    with torch.device(args.device):  # random init on the GPU: seconds, not minutes on the CPU
        model = transformers.AutoModelForCausalLM.from_config(cfg, attn_implementation="sdpa")
    return model.to(DTYPES[args.dtype]).eval()


def time_ms(fn, device):
    if device != "cuda":
        start = time.perf_counter()
        result = fn()
        return (time.perf_counter() - start) * 1e3, result
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    result = fn()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end), result


def prefill(model, prompt):
    cache = transformers.DynamicCache(config=model.config)
    # logits_to_keep=1: the 4k x vocab logits would only add LM-head time to the prefill figure.
    out = model(prompt, past_key_values=cache, use_cache=True, logits_to_keep=1)
    return out.logits[:, -1].float(), out.past_key_values


def run_implementation(model, name, prompt, args):
    model.set_attn_implementation(name)
    for _ in range(args.warmup):
        prefill(model, prompt)
    prefill_ms = []
    for _ in range(args.iters):
        ms, (logits, cache) = time_ms(lambda: prefill(model, prompt), args.device)
        prefill_ms.append(ms)
    token = logits.argmax(dim=-1, keepdim=True)
    tokens, step_ms = [token], []
    for _ in range(args.decode_steps):
        ms, out = time_ms(
            lambda: model(token, past_key_values=cache, use_cache=True), args.device)
        step_ms.append(ms)
        cache = out.past_key_values
        token = out.logits[:, -1].argmax(dim=-1, keepdim=True)
        tokens.append(token)
    timed_steps = step_ms[args.warmup:] or step_ms  # the first steps warm up the decode shapes
    return {
        "prefill_ms": statistics.median(prefill_ms),
        "decode_ms_per_step": statistics.median(timed_steps),
        "prefill_logits": logits,
        "tokens": torch.cat(tokens, dim=1),
    }


def git_commit():
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                              text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def main(argv=None):
    args = parse_args(argv if argv is not None else sys.argv[1:])
    if args.device == "cuda" and not torch.cuda.is_available():
        sys.exit("benchmark_llama.py needs a CUDA GPU (or --device cpu for a smoke test)")
    name = flashcore.transformers.register()
    model = build_model(args)
    prompt = torch.randint(0, args.vocab, (args.batch, args.prompt),
                           generator=torch.Generator().manual_seed(1)).to(args.device)
    with torch.inference_mode():
        results = {impl: run_implementation(model, impl, prompt, args)
                   for impl in ("sdpa", name)}
    ours, sdpa = results[name], results["sdpa"]
    logit_diff = (ours["prefill_logits"] - sdpa["prefill_logits"]).abs().max().item()
    agreement = (ours["tokens"] == sdpa["tokens"]).float().mean().item()
    # Position of the first differing greedy token: a near-tie flip changes everything after it.
    differs = (ours["tokens"] != sdpa["tokens"]).any(dim=0).nonzero()
    first_flip = int(differs[0]) if differs.numel() else None

    report = {
        "device": torch.cuda.get_device_name() if args.device == "cuda" else "cpu",
        "torch": torch.__version__, "transformers": transformers.__version__,
        "flashcore": flashcore.__version__, "commit": git_commit(),
        "python": platform.python_version(), "config": vars(args),
        "implementations": {
            impl: {"prefill_ms": r["prefill_ms"], "decode_ms_per_step": r["decode_ms_per_step"]}
            for impl, r in (("flashcore", ours), ("sdpa", sdpa))},
        "prefill_speedup_vs_sdpa": sdpa["prefill_ms"] / ours["prefill_ms"],
        "decode_speedup_vs_sdpa": sdpa["decode_ms_per_step"] / ours["decode_ms_per_step"],
        "prefill_logits_max_abs_diff_vs_sdpa": logit_diff,
        "greedy_token_agreement": agreement,
        "first_greedy_difference_at_step": first_flip,
    }
    print(f"{report['device']}  Llama {args.layers} layers, hidden {args.hidden}, "
          f"{args.heads}/{args.kv_heads} heads, {args.dtype}, batch {args.batch}, "
          f"prompt {args.prompt}, {args.decode_steps} decode steps")
    print("| attention | prefill ms | decode ms/step |")
    print("|---|---|---|")
    for impl, r in report["implementations"].items():
        print(f"| {impl} | {r['prefill_ms']:.2f} | {r['decode_ms_per_step']:.3f} |")
    print(f"prefill speed-up {report['prefill_speedup_vs_sdpa']:.3f}x, decode "
          f"{report['decode_speedup_vs_sdpa']:.3f}x; prefill logits max |diff| {logit_diff:.4g}; "
          f"greedy agreement {agreement:.3f} (first difference at step {first_flip})")
    if args.out:
        with open(args.out, "w") as f:
            json.dump(report, f, indent=2)
        print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
