"""Bad arguments raise flashcore.FlashCoreError (a ValueError) whose message names the argument,
its value and what was expected: the library's own message, unchanged."""

import re

import numpy as np
import pytest

import flashcore
from flashcore import _arrays, _flashcore


def _bshd(*shape, dtype=np.float32):
    return np.random.default_rng(0).standard_normal(shape).astype(dtype)


Q = _bshd(1, 16, 4, 64)
KV = _bshd(1, 16, 2, 64)

CASES = {
    "float64": (dict(q=Q.astype(np.float64), k=KV, v=KV),
                "q has dtype float64, expected float16, bfloat16 or float32"),
    "int32": (dict(q=Q, k=KV.astype(np.int32), v=KV),
              "k has dtype int32, expected float16, bfloat16 or float32"),
    "dtype_mismatch": (dict(q=Q, k=KV.astype(np.float16), v=KV),
                       r"dtype of k \(fp16\) does not match dtype of q \(fp32\)"),
    "heads": (dict(q=_bshd(1, 16, 6, 64), k=_bshd(1, 16, 4, 64), v=_bshd(1, 16, 4, 64)),
              r"heads_q=6 is not a multiple of heads_kv=4"),
    "k_v_shape": (dict(q=Q, k=KV, v=_bshd(1, 15, 2, 64)), r"k and v must have the same shape"),
    "last_stride": (dict(q=_bshd(1, 16, 4, 128)[..., ::2], k=KV, v=KV),
                    r"stride of last dim of q must be 1, got 2"),
    "backend_name": (dict(q=Q, k=KV, v=KV, backend="fastest"), r"unknown backend 'fastest'"),
    "backend_type": (dict(q=Q, k=KV, v=KV, backend=3), r"backend must be a string"),
    "cuda_backend_on_host": (dict(q=Q, k=KV, v=KV, backend="sm90"),
                             r"backend sm90 needs CUDA tensors, but q is on cpu"),
    "scale": (dict(q=Q, k=KV, v=KV, softmax_scale=-1.0),
              r"softmax_scale must be finite and > 0, got -1"),
    "not_an_array": (dict(q=[[1.0]], k=KV, v=KV), r"q must be a NumPy array.*got list"),
    "out_aliases_q": (dict(q=Q, k=KV, v=KV, out=Q), r"out overlaps q in memory"),
    "out_shape": (dict(q=Q, k=KV, v=KV, out=_bshd(1, 16, 4, 32)),
                  r"head_dim of out \(32\) does not match head_dim of q \(64\)"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_error_message(case):
    kwargs, message = CASES[case]
    with pytest.raises(flashcore.FlashCoreError, match=message):
        flashcore.attention(**kwargs)


def test_error_is_a_value_error():
    assert issubclass(flashcore.FlashCoreError, ValueError)


def test_select_backend_names_the_backend_or_the_problem():
    assert flashcore.select_backend(Q, KV, KV) == "cpu"
    assert flashcore.select_backend(Q, KV, KV, backend="reference") == "reference"
    with pytest.raises(flashcore.FlashCoreError, match="backend sm90"):
        flashcore.select_backend(Q, KV, KV, backend="sm90")


def _raises_exactly(error_type, message, call):
    """Runs call(), expects error_type with exactly `message`; a failure shows what came."""
    with pytest.raises(error_type) as caught:
        call()
    assert str(caught.value) == message, f"got {type(caught.value).__name__}: {caught.value}"
    return caught.value


# --- rank: one wording for every tensor, from the library and from the Python module alike.

def _rank_message(name, shape, dims="[batch, seqlen, heads, head_dim]"):
    expected = dims.count(",") + 1
    sizes = ", ".join(str(size) for size in shape)
    return f"{name} must have {expected} dimensions {dims}, got {len(shape)} (shape [{sizes}])"


# (argument, bad array): ranks the library checks (1-4) and ranks the module checks (0, 5).
RANK_CASES = [("q", Q[0]), ("k", KV[..., None]), ("v", KV.reshape(-1)),
              ("out", np.empty((1, 16, 256), np.float32)), ("q", np.array(1.0, np.float32))]


@pytest.mark.parametrize("name, bad", RANK_CASES,
                         ids=[f"{name}_{bad.ndim}d" for name, bad in RANK_CASES])
def test_rank_error_has_one_wording_for_every_tensor(name, bad):
    arrays = dict(q=Q, k=KV, v=KV, out=np.empty_like(Q))
    arrays[name] = bad
    _raises_exactly(flashcore.FlashCoreError, _rank_message(name, bad.shape),
                    lambda: flashcore.attention(**arrays))


def test_rank_error_of_bfloat16_arrays_has_the_same_wording():
    ml_dtypes = pytest.importorskip("ml_dtypes", reason="ml_dtypes gives NumPy a bfloat16 dtype")
    q, k = Q.astype(ml_dtypes.bfloat16), KV.astype(ml_dtypes.bfloat16)
    for bad in (q[0], q[None]):
        _raises_exactly(flashcore.FlashCoreError, _rank_message("q", bad.shape),
                        lambda: flashcore.attention(bad, k, k))


def test_lse_rank_error_has_the_same_wording():
    lse = np.empty((1, 4 * 16), np.float32)
    _raises_exactly(flashcore.FlashCoreError,
                    _rank_message("lse", lse.shape, "[batch, heads_q, seqlen_q]"),
                    lambda: _flashcore.attention_forward(Q, KV, KV, np.empty_like(Q), lse))


def test_python_rank_message_matches_the_library():
    assert str(_arrays.rank_error("q", (16, 4, 64))) == _rank_message("q", (16, 4, 64))
    assert re.fullmatch(r"q must have 4 dimensions \[batch, heads, seqlen, head_dim\], got 2 "
                        r"\(shape \[3, 4\]\)",
                        str(_arrays.rank_error("q", (3, 4), _arrays.BHSD_DIMS)))
