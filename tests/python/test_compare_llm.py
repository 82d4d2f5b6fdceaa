"""bench/compare_grids.py (pure Python): the `llm` grid of model prefill shapes, and FLOPs that
count the (query, key) pairs the bottom-right causal mask leaves visible when seqlen_q != seqlen_k
(chunked prefill), so a chunk's TFLOPS are not understated by up to 2x."""
import os
import subprocess
import sys

import pytest

BENCH = os.path.join(os.path.dirname(__file__), "..", "..", "bench")
sys.path.insert(0, BENCH)
import compare_grids  # noqa: E402
from compare_grids import Config  # noqa: E402


def brute_force_pairs(sq, sk, causal):
    """Query i sees key j iff j <= i + sk - sq (bottom-right), every key when not causal."""
    return sum(1 for i in range(sq) for j in range(sk) if not causal or j <= i + sk - sq)


@pytest.mark.parametrize("sq,sk", [(1, 1), (1, 7), (4, 64), (17, 63), (63, 64), (64, 17),
                                   (100, 30), (65, 65), (128, 1000)])
def test_visible_pairs_match_a_brute_force_count(sq, sk):
    for causal in (False, True):
        config = Config(1, sq, sk, 1, 1, 64, "bf16", causal)
        assert config.visible_pairs() == brute_force_pairs(sq, sk, causal), (sq, sk, causal)


def test_chunked_prefill_flops_count_visible_pairs():
    # sq 2048 against sk 8192: row i sees 6145 + i keys, 2048 * (6145 + 8192) / 2 pairs.
    chunk = Config(1, 2048, 8192, 32, 8, 128, "bf16", True)
    pairs = 2048 * (6145 + 8192) // 2
    assert chunk.visible_pairs() == pairs == 14_681_088
    assert chunk.flops() == 4.0 * 32 * 128 * pairs
    # Not the halved product (which would be 8192 * 2048 / 2 = 8388608 pairs per head).
    assert chunk.flops() > 1.7 * 4.0 * 32 * 2048 * 8192 * 128 / 2
    # Speculative decoding: 4 rows against 4096 keys see almost everything.
    spec = Config(16, 4, 4096, 32, 8, 128, "bf16", True)
    assert spec.flops() == 4.0 * 16 * 32 * 128 * (4093 + 4094 + 4095 + 4096)


def test_equal_seqlens_keep_the_benchmarks_convention():
    for s in (512, 2048, 3000, 16384):
        causal = Config(2, s, s, 16, 16, 128, "bf16", True)
        full = Config(2, s, s, 16, 16, 128, "bf16", False)
        assert full.flops() == 4.0 * 2 * 16 * s * s * 128
        assert causal.flops() == full.flops() / 2  # BENCHMARKS.md: halved
        # ... which is the exact count within a factor 1 + 1/s.
        exact = 4.0 * 2 * 16 * 128 * causal.visible_pairs()
        assert causal.flops() < exact and exact / causal.flops() == pytest.approx(1 + 1 / s)


def test_more_queries_than_keys_count_only_rows_with_keys():
    config = Config(1, 100, 30, 1, 1, 64, "bf16", True)  # rows 0..69 see no key
    assert config.flops() == 4.0 * 64 * (30 * 31 // 2)


def test_llm_grid_holds_named_model_shapes():
    configs = compare_grids.GRIDS["llm"][1]()
    by_name = {c.name: c for c in configs}
    assert len(by_name) == len(configs) and all(c.name for c in configs)
    assert all(c.dtype == "bf16" for c in configs)  # FA3's forward has no fp16
    assert by_name["llama3-8b-4k"] == Config(1, 4096, 4096, 32, 8, 128, "bf16", True,
                                             "llama3-8b-4k")
    assert (by_name["llama3-70b-8k"].heads_q, by_name["llama3-70b-8k"].heads_kv) == (64, 8)
    assert by_name["mqa-8k"].heads_kv == 1
    assert by_name["gemma3-12b-8k"].head_dim == 256
    assert not by_name["flux-4608"].causal and by_name["flux-4608"].seqlen_q == 4608
    chunks = [c for c in configs if c.seqlen_q != c.seqlen_k]
    assert chunks and all(c.causal and c.seqlen_q < c.seqlen_k for c in chunks)
    for c in configs:
        assert c.heads_q % c.heads_kv == 0
        assert 2048 <= c.seqlen_k <= 32768 and 1 <= c.batch <= 8
    ratios = {c.heads_q // c.heads_kv for c in configs}
    assert {1, 4, 8, 32} <= ratios


def test_chunk_shapes_file_holds_named_chunked_prefills():
    """bench/chunk_shapes.txt: every shape a causal chunk of fewer queries than keys, with the
    Llama-3-8B and Gemma-3-12B heads the results notes name."""
    configs = compare_grids.shape_file_configs(os.path.join(BENCH, "chunk_shapes.txt"))
    by_name = {c.name: c for c in configs}
    assert len(by_name) == len(configs) and all(c.name for c in configs)
    assert all(c.causal and c.seqlen_q < c.seqlen_k for c in configs)
    assert by_name["d256-chunk-2k-of-8k"] == Config(1, 2048, 8192, 16, 8, 256, "bf16", True,
                                                    "d256-chunk-2k-of-8k")
    assert {(c.heads_q, c.heads_kv, c.head_dim) for c in configs} == {(32, 8, 128), (16, 8, 256)}


def test_list_prints_the_llm_grid_without_torch():
    out = subprocess.run([sys.executable, os.path.join(BENCH, "compare.py"), "--list", "--grid",
                          "llm"], capture_output=True, text=True, check=True).stdout.splitlines()
    assert len(out) == len(compare_grids.GRIDS["llm"][1]())
    assert out[1] == "llama3-8b-4k: b1 sq4096 sk4096 hq32 hkv8 d128 bf16 causal"
    assert "chunk-2k-of-8k: b1 sq2048 sk8192 hq32 hkv8 d128 bf16 causal" in out


def run_compare(*args):
    return subprocess.run([sys.executable, os.path.join(BENCH, "compare.py"), *args],
                          capture_output=True, text=True)


def test_shapes_file_replaces_the_grid(tmp_path):
    shapes = tmp_path / "mine.txt"
    shapes.write_text("# my model\nmine-3000  2  3000 3000  28 4  128 1\n"
                      "dit-1536   1  1536 1536  24 24 128 0   # image tokens\n")
    result = run_compare("--list", "--shapes", str(shapes))
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [
        "mine-3000: b2 sq3000 sk3000 hq28 hkv4 d128 bf16 causal",
        "dit-1536: b1 sq1536 sk1536 hq24 hkv24 d128 bf16"]
    # The filters apply to a shapes file as to a grid.
    result = run_compare("--list", "--shapes", str(shapes), "--causal", "no", "--dtypes", "fp8")
    assert result.stdout.splitlines() == ["dit-1536: b1 sq1536 sk1536 hq24 hkv24 d128 fp8"]
    result = run_compare("--list", "--shapes", str(shapes), "--dtypes", "fp16,bf16",
                         "--causal", "yes")
    assert result.stdout.splitlines() == [
        "mine-3000: b2 sq3000 sk3000 hq28 hkv4 d128 bf16 causal",
        "mine-3000: b2 sq3000 sk3000 hq28 hkv4 d128 fp16 causal"]


@pytest.mark.parametrize("text,message", [
    ("a 1 2 3 4 5 6\n", "expected 8 fields, got 7"),
    ("a 1 2 3 4 x 6 1\n", "expected 7 integers after the name, got '1 2 3 4 x 6 1'"),
    ("a 1 2 3 4 4 64 2\n", "causal is 0 or 1, got 2"),
    ("a 1 2 3 6 4 64 1\n", "heads_q a multiple of heads_kv, got b1 sq2 sk3 hq6 hkv4 d64"),
    ("a 0 2 3 4 4 64 1\n", "needs positive sizes"),
    ("# nothing\n", "holds no shape"),
])
def test_bad_shapes_files_name_the_line_and_the_value(tmp_path, text, message):
    shapes = tmp_path / "bad.txt"
    shapes.write_text(text)
    result = run_compare("--list", "--shapes", str(shapes))
    assert result.returncode != 0 and message in result.stderr, result.stderr


def test_missing_shapes_file_and_serving_grid_are_refused(tmp_path):
    result = run_compare("--list", "--shapes", str(tmp_path / "none.txt"))
    assert result.returncode != 0 and "cannot read" in result.stderr and "none.txt" in result.stderr
    shapes = tmp_path / "ok.txt"
    shapes.write_text("a 1 64 64 4 4 64 0\n")
    result = run_compare("--list", "--shapes", str(shapes), "--grid", "serving")
    assert result.returncode == 2 and "--shapes replaces a dense grid" in result.stderr
