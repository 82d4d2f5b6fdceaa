"""The BENCHMARKS.md accuracy rule on torch tensors (any device): a float64 reference, a naive
same-precision baseline (float32 scores, P rounded to the input dtype) and the check."""

import math

import torch
from attention_reference import assert_within_rule  # the rule, written down once


def _visible(seqlen_q, seqlen_k, causal, device):
    if not causal:
        return torch.ones(seqlen_q, seqlen_k, dtype=torch.bool, device=device)
    rows = torch.arange(seqlen_q, device=device)[:, None]
    cols = torch.arange(seqlen_k, device=device)[None, :]
    return cols <= rows + (seqlen_k - seqlen_q)


def _attention(q, k, v, causal, softmax_scale, compute_dtype, p_dtype):
    """BSHD in, (out BSHD in compute_dtype, lse [b, h, s_q])."""
    heads_q, heads_kv, head_dim = q.shape[2], k.shape[2], q.shape[3]
    scale = 1.0 / math.sqrt(head_dim) if softmax_scale is None else softmax_scale
    group = heads_q // heads_kv
    qc = q.to(compute_dtype).transpose(1, 2)
    kc = k.to(compute_dtype).repeat_interleave(group, dim=2).transpose(1, 2)
    vc = v.to(compute_dtype).repeat_interleave(group, dim=2).transpose(1, 2)
    scores = (qc @ kc.transpose(-1, -2)) * scale
    scores = scores.masked_fill(~_visible(q.shape[1], k.shape[1], causal, q.device), -math.inf)
    lse = torch.logsumexp(scores, dim=-1)
    probs = torch.exp(scores - lse[..., None].clamp_min(torch.finfo(compute_dtype).min))
    probs = torch.nan_to_num(probs, nan=0.0)  # rows with no visible key: out = 0
    if p_dtype is not None:
        probs = probs.to(p_dtype).to(compute_dtype)
    return (probs @ vc).transpose(1, 2), lse


def reference(q, k, v, causal=False, softmax_scale=None):
    return _attention(q, k, v, causal, softmax_scale, torch.float64, None)


def baseline(q, k, v, causal=False, softmax_scale=None):
    p_dtype = None if q.dtype == torch.float32 else q.dtype
    out, lse = _attention(q, k, v, causal, softmax_scale, torch.float32, p_dtype)
    return out.to(q.dtype).to(torch.float64), lse.to(torch.float64)


def _numpy(tensor):
    return tensor.detach().to(torch.float64).cpu().numpy()


def check_accuracy(name, out, lse, q, k, v, causal=False, softmax_scale=None):
    """Asserts the rule for out (BSHD) and optionally lse; names the worst element. The reference
    and baseline are computed with torch on the inputs' device, the rule applied on the host."""
    ref_out, ref_lse = reference(q, k, v, causal, softmax_scale)
    base_out, base_lse = baseline(q, k, v, causal, softmax_scale)
    assert_within_rule(name, _numpy(out), None if lse is None else _numpy(lse),
                       (_numpy(ref_out), _numpy(ref_lse)), (_numpy(base_out), _numpy(base_lse)))
