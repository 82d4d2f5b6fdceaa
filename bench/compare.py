#!/usr/bin/env python3
"""FlashCore side by side with FlashAttention-3 and torch SDPA's cuDNN and FlashAttention-2.

For each config of a grid: q, k, v are drawn once (torch.randn, std 1, BSHD) and every
implementation runs on those same tensors in this one process: flashcore.attention (one column
per --compare-backends entry), FA3 (fa3_fwd_interface.flash_attn_func from the fa3-fwd wheel,
when importable: see anchors/fetch.sh; bf16 only), SDPA with CUDNN_ATTENTION and with
FLASH_ATTENTION. Each gets a checked run (BENCHMARKS.md rule against a float64 reference on
sampled query rows of batch element 0; flashcore's output NaN-poisoned first), then warm-up and
timing (median), the implementations taking turns in interleaved rounds so they see the same
clocks: each run between CUDA events (--timing events), or replays of a CUDA graph of
--graph-calls calls (--timing graph; an impl whose capture fails falls back to events, and the
JSON says so). Writes compare.json and compare.md to --out and prints the markdown table last,
with the geometric mean and the lowest of each flashcore/anchor ratio over the run.

  python3 bench/compare.py --grid standard --out results/run1
  python3 bench/compare.py --grid llm --timing graph                  # model shapes, FA3
  python3 bench/compare.py --shapes my_shapes.txt --timing graph      # your own shapes
  python3 bench/compare.py --grid quick --impls flashcore,fa3         # skip SDPA's backends
  python3 bench/compare.py --grid quick --compare-backends sm80,sm90
  python3 bench/compare.py --grid tiny --device cpu --backend cpu     # no GPU needed
  python3 bench/compare.py --list --grid standard                     # configs only, no torch
  python3 bench/compare.py --grid serving --timing graph              # varlen, paged decode
  python3 bench/compare.py --grid standard --dtypes fp8               # FP8 beside FA3's FP8
  python3 bench/compare.py --grid tiny --dtypes fp8 --device cpu --backend cpu

--dtypes fp8 (issue 26) runs the grid's bf16 shapes in float8_e4m3fn: q, k, v drawn as above in
float32 and quantized per (batch, kv head) with descale = amax / 448 (FA3's q_descale/k_descale/
v_descale [batch, heads_kv]), bf16 out; FlashCore where a backend runs fp8 (else its cell says
why), FA3's FP8 forward from the same wheel, no SDPA. The check is issue 26's FP8 rule: against
float64 on the dequantized inputs, max error <= 2x the fp8 baseline's (P rounded to e4m3 before
PV) + 1e-3 and <= 1.5x FA3 FP8's error on the same inputs where FA3 ran.

--grid serving (compare_serving.py) times the serving layouts of issue 25: varlen prefill
against FA3's flash_attn_varlen_func and FlashCore's dense kernel on equal-length batches, and
decode over contiguous and paged caches against FlashCore's dense decode (K/V read rate, TB/s).
With --dtypes fp8 its varlen rows run in fp8 (quantized per sequence and kv head) beside FA3's
FP8 varlen, under the FP8 rule.

Exit code: 0 when every flashcore result ran and passed, 1 otherwise, 2 for bad arguments.
"""
import argparse
import datetime
import importlib.metadata
import os
import subprocess
import sys

import compare_grids
import compare_report
import compare_serving_grid

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GEMM_SIZE = 8192            # BENCHMARKS.md ceiling: bf16 GEMM 8192^3
COPY_BYTES = 1 << 30        # device-to-device copy ceiling: 1 GiB, far larger than any L2
CEILING_RUNS = 20
# The CPU path (no GPU, or --device cpu) is for the tiny grid: larger configs take minutes each.
CPU_MAX_FLOPS = 2e10
IMPLS = ("flashcore", "fa3", "cudnn", "fa2")  # --impls; the anchors (all but flashcore) need a GPU
ANCHORS = IMPLS[1:]
GRAPH_CALLS = 10  # --timing graph: calls captured per graph (BENCHMARKS.md: 10-50)
ALL_GRIDS = {**compare_grids.GRIDS, **compare_serving_grid.SERVING_GRIDS}


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog="grids:\n" + "\n".join(
                                    f"  {name:9} {desc}"
                                    for name, (desc, _) in ALL_GRIDS.items()))
    p.add_argument("--grid", default="quick", choices=list(ALL_GRIDS))
    p.add_argument("--shapes", metavar="FILE",
                   help="time the shapes of FILE instead of a grid: one a line, as in "
                        "bench/llm_shapes.txt (name batch seqlen_q seqlen_k heads_q heads_kv "
                        "head_dim causal); bf16 unless --dtypes asks for fp16 or fp8")
    p.add_argument("--dtypes", help="comma list filter, e.g. bf16,fp16")
    p.add_argument("--head-dims", help="comma list filter, e.g. 64,128")
    p.add_argument("--seqlens", help="comma list filter, e.g. 2048,16384")
    p.add_argument("--causal", default="both", choices=["both", "yes", "no"])
    p.add_argument("--backend", default="auto", help="flashcore backend: auto|sm80|sm90|cpu")
    p.add_argument("--compare-backends",
                   help="several flashcore backends side by side, e.g. sm80,sm90")
    p.add_argument("--impls", default=",".join(IMPLS),
                   help="comma list of the implementations to run, out of "
                        f"{','.join(IMPLS)} (default: all); flashcore stands for every "
                        "--compare-backends entry")
    p.add_argument("--device", default="auto", choices=["auto", "cuda", "cpu"])
    p.add_argument("--timing", default="events", choices=["events", "graph"],
                   help="events: every call between CUDA events; graph: replays of a CUDA graph "
                        "of --graph-calls calls, time per call (GPU only)")
    p.add_argument("--graph-calls", type=int, default=GRAPH_CALLS,
                   help=f"calls captured per CUDA graph with --timing graph ({GRAPH_CALLS})")
    p.add_argument("--iters", type=int,
                   help="timed runs per implementation (GPU 30, graph replays 15, CPU 3)")
    p.add_argument("--warmup", type=int,
                   help="untimed runs before timing (GPU 5, graph replays 2, CPU 1)")
    p.add_argument("--rounds", type=int,
                   help="interleaved timing rounds, at least (GPU 3, CPU 1): rounded up to "
                        "whole balanced Latin squares of the implementations timed; every "
                        "implementation runs iters / rounds timed runs per round")
    p.add_argument("--budget-s", type=float, default=3.0,
                   help="cap on timing seconds per implementation and config (min 5 runs)")
    p.add_argument("--check-rows", type=int, default=64, help="query rows of batch 0 checked")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default=os.path.join("results", "compare"))
    p.add_argument("--skip-ceilings", action="store_true", help="skip the GEMM and copy ceilings")
    p.add_argument("--list", action="store_true", help="print the configs and exit (no torch)")
    p.add_argument("--force", action="store_true", help="run large configs on the CPU anyway")
    args = p.parse_args(argv)
    for name in ("iters", "rounds", "graph_calls"):
        if getattr(args, name) is not None and getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be at least 1, got "
                    f"{getattr(args, name)}")
    args.impls = [name for name in args.impls.split(",") if name]
    unknown = [name for name in args.impls if name not in IMPLS]
    if unknown or not args.impls or len(set(args.impls)) != len(args.impls):
        p.error(f"--impls expects distinct names out of {','.join(IMPLS)}, got "
                f"{','.join(args.impls)!r}")
    dtypes = args.dtypes.split(",") if args.dtypes else None
    if dtypes and not set(dtypes) <= set(compare_grids.ALL_DTYPES):
        p.error(f"--dtypes expects bf16, fp16 and/or fp8, got {args.dtypes!r}")
    args.serving = args.grid in compare_serving_grid.SERVING_GRIDS
    if args.shapes and args.serving:
        p.error(f"--shapes replaces a dense grid, not --grid {args.grid}")
    if args.shapes:
        args.grid = "shapes:" + os.path.basename(args.shapes)
    if args.serving:
        if args.head_dims or args.seqlens or args.causal != "both":
            p.error(f"--grid {args.grid} has fixed shapes (compare_serving_grid.py): only "
                    "--dtypes filters it")
        args.configs = compare_serving_grid.SERVING_GRIDS[args.grid][1](dtypes or ("bf16",))
    else:
        args.configs = compare_grids.select_configs(
            args.grid, dtypes,
            args.head_dims and compare_grids.parse_int_list(args.head_dims, "--head-dims"),
            args.seqlens and compare_grids.parse_int_list(args.seqlens, "--seqlens"),
            args.causal,
            configs=args.shapes and compare_grids.shape_file_configs(args.shapes, dtypes))
    args.flashcore_backends = (args.compare_backends.split(",") if args.compare_backends
                               else [args.backend])
    return args


def git_commit():
    # A copy of the tree without .git (the accelerator machine) passes the commit in the env.
    if os.environ.get("FLASHCORE_COMMIT"):
        return os.environ["FLASHCORE_COMMIT"]
    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO_ROOT,
                                check=True, capture_output=True, text=True).stdout.strip()
        # Tracked files that differ from HEAD (work in progress, or a copy of the tree whose .git
        # lags behind its files, as on the accelerator machine): the run is not that commit's.
        changed = subprocess.run(["git", "diff", "--quiet", "HEAD", "--"], cwd=REPO_ROOT,
                                 capture_output=True).returncode == 1
        return commit + ("-dirty" if changed else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def measure_ceilings(torch):
    """METHOD.md: the two ceilings of this device, measured once per run."""
    from compare_runner import time_runs
    a = torch.randn(GEMM_SIZE, GEMM_SIZE, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(GEMM_SIZE, GEMM_SIZE, device="cuda", dtype=torch.bfloat16)
    gemm = time_runs(lambda: torch.matmul(a, b), 5, CEILING_RUNS, 10.0, True)
    del a, b
    src = torch.empty(COPY_BYTES, dtype=torch.uint8, device="cuda").random_(0, 255)
    dst = torch.empty_like(src)
    copy = time_runs(lambda: dst.copy_(src), 5, CEILING_RUNS, 10.0, True)
    del src, dst
    return {"bf16_gemm_tflops": 2 * GEMM_SIZE ** 3 / (gemm["median_ms"] * 1e-3) / 1e12,
            "copy_gb_s": 2 * COPY_BYTES / (copy["median_ms"] * 1e-3) / 1e9}


def import_flashcore():
    try:
        import flashcore
        return flashcore, None
    except Exception as error:  # not built, or built without the extension
        return None, f"{type(error).__name__}: {error}"


def import_fa3():
    """(flash_attn_func, wheel version, None) from the fa3-fwd wheel, or (None, None, why not).
    Never raises: without the wheel (ImportError) the FA3 column says "not installed"."""
    try:
        from fa3_fwd_interface import flash_attn_func
    except Exception as error:  # ImportError; OSError or RuntimeError for a build that won't load
        return None, None, f"{type(error).__name__}: {error}".splitlines()[0][:300]
    try:
        version = importlib.metadata.version("fa3-fwd")
    except Exception:  # installed with --target and no metadata on the path
        version = "unknown"
    return flash_attn_func, version, None


def anchor_names(impls, on_gpu):
    """The anchors of --impls that run, in the table's order: FA3 and SDPA's cuDNN and FA2 are
    GPU kernels, so a CPU run has none (pure: testable without torch)."""
    return [name for name in ANCHORS if name in impls] if on_gpu else []


def run_fp8_config(config, args, settings, device, on_gpu, impls, record):
    """An fp8 row: float32 draws quantized per (batch, kv head), the FP8 rule's checker, every
    implementation on the fp8 tensors and descales, then the FA3 FP8 bound on flashcore's."""
    import compare_accuracy
    import compare_runner
    q8, k8, v8, descales = compare_accuracy.fp8_inputs(config, device)
    checker = compare_accuracy.Fp8Checker(q8, k8, v8, descales, config.causal,
                                          config.head_dim ** -0.5, args.check_rows)
    record.update(baseline_err_out=checker.baseline_err_out, tol_out=checker.tol_out,
                  baseline_err_lse=checker.baseline_err_lse, tol_lse=checker.tol_lse)
    results = compare_runner.run_impls(impls, q8, k8, v8, config.causal, checker, settings,
                                       on_gpu, descales)
    for impl in impls:
        result = results[impl.name]
        if "median_ms" in result:
            result["tflops"] = config.flops() / (result["median_ms"] * 1e-3) / 1e12
        record["results"][impl.name] = result
    compare_accuracy.apply_fa3_fp8_bound(
        record, [i.name for i in impls if isinstance(i, compare_runner.FlashCoreImpl)])


def run_config(config, seed, args, settings, device, on_gpu, impls, record):
    """Fresh inputs for one config, its reference, then every implementation on them."""
    import torch
    import compare_accuracy
    import compare_runner
    torch.manual_seed(seed)
    if config.dtype == "fp8":
        return run_fp8_config(config, args, settings, device, on_gpu, impls, record)
    dtype = compare_runner.TORCH_DTYPES[config.dtype]
    q = torch.randn(config.batch, config.seqlen_q, config.heads_q, config.head_dim,
                    dtype=dtype, device=device)
    k = torch.randn(config.batch, config.seqlen_k, config.heads_kv, config.head_dim,
                    dtype=dtype, device=device)
    v = torch.randn_like(k)
    checker = compare_accuracy.Checker(q, k, v, config.causal, config.head_dim ** -0.5,
                                       args.check_rows)
    record.update(baseline_err_out=checker.baseline_err_out, tol_out=checker.tol_out,
                  baseline_err_lse=checker.baseline_err_lse, tol_lse=checker.tol_lse)
    results = compare_runner.run_impls(impls, q, k, v, config.causal, checker, settings, on_gpu)
    for impl in impls:
        result = results[impl.name]
        if "median_ms" in result:
            result["tflops"] = config.flops() / (result["median_ms"] * 1e-3) / 1e12
        record["results"][impl.name] = result


def main(argv):
    args = parse_args(argv)
    if args.list:
        for config in args.configs:
            print(config.describe())
        return 0

    import torch
    import compare_runner

    on_gpu = args.device == "cuda" or (args.device == "auto" and torch.cuda.is_available())
    device = "cuda" if on_gpu else "cpu"
    too_big = [c for c in args.configs if c.flops() > CPU_MAX_FLOPS]
    if not on_gpu and too_big and not args.force:
        print(f"compare.py: error: no GPU in use and {len(too_big)} config(s) of grid "
              f"{args.grid!r} exceed {CPU_MAX_FLOPS:.0e} FLOPs (e.g. {too_big[0].describe()}); "
              "use --grid tiny, or --force", file=sys.stderr)
        return 2
    timing = args.timing if on_gpu else "events"
    if timing != args.timing:
        print("warning: --timing graph needs a GPU; timing with the host clock", file=sys.stderr)
    # With graphs, warm-up counts replays of calls already warmed up before capture.
    default_warmup = (2 if timing == "graph" else 5) if on_gpu else 1
    # A graph replay is the mean of graph_calls calls: 15 of them hold 150 calls.
    default_iters = (15 if timing == "graph" else 30) if on_gpu else 3
    settings = argparse.Namespace(iters=args.iters or default_iters,
                                  warmup=args.warmup if args.warmup is not None
                                  else default_warmup,
                                  budget_s=args.budget_s,
                                  rounds=args.rounds or (3 if on_gpu else 1),
                                  timing=timing, graph_calls=args.graph_calls)
    module, import_error = import_flashcore() if "flashcore" in args.impls else (None, None)
    if import_error:
        print(f"warning: flashcore not importable ({import_error}); its columns will be n/a",
              file=sys.stderr)
    if args.serving:
        return run_serving(args, settings, on_gpu, module)
    flashcore_impls = ([compare_runner.FlashCoreImpl(module, b) for b in args.flashcore_backends]
                       if "flashcore" in args.impls else [])
    flashcore_names = [impl.name for impl in flashcore_impls]
    anchors = anchor_names(args.impls, on_gpu)
    fa3_func, fa3_version, fa3_error = import_fa3() if "fa3" in anchors else (None, None, None)
    if fa3_error:
        print(f"warning: FA3 not importable ({fa3_error}); its column will say not installed "
              "(see tools/device/check.sh)", file=sys.stderr)
    baselines = [compare_runner.Fa3Impl(fa3_func, fa3_error) if name == "fa3"
                 else compare_runner.SdpaImpl(name) for name in anchors]

    meta = {"device": torch.cuda.get_device_name() if on_gpu else f"cpu ({os.cpu_count()} cores)",
            "commit": git_commit(),
            "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            "torch": torch.__version__, "cuda": torch.version.cuda,
            "cudnn": torch.backends.cudnn.version() if on_gpu else None,
            "flashcore": getattr(module, "__version__", None), "flashcore_import_error":
            import_error, "grid": args.grid, "argv": argv, "iters": settings.iters,
            "warmup": settings.warmup, "rounds": settings.rounds,
            "budget_s": settings.budget_s,
            "check_rows": args.check_rows, "seed": args.seed,
            "impls": flashcore_names + anchors, "anchors": anchors, "timing": timing,
            "graph_calls": args.graph_calls if timing == "graph" else None,
            "fa3": fa3_version, "fa3_import_error": fa3_error,
            "layouts": {"flashcore": "BSHD contiguous", "fa3": "BSHD contiguous (native)",
                        "sdpa": "BHSD views (transpose(1, 2)) of the same BSHD tensors, no copy"}}
    if on_gpu and not args.skip_ceilings:
        try:
            meta["ceilings"] = measure_ceilings(torch)
            print(f"ceilings: {meta['ceilings']}", file=sys.stderr)
        except Exception as error:  # never lose the grid to the ceilings
            meta["ceilings_error"] = compare_runner.short_reason(error)
            print(f"warning: ceilings not measured: {meta['ceilings_error']}", file=sys.stderr)

    records = []
    for index, config in enumerate(args.configs):
        record = {"config": config.describe(), **config.as_dict(), "flops": config.flops(),
                  "results": {}}
        try:
            run_config(config, args.seed + index, args, settings, device, on_gpu,
                       flashcore_impls + baselines, record)
        except Exception as error:  # inputs or reference out of memory, ...: record, go on
            record["error"] = compare_runner.short_reason(error)
            for impl in flashcore_impls + baselines:
                record["results"].setdefault(impl.name, {"status": "n/a",
                                                         "reason": record["error"]})
        compare_report.add_ratios(record, flashcore_names, anchors)
        records.append(record)
        summary = ", ".join(f"{n} {r.get('tflops', 0):.1f}" if r["status"] == "ok"
                            else f"{n} {r.get('cell', r['status'])}"
                            for n, r in record["results"].items())
        print(f"[{index + 1}/{len(args.configs)}] {record['config']}: {summary}",
              file=sys.stderr, flush=True)

    table = compare_report.write(args.out, meta, records, flashcore_names)
    print(f"wrote {args.out}/compare.json and compare.md", file=sys.stderr)
    print(table)
    ok = all(r["results"][n]["status"] == "ok" for r in records for n in flashcore_names)
    return 0 if ok else 1


def run_serving(args, settings, on_gpu, module):
    """--grid serving: compare_serving's rows; writes compare_serving.json and .md to --out."""
    import json

    import torch
    import compare_serving
    records, table = compare_serving.run(args.configs, args, settings, on_gpu, module)
    meta = {"device": torch.cuda.get_device_name() if on_gpu else f"cpu ({os.cpu_count()} cores)",
            "commit": git_commit(), "grid": args.grid, "timing": settings.timing,
            "graph_calls": args.graph_calls if settings.timing == "graph" else None,
            "torch": torch.__version__, "flashcore": getattr(module, "__version__", None),
            "fa3_paged": compare_serving.FA3_NO_PAGED}
    os.makedirs(args.out, exist_ok=True)
    for record in records:
        record.pop("config_obj")
    with open(os.path.join(args.out, "compare_serving.json"), "w") as f:
        json.dump(compare_report._finite({"meta": meta, "records": records}), f, indent=1)
    with open(os.path.join(args.out, "compare_serving.md"), "w") as f:
        f.write(table + "\n")
    print(f"wrote {args.out}/compare_serving.json and compare_serving.md", file=sys.stderr)
    print(table)
    names = [name for name in records[0]["results"] if name.startswith("flashcore")] if records \
        else []
    ok = all(r["results"][n].get("status") == "ok" for r in records for n in names)
    return 0 if ok and module is not None else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
