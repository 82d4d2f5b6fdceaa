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
# kernel: back-to-back runs of one kernel spread by 1-4% (docs/kernels_sm90.md). Such results are
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


def _ratio(a, b):
    return a / b if a and b else None


def add_ratios(record, flashcore_names):
    """record['ratios']: each flashcore implementation's TFLOPS over cuDNN's and FA2's."""
    tflops = {name: r.get("tflops") for name, r in record["results"].items()}
    record["ratios"] = {f"{fc}/{base}": _ratio(tflops.get(fc), tflops.get(base))
                        for fc in flashcore_names for base in ("cudnn", "fa2")}


def _rounds_note(meta):
    rounds = meta.get("rounds", 1)
    return f" in {rounds} interleaved rounds" if rounds > 1 else ""


def markdown(meta, records, flashcore_names):
    """The table: TFLOPS per implementation, ratios to cuDNN and FA2, flashcore's accuracy."""
    lines = [f"### flashcore vs torch SDPA: {meta['device']}",
             "",
             f"commit {meta['commit']}, {meta['date']}, torch {meta['torch']}, "
             f"cuDNN {meta['cudnn']}, grid `{meta['grid']}`, TFLOPS = 4*b*hq*sq*sk*d/t "
             f"(halved when causal), median of up to {meta['iters']} runs"
             f"{_rounds_note(meta)}.",
             ""]
    ceilings = meta.get("ceilings") or {}
    if ceilings:
        lines += [f"Ceilings on this device: bf16 GEMM 8192^3 "
                  f"{_fmt(ceilings.get('bf16_gemm_tflops'))} TFLOPS, device-to-device copy "
                  f"{_fmt(ceilings.get('copy_gb_s'), 0)} GB/s (read + write).", ""]
    names = flashcore_names + ["cudnn", "fa2"]
    header = ["config"] + [f"{n} TFLOPS" for n in names]
    header += [f"{fc}/{b}" for fc in flashcore_names for b in ("cuDNN", "FA2")]
    header += [f"{fc} err / tol" for fc in flashcore_names] + ["check"]
    lines += ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    notes = []
    for record in records:
        results = record["results"]
        cells = [record["config"]]
        for name in names:
            r = results.get(name, {})
            tflops = r.get("tflops")
            cells.append(_fmt(tflops, 1 if tflops >= 10 else 3) if tflops else r.get("status", "-"))
            if r.get("status") == "n/a":
                notes.append(f"{record['config']} {name}: {r.get('reason')}")
        cells += [_fmt(record["ratios"].get(f"{fc}/{b}"), 2)
                  for fc in flashcore_names for b in ("cudnn", "fa2")]
        for fc in flashcore_names:
            r = results.get(fc, {})
            err = r.get("max_err_out")
            cells.append("-" if err is None else f"{err:.1e} / {record['tol_out']:.1e}")
        statuses = [results.get(fc, {}).get("status", "n/a") for fc in flashcore_names]
        cells.append("pass" if all(s == "ok" for s in statuses) else "/".join(statuses))
        lines.append("| " + " | ".join(cells) + " |")
    if notes:
        lines += ["", "n/a reasons:"] + [f"- {note}" for note in notes]
    slow_stretches = [f"- {record['config']} {name}: median {median:.3f} ms, min {fastest:.3f} ms"
                      for record in records for name, median, fastest in unsteady(record)]
    if slow_stretches:
        lines += ["", f"Unsteady timings (median > {UNSTEADY_MEDIAN_OVER_MIN} x min; every run "
                  "is in compare.json as times_ms):"] + slow_stretches
    return "\n".join(lines) + "\n"


def write(out_dir, meta, records, flashcore_names):
    os.makedirs(out_dir, exist_ok=True)
    table = markdown(meta, records, flashcore_names)
    with open(os.path.join(out_dir, "compare.json"), "w") as f:
        json.dump(_finite({"meta": meta, "records": records}), f, indent=1, allow_nan=False)
    with open(os.path.join(out_dir, "compare.md"), "w") as f:
        f.write(table)
    return table
