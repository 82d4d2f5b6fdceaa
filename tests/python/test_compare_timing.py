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


SETUP_RUNS = 2  # per implementation before the rounds, at warmup=1: one warm-up, one sizing run


def round_orders(log, names, per_round):
    """The implementations' order in each round, from a log of calls (warmup=1) and the calls
    each block makes (ROUND_WARMUP + its timed runs)."""
    blocks = [log[i] for i in range(SETUP_RUNS * len(names), len(log), per_round)]
    return [blocks[i:i + len(names)] for i in range(0, len(blocks), len(names))]


def test_rounds_take_turns_in_a_balanced_order():
    log = []
    names = ("a", "b", "c")
    timed = [(name, recorder(log, name), None) for name in names]
    results = compare_runner.time_interleaved(timed, warmup=1, iters=6, budget_s=10.0, rounds=3,
                                              on_gpu=False)
    # Three implementations: 3 rounds made 6 (the square's rows and their reverses), 1 run each.
    assert all(results[name]["iters"] == 6 and results[name]["rounds"] == 6 for name in names)
    # Per implementation before the rounds: 1 warm-up + 1 run to size the rounds. Each round:
    # ROUND_WARMUP untimed runs, then the timed ones, in the round's order.
    assert log[:6] == ["a", "a", "b", "b", "c", "c"]
    per_round = compare_runner.ROUND_WARMUP + 1
    assert len(log) == 6 + 6 * 3 * per_round
    orders = round_orders(log, names, per_round)
    assert orders[0] == ["a", "b", "c"]
    for place in range(3):  # every name in every place twice
        assert sorted(order[place] for order in orders) == sorted(names * 2)


def test_every_implementation_follows_every_other_equally_often():
    log = []
    names = ("flashcore", "fa3", "cudnn", "fa2")
    timed = [(name, recorder(log, name), None) for name in names]
    results = compare_runner.time_interleaved(timed, warmup=1, iters=4, budget_s=10.0, rounds=3,
                                              on_gpu=False)
    assert all(results[name]["rounds"] == 4 for name in names)  # 3 rounded up to the 4 rows
    orders = round_orders(log, names, compare_runner.ROUND_WARMUP + 1)
    for place in range(len(names)):
        assert sorted(order[place] for order in orders) == sorted(names)
    # A rotation had put flashcore right after fa2 (the lightest kernel) in every round.
    pairs = [(order[i], order[i + 1]) for order in orders for i in range(len(names) - 1)]
    assert sorted(pairs) == sorted((a, b) for a in names for b in names if a != b)


@pytest.mark.parametrize("count", [1, 2, 3, 4, 5, 6])
def test_balanced_round_orders(count):
    orders = compare_runner.balanced_round_orders(count)
    assert len(orders) == (count if count % 2 == 0 or count == 1 else 2 * count)
    repeats = len(orders) // count
    for place in range(count):
        assert sorted(order[place] for order in orders) == sorted(list(range(count)) * repeats)
    if count > 1:
        pairs = [(o[i], o[i + 1]) for o in orders for i in range(count - 1)]
        per_pair = len(pairs) // (count * (count - 1))
        assert sorted(pairs) == sorted([(a, b) for a in range(count) for b in range(count)
                                        if a != b] * per_pair)


def test_balanced_rounds_are_whole_squares_of_the_items():
    items = ["flashcore", "fa3", "cudnn"]
    rounds = compare_runner.balanced_rounds(items, 4)
    assert len(rounds) == 6  # 4 rounded up to a whole square of 3 (6 rows)
    orders = compare_runner.balanced_round_orders(3)
    assert rounds == [[items[i] for i in order] for order in orders]
    assert [compare_runner.balanced_round(items, r) for r in range(8)] == rounds + rounds[:2]


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
    assert results["steady"]["iters"] == 8  # 3 rounds made 4 for 2 implementations, 2 runs each


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
