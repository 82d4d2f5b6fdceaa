"""bench/compare_runner.py's --timing graph and FA3 paths, dry-run against a stand-in for torch
(no torch, no GPU): what gets captured (calls cycling through input copies that span the L2),
what gets timed (replays, times per call), the fallback to CUDA events when a capture fails, and
FA3's n/a cells (not installed, fp16). The real torch.cuda calls run on the device machine."""
import contextlib
import importlib.util
import os
import sys
import types

import pytest

RUNNER = os.path.join(os.path.dirname(__file__), "..", "..", "bench", "compare_runner.py")
MIB = 2 ** 20


class FakeTensor:
    def __init__(self, tag, nbytes, dtype="bf16", seqlen=64):
        self.tag, self.nbytes, self.dtype = tag, nbytes, dtype
        self.shape = (1, seqlen, 4, 128)
        self.device, self.is_cuda = "cuda:0", True
        self.copies = 0

    def numel(self):
        return self.nbytes

    def element_size(self):
        return 1

    def clone(self):
        self.copies += 1
        return FakeTensor(f"{self.tag}{self.copies}", self.nbytes, self.dtype)


class FakeCuda(types.ModuleType):
    """Records what the runner asks of torch.cuda; `capturing` is the graph being captured."""

    def __init__(self):
        super().__init__("torch.cuda")
        self.capturing, self.graphs = None, []
        outer = self

        class CUDAGraph:
            def __init__(self):
                self.calls, self.replays = [], 0
                outer.graphs.append(self)

            def replay(self):
                self.replays += 1

        class Stream:
            def wait_stream(self, other):
                pass

        class Event:
            def __init__(self, enable_timing=False):
                pass

            def record(self):
                pass

            def elapsed_time(self, other):
                return 1.0

        self.CUDAGraph, self.Stream, self.Event = CUDAGraph, Stream, Event

    @contextlib.contextmanager
    def graph(self, graph):
        self.capturing = graph
        try:
            yield
        finally:
            self.capturing = None

    def stream(self, stream):
        return contextlib.nullcontext()

    def current_stream(self):
        return self.Stream()

    def synchronize(self):
        pass

    def get_device_properties(self, device):
        return types.SimpleNamespace(L2_cache_size=50 * MIB)


@pytest.fixture
def runner(monkeypatch):
    """compare_runner loaded under another name against the stand-in torch; the real torch (if
    any) and the real compare_runner module are left as they were."""
    torch = types.ModuleType("torch")
    torch.float16, torch.bfloat16, torch.float32 = "fp16", "bf16", "fp32"
    torch.cuda = FakeCuda()
    nn = types.ModuleType("torch.nn")
    functional = types.ModuleType("torch.nn.functional")
    attention = types.ModuleType("torch.nn.attention")
    attention.SDPBackend = types.SimpleNamespace(CUDNN_ATTENTION=1, FLASH_ATTENTION=2, MATH=3)
    attention.sdpa_kernel = lambda backend: contextlib.nullcontext()
    for name, module in (("torch", torch), ("torch.nn", nn), ("torch.nn.functional", functional),
                         ("torch.nn.attention", attention), ("torch.cuda", torch.cuda)):
        monkeypatch.setitem(sys.modules, name, module)
    spec = importlib.util.spec_from_file_location("compare_runner_on_fake_torch", RUNNER)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.fake_cuda = torch.cuda
    return module


class FakeImpl:
    """An implementation whose calls log (name, input tag, captured or eager)."""

    def __init__(self, name, cuda, log, capture_fails=False):
        self.name, self.layout, self.cuda, self.log = name, "BSHD", cuda, log
        self.capture_fails = capture_fails

    def checked_output(self, q, k, v, causal):
        return None, None

    def runner(self, q, k, v, causal):
        def call():
            graph = self.cuda.capturing
            if graph is not None and self.capture_fails:
                raise RuntimeError("operation not permitted when stream is capturing\nmore")
            if graph is not None:
                graph.calls.append((self.name, q.tag))
            else:
                self.log.append((self.name, q.tag))
        return call


class PassingChecker:
    def check(self, out, lse=None):
        return {"pass": True, "max_err_out": 0.0}


def settings(**extra):
    base = dict(timing="graph", graph_calls=10, warmup=1, iters=4, budget_s=10.0, rounds=2)
    base.update(extra)
    return types.SimpleNamespace(**base)


def test_input_sets_span_twice_the_l2(runner):
    count = runner.input_set_count
    assert count(40 * MIB, 50 * MIB, 10) == 3  # 3 x 40 MiB >= 100 MiB
    assert count(100 * MIB, 50 * MIB, 10) == 1  # one set already spans twice the L2
    assert count(1 * MIB, 50 * MIB, 10) == 10  # never more sets than calls
    assert count(0, 50 * MIB, 10) == 10


def test_graphs_capture_calls_over_input_copies_and_time_per_call(runner):
    log = []
    impls = [FakeImpl("flashcore", runner.fake_cuda, log), FakeImpl("fa3", runner.fake_cuda, log)]
    # q, k, v and out of 10 MiB each: 40 MiB a set, so 3 sets cover 2 x 50 MiB of L2.
    q, k, v = (FakeTensor(tag, 10 * MIB) for tag in "qkv")
    # Every replay measures 1 ms between the stand-in's CUDA events.
    results = runner.run_impls(impls, q, k, v, True, PassingChecker(), settings(), on_gpu=True)
    graphs = runner.fake_cuda.graphs
    assert len(graphs) == 2
    assert graphs[0].calls == [("flashcore", tag) for tag in ["q", "q1", "q2"] * 3 + ["q"]]
    assert graphs[1].calls[:4] == [("fa3", "q"), ("fa3", "q1"), ("fa3", "q2"), ("fa3", "q")]
    # Every input set warmed up eagerly before capture (after the checked run's nothing).
    assert log == [(name, tag) for name in ("flashcore", "fa3") for tag in ("q", "q1", "q2")
                   for _ in range(runner.GRAPH_WARMUP)]
    for name in ("flashcore", "fa3"):
        r = results[name]
        assert r["status"] == "ok" and r["timing"] == "graph" and r["input_sets"] == 3
        assert r["calls_per_run"] == 10 and r["median_ms"] == pytest.approx(0.1)  # 1 ms / 10
        assert r["iters"] == 4 and r["rounds"] == 2
    # 1 check replay + 1 warm-up + 1 sizing run + 2 rounds x (ROUND_WARMUP + 2 timed) replays
    assert graphs[0].replays == 3 + 2 * (runner.ROUND_WARMUP + 2)


def test_a_failed_capture_falls_back_to_events(runner, monkeypatch):
    log = []
    impls = [FakeImpl("flashcore", runner.fake_cuda, log),
             FakeImpl("cudnn", runner.fake_cuda, log, capture_fails=True)]
    q, k, v = (FakeTensor(tag, 100 * MIB) for tag in "qkv")  # one set: no copies
    monkeypatch.setattr(runner, "_runs_ms", lambda fn, runs, on_gpu: [10.0] * runs)
    results = runner.run_impls(impls, q, k, v, False, PassingChecker(), settings(), on_gpu=True)
    assert results["flashcore"]["timing"] == "graph" and results["flashcore"]["input_sets"] == 1
    assert results["flashcore"]["median_ms"] == pytest.approx(1.0)
    cudnn = results["cudnn"]
    assert cudnn["status"] == "ok" and cudnn["timing"] == "events"
    assert cudnn["graph_error"] == ("RuntimeError: operation not permitted when stream is "
                                    "capturing")
    assert cudnn["median_ms"] == pytest.approx(10.0) and "calls_per_run" not in cudnn
    assert ("cudnn", "q") in log  # timed eagerly


def test_events_timing_captures_nothing(runner, monkeypatch):
    impls = [FakeImpl("flashcore", runner.fake_cuda, [])]
    q, k, v = (FakeTensor(tag, MIB) for tag in "qkv")
    monkeypatch.setattr(runner, "_runs_ms", lambda fn, runs, on_gpu: [2.0] * runs)
    results = runner.run_impls(impls, q, k, v, False, PassingChecker(),
                               settings(timing="events"), on_gpu=True)
    assert runner.fake_cuda.graphs == [] and "timing" not in results["flashcore"]
    assert results["flashcore"]["median_ms"] == pytest.approx(2.0)


def test_fa3_cells_for_a_missing_wheel_and_fp16(runner):
    q = FakeTensor("q", MIB)
    missing = runner.Fa3Impl(None, "ModuleNotFoundError: No module named 'fa3_fwd_interface'")
    result, timed = runner.check_impl(missing, q, q, q, True, PassingChecker(), on_gpu=True)
    assert timed is None and result["status"] == "n/a" and result["cell"] == "not installed"
    assert "fa3_fwd_interface" in result["reason"]

    calls = []
    fa3 = runner.Fa3Impl(lambda *args, **kwargs: calls.append(kwargs) or "out")
    half = FakeTensor("q", MIB, dtype="fp16")
    result, timed = runner.check_impl(fa3, half, half, half, True, PassingChecker(), on_gpu=True)
    assert result["cell"] == "fp16 n/a" and timed is None and calls == []

    result, timed = runner.check_impl(fa3, q, q, q, True, PassingChecker(), on_gpu=True)
    assert result["status"] == "ok" and timed[0] == "fa3"
    assert calls == [{"softmax_scale": 128 ** -0.5, "causal": True, "return_attn_probs": True}]


def test_fa3_lse_is_recorded_but_not_judged(runner):
    class LseChecker(PassingChecker):
        def lse_error(self, lse):
            return 0.5  # far past any tolerance: must not turn the result into a failure

    q = FakeTensor("q", MIB)
    fa3 = runner.Fa3Impl(lambda *args, **kwargs: ("out", "lse"))
    result, timed = runner.check_impl(fa3, q, q, q, True, LseChecker(), on_gpu=True)
    assert result["status"] == "ok" and result["pass"] and timed is not None
    assert result["max_err_lse"] == 0.5 and result["lse_judged"] is False
