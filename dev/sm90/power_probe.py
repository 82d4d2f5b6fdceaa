#!/usr/bin/env python3
"""Clock, power and throttle reasons while one attention kernel runs back to back.

Question it answers: when one kernel runs slower than another (fp16 against bf16, ours against
cuDNN), is the card holding a lower SM clock (the power cap) or is the kernel slower at the same
clock? And do the short-burst grid figures hold under sustained load (docs/kernels.md, run 50)?
Each (shape, dtype, implementation) runs for --seconds without pause while `nvidia-smi -lms`
samples the SM clock, the board power and the active clock-event reasons; the samples of the
segment's second half are summarized, beside the TFLOPS of that half.

  PYTHONPATH=build/python python3 dev/sm90/power_probe.py --seconds 2 --out probe.json

Reads the card's state only; never changes clocks, power limits or modes.
"""
import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import threading
import time

import torch

import flashcore

# The implementations and grid configs bench/compare.py uses, called the same way here.
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench"))
import compare_accuracy  # noqa: E402
import compare_grids  # noqa: E402
import compare_runner  # noqa: E402

FIELDS = "clocks.sm,power.draw,temperature.gpu,clocks_event_reasons.active"
# nvidia-smi's sampling period: 50 samples a second, several per second-half of a 2 s segment
# even for the slowest configs (~3 ms a call).
SAMPLE_MS = 20
# How long nvidia-smi needs to print its first sample after it starts.
SAMPLER_START_S = 0.5
# Calls timed once to size a segment's halves (one call alone is too noisy to size them).
SIZING_CALLS = 3
# (head_dim, causal, seqlen) of the standard grid (compare_grids.standard_config).
SHAPES = [(128, False, 4096), (256, False, 4096), (64, False, 4096), (128, True, 4096)]


class Sampler:
    """nvidia-smi in the background, each line stamped with the host clock on arrival."""

    def __init__(self):
        self.samples = []
        self.proc = subprocess.Popen(
            ["nvidia-smi", f"--query-gpu={FIELDS}", "--format=csv,noheader,nounits",
             f"-lms={SAMPLE_MS}"], stdout=subprocess.PIPE, text=True)
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self):
        for line in self.proc.stdout:
            parts = [x.strip() for x in line.split(",")]
            try:
                self.samples.append((time.time(), float(parts[0]), float(parts[1]),
                                     float(parts[2]), parts[3]))
            except (ValueError, IndexError):
                pass

    def between(self, begin, end):
        return [s for s in self.samples if begin <= s[0] <= end]

    def stop(self):
        self.proc.terminate()


def implementations():
    """FlashCore, cuDNN and FA2 through SDPA, and FA3 where the fa3-fwd wheel imports."""
    impls = [compare_runner.FlashCoreImpl(flashcore, None), compare_runner.SdpaImpl("cudnn"),
             compare_runner.SdpaImpl("fa2")]
    try:
        from fa3_fwd_interface import flash_attn_func
        impls.append(compare_runner.Fa3Impl(flash_attn_func))
    except Exception as error:  # not installed, or a build that will not load
        print(f"FA3 left out: {compare_runner.short_reason(error)}", file=sys.stderr)
    return impls


def inputs(config):
    """q, k, v of a standard-grid config (std 1) and the call's extra arguments: fp8 inputs come
    as compare.py draws them (compare_accuracy.fp8_inputs), with their descales."""
    if config.dtype == compare_grids.FP8:
        return compare_accuracy.fp8_inputs(config, "cuda")
    dtype = compare_runner.TORCH_DTYPES[config.dtype]
    q_shape = (config.batch, config.seqlen_q, config.heads_q, config.head_dim)
    kv_shape = (config.batch, config.seqlen_k, config.heads_kv, config.head_dim)
    return (*(torch.randn(shape, device="cuda", dtype=dtype)
              for shape in (q_shape, kv_shape, kv_shape)), {})


def watts(power_w):
    return "n/a" if power_w is None else f"{power_w:.0f}"


def segment(fn, seconds, sampler, flops):
    """Runs fn back to back for about `seconds`: a first half to reach the steady clock and
    power, then a timed second half whose nvidia-smi samples are summarized."""
    fn()
    torch.cuda.synchronize()
    begin = time.time()
    for _ in range(SIZING_CALLS):
        fn()
    torch.cuda.synchronize()
    seconds_per_call = (time.time() - begin) / SIZING_CALLS
    runs_per_half = max(SIZING_CALLS, int(seconds / 2 / seconds_per_call))
    for _ in range(runs_per_half):
        fn()
    torch.cuda.synchronize()
    half = time.time()
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(runs_per_half):
        fn()
    stop.record()
    torch.cuda.synchronize()
    samples = sampler.between(half, time.time())
    reasons = [s[4] for s in samples]
    return {
        "tflops": flops * runs_per_half / (start.elapsed_time(stop) * 1e-3) * 1e-12,
        "sm_mhz": statistics.median(s[1] for s in samples) if samples else None,
        "sm_mhz_min": min(s[1] for s in samples) if samples else None,
        "power_w": statistics.median(s[2] for s in samples) if samples else None,
        "temp_c": max(s[3] for s in samples) if samples else None,
        "reasons": max(set(reasons), key=reasons.count) if reasons else None,
        "samples": len(samples),
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=2.0)
    parser.add_argument("--out", default="power_probe.json")
    parser.add_argument("--shapes", default=None,
                        help="head_dim:causal:seqlen list, e.g. 128:0:1024,64:1:1024 "
                             "(default: the 4k shapes of SHAPES)")
    parser.add_argument("--dtypes", default=",".join(compare_grids.DTYPES),
                        help="comma list of the dtypes to run, fp16, bf16 and / or fp8 "
                             "(default: %(default)s)")
    args = parser.parse_args()
    shapes = SHAPES
    if args.shapes:
        shapes = [tuple(int(x) for x in item.split(":")) for item in args.shapes.split(",")]
        shapes = [(head_dim, bool(causal), seqlen) for head_dim, causal, seqlen in shapes]
    sampler = Sampler()
    time.sleep(SAMPLER_START_S)
    records = []
    for head_dim, causal, seqlen in shapes:
        for dtype_name in args.dtypes.split(","):
            config = compare_grids.standard_config(seqlen, head_dim, dtype_name, causal)
            flops = config.flops()
            q, k, v, extra = inputs(config)
            for impl in implementations():
                try:
                    fn = impl.runner(q, k, v, causal, **extra)
                except compare_runner.Unavailable as error:  # FA3 without fp16, SDPA's fp8
                    print(f"{impl.name} {dtype_name}: {error}", flush=True)
                    continue
                context = impl.context() if hasattr(impl, "context") else contextlib.nullcontext()
                with context:
                    result = segment(fn, args.seconds, sampler, flops)
                result.update(impl=impl.name, dtype=dtype_name, head_dim=head_dim,
                              causal=causal, seqlen=seqlen)
                records.append(result)
                print(f"d{head_dim} {'c ' if causal else 'nc'} {seqlen:5} {result['dtype']:8} "
                      f"{impl.name:9} {result['tflops']:6.1f} TFLOPS  SM {result['sm_mhz']} MHz "
                      f"(min {result['sm_mhz_min']})  {watts(result['power_w'])} W  "
                      f"{result['temp_c']} C  reasons {result['reasons']}  "
                      f"n={result['samples']}", flush=True)
    sampler.stop()
    with open(args.out, "w") as f:
        json.dump({"device": torch.cuda.get_device_name(), "records": records}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
