"""bench/compare.py --grid serving: the rows issue 25 asks to time, their work (FLOPs, K/V bytes)
and the argument handling (pure Python: no torch, no GPU)."""
import os
import subprocess
import sys

import pytest

BENCH = os.path.join(os.path.dirname(__file__), "..", "..", "bench")
sys.path.insert(0, BENCH)
import compare  # noqa: E402
import compare_grids  # noqa: E402
import compare_serving_grid as grid  # noqa: E402


def test_the_serving_grid_holds_the_issues_rows():
    configs = grid.serving_configs()
    described = [c.describe() for c in configs]
    assert len(set(configs)) == len(configs)
    varlen = [c for c in configs if c.layout == grid.VARLEN]
    # The ragged batch, then the equal-length batches packed (beside their dense rows).
    assert [c.lengths_q for c in varlen] == [(8192, 4096, 2048, 1024, 512, 256, 128, 64, 17, 1),
                                             (8192,) * 2, (2048,) * 8]
    dense = [c for c in configs if c.group == "varlen" and c.layout == grid.DENSE]
    assert [(c.lengths_q, c.lengths_k) for c in dense] == \
        [(c.lengths_q, c.lengths_k) for c in varlen[1:]]
    assert all((c.heads_q, c.heads_kv, c.head_dim, c.causal) == (32, 8, 128, True)
               for c in configs)
    decode_pages = sorted(c.page_size for c in configs
                          if c.group == "decode" and c.layout == grid.PAGED)
    assert decode_pages == [1, 16, 64]
    # Every paged group has the dense and contiguous rows it is measured against.
    for group, batch, keys in (("decode", 64, 4096), ("mid", 16, 8192), ("long", 1, 32768)):
        layouts = {c.layout for c in configs if c.group == group}
        assert layouts == {grid.DENSE, grid.CONTIGUOUS, grid.PAGED}, group
        assert all(c.lengths_k == (keys,) * batch and c.lengths_q == (1,) * batch
                   for c in configs if c.group == group)
    assert "decode paged p16: b64 sq1 sk4096 hq32 hkv8 d128 bf16 causal" in described
    # The equal-length batches hold about the ragged batch's tokens.
    tokens = sum(varlen[0].lengths_q)
    for c in dense + varlen[1:]:
        assert abs(sum(c.lengths_q) - tokens) < 0.01 * tokens


def test_flops_are_the_dense_convention_summed_over_sequences():
    ragged = grid.ServingConfig("varlen", grid.VARLEN, (100, 7, 1), (100, 9, 1))
    expected = sum(compare_grids.Config(1, sq, sk, 32, 8, 128, "bf16", True).flops()
                   for sq, sk in zip(ragged.lengths_q, ragged.lengths_k))
    assert ragged.flops() == pytest.approx(expected)
    full = grid.ServingConfig("varlen", grid.VARLEN, (3,), (5,), causal=False)
    assert full.flops() == 4 * 32 * 128 * 15


def test_kv_bytes_count_every_key_once():
    decode = [c for c in grid.serving_configs() if c.group == "decode"][0]
    assert decode.kv_bytes() == 2 * 64 * 4096 * 8 * 128 * 2  # k and v, bf16: 1 GiB
    assert decode.is_decode() and not grid.serving_configs()[0].is_decode()


def test_tiny_grid_scales_every_length():
    tiny = grid.SERVING_GRIDS["serving-tiny"][1](("fp16",))
    full = grid.serving_configs(("fp16",))
    assert len(tiny) == len(full)
    for small, big in zip(tiny, full):
        assert small.lengths_k == tuple(max(1, n // grid.TINY_DIVISOR) for n in big.lengths_k)
        assert small.flops() < compare.CPU_MAX_FLOPS


def test_parse_args_takes_the_serving_grid():
    args = compare.parse_args(["--grid", "serving", "--dtypes", "bf16,fp16"])
    assert args.serving and len(args.configs) == 2 * len(grid.serving_configs())
    assert compare.parse_args(["--grid", "quick"]).serving is False
    with pytest.raises(SystemExit) as exit_info:
        compare.parse_args(["--grid", "serving", "--seqlens", "4096"])
    assert exit_info.value.code == 2


def test_list_prints_the_serving_rows_without_torch():
    result = subprocess.run([sys.executable, os.path.join(BENCH, "compare.py"), "--list",
                             "--grid", "serving"], capture_output=True, text=True, check=True)
    lines = result.stdout.splitlines()
    assert len(lines) == len(grid.serving_configs())
    assert lines[0].startswith("varlen varlen: lengths 8192+4096+")


def test_fp8_rows_are_the_varlen_group_in_fp8():
    bf16 = [c for c in grid.serving_configs() if c.group in grid.FP8_GROUPS]
    fp8 = grid.serving_configs(("fp8",))
    assert [(c.group, c.layout, c.lengths_q) for c in fp8] == \
        [(c.group, c.layout, c.lengths_q) for c in bf16]
    assert {c.dtype for c in fp8} == {"fp8"} and fp8[0].describe().endswith("d128 fp8 causal")
    assert fp8[0].kv_bytes() * 2 == bf16[0].kv_bytes()  # one byte an element
    args = compare.parse_args(["--grid", "serving", "--dtypes", "bf16,fp8"])
    assert len(args.configs) == len(grid.serving_configs()) + len(fp8)


def test_fp8_inputs_are_quantized_per_sequence_and_kv_head():
    torch = pytest.importorskip("torch")
    import compare_accuracy
    import compare_serving

    config = grid.SERVING_GRIDS["serving-tiny"][1](("fp8",))[0]  # the ragged batch, tiny
    inputs = compare_serving.Inputs(config, "cpu", seed=0)
    batch, hkv = config.batch, config.heads_kv
    assert inputs.out_dtype == torch.bfloat16
    for name, codes, offsets, heads in (("q", inputs.q, inputs.cu_q, config.heads_q),
                                        ("k", inputs.k, inputs.cu_k, hkv),
                                        ("v", inputs.v, inputs.cu_k, hkv)):
        assert codes.dtype == torch.float8_e4m3fn
        descale = inputs.descales[name + "_descale"]
        assert descale.shape == (batch, hkv) and descale.dtype == torch.float32
        # descale = amax / 448 of each sequence's kv-head group: its largest code is +-448.
        for b in range(batch):
            rows = codes[int(offsets[b]):int(offsets[b + 1])].float()
            per_head = rows.abs().reshape(rows.shape[0], hkv, heads // hkv, -1)
            assert torch.all(per_head.amax(dim=(0, 2, 3)) == compare_accuracy.E4M3_MAX)
    assert {n: d.shape for n, d in inputs.sequence_descales(2).items()} == \
        {n: (1, hkv) for n in ("q_descale", "k_descale", "v_descale")}


def test_an_fp8_varlen_row_on_the_cpu_backend_passes_the_fp8_rule():
    torch = pytest.importorskip("torch")
    flashcore = pytest.importorskip("flashcore")
    import compare_serving

    ragged, dense_b2, packed_b2 = grid.SERVING_GRIDS["serving-tiny"][1](("fp8",))[:3]
    settings = type("Settings", (), dict(iters=1, warmup=0, budget_s=1.0, rounds=1,
                                         timing="events", graph_calls=1))()
    impl = compare_serving.FlashCoreServing(flashcore, "cpu")
    for config in (ragged, dense_b2, packed_b2):
        result = compare_serving.run_row(config, [impl], settings, "cpu", False, seed=1,
                                         check_rows=8)["flashcore"]
        assert result["status"] == "ok" and result["pass"], (config.describe(), result)
        assert result["max_err_out"] > 0
    assert result["twin"] == "dense" and result["twin_max_diff"] == 0.0
    # Without v's descale the output is off by it: the FP8 rule fails the row.
    inputs = compare_serving.Inputs(ragged, "cpu", seed=1)
    inputs.descales.pop("v_descale")
    out = impl.call(inputs)
    inputs.descales = compare_serving.Inputs(ragged, "cpu", seed=1).descales
    assert not compare_serving.check(inputs, out, None, 8)["pass"]


def test_ratios_pair_a_varlen_row_with_the_dense_row_of_its_lengths():
    pytest.importorskip("torch")
    import compare_serving

    def record(config, ms, fa3_ms=None):
        results = {"flashcore": {"status": "ok", "median_ms": ms,
                                 "tflops": config.flops() / ms / 1e9}}
        if fa3_ms is not None:
            results["fa3"] = {"status": "ok", "median_ms": fa3_ms}
        return {"config_obj": config, "results": results}

    configs = [c for c in grid.serving_configs(("bf16", "fp16")) if c.group == "varlen"]
    ragged, dense_b2, packed_b2, dense_b8, packed_b8 = configs[:5]
    fp16_dense_b2 = configs[6]
    assert (packed_b2.layout, packed_b2.lengths_q) == (grid.VARLEN, (8192, 8192))
    assert fp16_dense_b2.dtype == "fp16" and fp16_dense_b2.layout == grid.DENSE
    records = [record(ragged, 1.2, 1.25), record(dense_b2, 1.6), record(packed_b2, 1.65, 1.5),
               record(dense_b8, 0.5), record(packed_b8, 0.5), record(fp16_dense_b2, 3.2)]
    notes = compare_serving.ratios(records, "flashcore")
    # The ragged batch against the group's first dense row; each packed batch against the
    # dense one of its lengths; the fp16 row against nothing of bf16's.
    expected_ragged = (ragged.flops() / 1.2) / (dense_b2.flops() / 1.6)
    assert notes[0] == f"1.04x FA3; {expected_ragged:.2f}x dense b2"
    assert notes[2] == "0.91x FA3; 0.97x dense b2"
    assert notes[4] == "1.00x dense b8"
    assert notes[1] == "-" and notes[5] == "-"


def test_a_row_is_set_against_its_twin_of_the_same_rounds():
    pytest.importorskip("torch")
    import compare_serving

    configs = [c for c in grid.serving_configs() if c.group in ("varlen", "decode")]
    ragged, dense_b2, packed_b2 = configs[:3]
    paged = next(c for c in configs if c.layout == grid.PAGED)
    records = [{"config_obj": config, "results": {"flashcore": result}} for config, result in (
        (ragged, {"status": "ok", "median_ms": 1.2, "tflops": 1.0}),
        (dense_b2, {"status": "ok", "median_ms": 1.6, "tflops": 1.0}),
        # The dense row, minutes away, read 1.6 ms; the twin in the varlen row's rounds 1.7.
        (packed_b2, {"status": "ok", "median_ms": 1.75, "tflops": 1.0, "twin": "dense",
                     "twin_same_rounds_ms": 1.7}),
        (paged, {"status": "ok", "median_ms": 0.37, "kv_tb_s": 1.0, "twin": "contiguous",
                 "twin_same_rounds_ms": 0.355}))]
    notes = compare_serving.ratios(records, "flashcore")
    assert notes[2] == "0.97x dense b2, same rounds"
    assert notes[3] == "0.96x contiguous b64, same rounds"
    assert "same rounds" not in notes[0]  # the ragged batch has no twin


def test_twins_are_the_calls_issue_25_measures_each_layout_against():
    pytest.importorskip("torch")
    import compare_serving

    calls = []

    class Module:
        def attention(self, q, k, v, causal, backend):
            calls.append(("attention", tuple(q.shape), tuple(k.shape), tuple(v.shape), causal,
                          backend))
            return q

        def attention_with_kvcache(self, q, k_cache, v_cache, cache_seqlens, causal, backend):
            calls.append(("cache", tuple(q.shape), tuple(k_cache.shape), tuple(v_cache.shape),
                          causal, backend))
            return q

    impl = compare_serving.FlashCoreServing(Module(), "cpu")
    configs = grid.SERVING_GRIDS["serving-tiny"][1](("bf16",))
    twins = {}
    for config in configs:
        inputs = compare_serving.Inputs(config, "cpu", seed=0)
        twins[config] = impl.twin(inputs)
    varlen = [c for c in configs if c.group == "varlen"]
    ragged, dense_b2, packed_b2 = varlen[:3]
    assert twins[ragged] is None and twins[dense_b2] is None
    assert all(twins[c] is None for c in configs if c.layout == grid.DENSE)
    label, call = twins[packed_b2]
    call()
    (batch, length), heads = (packed_b2.batch, packed_b2.lengths_q[0]), packed_b2.heads_q
    assert label == "dense" and calls == [("attention", (batch, length, heads, 128),
                                           (batch, length, 8, 128), (batch, length, 8, 128),
                                           True, "cpu")]
    # A contiguous cache against the dense call, a paged one against the contiguous cache, on
    # the row's own dense keys [batch, keys, 8, 128].
    for config in configs:
        if config.layout not in (grid.CONTIGUOUS, grid.PAGED):
            continue
        calls.clear()
        label, call = twins[config]
        call()
        shape = (config.batch, config.lengths_k[0], 8, 128)
        kind = "attention" if config.layout == grid.CONTIGUOUS else "cache"
        assert label == ("dense" if config.layout == grid.CONTIGUOUS else "contiguous")
        assert calls == [(kind, (config.batch, 1, 32, 128), shape, shape, True, "cpu")]
