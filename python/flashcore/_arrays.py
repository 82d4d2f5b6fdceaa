"""flashcore.attention for NumPy arrays and other DLPack arrays (CuPy, JAX): allocation of out and
lse with the array's own module, then one call into the nanobind module. Also the checks of the
non-tensor arguments that every entry point (NumPy and torch) shares.

Errors: a bad value raises FlashCoreError (a ValueError); an argument of the wrong type raises
FlashCoreTypeError, which is a FlashCoreError and a TypeError. Messages name the argument, the
value and what was expected."""

import math
import numbers
import sys

import numpy as np

from . import _flashcore
from ._flashcore import FlashCoreError, FlashCoreTypeError

# Codes of the raw tensor tuples understood by _flashcore.attention_forward_raw
# (_flashcore_views.h, RawDType).
RAW_FLOAT16, RAW_BFLOAT16, RAW_FLOAT32, RAW_INT32, RAW_FLOAT8_E4M3 = 0, 1, 2, 3, 4
RAW_CPU, RAW_CUDA = 0, 1
# The raw code of each NumPy dtype by name (bfloat16 and float8_e4m3fn are ml_dtypes' types).
_RAW_CODES = {"float16": RAW_FLOAT16, "bfloat16": RAW_BFLOAT16, "float32": RAW_FLOAT32,
              "int32": RAW_INT32, "float8_e4m3fn": RAW_FLOAT8_E4M3}
# The dtypes of q, k, v and out, as messages list them (_flashcore_views.cpp says the same).
VALUE_DTYPES = "float16, bfloat16, float32 or float8_e4m3fn"
FP8 = "float8_e4m3fn"
# Output dtypes of an fp8 call; the first is the default.
FP8_OUT_DTYPES = ("bfloat16", "float16")
DESCALE_NAMES = ("q_descale", "k_descale", "v_descale")

_EXPECTED_ARRAY = "a NumPy array, a torch.Tensor or a DLPack array (CuPy, JAX)"
# DLPack device types of host memory (kDLCPU, kDLCUDAHost: pinned memory is host memory).
_DLPACK_HOST_DEVICES = (1, 3)
_FLOAT32_MAX = 3.4028234663852886e38  # the library takes softmax_scale as a float32
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


def flag(name, value):
    """causal / return_lse as a bool. Anything but True/False (or a NumPy bool) is a TypeError:
    truthiness would turn causal="no" into a causal call."""
    if value is True or value is False:
        return value
    if isinstance(value, np.bool_):
        return bool(value)
    raise FlashCoreTypeError(
        f"{name} must be a bool (True or False), got {value!r} of type {type(value).__name__}")


def softmax_scale_value(value):
    """softmax_scale as a Python float, or None for the default 1/sqrt(head_dim). Real numbers
    and objects float() takes (0-d arrays, NumPy scalars) pass; strings and bools, which float()
    would also take, are a TypeError. Whether the value is finite and > 0 is the library's check
    (one rule, one wording); only a finite value too large for its float32 is caught here, where
    the caller's value can still be named."""
    if value is None or type(value) is float and abs(value) <= _FLOAT32_MAX:
        return value
    if isinstance(value, (str, bytes, bool, np.bool_)):
        scale = None
    else:
        try:
            scale = float(value)
        except (TypeError, ValueError):
            scale = None
    if scale is None:
        raise FlashCoreTypeError(
            f"softmax_scale must be None or a real number (a finite float > 0), got {value!r} "
            f"of type {type(value).__name__}")
    if _FLOAT32_MAX < abs(scale) < math.inf:  # comparisons only: torch.compile traces them
        raise FlashCoreError(
            f"softmax_scale must be finite and > 0 as a float32 (at most {_FLOAT32_MAX:.7g}), "
            f"got {value!r}")
    return scale


def rank_error(name, shape, dims=BSHD_DIMS):
    """The library's rank message (src/api/validate.cpp), for the checks done in Python."""
    expected = dims.count(",") + 1
    sizes = ", ".join(str(size) for size in shape)
    return FlashCoreError(
        f"{name} must have {expected} dimensions {dims}, got {len(shape)} (shape [{sizes}])")


def _stream_device_index(stream):
    """The CUDA device index a stream object says it belongs to, or None when it does not say
    (an int handle carries no device)."""
    device = getattr(stream, "device", None)  # torch.cuda.Stream: a torch.device
    index = getattr(device, "index", None)
    if index is None:
        index = getattr(stream, "device_id", None)  # cupy.cuda.Stream
    return index if isinstance(index, int) else None


def stream_handle(stream, host, device_index):
    """The cudaStream_t (an int) of `stream` for a call on q's device: host (cpu) or CUDA device
    `device_index` (None: unknown). Accepted: an int handle (0 the legacy default stream,
    1 cudaStreamLegacy, 2 cudaStreamPerThread, else a cudaStream_t address), or a stream object:
    __cuda_stream__() (the CUDA stream protocol), torch.cuda.Stream (.cuda_stream),
    cupy.cuda.Stream (.ptr). An int is trusted (a wrong handle fails at launch); an object's
    device must be q's. Host arrays take no stream: a host call runs synchronously on the
    calling thread, so a stream would silently mean nothing."""
    if host:
        raise FlashCoreError(
            f"stream must be None for host (cpu) arrays, got {stream!r}: host backends run "
            "synchronously on the calling thread; streams apply to CUDA arrays only")
    if isinstance(stream, (bool, np.bool_)):
        handle = None
    elif isinstance(stream, numbers.Integral):
        handle = int(stream)
    elif hasattr(stream, "__cuda_stream__"):
        handle = stream.__cuda_stream__()[1]  # (protocol version, handle)
    elif hasattr(stream, "cuda_stream"):
        handle = stream.cuda_stream
    elif hasattr(stream, "ptr"):
        handle = stream.ptr
    else:
        handle = None
    if not isinstance(handle, numbers.Integral):
        raise FlashCoreTypeError(
            "stream must be None, a cudaStream_t handle (int) or a CUDA stream object "
            f"(torch.cuda.Stream, cupy.cuda.Stream, __cuda_stream__), got {stream!r} of type "
            f"{type(stream).__name__}")
    if handle < 0:
        raise FlashCoreError(f"stream must be a cudaStream_t handle >= 0, got {stream!r}")
    stream_device = _stream_device_index(stream)
    if None not in (stream_device, device_index) and stream_device != device_index:
        raise FlashCoreError(
            f"stream {stream!r} is on cuda:{stream_device} but q is on cuda:{device_index}; "
            "pass a stream of q's device")
    return int(handle)


def _dlpack_device(array):
    """(DLPack device type, index) of a NumPy or DLPack array; None when it cannot say (the
    library then reports the device of the tensors it imports)."""
    if isinstance(array, np.ndarray):
        return (1, 0)
    try:
        return tuple(array.__dlpack_device__())
    except Exception:  # noqa: BLE001 (any producer's failure: let the import report it)
        return None


def no_dlpack(array):
    """A NumPy array DLPack cannot export: NumPy has no bfloat16 or float8_e4m3fn; ml_dtypes
    adds them as custom dtypes, so such arrays go in as raw tensor tuples."""
    return isinstance(array, np.ndarray) and array.dtype.name in ("bfloat16", FP8)


def dtype_name(value):
    """The name of a dtype given as a string, a NumPy/ml_dtypes dtype or type, or a torch.dtype
    ("bfloat16", "float16", "float8_e4m3fn", ...). A TypeError for anything else."""
    if isinstance(value, str):
        return value
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(value, torch.dtype):
        return str(value).replace("torch.", "")
    if value is not None and not isinstance(value, (bool, numbers.Number)):
        try:
            return np.dtype(value).name
        except TypeError:
            pass
    raise FlashCoreTypeError(
        "out_dtype must be None, a dtype name ('bfloat16', 'float16'), a torch dtype or a NumPy "
        f"dtype, got {value!r} of type {type(value).__name__}")


def array_dtype_name(array):
    """q's dtype as NumPy and ml_dtypes name it (torch tensors: without the torch. prefix)."""
    dtype = getattr(array, "dtype", None)
    name = getattr(dtype, "name", None)
    if isinstance(name, str):
        return name
    return str(dtype).replace("torch.", "")


def out_dtype_name(q_dtype, out_dtype):
    """The dtype of out for a call on q of dtype `q_dtype` (a name): q's own, except for fp8
    inputs, whose out is bfloat16 (default) or float16. out_dtype may only differ from q's
    dtype for fp8 inputs."""
    if out_dtype is None:
        return FP8_OUT_DTYPES[0] if q_dtype == FP8 else q_dtype
    name = dtype_name(out_dtype)
    if q_dtype == FP8:
        if name not in FP8_OUT_DTYPES:
            raise FlashCoreError(
                f"out_dtype must be bfloat16 or float16 for fp8 inputs, got {name}")
    elif name != q_dtype:
        raise FlashCoreError(
            f"out_dtype={name} is only for fp8 inputs: out has q's dtype ({q_dtype})")
    return name


def check_descales(q_dtype, descales):
    """q_descale/k_descale/v_descale (None or tensors) are for fp8 inputs only."""
    if q_dtype == FP8:
        return
    for name, value in zip(DESCALE_NAMES, descales):
        if value is not None:
            raise FlashCoreError(f"{name} is only for fp8 inputs (q is {q_dtype})")


def check_out_dtype(out, out_dtype):
    """A caller's out and out_dtype must agree (out_dtype is a name; None: no out_dtype)."""
    if out is not None and out_dtype is not None:
        have = array_dtype_name(out)
        if have != out_dtype:
            raise FlashCoreError(f"out has dtype {have} but out_dtype is {out_dtype}")


def numpy_dtype(name):
    """The NumPy dtype of a name, ml_dtypes' for bfloat16 and float8_e4m3fn."""
    if name in ("bfloat16", FP8):
        import ml_dtypes  # the caller's fp8 arrays came from it

        return np.dtype(getattr(ml_dtypes, name))
    return np.dtype(name)


READ_ONLY_OUT = ("{name} is read-only: the result is written into {name}, so pass a writable "
                 "array (a NumPy array with flags.writeable=False is read-only)")


def _numpy_raw(name, array, dtype_code=None, writable=False):
    """A raw tensor tuple of a NumPy array (dtype_code None: from the array's dtype); `writable`
    for outputs, which the raw path would otherwise write even when read-only (the DLPack path
    checks this in _flashcore_views.cpp, with the same message)."""
    if dtype_code is None:
        dtype_code = _RAW_CODES.get(array.dtype.name)
        if dtype_code is None:
            raise FlashCoreError(f"{name} has dtype {array.dtype}, expected {VALUE_DTYPES}")
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


def _launch_stream(array, stream):
    """The stream handle of a NumPy/DLPack call: the caller's (checked against q's device), else
    CuPy's current stream for CuPy arrays, else 0 (the legacy default stream; none for host)."""
    if stream is not None:
        device = _dlpack_device(array)
        if device is None:  # the library reports q's device when it imports q
            return stream_handle(stream, False, None)
        return stream_handle(stream, device[0] in _DLPACK_HOST_DEVICES, device[1])
    if type(array).__module__.split(".")[0] == "cupy":
        return sys.modules["cupy"].cuda.get_current_stream().ptr
    return 0


def lse_shape(q):
    """[batch, heads_q, seqlen_q] of the lse for a BSHD q."""
    batch, seqlen_q, heads_q = q.shape[0], q.shape[1], q.shape[2]
    return (batch, heads_q, seqlen_q)


def allocate_out(xp, q, out_dtype):
    """An out like q of dtype `out_dtype` (a name; None: q's dtype) from module xp."""
    if out_dtype is None or out_dtype == array_dtype_name(q):
        return xp.empty(q.shape, dtype=q.dtype)
    return xp.empty(q.shape, dtype=numpy_dtype(out_dtype) if xp is np else out_dtype)


def _allocate_outputs(q, out, return_lse, out_dtype=None):
    xp = _array_module(q)
    if out is None:
        if xp is None:
            raise FlashCoreError(
                f"out= is required for q of type {type(q).__module__}.{type(q).__name__}: "
                "FlashCore allocates outputs only for NumPy, CuPy and PyTorch arrays")
        out = allocate_out(xp, q, out_dtype)
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
    """attention_workspace_bytes for NumPy/DLPack arrays (NumPy bfloat16 and float8_e4m3fn
    have no DLPack)."""
    if no_dlpack(q) or (k is not None and no_dlpack(k)):
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


def no_descales(descales):
    """Whether a (q_descale, k_descale, v_descale) triple is all None (`is`: == on arrays
    compares elements)."""
    return descales[0] is None and descales[1] is None and descales[2] is None


def fp8_options(q, out, descales, out_dtype):
    """The out dtype name of a call (None: q's, with no fp8 involved) after the fp8 checks
    every entry point shares: descales only for fp8 q, out_dtype bfloat16/float16 for fp8 q and
    q's own dtype otherwise, and agreeing with out when both are given."""
    if out_dtype is None and no_descales(descales) and not _is_fp8(q):
        return None  # the common call: nothing to resolve
    q_dtype = array_dtype_name(q)
    check_descales(q_dtype, descales)
    name = out_dtype_name(q_dtype, out_dtype)
    check_out_dtype(out, None if out_dtype is None else name)
    return name


def _is_fp8(array):
    return array_dtype_name(array) == FP8 if hasattr(array, "dtype") else False


def raw_tensors(arrays, written=("out",)):
    """Raw tuples of a call on NumPy arrays some of which DLPack cannot export (bfloat16,
    float8_e4m3fn): every array goes raw. `arrays` maps argument names to arrays (None:
    absent); `written` names the outputs (they must be writable)."""
    raw = {}
    for name, value in arrays.items():
        if value is None:
            raw[name] = None
        elif isinstance(value, np.ndarray):
            if name in DESCALE_NAMES and value.dtype != np.float32:  # the binding's wording
                raise FlashCoreError(f"{name} must be float32, got {value.dtype}")
            raw[name] = _numpy_raw(name, value, writable=name in written or name == "lse")
        else:
            _not_numpy(name, value, arrays)
    return raw


def _not_numpy(name, array, arrays):
    other = next(n for n, a in arrays.items() if no_dlpack(a))
    raise FlashCoreError(
        f"{name} is a {type(array).__module__}.{type(array).__name__} but {other} is a NumPy "
        f"{arrays[other].dtype} array, which has no DLPack export: pass NumPy arrays for "
        "every tensor")


def _check_arrays(q, k, v, descales):
    for name, value in (("q", q), ("k", k), ("v", v)):
        check_array(name, value)
    for name, value in zip(DESCALE_NAMES, descales):
        if value is not None:
            check_array(name, value)


def attention_dlpack(q, k, v, *, causal, softmax_scale, return_lse, out, backend, stream,
                     q_descale=None, k_descale=None, v_descale=None, out_dtype=None):
    descales = (q_descale, k_descale, v_descale)
    _check_arrays(q, k, v, descales)
    out_dtype = fp8_options(q, out, descales, out_dtype)
    stream = _launch_stream(q, stream)  # before allocating: a bad stream costs nothing
    out, lse = _allocate_outputs(q, out, return_lse, out_dtype)
    if any(no_dlpack(a) for a in (q, k, v, out)):
        raw = raw_tensors(dict(q=q, k=k, v=v, out=out, lse=lse, q_descale=q_descale,
                               k_descale=k_descale, v_descale=v_descale))
        _flashcore.attention_forward_raw(**raw, softmax_scale=softmax_scale, causal=causal,
                                         backend=backend, stream=0)
    else:
        workspace, workspace_ptr, workspace_bytes = _workspace(q, k, causal, stream)
        _flashcore.attention_forward(q, k, v, out, lse, softmax_scale, causal, backend, stream,
                                     workspace_ptr, workspace_bytes, *descales)
        del workspace  # back to CuPy's pool of the launch stream
    return (out, lse) if return_lse else out


def select_backend_dlpack(q, k, v, *, causal, softmax_scale, backend, q_descale=None,
                          k_descale=None, v_descale=None, out_dtype=None):
    descales = (q_descale, k_descale, v_descale)
    _check_arrays(q, k, v, descales)
    out_dtype = fp8_options(q, None, descales, out_dtype)
    out, _ = _allocate_outputs(q, None, False, out_dtype)
    if any(no_dlpack(a) for a in (q, k, v, out)):
        raw = raw_tensors(dict(q=q, k=k, v=v, out=out, q_descale=q_descale,
                               k_descale=k_descale, v_descale=v_descale))
        return _flashcore.select_backend_raw(**raw, softmax_scale=softmax_scale, causal=causal,
                                             backend=backend)
    return _flashcore.select_backend(q, k, v, out, None, softmax_scale, causal, backend,
                                     *descales)
