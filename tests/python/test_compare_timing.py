"""bench/compare_runner.py's interleaved timing: implementations take turns round by round, each
runs its share of the timed runs, and one that raises is reported without stopping the others.
Runs on the CPU path (host clock), so it needs torch but no GPU."""
import os
import sys

import pytest

torch = pytest.importorskip("torch", reason="PyTorch is not installed (CPU CI has no torch)")
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "bench"))
import compare_runner  # noqa: E402


def recorder(log, name):
    return lambda: log.append(name)


def test_rounds_take_turns_in_a_rotating_order():
    log = []
    timed = [(name, recorder(log, name), None) for name in ("a", "b", "c")]
    results = compare_runner.time_interleaved(timed, warmup=1, iters=6, budget_s=10.0, rounds=3,
                                              on_gpu=False)
    assert all(results[name]["iters"] == 6 for name in "abc")
    assert results["a"]["rounds"] == 3
    # Per implementation before the rounds: 1 warm-up + 1 run to size the rounds. Each round:
    # ROUND_WARMUP untimed runs, then 6 / 3 timed runs, the order starting one later each round.
    assert log[:6] == ["a", "a", "b", "b", "c", "c"]
    per_round = compare_runner.ROUND_WARMUP + 2
    blocks = [log[i] for i in range(6, len(log), per_round)]
    assert len(log) == 6 + 9 * per_round
    assert blocks == ["a", "b", "c", "b", "c", "a", "c", "a", "b"]


def test_run_count_rounds_up_to_whole_rounds():
    results = compare_runner.time_interleaved([("a", lambda: None, None)], warmup=0, iters=7,
                                              budget_s=10.0, rounds=3, on_gpu=False)
    assert results["a"]["iters"] == 9  # 3 rounds of ceil(7 / 3)
    assert len(results["a"]["times_ms"]) == 9  # every run kept, in the order it ran


def test_a_failing_implementation_is_reported_and_the_others_still_timed():
    calls = {"n": 0}

    def fails_in_second_round():
        calls["n"] += 1
        if calls["n"] > 2 + compare_runner.ROUND_WARMUP + 2:  # set-up runs + one round
            raise RuntimeError("out of memory\nmore detail")

    timed = [("flaky", fails_in_second_round, None), ("steady", lambda: None, None)]
    results = compare_runner.time_interleaved(timed, warmup=1, iters=6, budget_s=10.0,
                                              rounds=3, on_gpu=False)
    assert results["flaky"] == {"error": "RuntimeError: out of memory"}
    assert results["steady"]["iters"] == 6


def test_sdpa_backend_context_is_entered_afresh_every_round():
    q = torch.randn(1, 16, 2, 32)
    impl = compare_runner.SdpaImpl("math")
    timed = [("math", impl.runner(q, q, q, False), impl.context)]
    results = compare_runner.time_interleaved(timed, warmup=1, iters=4, budget_s=10.0, rounds=2,
                                              on_gpu=False)
    assert "error" not in results["math"] and results["math"]["iters"] == 4


def test_runs_of_several_calls_report_the_time_per_call(monkeypatch):
    monkeypatch.setattr(compare_runner, "_runs_ms", lambda fn, runs, on_gpu: [8.0] * runs)
    timed = [("graph", lambda: None, None, 4), ("eager", lambda: None, None)]
    results = compare_runner.time_interleaved(timed, warmup=0, iters=2, budget_s=10.0, rounds=1,
                                              on_gpu=False)
    assert results["graph"]["median_ms"] == 2.0 and results["graph"]["calls_per_run"] == 4
    assert results["eager"]["median_ms"] == 8.0 and "calls_per_run" not in results["eager"]
