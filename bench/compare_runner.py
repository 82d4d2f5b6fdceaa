"""Timing and the implementations bench/compare.py puts side by side on the same inputs."""
import contextlib
import statistics
import time

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

TORCH_DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16, "fp32": torch.float32}


class Unavailable(Exception):
    """An implementation that cannot run this config (recorded as n/a with the reason)."""


def _one_run_ms(fn, on_gpu):
    if on_gpu:
        torch.cuda.synchronize()
    begin = time.perf_counter()
    fn()
    if on_gpu:
        torch.cuda.synchronize()
    return (time.perf_counter() - begin) * 1e3


def _gpu_runs_ms(fn, runs):
    """`runs` calls queued back to back, each between its own pair of CUDA events, synchronized
    once at the end (so host launch overhead hides behind the previous run, as in a model)."""
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(runs)]
    stops = [torch.cuda.Event(enable_timing=True) for _ in range(runs)]
    for start, stop in zip(starts, stops):
        start.record()
        fn()
        stop.record()
    torch.cuda.synchronize()
    return [start.elapsed_time(stop) for start, stop in zip(starts, stops)]


def _runs_ms(fn, runs, on_gpu):
    return _gpu_runs_ms(fn, runs) if on_gpu else [_one_run_ms(fn, False) for _ in range(runs)]


def _run_count(fn, iters, budget_s, on_gpu):
    """iters, cut to no fewer than min(iters, 5) when iters runs would take more than budget_s
    seconds (one untimed-for-the-median run measures a run), so a slow kernel cannot stall a
    whole grid."""
    estimate_ms = max(_one_run_ms(fn, on_gpu), 1e-3)
    return int(max(min(iters, 5), min(iters, budget_s * 1e3 / estimate_ms)))


def _summary(times):
    """Median and min, and every run in the order it ran (microsecond precision), so a slow
    stretch inside a block or round can be told from a uniformly slow kernel afterwards."""
    return {"median_ms": statistics.median(times), "min_ms": min(times), "iters": len(times),
            "times_ms": [round(t, 4) for t in times]}


def time_runs(fn, warmup, iters, budget_s, on_gpu):
    """Median and min milliseconds of `fn` after `warmup` runs, all runs in one block (GPU: CUDA
    events, one synchronize at the end; CPU: host clock per run). The JSON records how many
    ran."""
    for _ in range(warmup):
        fn()
    return _summary(_runs_ms(fn, _run_count(fn, iters, budget_s, on_gpu), on_gpu))


def _context(make_context):
    """A fresh context manager from `make_context`, or one that does nothing."""
    return make_context() if make_context else contextlib.nullcontext()


# Untimed runs at the start of every round, so that the timed ones start from the
# implementation's own steady state and not from the tail of the one before it (its output in
# the L2, its kernels still draining).
ROUND_WARMUP = 2


def time_interleaved(timed, warmup, iters, budget_s, rounds, on_gpu):
    """Times several implementations on the same inputs in `rounds` interleaved rounds (A B C
    A B C ...), each round a block of about iters / rounds runs per implementation.

    Under sustained load an H100 sits at its 700 W cap and its SM clock wanders between 1400
    and 1800 MHz (dev/sm90/power_probe.py), so one block per implementation after another gives
    each whatever clock the card had then: single configs' ratios moved by up to 10% between
    passes of the same grid. Interleaving gives every implementation the same mix of clocks.
    The order rotates from round to round (A B C, B C A, C A B): the clock follows the power
    drawn over the last few milliseconds, so whoever runs right after a light kernel (FA2) or
    after the idle gap between configs starts faster; with as many rounds as implementations,
    each takes every place once.
    `timed` is a list of (name, fn, make_context or None), make_context returning a fresh
    context manager to run fn under (SDPA's backend choice); returns {name: timing dict, or
    {"error": reason} if it raised while timed}."""
    plans, results = {}, {}
    for name, fn, make_context in timed:
        try:
            with _context(make_context):
                for _ in range(warmup):
                    fn()
                runs = _run_count(fn, iters, budget_s, on_gpu)
            plans[name] = (fn, make_context, -(-runs // rounds), [])
        except Exception as error:  # timed like the checked run, so rare: out of memory, ...
            results[name] = {"error": short_reason(error)}
    for round_index in range(rounds):
        names = list(plans)
        start = round_index % len(names) if names else 0
        for name in names[start:] + names[:start]:
            fn, make_context, per_round, times = plans[name]
            try:
                with _context(make_context):
                    for _ in range(ROUND_WARMUP):
                        fn()
                    times += _runs_ms(fn, per_round, on_gpu)
            except Exception as error:
                results[name] = {"error": short_reason(error)}
                del plans[name]
    for name, (_, _, _, times) in plans.items():
        results[name] = {**_summary(times), "rounds": rounds}
    return results


def short_reason(error):
    """First line of an exception, enough to tell why a backend refused."""
    text = str(error).strip().splitlines()
    return f"{type(error).__name__}: {text[0] if text else ''}"[:300]


class FlashCoreImpl:
    """flashcore.attention on BSHD tensors (its native layout), one backend."""

    def __init__(self, module, backend):
        self.module = module
        self.backend = backend
        self.name = "flashcore" if backend in (None, "auto") else f"flashcore[{backend}]"
        self.layout = "BSHD contiguous (native)"

    def _call(self, q, k, v, causal, **kwargs):
        backend = None if self.backend in (None, "auto") else self.backend
        return self.module.attention(q, k, v, causal=causal, backend=backend, **kwargs)

    def checked_output(self, q, k, v, causal):
        """One run into a NaN-poisoned out, asking for lse: (out [b,sq,hq,d], lse or None)."""
        if self.module is None:
            raise Unavailable("the flashcore Python module is not importable")
        poisoned = torch.full_like(q, float("nan"))
        result = self._call(q, k, v, causal, out=poisoned, return_lse=True)
        out, lse = result if isinstance(result, tuple) else (result, None)
        return out, lse

    def runner(self, q, k, v, causal):
        return lambda: self._call(q, k, v, causal)


class SdpaImpl:
    """torch SDPA forced to one backend. SDPA takes BHSD: it gets q.transpose(1, 2) views of the
    same BSHD memory (no copy in the timed region; the strides are what flashcore sees too)."""

    LABELS = {"cudnn": SDPBackend.CUDNN_ATTENTION, "fa2": SDPBackend.FLASH_ATTENTION,
              "math": SDPBackend.MATH}

    def __init__(self, name):
        self.name = name
        self.backend = self.LABELS[name]
        self.layout = "BHSD views of the BSHD tensors (transpose(1, 2), no copy)"

    def _prepare(self, q, k, v, causal):
        if causal and q.shape[1] != k.shape[1]:
            raise Unavailable("SDPA is_causal aligns top-left; flashcore bottom-right (sq != sk)")
        kwargs = {"is_causal": causal}
        if q.shape[2] != k.shape[2]:
            kwargs["enable_gqa"] = True
        views = (q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2))
        return views, kwargs

    def checked_output(self, q, k, v, causal):
        (qt, kt, vt), kwargs = self._prepare(q, k, v, causal)
        with sdpa_kernel(self.backend):
            out = F.scaled_dot_product_attention(qt, kt, vt, **kwargs)
        return out.transpose(1, 2), None  # back to BSHD for the checker

    def runner(self, q, k, v, causal):
        (qt, kt, vt), kwargs = self._prepare(q, k, v, causal)
        return lambda: F.scaled_dot_product_attention(qt, kt, vt, **kwargs)

    def context(self):
        return sdpa_kernel(self.backend)


def check_impl(impl, q, k, v, causal, checker, on_gpu):
    """The checked run. Returns (result dict, (name, fn, make_context) to time, or None); never
    raises for the impl's failures, which the result records as n/a with the reason."""
    result = {"name": impl.name, "layout": impl.layout}
    try:
        out, lse = impl.checked_output(q, k, v, causal)
        if on_gpu:
            torch.cuda.synchronize()
        result.update(checker.check(out, lse))
        del out, lse
        timed = (impl.name, impl.runner(q, k, v, causal), getattr(impl, "context", None))
        result["status"] = "ok" if result["pass"] else "FAIL"
        return result, timed
    except Unavailable as error:
        result.update(status="n/a", reason=str(error))
    except Exception as error:  # a backend refusing a config, OOM, a flashcore.Error, ...
        result.update(status="n/a", reason=short_reason(error))
        if on_gpu:
            try:
                torch.cuda.synchronize()
            except Exception as sync_error:  # a sticky CUDA error poisons the whole process
                result["reason"] += f"; device now unusable: {short_reason(sync_error)}"
    return result, None


def run_impls(impls, q, k, v, causal, checker, settings, on_gpu):
    """Every impl checked on the same inputs, then the ones that ran timed side by side in
    settings.rounds interleaved rounds. Returns {name: result dict}."""
    results, timed = {}, []
    for impl in impls:
        results[impl.name], to_time = check_impl(impl, q, k, v, causal, checker, on_gpu)
        if to_time is not None:
            timed.append(to_time)
    timings = time_interleaved(timed, settings.warmup, settings.iters, settings.budget_s,
                               settings.rounds, on_gpu)
    for name, timing in timings.items():
        if "error" in timing:
            results[name].update(status="n/a", reason="timing: " + timing["error"])
        else:
            results[name].update(timing)
    return results
