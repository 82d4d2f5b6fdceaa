"""tools/device/ncu_times.py, the reader of the ncu logs that serving.sh and prefill_jax.sh take
kernel times from: the per-call sum of named kernels and the largest once-per-call kernel, on a
log laid out as ncu 2025 writes it (the process's own prints and ==PROF== lines between)."""

import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "tools", "device"))
import ncu_times  # noqa: E402

HEADER = ('"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream",'
          '"Block Size","Grid Size","Device","CC","Section Name","Metric Name","Metric Unit",'
          '"Metric Value"')


def row(index, kernel, ns):
    return (f'"{index}","1","python3","127.0.0.1","{kernel}","1","7","(384, 1, 1)",'
            f'"(132, 1, 1)","0","9.0","Command line profiler metrics","gpu__time_duration.sum",'
            f'"ns","{ns}"')


def log_of(kernels):
    """An ncu log: a ==PROF== line, the process's JSON print, the header, then one row per
    (kernel, ns) in launch order."""
    lines = ['==PROF== Connected to process 1', '{"impl": "flashcore", "finite": true}', HEADER]
    lines += [row(i, kernel, ns) for i, (kernel, ns) in enumerate(kernels)]
    return lines


FILL = "void at::vectorized_elementwise_kernel<4, at::FillFunctor<int>>(int, T2, T3)"
FORWARD = "void flashcore::sm90_forward_kernel<flashcore::Sm90DenseLayout>(CUtensorMap_st)"
COMBINE = "void flashcore::sm90_combine_kv_splits_kernel<1>(flashcore::Sm90KvSplit)"


def test_reads_names_and_times_past_other_lines():
    times = ncu_times.read_kernel_times(log_of([(FILL, "2,752"), (FORWARD, "432,100")]))
    assert times == [(FILL, 2752.0), (FORWARD, 432100.0)]
    assert ncu_times.read_kernel_times(["==PROF== nothing profiled"]) == []


def test_summed_calls_leave_out_the_warm_up():
    # Four calls of forward + combine; the first (warm-up) is slow.
    kernels = []
    for forward_ns, combine_ns in ((900000, 9000), (400000, 2000), (410000, 2000), (420000, 2000)):
        kernels += [(FILL, 1000), (FORWARD, forward_ns), (COMBINE, combine_ns)]
    times = ncu_times.read_kernel_times(log_of(kernels))
    assert ncu_times.summed_call_us(times, ["sm90", "combine"]) == pytest.approx(412.0)
    assert ncu_times.summed_call_us(times, ["flash::"]) is None


def test_largest_once_per_call_kernel():
    # Two fills a call, the forward once: the forward is picked though the fills sum more.
    kernels = []
    for forward_ns in (800000, 300000, 310000, 320000):
        kernels += [(FILL, 200000), (FILL, 200000), (FORWARD, forward_ns)]
    times = ncu_times.read_kernel_times(log_of(kernels))
    assert ncu_times.largest_call_us(times, timed_calls=3) == pytest.approx(310.0)
    assert ncu_times.largest_call_us(times, timed_calls=5) is None


def test_command_line(tmp_path, capsys):
    log = tmp_path / "ncu.csv"
    log.write_text("\n".join(log_of([(FORWARD, 500000), (FORWARD, 250000)])) + "\n")
    assert ncu_times.main([str(log), "--kernels", "sm90"]) == 0
    assert capsys.readouterr().out == "250.0\n"
    assert ncu_times.main([str(log), "--largest-of", "1"]) == 0
    assert capsys.readouterr().out == "250.0\n"
    assert ncu_times.main([str(log), "--kernels", "flash::"]) == 0
    assert capsys.readouterr().out == "nan\n"
    with pytest.raises(SystemExit):
        ncu_times.main([str(log), "--largest-of", "0"])
    assert "--largest-of must be positive, got 0" in capsys.readouterr().err
