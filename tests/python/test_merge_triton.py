"""The Triton merge of ring attention's partial results (flashcore/_merge_triton.py).

Without a GPU the kernel runs in Triton's interpreter (TRITON_INTERPRET=1, set before Triton is
imported, so in a process of its own); on a GPU (-m gpu) compiled, through distributed._combine
on CUDA tensors. Both are checked against the float64 merge and against the PyTorch merge that
CPU tensors take: ragged row ranges, rows no part covers, rows whose lse is -inf in every part,
more parts than one launch takes, head_dim not a power of two, every output dtype.
"""

import json
import os
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch", reason="PyTorch is not installed (CPU CI has no torch)")
pytest.importorskip("triton", reason="Triton is not installed (it comes with PyTorch's wheels)")

# Row ranges of the parts over 40 query rows: full, halves, a single row, 11 parts in all (two
# launches of at most 8), rows 36-39 covered by the full parts only.
RANGES = [(0, 40), (0, 40), (10, 30), (0, 20), (5, 6), (0, 40), (20, 36), (0, 40), (3, 33),
          (0, 40), (30, 36)]

# Runs in the child: the merge of random parts by the kernel, by _combine_with_torch and in
# float64; prints the largest differences as JSON.
CHECK = r"""
import json, sys
import torch
from flashcore import _merge_triton, distributed

def check(dtype, head_dim, ranges, device):
    torch.manual_seed(0)
    batch, seqlen, heads = 2, 40, 3
    like = torch.empty(batch, seqlen, heads, head_dim, dtype=dtype, device=device)
    parts = []
    for begin, end in ranges:
        out = torch.randn(batch, end - begin, heads, head_dim, device=device).to(dtype)
        lse = torch.randn(batch, heads, end - begin, device=device) * 3
        lse[0, 1, :2] = float("-inf")  # rows 0-1 of (0, 1) and 3-4, 5: no key in any part
        parts.append((begin, end, out, lse))
    shape = (batch, heads, seqlen)
    if device == "cpu":
        out, lse = _merge_triton.merge(parts, like, shape)
    else:
        out, lse = distributed._combine(parts, like, shape)
    torch_out, torch_lse = distributed._combine_with_torch(
        [(b, e, o.cpu(), l.cpu()) for b, e, o, l in parts], like.cpu(), shape)
    ref_lse = torch.full(shape, float("-inf"), dtype=torch.float64)
    for begin, end, _, part_lse in parts:
        ref_lse[:, :, begin:end] = torch.logaddexp(ref_lse[:, :, begin:end],
                                                   part_lse.cpu().double())
    safe = torch.where(ref_lse == float("-inf"), torch.zeros(()), ref_lse)
    ref = torch.zeros(like.shape, dtype=torch.float64)
    for begin, end, part_out, part_lse in parts:
        weight = torch.exp(part_lse.cpu().double() - safe[:, :, begin:end])
        ref[:, begin:end] += weight.transpose(1, 2).unsqueeze(-1) * part_out.cpu().double()
    out, lse = out.cpu(), lse.cpu()
    finite = torch.isfinite(ref_lse)
    # Error in units of the output dtype's spacing at each value: a correctly rounded result
    # is within half of one, float32 sums add a little.
    spacing = {torch.bfloat16: 2.0 ** -7, torch.float16: 2.0 ** -10, torch.float32: 2.0 ** -20}
    unit = spacing[dtype] * ref.abs() + 1e-6
    return {
        "dtype": str(out.dtype), "lse_dtype": str(lse.dtype),
        "out_spacings": ((out.double() - ref).abs() / unit).max().item(),
        "torch_out_spacings": ((torch_out.double() - ref).abs() / unit).max().item(),
        "lse_err": (lse.double() - ref_lse)[finite].abs().max().item(),
        "same_inf": bool(torch.equal(torch.isinf(lse), torch.isinf(ref_lse))),
        "zero_where_no_key": bool((out[~finite.transpose(1, 2)] == 0).all()),
        "finite": bool(torch.isfinite(out).all()),
    }

device, cases = sys.argv[1], json.loads(sys.argv[2])
dtypes = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
print(json.dumps([check(dtypes[d], hd, [tuple(r) for r in ranges], device)
                  for d, hd, ranges in cases]))
"""

CASES = [("bf16", 64, RANGES), ("fp16", 96, RANGES), ("fp32", 128, RANGES[:3]),
         ("bf16", 128, RANGES[:8]), ("fp16", 256, RANGES[:4])]


def run_check(device, env):
    result = subprocess.run([sys.executable, "-c", CHECK, device, json.dumps(CASES)],
                            capture_output=True, text=True, timeout=600, env=env)
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


def assert_merged(reports):
    for (dtype, head_dim, _), report in zip(CASES, reports):
        where = f"{dtype} d{head_dim}"
        assert report["lse_dtype"] == "torch.float32", where
        assert report["same_inf"] and report["zero_where_no_key"] and report["finite"], report
        assert report["lse_err"] < 1e-5, (where, report)
        # Both merges round once to the output dtype: within one spacing of float64's value.
        assert report["out_spacings"] <= 1.0, (where, report)
        assert report["torch_out_spacings"] <= 1.0, (where, report)


def test_kernel_in_the_interpreter_matches_float64_and_the_torch_merge():
    env = dict(os.environ, TRITON_INTERPRET="1", PYTHONWARNINGS="ignore")
    assert_merged(run_check("cpu", env))


@pytest.mark.gpu
def test_combine_on_cuda_merges_in_the_kernel():
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    assert_merged(run_check("cuda", env))
