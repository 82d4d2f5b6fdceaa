"""FlashCore: fused attention kernels (H100/H200, Ampere) with a CPU reference.

    import numpy as np, flashcore
    q = np.random.randn(1, 128, 8, 64).astype(np.float32)       # [batch, seqlen, heads, head_dim]
    out = flashcore.attention(q, q, q, causal=True)

Serving layouts: `flashcore.attention_varlen` (ragged batches packed back to back, cu_seqlens) and
`flashcore.attention_with_kvcache` (a contiguous or paged kv cache, with an in-place append);
docs/serving.md.

`flashcore.attention` takes NumPy arrays (CPU backends), PyTorch tensors (CPU or CUDA; outputs
from torch's allocator on torch's current stream) or other DLPack arrays (CuPy, JAX). PyTorch
users who want torch.compile / CUDA graphs / SDPA's layout use `flashcore.torch.attention`;
transformers users call `flashcore.transformers.register()`. Importing this package never imports
torch.
"""

import sys as _sys

from . import _arrays, _serving
from ._flashcore import FlashCoreError, FlashCoreTypeError
from ._flashcore import backend_available as _backend_available
from ._flashcore import supported_head_dims as _supported_head_dims
from ._flashcore import version as _version

__all__ = [
    "FlashCoreError",
    "FlashCoreTypeError",
    "attention",
    "attention_varlen",
    "attention_with_kvcache",
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
              backend=None, stream=None, q_descale=None, k_descale=None, v_descale=None,
              out_dtype=None):
    """out = softmax(q k^T * softmax_scale) v, in the BSHD layout.

    q: [batch, seqlen_q, heads_q, head_dim]; k, v: [batch, seqlen_k, heads_kv, head_dim], any
    strides with the last dimension contiguous; float16, bfloat16 or float32 (all the same), or
    float8_e4m3fn (torch.float8_e4m3fn, ml_dtypes.float8_e4m3fn for NumPy; all three).
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
    q_descale, k_descale, v_descale: fp8 inputs only: float32 [batch, heads_kv] on q's device
        (FA3's convention), None meaning 1.0. Query head h of batch entry b reads
        float(q) * q_descale[b, h // (heads_q / heads_kv)], keys float(k) * k_descale[b, h_kv];
        softmax_scale applies to the dequantized scores.
    out_dtype: fp8 inputs only: "bfloat16" (default) or "float16", or the torch/NumPy dtype;
        for other inputs out has q's dtype and out_dtype may only name it. lse stays float32.

    Returns out, or (out, lse) when return_lse. Raises FlashCoreError (a ValueError) naming the
    argument, its value and what was expected; for an argument of the wrong type (causal="yes",
    softmax_scale="a", q a list) FlashCoreTypeError, which is a FlashCoreError and a TypeError.
    """
    causal = _arrays.flag("causal", causal)
    return_lse = _arrays.flag("return_lse", return_lse)
    softmax_scale = _arrays.softmax_scale_value(softmax_scale)
    fp8 = dict(q_descale=q_descale, k_descale=k_descale, v_descale=v_descale,
               out_dtype=out_dtype)
    if _is_torch_tensor(q):
        torch_entry = _torch_entry()
        if out is None and stream is None:  # the common call: straight to the torch op's entry
            return torch_entry.attention(q, k, v, causal, softmax_scale, return_lse, "bshd",
                                         backend, **fp8)
        return torch_entry.attention_any(
            q, k, v, causal=causal, softmax_scale=softmax_scale, return_lse=return_lse, out=out,
            backend=_arrays.backend_name(backend), stream=stream, **fp8)
    return _arrays.attention_dlpack(
        q, k, v, causal=causal, softmax_scale=softmax_scale, return_lse=return_lse, out=out,
        backend=_arrays.backend_name(backend), stream=stream, **fp8)


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


def select_backend(q, k, v, *, causal=False, softmax_scale=None, backend=None, q_descale=None,
                   k_descale=None, v_descale=None, out_dtype=None):
    """The backend `attention` would run for these arrays (NumPy/DLPack), or FlashCoreError."""
    return _arrays.select_backend_dlpack(
        q, k, v, causal=_arrays.flag("causal", causal),
        softmax_scale=_arrays.softmax_scale_value(softmax_scale),
        backend=_arrays.backend_name(backend), q_descale=q_descale, k_descale=k_descale,
        v_descale=v_descale, out_dtype=out_dtype)


def _check_flags(causal, return_lse, check_indices, softmax_scale):
    return (_arrays.flag("causal", causal), _arrays.flag("return_lse", return_lse),
            _arrays.flag("check_indices", check_indices),
            _arrays.softmax_scale_value(softmax_scale))


def attention_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, *,
                     causal=False, softmax_scale=None, seqused_k=None, return_lse=False, out=None,
                     check_indices=False, backend=None, stream=None, q_descale=None,
                     k_descale=None, v_descale=None, out_dtype=None):
    """Attention over a batch of sequences of different lengths, packed back to back.

    q: [total_q, heads_q, head_dim]; k, v: [total_k, heads_kv, head_dim]. Sequence b is rows
    cu_seqlens_q[b] .. cu_seqlens_q[b+1] of q and cu_seqlens_k[b] .. cu_seqlens_k[b+1] of k/v;
    cu_seqlens_q/k are int32 [batch + 1] on q's device. max_seqlen_q/max_seqlen_k (ints) bound
    every sequence's length: the caller knows them, so no device-to-host copy is needed (CUDA
    graphs and torch.compile keep working). seqused_k (int32 [batch], optional): sequence b
    uses only its first seqused_k[b] keys. causal is bottom-right per sequence.
    check_indices: copy the index tensors to the host (a synchronization on CUDA) and check
    their values (non-decreasing cu_seqlens within the tensors); without it wrong values give
    wrong answers but never an access outside the tensors.
    q_descale, k_descale, v_descale: fp8 inputs, float32 [batch, heads_kv]: one factor per
    sequence and kv head. Other arguments as flashcore.attention. Returns out (like q; out_dtype
    for fp8), or (out, lse) with lse [heads_q, total_q] float32.
    """
    causal, return_lse, check_indices, softmax_scale = _check_flags(
        causal, return_lse, check_indices, softmax_scale)
    max_seqlen_q = _serving.seqlen_value("max_seqlen_q", max_seqlen_q)
    max_seqlen_k = _serving.seqlen_value("max_seqlen_k", max_seqlen_k)
    backend = _arrays.backend_name(backend)
    descales = dict(q_descale=q_descale, k_descale=k_descale, v_descale=v_descale)
    if _is_torch_tensor(q):
        return _torch_entry().attention_varlen(
            q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, causal=causal,
            softmax_scale=softmax_scale, seqused_k=seqused_k, return_lse=return_lse, out=out,
            check_indices=check_indices, backend=backend, stream=stream, out_dtype=out_dtype,
            **descales)
    tensors = dict(q=q, k=k, v=v, cu_seqlens_q=cu_seqlens_q, cu_seqlens_k=cu_seqlens_k,
                   seqused_k=seqused_k, **descales)
    options = dict(max_seqlen_q=max_seqlen_q, max_seqlen_k=max_seqlen_k,
                   softmax_scale=softmax_scale, causal=causal, backend=backend,
                   check_indices=check_indices)
    return _serving.attention_serving_dlpack(
        tensors, lse_dims=_serving.lse_shape(q, packed=True) if hasattr(q, "shape") else None,
        return_lse=return_lse, out=out, stream=stream, options=options, out_dtype=out_dtype)


def attention_with_kvcache(q, k_cache, v_cache, cache_seqlens, *, page_table=None, k=None,
                           v=None, cu_seqlens_q=None, max_seqlen_q=None, causal=False,
                           softmax_scale=None, return_lse=False, out=None, check_indices=False,
                           backend=None, stream=None, q_descale=None, k_descale=None,
                           v_descale=None, out_dtype=None):
    """Attention of q over a kv cache, after appending k/v to it in place (a decode step or a
    chunk of prefill in one call).

    k_cache, v_cache: contiguous [batch, capacity, heads_kv, head_dim], or with page_table
        paged [num_pages, page_size, heads_kv, head_dim]; any strides with the last dimension
        contiguous. Token t of sequence b lives at k_cache[b, t], or, paged, in page
        page_table[b, t // page_size], slot t % page_size.
    cache_seqlens: int32 [batch], the tokens sequence b already holds. Not changed by the call:
        the caller advances it.
    page_table: int32 [batch, max_pages_per_seq] (vLLM's block_table; SGLang's token table with
        page_size 1).
    q: dense [batch, seqlen_q, heads_q, head_dim], or packed [total_q, heads_q, head_dim] with
        cu_seqlens_q (int32 [batch + 1]) and max_seqlen_q (an int bounding every sequence's
        query count; default total_q, which is always right but sizes the launch for the
        longest possible sequence).
    k, v (optional, together): new tokens [batch, seqlen_new, heads_kv, head_dim], or packed
        like q with cu_seqlens_q; written into the cache at cache_seqlens[b] before attending,
        so they count as keys. The cache must be writable and have room for them.
    causal: bottom-right per sequence (the last query row sees the sequence's last key).
    check_indices: copy the index tensors to the host (a synchronization on CUDA) and check
        their values (pages in range, no overflow); without it wrong values give wrong answers
        but never an access outside the tensors.
    q_descale, k_descale, v_descale: fp8 inputs (q, the cache and k/v all float8_e4m3fn),
        float32 [batch, heads_kv]: one factor per sequence and kv head, the same for its cached
        and its appended tokens (the append stores k/v as they are, no rescaling).
    Other arguments as flashcore.attention. Returns out (like q; out_dtype for fp8), or
    (out, lse) with lse [batch, heads_q, seqlen_q] float32 for a dense q, [heads_q, total_q] for
    a packed one.
    """
    causal, return_lse, check_indices, softmax_scale = _check_flags(
        causal, return_lse, check_indices, softmax_scale)
    packed = cu_seqlens_q is not None
    if max_seqlen_q is None:
        max_seqlen_q = q.shape[0] if packed and hasattr(q, "shape") and len(q.shape) else 0
    else:
        max_seqlen_q = _serving.seqlen_value("max_seqlen_q", max_seqlen_q)
        if not packed:
            raise FlashCoreError(
                f"max_seqlen_q={max_seqlen_q} is only for a packed q (with cu_seqlens_q); a dense "
                "q's seqlen_q is its second dimension")
    backend = _arrays.backend_name(backend)
    descales = dict(q_descale=q_descale, k_descale=k_descale, v_descale=v_descale)
    if _is_torch_tensor(q):  # flashcore.torch names the tensors as this function does
        return _torch_entry().attention_with_kvcache(
            q, k_cache, v_cache, cache_seqlens, page_table=page_table, k=k, v=v,
            cu_seqlens_q=cu_seqlens_q, max_seqlen_q=max_seqlen_q, causal=causal,
            softmax_scale=softmax_scale, return_lse=return_lse, out=out,
            check_indices=check_indices, backend=backend, stream=stream, out_dtype=out_dtype,
            **descales)
    tensors = dict(q=q, k=k_cache, v=v_cache, cu_seqlens_q=cu_seqlens_q,
                   cache_seqlens=cache_seqlens, page_table=page_table, k_new=k, v_new=v,
                   **descales)
    options = dict(max_seqlen_q=max_seqlen_q, softmax_scale=softmax_scale, causal=causal,
                   backend=backend, check_indices=check_indices)
    try:
        return _serving.attention_serving_dlpack(
            tensors, lse_dims=_serving.lse_shape(q, packed) if hasattr(q, "shape") else None,
            return_lse=return_lse, out=out, stream=stream, options=options,
            out_dtype=out_dtype)
    except FlashCoreError as error:
        _serving.reraise_with_kvcache_names(error)
