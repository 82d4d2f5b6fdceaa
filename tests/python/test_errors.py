"""Bad arguments raise flashcore.FlashCoreError (a ValueError) whose message names the argument,
its value and what was expected: the library's own message, unchanged. An argument of the wrong
type raises flashcore.FlashCoreTypeError, a FlashCoreError that is also a TypeError."""

import re

import numpy as np
import pytest

import flashcore
from flashcore import _arrays, _flashcore


def _bshd(*shape, dtype=np.float32):
    return np.random.default_rng(0).standard_normal(shape).astype(dtype)


Q = _bshd(1, 16, 4, 64)
KV = _bshd(1, 16, 2, 64)
VALUE_DTYPES = "float16, bfloat16, float32 or float8_e4m3fn"  # what q, k, v and out may be

CASES = {
    "float64": (dict(q=Q.astype(np.float64), k=KV, v=KV),
                f"q has dtype float64, expected {VALUE_DTYPES}"),
    "int32": (dict(q=Q, k=KV.astype(np.int32), v=KV),
              f"k has dtype int32, expected {VALUE_DTYPES}"),
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


def test_wrong_type_errors_are_type_errors_and_flashcore_errors():
    assert issubclass(flashcore.FlashCoreTypeError, flashcore.FlashCoreError)
    assert issubclass(flashcore.FlashCoreTypeError, TypeError)
    for kwargs in (dict(q=[[1.0]], k=KV, v=KV), dict(q=Q, k=KV, v=KV, backend=3)):
        with pytest.raises(TypeError):
            flashcore.attention(**kwargs)


# --- dtype names: the names NumPy / PyTorch users know, for every dtype that reaches the library.

# DLPack carries these (the message names them from the DLPack code: complex64, not code5_64).
DLPACK_DTYPES = [np.bool_, np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16,
                 np.uint32, np.uint64, np.float64, np.complex64, np.complex128]
# These have no DLPack code: the message names NumPy's own dtype.
NUMPY_ONLY_DTYPES = [np.longdouble, np.object_, "U3", "datetime64[s]", [("a", "f4")]]


@pytest.mark.parametrize("dtype", DLPACK_DTYPES + NUMPY_ONLY_DTYPES,
                         ids=lambda d: str(np.dtype(d)))
@pytest.mark.parametrize("name", ["q", "v", "out"])
def test_dtype_error_names_the_dtype_as_numpy_does(name, dtype):
    arrays = dict(q=Q, k=KV, v=KV, out=np.empty_like(Q))
    arrays[name] = np.zeros(arrays[name].shape, dtype=dtype)
    expected = np.dtype(dtype).name if dtype in DLPACK_DTYPES else str(np.dtype(dtype))
    _raises_exactly(flashcore.FlashCoreError,
                    f"{name} has dtype {expected}, expected {VALUE_DTYPES}",
                    lambda: flashcore.attention(**arrays))


def test_dtype_error_names_ml_dtypes_types():
    ml_dtypes = pytest.importorskip("ml_dtypes", reason="ml_dtypes gives NumPy float8 dtypes")
    q = Q.astype(ml_dtypes.float8_e5m2)  # float8_e4m3fn is an input dtype (test_fp8.py)
    _raises_exactly(flashcore.FlashCoreError,
                    f"q has dtype float8_e5m2, expected {VALUE_DTYPES}",
                    lambda: flashcore.attention(q, KV, KV))


# --- out must be writable.

READ_ONLY = ("out is read-only: the result is written into out, so pass a writable array "
             "(a NumPy array with flags.writeable=False is read-only)")


def _read_only(array):
    array = array.copy()
    array.flags.writeable = False
    return array


def test_read_only_out_is_a_value_error_naming_out():
    out = _read_only(np.full_like(Q, 7.0))
    _raises_exactly(flashcore.FlashCoreError, READ_ONLY,
                    lambda: flashcore.attention(Q, KV, KV, out=out))
    assert np.all(out == 7.0)  # untouched
    # The module itself says the same to any DLPack caller.
    _raises_exactly(flashcore.FlashCoreError, READ_ONLY,
                    lambda: _flashcore.attention_forward(Q, KV, KV, out))


def test_read_only_inputs_are_fine():
    q, k, v = (_read_only(a) for a in (Q, KV, KV))
    np.testing.assert_array_equal(flashcore.attention(q, k, v), flashcore.attention(Q, KV, KV))


def test_read_only_bfloat16_out_is_refused_too():
    ml_dtypes = pytest.importorskip("ml_dtypes", reason="ml_dtypes gives NumPy a bfloat16 dtype")
    q, k = Q.astype(ml_dtypes.bfloat16), KV.astype(ml_dtypes.bfloat16)
    out = _read_only(np.zeros_like(q))
    _raises_exactly(flashcore.FlashCoreError, READ_ONLY,
                    lambda: flashcore.attention(q, k, k, out=out))
    assert np.all(out.astype(np.float32) == 0)


# --- softmax_scale: a real number (TypeError otherwise), finite and > 0 (ValueError otherwise).

@pytest.mark.parametrize("scale", ["a", "0.5", b"1", True, [0.5], 1 + 2j, object()],
                         ids=lambda s: type(s).__name__ + "_" + str(s)[:8])
def test_softmax_scale_of_wrong_type_names_it(scale):
    error = _raises_exactly(
        flashcore.FlashCoreTypeError,
        f"softmax_scale must be None or a real number (a finite float > 0), got {scale!r} of "
        f"type {type(scale).__name__}",
        lambda: flashcore.attention(Q, KV, KV, softmax_scale=scale))
    assert isinstance(error, TypeError)
    with pytest.raises(TypeError, match="softmax_scale"):
        flashcore.select_backend(Q, KV, KV, softmax_scale=scale)


@pytest.mark.parametrize("scale, shown", [(float("nan"), "nan"), (float("inf"), "inf"),
                                          (-float("inf"), "-inf"), (0.0, "0"), (-1, "-1")])
def test_softmax_scale_must_be_finite_and_positive(scale, shown):
    _raises_exactly(flashcore.FlashCoreError, f"softmax_scale must be finite and > 0, got {shown}",
                    lambda: flashcore.attention(Q, KV, KV, softmax_scale=scale))


def test_softmax_scale_too_large_for_float32_names_the_value():
    _raises_exactly(flashcore.FlashCoreError,
                    "softmax_scale must be finite and > 0 as a float32 (at most 3.402823e+38), "
                    "got 1e+300",
                    lambda: flashcore.attention(Q, KV, KV, softmax_scale=1e300))


@pytest.mark.parametrize("scale", [np.float32(0.125), np.float64(0.125), np.array(0.125)],
                         ids=["float32", "float64", "0d_array"])
def test_softmax_scale_takes_numpy_numbers(scale):
    np.testing.assert_array_equal(flashcore.attention(Q, KV, KV, softmax_scale=scale),
                                  flashcore.attention(Q, KV, KV, softmax_scale=0.125))


# --- causal and return_lse: bools only (bool("no") is True).

@pytest.mark.parametrize("value", ["yes", "False", 1, 0, None, np.array([True])],
                         ids=["yes", "False_str", "one", "zero", "None", "array"])
@pytest.mark.parametrize("name", ["causal", "return_lse"])
def test_flags_must_be_bools(name, value):
    expected = (f"{name} must be a bool (True or False), got {value!r} of type "
                f"{type(value).__name__}")
    error = _raises_exactly(flashcore.FlashCoreTypeError, expected,
                            lambda: flashcore.attention(Q, KV, KV, **{name: value}))
    assert isinstance(error, TypeError)
    if name == "causal":
        for call in (lambda: flashcore.select_backend(Q, KV, KV, causal=value),
                     lambda: flashcore.attention_workspace_bytes(Q, KV, causal=value)):
            _raises_exactly(flashcore.FlashCoreTypeError, expected, call)


def test_numpy_bools_are_bools():
    out = flashcore.attention(Q, KV, KV, causal=np.bool_(True), return_lse=np.bool_(False))
    np.testing.assert_array_equal(out, flashcore.attention(Q, KV, KV, causal=True))


# --- stream: None for host arrays; for CUDA arrays an int handle or a stream of q's device.

class _DLPackOnly:
    """A host array seen only through DLPack (as a JAX CPU array would be)."""

    def __init__(self, array):
        self._array = array
        self.shape, self.dtype = array.shape, array.dtype

    def __dlpack__(self, **kwargs):
        return self._array.__dlpack__(**kwargs)

    def __dlpack_device__(self):
        return self._array.__dlpack_device__()


@pytest.mark.parametrize("stream", [5, 0, np.int64(2)], ids=["5", "0", "np_int"])
def test_stream_with_host_arrays_is_refused(stream):
    expected = (f"stream must be None for host (cpu) arrays, got {stream!r}: host backends run "
                "synchronously on the calling thread; streams apply to CUDA arrays only")
    out = np.empty_like(Q)
    for q in (Q, _DLPackOnly(Q)):
        _raises_exactly(flashcore.FlashCoreError, expected,
                        lambda: flashcore.attention(q, KV, KV, out=out, stream=stream))


def test_stream_with_host_bfloat16_arrays_is_refused():
    ml_dtypes = pytest.importorskip("ml_dtypes", reason="ml_dtypes gives NumPy a bfloat16 dtype")
    q, k = Q.astype(ml_dtypes.bfloat16), KV.astype(ml_dtypes.bfloat16)
    with pytest.raises(flashcore.FlashCoreError, match=r"^stream must be None for host \(cpu\)"):
        flashcore.attention(q, k, k, stream=5)


class _Stream:
    """A stream object as torch (cuda_stream, device.index), CuPy (ptr, device_id) or the CUDA
    stream protocol (__cuda_stream__) present it."""

    def __init__(self, **attributes):
        self.__dict__.update(attributes)

    def __repr__(self):
        return "<stream>"


class _Device:
    def __init__(self, index):
        self.index = index


class _ProtocolStream:
    def __cuda_stream__(self):
        return (0, 0x5000)


# The CUDA side of stream_handle, without a GPU: what reaches the launch for each kind of stream.
@pytest.mark.parametrize("stream, handle", [
    (0, 0), (2, 2), (0x7F00, 0x7F00), (np.uint64(16), 16),
    (_Stream(cuda_stream=0x6000, device=_Device(0)), 0x6000),
    (_Stream(ptr=0x7000, device_id=0), 0x7000),
    (_ProtocolStream(), 0x5000),
], ids=["zero", "per_thread", "address", "np_uint", "torch_like", "cupy_like", "protocol"])
def test_stream_handle_on_cuda(stream, handle):
    assert _arrays.stream_handle(stream, False, 0) == handle


@pytest.mark.parametrize("stream", ["s", 1.5, True, None, object()],
                         ids=["str", "float", "bool", "None", "object"])
def test_stream_of_wrong_type_names_it(stream):
    expected = ("stream must be None, a cudaStream_t handle (int) or a CUDA stream object "
                "(torch.cuda.Stream, cupy.cuda.Stream, __cuda_stream__), got "
                f"{stream!r} of type {type(stream).__name__}")
    _raises_exactly(flashcore.FlashCoreTypeError, expected,
                    lambda: _arrays.stream_handle(stream, False, 0))


def test_stream_of_another_device_or_negative_is_refused():
    other = _Stream(cuda_stream=0x6000, device=_Device(1))
    _raises_exactly(flashcore.FlashCoreError,
                    "stream <stream> is on cuda:1 but q is on cuda:0; pass a stream of q's device",
                    lambda: _arrays.stream_handle(other, False, 0))
    _raises_exactly(flashcore.FlashCoreError, "stream must be a cudaStream_t handle >= 0, got -1",
                    lambda: _arrays.stream_handle(-1, False, 0))


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
