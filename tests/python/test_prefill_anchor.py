"""bench/prefill_anchor.py (the one-shape process tools/device/prefill_jax.sh times under ncu):
the standard grid's batch and heads by default, and clear errors for what it cannot run."""

import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "bench"))
import prefill_anchor  # noqa: E402


def test_standard_grid_shape_by_default():
    args = prefill_anchor.parse_args(["--impl", "flashcore", "--seqlen", "4096",
                                      "--head-dim", "64"])
    assert (args.batch, args.heads, args.dtype, args.causal) == (4, 32, "fp16", False)
    args = prefill_anchor.parse_args(["--impl", "fa3-jax", "--seqlen", "32768", "--causal",
                                      "--batch", "2", "--heads", "8"])
    assert (args.batch, args.heads, args.causal) == (2, 8, True)
    q, k, v = prefill_anchor.make_inputs(prefill_anchor.parse_args(
        ["--impl", "flashcore", "--seqlen", "16", "--head-dim", "8", "--batch", "1",
         "--heads", "2"]))
    assert q.shape == k.shape == v.shape == (1, 16, 2, 8)


def test_grouped_query_heads():
    args = prefill_anchor.parse_args(["--impl", "fa3", "--dtype", "bf16", "--seqlen", "2048"])
    assert args.kv_heads == args.heads == 16
    args = prefill_anchor.parse_args(["--impl", "flashcore", "--seqlen", "16", "--head-dim", "8",
                                      "--batch", "2", "--heads", "8", "--kv-heads", "2"])
    q, k, v = prefill_anchor.make_inputs(args)
    assert q.shape == (2, 16, 8, 8) and k.shape == v.shape == (2, 16, 2, 8)


@pytest.mark.parametrize("argv, message", [
    (["--impl", "flashcore", "--seqlen", "0"], "--seqlen must be positive, got 0"),
    (["--impl", "flashcore", "--calls", "-1"], "--calls must be positive, got -1"),
    (["--impl", "cudnn"], "invalid choice: 'cudnn'"),
    (["--impl", "flashcore", "--kv-heads", "0"], "--kv-heads must be positive, got 0"),
    (["--impl", "flashcore", "--heads", "-2"], "--heads must be positive, got -2"),
    (["--impl", "flashcore", "--heads", "32", "--kv-heads", "5"],
     "--heads 32 must be a multiple of --kv-heads 5"),
])
def test_bad_arguments_name_the_flag(argv, message, capsys):
    with pytest.raises(SystemExit):
        prefill_anchor.parse_args(argv)
    assert message in capsys.readouterr().err


def test_the_wheel_refuses_fp16_by_name():
    args = prefill_anchor.parse_args(["--impl", "fa3", "--seqlen", "16", "--head-dim", "8"])
    q, k, v = prefill_anchor.make_inputs(args)
    with pytest.raises(SystemExit, match="no fp16 forward"):
        prefill_anchor.run_fa3_wheel(args, q, k, v)
