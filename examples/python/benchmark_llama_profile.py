"""torch.profiler summary of a few decode steps, for benchmark_llama.py --profile.

Answers "what dominates one decode step": the top CUDA kernels by total time (which SDPA backend
ran shows in the kernel names: cudnn / flash_fwd / fmha_cutlass / plain bmm+softmax for math),
the top CPU operators by self time (host work: cuDNN graph builds, mask building, Python
overhead), and how busy the GPU was over the step's wall time. A step whose kernels cover much
less than its wall time is host-bound, and a kernel speed-up cannot explain its timing.
"""

import time

import torch
from torch.profiler import ProfilerActivity, profile

TOP_N = 10
HOST_BOUND_BUSY_FRACTION = 0.5  # GPU busy under half of the step: the host sets the pace
US_PER_MS = 1e3


def _is_device_row(row):
    return row.device_type != torch.autograd.DeviceType.CPU


def _device_total_us(row):
    return row.self_device_time_total  # microseconds


def profile_steps(run_step, steps, device):
    """Runs run_step(i) for i in range(steps) under torch.profiler; returns the summary dict."""
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device == "cuda" else [])
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    sync()
    with profile(activities=activities) as prof:
        start = time.perf_counter()
        for i in range(steps):
            run_step(i)
        sync()
        wall_ms = (time.perf_counter() - start) * 1e3
    rows = prof.key_averages()
    kernels = sorted((r for r in rows if _is_device_row(r)), key=_device_total_us, reverse=True)
    cpu_ops = sorted((r for r in rows if not _is_device_row(r)),
                     key=lambda r: r.self_cpu_time_total, reverse=True)
    kernel_ms = sum(_device_total_us(r) for r in kernels) / US_PER_MS
    return {
        "steps": steps,
        "wall_ms_per_step": wall_ms / steps,
        "kernel_ms_per_step": kernel_ms / steps,
        "gpu_busy_fraction": (kernel_ms / wall_ms) if wall_ms > 0 else None,
        "top_cuda_kernels": [{"name": r.key, "count": r.count,
                              "total_ms": _device_total_us(r) / US_PER_MS}
                             for r in kernels[:TOP_N]],
        "top_cpu_ops": [{"name": r.key, "count": r.count,
                         "self_cpu_total_ms": r.self_cpu_time_total / US_PER_MS}
                        for r in cpu_ops[:TOP_N]],
    }


def dominant(summary):
    """One line: what sets the pace of a decode step in this profile."""
    steps = summary["steps"]
    busy = summary["gpu_busy_fraction"]
    top_cpu = summary["top_cpu_ops"][0] if summary["top_cpu_ops"] else None
    cpu_text = (f"top CPU op {top_cpu['name']} {top_cpu['self_cpu_total_ms'] / steps:.3f} ms/step"
                if top_cpu else "no CPU ops recorded")
    if not summary["top_cuda_kernels"]:
        return f"no CUDA kernels recorded (CPU run); {cpu_text}"
    top = summary["top_cuda_kernels"][0]
    kernel_ms = summary["kernel_ms_per_step"] * steps
    share = top["total_ms"] / kernel_ms if kernel_ms > 0 else 0.0
    kernel_text = (f"top kernel {top['name'][:60]} {top['total_ms'] / steps:.3f} ms/step "
                   f"({share:.0%} of kernel time)")
    if busy is not None and busy < HOST_BOUND_BUSY_FRACTION:
        return (f"host-bound: kernels {summary['kernel_ms_per_step']:.3f} of "
                f"{summary['wall_ms_per_step']:.3f} ms/step ({busy:.0%} busy); {cpu_text}; "
                f"{kernel_text}")
    return (f"GPU-bound: kernels {summary['kernel_ms_per_step']:.3f} of "
            f"{summary['wall_ms_per_step']:.3f} ms/step; {kernel_text}")


def print_summary(label, summary):
    steps = summary["steps"]
    print(f"\nprofile {label}: {steps} decode steps, wall {summary['wall_ms_per_step']:.3f} "
          f"ms/step, CUDA kernels {summary['kernel_ms_per_step']:.3f} ms/step")
    print("| CUDA kernel | count | total ms |")
    print("|---|---|---|")
    for k in summary["top_cuda_kernels"]:
        print(f"| {k['name'][:100]} | {k['count']} | {k['total_ms']:.3f} |")
    print("| CPU op (self time) | count | total ms |")
    print("|---|---|---|")
    for op in summary["top_cpu_ops"]:
        print(f"| {op['name'][:100]} | {op['count']} | {op['self_cpu_total_ms']:.3f} |")
