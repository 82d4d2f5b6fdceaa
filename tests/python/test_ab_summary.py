"""tools/device/ab_summary.py, the summary of a device A B: tree against tree per config from
the passes' median times, and each tree against FA3, for compare.py's grid JSON and its serving
JSON alike."""

import json
import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "tools", "device"))
import ab_summary  # noqa: E402


def write_run(out_dir, grid, tree, run, flashcore_name, times, file_name):
    """One pass's results: {config: (flashcore ms, fa3 ms)}."""
    records = [{"config": config, "results": {
        flashcore_name: {"status": "ok", "median_ms": ours},
        "fa3": {"status": "ok", "median_ms": anchor}}} for config, (ours, anchor) in times.items()]
    folder = out_dir / f"{grid}_{tree}_{run}"
    folder.mkdir()
    (folder / file_name).write_text(json.dumps({"records": records}))


def test_grid_and_serving_runs(tmp_path, capsys):
    for run in (1, 2):
        write_run(tmp_path, "f8", "base", run, "flashcore[sm90]",
                  {"d128 16k": (2.0, 1.8), "d128 1k": (0.10, 0.10)}, "compare.json")
        write_run(tmp_path, "f8", "new", run, "flashcore[sm90]",
                  {"d128 16k": (1.6, 1.8), "d128 1k": (0.11, 0.10)}, "compare.json")
        write_run(tmp_path, "srv", "base", run, "flashcore",
                  {"decode paged p1": (0.4, 0.38)}, "compare_serving.json")
        write_run(tmp_path, "srv", "new", run, "flashcore",
                  {"decode paged p1": (0.5, 0.38)}, "compare_serving.json")
    assert ab_summary.main(["ab_summary", str(tmp_path), "--trees", "base,new", "f8", "srv"]) == 0
    out = capsys.readouterr().out
    assert "## f8: 2 configs, passes base [1, 2], new [1, 2]" in out
    assert "| d128 16k | 2.0000 | 1.6000 | 1.250 | 0.900 | 1.125 | 1.250 |" in out
    assert "below: d128 1k 0.909" in out
    assert "## srv: 1 configs" in out
    assert "new / base: geomean 0.8000" in out


def test_a_shift_of_the_whole_process_cancels_through_fa3(tmp_path, capsys):
    # The new tree's processes run every kernel 10% longer, FA3 included: its own time reads
    # 0.909x, through FA3 it is level.
    for run in (1, 2):
        write_run(tmp_path, "f8", "base", run, "flashcore[sm90]",
                  {"d256 1k": (0.040, 0.039)}, "compare.json")
        write_run(tmp_path, "f8", "new", run, "flashcore[sm90]",
                  {"d256 1k": (0.044, 0.0429)}, "compare.json")
    assert ab_summary.main(["ab_summary", str(tmp_path), "--trees", "base,new", "f8"]) == 0
    out = capsys.readouterr().out
    assert "new / base: geomean 0.9091" in out
    assert "new / base via FA3: geomean 1.0000 over 1, lowest 1.000, highest 1.000; below 0.98: 0" \
        in out


def test_a_missing_tree_fails(tmp_path, capsys):
    write_run(tmp_path, "f8", "base", 1, "flashcore[sm90]", {"d64 4k": (1.0, 1.0)}, "compare.json")
    assert ab_summary.main(["ab_summary", str(tmp_path), "--trees", "base,new", "f8"]) == 1
    assert "## f8: no results for new" in capsys.readouterr().out


def test_same_pass_wins_and_controls(tmp_path, capsys):
    # The new tree wins the touched config in two passes of three and the control in one.
    touched = [(1.00, 0.98), (1.00, 0.99), (1.00, 1.01)]  # (base ms, new ms) per pass
    control = [(0.50, 0.49), (0.50, 0.51), (0.50, 0.52)]
    for run, ((tb, tn), (cb, cn)) in enumerate(zip(touched, control), start=1):
        write_run(tmp_path, "shapes", "base", run, "flashcore[sm90]",
                  {"chunk-2k": (tb, 1.0), "ctl-4k": (cb, 0.5)}, "compare.json")
        write_run(tmp_path, "shapes", "new", run, "flashcore[sm90]",
                  {"chunk-2k": (tn, 1.0), "ctl-4k": (cn, 0.5)}, "compare.json")
    args = ["ab_summary", str(tmp_path), "--trees", "base,new", "shapes"]
    assert ab_summary.main(args) == 0
    assert "new / base per pass: geomean" in capsys.readouterr().out
    assert ab_summary.main(args[:-1] + ["--controls", "^ctl-", "shapes"]) == 0
    out = capsys.readouterr().out
    assert "new / base touched: geomean 1.0101 over 1, faster in 2 of 3 same-pass pairs (67%)" \
        in out
    assert "new / base controls: geomean 0.9804 over 1, faster in 1 of 3 same-pass pairs (33%)" \
        in out
    # A pattern that names no config says so instead of a geomean over nothing.
    assert ab_summary.main(args[:-1] + ["--controls", "^none-", "shapes"]) == 0
    assert "new / base controls: no config" in capsys.readouterr().out


def test_a_bad_controls_pattern_is_refused(tmp_path, capsys):
    write_run(tmp_path, "f8", "base", 1, "flashcore[sm90]", {"d64 4k": (1.0, 1.0)}, "compare.json")
    with pytest.raises(SystemExit) as exit_:
        ab_summary.main(["ab_summary", str(tmp_path), "--controls", "(", "f8"])
    assert exit_.value.code == 2
    assert "--controls '('" in capsys.readouterr().err
