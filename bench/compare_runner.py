"""Timing and the implementations bench/compare.py puts side by side on the same inputs."""
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


def time_runs(fn, warmup, iters, budget_s, on_gpu):
    """Median and min milliseconds of `fn` after `warmup` runs.

    GPU: all timed runs are queued back to back, each between its own pair of CUDA events, and
    synchronized once at the end (so host launch overhead hides behind the previous run, as in
    a real model). CPU: host clock per run. The number of runs is cut, to no fewer than
    min(iters, 5), when iters runs would take more than `budget_s` seconds, so a slow early
    kernel cannot stall the whole grid; the JSON records how many ran."""
    for _ in range(warmup):
        fn()
    estimate_ms = max(_one_run_ms(fn, on_gpu), 1e-3)
    runs = int(max(min(iters, 5), min(iters, budget_s * 1e3 / estimate_ms)))
    if on_gpu:
        starts = [torch.cuda.Event(enable_timing=True) for _ in range(runs)]
        stops = [torch.cuda.Event(enable_timing=True) for _ in range(runs)]
        for start, stop in zip(starts, stops):
            start.record()
            fn()
            stop.record()
        torch.cuda.synchronize()
        times = [start.elapsed_time(stop) for start, stop in zip(starts, stops)]
    else:
        times = [_one_run_ms(fn, False) for _ in range(runs)]
    return {"median_ms": statistics.median(times), "min_ms": min(times), "iters": len(times)}


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


def run_impl(impl, q, k, v, causal, checker, settings, on_gpu):
    """Checked run, then timing. Returns a result dict; never raises for the impl's failures."""
    result = {"name": impl.name, "layout": impl.layout}
    try:
        out, lse = impl.checked_output(q, k, v, causal)
        if on_gpu:
            torch.cuda.synchronize()
        result.update(checker.check(out, lse))
        del out, lse
        fn = impl.runner(q, k, v, causal)
        context = impl.context() if hasattr(impl, "context") else None
        if context is not None:
            with context:
                timing = time_runs(fn, settings.warmup, settings.iters, settings.budget_s, on_gpu)
        else:
            timing = time_runs(fn, settings.warmup, settings.iters, settings.budget_s, on_gpu)
        result.update(timing)
        result["status"] = "ok" if result["pass"] else "FAIL"
    except Unavailable as error:
        result.update(status="n/a", reason=str(error))
    except Exception as error:  # a backend refusing a config, OOM, a flashcore.Error, ...
        result.update(status="n/a", reason=short_reason(error))
        if on_gpu:
            try:
                torch.cuda.synchronize()
            except Exception as sync_error:  # a sticky CUDA error poisons the whole process
                result["reason"] += f"; device now unusable: {short_reason(sync_error)}"
    return result
