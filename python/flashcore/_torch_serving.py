"""The serving layouts as torch custom ops: `flashcore::attention_varlen` (ragged batches packed
back to back) and `flashcore::attention_with_kvcache` (a contiguous or paged kv cache, appended
in place). Part of flashcore.torch, which imports this module and exports its entry points.

Like `flashcore::attention_forward`: fake implementations (shapes only) for torch.compile
(fullgraph=True), outputs and workspace from torch's allocator, the kernels on torch's current
stream, and nothing that synchronizes with the host (the caller passes max_seqlen_q/k; no
.item() anywhere), so CUDA graph capture records the call. The kv-cache op declares its cache
as mutated (`Tensor(a!) k_cache` in its schema): functionalization then knows that the append
writes it. Plain eager calls skip the dispatcher, as flashcore.torch.attention's do.
"""

from typing import Optional, Tuple

import torch

from . import _arrays, _flashcore, _serving
from . import torch as _dense
from ._flashcore import FlashCoreError, FlashCoreTypeError

__all__ = ["attention_varlen", "attention_with_kvcache"]

_Tensor = torch.Tensor
_INT32 = torch.int32
_FLOAT32 = torch.float32
_UINT8 = torch.uint8
_CONTIGUOUS = torch.contiguous_format


def _check_type(name, tensor, expected="like q"):
    if not isinstance(tensor, _Tensor):
        raise FlashCoreTypeError(
            f"{name} must be a torch.Tensor {expected}, got {type(tensor).__name__}")


def _raw_index(name, tensor):
    """The raw tuple of an int32 index tensor; another dtype (torch's default int64, say) is
    named, not converted: a conversion would allocate and copy on every call."""
    if tensor is None:
        return None
    _check_type(name, tensor, "(int32) on q's device")
    if tensor.dtype != _INT32:
        raise FlashCoreError(f"{name} must be int32, got {str(tensor.dtype).replace('torch.', '')}")
    device_code, index = _dense._raw_device(name, tensor)
    return (tensor.data_ptr(), _serving.RAW_INT32, device_code, index, tensor.shape,
            tensor.stride())


def _raw_values(name, tensor):
    return None if tensor is None else _dense._raw(name, tensor)


def _input(tensor):
    return None if tensor is None else _dense._last_dim_contiguous(tensor)


def _launch(q, tensors, max_seqlen_q, max_seqlen_k, softmax_scale, causal, backend, stream,
            check_indices, record_on, descales):
    """One library call on raw tuples (`tensors`: q, k, v, out, lse, cu_seqlens_q, cu_seqlens_k,
    seqused_k, cache_seqlens, page_table, k_new, v_new). The workspace, when the library asks
    for one, comes from q's allocator; `record_on` is the launch stream when that is not torch's
    current stream (the allocator then waits for it before reusing the memory)."""
    allocate = None
    if q.is_cuda:
        def allocate(nbytes):
            workspace = q.new_empty((nbytes,), dtype=_UINT8)
            if record_on is not None:
                workspace.record_stream(torch.cuda.ExternalStream(record_on, device=q.device))
            return workspace, workspace.data_ptr()

    (q_raw, k_raw, v_raw, out_raw, lse_raw, cu_q, cu_k, seqused_k, cache_seqlens, page_table,
     k_new, v_new) = tensors
    call = (q_raw, k_raw, v_raw, out_raw, lse_raw, cu_q, cu_k, max_seqlen_q, max_seqlen_k,
            seqused_k, cache_seqlens, page_table, k_new, v_new, softmax_scale, causal, backend,
            stream, check_indices, allocate, True)  # True: every pointer is a torch tensor's
    call += _dense.raw_descales(descales)
    if q.is_cuda and q.get_device() != torch.cuda.current_device():
        with torch.cuda.device(q.get_device()):
            return _flashcore.attention_serving_raw(*call)
    return _flashcore.attention_serving_raw(*call)


def _outputs(q, out, return_lse, packed, descales, out_dtype):
    out_dtype = _dense.out_dtype_of(q, out_dtype, descales, out)
    if out is None:
        out = torch.empty_like(q, memory_format=_CONTIGUOUS, dtype=out_dtype)
    lse = None
    if return_lse:
        dims = _serving.lse_shape(q, packed)
        if dims is not None:  # else the library reports q's rank
            lse = q.new_empty(dims, dtype=_FLOAT32)
    return out, lse


def _varlen_forward(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, seqused_k,
                    causal, softmax_scale, return_lse, backend, check_indices, q_descale=None,
                    k_descale=None, v_descale=None, out_dtype=None, out=None, stream=None,
                    record_on=None):
    q, k, v = _input(q), _input(k), _input(v)
    descales = (q_descale, k_descale, v_descale)
    out, lse = _outputs(q, out, return_lse, True, descales, out_dtype)
    tensors = (_dense._raw("q", q), _dense._raw("k", k), _dense._raw("v", v),
               _dense._raw("out", out), _raw_values("lse", lse),
               _raw_index("cu_seqlens_q", cu_seqlens_q), _raw_index("cu_seqlens_k", cu_seqlens_k),
               _raw_index("seqused_k", seqused_k), None, None, None, None)
    _launch(q, tensors, max_seqlen_q, max_seqlen_k, softmax_scale, causal, backend,
            _dense._current_stream(q) if stream is None else stream, check_indices, record_on,
            descales)
    return out, lse


def _kvcache_forward(q, k_cache, v_cache, cache_seqlens, page_table, k, v, cu_seqlens_q,
                     max_seqlen_q, causal, softmax_scale, return_lse, backend, check_indices,
                     q_descale=None, k_descale=None, v_descale=None, out_dtype=None, out=None,
                     stream=None, record_on=None):
    # The cache is used as it is (a copy would not be written); the library checks its strides.
    q, k, v = _input(q), _input(k), _input(v)
    descales = (q_descale, k_descale, v_descale)
    out, lse = _outputs(q, out, return_lse, cu_seqlens_q is not None, descales, out_dtype)
    tensors = (_dense._raw("q", q), _dense._raw("k", k_cache), _dense._raw("v", v_cache),
               _dense._raw("out", out), _raw_values("lse", lse),
               _raw_index("cu_seqlens_q", cu_seqlens_q), None, None,
               _raw_index("cache_seqlens", cache_seqlens), _raw_index("page_table", page_table),
               _raw_values("k_new", k), _raw_values("v_new", v))
    _launch(q, tensors, max_seqlen_q, 0, softmax_scale, causal, backend,
            _dense._current_stream(q) if stream is None else stream, check_indices, record_on,
            descales)
    return out, lse


def _empty_lse(q):
    return q.new_empty((0,), dtype=_FLOAT32)


def _fake_outputs(q, return_lse, packed, descales, out_dtype):
    dims = _serving.lse_shape(q, packed) if return_lse else None
    out_dtype = _dense.out_dtype_of(q, out_dtype, descales)
    return (q.new_empty(q.shape, dtype=out_dtype),
            q.new_empty(dims if dims is not None else (0,), dtype=_FLOAT32))


# The fp8 arguments come last in both schemas, with defaults (as in flashcore::attention_forward).
@torch.library.custom_op("flashcore::attention_varlen", mutates_args=())
def _attention_varlen_op(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                         cu_seqlens_q: torch.Tensor, cu_seqlens_k: torch.Tensor,
                         max_seqlen_q: int, max_seqlen_k: int, seqused_k: Optional[torch.Tensor],
                         causal: bool, softmax_scale: Optional[float], return_lse: bool,
                         backend: str, check_indices: bool,
                         q_descale: Optional[torch.Tensor] = None,
                         k_descale: Optional[torch.Tensor] = None,
                         v_descale: Optional[torch.Tensor] = None,
                         out_dtype: Optional[torch.dtype] = None
                         ) -> Tuple[torch.Tensor, torch.Tensor]:
    """out like q [total_q, heads_q, head_dim] (out_dtype for fp8 q) and lse [heads_q, total_q]
    (empty unless return_lse)."""
    out, lse = _varlen_forward(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                               seqused_k, causal, softmax_scale, return_lse, backend,
                               check_indices, q_descale, k_descale, v_descale, out_dtype)
    return out, _empty_lse(q) if lse is None else lse


@_attention_varlen_op.register_fake
def _attention_varlen_fake(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                           seqused_k, causal, softmax_scale, return_lse, backend, check_indices,
                           q_descale=None, k_descale=None, v_descale=None, out_dtype=None):
    return _fake_outputs(q, return_lse, True, (q_descale, k_descale, v_descale), out_dtype)


_attention_varlen_op.register_autograd(_dense._backward, setup_context=_dense._setup_context)


@torch.library.custom_op("flashcore::attention_with_kvcache", mutates_args=("k_cache", "v_cache"))
def _attention_with_kvcache_op(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                               cache_seqlens: torch.Tensor, page_table: Optional[torch.Tensor],
                               k: Optional[torch.Tensor], v: Optional[torch.Tensor],
                               cu_seqlens_q: Optional[torch.Tensor], max_seqlen_q: int,
                               causal: bool, softmax_scale: Optional[float], return_lse: bool,
                               backend: str, check_indices: bool,
                               q_descale: Optional[torch.Tensor] = None,
                               k_descale: Optional[torch.Tensor] = None,
                               v_descale: Optional[torch.Tensor] = None,
                               out_dtype: Optional[torch.dtype] = None
                               ) -> Tuple[torch.Tensor, torch.Tensor]:
    """out like q (out_dtype for fp8 q) and lse ([batch, heads_q, seqlen_q], or [heads_q,
    total_q] with cu_seqlens_q; empty unless return_lse). Writes k/v into the cache when
    given."""
    out, lse = _kvcache_forward(q, k_cache, v_cache, cache_seqlens, page_table, k, v,
                                cu_seqlens_q, max_seqlen_q, causal, softmax_scale, return_lse,
                                backend, check_indices, q_descale, k_descale, v_descale,
                                out_dtype)
    return out, _empty_lse(q) if lse is None else lse


@_attention_with_kvcache_op.register_fake
def _attention_with_kvcache_fake(q, k_cache, v_cache, cache_seqlens, page_table, k, v,
                                 cu_seqlens_q, max_seqlen_q, causal, softmax_scale, return_lse,
                                 backend, check_indices, q_descale=None, k_descale=None,
                                 v_descale=None, out_dtype=None):
    return _fake_outputs(q, return_lse, cu_seqlens_q is not None,
                         (q_descale, k_descale, v_descale), out_dtype)


def _all_plain(tensors):
    """Whether every tensor given is a plain torch.Tensor (None: absent). A loop, not all() over
    a generator: this runs on every eager call."""
    for tensor in tensors:
        if tensor is not None and type(tensor) is not _Tensor:
            return False
    return True


def _check_types(values, indices):
    """Type checks with the arguments named (`values`: (name, tensor) of value tensors, the
    first three required; `indices`: (name, tensor) of index tensors): before the dispatcher
    sees them, as its own message names no argument."""
    for position, (name, tensor) in enumerate(values):
        if tensor is not None or position < 3:
            _check_type(name, tensor, "" if position < 3 else "like q")
    for name, tensor in indices:
        if tensor is not None:
            _check_type(name, tensor, "(int32) on q's device")


def _dispatcher_has_work(q, k, v, plain):
    """flashcore.torch's test for the dense op on q, k, v; `plain` says whether every other
    tensor of the call is a plain tensor (else the op runs, for its subclass handling)."""
    return not plain or _dense._dispatcher_has_work(q, k, v)


def _launch_stream(q, stream):
    """(stream, record_on) of an eager call given `stream`: a CPU tensor takes none, a stream
    object must be of q's device; record_on is set when it is not torch's current stream."""
    current = _dense._current_stream(q)
    if stream is None:
        return current, None
    stream = _arrays.stream_handle(stream, not q.is_cuda, q.get_device() if q.is_cuda else None)
    return stream, None if stream == current else stream


_NO_DESCALES = (None, None, None)


def _fp8_args(q, descales, out_dtype, out):
    """The ops' trailing fp8 arguments (q_descale, k_descale, v_descale, out_dtype as a torch
    dtype), checked before the dispatcher sees them so that errors name the arguments."""
    _check_type("q", q, "")
    out_dtype = _dense.out_dtype_of(q, out_dtype, descales, out)
    _dense.raw_descales(descales)  # type and dtype of each
    return descales + (out_dtype,)


def _check_out(out):
    if out is not None:
        _check_type("out", out)


def _flags(causal, return_lse, check_indices, softmax_scale, backend):
    """The options both serving calls share, checked and normalized."""
    return (_arrays.flag("causal", causal), _arrays.flag("return_lse", return_lse),
            _arrays.flag("check_indices", check_indices),
            _arrays.softmax_scale_value(softmax_scale), _arrays.backend_name(backend))


def _run(op, forward, args, q, k, v, plain, out, stream):
    """The custom op when the call is traceable (no out=, no stream=) and the dispatcher has work
    (else its implementation, directly), or the eager forward into `out` on `stream`."""
    if out is None and stream is None:
        return op(*args) if _dispatcher_has_work(q, k, v, plain) else forward(*args)
    _check_out(out)
    stream, record_on = _launch_stream(q, stream)
    return forward(*args, out=out, stream=stream, record_on=record_on)


def attention_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, *,
                     causal=False, softmax_scale=None, seqused_k=None, return_lse=False,
                     out=None, check_indices=False, backend="auto", stream=None, q_descale=None,
                     k_descale=None, v_descale=None, out_dtype=None):
    """flashcore.attention_varlen on torch tensors, through the custom op
    flashcore::attention_varlen (see its docstring for the arguments). With out= or stream= the
    call runs eagerly (not differentiable, not traceable)."""
    indices = (cu_seqlens_q, cu_seqlens_k, seqused_k)
    descales = (q_descale, k_descale, v_descale)
    plain = _all_plain((q, k, v) + indices + descales)
    if not plain:
        _check_types((("q", q), ("k", k), ("v", v)),
                     zip(("cu_seqlens_q", "cu_seqlens_k", "seqused_k"), indices))
    causal, return_lse, check_indices, softmax_scale, backend = _flags(
        causal, return_lse, check_indices, softmax_scale, backend)
    max_seqlen_q = _serving.seqlen_value("max_seqlen_q", max_seqlen_q)
    max_seqlen_k = _serving.seqlen_value("max_seqlen_k", max_seqlen_k)
    args = (q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, seqused_k, causal,
            softmax_scale, return_lse, backend, check_indices)
    if not _arrays.no_descales(descales) or out_dtype is not None:
        args += _fp8_args(q, descales, out_dtype, out)
    # The op's autograd formula refuses gradients; an eager call (out=, stream=) bypasses it.
    if (out is not None or stream is not None) and torch.is_grad_enabled() and \
            any(t.requires_grad for t in (q, k, v)):
        raise NotImplementedError(_dense.BACKWARD_MISSING)
    out, lse = _run(torch.ops.flashcore.attention_varlen, _varlen_forward, args, q, k, v, plain,
                    out, stream)
    return (out, lse) if return_lse else out


def attention_with_kvcache(q, k_cache, v_cache, cache_seqlens, *, page_table=None, k=None,
                           v=None, cu_seqlens_q=None, max_seqlen_q=None, causal=False,
                           softmax_scale=None, return_lse=False, out=None, check_indices=False,
                           backend="auto", stream=None, q_descale=None, k_descale=None,
                           v_descale=None, out_dtype=None):
    """flashcore.attention_with_kvcache on torch tensors, through the custom op
    flashcore::attention_with_kvcache (see its docstring for the arguments); k_cache/v_cache are
    written in place when k/v are given. Forward only. With out= or stream= the call runs
    eagerly (not traceable)."""
    try:
        return _attention_with_kvcache(q, k_cache, v_cache, cache_seqlens, page_table, k, v,
                                       cu_seqlens_q, max_seqlen_q, causal, softmax_scale,
                                       return_lse, out, check_indices, backend, stream,
                                       (q_descale, k_descale, v_descale), out_dtype)
    except FlashCoreError as error:
        _serving.reraise_with_kvcache_names(error)


def _attention_with_kvcache(q, k_cache, v_cache, cache_seqlens, page_table, k, v, cu_seqlens_q,
                            max_seqlen_q, causal, softmax_scale, return_lse, out, check_indices,
                            backend, stream, descales, out_dtype):
    # Library names (k, v: the cache; k_new, v_new): the caller's wrapper rewords the messages.
    indices = (cache_seqlens, page_table, cu_seqlens_q)
    plain = _all_plain((q, k_cache, v_cache, k, v) + indices + descales)
    if not plain:
        _check_types((("q", q), ("k", k_cache), ("v", v_cache), ("k_new", k), ("v_new", v)),
                     zip(("cache_seqlens", "page_table", "cu_seqlens_q"), indices))
    causal, return_lse, check_indices, softmax_scale, backend = _flags(
        causal, return_lse, check_indices, softmax_scale, backend)
    if max_seqlen_q is None:  # total_q bounds every sequence: right, if not the tightest
        max_seqlen_q = q.shape[0] if cu_seqlens_q is not None and q.dim() > 0 else 0
    else:
        max_seqlen_q = _serving.seqlen_value("max_seqlen_q", max_seqlen_q)
    # The op has no autograd formula (it mutates its cache): refuse here, before any work.
    if torch.is_grad_enabled() and (q.requires_grad or k_cache.requires_grad or
                                    v_cache.requires_grad or (k is not None and k.requires_grad)
                                    or (v is not None and v.requires_grad)):
        raise NotImplementedError(_dense.BACKWARD_MISSING)
    args = (q, k_cache, v_cache, cache_seqlens, page_table, k, v, cu_seqlens_q, max_seqlen_q,
            causal, softmax_scale, return_lse, backend, check_indices)
    if not _arrays.no_descales(descales) or out_dtype is not None:
        args += _fp8_args(q, descales, out_dtype, out)
    out, lse = _run(torch.ops.flashcore.attention_with_kvcache, _kvcache_forward, args, q,
                    k_cache, v_cache, plain, out, stream)
    return (out, lse) if return_lse else out
