"""Hugging Face transformers integration: FlashCore as attn_implementation="FlashCore".

    import flashcore.transformers
    name = flashcore.transformers.register()          # "FlashCore"
    model = AutoModelForCausalLM.from_config(cfg, attn_implementation=name)

The name is "FlashCore", capitalised on purpose: transformers 5.x treats every implementation
name containing the lowercase substring "flash" as a FlashAttention kernel to load
(`transformers.utils.generic.is_flash_attention_requested` is `"flash" in name`), so
attn_implementation="flashcore" fails at model init with "Could not find the currently requested
flash attention implementation". register() also registers "flashcore" where the installed
transformers accepts it (older versions), and returns the name to use.

register() adds two entries under that name:
- the attention function (transformers.AttentionInterface): q/k/v arrive as [b, h, s, d] and are
  read as BSHD views (no copies); GQA/MQA key/value heads go in as they are (no repeat_kv);
  causal is bottom-right aligned, so prefill (s_q == s_k) and decode / chunked prefill with a KV
  cache (s_q < s_k) are both exact. Output [b, s, h, d], contiguous, as transformers expects.
- the mask function (transformers.masking_utils.AttentionMaskInterface): returns None when the
  mask is exactly bottom-right causal over the whole key range (no padding, no sliding window,
  no extra mask functions), and otherwise builds SDPA's boolean mask.

Fallback policy: whenever the attention function receives a mask (padding in the batch, static
caches whose key range extends past the last query, sliding windows, packed sequences), or
dropout in training, softcapping, position bias, a paged cache, float32 CUDA tensors or a
head_dim with no compiled CUDA kernel, it calls transformers' SDPA attention instead and warns
(warnings.warn) once per reason. Results stay correct; only speed differs.
Needs transformers >= 4.53 for the mask interface (older versions always pass a mask, so every
call falls back to SDPA).
"""

import functools
import logging
import warnings

import torch

import flashcore

from . import torch as flashcore_torch

__all__ = ["register", "attention_forward", "mask", "NAME"]

NAME = "FlashCore"
_LOWERCASE_NAME = "flashcore"
_logger = logging.getLogger(__name__)
_warned = set()


def _warn_once(reason):
    if reason not in _warned:
        _warned.add(reason)
        warnings.warn(f"flashcore attention falls back to sdpa: {reason}", stacklevel=3)


@functools.lru_cache(maxsize=None)
def _cuda_head_dims(device_index):
    """Head dims some CUDA backend available on this device has kernels for."""
    dims = set()
    for backend in ("sm90", "sm80"):
        if flashcore.backend_available(backend, device_index):
            dims.update(flashcore.supported_head_dims(backend))
    return frozenset(dims)


def _fallback_reason(module, query, attention_mask, dropout, kwargs):
    if query.is_cuda:
        if query.dtype == torch.float32:
            return "float32 on CUDA (FlashCore's CUDA kernels take float16/bfloat16)"
        head_dims = _cuda_head_dims(query.device.index or 0)
        if query.shape[-1] not in head_dims:
            return (f"head_dim={query.shape[-1]} (compiled CUDA kernels here: "
                    f"{sorted(head_dims) or 'none'})")
    if attention_mask is not None:
        return ("an explicit attention mask (padding, sliding window, static cache or packed "
                "sequences); FlashCore runs masks that are pure bottom-right causal only")
    if dropout and dropout > 0.0:
        return f"dropout={dropout} (FlashCore has no dropout)"
    if kwargs.get("softcap") is not None:
        return "softcap (not implemented in FlashCore)"
    if kwargs.get("position_bias") is not None:
        return "position_bias (not implemented in FlashCore)"
    if kwargs.get("cache") is not None:
        return "a paged KV cache (not implemented in FlashCore)"
    if kwargs.get("sliding_window") is not None:
        return "sliding_window (not implemented in FlashCore)"
    return None


def _sdpa_attention(*args, **kwargs):
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    return sdpa_attention_forward(*args, **kwargs)


def attention_forward(module, query, key, value, attention_mask, dropout=0.0, scaling=None,
                      is_causal=None, **kwargs):
    """transformers attention function: query [b, h_q, s_q, d], key/value [b, h_kv, s_k, d].

    Returns (attn_output [b, s_q, h_q, d] contiguous, None). Falls back to SDPA (warning once per
    reason) for anything FlashCore does not run: see the module docstring.
    """
    reason = _fallback_reason(module, query, attention_mask, dropout, kwargs)
    if reason is not None:
        _warn_once(reason)
        return _sdpa_attention(module, query, key, value, attention_mask, dropout=dropout,
                               scaling=scaling, is_causal=is_causal, **kwargs)
    causal = is_causal if is_causal is not None else getattr(module, "is_causal", True)
    # out comes back contiguous [b, s, h, d]: transformers reshapes it to [b, s, h * d] without a
    # copy.
    out = flashcore_torch.attention_bhsd_to_bshd(query, key, value, bool(causal), scaling)
    return out, None


def _is_tensor_being_traced(value):
    return isinstance(value, torch.Tensor) and (
        torch.compiler.is_compiling() or torch.jit.is_tracing())


def _is_pure_bottom_right_causal(q_length, kv_length, q_offset, kv_offset, mask_function,
                                 attention_mask, local_size):
    from transformers import masking_utils

    if mask_function is not masking_utils.causal_mask_function or local_size is not None:
        return False
    if isinstance(q_offset, torch.Tensor) or isinstance(kv_offset, torch.Tensor):
        return False  # static caches pass tensor offsets: their key range is not bottom-aligned
    # Bottom-right: the last query is the last key (a static cache's unused tail would not be).
    if q_offset + q_length != kv_offset + kv_length:
        return False
    padding_mask = masking_utils.prepare_padding_mask(attention_mask, kv_length, kv_offset)
    if padding_mask is None:
        return True
    if _is_tensor_being_traced(padding_mask):
        return False  # reading the mask would break the graph: keep the explicit mask
    return bool(padding_mask.all())


def mask(batch_size, q_length, kv_length, q_offset=0, kv_offset=0, mask_function=None,
         attention_mask=None, local_size=None, allow_is_causal_skip=True, **kwargs):
    """transformers mask function: None when FlashCore's bottom-right causal mask is exact,
    else SDPA's boolean [b, 1, s_q, s_k] mask (which makes attention_forward fall back)."""
    from transformers import masking_utils

    if mask_function is None:
        mask_function = masking_utils.causal_mask_function
    if allow_is_causal_skip and _is_pure_bottom_right_causal(
            q_length, kv_length, q_offset, kv_offset, mask_function, attention_mask,
            local_size):
        return None
    # Never let SDPA skip the causal mask: its skip means top-left `is_causal` (e.g. a static
    # cache's empty prefill), which differs from FlashCore's bottom-right alignment.
    return masking_utils.sdpa_mask(
        batch_size=batch_size, q_length=q_length, kv_length=kv_length, q_offset=q_offset,
        kv_offset=kv_offset, mask_function=mask_function, attention_mask=attention_mask,
        local_size=local_size, allow_is_causal_skip=False, **kwargs)


def _taken_for_flash_attention(name):
    """Whether this transformers would treat `name` as a FlashAttention kernel to load."""
    try:
        from transformers.utils.generic import is_flash_attention_requested
    except ImportError:
        return name.startswith("flash_attention")
    return is_flash_attention_requested(requested_attention_implementation=name)


def register(name=None):
    """Registers FlashCore with transformers and returns the attn_implementation name to use.

    Default name "FlashCore" (see the module docstring for why not "flashcore"); "flashcore" is
    registered too when the installed transformers does not take it for FlashAttention. After
    this, from_pretrained/from_config(..., attn_implementation=name) and
    model.set_attn_implementation(name) use FlashCore. Safe to call more than once.
    """
    import transformers

    names = [name] if name is not None else [NAME]
    if name is None and not _taken_for_flash_attention(_LOWERCASE_NAME):
        names.append(_LOWERCASE_NAME)
    if _taken_for_flash_attention(names[0]):
        raise ValueError(
            f"transformers {transformers.__version__} treats attn_implementation={names[0]!r} as "
            "a FlashAttention kernel (the name contains 'flash'); register FlashCore under "
            f"another name, e.g. the default {NAME!r}")
    try:
        from transformers.masking_utils import AttentionMaskInterface
    except ImportError:  # transformers < 4.53: every call gets a mask and falls back to SDPA
        AttentionMaskInterface = None
        _logger.warning("transformers %s has no AttentionMaskInterface; FlashCore attention "
                        "will fall back to sdpa on every call", transformers.__version__)
    for each in names:
        transformers.AttentionInterface.register(each, attention_forward)
        if AttentionMaskInterface is not None:
            AttentionMaskInterface.register(each, mask)
    return names[0]
