"""FlashCore: fused attention kernels (H100/H200, Ampere) with a CPU reference.

    import numpy as np, flashcore
    q = np.random.randn(1, 128, 8, 64).astype(np.float32)       # [batch, seqlen, heads, head_dim]
    out = flashcore.attention(q, q, q, causal=True)

`flashcore.attention` takes NumPy arrays (CPU backends), PyTorch tensors (CPU or CUDA; outputs
from torch's allocator on torch's current stream) or other DLPack arrays (CuPy, JAX). PyTorch
users who want torch.compile / CUDA graphs / SDPA's layout use `flashcore.torch.attention`;
transformers users call `flashcore.transformers.register()`. Importing this package never imports
torch.
"""

import sys as _sys

from . import _arrays
from ._flashcore import FlashCoreError, FlashCoreTypeError
from ._flashcore import backend_available as _backend_available
from ._flashcore import supported_head_dims as _supported_head_dims
from ._flashcore import version as _version

__all__ = [
    "FlashCoreError",
    "FlashCoreTypeError",
    "attention",
    "attention_workspace_bytes",
    "backend_available",
    "supported_head_dims",
    "select_backend",
    "version",
    "__version__",
]

BACKENDS = ("auto", "reference", "cpu", "sm80", "sm90")


def version():
    """The C++ library's version string."""
    return _version()


__version__ = version()


def backend_available(backend, device_index=0):
    """Whether `backend` ("reference", "cpu", "sm80", "sm90") was compiled in and can run here."""
    return _backend_available(_arrays.backend_name(backend), int(device_index))


def supported_head_dims(backend):
    """Head dims `backend` has kernels for; an empty list means any head_dim works."""
    return list(_supported_head_dims(_arrays.backend_name(backend)))


def _is_torch_tensor(value):
    torch = _sys.modules.get("torch")  # a torch tensor can only exist once torch is imported
    return torch is not None and isinstance(value, torch.Tensor)


_torch_module = None


def _torch_entry():
    """flashcore.torch, imported on the first torch call and kept: an import statement on every
    call cost about 1 us of the ~30 us a decode call spends on the host."""
    global _torch_module
    if _torch_module is None:
        from . import torch as _flashcore_torch

        _torch_module = _flashcore_torch
    return _torch_module


def attention(q, k, v, *, causal=False, softmax_scale=None, return_lse=False, out=None,
              backend=None, stream=None):
    """out = softmax(q k^T * softmax_scale) v, in the BSHD layout.

    q: [batch, seqlen_q, heads_q, head_dim]; k, v: [batch, seqlen_k, heads_kv, head_dim], any
    strides with the last dimension contiguous; float16, bfloat16 or float32 (all the same).
    causal: a bool; query i sees key j <= i + seqlen_k - seqlen_q (bottom-right aligned).
    softmax_scale: a real number, finite and > 0; default 1/sqrt(head_dim). heads_q must be a
        multiple of heads_kv (GQA/MQA).
    return_lse: a bool; also return lse [batch, heads_q, seqlen_q] float32 (natural log).
    out: write into this array (writable, same shape/dtype/device as q) instead of allocating.
    backend: None/"auto", "reference", "cpu", "sm80" or "sm90".
    stream: CUDA arrays only (None for host arrays): a cudaStream_t handle as an int, or a
        stream object of q's device (torch.cuda.Stream, cupy.cuda.Stream, or any with
        __cuda_stream__); default: torch's current stream for torch tensors, CuPy's current
        stream for CuPy arrays, else 0 (legacy default stream).

    Returns out, or (out, lse) when return_lse. Raises FlashCoreError (a ValueError) naming the
    argument, its value and what was expected; for an argument of the wrong type (causal="yes",
    softmax_scale="a", q a list) FlashCoreTypeError, which is a FlashCoreError and a TypeError.
    """
    causal = _arrays.flag("causal", causal)
    return_lse = _arrays.flag("return_lse", return_lse)
    softmax_scale = _arrays.softmax_scale_value(softmax_scale)
    if _is_torch_tensor(q):
        torch_entry = _torch_entry()
        if out is None and stream is None:  # the common call: straight to the torch op's entry
            return torch_entry.attention(q, k, v, causal, softmax_scale, return_lse, "bshd",
                                         backend)
        return torch_entry.attention_any(
            q, k, v, causal=causal, softmax_scale=softmax_scale, return_lse=return_lse, out=out,
            backend=_arrays.backend_name(backend), stream=stream)
    return _arrays.attention_dlpack(
        q, k, v, causal=causal, softmax_scale=softmax_scale, return_lse=return_lse, out=out,
        backend=_arrays.backend_name(backend), stream=stream)


def attention_workspace_bytes(q, k=None, *, causal=False):
    """Bytes of device workspace a call on `q` and `k` needs (0 for host arrays). `attention`
    allocates it itself from the array's allocator; this is for code that manages its own
    buffers. On a Hopper GPU decode-sized calls split the keys over several CTAs and keep partial
    results there, sized from k's shape; without k the answer holds for any k (up to a few MB)."""
    causal = _arrays.flag("causal", causal)
    if _is_torch_tensor(q):
        from . import torch as _flashcore_torch

        return _flashcore_torch.workspace_bytes(q, k, causal)
    _arrays.check_array("q", q)
    if k is not None:
        _arrays.check_array("k", k)
    return _arrays.workspace_bytes(q, k, causal)


def select_backend(q, k, v, *, causal=False, softmax_scale=None, backend=None):
    """The backend `attention` would run for these arrays (NumPy/DLPack), or FlashCoreError."""
    return _arrays.select_backend_dlpack(
        q, k, v, causal=_arrays.flag("causal", causal),
        softmax_scale=_arrays.softmax_scale_value(softmax_scale),
        backend=_arrays.backend_name(backend))
