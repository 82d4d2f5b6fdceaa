"""PyTorch integration: FlashCore attention as the custom op `flashcore::attention_forward`.

    import flashcore.torch
    out = flashcore.torch.attention(q, k, v, causal=True)                  # q: [b, s, h, d]
    out = flashcore.torch.attention(q, k, v, causal=True, layout="bhsd")   # SDPA's [b, h, s, d]

The op has a fake implementation (shapes/dtypes only), so torch.compile(fullgraph=True) traces it
without graph breaks; outputs come from torch's caching allocator and the kernel runs on torch's
current stream with no host synchronisation, so CUDA graph capture records it. BHSD inputs are
described to the library by their strides (it takes any strides with a contiguous last
dimension): no copies. There is no backward kernel yet: backward through the op raises
NotImplementedError.

The serving layouts are the ops `flashcore::attention_varlen` and
`flashcore::attention_with_kvcache` (flashcore/_torch_serving.py), called as
flashcore.torch.attention_varlen / attention_with_kvcache or through flashcore's own functions.
"""

from typing import Optional, Tuple

import torch

from . import _arrays, _flashcore
from ._flashcore import FlashCoreError, FlashCoreTypeError

__all__ = ["attention", "attention_varlen", "attention_with_kvcache", "LAYOUTS",
           "BACKWARD_MISSING"]

LAYOUTS = ("bshd", "bhsd")
BACKWARD_MISSING = (
    "FlashCore has no backward kernel yet; flashcore::attention_forward is forward-only. "
    "Run it under torch.no_grad()/torch.inference_mode() or on tensors that do not require "
    "grad, or use torch.nn.functional.scaled_dot_product_attention for training.")

_RAW_DTYPES = {
    torch.float16: _arrays.RAW_FLOAT16,
    torch.bfloat16: _arrays.RAW_BFLOAT16,
    torch.float32: _arrays.RAW_FLOAT32,
}
_FP8 = getattr(torch, "float8_e4m3fn", None)  # torch >= 2.1
if _FP8 is not None:
    _RAW_DTYPES[_FP8] = _arrays.RAW_FLOAT8_E4M3
_NO_DESCALES = (None, None, None)
_TENSOR_RANK = 4  # [batch, seqlen, heads, head_dim] or [batch, heads, seqlen, head_dim]
_CONTIGUOUS = torch.contiguous_format
_FLOAT32 = torch.float32
_UINT8 = torch.uint8
# The current stream as an int without building a torch.cuda.Stream (what torch.compile's
# generated code uses); the public lookup where this torch lacks it.
_current_raw_stream = getattr(torch._C, "_cuda_getCurrentRawStream", None)


def _raw_device(name, tensor):
    """(device code, device index) of a tensor for the raw entries: CUDA or the host."""
    if tensor.is_cuda:
        return _arrays.RAW_CUDA, tensor.get_device()
    if tensor.is_cpu:
        return _arrays.RAW_CPU, 0
    raise FlashCoreError(f"{name} is on device {tensor.device}, expected cpu or cuda")


def _raw(name, tensor, bhsd=False):
    """(data_ptr, dtype, device, index, shape, strides) for _flashcore.attention_forward_raw, in
    BSHD order: a BHSD tensor is described as its transposed view (no view object is built).

    Raw pointers instead of DLPack: torch's __dlpack__() without a stream synchronises with the
    legacy default stream (illegal during CUDA graph capture) and refuses tensors needing grad.
    """
    dtype_code = _RAW_DTYPES.get(tensor.dtype)
    if dtype_code is None:
        raise FlashCoreError(
            f"{name} has dtype {tensor.dtype}, expected torch.float16, torch.bfloat16, "
            "torch.float32 or torch.float8_e4m3fn")
    device_code, index = _raw_device(name, tensor)
    shape, strides = tensor.shape, tensor.stride()
    if bhsd:
        shape = (shape[0], shape[2], shape[1], shape[3])
        strides = (strides[0], strides[2], strides[1], strides[3])
    return (tensor.data_ptr(), dtype_code, device_code, index, shape, strides)


def _raw_descale(name, tensor):
    """The raw tuple of an fp8 descale factor tensor (float32 [batch, heads_kv]), or None."""
    if tensor is None:
        return None
    if not isinstance(tensor, torch.Tensor):
        raise FlashCoreTypeError(
            f"{name} must be a torch.Tensor (float32 [batch, heads_kv]) on q's device, got "
            f"{type(tensor).__name__}")
    if tensor.dtype != _FLOAT32:
        raise FlashCoreError(
            f"{name} must be float32, got {str(tensor.dtype).replace('torch.', '')}")
    return _raw(name, tensor)


def raw_descales(descales):
    return tuple(_raw_descale(name, tensor)
                 for name, tensor in zip(_arrays.DESCALE_NAMES, descales))


def out_dtype_of(q, out_dtype, descales=_NO_DESCALES, out=None):
    """The torch dtype of out for a call on q (the fp8 rules of _arrays.fp8_options), or None
    for q's own dtype when nothing fp8 is involved (the common call: two comparisons)."""
    if out_dtype is None and q.dtype != _FP8 and _arrays.no_descales(descales):
        return None
    name = _arrays.fp8_options(q, out, descales, out_dtype)
    return getattr(torch, name)


def _check_tensor(name, tensor, dims=_arrays.BSHD_DIMS):
    """A torch.Tensor of rank 4; `dims` names the dimensions of the caller's layout. The rank
    message is the library's (one wording for every tensor and entry point)."""
    if not isinstance(tensor, torch.Tensor):
        raise FlashCoreTypeError(f"{name} must be a torch.Tensor, got {type(tensor).__name__}")
    if tensor.dim() != _TENSOR_RANK:
        raise _arrays.rank_error(name, tuple(tensor.shape), dims)


def _to_bshd(tensor, layout):
    return tensor.transpose(1, 2) if layout == "bhsd" else tensor


def _current_stream(tensor):
    if not tensor.is_cuda:
        return 0
    if _current_raw_stream is not None:
        return _current_raw_stream(tensor.get_device())
    return torch.cuda.current_stream(tensor.device).cuda_stream


def workspace_bytes(q, k=None, causal=False):
    """flashcore.attention_workspace_bytes for torch tensors in BSHD layout (k sets the size of
    the split-KV partials; without it the answer holds for any k)."""
    _check_tensor("q", q)
    k_raw = None
    if k is not None:
        _check_tensor("k", k)
        k_raw = _raw("k", k)
    causal = _arrays.flag("causal", causal)
    return _flashcore.attention_workspace_bytes_raw(_raw("q", q), k_raw, causal)


def _workspace(q_raw, k_raw, causal, q, record_on):
    """Scratch device memory for the call (the library never allocates): from torch's caching
    allocator, so it costs nothing after warm-up and is recorded by CUDA graph capture. None on
    the host. `record_on` is the launch stream when that is not torch's current stream: the
    workspace is marked as used there, so that the allocator does not hand it out again while
    the kernel may still run."""
    nbytes = _flashcore.attention_workspace_bytes_raw(q_raw, k_raw, causal)
    if nbytes == 0:
        return None
    workspace = q.new_empty((nbytes,), dtype=_UINT8)
    if record_on is not None:
        workspace.record_stream(torch.cuda.ExternalStream(record_on, device=q.device))
    return workspace


def _launch(q_raw, k_raw, v_raw, out_raw, lse_raw, q, causal, softmax_scale, backend, stream,
            record_on=None, descales_raw=_NO_DESCALES):
    """Runs the library on raw BSHD tensors; switches the current CUDA device when q is
    elsewhere (torch's allocator and the library's launches then agree on the device)."""
    call = (q_raw, k_raw, v_raw, out_raw, lse_raw, q, causal, softmax_scale, backend, stream,
            record_on, descales_raw)
    if q_raw[2] == _arrays.RAW_CUDA and q_raw[3] != torch.cuda.current_device():
        with torch.cuda.device(q_raw[3]):
            return _run(*call)
    return _run(*call)


def _run(q_raw, k_raw, v_raw, out_raw, lse_raw, q, causal, softmax_scale, backend, stream,
         record_on, descales_raw):
    """Every pointer here is a torch tensor's, on the device that tensor reports (the library
    checks that all of them report q's), and the workspace comes from q's allocator: so the
    library may skip its per-pointer driver queries (AttentionArgs::device_pointers_verified;
    their cost is in docs/kernels.md)."""
    workspace = _workspace(q_raw, k_raw, causal, q, record_on)  # alive until the call returns
    workspace_ptr, nbytes = (0, 0) if workspace is None else (workspace.data_ptr(),
                                                              workspace.numel())
    return _flashcore.attention_forward_raw(q_raw, k_raw, v_raw, out_raw, lse_raw, softmax_scale,
                                            causal, backend, stream, workspace_ptr, nbytes, True,
                                            *descales_raw)


def _last_dim_contiguous(tensor):
    # Inputs of an odd layout (e.g. channels-last from torch.compile) must still have a
    # contiguous last dimension; anything else gets one copy rather than an error.
    return tensor if tensor.stride(-1) == 1 else tensor.contiguous()


def _forward(q, k, v, causal, softmax_scale, return_lse, in_bhsd, out_bhsd, backend,
             descales=_NO_DESCALES, out_dtype=None):
    """The op's implementation: out contiguous in the output layout, lse [b, h, s_q] float32 or
    None when not asked for. q/k/v are BHSD when in_bhsd, else BSHD. out_dtype: a torch dtype
    (fp8 inputs: bfloat16 or float16), None for q's."""
    q, k, v = _last_dim_contiguous(q), _last_dim_contiguous(k), _last_dim_contiguous(v)
    out_dtype = out_dtype_of(q, out_dtype, descales)
    q_raw = _raw("q", q, in_bhsd)
    batch, seqlen_q, heads_q, head_dim = q_raw[4]
    if in_bhsd == out_bhsd:
        out = torch.empty_like(q, memory_format=_CONTIGUOUS, dtype=out_dtype)
    else:
        out = q.new_empty((batch, heads_q, seqlen_q, head_dim) if out_bhsd else
                          (batch, seqlen_q, heads_q, head_dim), dtype=out_dtype)
    lse = q.new_empty((batch, heads_q, seqlen_q), dtype=_FLOAT32) if return_lse else None
    _launch(q_raw, _raw("k", k, in_bhsd), _raw("v", v, in_bhsd), _raw("out", out, out_bhsd),
            None if lse is None else _raw("lse", lse), q, causal, softmax_scale, backend,
            _current_stream(q), descales_raw=raw_descales(descales))
    return out, lse


# The fp8 arguments (q_descale, k_descale, v_descale, out_dtype) come last in every op's schema,
# with defaults: calls written for the schema before them keep working.
@torch.library.custom_op("flashcore::attention_forward", mutates_args=())
def _attention_forward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool,
                       softmax_scale: Optional[float], return_lse: bool, layout: str,
                       backend: str, q_descale: Optional[torch.Tensor] = None,
                       k_descale: Optional[torch.Tensor] = None,
                       v_descale: Optional[torch.Tensor] = None,
                       out_dtype: Optional[torch.dtype] = None
                       ) -> Tuple[torch.Tensor, torch.Tensor]:
    """out (like q, contiguous in `layout`; out_dtype for fp8 q, default bfloat16) and lse
    [b, h, s_q] float32 (empty unless return_lse)."""
    bhsd = layout == "bhsd"
    out, lse = _forward(q, k, v, causal, softmax_scale, return_lse, bhsd, bhsd, backend,
                        (q_descale, k_descale, v_descale), out_dtype)
    if lse is None:
        lse = q.new_empty((0,), dtype=_FLOAT32)
    return out, lse


@_attention_forward.register_fake
def _attention_forward_fake(q, k, v, causal, softmax_scale, return_lse, layout, backend,
                            q_descale=None, k_descale=None, v_descale=None, out_dtype=None):
    out = q.new_empty(q.shape, dtype=out_dtype_of(q, out_dtype,
                                                  (q_descale, k_descale, v_descale)))
    if return_lse:
        lse = q.new_empty(_arrays.lse_shape(_to_bshd(q, layout)), dtype=_FLOAT32)
    else:
        lse = q.new_empty((0,), dtype=_FLOAT32)
    return out, lse


def _setup_context(ctx, inputs, output):
    pass  # nothing to save: backward only reports that it does not exist


def _backward(ctx, grad_out, grad_lse):
    raise NotImplementedError(BACKWARD_MISSING)


_attention_forward.register_autograd(_backward, setup_context=_setup_context)


def _check_common(q, k, v, layout):
    if layout not in LAYOUTS:
        raise FlashCoreError(f"layout must be one of {LAYOUTS}, got {layout!r}")
    dims = _arrays.BHSD_DIMS if layout == "bhsd" else _arrays.BSHD_DIMS
    for name, tensor in (("q", q), ("k", k), ("v", v)):
        _check_tensor(name, tensor, dims)


_Tensor = torch.Tensor
_profiler = torch.autograd.profiler
try:  # private hooks (torch >= 2.4 has them all); without them every call takes the op
    _is_compiling = torch.compiler.is_compiling
    _dispatch_mode_depth = torch._C._len_torch_dispatch_stack
    _torch_function_mode_on = torch._C._is_torch_function_mode_enabled
    _functorch_transform = torch._C._functorch.peek_interpreter_stack
    _jit_tracing_state = torch._C._get_tracing_state
    _profiler._is_profiler_enabled  # noqa: B018 (existence check)
except AttributeError:
    _is_compiling = lambda: True  # noqa: E731


def _dispatcher_has_work(q, k, v):
    """Whether torch's dispatcher would do more for this call than run the op's implementation:
    tracing or compiling, tensor subclasses (fake, functional, DTensor), dispatch or
    torch-function modes, functorch transforms, autograd (some input requires grad) or the
    profiler (which records the op). When it would not, eager calls skip it and its Python
    autograd wrapper (~5-10 us a call): same implementation, same checks, same results."""
    return (type(q) is not _Tensor or type(k) is not _Tensor or type(v) is not _Tensor
            or not (q.is_cuda or q.is_cpu)  # meta tensors get the op's fake implementation
            or _is_compiling() or _dispatch_mode_depth() != 0 or _torch_function_mode_on()
            or _functorch_transform() is not None or _jit_tracing_state() is not None
            or _profiler._is_profiler_enabled
            or (torch.is_grad_enabled() and (q.requires_grad or k.requires_grad
                                             or v.requires_grad)))


def attention(q, k, v, causal=False, softmax_scale=None, return_lse=False, layout="bshd",
              backend="auto", *, q_descale=None, k_descale=None, v_descale=None,
              out_dtype=None):
    """FlashCore attention on torch tensors through the custom op flashcore::attention_forward.

    layout="bshd": q [b, s_q, h_q, d], k/v [b, s_k, h_kv, d]. layout="bhsd": SDPA's
    [b, h, s, d], read through strides without copies; out comes back in the input's layout.
    causal is bottom-right aligned (decode with s_q < s_k sees the whole cache); GQA/MQA when
    h_q is a multiple of h_kv. Returns out, or (out, lse) with lse [b, h_q, s_q] float32.
    fp8: q, k, v torch.float8_e4m3fn with q_descale/k_descale/v_descale float32 [b, h_kv]
    (None: 1.0) and out_dtype torch.bfloat16 (default) or torch.float16 (flashcore.attention).
    Works under torch.compile(fullgraph=True) and CUDA graph capture; forward only. Plain eager
    calls with nothing for the dispatcher to do run the op's implementation directly.
    """
    _check_common(q, k, v, layout)
    causal = _arrays.flag("causal", causal)
    softmax_scale = _arrays.softmax_scale_value(softmax_scale)
    return_lse = _arrays.flag("return_lse", return_lse)
    backend = _arrays.backend_name(backend)
    descales = (q_descale, k_descale, v_descale)
    out_dtype = out_dtype_of(q, out_dtype, descales)  # checked here, named as the caller did
    if out_dtype is not None or not _arrays.no_descales(descales):
        for name, tensor in zip(_arrays.DESCALE_NAMES, descales):
            _raw_descale(name, tensor)  # type and dtype, before the dispatcher sees them
        plain = all(t is None or type(t) is _Tensor for t in descales)
        if not plain or _dispatcher_has_work(q, k, v):
            out, lse = torch.ops.flashcore.attention_forward(
                q, k, v, causal, softmax_scale, return_lse, layout, backend, *descales,
                out_dtype)
        else:
            bhsd = layout == "bhsd"
            out, lse = _forward(q, k, v, causal, softmax_scale, return_lse, bhsd, bhsd, backend,
                                descales, out_dtype)
    elif _dispatcher_has_work(q, k, v):
        out, lse = torch.ops.flashcore.attention_forward(q, k, v, causal, softmax_scale,
                                                         return_lse, layout, backend)
    else:
        bhsd = layout == "bhsd"
        out, lse = _forward(q, k, v, causal, softmax_scale, return_lse, bhsd, bhsd, backend)
    return (out, lse) if return_lse else out


def attention_bhsd_to_bshd(q, k, v, causal, softmax_scale):
    """transformers' call: q/k/v [b, h, s, d] in, out [b, s_q, h_q, d] contiguous. Eager calls
    read the inputs through strides and write the output in place; the rest goes through the
    op on transposed views and gets the output's layout from it."""
    # _dispatcher_has_work answers True for anything but plain tensors, before q.dim() is asked.
    if not _dispatcher_has_work(q, k, v) and q.dim() == k.dim() == v.dim() == _TENSOR_RANK:
        return _forward(q, k, v, bool(causal), None if softmax_scale is None else
                        float(softmax_scale), False, True, False, "auto")[0]
    return attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), causal=causal,
                     softmax_scale=softmax_scale)


def attention_any(q, k, v, *, causal, softmax_scale, return_lse, out, backend, stream,
                  q_descale=None, k_descale=None, v_descale=None, out_dtype=None):
    """flashcore.attention for torch tensors (BSHD). Without out/stream it is the custom op;
    with them it runs eagerly into `out` on the given stream (not differentiable)."""
    descales = (q_descale, k_descale, v_descale)
    if out is None and stream is None:
        return attention(q, k, v, causal=causal, softmax_scale=softmax_scale,
                         return_lse=return_lse, backend=backend, q_descale=q_descale,
                         k_descale=k_descale, v_descale=v_descale, out_dtype=out_dtype)
    _check_common(q, k, v, "bshd")
    if not isinstance(out, torch.Tensor) and out is not None:
        raise FlashCoreTypeError(f"out must be a torch.Tensor like q, got {type(out).__name__}")
    out_dtype = out_dtype_of(q, out_dtype, descales, out)
    descales_raw = raw_descales(descales)
    if torch.is_grad_enabled() and any(t.requires_grad for t in (q, k, v)):
        raise NotImplementedError(BACKWARD_MISSING)
    current = _current_stream(q)
    if stream is None:
        stream = current
    else:  # a CPU tensor takes no stream; a stream object must be of q's device
        stream = _arrays.stream_handle(stream, not q.is_cuda,
                                       q.get_device() if q.is_cuda else None)
    if out is None:
        out = torch.empty(q.shape, dtype=out_dtype or q.dtype, device=q.device)
    lse = None
    if return_lse:
        lse = torch.empty(_arrays.lse_shape(q), dtype=torch.float32, device=q.device)
    q_raw = _raw("q", q)
    _launch(q_raw, _raw("k", k), _raw("v", v), _raw("out", out),
            None if lse is None else _raw("lse", lse), q, causal, softmax_scale, backend, stream,
            record_on=None if stream == current else stream, descales_raw=descales_raw)
    return (out, lse) if return_lse else out


# The serving ops (registered on import); last, as they build on the helpers above.
from ._torch_serving import attention_varlen, attention_with_kvcache  # noqa: E402
