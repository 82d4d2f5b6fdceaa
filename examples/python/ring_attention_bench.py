"""Ring attention (flashcore.distributed) across the GPUs of one host: correctness against
single-GPU FlashCore on the whole sequence, per-GPU TFLOPS, scaling efficiency, NCCL bandwidth
and how much of the communication the attention hides.

    torchrun --nproc-per-node=2 examples/python/ring_attention_bench.py --seqlen 65536
    torchrun --nproc-per-node=4 examples/python/ring_attention_bench.py --seqlen 131072 524288
    torchrun --nproc-per-node=2 examples/python/ring_attention_bench.py --seqlen 32768 \\
        --masks causal,full --json ring.json
    torchrun --nproc-per-node=2 examples/python/ring_attention_bench.py --device cpu \\
        --seqlen 64 --heads 4 2 --head-dim 64          # gloo smoke run, no GPU
    torchrun --nproc-per-node=2 examples/python/ring_attention_bench.py --seqlen 16384 \
        --head-dim 64 256 --dtype fp16 bf16 --masks causal,full     # every combination
    python examples/python/ring_attention_bench.py --summary a.json b.json   # the table only

NVLink multicast stays off on the shared machines: the script sets NCCL_NVLS_ENABLE=0 and
TORCH_SYMM_MEM_DISABLE_MULTICAST=1 (os.environ.setdefault, before init_process_group; a value
already in the environment is kept and reported). Launch other multi-GPU scripts the same way.

Default shape: batch 1, 32 query / 8 KV heads, head_dim 128, bf16, causal in the zigzag layout;
--seqlen defaults to 32k tokens per GPU (64k on 2, 128k on 4). Per configuration:

- check: rank 0 draws q, k, v (normal, std 1) and broadcasts them; each rank takes its shard and
  runs ring_attention; the gathered out and lse are checked on rank 0 by the BENCHMARKS.md rule
  (bench/compare_accuracy.py: float64 reference and same-precision baseline on sampled query
  rows, every head, plus the rows at every shard edge), and compared in full with single-GPU
  flashcore.attention on the whole sequence (max |ring - single|).
- ring_ms: ring_attention (check_ranks=False) timed with CUDA events after warm-up, median of
  --iters, the slowest rank. TFLOPS count 4 * b * hq * d * S^2 (halved when causal).
- single_full: flashcore.attention on the whole sequence on rank 0's GPU.
- share: one GPU's share of the work as one GPU runs it: the rank's attention calls with its
  own K/V at every step, no communication, no merge (attention_ms).
- compute_ms: the same calls plus the lse merge; comm_ms: the ring's W-1 P2P passes alone;
  comm_GBps: bytes one rank sends per pass / time per pass.
- efficiency_vs_share = ring throughput / (W x share throughput); efficiency_vs_full = ring
  throughput / (W x single_full throughput); hidden = (comm + compute - ring) / comm.

--json writes every number, per rank too. Exit code 1 when a check fails.
"""

import argparse
import functools
import json
import os
import pathlib
import statistics
import subprocess
import sys
import time

os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
os.environ.setdefault("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1")

REPO = pathlib.Path(__file__).resolve().parents[2]
MULTICAST_ENV = ("NCCL_NVLS_ENABLE", "TORCH_SYMM_MEM_DISABLE_MULTICAST")
# Recorded with the multicast switches: SMs FlashCore's kernels leave to NCCL's.
SM_MARGIN_ENV = "FLASHCORE_SM_MARGIN"
BIG_SEQLEN = 1 << 18  # above this, fewer check rows (the float64 reference holds rows x S)


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", choices=("cuda", "cpu"), default="cuda",
                   help="cuda: NCCL, one GPU per rank; cpu: gloo, the CPU backend (smoke run)")
    p.add_argument("--seqlen", type=int, nargs="+", default=None,
                   help="total tokens of the sequence (default 32768 x world size)")
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--heads", type=int, nargs=2, default=(32, 8), metavar=("HQ", "HKV"))
    p.add_argument("--head-dim", type=int, nargs="+", default=[128])
    p.add_argument("--dtype", choices=("bf16", "fp16", "fp32"), nargs="+", default=["bf16"])
    p.add_argument("--masks", default="causal", help="comma list of causal, full")
    p.add_argument("--layout", choices=("zigzag", "contiguous"), default="zigzag",
                   help="layout of causal runs (non-causal runs use contiguous)")
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--iters", type=int, default=10, help="timed ring iterations")
    p.add_argument("--single-iters", type=int, default=5,
                   help="timed single-GPU iterations on the whole sequence (0: skip)")
    p.add_argument("--check-rows", type=int, default=None,
                   help=f"sampled query rows of the check (default 64; 16 above {BIG_SEQLEN})")
    p.add_argument("--no-check", action="store_true", help="skip the correctness check")
    p.add_argument("--nccl-max-ctas", type=int, default=None, metavar="N",
                   help="cap NCCL's kernels at N CTAs (ProcessGroupNCCL config max_ctas), so "
                        "they fit the SMs that FLASHCORE_SM_MARGIN leaves free")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", default=None, help="write the results here (rank 0)")
    p.add_argument("--summary", nargs="+", default=None, metavar="JSON",
                   help="print the table of earlier --json files and exit (no torch needed)")
    args = p.parse_args(argv)
    masks = [m.strip() for m in args.masks.split(",") if m.strip()]
    if not masks or any(m not in ("causal", "full") for m in masks):
        p.error(f"--masks takes causal and/or full, got {args.masks!r}")
    args.masks = masks
    if args.nccl_max_ctas is not None:
        if args.nccl_max_ctas < 1:
            p.error(f"--nccl-max-ctas must be at least 1, got {args.nccl_max_ctas}")
        if args.device != "cuda":
            p.error(f"--nccl-max-ctas {args.nccl_max_ctas} caps NCCL's kernels: it needs "
                    f"--device cuda, got --device {args.device}")
    return args


# ---- report ---------------------------------------------------------------------------------

def _fmt(value, spec):
    return "-" if value is None else format(value, spec)


def table(reports):
    """Markdown rows: one per configuration of every report."""
    lines = ["| W | seqlen | shape | mask | check | max err / tol | ring ms | TFLOPS/GPU | single TFLOPS "
             "(full / share) | efficiency (share / full) | comm ms | P2P GB/s | hidden |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for report in reports:
        margin = (report.get("env") or {}).get(SM_MARGIN_ENV)
        ctas = (report.get("args") or {}).get("nccl_max_ctas")
        notes = ([f"SM margin {margin}"] if margin else []) + (
            [f"NCCL max {ctas} CTAs"] if ctas is not None else [])
        world = f"{report['world']}" + (f" ({', '.join(notes)})" if notes else "")
        for r in report["results"]:
            check = r.get("check") or {}
            status = "-" if not check else ("pass" if check.get("pass") else "FAIL")
            err = (f"{check['max_err_out']:.2e} / {check['tol_out']:.2e}"
                   if "max_err_out" in check else "-")
            lines.append(
                f"| {world} | {r['seqlen']} | {r['heads_q']}/{r['heads_kv']} "
                f"d{r['head_dim']} {r['dtype']} | "
                f"{'causal ' + r['layout'] if r['causal'] else 'full'}"
                f" | {status} | {err} | {_fmt(r['ring_ms'], '.2f')} | "
                f"{_fmt(r['tflops_per_gpu'], '.4g')} | {_fmt(r['single_full_tflops'], '.4g')} / "
                f"{_fmt(r['share_tflops'], '.4g')} | {_fmt(r['efficiency_vs_share'], '.1%')} / "
                f"{_fmt(r['efficiency_vs_full'], '.1%')} | {_fmt(r['comm_ms'], '.2f')} | "
                f"{_fmt(r['comm_GBps'], '.1f')} | {_fmt(r['hidden_fraction'], '.0%')} |")
    return "\n".join(lines)


def summary_main(paths):
    reports = [json.loads(pathlib.Path(p).read_text()) for p in paths]
    devices = sorted({f"{r['world']} x {r['device']}" for r in reports})
    print(f"ring attention ({', '.join(devices)}; commit "
          f"{', '.join(sorted({r['commit'] for r in reports}))})")
    print(table(reports))
    return 0 if all((x.get("check") or {}).get("pass", True) for r in reports
                    for x in r["results"]) else 1


# ---- measurement ------------------------------------------------------------------------------

class Harness:
    """The process group, the timers and the modules one rank works with."""

    def __init__(self, args):
        import torch
        import torch.distributed as dist

        sys.path.insert(0, str(REPO / "bench"))
        import compare_accuracy
        import compare_runner
        import flashcore
        from flashcore import _ring_plan
        from flashcore import distributed

        self.torch, self.dist, self.flashcore = torch, dist, flashcore
        self.plan, self.fd, self.accuracy = _ring_plan, distributed, compare_accuracy
        self.runner = compare_runner
        self.on_gpu = args.device == "cuda"
        if self.on_gpu:
            torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
        else:
            torch.set_num_threads(max(1, (os.cpu_count() or 1) // int(
                os.environ.get("LOCAL_WORLD_SIZE", "1"))))
        if self.on_gpu and args.nccl_max_ctas is not None:
            options = dist.ProcessGroupNCCL.Options()
            options.config.max_ctas = args.nccl_max_ctas
            dist.init_process_group("nccl", pg_options=options)
        else:
            dist.init_process_group("nccl" if self.on_gpu else "gloo")
        self.rank, self.world = dist.get_rank(), dist.get_world_size()
        self.device = (torch.device("cuda", torch.cuda.current_device()) if self.on_gpu
                       else torch.device("cpu"))
        self.say = print if self.rank == 0 else (lambda *a, **k: None)

    def barrier(self):
        if self.on_gpu:
            self.dist.barrier(device_ids=[self.device.index])
        else:
            self.dist.barrier()

    def time_once(self, fn):
        """ms of one fn() call: CUDA events on the GPU, the host clock on the CPU."""
        if not self.on_gpu:
            begin = time.perf_counter()
            fn()
            return (time.perf_counter() - begin) * 1e3
        torch = self.torch
        torch.cuda.synchronize()
        start, end = (torch.cuda.Event(enable_timing=True) for _ in range(2))
        start.record()
        fn()
        end.record()
        end.synchronize()
        return start.elapsed_time(end)

    def rounds(self, fns, rounds, warmup):
        """{name: median ms} over at least `rounds` rounds (whole balanced Latin squares,
        compare_runner) in which every fn runs once, every rank starting each run together. The
        machines are noisy, so the fns take turns; their orders put each one in every place and
        right after every other one equally often (a fixed rotation kept neighbours, and the
        clock a kernel meets depends on the one before it)."""
        for fn in fns.values():
            for _ in range(warmup):
                fn()
        times = {name: [] for name in fns}
        for order in self.runner.balanced_rounds(list(fns), rounds):
            for name in order:
                self.barrier()
                times[name].append(self.time_once(fns[name]))
        return {name: statistics.median(t) for name, t in times.items()}

    def gather(self, value):
        values = [None] * self.world
        self.dist.all_gather_object(values, value)
        return values


def draw_inputs(h, args, seqlen, head_dim, dtype):
    """q, k, v of the whole sequence: drawn on rank 0 (normal, std 1), broadcast to all."""
    torch = h.torch
    generator = torch.Generator(device=h.device).manual_seed(args.seed + seqlen + head_dim)
    heads_q, heads_kv = args.heads
    shapes = [(args.batch, seqlen, heads, head_dim) for heads in (heads_q, heads_kv, heads_kv)]
    full = [torch.empty(shape, dtype=dtype, device=h.device) for shape in shapes]
    for tensor in full:
        if h.rank == 0:
            tensor.copy_(torch.randn(tensor.shape, generator=generator, device=h.device))
        h.dist.broadcast(tensor, 0)
    return full


# Elements compared at a time: max_error works in float64, and a 512k-token output in float64
# at once is 16 GiB beside the inputs and both outputs.
MAX_ERROR_CHUNK = 1 << 26


def chunked_max_error(h, got, want):
    """h.accuracy.max_error over the flattened tensors, MAX_ERROR_CHUNK elements at a time."""
    got, want = got.reshape(-1), want.reshape(-1)
    return max((h.accuracy.max_error(got[i:i + MAX_ERROR_CHUNK], want[i:i + MAX_ERROR_CHUNK])
                for i in range(0, got.numel(), MAX_ERROR_CHUNK)), default=0.0)


def check_config(h, args, full, out, lse, causal, layout, chunk):
    """Rank 0: the gathered ring result by the accuracy rule (sampled rows and every shard
    edge) and against single-GPU FlashCore on the whole sequence."""
    single_out, single_lse = h.flashcore.attention(*full, causal=causal, return_lse=True)
    seqlen, head_dim = full[0].shape[1], full[0].shape[3]
    rows = args.check_rows or (64 if seqlen <= BIG_SEQLEN else 16)
    edges = [e for c in range(h.plan.chunk_count(layout, h.world) + 1)
             for e in (c * chunk - 1, c * chunk)]
    checker = h.accuracy.Checker(*full, causal, 1.0 / head_dim ** 0.5, rows, extra_rows=edges)
    check = checker.check(out, lse)
    check["tol_out"], check["tol_lse"] = checker.tol_out, checker.tol_lse
    check["single"] = checker.check(single_out, single_lse)
    check["max_diff_vs_single_out"] = chunked_max_error(h, out, single_out)
    check["max_diff_vs_single_lse"] = chunked_max_error(h, lse, single_lse)
    h.say(f"   check ({check['rows_checked']} rows x {full[0].shape[2]} heads): "
          f"{'pass' if check['pass'] else 'FAIL'}, max err out {check['max_err_out']:.3g} "
          f"(tol {checker.tol_out:.3g}), lse {check.get('max_err_lse', float('nan')):.3g} "
          f"(tol {checker.tol_lse:.3g}); single GPU: out err "
          f"{check['single']['max_err_out']:.3g}; max |ring - single| out "
          f"{check['max_diff_vs_single_out']:.3g}, lse {check['max_diff_vs_single_lse']:.3g}")
    return check


def time_config(h, args, q, k, v, causal, layout):
    """Median ms of this rank's ring call, its calls without communication (with and without
    the merge) and the ring's P2P passes alone, in interleaved rounds."""
    fd = h.fd
    ring = fd._Ring(None)
    kv = fd._packed_kv(k, v)
    spare = h.torch.empty_like(kv)
    lse_shape = (q.shape[0], q.shape[2], q.shape[1])

    def attention_only():
        return fd._ring_steps(q, kv, ring, causal, layout, None, communicate=False)

    def passes():
        send, recv = kv, spare
        for _ in range(h.world - 1):
            fd._wait(ring.exchange(send, recv))
            send, recv = recv, send

    fns = {"ring_ms": lambda: fd.ring_attention(q, k, v, causal=causal, layout=layout,
                                                check_ranks=False),
           "compute_ms": lambda: fd._combine(attention_only(), q, lse_shape),
           "attention_ms": attention_only}
    if h.world > 1:
        fns["comm_ms"] = passes
    times = h.rounds(fns, args.iters, args.warmup)
    times.setdefault("comm_ms", 0.0)
    return times


def run_config(h, args, seqlen, head_dim, dtype_name, mask):
    torch, plan, fd = h.torch, h.plan, h.fd
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[dtype_name]
    heads_q, heads_kv = args.heads
    world = h.world
    causal = mask == "causal"
    layout = args.layout if causal else "contiguous"
    chunk = plan.check_divisible(layout, seqlen, world)
    local = seqlen // world
    per_head = 4.0 * args.batch * heads_q * head_dim
    total_flops = per_head * seqlen * seqlen * (0.5 if causal else 1.0)
    share_flops = per_head * plan.rank_pairs(layout, causal, h.rank, world, local, local)
    h.say(f"== seqlen {seqlen} ({world} x {local}), {mask}{' ' + layout if causal else ''}, "
          f"b{args.batch} hq{heads_q} hkv{heads_kv} d{head_dim} {dtype_name}, {h.device.type}")
    entry = {"seqlen": seqlen, "batch": args.batch, "heads_q": heads_q, "heads_kv": heads_kv,
             "head_dim": head_dim, "dtype": dtype_name, "causal": causal, "layout": layout,
             "chunk": chunk, "check": None}
    shard = fd.zigzag_shard if layout == "zigzag" else fd.contiguous_shard
    unshard = fd.zigzag_unshard if layout == "zigzag" else fd.contiguous_unshard
    with torch.no_grad():
        full = draw_inputs(h, args, seqlen, head_dim, dtype)
        q, k, v = (shard(t, dim=1).contiguous() for t in full)
        out, lse = fd.ring_attention(q, k, v, causal=causal, layout=layout, return_lse=True)
        if not args.no_check:
            out, lse = unshard(out, dim=1), unshard(lse, dim=2)
            if h.rank == 0:
                entry["check"] = check_config(h, args, full, out, lse, causal, layout, chunk)
        del out, lse
        if h.on_gpu:
            torch.cuda.empty_cache()
        times = time_config(h, args, q, k, v, causal, layout)
        single_ms = None
        if h.rank == 0 and args.single_iters > 0:  # the other ranks wait at the barrier below
            single = functools.partial(h.flashcore.attention, *full, causal=causal)
            single()  # warm-up
            single_ms = statistics.median(h.time_once(single) for _ in range(args.single_iters))
        h.barrier()
    del full, q, k, v
    if h.on_gpu:
        torch.cuda.empty_cache()

    per_rank = h.gather(dict(times, share_flops=share_flops))
    single_ms = h.gather(single_ms)[0]
    slowest = max(r["ring_ms"] for r in per_rank)
    ring_tflops = total_flops / slowest / 1e9
    share_tflops = statistics.mean(r["share_flops"] / r["attention_ms"] / 1e9 for r in per_rank)
    single_tflops = total_flops / single_ms / 1e9 if single_ms else None
    pass_bytes = 2 * args.batch * local * heads_kv * head_dim * dtype.itemsize
    comm_ms = max(r["comm_ms"] for r in per_rank)
    hidden = [(r["comm_ms"] + r["compute_ms"] - r["ring_ms"]) / r["comm_ms"]
              for r in per_rank if r["comm_ms"]]
    entry.update({
        "ring_ms": slowest, "tflops_per_gpu": ring_tflops / world, "ring_tflops": ring_tflops,
        "single_full_ms": single_ms, "single_full_tflops": single_tflops,
        "share_tflops": share_tflops,
        "efficiency_vs_share": ring_tflops / (world * share_tflops),
        "efficiency_vs_full": ring_tflops / (world * single_tflops) if single_tflops else None,
        "compute_ms": max(r["compute_ms"] for r in per_rank),
        "attention_ms": max(r["attention_ms"] for r in per_rank),
        "comm_ms": comm_ms if world > 1 else None, "comm_bytes_per_pass": pass_bytes,
        "comm_GBps": (pass_bytes * (world - 1) / (comm_ms * 1e-3) / 1e9
                      if world > 1 and comm_ms else None),
        "hidden_fraction": min(hidden) if hidden else None,
        "per_rank": per_rank, "total_flops": total_flops,
    })
    h.say(f"   ring {slowest:.2f} ms: {entry['tflops_per_gpu']:.1f} TFLOPS per GPU; single GPU "
          f"{_fmt(single_tflops, '.1f')} TFLOPS (full sequence), {share_tflops:.1f} (one GPU's "
          f"share); scaling efficiency {entry['efficiency_vs_share']:.1%} of {world} x share, "
          f"{_fmt(entry['efficiency_vs_full'], '.1%')} of {world} x full")
    h.say(f"   compute {entry['compute_ms']:.2f} ms (attention {entry['attention_ms']:.2f}), "
          f"comm {_fmt(entry['comm_ms'], '.2f')} ms for {world - 1} passes of "
          f"{pass_bytes / 1e6:.1f} MB: {_fmt(entry['comm_GBps'], '.1f')} GB/s per rank; hidden "
          f"{_fmt(entry['hidden_fraction'], '.0%')} (the slowest rank: min over ranks)")
    return entry


def main(argv=None):
    args = parse_args(argv)
    if args.summary:
        return summary_main(args.summary)
    h = Harness(args)
    results = [run_config(h, args, seqlen, head_dim, dtype_name, mask)
               for seqlen in (args.seqlen or [32768 * h.world])
               for head_dim in args.head_dim for dtype_name in args.dtype for mask in args.masks]
    failed = any(r["check"] is not None and not r["check"]["pass"] for r in results)
    if h.rank == 0:
        torch = h.torch
        report = {
            "device": torch.cuda.get_device_name() if h.on_gpu else "cpu", "world": h.world,
            "backend": h.dist.get_backend(), "torch": torch.__version__,
            "nccl": ".".join(map(str, torch.cuda.nccl.version())) if h.on_gpu else None,
            "commit": os.environ.get("FLASHCORE_COMMIT") or _git_commit(),
            "env": {name: os.environ.get(name) for name in (*MULTICAST_ENV, SM_MARGIN_ENV)},
            "args": {k: v for k, v in vars(args).items() if k != "summary"},
            "results": results,
        }
        if args.json:
            pathlib.Path(args.json).write_text(json.dumps(report, indent=1) + "\n")
        print()
        print(table([report]))
    h.dist.destroy_process_group()
    return 1 if failed else 0


def _git_commit():
    try:
        return subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"],
                              capture_output=True, text=True, timeout=10).stdout.strip() or "?"
    except (OSError, subprocess.SubprocessError):
        return "?"


if __name__ == "__main__":
    sys.exit(main())
