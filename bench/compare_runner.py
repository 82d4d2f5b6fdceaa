"""Timing and the implementations bench/compare.py puts side by side on the same inputs."""
import contextlib
import statistics
import time

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

TORCH_DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16, "fp32": torch.float32}
FP8 = getattr(torch, "float8_e4m3fn", None)  # None: a torch without fp8 (or a test stub)
FP8_OUT = torch.bfloat16  # the output dtype of the fp8 rows (FA3's)


class Unavailable(Exception):
    """An implementation that cannot run this config (recorded as n/a with the reason; `cell`,
    when given, is the table's short text for it, e.g. "fp16 n/a")."""

    def __init__(self, reason, cell=None):
        super().__init__(reason)
        self.cell = cell


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
    The order changes from round to round: the clock follows the power drawn over the last tens
    of milliseconds, so whoever runs right after a light kernel (FA2) or after the idle gap
    between configs runs faster, for several replays. A rotation (A B C D, B C D A, ...) keeps
    the same neighbours, which put FlashCore after FA2 in every round of the standard four and
    FA3 after FlashCore; the rounds follow a balanced Latin square instead
    (`balanced_round_orders`): every implementation in every place, and right after every other
    one, equally often. `rounds` is rounded up to a whole number of the square's rows.
    `timed` is a list of (name, fn, make_context or None[, calls]), make_context returning a
    fresh context manager to run fn under (SDPA's backend choice) and calls the number of
    attention calls one run of fn makes (a CUDA graph's replay; default 1): iters counts runs
    of fn and the times reported are per call. Returns {name: timing dict, or {"error": reason}
    if it raised while timed}."""
    plans, results, calls_of = {}, {}, {}
    for name, fn, make_context, *calls in timed:
        calls_of[name] = calls[0] if calls else 1
        try:
            with _context(make_context):
                for _ in range(warmup):
                    fn()
                runs = _run_count(fn, iters, budget_s, on_gpu)
            plans[name] = (fn, make_context, runs, [])
        except Exception as error:  # timed like the checked run, so rare: out of memory, ...
            results[name] = {"error": short_reason(error)}
    schedule = balanced_rounds(list(plans), rounds)
    rounds = len(schedule)
    plans = {name: (fn, make_context, -(-runs // rounds), times)
             for name, (fn, make_context, runs, times) in plans.items()}
    for order in schedule:
        for name in order:
            if name not in plans:  # raised in an earlier round
                continue
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
        calls = calls_of[name]
        results[name] = {**_summary([t / calls for t in times]), "rounds": rounds}
        if calls > 1:
            results[name]["calls_per_run"] = calls
    return results


def balanced_round_orders(count):
    """Orders of `count` implementations for successive rounds, a balanced Latin square
    (Williams): each index in every place, and right after every other index, equally often
    (count rows for an even count, 2 x count for an odd one: the rows and their reverses)."""
    if count < 2:
        return [list(range(count))]
    first, low, high = [0], 1, count - 1
    while len(first) < count:  # 0, 1, n-1, 2, n-2, ...
        first.append(low)
        low += 1
        if len(first) < count:
            first.append(high)
            high -= 1
    rows = [[(i + shift) % count for i in first] for shift in range(count)]
    return rows if count % 2 == 0 else rows + [row[::-1] for row in rows]


def balanced_round(items, index):
    """`items` in round `index`'s order (the square's rows in turn)."""
    orders = balanced_round_orders(len(items))
    return [items[i] for i in orders[index % len(orders)]]


def balanced_rounds(items, rounds):
    """`items` in the order of each round: at least `rounds` (one or more) of them, whole
    squares."""
    orders = balanced_round_orders(len(items))
    squares = -(-max(rounds, 1) // len(orders))
    return [[items[i] for i in order] for _ in range(squares) for order in orders]


def short_reason(error):
    """First line of an exception, enough to tell why a backend refused."""
    text = str(error).strip().splitlines()
    return f"{type(error).__name__}: {text[0] if text else ''}"[:300]


# Every implementation takes (q, k, v, causal, **extra): extra is empty for fp16/bf16 rows and
# holds q_descale, k_descale, v_descale (float32 [batch, heads_kv]) for fp8 rows.


class FlashCoreImpl:
    """flashcore.attention on BSHD tensors (its native layout), one backend. fp8 rows: out in
    bf16; a backend that has no fp8 kernel is n/a, its cell "no fp8 kernel" and the library's
    error the reason."""

    def __init__(self, module, backend):
        self.module = module
        self.backend = backend
        self.name = "flashcore" if backend in (None, "auto") else f"flashcore[{backend}]"
        self.layout = "BSHD contiguous (native)"

    def _call(self, q, k, v, causal, **kwargs):
        backend = None if self.backend in (None, "auto") else self.backend
        return self.module.attention(q, k, v, causal=causal, backend=backend, **kwargs)

    def checked_output(self, q, k, v, causal, **extra):
        """One run into a NaN-poisoned out, asking for lse: (out [b,sq,hq,d], lse or None)."""
        if self.module is None:
            raise Unavailable("the flashcore Python module is not importable")
        fp8 = q.dtype == FP8
        poisoned = torch.full(q.shape, float("nan"), dtype=FP8_OUT if fp8 else q.dtype,
                              device=q.device)
        try:
            result = self._call(q, k, v, causal, out=poisoned, return_lse=True, **extra)
        except self.module.FlashCoreError as error:
            if fp8 and "fp8_e4m3" in str(error):  # a backend without an fp8 kernel says so
                raise Unavailable(short_reason(error), cell="no fp8 kernel") from None
            raise
        out, lse = result if isinstance(result, tuple) else (result, None)
        return out, lse

    def runner(self, q, k, v, causal, **extra):
        return lambda: self._call(q, k, v, causal, **extra)


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
        if q.dtype == FP8:
            raise Unavailable("torch SDPA has no fp8 forward", cell="fp8 n/a")
        if causal and q.shape[1] != k.shape[1]:
            raise Unavailable("SDPA is_causal aligns top-left; flashcore bottom-right (sq != sk)",
                              cell="sq!=sk n/a")
        kwargs = {"is_causal": causal}
        if q.shape[2] != k.shape[2]:
            kwargs["enable_gqa"] = True
        views = (q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2))
        return views, kwargs

    def checked_output(self, q, k, v, causal, **extra):
        (qt, kt, vt), kwargs = self._prepare(q, k, v, causal)
        with sdpa_kernel(self.backend):
            out = F.scaled_dot_product_attention(qt, kt, vt, **kwargs)
        return out.transpose(1, 2), None  # back to BSHD for the checker

    def runner(self, q, k, v, causal, **extra):
        (qt, kt, vt), kwargs = self._prepare(q, k, v, causal)
        return lambda: F.scaled_dot_product_attention(qt, kt, vt, **kwargs)

    def context(self):
        return sdpa_kernel(self.backend)


class Fa3Impl:
    """FlashAttention-3 (the fa3-fwd wheel of anchors/fetch.sh: upstream FA3's Hopper forward) on
    the BSHD tensors, its native layout: flash_attn_func(q, k, v, softmax_scale, causal) returns
    out [b, sq, hq, d] (the lse only with return_attn_probs=True); GQA/MQA from the heads of k/v;
    causal aligned bottom-right, as flashcore's. The wheel is built without fp16
    (FLASHATTENTION_DISABLE_FP16): fp16 configs are n/a. FP8: float8_e4m3fn q/k/v with
    flash_attn_func's q_descale/k_descale/v_descale ([batch, heads_kv] float32), bf16 out.
    Checked on out only, as SDPA is; its lse error is recorded beside (judges_lse False), so
    FlashCore's can be read against the anchor's on the same inputs.
    `flash_attn_func` None: the wheel is not importable (`import_error` says why)."""

    name = "fa3"
    layout = "BSHD contiguous (native)"
    judges_lse = False
    DTYPE_NAMES = {torch.float16: "fp16", torch.float32: "fp32"}

    def __init__(self, flash_attn_func, import_error=None):
        self.func = flash_attn_func
        self.import_error = import_error

    def _refuse(self, q):
        if self.func is None:
            raise Unavailable(f"FA3 not installed ({self.import_error})", cell="not installed")
        if q.dtype not in (torch.bfloat16, FP8):
            dtype = self.DTYPE_NAMES.get(q.dtype, str(q.dtype))
            raise Unavailable(f"the fa3-fwd wheel has no {dtype} forward (bf16 and FP8 only)",
                              cell=f"{dtype} n/a")
        if not q.is_cuda:
            raise Unavailable("FA3 runs on CUDA tensors only", cell="GPU only")

    def checked_output(self, q, k, v, causal, **extra):
        self._refuse(q)
        result = self.func(q, k, v, softmax_scale=q.shape[-1] ** -0.5, causal=causal,
                           return_attn_probs=True, **extra)
        return result if isinstance(result, tuple) else (result, None)

    def runner(self, q, k, v, causal, **extra):
        self._refuse(q)
        func, scale = self.func, q.shape[-1] ** -0.5
        return lambda: func(q, k, v, softmax_scale=scale, causal=causal, **extra)


def check_impl(impl, q, k, v, causal, checker, on_gpu, extra=None):
    """The checked run. Returns (result dict, (name, fn, make_context) to time, or None); never
    raises for the impl's failures, which the result records as n/a with the reason. `extra`:
    the fp8 rows' descales, passed to every call."""
    extra = extra or {}
    result = {"name": impl.name, "layout": impl.layout}
    try:
        out, lse = impl.checked_output(q, k, v, causal, **extra)
        if on_gpu:
            torch.cuda.synchronize()
        if getattr(impl, "judges_lse", True):
            result.update(checker.check(out, lse))
        else:
            result.update(checker.check(out))
            if lse is not None:
                result.update(max_err_lse=checker.lse_error(lse), lse_judged=False)
        del out, lse
        timed = (impl.name, impl.runner(q, k, v, causal, **extra),
                 getattr(impl, "context", None))
        result["status"] = "ok" if result["pass"] else "FAIL"
        return result, timed
    except Unavailable as error:
        result.update(status="n/a", reason=str(error))
        if error.cell:
            result["cell"] = error.cell
    except Exception as error:  # a backend refusing a config, OOM, a flashcore.Error, ...
        result.update(status="n/a", reason=short_reason(error))
        if on_gpu:
            try:
                torch.cuda.synchronize()
            except Exception as sync_error:  # a sticky CUDA error poisons the whole process
                result["reason"] += f"; device now unusable: {short_reason(sync_error)}"
    return result, None


# --timing graph. BENCHMARKS.md: inputs larger than L2. A graph replays its calls back to back,
# so where one call's q, k, v and out are smaller than twice the L2, the calls cycle through
# copies of the inputs (the same values at other addresses) and none finds its inputs left in the
# L2 by the call before.
L2_FALLBACK_BYTES = 50 * 2 ** 20  # an H100's, where torch does not report the L2 size
GRAPH_WARMUP = 3  # eager calls per input set before capture (cuDNN plans, allocator blocks)


def input_set_count(set_bytes, l2_bytes, calls):
    """Input sets a graph of `calls` calls cycles through: enough that they span twice the L2,
    one when a single set does, never more than the calls."""
    return max(1, min(calls, -(-2 * l2_bytes // max(set_bytes, 1))))


def input_sets(q, k, v, calls):
    """[(q, k, v), copies...], input_set_count of them (out counts as q's size)."""
    l2_bytes = getattr(torch.cuda.get_device_properties(q.device), "L2_cache_size", 0)
    set_bytes = sum(t.numel() * t.element_size() for t in (q, k, v, q))
    count = input_set_count(set_bytes, l2_bytes or L2_FALLBACK_BYTES, calls)
    return [(q, k, v)] + [(q.clone(), k.clone(), v.clone()) for _ in range(count - 1)]


def capture_graph(fns, calls, make_context):
    """torch.cuda.CUDAGraph of `calls` calls, call i running fns[i % len(fns)], captured under
    make_context after eager warm-up on a side stream (torch.cuda.graph's recipe); replayed once
    and synchronized, so a graph that cannot run fails here. Outputs and workspaces come from
    the graph's private memory pool, allocated at capture: replays allocate nothing."""
    with _context(make_context):
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for fn in fns:
                for _ in range(GRAPH_WARMUP):
                    fn()
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            for call in range(calls):
                fns[call % len(fns)]()
    graph.replay()
    torch.cuda.synchronize()
    return graph


def graph_timed(impls, timed, q, k, v, causal, calls, results, extra=None):
    """`timed` entries (name, fn, make_context) as (name, graph.replay, None, calls): a graph
    of `calls` calls over input_sets. An impl whose capture fails keeps its eager entry (CUDA
    events), its result saying why (timing "events", graph_error)."""
    by_name = {impl.name: impl for impl in impls}
    try:
        sets = input_sets(q, k, v, calls)
    except Exception:  # out of memory for the copies: the graph reuses the one set
        sets = [(q, k, v)]
    graphed = []
    for name, fn, make_context in timed:
        try:
            fns = [fn] + [by_name[name].runner(*inputs, causal, **(extra or {}))
                          for inputs in sets[1:]]
            graph = capture_graph(fns, calls, make_context)
            results[name].update(timing="graph", input_sets=len(sets))
            graphed.append((name, graph.replay, None, calls))
        except Exception as error:
            results[name].update(timing="events", graph_error=short_reason(error))
            try:  # a failed capture can leave an error behind: surface it here, not in the next
                torch.cuda.synchronize()
                with _context(make_context):
                    fn()
                torch.cuda.synchronize()
                graphed.append((name, fn, make_context))
            except Exception as again:
                results[name].update(status="n/a", reason="after a failed graph capture: "
                                     + short_reason(again))
    return graphed


def run_impls(impls, q, k, v, causal, checker, settings, on_gpu, extra=None):
    """Every impl checked on the same inputs, then the ones that ran timed side by side in
    settings.rounds interleaved rounds: eagerly between CUDA events, or with settings.timing
    "graph" as replays of CUDA graphs of settings.graph_calls calls. `extra`: keyword arguments
    of every call (an fp8 row's descales). Returns {name: result}."""
    results, timed = {}, []
    for impl in impls:
        results[impl.name], to_time = check_impl(impl, q, k, v, causal, checker, on_gpu, extra)
        if to_time is not None:
            timed.append(to_time)
    if getattr(settings, "timing", "events") == "graph" and on_gpu and timed:
        timed = graph_timed(impls, timed, q, k, v, causal, settings.graph_calls, results,
                            extra)
    timings = time_interleaved(timed, settings.warmup, settings.iters, settings.budget_s,
                               settings.rounds, on_gpu)
    for name, timing in timings.items():
        if "error" in timing:
            results[name].update(status="n/a", reason="timing: " + timing["error"])
        else:
            results[name].update(timing)
    return results
