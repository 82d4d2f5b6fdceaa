"""flashcore.attention_varlen on NumPy arrays (CPU backends): ragged batches against the float64
reference of each sequence run alone, and the errors of bad index tensors."""

import zlib

import numpy as np
import pytest

import flashcore
from serving_reference import check_varlen, cu_seqlens, random_packed

BACKENDS = ["cpu", "reference"]
# (query lengths, key lengths, heads_q, heads_kv, head_dim): 0-length queries with keys, single
# rows, tails around 64, more queries than keys (rows that see nothing under causal), GQA 4 and
# MQA, an odd head_dim.
CASES = [
    ([1, 17, 0, 64, 65], [1, 17, 5, 64, 65], 4, 4, 64),
    ([3, 0, 40, 1], [70, 9, 40, 33], 8, 2, 32),
    ([65, 12], [17, 12], 4, 1, 80),
    ([0, 0], [3, 0], 2, 2, 16),
    ([1, 200, 2], [4097, 200, 4097], 4, 1, 64),
]


def _case_id(case):
    lengths_q, lengths_k, heads_q, heads_kv, head_dim = case
    lengths = "q{}_k{}".format("-".join(map(str, lengths_q)), "-".join(map(str, lengths_k)))
    return f"{lengths}_h{heads_q}x{heads_kv}_d{head_dim}"


def _batch(case, dtype, seed_text):
    lengths_q, lengths_k, heads_q, heads_kv, head_dim = case
    rng = np.random.default_rng(zlib.crc32(seed_text.encode()))
    cu_q, cu_k = cu_seqlens(lengths_q), cu_seqlens(lengths_k)
    q = random_packed(rng, cu_q[-1], heads_q, head_dim, dtype)
    k = random_packed(rng, cu_k[-1], heads_kv, head_dim, dtype)
    v = random_packed(rng, cu_k[-1], heads_kv, head_dim, dtype)
    return q, k, v, cu_q, cu_k, max(lengths_q), max(lengths_k)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", [np.float32, np.float16], ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("case", CASES, ids=_case_id)
def test_ragged_batch_matches_each_sequence_alone(case, causal, dtype, backend):
    name = f"{_case_id(case)} causal={causal} {np.dtype(dtype).name} {backend}"
    q, k, v, cu_q, cu_k, max_q, max_k = _batch(case, dtype, name)
    out, lse = flashcore.attention_varlen(q, k, v, cu_q, cu_k, max_q, max_k, causal=causal,
                                          return_lse=True, backend=backend)
    assert out.shape == q.shape and out.dtype == q.dtype
    assert lse.shape == (q.shape[1], q.shape[0]) and lse.dtype == np.float32
    check_varlen(name, out, lse, q, k, v, cu_q, cu_k, causal)


def test_long_sequences_in_one_batch():
    """The issue's lengths 1000 and 4097 beside short ones (once: the float64 check of a
    1000 x 1000 sequence takes a second)."""
    case = ([1, 1000, 2], [4097, 1000, 4097], 4, 1, 64)
    q, k, v, cu_q, cu_k, max_q, max_k = _batch(case, np.float16, "long")
    out, lse = flashcore.attention_varlen(q, k, v, cu_q, cu_k, max_q, max_k, causal=True,
                                          return_lse=True, backend="cpu")
    check_varlen("long", out, lse, q, k, v, cu_q, cu_k, True)


@pytest.mark.parametrize("backend", BACKENDS)
def test_seqused_k_hides_the_keys_past_it(backend):
    """Keys past seqused_k[b] are never read: NaN there changes nothing."""
    case = ([5, 30, 1], [20, 40, 64], 4, 2, 64)
    q, k, v, cu_q, cu_k, max_q, max_k = _batch(case, np.float16, "seqused")
    used = np.array([7, 40, 0], dtype=np.int32)
    poisoned_k, poisoned_v = k.copy(), v.copy()
    for b in range(3):
        poisoned_k[cu_k[b] + used[b]:cu_k[b + 1]] = np.nan
        poisoned_v[cu_k[b] + used[b]:cu_k[b + 1]] = np.nan
    out, lse = flashcore.attention_varlen(q, poisoned_k, poisoned_v, cu_q, cu_k, max_q, max_k,
                                          causal=True, seqused_k=used, return_lse=True,
                                          backend=backend)
    check_varlen(f"seqused_k {backend}", out, lse, q, k, v, cu_q, cu_k, True, seqused_k=used)
    # The sequence with no key: out 0, lse -inf (as a dense call with no visible key).
    assert np.all(out[cu_q[2]:cu_q[3]] == 0)
    assert np.all(np.isneginf(lse[:, cu_q[2]:cu_q[3]]))


def test_out_softmax_scale_and_default_backend():
    case = ([9, 33], [9, 40], 4, 2, 64)
    q, k, v, cu_q, cu_k, max_q, max_k = _batch(case, np.float32, "out")
    out = np.full(q.shape, np.nan, dtype=np.float32)
    result = flashcore.attention_varlen(q, k, v, cu_q, cu_k, max_q, max_k, causal=True,
                                        softmax_scale=0.3, out=out)
    assert result is out
    check_varlen("out= scale 0.3", out, None, q, k, v, cu_q, cu_k, True, softmax_scale=0.3)


def test_bfloat16_through_ml_dtypes():
    ml_dtypes = pytest.importorskip("ml_dtypes", reason="ml_dtypes gives NumPy a bfloat16 dtype")
    case = ([17, 3], [17, 30], 4, 2, 64)
    q, k, v, cu_q, cu_k, max_q, max_k = _batch(case, ml_dtypes.bfloat16, "bf16")
    out = flashcore.attention_varlen(q, k, v, cu_q, cu_k, max_q, max_k, causal=True)
    assert out.dtype == ml_dtypes.bfloat16
    check_varlen("bf16", out, None, q, k, v, cu_q, cu_k, True)


def _small():
    return _batch(([3, 4], [5, 6], 2, 2, 16), np.float32, "errors")


def test_int64_index_tensors_are_named():
    q, k, v, cu_q, cu_k, max_q, max_k = _small()
    with pytest.raises(flashcore.FlashCoreError, match="cu_seqlens_q must be int32, got int64"):
        flashcore.attention_varlen(q, k, v, cu_q.astype(np.int64), cu_k, max_q, max_k)
    with pytest.raises(flashcore.FlashCoreError, match="cu_seqlens_k must be int32, got int64"):
        flashcore.attention_varlen(q, k, v, cu_q, cu_k.astype(np.int64), max_q, max_k)
    with pytest.raises(flashcore.FlashCoreError, match="seqused_k must be int32, got float32"):
        flashcore.attention_varlen(q, k, v, cu_q, cu_k, max_q, max_k,
                                   seqused_k=np.zeros(2, np.float32))


def test_wrong_lengths_and_ranks_are_named():
    q, k, v, cu_q, cu_k, max_q, max_k = _small()
    with pytest.raises(flashcore.FlashCoreError, match=r"cu_seqlens_k has 2 entries, but batch "
                                                        r"\+ 1 = 3"):
        flashcore.attention_varlen(q, k, v, cu_q, cu_k[:-1], max_q, max_k)
    with pytest.raises(flashcore.FlashCoreError, match="seqused_k"):
        flashcore.attention_varlen(q, k, v, cu_q, cu_k, max_q, max_k,
                                   seqused_k=np.zeros(3, np.int32))
    with pytest.raises(flashcore.FlashCoreError,
                       match=r"cu_seqlens_q must have 1 dimension \[batch \+ 1\], got 0"):
        flashcore.attention_varlen(q, k, v, np.array(3, np.int32), cu_k, max_q, max_k)
    with pytest.raises(flashcore.FlashCoreError,
                       match=r"q must have 3 dimensions \[total_q, heads_q, head_dim\], got 5"):
        flashcore.attention_varlen(q[None, None], k, v, cu_q, cu_k, max_q, max_k)
    with pytest.raises(flashcore.FlashCoreError, match="q"):
        flashcore.attention_varlen(q[None], k, v, cu_q, cu_k, max_q, max_k)


def test_max_seqlen_must_be_an_int32():
    q, k, v, cu_q, cu_k, max_q, max_k = _small()
    with pytest.raises(flashcore.FlashCoreTypeError, match="max_seqlen_q must be an int"):
        flashcore.attention_varlen(q, k, v, cu_q, cu_k, 4.0, max_k)
    with pytest.raises(flashcore.FlashCoreTypeError, match="max_seqlen_k must be an int"):
        flashcore.attention_varlen(q, k, v, cu_q, cu_k, max_q, True)
    with pytest.raises(flashcore.FlashCoreError, match="max_seqlen_k must be at most 2147483647"):
        flashcore.attention_varlen(q, k, v, cu_q, cu_k, max_q, 2**31)
    with pytest.raises(flashcore.FlashCoreError, match="max_seqlen_q must be >= 0, got -1"):
        flashcore.attention_varlen(q, k, v, cu_q, cu_k, -1, max_k)
    with pytest.raises(flashcore.FlashCoreTypeError, match="check_indices must be a bool"):
        flashcore.attention_varlen(q, k, v, cu_q, cu_k, max_q, max_k, check_indices=1)
    with pytest.raises(flashcore.FlashCoreTypeError, match="cu_seqlens_q must be a NumPy array"):
        flashcore.attention_varlen(q, k, v, [0, 3, 7], cu_k, max_q, max_k)


@pytest.mark.parametrize("check_indices", [False, True])
def test_decreasing_cu_seqlens_are_named_on_the_host(check_indices):
    q, k, v, cu_q, cu_k, max_q, max_k = _small()
    bad = np.array([0, 5, 4], np.int32)
    with pytest.raises(flashcore.FlashCoreError, match="cu_seqlens_k decreases at sequence 1"):
        flashcore.attention_varlen(q, k, v, cu_q, bad, max_q, max_k,
                                   check_indices=check_indices)
