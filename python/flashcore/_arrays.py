"""flashcore.attention for NumPy arrays and other DLPack arrays (CuPy, JAX): allocation of out and
lse with the array's own module, then one call into the nanobind module.

Errors: a bad value raises FlashCoreError (a ValueError); an argument of the wrong type raises
FlashCoreTypeError, which is a FlashCoreError and a TypeError. Messages name the argument, the
value and what was expected."""

import sys

import numpy as np

from . import _flashcore
from ._flashcore import FlashCoreError, FlashCoreTypeError

# Codes of the raw tensor tuples understood by _flashcore.attention_forward_raw.
RAW_FLOAT16, RAW_BFLOAT16, RAW_FLOAT32 = 0, 1, 2
RAW_CPU, RAW_CUDA = 0, 1

_EXPECTED_ARRAY = "a NumPy array, a torch.Tensor or a DLPack array (CuPy, JAX)"
BSHD_DIMS = "[batch, seqlen, heads, head_dim]"
BHSD_DIMS = "[batch, heads, seqlen, head_dim]"


def backend_name(backend):
    """None means "auto"; the C++ parser names any unknown value in its error."""
    if backend is None:
        return "auto"
    if not isinstance(backend, str):
        raise FlashCoreTypeError(
            f"backend must be a string (auto, reference, cpu, sm80, sm90), got {backend!r}")
    return backend


def check_array(name, value):
    if isinstance(value, np.ndarray) or hasattr(value, "__dlpack__"):
        return
    raise FlashCoreTypeError(f"{name} must be {_EXPECTED_ARRAY}, got {type(value).__name__}")


def rank_error(name, shape, dims=BSHD_DIMS):
    """The library's rank message (src/api/validate.cpp), for the checks done in Python."""
    expected = dims.count(",") + 1
    sizes = ", ".join(str(size) for size in shape)
    return FlashCoreError(
        f"{name} must have {expected} dimensions {dims}, got {len(shape)} (shape [{sizes}])")


def _is_numpy_bfloat16(array):
    # NumPy has no bfloat16; ml_dtypes adds one that DLPack cannot export, so it goes in raw.
    return isinstance(array, np.ndarray) and array.dtype.name == "bfloat16"


READ_ONLY_OUT = ("{name} is read-only: the result is written into {name}, so pass a writable "
                 "array (a NumPy array with flags.writeable=False is read-only)")


def _numpy_raw(name, array, dtype_code=RAW_BFLOAT16, writable=False):
    """A raw tensor tuple of a NumPy array; `writable` for outputs, which the raw path would
    otherwise write even when read-only (the DLPack path checks this in _flashcore.cpp, with
    the same message)."""
    if writable and not array.flags.writeable:
        raise FlashCoreError(READ_ONLY_OUT.format(name=name))
    itemsize = array.dtype.itemsize
    if any(stride % itemsize for stride in array.strides):
        raise FlashCoreError(
            f"{name} has byte strides {array.strides} that are not multiples of its element size "
            f"{itemsize}")
    return (array.ctypes.data, dtype_code, RAW_CPU, 0, tuple(array.shape),
            tuple(stride // itemsize for stride in array.strides))


def _array_module(array):
    """The module that can allocate arrays like `array` (numpy, cupy), or None."""
    if isinstance(array, np.ndarray):
        return np
    root = type(array).__module__.split(".")[0]
    if root == "cupy":
        return sys.modules["cupy"]
    return None


def _default_stream(array, stream):
    if stream is not None:
        return int(stream)
    if type(array).__module__.split(".")[0] == "cupy":
        return sys.modules["cupy"].cuda.get_current_stream().ptr
    return 0


def lse_shape(q):
    """[batch, heads_q, seqlen_q] of the lse for a BSHD q."""
    batch, seqlen_q, heads_q = q.shape[0], q.shape[1], q.shape[2]
    return (batch, heads_q, seqlen_q)


def _allocate_outputs(q, out, return_lse):
    xp = _array_module(q)
    if out is None:
        if xp is None:
            raise FlashCoreError(
                f"out= is required for q of type {type(q).__module__}.{type(q).__name__}: "
                "FlashCore allocates outputs only for NumPy, CuPy and PyTorch arrays")
        out = xp.empty(q.shape, dtype=q.dtype)
    else:
        check_array("out", out)
    lse = None
    # A q of the wrong rank gets no lse: the library then reports the rank of q itself.
    if return_lse and len(q.shape) == 4:
        if xp is None:
            raise FlashCoreError(
                f"return_lse=True needs FlashCore to allocate lse, which it cannot do for q of "
                f"type {type(q).__module__}.{type(q).__name__}; use NumPy, CuPy or PyTorch")
        lse = xp.empty(lse_shape(q), dtype=xp.float32)
    return out, lse


def workspace_bytes(q, k=None, causal=False):
    """attention_workspace_bytes for NumPy/DLPack arrays (NumPy bfloat16 has no DLPack)."""
    if _is_numpy_bfloat16(q) or (k is not None and _is_numpy_bfloat16(k)):
        k_raw = None if k is None else _numpy_raw("k", k)
        return _flashcore.attention_workspace_bytes_raw(_numpy_raw("q", q), k_raw, bool(causal))
    return _flashcore.attention_workspace_bytes(q, k, bool(causal))


def _workspace(q, k, causal, stream):
    """(array, pointer, bytes) of the call's device workspace, from CuPy's pool for CuPy arrays
    (allocated on the launch stream, so the pool orders its reuse after the kernel). None for
    host arrays, which need none, and for arrays whose allocator FlashCore does not know (JAX,
    ...): the library then uses its static counters (see AttentionArgs::workspace, flashcore.h)."""
    xp = _array_module(q)
    if xp is None or xp is np:
        return None, 0, 0
    nbytes = _flashcore.attention_workspace_bytes(q, k, causal)
    if nbytes == 0:
        return None, 0, 0
    with xp.cuda.ExternalStream(stream):
        workspace = xp.empty(nbytes, dtype=xp.uint8)
    return workspace, workspace.data.ptr, nbytes


def attention_dlpack(q, k, v, *, causal, softmax_scale, return_lse, out, backend, stream):
    for name, value in (("q", q), ("k", k), ("v", v)):
        check_array(name, value)
    out, lse = _allocate_outputs(q, out, return_lse)
    if any(_is_numpy_bfloat16(a) for a in (q, k, v, out)):
        tensors = [
            _numpy_raw(name, a, writable=name == "out") if _is_numpy_bfloat16(a)
            else _not_bfloat16(name, a)
            for name, a in (("q", q), ("k", k), ("v", v), ("out", out))
        ]
        lse_raw = None if lse is None else _numpy_raw("lse", lse, RAW_FLOAT32)
        _flashcore.attention_forward_raw(*tensors, lse_raw, softmax_scale, causal, backend, 0)
    else:
        stream = _default_stream(q, stream)
        workspace, workspace_ptr, workspace_bytes = _workspace(q, k, causal, stream)
        _flashcore.attention_forward(q, k, v, out, lse, softmax_scale, causal, backend, stream,
                                     workspace_ptr, workspace_bytes)
        del workspace  # back to CuPy's pool of the launch stream
    return (out, lse) if return_lse else out


def _not_bfloat16(name, array):
    raise FlashCoreError(
        f"{name} has dtype {getattr(array, 'dtype', type(array).__name__)} but another argument "
        "is bfloat16: q, k, v and out must share one dtype")


def select_backend_dlpack(q, k, v, *, causal, softmax_scale, backend):
    for name, value in (("q", q), ("k", k), ("v", v)):
        check_array(name, value)
    out, _ = _allocate_outputs(q, None, False)
    return _flashcore.select_backend(q, k, v, out, None, softmax_scale, causal, backend)
