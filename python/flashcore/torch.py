"""PyTorch integration: FlashCore attention as the custom op `flashcore::attention_forward`.

    import flashcore.torch
    out = flashcore.torch.attention(q, k, v, causal=True)                  # q: [b, s, h, d]
    out = flashcore.torch.attention(q, k, v, causal=True, layout="bhsd")   # SDPA's [b, h, s, d]

The op has a fake implementation (shapes/dtypes only), so torch.compile(fullgraph=True) traces it
without graph breaks; outputs come from torch's caching allocator and the kernel runs on torch's
current stream with no host synchronisation, so CUDA graph capture records it. BHSD inputs are
passed as transposed views (the library takes any strides with a contiguous last dimension):
no copies. There is no backward kernel yet: backward through the op raises NotImplementedError.
"""

from typing import Optional, Tuple

import torch

from . import _arrays, _flashcore
from ._flashcore import FlashCoreError

__all__ = ["attention", "LAYOUTS", "BACKWARD_MISSING"]

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
_RAW_DEVICES = {"cpu": _arrays.RAW_CPU, "cuda": _arrays.RAW_CUDA}
_TENSOR_RANK = 4  # [batch, seqlen, heads, head_dim] or [batch, heads, seqlen, head_dim]


def _raw(name, tensor):
    """(data_ptr, dtype, device, index, shape, strides) for _flashcore.attention_forward_raw.

    Raw pointers instead of DLPack: torch's __dlpack__() without a stream synchronises with the
    legacy default stream (illegal during CUDA graph capture) and refuses tensors needing grad.
    """
    dtype_code = _RAW_DTYPES.get(tensor.dtype)
    if dtype_code is None:
        raise FlashCoreError(
            f"{name} has dtype {tensor.dtype}, expected torch.float16, torch.bfloat16 or "
            "torch.float32")
    device_code = _RAW_DEVICES.get(tensor.device.type)
    if device_code is None:
        raise FlashCoreError(f"{name} is on device {tensor.device}, expected cpu or cuda")
    index = tensor.device.index or 0
    return (tensor.data_ptr(), dtype_code, device_code, index, tuple(tensor.shape),
            tuple(tensor.stride()))


def _check_tensor(name, tensor):
    if not isinstance(tensor, torch.Tensor):
        raise FlashCoreError(f"{name} must be a torch.Tensor, got {type(tensor).__name__}")
    if tensor.dim() != _TENSOR_RANK:
        raise FlashCoreError(
            f"{name} has {tensor.dim()} dimensions (shape {tuple(tensor.shape)}), expected 4")


def _to_bshd(tensor, layout):
    return tensor.transpose(1, 2) if layout == "bhsd" else tensor


def _current_stream(device):
    if device.type != "cuda":
        return 0
    return torch.cuda.current_stream(device).cuda_stream


def workspace_bytes(q):
    """flashcore.attention_workspace_bytes for a torch tensor (BSHD or BHSD: only its device
    matters today)."""
    _check_tensor("q", q)
    return _flashcore.attention_workspace_bytes_raw(_raw("q", q))


def _workspace(q_raw, device, stream):
    """Scratch device memory for the call (the library never allocates): from torch's caching
    allocator, so it costs nothing after warm-up and is recorded by CUDA graph capture. None on
    the host. Marked as used by `stream` when that is not torch's current stream, so that the
    allocator does not hand it out again while the kernel may still run there."""
    nbytes = _flashcore.attention_workspace_bytes_raw(q_raw)
    if nbytes == 0:
        return None
    workspace = torch.empty(nbytes, dtype=torch.uint8, device=device)
    if stream != torch.cuda.current_stream(device).cuda_stream:
        workspace.record_stream(torch.cuda.ExternalStream(stream, device=device))
    return workspace


def _launch(q, k, v, out, lse, causal, softmax_scale, backend, stream):
    """Runs the library on BSHD views; switches the current CUDA device when q is elsewhere."""
    q_raw = _raw("q", q)
    args = (q_raw, _raw("k", k), _raw("v", v), _raw("out", out),
            None if lse is None else _raw("lse", lse), softmax_scale, causal, backend, stream)
    device = q.device
    if device.type == "cuda" and device.index != torch.cuda.current_device():
        with torch.cuda.device(device):
            return _run(args, q_raw, device, stream)
    return _run(args, q_raw, device, stream)


def _run(args, q_raw, device, stream):
    workspace = _workspace(q_raw, device, stream)
    if workspace is None:
        return _flashcore.attention_forward_raw(*args)
    return _flashcore.attention_forward_raw(*args, workspace=workspace.data_ptr(),
                                            workspace_bytes=workspace.numel())


def _lse_shape(q_bshd):
    batch, seqlen_q, heads_q, _ = q_bshd.shape
    return (batch, heads_q, seqlen_q)


@torch.library.custom_op("flashcore::attention_forward", mutates_args=())
def _attention_forward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool,
                       softmax_scale: Optional[float], return_lse: bool, layout: str,
                       backend: str) -> Tuple[torch.Tensor, torch.Tensor]:
    """out (like q, contiguous in `layout`) and lse [b, h, s_q] float32 (empty unless return_lse)."""
    q_bshd, k_bshd, v_bshd = (_to_bshd(t, layout) for t in (q, k, v))
    # Inputs of an odd layout (e.g. channels-last from torch.compile) must still have a
    # contiguous last dimension; anything else gets one copy rather than an error.
    q_bshd, k_bshd, v_bshd = (t if t.stride(-1) == 1 else t.contiguous()
                              for t in (q_bshd, k_bshd, v_bshd))
    out = torch.empty(q.shape, dtype=q.dtype, device=q.device)
    if return_lse:
        lse = torch.empty(_lse_shape(q_bshd), dtype=torch.float32, device=q.device)
    else:
        lse = torch.empty((0,), dtype=torch.float32, device=q.device)
    _launch(q_bshd, k_bshd, v_bshd, _to_bshd(out, layout), lse if return_lse else None, causal,
            softmax_scale, backend, _current_stream(q.device))
    return out, lse


@_attention_forward.register_fake
def _attention_forward_fake(q, k, v, causal, softmax_scale, return_lse, layout, backend):
    out = q.new_empty(q.shape)
    if return_lse:
        lse = q.new_empty(_lse_shape(_to_bshd(q, layout)), dtype=torch.float32)
    else:
        lse = q.new_empty((0,), dtype=torch.float32)
    return out, lse


def _setup_context(ctx, inputs, output):
    pass  # nothing to save: backward only reports that it does not exist


def _backward(ctx, grad_out, grad_lse):
    raise NotImplementedError(BACKWARD_MISSING)


_attention_forward.register_autograd(_backward, setup_context=_setup_context)


def _check_common(q, k, v, layout):
    for name, tensor in (("q", q), ("k", k), ("v", v)):
        _check_tensor(name, tensor)
    if layout not in LAYOUTS:
        raise FlashCoreError(f"layout must be one of {LAYOUTS}, got {layout!r}")


def attention(q, k, v, causal=False, softmax_scale=None, return_lse=False, layout="bshd",
              backend="auto"):
    """FlashCore attention on torch tensors through the custom op flashcore::attention_forward.

    layout="bshd": q [b, s_q, h_q, d], k/v [b, s_k, h_kv, d]. layout="bhsd": SDPA's
    [b, h, s, d], read through strides without copies; out comes back in the input's layout.
    causal is bottom-right aligned (decode with s_q < s_k sees the whole cache); GQA/MQA when
    h_q is a multiple of h_kv. Returns out, or (out, lse) with lse [b, h_q, s_q] float32.
    Works under torch.compile(fullgraph=True) and CUDA graph capture; forward only.
    """
    _check_common(q, k, v, layout)
    out, lse = torch.ops.flashcore.attention_forward(
        q, k, v, bool(causal), None if softmax_scale is None else float(softmax_scale),
        bool(return_lse), layout, _arrays.backend_name(backend))
    return (out, lse) if return_lse else out


def attention_any(q, k, v, *, causal, softmax_scale, return_lse, out, backend, stream):
    """flashcore.attention for torch tensors (BSHD). Without out/stream it is the custom op;
    with them it runs eagerly into `out` on the given stream (not differentiable)."""
    if out is None and stream is None:
        return attention(q, k, v, causal=causal, softmax_scale=softmax_scale,
                         return_lse=return_lse, backend=backend)
    _check_common(q, k, v, "bshd")
    if not isinstance(out, torch.Tensor) and out is not None:
        raise FlashCoreError(f"out must be a torch.Tensor like q, got {type(out).__name__}")
    if torch.is_grad_enabled() and any(t.requires_grad for t in (q, k, v)):
        raise NotImplementedError(BACKWARD_MISSING)
    if out is None:
        out = torch.empty(q.shape, dtype=q.dtype, device=q.device)
    lse = None
    if return_lse:
        lse = torch.empty(_lse_shape(q), dtype=torch.float32, device=q.device)
    stream = _current_stream(q.device) if stream is None else int(stream)
    _launch(q, k, v, out, lse, causal, softmax_scale, backend, stream)
    return (out, lse) if return_lse else out
