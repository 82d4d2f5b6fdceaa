"""bench/merge_passes.py (pure Python): passes of one grid pooled into one table, each figure the
median of every pass's replays, a result ok and passing only where it was in every pass."""
import json
import os
import subprocess
import sys

import pytest

BENCH = os.path.join(os.path.dirname(__file__), "..", "..", "bench")
sys.path.insert(0, BENCH)
import merge_passes  # noqa: E402

FLOPS = 1e12  # 1 TFLOP a call: TFLOPS = 1000 / ms
CONFIG = "b1 sq4608 sk4608 hq24 hkv24 d128 bf16"


def result(times, err=1e-4, status="ok", passed=True):
    return {"status": status, "times_ms": times, "median_ms": sorted(times)[len(times) // 2],
            "min_ms": min(times), "max_err_out": err, "pass": passed,
            "tflops": FLOPS / (sorted(times)[len(times) // 2] * 1e-3) / 1e12}


def write_pass(directory, date, flashcore, fa3, config=CONFIG):
    directory.mkdir()
    meta = {"device": "test", "commit": "abc", "date": date, "torch": "2", "cudnn": 1,
            "grid": "llm", "iters": 3, "rounds": 4, "timing": "graph", "graph_calls": 10,
            "impls": ["flashcore[sm90]", "fa3"], "anchors": ["fa3"], "fa3": "0.0.3"}
    record = {"config": config, "flops": FLOPS, "tol_out": 1e-3, "baseline_err_out": 4e-4,
              "results": {"flashcore[sm90]": flashcore, "fa3": fa3}}
    (directory / "compare.json").write_text(json.dumps({"meta": meta, "records": [record]}))
    return str(directory)


def test_figures_are_the_median_of_every_pass_replays(tmp_path):
    # Pass 1 met a slow clock (FlashCore 2.0 ms), pass 2 a fast one: pooled, the median sits
    # between them instead of on either pass's.
    first = write_pass(tmp_path / "p1", "d1", result([2.0, 2.1, 2.2], err=2e-4),
                       result([1.5, 1.5, 1.6]))
    second = write_pass(tmp_path / "p2", "d2", result([1.4, 1.5, 1.6], err=3e-4),
                        result([1.5, 1.6, 1.6]))
    meta, records, names = merge_passes.merge([merge_passes.load(first),
                                               merge_passes.load(second)])
    assert names == ["flashcore[sm90]"]
    fc = records[0]["results"]["flashcore[sm90]"]
    assert fc["iters"] == 6 and fc["min_ms"] == 1.4
    assert fc["median_ms"] == pytest.approx(1.8)  # of 1.4 1.5 1.6 2.0 2.1 2.2
    assert fc["tflops"] == pytest.approx(1000 / 1.8)
    assert fc["max_err_out"] == 3e-4  # the largest over the passes
    fa3 = records[0]["results"]["fa3"]["median_ms"]
    assert fa3 == pytest.approx(1.55)
    assert records[0]["ratios"]["flashcore[sm90]/fa3"] == pytest.approx(1.55 / 1.8)
    assert meta["passes"] == [{"commit": "abc", "date": "d1"}, {"commit": "abc", "date": "d2"}]


def test_a_result_that_failed_in_one_pass_fails(tmp_path):
    first = write_pass(tmp_path / "p1", "d1", result([1.0, 1.0, 1.0]), result([1.0, 1.0, 1.0]))
    second = write_pass(tmp_path / "p2", "d2",
                        result([1.0, 1.0, 1.0], err=5e-3, status="FAIL", passed=False),
                        result([1.0, 1.0, 1.0]))
    _, records, _ = merge_passes.merge([merge_passes.load(first), merge_passes.load(second)])
    fc = records[0]["results"]["flashcore[sm90]"]
    assert fc["status"] == "FAIL" and fc["pass"] is False and fc["max_err_out"] == 5e-3


def test_the_script_writes_the_table_and_refuses_passes_that_differ(tmp_path):
    first = write_pass(tmp_path / "p1", "d1", result([1.0, 1.1, 1.2]), result([1.0, 1.0, 1.0]))
    second = write_pass(tmp_path / "p2", "d2", result([1.0, 1.1, 1.2]), result([1.0, 1.0, 1.0]))
    out = tmp_path / "out"
    run = subprocess.run([sys.executable, os.path.join(BENCH, "merge_passes.py"), str(out),
                          first, second], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    assert "the median of the replays of 2 such passes" in (out / "compare.md").read_text()
    assert json.loads((out / "compare.json").read_text())["records"][0]["results"][
        "flashcore[sm90]"]["iters"] == 6
    other = write_pass(tmp_path / "p3", "d3", result([1.0]), result([1.0]),
                       config="b2 sq4096 sk4096 hq24 hkv24 d128 bf16")
    run = subprocess.run([sys.executable, os.path.join(BENCH, "merge_passes.py"),
                          str(tmp_path / "out2"), first, other], capture_output=True, text=True)
    assert run.returncode == 2 and "different configs" in run.stderr
