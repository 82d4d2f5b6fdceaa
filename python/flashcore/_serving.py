"""The serving layouts (varlen batches, kv caches) for NumPy and DLPack arrays, and the argument
checks their NumPy and torch entry points share. The library does every check it can (ranks,
shapes, lengths, page table width, cache overflow); what is here is what only Python sees:
argument types, Python ints too large for the library's int, and the names the caller used.

The library names a call's tensors after AttentionArgs (k, v: the cache; k_new, v_new: the
appended tokens); attention_with_kvcache calls them k_cache, v_cache, k and v, so its errors are
reworded with the caller's names (kvcache_names)."""

import numbers
import re

import numpy as np

from . import _arrays, _flashcore
from ._flashcore import FlashCoreError, FlashCoreTypeError

RAW_INT32 = 3  # dtype code of an int32 raw tensor tuple (_flashcore_views.h, kRawInt32)
INT32_MAX = 2**31 - 1
INDEX_NAMES = ("cu_seqlens_q", "cu_seqlens_k", "seqused_k", "cache_seqlens", "page_table")
# AttentionArgs name -> attention_with_kvcache's name.
_KVCACHE_NAMES = {"k": "k_cache", "v": "v_cache", "k_new": "k", "v_new": "v"}
_KVCACHE_NAME_PATTERN = re.compile(r"\b(k_new|v_new|k|v)\b")


def seqlen_value(name, value):
    """max_seqlen_q / max_seqlen_k as a Python int the library's int holds (its sign is the
    library's check). Bools and floats are a TypeError: 4096.0 is no length."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Integral):
        raise FlashCoreTypeError(
            f"{name} must be an int (the longest sequence, given so that no device-to-host copy "
            f"is needed), got {value!r} of type {type(value).__name__}")
    value = int(value)
    if abs(value) > INT32_MAX:
        raise FlashCoreError(f"{name} must be at most {INT32_MAX} (an int32), got {value}")
    return value


def kvcache_names(message):
    """A library message about a kv-cache call, with the tensors named as the caller named them:
    the cache k/v -> k_cache/v_cache, the appended k_new/v_new -> k/v."""
    return _KVCACHE_NAME_PATTERN.sub(lambda match: _KVCACHE_NAMES[match.group(1)], message)


def reraise_with_kvcache_names(error):
    """Raises `error` (a FlashCoreError) again with kvcache_names applied, same type."""
    raise type(error)(kvcache_names(str(error))) from None


def packed_lse_shape(q):
    """lse [heads_q, total_q] of a packed q [total_q, heads_q, head_dim]."""
    return (q.shape[1], q.shape[0])


def lse_shape(q, packed):
    """The lse of a call on q: [heads_q, total_q] when q is packed, else [batch, heads_q,
    seqlen_q]. None when q's rank does not fit (the library then reports q's rank)."""
    if packed:
        return packed_lse_shape(q) if len(q.shape) == 3 else None
    return _arrays.lse_shape(q) if len(q.shape) == 4 else None


def _allocate(q, out, return_lse, lse_dims, out_dtype):
    xp = _arrays._array_module(q)
    if out is None:
        if xp is None:
            raise FlashCoreError(
                f"out= is required for q of type {type(q).__module__}.{type(q).__name__}: "
                "FlashCore allocates outputs only for NumPy, CuPy and PyTorch arrays")
        out = _arrays.allocate_out(xp, q, out_dtype)
    else:
        _arrays.check_array("out", out)
    lse = None
    if return_lse and lse_dims is not None:
        if xp is None:
            raise FlashCoreError(
                f"return_lse=True needs FlashCore to allocate lse, which it cannot do for q of "
                f"type {type(q).__module__}.{type(q).__name__}; use NumPy, CuPy or PyTorch")
        lse = xp.empty(lse_dims, dtype=xp.float32)
    return out, lse


def _cupy_allocator(q, stream):
    """allocate_workspace for CuPy arrays: from CuPy's pool, on the launch stream (so the pool
    orders its reuse after the kernel). None for host arrays, which need none, and for arrays
    whose allocator FlashCore does not know (JAX...): the library then uses its static counters
    (AttentionArgs::workspace)."""
    xp = _arrays._array_module(q)
    if xp is None or xp is np:
        return None

    def allocate(nbytes):
        with xp.cuda.ExternalStream(stream):
            workspace = xp.empty(nbytes, dtype=xp.uint8)
        return workspace, workspace.data.ptr

    return allocate


def _numpy_index_raw(name, array):
    if not isinstance(array, np.ndarray) or array.dtype != np.int32:
        dtype = getattr(array, "dtype", type(array).__name__)
        raise FlashCoreError(f"{name} must be int32, got {dtype}")
    return _arrays._numpy_raw(name, array, RAW_INT32)


def attention_serving_dlpack(tensors, *, lse_dims, return_lse, out, stream, options,
                             out_dtype=None):
    """One serving call on NumPy/DLPack arrays. `tensors` maps AttentionArgs names to arrays
    (None: absent), in argument order, the fp8 descales (q_descale, k_descale, v_descale)
    among them; `options` holds the scalar arguments of _flashcore.attention_serving;
    out_dtype the caller's (None, a name, a NumPy or torch dtype). Returns out, or
    (out, lse)."""
    for name, value in tensors.items():
        if value is not None:
            _arrays.check_array(name, value)
    q = tensors["q"]
    descales = tuple(tensors.get(name) for name in _arrays.DESCALE_NAMES)
    out_dtype = _arrays.fp8_options(q, out, descales, out_dtype)
    stream = _arrays._launch_stream(q, stream)  # before allocating: a bad stream costs nothing
    out, lse = _allocate(q, out, return_lse, lse_dims, out_dtype)
    arrays = dict(tensors, out=out, lse=lse)
    if _arrays.no_dlpack(q):  # NumPy bfloat16 and fp8 have no DLPack: every array goes raw
        written = ("out", "k", "v") if tensors.get("k_new") is not None else ("out",)
        values = {name: value for name, value in arrays.items() if name not in INDEX_NAMES}
        raw = _arrays.raw_tensors(values, written)
        for name in INDEX_NAMES:
            if arrays.get(name) is not None:
                raw[name] = _numpy_index_raw(name, arrays[name])
        _flashcore.attention_serving_raw(**raw, stream=0, **options)
    else:
        _flashcore.attention_serving(**arrays, stream=stream,
                                     allocate_workspace=_cupy_allocator(q, stream), **options)
    return (out, lse) if return_lse else out
