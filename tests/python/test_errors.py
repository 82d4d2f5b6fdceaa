"""Bad arguments raise flashcore.FlashCoreError (a ValueError) whose message names the argument,
its value and what was expected: the library's own message, unchanged."""

import numpy as np
import pytest

import flashcore


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
    "rank": (dict(q=Q[0], k=KV, v=KV), r"q must be 4-D, got ndim=3"),
    "rank5": (dict(q=Q[None], k=KV, v=KV), r"q has 5 dimensions, expected 4"),
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
