"""Prefill and decode time and accuracy of a Llama-architecture model: FlashCore vs SDPA vs eager.

Builds the model from a config with random weights (no download) directly on the device; one
bf16/fp16 model, switched with set_attn_implementation, so every implementation has identical
weights, plus a float32 reference (the same, dtype-rounded weights upcast, "eager" attention).
Phases, each in one process on the same inputs:
  prefill       one forward over the prompt (logits_to_keep=1) into a fresh DynamicCache; the
                implementations are interleaved, each iteration in the next order of a balanced
                Latin square (bench/compare_runner.py); median of --iters after --warmup.
                Accuracy: last-token logits vs the fp32 reference.
  teacher-forced decode
                each implementation prefills its own cache, then all are fed the same tokens (SDPA's
                greedy tokens) for --decode-steps steps; per step the next such order, and
                torch.cuda.synchronize() precedes each start event, so host work of the previous
                step cannot leak in. Reports the CUDA-event median, the host (Python) time of the
                call, argmax agreement with SDPA and with fp32 per step, max logit errors.
  free-running greedy decode
                each implementation generates its own greedy tokens, one implementation after the
                other (FlashCore first), timed as before; agreement with SDPA's tokens and the
                first differing step (after a near-tie flip every later position differs).
  --profile     torch.profiler over 3 further decode steps per implementation: top CUDA kernels
                and CPU ops, GPU-busy fraction, and a one-line verdict on what dominates a step.
  --sdpa-backends flash,cudnn,...
                extra "sdpa[<backend>]" rows with torch's SDPA pinned to one backend
                (sdpa_kernel), so a gap to plain "sdpa" can be traced to torch's backend choice.

    python examples/python/benchmark_llama.py --profile --sdpa-backends flash,cudnn,efficient,math \
        --out llama.json                                                   # issue 5's size
    python examples/python/benchmark_llama.py --layers 2 --prompt 512      # quick look
"""

import argparse
import contextlib
import copy
import json
import pathlib
import platform
import statistics
import subprocess
import sys
import time
import warnings

import torch
import transformers
from torch.nn.attention import SDPBackend, sdpa_kernel

import flashcore
import flashcore.transformers
from benchmark_llama_report import decode_accuracy, prefill_accuracy, print_report
from benchmark_llama_profile import dominant, print_summary, profile_steps

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "bench"))
from compare_runner import balanced_round  # noqa: E402

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
SDPA_BACKENDS = {"cudnn": SDPBackend.CUDNN_ATTENTION, "flash": SDPBackend.FLASH_ATTENTION,
                 "efficient": SDPBackend.EFFICIENT_ATTENTION, "math": SDPBackend.MATH}
PROFILE_STEPS = 3  # a few steps: enough for per-step averages, small enough to read the trace


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
    p.add_argument("--ref-steps", type=int, default=None,
                   help="teacher-forced steps also run on the fp32 reference (default: all)")
    p.add_argument("--sdpa-backends", default="",
                   help="comma list of extra SDPA rows pinned to one torch backend with "
                        f"sdpa_kernel: {', '.join(SDPA_BACKENDS)}")
    p.add_argument("--no-eager", action="store_true", help="leave out the eager bf16 row")
    p.add_argument("--profile", action="store_true",
                   help=f"torch.profiler over {PROFILE_STEPS} decode steps per implementation")
    p.add_argument("--out", help="write the results as JSON here")
    args = p.parse_args(argv)
    if args.decode_steps < 1:
        p.error(f"--decode-steps must be at least 1, got {args.decode_steps}")
    return args


class Impl:
    """One attention row: a transformers attn_implementation, optionally with SDPA pinned to one
    torch backend."""

    def __init__(self, label, attn, backend=None):
        self.label, self.attn, self.backend = label, attn, backend

    def activate(self, model):
        """Switches the model to this row; call it before a timed region (it walks the model)."""
        if model.config._attn_implementation != self.attn:
            model.set_attn_implementation(self.attn)

    def __call__(self, model, *args, **kwargs):
        self.activate(model)  # a no-op when the caller activated the row before timing
        ctx = sdpa_kernel([self.backend]) if self.backend is not None else contextlib.nullcontext()
        with ctx:
            return model(*args, **kwargs)


REFERENCE = Impl("fp32", "eager")


def build_models(args):
    """(model in args.dtype, fp32 eager reference with the same dtype-rounded weights)."""
    cfg = transformers.LlamaConfig(
        vocab_size=args.vocab, hidden_size=args.hidden, intermediate_size=args.intermediate,
        num_hidden_layers=args.layers, num_attention_heads=args.heads,
        num_key_value_heads=args.kv_heads, head_dim=args.head_dim or args.hidden // args.heads,
        max_position_embeddings=args.prompt + 1024)
    dtype = DTYPES[args.dtype]
    torch.manual_seed(0)
    with torch.device(args.device):  # random init on the GPU: seconds, not minutes on the CPU
        ref = transformers.AutoModelForCausalLM.from_config(copy.deepcopy(cfg),
                                                            attn_implementation="eager")
        model = transformers.AutoModelForCausalLM.from_config(copy.deepcopy(cfg),
                                                              attn_implementation="sdpa")
    ref = ref.float().eval()
    with torch.no_grad():
        for p in ref.parameters():  # the reference sees exactly the weights the model sees
            p.copy_(p.to(dtype))
    model.load_state_dict(ref.state_dict())
    model = model.to(dtype).eval()
    # Rotary inv_freq stays float32, as from_pretrained(dtype=...) leaves it; .to(dtype) rounded it.
    for mod, ref_mod in zip(model.modules(), ref.modules()):
        for name, buf in ref_mod.named_buffers(recurse=False):
            setattr(mod, name, buf.clone())
    return model, ref


def sync(device):
    if device == "cuda":
        torch.cuda.synchronize()


def timed(fn, device):
    """(CUDA-event ms with the device idle at the start event, host ms of the call, result)."""
    sync(device)
    if device != "cuda":
        start = time.perf_counter()
        result = fn()
        ms = (time.perf_counter() - start) * 1e3
        return ms, ms, result
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    host_start = time.perf_counter()
    result = fn()
    host_ms = (time.perf_counter() - host_start) * 1e3
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end), host_ms, result


def prefill(model, impl, prompt):
    cache = transformers.DynamicCache(config=model.config)
    # logits_to_keep=1: the 4k x vocab logits would only add LM-head time to the prefill figure.
    out = impl(model, prompt, past_key_values=cache, use_cache=True, logits_to_keep=1)
    return out.logits[:, -1].float(), out.past_key_values


def decode_step(model, impl, token, cache):
    out = impl(model, token, past_key_values=cache, use_cache=True, logits_to_keep=1)
    return out.logits[:, -1].float(), out.past_key_values


def time_prefill(model, impls, prompt, args):
    times = {i.label: [] for i in impls}
    logits = {}
    for it in range(args.warmup + args.iters):
        for impl in balanced_round(impls, it):
            impl.activate(model)
            ms, _, (logits[impl.label], _) = timed(lambda: prefill(model, impl, prompt),
                                                   args.device)
            if it >= args.warmup:
                times[impl.label].append(ms)
    return {label: statistics.median(t) for label, t in times.items()}, logits


def teacher_forced(model, ref, impls, prompt, args, profiles):
    """Every implementation (and the fp32 reference for the first ref_steps) decodes SDPA's greedy
    tokens with its own cache. Returns ({label: [b, 1 + steps, vocab] logits}, reference logits
    [b, 1 + ref_steps, vocab] or None, {label: medians}, tokens); index 0 is the prefill."""
    teacher = next(i for i in impls if i.label == "sdpa")
    caches, step_logits, event_ms, host_ms = {}, {}, {}, {}
    for impl in impls:
        logits0, caches[impl.label] = prefill(model, impl, prompt)
        step_logits[impl.label], event_ms[impl.label], host_ms[impl.label] = [logits0], [], []
    ref_steps = args.decode_steps if args.ref_steps is None else min(args.ref_steps,
                                                                     args.decode_steps)
    ref_cache, ref_step_logits = None, []
    if ref is not None:
        ref_logits0, ref_cache = prefill(ref, REFERENCE, prompt)
        ref_step_logits.append(ref_logits0)
    token = step_logits["sdpa"][0].argmax(dim=-1, keepdim=True)
    tokens = [token]
    for step in range(args.decode_steps):
        for impl in balanced_round(impls, step):
            impl.activate(model)
            ms, host, (lg, caches[impl.label]) = timed(
                lambda: decode_step(model, impl, token, caches[impl.label]), args.device)
            step_logits[impl.label].append(lg)
            event_ms[impl.label].append(ms)
            host_ms[impl.label].append(host)
        if ref_cache is not None and step < ref_steps:
            lg, ref_cache = decode_step(ref, REFERENCE, token, ref_cache)
            ref_step_logits.append(lg)
        token = step_logits[teacher.label][-1].argmax(dim=-1, keepdim=True)
        tokens.append(token)
    del ref_cache
    if args.profile:  # timing only: every step feeds the next teacher token again
        for impl in impls:
            def run(_, impl=impl):
                _, caches[impl.label] = decode_step(model, impl, token, caches[impl.label])
            impl.activate(model)
            profiles[impl.label] = profile_steps(run, PROFILE_STEPS, args.device)
    skip = min(args.warmup, max(args.decode_steps - 1, 0))  # first steps warm up decode shapes
    timing = {label: {"event_ms": statistics.median(event_ms[label][skip:]),
                      "host_ms": statistics.median(host_ms[label][skip:])}
              for label in event_ms}
    logits = {label: torch.stack(lg, dim=1) for label, lg in step_logits.items()}
    ref_logits = torch.stack(ref_step_logits, dim=1) if ref is not None else None
    return logits, ref_logits, timing, torch.cat(tokens, dim=1)


def free_running(model, impl, prompt, args):
    """Greedy decode of --decode-steps tokens (the original sequential method)."""
    impl.activate(model)
    logits, cache = prefill(model, impl, prompt)
    token = logits.argmax(dim=-1, keepdim=True)
    tokens, step_ms = [token], []
    for _ in range(args.decode_steps):
        ms, _, (logits, cache) = timed(lambda: decode_step(model, impl, token, cache),
                                       args.device)
        step_ms.append(ms)
        token = logits.argmax(dim=-1, keepdim=True)
        tokens.append(token)
    timed_steps = step_ms[args.warmup:] or step_ms
    return statistics.median(timed_steps), torch.cat(tokens, dim=1)


def probe_backend(backend, args):
    """None when torch's SDPA can run `backend` for this model's prefill and decode calls (GQA,
    causal prefill, one-query decode), else the reason."""
    d, b, L = args.head_dim or args.hidden // args.heads, args.batch, args.prompt
    new = lambda *shape: torch.zeros(*shape, device=args.device, dtype=DTYPES[args.dtype])
    try:
        with sdpa_kernel([backend]), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for q_len, causal in ((L, True), (1, False)):
                q = new(b, q_len, args.heads, d).transpose(1, 2)
                kv = new(b, args.kv_heads, L, d)
                torch.nn.functional.scaled_dot_product_attention(q, kv, kv, is_causal=causal,
                                                                 enable_gqa=True)
    except RuntimeError as err:
        return str(err).splitlines()[0]
    return None


def sdpa_choice(args):
    """The backend torch's SDPA picks by itself for the sdpa row's prefill and decode calls."""
    d, b, L = args.head_dim or args.hidden // args.heads, args.batch, args.prompt
    new = lambda *shape: torch.empty(*shape, device=args.device, dtype=DTYPES[args.dtype])
    choice = {}
    for phase, q_len, causal in (("prefill", L, True), ("decode", 1, False)):
        try:
            q = new(b, q_len, args.heads, d).transpose(1, 2)
            kv = new(b, args.kv_heads, L, d)
            picked = torch._fused_sdp_choice(q, kv, kv, is_causal=causal, enable_gqa=True)
            choice[phase] = SDPBackend(picked).name
        except (RuntimeError, AttributeError, ValueError) as err:  # private API: best effort
            choice[phase] = f"unknown ({err})"
    return choice


def free_memory(device):
    if device == "cuda":
        torch.cuda.synchronize()
        torch.cuda.empty_cache()


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
    torch.set_float32_matmul_precision("highest")  # the fp32 reference must not run in TF32
    name = flashcore.transformers.register()
    model, ref = build_models(args)
    prompt = torch.randint(0, args.vocab, (args.batch, args.prompt),
                           generator=torch.Generator().manual_seed(1)).to(args.device)
    impls = [Impl("flashcore", name), Impl("sdpa", "sdpa")]
    if not args.no_eager:
        impls.append(Impl("eager", "eager"))
    skipped = {}
    for backend in filter(None, (b.strip() for b in args.sdpa_backends.split(","))):
        if backend not in SDPA_BACKENDS:
            sys.exit(f"--sdpa-backends: unknown backend {backend!r}; expected one of "
                     f"{', '.join(SDPA_BACKENDS)}")
        reason = probe_backend(SDPA_BACKENDS[backend], args)
        if reason is None:
            impls.append(Impl(f"sdpa[{backend}]", "sdpa", SDPA_BACKENDS[backend]))
        else:
            skipped[backend] = reason
    profiles = {}
    with torch.inference_mode():
        choice = sdpa_choice(args)
        prefill_ms, prefill_logits = time_prefill(model, impls, prompt, args)
        free_memory(args.device)
        tf_logits, ref_logits, tf_timing, _ = teacher_forced(model, ref, impls, prompt, args,
                                                             profiles)
        del ref
        free_memory(args.device)
        free_ms, free_tokens = {}, {}
        for impl in impls:  # FlashCore first: the opposite order of the first reported run
            free_ms[impl.label], free_tokens[impl.label] = free_running(model, impl, prompt, args)
            free_memory(args.device)
    ref_prefill = ref_logits[:, 0] if ref_logits is not None else None
    prefill_acc = prefill_accuracy(prefill_logits, ref_prefill)
    decode_acc = decode_accuracy(tf_logits, ref_logits)
    implementations = {}
    for impl in impls:
        label, tokens = impl.label, free_tokens[impl.label]
        differs = (tokens != free_tokens["sdpa"]).any(dim=0).nonzero()
        entry = {
            "prefill_ms": prefill_ms[label],
            "decode_ms_per_step": free_ms[label],
            "decode_ms_per_step_synced_interleaved": tf_timing[label]["event_ms"],
            "decode_host_ms_per_step": tf_timing[label]["host_ms"],
            "prefill_logits_max_abs_err_vs_fp32": prefill_acc[label]["max_abs_err_vs_fp32"],
            "prefill_logits_max_abs_diff_vs_sdpa": prefill_acc[label]["max_abs_diff_vs_sdpa"],
            "teacher_forced": decode_acc[label],
            "free_running_agreement_vs_sdpa": (tokens == free_tokens["sdpa"]).float().mean().item(),
            "free_running_first_difference_at_step": int(differs[0]) if differs.numel() else None,
        }
        if label in profiles:
            entry["profile"] = profiles[label]
            entry["profile_verdict"] = dominant(profiles[label])
        implementations[label] = entry
    ours, sdpa = implementations["flashcore"], implementations["sdpa"]
    report = {
        "device": torch.cuda.get_device_name() if args.device == "cuda" else "cpu",
        "torch": torch.__version__, "transformers": transformers.__version__,
        "flashcore": flashcore.__version__, "commit": git_commit(),
        "python": platform.python_version(), "config": vars(args),
        "sdpa_backend_chosen": choice, "sdpa_backends_skipped": skipped,
        "implementations": implementations,
        "prefill_speedup_vs_sdpa": sdpa["prefill_ms"] / ours["prefill_ms"],
        "decode_speedup_vs_sdpa": sdpa["decode_ms_per_step"] / ours["decode_ms_per_step"],
        "decode_speedup_vs_sdpa_synced_interleaved":
            sdpa["decode_ms_per_step_synced_interleaved"]
            / ours["decode_ms_per_step_synced_interleaved"],
        "prefill_logits_max_abs_diff_vs_sdpa": ours["prefill_logits_max_abs_diff_vs_sdpa"],
        "greedy_token_agreement": ours["free_running_agreement_vs_sdpa"],
        "first_greedy_difference_at_step": ours["free_running_first_difference_at_step"],
        "teacher_forced_argmax_agreement_vs_sdpa":
            ours["teacher_forced"].get("argmax_agreement_vs_sdpa", 1.0),
    }
    if args.profile:
        for label, summary in profiles.items():
            print_summary(label, summary)
    print_report(report, args)
    if args.out:
        with open(args.out, "w") as f:
            json.dump(report, f, indent=2)
        print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
