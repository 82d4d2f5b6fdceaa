"""bench/compare.py --grid serving: FlashCore's serving layouts (attention_varlen,
attention_with_kvcache) side by side with FA3's flash_attn_varlen_func and FlashCore's own dense
calls, on the rows of compare_serving_grid.

Every implementation of a row runs on the same tensors: a checked run (the BENCHMARKS.md rule on
sampled rows of a few sequences against a float64 reference, out NaN-poisoned first), then
timing as compare.py's (CUDA events, or --timing graph: replays of a CUDA graph of
--graph-calls calls; the serving calls take no host sync, so they capture). Varlen rows report
TFLOPS, decode rows the K/V read rate in TB/s (every key of every sequence read once). A paged
cache hands its pages out in a shuffled order, as a server's free list would.

fp8 rows (issue 26; the varlen group, compare_serving_grid.FP8_GROUPS): q, k, v drawn in float32
and quantized per (sequence, kv head) with descale = amax / 448, FlashCore and FA3's FP8 varlen
on the same codes and descales, bf16 out, checked by the FP8 rule (compare_accuracy.Fp8Checker)
and the bound of 1.5x FA3 FP8's error on the same inputs.

A row also times FlashCore on what issue 25 measures it against, on the same tensors, in the
same interleaved rounds (its "twin"), and takes its ratio from those rounds: a varlen row of
equal-length sequences the dense call, a contiguous cache the dense call, a paged cache the
contiguous one. Rows timed apart meet different clocks and neighbours: an FA3 cell of 345 us
between FlashCore's replays moved them by up to 6% (docs/kernels.md, runs 211 and 222).
"""
import sys

import torch

import compare_accuracy
import compare_runner
import compare_serving_grid as grid

FA3_NO_PAGED = ("FA3's fa3-fwd wheel has no paged KV; FA3's paged decode needs flash_attn3_jax "
                "in its own process (issue 25), so it is not timed here")
# Sequences of a varlen row that are checked: the shortest ones whole, the longest on sampled
# rows (compare_accuracy.Checker picks them).
CHECKED_SEQUENCES = 4
# The timing name of an implementation's twin (FlashCoreServing.twin) is its own and this.
TWIN = " twin"


def _cu(lengths, device):
    offsets = [0]
    for length in lengths:
        offsets.append(offsets[-1] + length)
    return torch.tensor(offsets, dtype=torch.int32, device=device)


class Inputs:
    """The tensors of one row. q is packed [total_q, hq, d] for varlen rows, else dense
    [batch, sq, hq, d]; keys are drawn once as dense per-sequence tensors and laid out as the
    row asks (a contiguous or paged cache holds exactly the same values). fp8 rows hold e4m3
    codes and `descales` (q_descale, k_descale, v_descale: float32 [batch, heads_kv], one per
    sequence and kv head); 16-bit rows an empty `descales`."""

    def __init__(self, config, device, seed):
        gen = torch.Generator(device="cpu").manual_seed(seed)
        fp8 = config.dtype == grid.FP8
        dtype = torch.float32 if fp8 else compare_runner.TORCH_DTYPES[config.dtype]
        hq, hkv, d = config.heads_q, config.heads_kv, config.head_dim
        randn = lambda *shape: torch.randn(*shape, generator=gen).to(device, dtype)  # noqa: E731
        self.config = config
        self.descales = {}
        self.out_dtype = compare_runner.FP8_OUT if fp8 else dtype
        self.cu_q, self.cu_k = _cu(config.lengths_q, device), _cu(config.lengths_k, device)
        self.max_q, self.max_k = max(config.lengths_q), max(config.lengths_k)
        uniform = len(set(config.lengths_q)) == 1 and len(set(config.lengths_k)) == 1
        if config.layout == grid.VARLEN:
            self.q = randn(sum(config.lengths_q), hq, d)
            total_k = sum(config.lengths_k)
            self.k, self.v = randn(total_k, hkv, d), randn(total_k, hkv, d)
            if fp8:
                lengths = {"q": config.lengths_q, "k": config.lengths_k, "v": config.lengths_k}
                self._quantize(lambda name, x: compare_accuracy.quantize_fp8_packed(
                    x, lengths[name], hkv))
            return
        assert uniform, config
        assert not fp8 or config.layout == grid.DENSE, config  # FP8_GROUPS
        batch, sq, sk = config.batch, self.max_q, self.max_k
        self.q = randn(batch, sq, hq, d)
        self.k, self.v = randn(batch, sk, hkv, d), randn(batch, sk, hkv, d)
        if fp8:
            self._quantize(lambda name, x: compare_accuracy.quantize_fp8(x, hkv))
            return
        self.cache_seqlens = torch.full((batch,), sk, dtype=torch.int32, device=device)
        self.page_table = None
        if config.layout == grid.PAGED:
            page = config.page_size
            width = -(-sk // page)
            order = torch.randperm(batch * width, generator=gen).to(device, torch.int32)
            self.page_table = order.reshape(batch, width)
            self.k_cache = self._paged(self.k, width, page)
            self.v_cache = self._paged(self.v, width, page)
        else:
            self.k_cache, self.v_cache = self.k, self.v

    def _quantize(self, quantize):
        """q, k and v as e4m3 codes by quantize(name, tensor) -> (codes, descale [batch, hkv])."""
        for name in ("q", "k", "v"):
            codes, self.descales[name + "_descale"] = quantize(name, getattr(self, name))
            setattr(self, name, codes)

    def sequence_descales(self, b):
        """The descales of sequence b ([1, heads_kv] each), for its checker."""
        return {name: d[b:b + 1] for name, d in self.descales.items()}

    def _paged(self, dense, width, page):
        """The pages of `dense` [batch, sk, hkv, d] at the page table's slots."""
        batch, sk, hkv, d = dense.shape
        padded = dense.new_zeros(batch, width * page, hkv, d)
        padded[:, :sk] = dense
        pages = dense.new_empty(batch * width, page, hkv, d)
        pages[self.page_table.flatten().long()] = padded.reshape(batch * width, page, hkv, d)
        return pages

    def sequences(self):
        """(index, q, k, v) of the checked sequences, each [1, s, h, d]."""
        lengths = self.config.lengths_q
        order = sorted(range(len(lengths)), key=lambda b: lengths[b])
        picked = sorted(set(order[:CHECKED_SEQUENCES - 1] + order[-1:]))
        for b in picked:
            if self.config.layout == grid.VARLEN:
                rows = slice(int(self.cu_q[b]), int(self.cu_q[b + 1]))
                cols = slice(int(self.cu_k[b]), int(self.cu_k[b + 1]))
                yield b, self.q[rows][None], self.k[cols][None], self.v[cols][None]
            else:
                yield b, self.q[b:b + 1], self.k[b:b + 1], self.v[b:b + 1]


def sequence_output(config, inputs, out, lse, b):
    """out [1, sq, hq, d] and lse [1, hq, sq] (None when lse is) of sequence b."""
    if config.layout == grid.VARLEN:
        rows = slice(int(inputs.cu_q[b]), int(inputs.cu_q[b + 1]))
        return out[rows][None], None if lse is None else lse[:, rows][None]
    return out[b:b + 1], None if lse is None else lse[b:b + 1]


class FlashCoreServing:
    """flashcore on a row, in the row's layout: attention_varlen, attention_with_kvcache
    (contiguous or paged), or flashcore.attention (dense)."""

    def __init__(self, module, backend, name="flashcore"):
        self.module, self.backend, self.name = module, backend, name

    def _options(self, config, **kwargs):
        """The keyword arguments every call of the row takes: its mask and backend."""
        backend = None if self.backend in (None, "auto") else self.backend
        return dict(causal=config.causal, backend=backend, **kwargs)

    def call(self, inputs, **kwargs):
        config, fc = inputs.config, self.module
        common = self._options(config, **kwargs, **inputs.descales)
        if config.layout == grid.VARLEN:
            return fc.attention_varlen(inputs.q, inputs.k, inputs.v, inputs.cu_q, inputs.cu_k,
                                       inputs.max_q, inputs.max_k, **common)
        if config.layout == grid.DENSE:
            return fc.attention(inputs.q, inputs.k, inputs.v, **common)
        return fc.attention_with_kvcache(inputs.q, inputs.k_cache, inputs.v_cache,
                                         inputs.cache_seqlens, page_table=inputs.page_table,
                                         **common)

    def twin(self, inputs):
        """(label, call of no arguments) of the row's twin, the call it is measured against on
        the same keys: for an equal-length varlen row the dense call on its sequences (the
        packed q, k and v viewed as [batch, seqlen, heads, d]), for a contiguous cache the dense
        call, for a paged cache the contiguous one; None for the others."""
        config = inputs.config
        common = self._options(config, **inputs.descales)
        if config.layout == grid.VARLEN:
            if len(set(config.lengths_q)) != 1 or len(set(config.lengths_k)) != 1:
                return None
            batch = config.batch
            q = inputs.q.view(batch, inputs.max_q, *inputs.q.shape[1:])
            k = inputs.k.view(batch, inputs.max_k, *inputs.k.shape[1:])
            v = inputs.v.view(batch, inputs.max_k, *inputs.v.shape[1:])
            return "dense", lambda: self.module.attention(q, k, v, **common)
        if config.layout == grid.CONTIGUOUS:
            return "dense", lambda: self.module.attention(inputs.q, inputs.k, inputs.v, **common)
        if config.layout == grid.PAGED:
            return "contiguous", lambda: self.module.attention_with_kvcache(
                inputs.q, inputs.k, inputs.v, inputs.cache_seqlens, **common)
        return None


class Fa3Serving:
    """FA3 where its wheel has the layout: flash_attn_varlen_func for varlen rows,
    flash_attn_func for dense ones, flash_attn_with_kvcache for a contiguous cache; no paged
    cache; bf16, and fp8 with the row's descales (the wheel is built without fp16)."""

    name = "fa3"

    def __init__(self, module, import_error):
        self.module, self.import_error = module, import_error

    def refusal(self, config):
        if self.module is None:
            return f"FA3 not installed ({self.import_error})"
        if config.dtype not in ("bf16", grid.FP8):
            return f"the fa3-fwd wheel has no {config.dtype} forward"
        if config.layout == grid.PAGED:
            return FA3_NO_PAGED
        return None

    def call(self, inputs):
        config, scale = inputs.config, inputs.config.head_dim ** -0.5
        if config.layout == grid.VARLEN:
            result = self.module.flash_attn_varlen_func(
                inputs.q, inputs.k, inputs.v, inputs.cu_q, inputs.cu_k, inputs.max_q,
                inputs.max_k, softmax_scale=scale, causal=config.causal, **inputs.descales)
        elif config.layout == grid.CONTIGUOUS:
            result = self.module.flash_attn_with_kvcache(
                inputs.q, inputs.k_cache, inputs.v_cache, cache_seqlens=inputs.cache_seqlens,
                softmax_scale=scale, causal=config.causal)
        else:
            result = self.module.flash_attn_func(inputs.q, inputs.k, inputs.v,
                                                 softmax_scale=scale, causal=config.causal,
                                                 **inputs.descales)
        return result[0] if isinstance(result, tuple) else result


def import_fa3_module():
    """fa3_fwd_interface (the fa3-fwd wheel of anchors/fetch.sh), or (None, why not)."""
    try:
        import fa3_fwd_interface
        return fa3_fwd_interface, None
    except Exception as error:  # ImportError, or a build that will not load
        return None, compare_runner.short_reason(error)


def check(inputs, out, lse, max_rows):
    """The BENCHMARKS.md rule (fp8 rows: the FP8 rule) on the checked sequences; lse None
    checks out only."""
    config = inputs.config
    result = {"pass": True, "max_err_out": 0.0, "sequences_checked": []}
    scale = config.head_dim ** -0.5
    for b, q, k, v in inputs.sequences():
        if inputs.descales:
            checker = compare_accuracy.Fp8Checker(q, k, v, inputs.sequence_descales(b),
                                                  config.causal, scale, max_rows,
                                                  inputs.out_dtype)
        else:
            checker = compare_accuracy.Checker(q, k, v, config.causal, scale, max_rows)
        out_b, lse_b = sequence_output(config, inputs, out, lse, b)
        got = checker.check(out_b, lse_b)
        result["pass"] = result["pass"] and got["pass"]
        result["max_err_out"] = max(result["max_err_out"], got["max_err_out"])
        result["sequences_checked"].append(b)
    return result


def _timed_fn(fn, settings, on_gpu):
    """(fn to time, calls per run): a CUDA graph of graph_calls calls with --timing graph."""
    if settings.timing == "graph" and on_gpu:
        graph = compare_runner.capture_graph([fn], settings.graph_calls, None)
        return graph.replay, settings.graph_calls
    return fn, 1


def run_row(config, impls, settings, device, on_gpu, seed, check_rows):
    """Every impl on one row: {name: result}."""
    inputs = Inputs(config, device, seed)
    results, timed = {}, []
    for impl in impls:
        result = {"name": impl.name}
        results[impl.name] = result
        refusal = impl.refusal(config) if hasattr(impl, "refusal") else None
        if refusal:
            result.update(status="n/a", reason=refusal)
            continue
        try:
            twin = None
            if isinstance(impl, FlashCoreServing):
                poisoned = torch.full(inputs.q.shape, float("nan"), dtype=inputs.out_dtype,
                                      device=inputs.q.device)
                out, lse = impl.call(inputs, out=poisoned, return_lse=True)
                fn = lambda impl=impl: impl.call(inputs)  # noqa: E731
                twin = impl.twin(inputs)
            else:
                out, lse = impl.call(inputs), None
                fn = lambda impl=impl: impl.call(inputs)  # noqa: E731
            if on_gpu:
                torch.cuda.synchronize()
            result.update(check(inputs, out, lse, check_rows))
            result["status"] = "ok" if result["pass"] else "FAIL"
            if twin is not None:  # the same keys: recorded, not judged (kernels may differ)
                result["twin"], twin_call = twin
                result["twin_max_diff"] = float(
                    (twin_call().reshape(out.shape).float() - out.float()).abs().max())
            del out, lse
            timed_fn, calls = _timed_fn(fn, settings, on_gpu)
            timed.append((impl.name, timed_fn, None, calls))
            if twin is not None:
                twin_fn, twin_calls = _timed_fn(twin_call, settings, on_gpu)
                timed.append((impl.name + TWIN, twin_fn, None, twin_calls))
        except Exception as error:  # a backend refusing the layout, out of memory, ...
            result.update(status="n/a", reason=compare_runner.short_reason(error))
    if inputs.descales:  # issue 26's second bound, where FA3 ran
        compare_accuracy.apply_fa3_fp8_bound(
            {"results": results},
            [impl.name for impl in impls if isinstance(impl, FlashCoreServing)])
    timings = compare_runner.time_interleaved(timed, settings.warmup, settings.iters,
                                              settings.budget_s, settings.rounds, on_gpu)
    for name, timing in timings.items():
        if name.endswith(TWIN):
            if "error" not in timing:
                results[name[:-len(TWIN)]]["twin_same_rounds_ms"] = timing["median_ms"]
            continue
        if "error" in timing:
            results[name].update(status="n/a", reason="timing: " + timing["error"])
            continue
        results[name].update(timing)
        seconds = timing["median_ms"] * 1e-3
        results[name]["tflops"] = config.flops() / seconds / 1e12
        results[name]["kv_tb_s"] = config.kv_bytes() / seconds / 1e12
    return results


def cell(config, result):
    if result.get("status") != "ok":
        return result.get("status", "n/a")
    if config.is_decode():
        return f"{result['median_ms'] * 1e3:.1f} us, {result['kv_tb_s']:.2f} TB/s"
    return f"{result['median_ms']:.3f} ms, {result['tflops']:.0f} TFLOPS"


def _merit(config, result):
    """The figure a row is judged by: K/V read rate for decode rows, else TFLOPS."""
    return result["kv_tb_s"] if config.is_decode() else result["tflops"]


def _lengths(config):
    return config.group, config.dtype, config.lengths_q, config.lengths_k


def ratios(records, name):
    """Per record, what the issue asks of `name` (the first flashcore column): speed against
    FA3 on the same row, and its figure of merit (TFLOPS for varlen prefill, K/V TB/s for
    decode) against its twin timed in the same rounds, or else the dense row of the same
    sequence lengths, or else its group's first dense row of its dtype."""
    first_dense, same_lengths = {}, {}
    for record in records:
        config = record["config_obj"]
        if config.layout == grid.DENSE:
            first_dense.setdefault((config.group, config.dtype), record)
            same_lengths.setdefault(_lengths(config), record)
    notes = []
    for record in records:
        config, results = record["config_obj"], record["results"]
        ours, text = results.get(name, {}), []
        if ours.get("status") == "ok":
            fa3 = results.get("fa3", {})
            if fa3.get("status") == "ok":
                text.append(f"{fa3['median_ms'] / ours['median_ms']:.2f}x FA3")
            base = same_lengths.get(_lengths(config),
                                    first_dense.get((config.group, config.dtype)))
            if ours.get("twin_same_rounds_ms"):
                text.append(f"{ours['twin_same_rounds_ms'] / ours['median_ms']:.2f}x "
                            f"{ours['twin']} b{config.batch}, same rounds")
            elif base is not None and base is not record:
                theirs = base["results"].get(name, {})
                if theirs.get("status") == "ok":
                    base_config = base["config_obj"]
                    text.append(f"{_merit(config, ours) / _merit(base_config, theirs):.2f}x "
                                f"dense b{base_config.batch}")
        notes.append("; ".join(text) or "-")
    return notes


def table(records, names):
    """Markdown: one row per config, one column per impl and the ratios of the first, then every
    n/a reason once."""
    notes = ratios(records, names[0]) if names else ["-"] * len(records)
    lines = ["| config | " + " | ".join(names) + " | ratios |",
             "|---" * (len(names) + 2) + "|"]
    reasons = {}
    for record, note in zip(records, notes):
        config = record["config_obj"]
        cells = []
        for name in names:
            result = record["results"].get(name, {})
            cells.append(cell(config, result))
            if result.get("status") != "ok" and result.get("reason"):
                reasons.setdefault(result["reason"], []).append(f"{name} {config.describe()}")
        lines.append(f"| {config.describe()} | " + " | ".join(cells) + f" | {note} |")
    if reasons:
        lines.append("")
        lines += [f"- n/a: {reason} ({len(where)} cells, e.g. {where[0]})"
                  for reason, where in reasons.items()]
    return "\n".join(lines)


def run(configs, args, settings, on_gpu, flashcore_module):
    """Every row; returns (records, markdown)."""
    device = "cuda" if on_gpu else "cpu"
    impls = [FlashCoreServing(flashcore_module, backend,
                              "flashcore" if backend in (None, "auto") else f"flashcore[{backend}]")
             for backend in args.flashcore_backends] if flashcore_module else []
    if "fa3" in args.impls and on_gpu:
        module, error = import_fa3_module()
        impls.append(Fa3Serving(module, error))
    print(f"note: {FA3_NO_PAGED}", file=sys.stderr)
    records = []
    for index, config in enumerate(configs):
        record = {"config": config.describe(), **config.as_dict(), "flops": config.flops(),
                  "kv_bytes": config.kv_bytes(), "config_obj": config}
        try:
            record["results"] = run_row(config, impls, settings, device, on_gpu,
                                        args.seed + index, args.check_rows)
        except Exception as error:  # inputs out of memory, ...: record and go on
            record["results"] = {impl.name: {"status": "n/a",
                                             "reason": compare_runner.short_reason(error)}
                                 for impl in impls}
        records.append(record)
        print(f"[{index + 1}/{len(configs)}] {config.describe()}: " + ", ".join(
            f"{name} {cell(config, r)}" for name, r in record["results"].items()),
            file=sys.stderr, flush=True)
        if on_gpu:
            torch.cuda.empty_cache()
    return records, table(records, [impl.name for impl in impls])
