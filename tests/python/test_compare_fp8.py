"""bench/compare.py's fp8 rows (issue 26), without a GPU: --dtypes fp8 selects the grid's bf16
shapes in fp8; the FP8 rule's checker (torch, CPU) agrees with tests/python/fp8_reference.py and
judges the cpu backend's output; the 1.5x-FA3-FP8 bound; each implementation's answer to an fp8
row (flashcore without an fp8 kernel: "no fp8 kernel"; SDPA: "fp8 n/a"; FA3 takes the descales).
"""
import os
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "bench"))
import compare  # noqa: E402
import compare_grids  # noqa: E402


# --- Parsing and configs (pure Python).

def test_dtypes_fp8_is_the_grids_bf16_shapes_in_fp8():
    args = compare.parse_args(["--grid", "standard", "--dtypes", "fp8"])
    bf16 = [c for c in compare_grids.GRIDS["standard"][1]() if c.dtype == "bf16"]
    assert len(args.configs) == len(bf16) == 37  # 36 of the grid + GQA prefill
    assert all(c.dtype == "fp8" for c in args.configs)
    assert [c.describe().replace(" fp8", " bf16") for c in args.configs] == [
        c.describe() for c in bf16]
    assert args.configs[0].flops() == bf16[0].flops()


def test_dtype_abbreviation_filters_and_mixes():
    args = compare.parse_args(["--grid", "quick", "--dtype", "fp8", "--head-dims", "128",
                               "--causal", "yes"])  # argparse takes --dtype for --dtypes
    assert [c.describe() for c in args.configs] == [
        "b8 sq2048 sk2048 hq16 hkv16 d128 fp8 causal",
        "b1 sq16384 sk16384 hq16 hkv16 d128 fp8 causal",
        "b1 sq8192 sk8192 hq32 hkv8 d128 fp8 causal"]
    both = compare.parse_args(["--grid", "tiny", "--dtypes", "bf16,fp8"]).configs
    assert {c.dtype for c in both} == {"bf16", "fp8"} and len(both) == 16
    assert compare.parse_args(["--grid", "tiny"]).configs[0].dtype in ("bf16", "fp16")


@pytest.mark.parametrize("argv, message", [
    (["--dtypes", "fp4"], "--dtypes expects bf16, fp16 and/or fp8, got 'fp4'"),
])
def test_bad_fp8_arguments(argv, message, capsys):
    with pytest.raises(SystemExit) as exit_info:
        compare.parse_args(argv)
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err


# --- The checker, the FA3 bound and the implementations (torch on the CPU).

@pytest.fixture(scope="module")
def torch():
    return pytest.importorskip("torch", reason="compare.py's checks run on torch tensors")


def _fp8_inputs(torch, batch=1, seqlen_q=70, seqlen_k=130, heads_q=8, heads_kv=2, head_dim=64,
                std=1.0):
    import compare_accuracy

    torch.manual_seed(0)
    shapes = ((batch, seqlen_q, heads_q, head_dim), (batch, seqlen_k, heads_kv, head_dim))
    x = [torch.randn(*s) * std for s in (shapes[0], shapes[1], shapes[1])]
    quantized = [compare_accuracy.quantize_fp8(t, heads_kv) for t in x]
    tensors = [t for t, _ in quantized]
    descales = dict(zip(("q_descale", "k_descale", "v_descale"), (d for _, d in quantized)))
    return tensors, descales


def test_fp8_inputs_draw_a_configs_shapes_and_quantize_them(torch):
    """compare.py's and power_probe.py's fp8 draws: q by the query side, k and v by the key side
    (GQA, seqlen_q != seqlen_k), each quantized per (batch, kv head) as quantize_fp8 does."""
    import compare_accuracy

    config = compare_grids.Config(2, 70, 130, 8, 2, 64, "fp8", True)
    torch.manual_seed(0)
    q8, k8, v8, descales = compare_accuracy.fp8_inputs(config, "cpu")
    assert q8.shape == (2, 70, 8, 64) and k8.shape == v8.shape == (2, 130, 2, 64)
    assert {t.dtype for t in (q8, k8, v8)} == {torch.float8_e4m3fn}
    assert sorted(descales) == ["k_descale", "q_descale", "v_descale"]
    assert all(d.shape == (2, 2) and d.dtype == torch.float32 for d in descales.values())
    torch.manual_seed(0)
    q = torch.randn(2, 70, 8, 64)
    expected_q8, expected_descale = compare_accuracy.quantize_fp8(q, 2)
    assert torch.equal(q8.view(torch.uint8), expected_q8.view(torch.uint8))
    torch.testing.assert_close(descales["q_descale"], expected_descale)


def test_quantize_fp8_per_batch_and_kv_head(torch):
    import compare_accuracy

    x = torch.randn(2, 9, 8, 64) * torch.tensor([1.0, 30.0])[:, None, None, None]
    x8, descale = compare_accuracy.quantize_fp8(x, 2)
    assert x8.dtype == torch.float8_e4m3fn and descale.shape == (2, 2)
    amax = x.abs().reshape(2, 9, 2, 4, 64).amax(dim=(1, 3, 4))
    torch.testing.assert_close(descale, amax / 448)
    back = compare_accuracy.dequantize_fp8(x8, descale)
    assert (back - x.double()).abs().max() <= 2 ** -4 * x.abs().max()


@pytest.mark.parametrize("causal", [False, True])
def test_fp8_checker_matches_the_numpy_rule_and_judges_the_cpu_backend(torch, causal):
    import compare_accuracy
    import flashcore
    from fp8_reference import Fp8Inputs, fp8_baseline, fp8_reference

    (q8, k8, v8), descales = _fp8_inputs(torch, std=30.0)
    checker = compare_accuracy.Fp8Checker(q8, k8, v8, descales, causal, 64 ** -0.5, 1000)
    assert checker.rows == list(range(70))
    codes = [t.view(torch.uint8).numpy() for t in (q8, k8, v8)]
    inputs = Fp8Inputs(*codes, *(d.numpy() for d in descales.values()))
    ref_out, ref_lse = fp8_reference(inputs, causal)
    base_out, _ = fp8_baseline(inputs, causal)
    # float64 sums in two orders (std-30 softmax amplifies their last bits)
    np.testing.assert_allclose(checker.ref_out.numpy(), ref_out[0], rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(checker.ref_lse.numpy(), ref_lse[0], rtol=1e-9, atol=1e-9)
    numpy_baseline_error = np.abs(base_out - ref_out).max()
    # The same computation in two float32 orders: the errors agree to a few bf16 ulps.
    assert checker.baseline_err_out == pytest.approx(numpy_baseline_error, rel=0.1)
    assert checker.tol_out == 2 * checker.baseline_err_out + 1e-3

    out, lse = flashcore.attention(q8, k8, v8, causal=causal, return_lse=True, backend="cpu",
                                   **descales)
    result = checker.check(out, lse)
    assert result["pass"] and "fail_reason" not in result, result
    wrong = flashcore.attention(q8, k8, v8, causal=causal, backend="cpu",
                                q_descale=descales["q_descale"],
                                k_descale=descales["k_descale"])  # v_descale left out
    wrong_out = checker.check(wrong)
    assert not wrong_out["pass"] and wrong_out["fail_reason"].startswith("out err ")
    # out right, lse off by 0.01 (ten times the slack): the reason names lse alone.
    wrong_lse = checker.check(out, lse + 0.01)
    assert not wrong_lse["pass"]
    reason = wrong_lse["fail_reason"]
    assert reason.startswith("lse err ") and "out err" not in reason


def test_fa3_fp8_bound(torch):
    import compare_accuracy

    def record(fc_error, fa3_error):
        results = {"flashcore": {"status": "ok", "pass": True, "max_err_out": fc_error}}
        if fa3_error is not None:
            results["fa3"] = {"status": "ok", "max_err_out": fa3_error}
        return {"results": results, "tol_out": 0.05}

    within = record(0.014, 0.01)
    compare_accuracy.apply_fa3_fp8_bound(within, ["flashcore"])
    assert within["fa3_fp8_bound"] == pytest.approx(0.015)
    assert within["tol_out"] == pytest.approx(0.015)  # the tighter of the two bounds
    assert within["results"]["flashcore"]["status"] == "ok"

    over = record(0.02, 0.01)
    compare_accuracy.apply_fa3_fp8_bound(over, ["flashcore"])
    assert over["results"]["flashcore"]["status"] == "FAIL"
    assert over["results"]["flashcore"]["fail_reason"] == (
        "max err 2.0e-02 > 1.5x FA3 FP8's 1.0e-02")

    # A result that failed a check already keeps that reason before the bound's.
    both = record(0.02, 0.01)
    both["results"]["flashcore"].update({"pass": False,
                                         "fail_reason": "lse err 2e-03 > tol 1e-03"})
    compare_accuracy.apply_fa3_fp8_bound(both, ["flashcore"])
    assert both["results"]["flashcore"]["fail_reason"] == (
        "lse err 2e-03 > tol 1e-03; max err 2.0e-02 > 1.5x FA3 FP8's 1.0e-02")

    no_fa3 = record(0.02, None)
    compare_accuracy.apply_fa3_fp8_bound(no_fa3, ["flashcore"])
    assert no_fa3["fa3_fp8_bound"] is None and no_fa3["tol_out"] == 0.05
    assert no_fa3["results"]["flashcore"]["status"] == "ok"


class _RefusingModule:
    """A flashcore module whose backend has no fp8 kernel (sm90 today)."""

    class FlashCoreError(ValueError):
        pass

    def attention(self, q, k, v, **kwargs):
        raise self.FlashCoreError("backend sm90 does not run fp8_e4m3 yet")


def test_each_implementations_answer_to_an_fp8_row(torch):
    import compare_accuracy
    import compare_runner

    (q8, k8, v8), descales = _fp8_inputs(torch)
    checker = compare_accuracy.Fp8Checker(q8, k8, v8, descales, True, 0.125, 16)
    settings = type("Settings", (), dict(iters=1, warmup=0, budget_s=1.0, rounds=1,
                                         timing="events"))()
    calls = []

    def fake_fa3(q, k, v, softmax_scale, causal, **kwargs):
        calls.append(sorted(kwargs))
        return torch.zeros(q.shape, dtype=torch.bfloat16)

    impls = [compare_runner.FlashCoreImpl(_RefusingModule(), "sm90"),
             compare_runner.SdpaImpl("cudnn"), compare_runner.Fa3Impl(fake_fa3)]
    results = compare_runner.run_impls(impls, q8, k8, v8, True, checker, settings, False,
                                       descales)
    sm90 = results["flashcore[sm90]"]
    assert (sm90["status"], sm90["cell"]) == ("n/a", "no fp8 kernel")
    assert "does not run fp8_e4m3 yet" in sm90["reason"]
    assert (results["cudnn"]["status"], results["cudnn"]["cell"]) == ("n/a", "fp8 n/a")
    assert results["fa3"]["cell"] == "GPU only"  # fp8 itself is not refused
    assert calls == []

    import flashcore

    cpu = compare_runner.FlashCoreImpl(flashcore, "cpu")
    result = compare_runner.run_impls([cpu], q8, k8, v8, True, checker, settings, False,
                                      descales)["flashcore[cpu]"]
    assert result["status"] == "ok" and result["pass"], result
