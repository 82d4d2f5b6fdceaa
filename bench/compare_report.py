"""JSON and markdown output of bench/compare.py (pure Python)."""
import json
import math
import os


def _finite(value):
    """JSON has no NaN/Inf: they become null (strict parsers reject Python's NaN)."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


def _fmt(value, digits=1):
    return "-" if value is None else f"{value:.{digits}f}"


# A median this far above the min of the same runs means a stretch of slow runs, not a slow
# kernel: back-to-back runs of one kernel spread by 1-4% (docs/kernels.md). Such results are
# listed under the table, so that a ratio is not read without that warning.
UNSTEADY_MEDIAN_OVER_MIN = 1.15


def unsteady(record):
    """Implementations of `record` whose median is more than UNSTEADY_MEDIAN_OVER_MIN x their
    min, as (name, median_ms, min_ms)."""
    found = []
    for name, r in record["results"].items():
        median, fastest = r.get("median_ms"), r.get("min_ms")
        if median and fastest and median > UNSTEADY_MEDIAN_OVER_MIN * fastest:
            found.append((name, median, fastest))
    return found


# The anchors flashcore is measured against (BENCHMARKS.md), in the table's order, and their
# names there. Results of JSON written before FA3 was added hold only cudnn and fa2.
ANCHORS = ("fa3", "cudnn", "fa2")
LABELS = {"fa3": "FA3", "cudnn": "cuDNN", "fa2": "FA2"}


def _ratio(a, b):
    return a / b if a and b else None


def add_ratios(record, flashcore_names, anchors=ANCHORS):
    """record['ratios']: each flashcore implementation's TFLOPS over each anchor's."""
    tflops = {name: r.get("tflops") for name, r in record["results"].items()}
    record["ratios"] = {f"{fc}/{base}": _ratio(tflops.get(fc), tflops.get(base))
                        for fc in flashcore_names for base in anchors}


def anchors_of(meta, records):
    """The anchor columns: meta['anchors'] (the run's --impls), else (older JSON) those with a
    result in some record."""
    if meta.get("anchors") is not None:
        return list(meta["anchors"])
    return [a for a in ANCHORS if any(a in r["results"] for r in records)]


def geomean(values):
    """Geometric mean of positive numbers; None for none."""
    values = list(values)
    if not values:
        return None
    return math.exp(sum(math.log(v) for v in values) / len(values))


def summarize(records, flashcore_names, anchors):
    """{"fc/anchor": {"configs", "geomean", "lowest", "lowest_config"}} over the configs where
    both passed their check and were timed (a failing kernel's speed is no result), for each
    pair with at least one such config."""
    summary = {}
    for fc in flashcore_names:
        for anchor in anchors:
            key = f"{fc}/{anchor}"
            ratios = [(record["ratios"][key], record["config"]) for record in records
                      if record.get("ratios", {}).get(key)
                      and record["results"].get(fc, {}).get("status") == "ok"
                      and record["results"].get(anchor, {}).get("status") == "ok"]
            if ratios:
                lowest, at = min(ratios)
                summary[key] = {"configs": len(ratios), "geomean": geomean(r for r, _ in ratios),
                                "lowest": lowest, "lowest_config": at}
    return summary


def _rounds_note(meta):
    rounds = meta.get("rounds", 1)
    if rounds <= 1:
        return ""
    return (f" in {rounds} or more interleaved rounds (a balanced Latin square: each "
            "implementation in every place and after every other one equally often)")


def _passes_note(meta):
    passes = meta.get("passes") or []
    if len(passes) <= 1:
        return ""
    return (f"; the figure is the median of the replays of {len(passes)} such passes, run "
            "at different times (bench/merge_passes.py)")


def _timing_note(meta):
    if meta.get("timing") == "graph":
        return (f"CUDA-graph replays of {meta.get('graph_calls')} calls (time per call), median "
                f"of up to {meta['iters']} replays{_rounds_note(meta)}{_passes_note(meta)}")
    return f"median of up to {meta['iters']} runs{_rounds_note(meta)}{_passes_note(meta)}"


def _fa3_note(meta, anchors):
    if "fa3" not in anchors:
        return ""
    if meta.get("fa3_import_error"):
        return ", FA3 not installed"
    return f", FA3 (fa3-fwd {meta.get('fa3') or '?'})"


def _cell(result):
    """TFLOPS (marked when the output failed the check), else the short reason it did not
    run ("fp16 n/a", "not installed") or its status."""
    tflops = result.get("tflops")
    if tflops:
        text = _fmt(tflops, 1 if tflops >= 10 else 3)
        return f"{text} FAIL" if result.get("status") == "FAIL" else text
    return result.get("cell") or result.get("status", "-")


def _fail_reason(record, result):
    """Why a result failed its check: the checker's fail_reason (compare_accuracy.py), or for
    results recorded before it wrote one, its out error against the record's bound."""
    if result.get("fail_reason"):
        return result["fail_reason"]
    return (f"max err {result.get('max_err_out', float('nan')):.1e}"
            f" > tol {record.get('tol_out', float('nan')):.1e}")


def _anchor_errors(record, anchors):
    """The anchors' recorded errors on the same inputs ("FA3 out 1.2e-03, lse 1.0691e-03"), so
    a FlashCore failure can be read against them (FA3's lse is recorded, not judged)."""
    texts = []
    for anchor in anchors:
        r = record["results"].get(anchor, {})
        parts = [f"out {r['max_err_out']:.4e}"] if r.get("max_err_out") is not None else []
        if r.get("max_err_lse") is not None:
            parts.append(f"lse {r['max_err_lse']:.4e}")
        if parts:
            texts.append(f"{LABELS.get(anchor, anchor)} " + ", ".join(parts))
    return f" (on the same inputs: {'; '.join(texts)})" if texts else ""


def _grouped(pairs):
    """'- name, where: text' lines for (config, name, text) triples, one per (name, text):
    a reason shared by many configs (FA3 not installed) is listed once."""
    groups = {}
    for config, name, text in pairs:
        groups.setdefault((name, text), []).append(config)
    lines = []
    for (name, text), configs in groups.items():
        where = ", ".join(configs) if len(configs) <= 3 else f"{len(configs)} configs"
        lines.append(f"- {name} ({where}): {text}")
    return lines


def summary_lines(summary, flashcore_names, anchors):
    """The run's geometric mean and lowest of each flashcore/anchor ratio, as a table."""
    lines = ["| ratio over the run | configs | geometric mean | lowest | at |",
             "|---|---|---|---|---|"]
    for fc in flashcore_names:
        for anchor in anchors:
            entry = summary.get(f"{fc}/{anchor}")
            label = f"{fc}/{LABELS.get(anchor, anchor)}"
            if entry:
                lines.append(f"| {label} | {entry['configs']} | {entry['geomean']:.3f} | "
                             f"{entry['lowest']:.3f} | {entry['lowest_config']} |")
            else:
                lines.append(f"| {label} | 0 | - | - | - |")
    return lines


def markdown(meta, records, flashcore_names):
    """The table: TFLOPS per implementation, flashcore's ratios to each anchor (FA3, cuDNN,
    FA2), flashcore's accuracy; then each ratio's geometric mean and lowest over the run."""
    anchors = anchors_of(meta, records)
    versus = " vs " + ", ".join(LABELS.get(a, a) for a in anchors) if anchors else ""
    lines = [f"### flashcore{versus}: {meta['device']}",
             "",
             f"commit {meta['commit']}, {meta['date']}, torch {meta['torch']}, "
             f"cuDNN {meta['cudnn']}{_fa3_note(meta, anchors)}, grid `{meta['grid']}`, "
             f"TFLOPS = 4*b*hq*sq*sk*d/t (halved when causal; causal with sq != sk: the visible "
             f"(query, key) pairs instead of sq*sk/2), {_timing_note(meta)}.",
             ""]
    ceilings = meta.get("ceilings") or {}
    if ceilings:
        lines += [f"Ceilings on this device: bf16 GEMM 8192^3 "
                  f"{_fmt(ceilings.get('bf16_gemm_tflops'))} TFLOPS, device-to-device copy "
                  f"{_fmt(ceilings.get('copy_gb_s'), 0)} GB/s (read + write).", ""]
    names = flashcore_names + anchors
    header = ["config"] + [f"{n} TFLOPS" for n in names]
    header += [f"{fc}/{LABELS.get(a, a)}" for fc in flashcore_names for a in anchors]
    header += [f"{fc} err / tol" for fc in flashcore_names]
    header += ["check"] if flashcore_names else []  # an anchors-only run checks no flashcore
    lines += ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    unavailable, failed, fallbacks, own_failures = [], [], [], []
    for record in records:
        results = record["results"]
        config = record["config"]
        cells = [config] + [_cell(results.get(name, {})) for name in names]
        for name in names:
            r = results.get(name, {})
            status = r.get("status")
            if status == "n/a":
                unavailable.append((config, name, r.get("reason")))
            elif status == "FAIL" and name in flashcore_names:
                own_failures.append(f"- {config} {name}: {_fail_reason(record, r)}"
                                    f"{_anchor_errors(record, anchors)}")
            elif status == "FAIL":
                failed.append((config, name, _fail_reason(record, r)))
            if r.get("graph_error"):
                fallbacks.append((config, name, r["graph_error"]))
        cells += [_fmt(record.get("ratios", {}).get(f"{fc}/{a}"), 2)
                  for fc in flashcore_names for a in anchors]
        for fc in flashcore_names:
            r = results.get(fc, {})
            err = r.get("max_err_out")
            cells.append("-" if err is None else f"{err:.1e} / {record['tol_out']:.1e}")
        statuses = [results.get(fc, {}).get("status", "n/a") for fc in flashcore_names]
        if statuses:
            cells.append("pass" if all(s == "ok" for s in statuses) else "/".join(statuses))
        lines.append("| " + " | ".join(cells) + " |")
    if flashcore_names and anchors:
        lines += ["", "Over the run (configs where both passed the check):", ""]
        lines += summary_lines(summarize(records, flashcore_names, anchors), flashcore_names,
                               anchors)
    if own_failures:
        lines += ["", "FlashCore results that failed the accuracy check (not in the run's "
                  "means):"] + own_failures
    if unavailable:
        lines += ["", "n/a reasons:"] + _grouped(unavailable)
    if failed:
        lines += ["", "Anchors whose output failed the accuracy check (their ratios are not "
                  "in the run's means):"] + _grouped(failed)
    if fallbacks:
        lines += ["", "Timed with CUDA events after a failed graph capture:"] + _grouped(fallbacks)
    slow_stretches = [f"- {record['config']} {name}: median {median:.3f} ms, min {fastest:.3f} ms"
                      for record in records for name, median, fastest in unsteady(record)]
    if slow_stretches:
        lines += ["", f"Unsteady timings (median > {UNSTEADY_MEDIAN_OVER_MIN} x min; every run "
                  "is in compare.json as times_ms):"] + slow_stretches
    return "\n".join(lines) + "\n"


def write(out_dir, meta, records, flashcore_names):
    os.makedirs(out_dir, exist_ok=True)
    table = markdown(meta, records, flashcore_names)
    summary = summarize(records, flashcore_names, anchors_of(meta, records))
    with open(os.path.join(out_dir, "compare.json"), "w") as f:
        json.dump(_finite({"meta": meta, "summary": summary, "records": records}), f, indent=1,
                  allow_nan=False)
    with open(os.path.join(out_dir, "compare.md"), "w") as f:
        f.write(table)
    return table
