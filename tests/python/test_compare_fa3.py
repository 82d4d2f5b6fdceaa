"""bench/compare.py and compare_report.py with FA3 as an anchor (pure Python, no torch, no GPU):
the FA3 column and flashcore/FA3 ratios, a run where FA3 is not installed or has no fp16, the
run's geometric means and lowest ratios, and the --impls choice."""
import importlib.util
import json
import math
import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "bench"))
import compare  # noqa: E402
import compare_report  # noqa: E402

FC = "flashcore"
ANCHORS = ["fa3", "cudnn", "fa2"]


def meta(**extra):
    base = {"device": "test", "commit": "abc", "date": "today", "torch": "2", "cudnn": 1,
            "grid": "llm", "iters": 30, "rounds": 3, "anchors": ANCHORS, "fa3": "0.0.3",
            "fa3_import_error": None}
    base.update(extra)
    return base


def ok(tflops, err=1e-3):
    return {"status": "ok", "tflops": tflops, "median_ms": 1.0, "min_ms": 1.0,
            "max_err_out": err}


def record(config, results, anchors=ANCHORS):
    rec = {"config": config, "results": results, "tol_out": 4e-3}
    compare_report.add_ratios(rec, [FC], anchors)
    return rec


def row(table, config):
    """The table row of `config`, as its cells."""
    line = next(line for line in table.splitlines() if line.startswith(f"| {config} |"))
    return [cell.strip() for cell in line.strip("|").split("|")]


def test_fa3_column_ratios_and_the_runs_means():
    records = [record("llama3-8b-4k: b1", {FC: ok(600.0), "fa3": ok(650.0), "cudnn": ok(500.0),
                                           "fa2": ok(300.0)}),
               record("mqa-8k: b1", {FC: ok(300.0), "fa3": ok(600.0), "cudnn": ok(600.0),
                                     "fa2": ok(300.0)})]
    table = compare_report.markdown(meta(), records, [FC])
    header = row(table, "config")
    assert header[1:5] == ["flashcore TFLOPS", "fa3 TFLOPS", "cudnn TFLOPS", "fa2 TFLOPS"]
    assert header[5:8] == ["flashcore/FA3", "flashcore/cuDNN", "flashcore/FA2"]
    cells = row(table, "llama3-8b-4k: b1")
    assert cells[1:5] == ["600.0", "650.0", "500.0", "300.0"]
    assert cells[5:8] == ["0.92", "1.20", "2.00"]
    assert records[0]["ratios"]["flashcore/fa3"] == pytest.approx(600 / 650)
    summary = compare_report.summarize(records, [FC], ANCHORS)
    fa3 = summary["flashcore/fa3"]
    assert fa3["configs"] == 2
    assert fa3["geomean"] == pytest.approx(math.sqrt(600 / 650 * 0.5))
    assert fa3["lowest"] == pytest.approx(0.5) and fa3["lowest_config"] == "mqa-8k: b1"
    assert summary["flashcore/cudnn"]["geomean"] == pytest.approx(math.sqrt(1.2 * 0.5))
    assert "| flashcore/FA3 | 2 | 0.679 | 0.500 | mqa-8k: b1 |" in table
    assert "FA3 (fa3-fwd 0.0.3)" in table


def test_fa3_not_installed_is_a_column_that_says_so():
    reason = "FA3 not installed (ModuleNotFoundError: No module named 'fa3_fwd_interface')"
    missing = {"status": "n/a", "cell": "not installed", "reason": reason}
    records = [record(f"cfg{i}", {FC: ok(500.0), "fa3": dict(missing), "cudnn": ok(450.0),
                                  "fa2": ok(250.0)}) for i in range(5)]
    table = compare_report.markdown(meta(fa3=None, fa3_import_error="ModuleNotFoundError"),
                                    records, [FC])
    cells = row(table, "cfg3")
    assert cells[2] == "not installed" and cells[5] == "-"  # no flashcore/FA3 ratio
    assert cells[6] == "1.11"  # flashcore/cuDNN still there
    assert "FA3 not installed" in table.splitlines()[2]
    assert f"- fa3 (5 configs): {reason}" in table  # listed once, not per config
    assert table.count(reason) == 1
    assert "| flashcore/FA3 | 0 | - | - | - |" in table
    assert "| flashcore/cuDNN | 5 | 1.111 |" in table


def test_fp16_cell_says_na_and_stays_out_of_the_means():
    records = [record("b8 d64 fp16", {FC: ok(400.0), "fa3": {
                   "status": "n/a", "cell": "fp16 n/a",
                   "reason": "the fa3-fwd wheel has no fp16 forward (bf16 and FP8 only)"},
                   "cudnn": ok(400.0), "fa2": ok(200.0)}),
               record("b8 d64 bf16", {FC: ok(400.0), "fa3": ok(500.0), "cudnn": ok(400.0),
                                      "fa2": ok(200.0)})]
    table = compare_report.markdown(meta(), records, [FC])
    assert row(table, "b8 d64 fp16")[2] == "fp16 n/a"
    assert compare_report.summarize(records, [FC], ANCHORS)["flashcore/fa3"]["configs"] == 1


def test_a_failing_anchor_is_marked_and_left_out_of_the_means():
    bad = {**ok(900.0, err=1.0), "status": "FAIL"}
    records = [record("cfg", {FC: ok(600.0), "fa3": bad, "cudnn": ok(500.0), "fa2": ok(300.0)})]
    table = compare_report.markdown(meta(), records, [FC])
    assert row(table, "cfg")[2] == "900.0 FAIL"
    assert "- fa3 (cfg): max err 1.0e+00 > tol 4.0e-03" in table
    assert "flashcore/fa3" not in compare_report.summarize(records, [FC], ANCHORS)
    # The checker's own reason where it gave one (here: non-finite out, which the error and the
    # bound alone would not say).
    bad["fail_reason"] = "non-finite out"
    table = compare_report.markdown(meta(), records, [FC])
    assert "- fa3 (cfg): non-finite out" in table


def test_older_json_without_fa3_gets_no_fa3_column():
    records = [record("cfg", {FC: ok(500.0), "cudnn": ok(450.0), "fa2": ok(250.0)},
                      anchors=("cudnn", "fa2"))]
    old_meta = meta()
    del old_meta["anchors"], old_meta["fa3"], old_meta["fa3_import_error"]
    table = compare_report.markdown(old_meta, records, [FC])
    assert "fa3" not in table.lower()
    assert row(table, "cfg")[1:4] == ["500.0", "450.0", "250.0"]


def test_an_anchors_only_run_has_no_check_column():
    records = [{"config": "cfg", "results": {"fa3": ok(650.0), "cudnn": ok(500.0)},
                "tol_out": 1e-3}]
    for rec in records:
        compare_report.add_ratios(rec, [], ["fa3", "cudnn"])
    table = compare_report.markdown(meta(anchors=["fa3", "cudnn"]), records, [])
    assert row(table, "config") == ["config", "fa3 TFLOPS", "cudnn TFLOPS"]
    assert row(table, "cfg") == ["cfg", "650.0", "500.0"]
    assert "ratio over the run" not in table


def test_geomean():
    assert compare_report.geomean([2.0, 8.0]) == pytest.approx(4.0)
    assert compare_report.geomean([0.5]) == pytest.approx(0.5)
    assert compare_report.geomean([]) is None


def test_graph_timing_is_named_and_fallbacks_listed():
    fallback = {**ok(500.0), "timing": "events", "graph_error": "RuntimeError: capture failed"}
    records = [record("cfg", {FC: ok(600.0), "fa3": ok(650.0), "cudnn": fallback,
                              "fa2": ok(300.0)})]
    table = compare_report.markdown(meta(timing="graph", graph_calls=10), records, [FC])
    assert "CUDA-graph replays of 10 calls (time per call)" in table
    assert "- cudnn (cfg): RuntimeError: capture failed" in table


def test_write_keeps_the_summary_in_strict_json(tmp_path):
    records = [record("cfg", {FC: ok(600.0), "fa3": ok(600.0), "cudnn": ok(float("nan")),
                              "fa2": ok(300.0)})]
    compare_report.write(str(tmp_path), meta(), records, [FC])
    data = json.loads((tmp_path / "compare.json").read_text())
    assert data["summary"]["flashcore/fa3"]["geomean"] == pytest.approx(1.0)
    assert data["records"][0]["results"]["cudnn"]["tflops"] is None


def test_impls_option_chooses_the_anchors():
    args = compare.parse_args(["--grid", "llm", "--impls", "flashcore,cudnn"])
    assert args.impls == ["flashcore", "cudnn"]
    assert compare.anchor_names(args.impls, on_gpu=True) == ["cudnn"]
    assert compare.anchor_names(["fa2", "flashcore", "fa3"], on_gpu=True) == ["fa3", "fa2"]
    assert compare.anchor_names(compare.IMPLS, on_gpu=False) == []  # GPU kernels only
    default = compare.parse_args(["--grid", "llm"])
    assert compare.anchor_names(default.impls, on_gpu=True) == ["fa3", "cudnn", "fa2"]
    assert default.timing == "events" and default.graph_calls == compare.GRAPH_CALLS
    for bad in ("fa3,fa4", "", "fa3,fa3"):
        with pytest.raises(SystemExit):
            compare.parse_args(["--impls", bad])


@pytest.mark.skipif(importlib.util.find_spec("fa3_fwd_interface") is not None,
                    reason="the fa3-fwd wheel is installed here")
def test_import_fa3_without_the_wheel_reports_why():
    func, version, error = compare.import_fa3()
    assert func is None and version is None
    assert error.startswith("ModuleNotFoundError")
