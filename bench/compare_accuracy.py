"""The BENCHMARKS.md accuracy rule on the GPU, cheap enough for the standard grid.

Reference: the low-precision inputs of batch element 0 upcast to float64, plain
softmax(q k^T * scale) v, on a sample of query rows (every head). Baseline: torch's math SDPA in
the same low precision on the same rows. Pass: max|out - ref| <= 2 * max|baseline - ref| + 1e-5,
and the same for lse with 1e-4; any NaN/Inf in the output fails (the output was NaN-poisoned
before the checked run, so an unwritten element anywhere in the tensor fails too).
"""
import math

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

OUT_SLACK = 1e-5   # BENCHMARKS.md: absolute slack on top of twice the baseline error (out)
LSE_SLACK = 1e-4   # the same for lse (float32)
# Rows around the tile boundaries every kernel uses (64- and 128-row tiles).
TILE_EDGE_ROWS = (63, 64, 65, 127, 128, 129)


def sample_rows(seqlen_q, max_rows):
    """All rows when few, else an even spread plus the first, last and tile-edge rows."""
    if seqlen_q <= max_rows:
        return list(range(seqlen_q))
    rows = {0, seqlen_q - 1}
    rows.update(r for r in TILE_EDGE_ROWS if r < seqlen_q)
    rows.update((i * seqlen_q) // max_rows for i in range(max_rows))
    return sorted(rows)


def visible_keys(rows, seqlen_q, seqlen_k, causal, device):
    """[R, sk] bool: bottom-right causal alignment (key j visible iff j <= i + sk - sq)."""
    keys = torch.arange(seqlen_k, device=device)
    if not causal:
        return torch.ones(len(rows), seqlen_k, dtype=torch.bool, device=device)
    limits = torch.tensor(rows, device=device) + (seqlen_k - seqlen_q)
    return keys[None, :] <= limits[:, None]


def _scores(q_rows, k0, scale):
    """q_rows [R, hq, d], k0 [sk, hkv, d] -> [hq, R, sk]; query head h reads kv head h // group."""
    rows, heads_q, head_dim = q_rows.shape
    heads_kv = k0.shape[1]
    grouped = q_rows.reshape(rows, heads_kv, heads_q // heads_kv, head_dim)
    scores = torch.einsum("rkgd,skd->kgrs", grouped, k0) * scale
    return scores.reshape(heads_q, rows, k0.shape[0])


def reference(q, k, v, rows, causal, scale):
    """Float64 out [R, hq, d] and lse [hq, R] for `rows` of batch element 0."""
    index = torch.tensor(rows, device=q.device)
    q_rows = q[0].index_select(0, index).double()
    k0, v0 = k[0].double(), v[0].double()
    scores = _scores(q_rows, k0, scale)
    mask = visible_keys(rows, q.shape[1], k.shape[1], causal, q.device)
    scores = scores.masked_fill(~mask[None], -math.inf)
    lse = torch.logsumexp(scores, dim=-1)  # -inf for a row with no visible key
    probs = torch.exp(scores - lse[..., None]).nan_to_num(0.0)  # such a row: out = 0
    heads_q, heads_kv = q.shape[2], k.shape[2]
    grouped = probs.reshape(heads_kv, heads_q // heads_kv, len(rows), -1)
    out = torch.einsum("kgrs,skd->rkgd", grouped, v0).reshape(len(rows), heads_q, -1)
    return out, lse


def baseline(q, k, v, rows, causal, scale):
    """Math SDPA in the input dtype on the same rows: out [R, hq, d]; lse [hq, R] in float32
    from the low-precision scores."""
    index = torch.tensor(rows, device=q.device)
    q_rows = q[:1].index_select(1, index)  # [1, R, hq, d]
    mask = visible_keys(rows, q.shape[1], k.shape[1], causal, q.device)
    gqa = q.shape[2] != k.shape[2]
    cuda_flags = torch.backends.cuda
    # torch >= 2.5 upcasts fp16/bf16 inside the math backend unless told not to; the rule wants
    # a naive implementation in the *same* low precision.
    allow = getattr(cuda_flags, "allow_fp16_bf16_reduction_math_sdp", None)
    query = getattr(cuda_flags, "fp16_bf16_reduction_math_sdp_allowed", lambda: False)
    previous = query() if allow else None
    if allow:
        allow(True)
    try:
        with sdpa_kernel(SDPBackend.MATH):
            out = F.scaled_dot_product_attention(
                q_rows.transpose(1, 2), k[:1].transpose(1, 2), v[:1].transpose(1, 2),
                attn_mask=mask, scale=scale, enable_gqa=gqa)
    finally:
        if allow:
            allow(previous)
    low_scores = _scores(q_rows[0], k[0], 1.0).float() * scale  # product rounded to the dtype
    lse = torch.logsumexp(low_scores.masked_fill(~mask[None], -math.inf), dim=-1)
    return out[0].transpose(0, 1), lse


def max_error(got, want):
    """max |got - want| over elements where want is finite; -inf == -inf counts as 0."""
    got, want = got.double(), want.double()
    both_inf = torch.isinf(got) & torch.isinf(want) & (torch.sign(got) == torch.sign(want))
    diff = (got - want).abs().masked_fill(both_inf, 0.0)
    return diff.max().item() if diff.numel() else 0.0


class Checker:
    """Reference and baseline for one config, computed once and applied to every output."""

    def __init__(self, q, k, v, causal, scale, max_rows, extra_rows=()):
        """extra_rows: rows checked besides the sample (e.g. the shard edges of a ring)."""
        rows = set(sample_rows(q.shape[1], max_rows))
        rows.update(r for r in extra_rows if 0 <= r < q.shape[1])
        self.rows = sorted(rows)
        self.causal = causal
        self.ref_out, self.ref_lse = reference(q, k, v, self.rows, causal, scale)
        base_out, base_lse = baseline(q, k, v, self.rows, causal, scale)
        has_key = torch.isfinite(self.ref_lse).all(dim=0)  # rows with a visible key
        self.baseline_err_out = max_error(base_out[has_key], self.ref_out[has_key])
        self.baseline_err_lse = max_error(base_lse[:, has_key], self.ref_lse[:, has_key])
        self.tol_out = 2 * self.baseline_err_out + OUT_SLACK
        self.tol_lse = 2 * self.baseline_err_lse + LSE_SLACK

    def check(self, out, lse=None):
        """out [b, sq, hq, d] (whole tensor, checked for non-finite values), lse [b, hq, sq]."""
        index = torch.tensor(self.rows, device=out.device)
        result = {"rows_checked": len(self.rows), "nonfinite": not bool(torch.isfinite(out).all())}
        result["max_err_out"] = max_error(out[0].index_select(0, index), self.ref_out)
        result["pass"] = (not result["nonfinite"] and result["max_err_out"] <= self.tol_out)
        if lse is not None:
            got = lse[0].index_select(1, index)
            result["max_err_lse"] = max_error(got, self.ref_lse)
            lse_bad = bool(torch.isnan(got).any())
            result["pass"] = (result["pass"] and not lse_bad
                              and result["max_err_lse"] <= self.tol_lse)
        if math.isnan(result["max_err_out"]):
            result["pass"] = False
        return result
