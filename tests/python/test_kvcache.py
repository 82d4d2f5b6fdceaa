"""flashcore.attention_with_kvcache on NumPy arrays (CPU backends): contiguous and paged caches
(page sizes 1, 16, 64), dense and packed queries, the in-place append, against the float64
reference of each sequence over its cached plus new keys; NaN in every slot and page a
sequence does not own; the errors of bad caches and index tensors."""

import zlib

import numpy as np
import pytest

import flashcore
from flashcore import _serving
from serving_reference import PagedCache, check_sequence, cu_seqlens

BACKENDS = ["cpu", "reference"]
HEADS_Q, HEADS_KV, HEAD_DIM = 8, 2, 64  # GQA 4
CACHE_SEQLENS = [5, 37, 0, 100]  # a sequence with an empty cache too
CAPACITY = 112  # room for the longest cache plus its new tokens
# Queries per sequence: decode (1 each), a dense chunk (5 each), packed (0 to 9 each).
Q_LAYOUTS = {"decode": 1, "dense": 5, "packed": [0, 3, 9, 1]}
CACHES = ["contiguous", "page1", "page16", "page64"]


class Case:
    """One call's inputs, the cache before it and the keys each sequence should attend to."""

    def __init__(self, cache_kind, q_layout, append, dtype, seed_text):
        rng = np.random.default_rng(zlib.crc32(seed_text.encode()))
        batch = len(CACHE_SEQLENS)
        self.cache_seqlens = np.array(CACHE_SEQLENS, dtype=np.int32)
        queries = Q_LAYOUTS[q_layout]
        self.packed = isinstance(queries, list)
        self.q_lengths = queries if self.packed else [queries] * batch
        if self.packed:
            self.cu_q = cu_seqlens(self.q_lengths)
            self.q = self._random(rng, (self.cu_q[-1], HEADS_Q, HEAD_DIM), dtype)
        else:
            self.cu_q = None
            self.q = self._random(rng, (batch, queries, HEADS_Q, HEAD_DIM), dtype)
        self.new_lengths = self.q_lengths if self.packed else [2] * batch
        self.k_new = self.v_new = None
        if append:
            shape = ((self.cu_q[-1],) if self.packed else (batch, 2)) + (HEADS_KV, HEAD_DIM)
            self.k_new, self.v_new = (self._random(rng, shape, dtype) for _ in range(2))
        # Every sequence's cached keys, then the cache holding them with NaN everywhere else.
        self.cached = [(self._random(rng, (n, HEADS_KV, HEAD_DIM), dtype),
                        self._random(rng, (n, HEADS_KV, HEAD_DIM), dtype))
                       for n in CACHE_SEQLENS]
        self.page_table = None
        if cache_kind == "contiguous":
            shape = (batch, CAPACITY, HEADS_KV, HEAD_DIM)
            self.k_cache = np.full(shape, np.nan, dtype=dtype)
            self.v_cache = np.full(shape, np.nan, dtype=dtype)
            for b, (k, v) in enumerate(self.cached):
                self.k_cache[b, :len(k)], self.v_cache[b, :len(v)] = k, v
        else:
            self.paged = PagedCache(rng, [CAPACITY] * batch, int(cache_kind[4:]), HEADS_KV,
                                    HEAD_DIM, dtype)
            for b, (k, v) in enumerate(self.cached):
                self.paged.write(b, k, v)
            self.k_cache, self.v_cache, self.page_table = (self.paged.k, self.paged.v,
                                                           self.paged.page_table)

    @staticmethod
    def _random(rng, shape, dtype):
        return rng.standard_normal(shape).astype(dtype)

    def new_tokens(self, b):
        """(k, v) sequence b appends: rows of the packed k_new, or its batch entry."""
        if self.k_new is None:
            return None
        if self.packed:
            rows = slice(self.cu_q[b], self.cu_q[b + 1])
            return self.k_new[rows], self.v_new[rows]
        return self.k_new[b], self.v_new[b]

    def keys(self, b):
        """Every key sequence b attends to: its cache, then its new tokens."""
        k, v = self.cached[b]
        new = self.new_tokens(b)
        return (k, v) if new is None else (np.concatenate([k, new[0]]),
                                           np.concatenate([v, new[1]]))

    def queries(self, b, out, lse):
        """(q, out, lse) rows of sequence b; lse as [heads_q, seqlen_q]."""
        if self.packed:
            rows = slice(self.cu_q[b], self.cu_q[b + 1])
            return self.q[rows], out[rows], None if lse is None else lse[:, rows]
        return self.q[b], out[b], None if lse is None else lse[b]

    def call(self, **kwargs):
        return flashcore.attention_with_kvcache(
            self.q, self.k_cache, self.v_cache, self.cache_seqlens, page_table=self.page_table,
            k=self.k_new, v=self.v_new, cu_seqlens_q=self.cu_q,
            max_seqlen_q=max(self.q_lengths) if self.packed else None, **kwargs)

    def check(self, name, out, lse, causal, softmax_scale=None):
        for b in range(len(CACHE_SEQLENS)):
            q, out_b, lse_b = self.queries(b, out, lse)
            k, v = self.keys(b)
            if k.shape[0] == 0:  # no key at all: out 0, lse -inf
                assert np.all(out_b == 0) and (lse_b is None or np.all(np.isneginf(lse_b)))
                continue
            check_sequence(f"{name} sequence {b}", out_b, lse_b, q, k, v, causal, softmax_scale)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("append", [False, True], ids=["read", "append"])
@pytest.mark.parametrize("q_layout", list(Q_LAYOUTS))
@pytest.mark.parametrize("cache_kind", CACHES)
def test_matches_each_sequence_over_its_cache(cache_kind, q_layout, append, causal, backend):
    name = f"{cache_kind} {q_layout} {'append' if append else 'read'} causal={causal} {backend}"
    case = Case(cache_kind, q_layout, append, np.float16, name)
    k_before, v_before = case.k_cache.copy(), case.v_cache.copy()
    out, lse = case.call(causal=causal, return_lse=True, backend=backend)
    assert out.shape == case.q.shape and out.dtype == case.q.dtype
    expected_lse = ((HEADS_Q, case.q.shape[0]) if case.packed else
                    (case.q.shape[0], HEADS_Q, case.q.shape[1]))
    assert lse.shape == expected_lse and lse.dtype == np.float32
    case.check(name, out, lse, causal)
    assert list(case.cache_seqlens) == CACHE_SEQLENS  # the caller advances it, not the call
    # The append wrote exactly the new tokens' slots, in place; every other slot is as it was.
    for b in range(len(CACHE_SEQLENS)):
        new = case.new_tokens(b)
        if new is None:
            continue
        start, count = CACHE_SEQLENS[b], new[0].shape[0]
        if case.page_table is None:
            k_before[b, start:start + count], v_before[b, start:start + count] = new
        else:
            pages, slots = case.paged.slots(b, start + count)
            k_before[pages[start:], slots[start:]] = new[0]
            v_before[pages[start:], slots[start:]] = new[1]
    np.testing.assert_array_equal(case.k_cache, k_before)
    np.testing.assert_array_equal(case.v_cache, v_before)


@pytest.mark.parametrize("backend", BACKENDS)
def test_float32_softmax_scale_and_out(backend):
    case = Case("page16", "dense", True, np.float32, f"float32 {backend}")
    out = np.full(case.q.shape, np.nan, dtype=np.float32)
    result = case.call(causal=True, softmax_scale=0.2, out=out, backend=backend)
    assert result is out
    case.check(f"float32 {backend}", out, None, True, softmax_scale=0.2)


def test_output_equals_dense_attention_over_the_concatenated_keys():
    """A decode step with append is the dense call on cache + new tokens."""
    case = Case("page16", "dense", True, np.float32, "dense equality")
    out = case.call(causal=True, backend="reference")
    for b in range(len(CACHE_SEQLENS)):
        k, v = case.keys(b)
        dense = flashcore.attention(case.q[b:b + 1], k[None], v[None], causal=True,
                                    backend="reference")
        np.testing.assert_allclose(out[b], dense[0], rtol=0, atol=1e-6)


def test_bfloat16_through_ml_dtypes():
    ml_dtypes = pytest.importorskip("ml_dtypes", reason="ml_dtypes gives NumPy a bfloat16 dtype")
    case = Case("page16", "packed", True, ml_dtypes.bfloat16, "bf16")
    out = case.call(causal=True)
    assert out.dtype == ml_dtypes.bfloat16
    case.check("bf16", out, None, True)


# ---- errors: each names the argument as the caller passed it ----------------------------------


def _error(case, match, error=flashcore.FlashCoreError, **changes):
    kwargs = dict(q=case.q, k_cache=case.k_cache, v_cache=case.v_cache,
                  cache_seqlens=case.cache_seqlens, page_table=case.page_table, k=case.k_new,
                  v=case.v_new, cu_seqlens_q=case.cu_q)
    kwargs.update(changes)
    with pytest.raises(error, match=match):
        flashcore.attention_with_kvcache(**kwargs)


def test_index_tensors_must_be_int32():
    case = Case("page16", "dense", True, np.float32, "errors")
    _error(case, "cache_seqlens must be int32, got int64",
           cache_seqlens=case.cache_seqlens.astype(np.int64))
    _error(case, "page_table must be int32, got int64",
           page_table=case.page_table.astype(np.int64))
    _error(case, "page_table must be int32, got uint32",
           page_table=case.page_table.astype(np.uint32))


def test_cache_shapes_and_lengths_are_named():
    case = Case("page16", "dense", True, np.float32, "errors")
    _error(case, r"cache_seqlens\[3\]=100 plus 2 new tokens is more than the cache's 96 slots "
                 r"per sequence \(page_table width 6 x page_size 16\)",
           page_table=case.page_table[:, :6])
    _error(case, r"page_size=0: k_cache, the paged cache",
           k_cache=case.k_cache[:, :0], v_cache=case.v_cache[:, :0])
    _error(case, "cache_seqlens", cache_seqlens=case.cache_seqlens[:3])
    _error(case, "k is set but v is not; an append needs both", v=None)
    _error(case, r"page_table must have 2 dimensions \[batch, max_pages_per_seq\], got 0",
           page_table=np.array(1, np.int32))
    contiguous = Case("contiguous", "decode", True, np.float32, "errors")
    _error(contiguous, r"cache_seqlens\[3\]=100 plus 2 new tokens is more than the cache's 101",
           k_cache=contiguous.k_cache[:, :101], v_cache=contiguous.v_cache[:, :101])


@pytest.mark.parametrize("check_indices", [False, True])
def test_a_page_out_of_range_is_named_on_the_host(check_indices):
    case = Case("page16", "decode", False, np.float32, "errors")
    table = case.page_table.copy()
    table[1, 2] = case.k_cache.shape[0]  # sequence 1's third page: tokens 32..36 are read
    _error(case, r"page_table\[1\]\[2\]=" + str(case.k_cache.shape[0]), page_table=table,
           check_indices=check_indices)


def test_a_read_only_cache_cannot_take_an_append():
    case = Case("contiguous", "decode", True, np.float32, "errors")
    case.k_cache.flags.writeable = False
    _error(case, "k_cache is read-only: the new keys and values are written into the cache")
    case.k_new = case.v_new = None
    case.call()  # reading a read-only cache is fine


def test_max_seqlen_q_is_for_a_packed_q():
    case = Case("contiguous", "decode", False, np.float32, "errors")
    _error(case, "max_seqlen_q=1 is only for a packed q", max_seqlen_q=1)
    packed = Case("contiguous", "packed", False, np.float32, "errors")
    _error(packed, "max_seqlen_q must be an int", flashcore.FlashCoreTypeError, max_seqlen_q=2.5)


def test_library_names_become_the_callers_names():
    assert _serving.kvcache_names("k_new/v_new are set without cache_seqlens") == (
        "k/v are set without cache_seqlens")
    assert _serving.kvcache_names("dtype of v (fp16) does not match dtype of q; seqlen_k=3") == (
        "dtype of v_cache (fp16) does not match dtype of q; seqlen_k=3")
