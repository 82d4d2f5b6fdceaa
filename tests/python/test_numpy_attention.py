"""flashcore.attention on NumPy arrays (CPU backends) against the float64 reference."""

import zlib

import numpy as np
import pytest

import flashcore
from attention_reference import (assert_within_rule, attention_reference, baseline_attention,
                                 check_accuracy, random_bshd)

# (batch, seqlen_q, seqlen_k, heads_q, heads_kv, head_dim): tails, both causal alignments
# (seqlen_q < seqlen_k and seqlen_q > seqlen_k, which leaves rows with no visible key), GQA 4
# and 8, MQA, odd head dims (the CPU backends take any head_dim).
SHAPES = [
    (1, 1, 1, 1, 1, 64),
    (2, 17, 17, 4, 4, 64),
    (1, 63, 65, 4, 1, 32),
    (1, 65, 17, 8, 2, 128),
    (1, 64, 127, 8, 1, 80),
    (2, 127, 64, 4, 4, 16),
    (1, 1000, 1000, 8, 1, 64),
    (1, 1, 4097, 4, 1, 64),
]
DTYPES = [np.float32, np.float16]


def _shape_id(shape):
    return "b{}_sq{}_sk{}_hq{}_hkv{}_d{}".format(*shape)


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("shape", SHAPES, ids=_shape_id)
def test_matches_float64_reference(shape, causal, dtype):
    batch, seqlen_q, seqlen_k, heads_q, heads_kv, head_dim = shape
    rng = np.random.default_rng(zlib.crc32(repr((shape, causal, np.dtype(dtype).name)).encode()))
    q = random_bshd(rng, batch, seqlen_q, heads_q, head_dim, dtype)
    k = random_bshd(rng, batch, seqlen_k, heads_kv, head_dim, dtype)
    v = random_bshd(rng, batch, seqlen_k, heads_kv, head_dim, dtype)
    out, lse = flashcore.attention(q, k, v, causal=causal, return_lse=True)
    assert out.shape == q.shape and out.dtype == q.dtype
    assert lse.shape == (batch, heads_q, seqlen_q) and lse.dtype == np.float32
    check_accuracy(f"{_shape_id(shape)} causal={causal}", out, lse, q, k, v, causal)


@pytest.mark.parametrize("backend", ["reference", "cpu"])
def test_large_magnitude_inputs(backend):
    rng = np.random.default_rng(7)
    q, k, v = (random_bshd(rng, 1, 65, 4, 64, np.float16, std=30.0) for _ in range(3))
    out, lse = flashcore.attention(q, k, v, causal=True, return_lse=True, backend=backend)
    check_accuracy(f"std30 {backend}", out, lse, q, k, v, causal=True)


def test_bhsd_and_packed_qkv_views():
    rng = np.random.default_rng(3)
    batch, seqlen, heads, head_dim = 2, 65, 4, 64
    # SDPA's [b, h, s, d] seen as BSHD through strides, and slices of a packed qkv tensor.
    q_bhsd = rng.standard_normal((batch, heads, seqlen, head_dim)).astype(np.float32)
    qkv = rng.standard_normal((batch, seqlen, 3, heads, head_dim)).astype(np.float16)
    cases = {
        "bhsd": (q_bhsd.transpose(0, 2, 1, 3),) * 3,
        "packed_qkv": (qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2]),
    }
    for name, (q, k, v) in cases.items():
        assert not q.flags.c_contiguous
        out = flashcore.attention(q, k, v, causal=True)
        check_accuracy(name, out, None, q, k, v, causal=True)


def test_softmax_scale():
    rng = np.random.default_rng(4)
    q, k, v = (random_bshd(rng, 1, 33, 2, 64, np.float32) for _ in range(3))
    out = flashcore.attention(q, k, v, softmax_scale=0.3)
    check_accuracy("scale 0.3", out, None, q, k, v, softmax_scale=0.3)


def test_out_is_written_in_place_and_nan_poison_is_overwritten():
    rng = np.random.default_rng(5)
    q, k, v = (random_bshd(rng, 1, 17, 2, 64, np.float16) for _ in range(3))
    out = np.full(q.shape, np.nan, dtype=np.float16)
    result = flashcore.attention(q, k, v, out=out, causal=True)
    assert result is out
    check_accuracy("out=", out, None, q, k, v, causal=True)


def test_rows_with_no_visible_key_give_zero_and_minus_inf():
    rng = np.random.default_rng(6)
    q = random_bshd(rng, 1, 8, 2, 64, np.float32)
    k, v = (random_bshd(rng, 1, 3, 2, 64, np.float32) for _ in range(2))
    out, lse = flashcore.attention(q, k, v, causal=True, return_lse=True)
    # seqlen_q - seqlen_k = 5 top rows see nothing under bottom-right alignment.
    assert np.all(out[:, :5] == 0)
    assert np.all(np.isneginf(lse[:, :, :5]))
    assert np.all(np.isfinite(lse[:, :, 5:]))


@pytest.mark.parametrize("shape", [(0, 4, 2, 64), (1, 0, 2, 64)])
def test_zero_sized_batch_or_sequence_is_a_no_op(shape):
    q = np.zeros(shape, dtype=np.float32)
    out, lse = flashcore.attention(q, q, q, return_lse=True)
    assert out.shape == shape and lse.shape == (shape[0], shape[2], shape[1])


def test_bfloat16_through_ml_dtypes():
    ml_dtypes = pytest.importorskip("ml_dtypes", reason="ml_dtypes gives NumPy a bfloat16 dtype")
    rng = np.random.default_rng(8)
    q, k, v = (random_bshd(rng, 1, 33, 4, 64, ml_dtypes.bfloat16) for _ in range(3))
    out = flashcore.attention(q, k, v, causal=True)
    assert out.dtype == ml_dtypes.bfloat16
    check_accuracy("bf16", out, None, q, k, v, causal=True)


# (seqlen_q, seqlen_k, poisoned key): square, fewer queries than keys (decode-like chunk), more
# queries than keys (top rows see nothing); keys inside and at the edges of 64-key blocks.
POISON_CASES = [(200, 200, 100), (200, 200, 63), (100, 260, 200), (100, 260, 259),
                (260, 100, 50), (260, 100, 99)]


@pytest.mark.parametrize("backend", ["cpu", "reference"])
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("target", ["k", "v"])
@pytest.mark.parametrize("poison", [np.nan, np.inf, -np.inf], ids=["nan", "inf", "-inf"])
@pytest.mark.parametrize("case", POISON_CASES, ids=lambda c: "sq{}_sk{}_key{}".format(*c))
def test_causally_hidden_nan_and_inf_keys_do_not_reach_the_output(case, poison, target, dtype,
                                                                   backend):
    """NaN/Inf in a K or V row (an unwritten KV-cache slot, say) must not touch the rows the
    causal mask hides it from. Every key is visible to the last query row, so the rows checked
    are those before the key: rows i with i + seqlen_k - seqlen_q < key. They must be finite and
    match the float64 reference on clean data."""
    seqlen_q, seqlen_k, key = case
    rng = np.random.default_rng(seqlen_q * 1000 + key)
    q = random_bshd(rng, 1, seqlen_q, 4, 64, dtype)
    k, v = (random_bshd(rng, 1, seqlen_k, 2, 64, dtype) for _ in range(2))
    poisoned = {"k": k.copy(), "v": v.copy()}
    poisoned[target][:, key] = poison
    out, lse = flashcore.attention(q, poisoned["k"], poisoned["v"], causal=True,
                                   return_lse=True, backend=backend)
    rows = min(max(key - (seqlen_k - seqlen_q), 0), seqlen_q)  # rows that never see `key`
    assert rows > 0
    hidden = out[:, :rows].astype(np.float64)
    bad = np.argwhere(~np.isfinite(hidden))
    assert bad.size == 0, (
        f"{backend}: {target}[{key}] = {poison} reached {len(bad)} outputs of rows that cannot "
        f"see it; first at [batch, row, head, col] {bad[0].tolist()} = {hidden[tuple(bad[0])]}")
    # The reference runs on the whole clean problem (causal alignment depends on seqlen_q).
    reference = attention_reference(q, k, v, causal=True)
    baseline = baseline_attention(q, k, v, causal=True)
    assert_within_rule(f"{backend} rows 0..{rows - 1} with {target}[{key}] = {poison}",
                       out[:, :rows], lse[:, :, :rows],
                       *[(o[:, :rows], l[:, :, :rows]) for o, l in (reference, baseline)])
