"""The BENCHMARKS.md accuracy rule in NumPy: a float64 reference, a same-precision baseline and
the pass check. Torch-free so that CI (no torch) can use it."""

import numpy as np

OUT_SLACK = 1e-5  # absolute slack on out (BENCHMARKS.md)
LSE_SLACK = 1e-4  # absolute slack on lse (BENCHMARKS.md)


def _visible(seqlen_q, seqlen_k, causal):
    """[seqlen_q, seqlen_k] bool: query i sees key j <= i + seqlen_k - seqlen_q when causal."""
    if not causal:
        return np.ones((seqlen_q, seqlen_k), dtype=bool)
    rows = np.arange(seqlen_q)[:, None]
    cols = np.arange(seqlen_k)[None, :]
    return cols <= rows + (seqlen_k - seqlen_q)


def _upcast(x, compute_dtype):
    """Low-precision inputs through float32 (NumPy cannot cast ml_dtypes' bfloat16 to float64
    directly everywhere); float64 inputs (fp8 values already dequantized) as they are."""
    x = np.asarray(x)
    return x.astype(compute_dtype) if x.dtype == np.float64 else x.astype(np.float32).astype(
        compute_dtype)


def attention_reference(q, k, v, causal=False, softmax_scale=None, compute_dtype=np.float64,
                        p_dtype=None):
    """out [b, s_q, h_q, d] and lse [b, h_q, s_q] of BSHD inputs.

    compute_dtype float64 is the oracle. The baseline uses float32 scores/accumulation with P
    rounded to the input dtype (p_dtype), as a naive same-precision kernel would.
    """
    batch, seqlen_q, heads_q, head_dim = q.shape
    seqlen_k, heads_kv = k.shape[1], k.shape[2]
    scale = 1.0 / np.sqrt(head_dim) if softmax_scale is None else softmax_scale
    group = heads_q // heads_kv
    q_c, k_c, v_c = (_upcast(x, compute_dtype) for x in (q, k, v))
    k_c, v_c = np.repeat(k_c, group, axis=2), np.repeat(v_c, group, axis=2)
    scores = np.einsum("bqhd,bkhd->bhqk", q_c, k_c) * compute_dtype(scale)
    visible = _visible(seqlen_q, seqlen_k, causal)
    scores = np.where(visible, scores, -np.inf)
    row_max = scores.max(axis=-1, keepdims=True) if seqlen_k else np.full(
        (batch, heads_q, seqlen_q, 1), -np.inf, dtype=compute_dtype)
    empty_row = ~np.isfinite(row_max)
    safe_max = np.where(empty_row, 0, row_max)
    probs = np.exp(scores - safe_max)
    row_sum = probs.sum(axis=-1, keepdims=True)
    normalized = probs / np.where(empty_row, 1, row_sum)
    if p_dtype is not None:
        normalized = normalized.astype(p_dtype).astype(compute_dtype)
    out = np.einsum("bhqk,bkhd->bqhd", normalized, v_c)
    with np.errstate(divide="ignore"):
        lse = np.where(empty_row, -np.inf, safe_max + np.log(row_sum))[..., 0]
    return out, lse


def baseline_attention(q, k, v, causal=False, softmax_scale=None):
    """A naive implementation in the inputs' own precision (float32 for float32 inputs)."""
    low = np.asarray(q).dtype
    p_dtype = None if low == np.float32 else low
    out, lse = attention_reference(q, k, v, causal, softmax_scale, compute_dtype=np.float32,
                                   p_dtype=p_dtype)
    return out.astype(low).astype(np.float64), lse.astype(np.float64)


def _max_error(actual, expected):
    actual = np.asarray(actual, dtype=np.float64)
    both_inf = np.isinf(expected) & (actual == expected)
    with np.errstate(invalid="ignore"):  # -inf - -inf where both are -inf (empty rows)
        diff = np.where(both_inf, 0.0, np.abs(actual - expected))
    return float(np.nanmax(diff)) if diff.size else 0.0, diff


def check_accuracy(name, out, lse, q, k, v, causal=False, softmax_scale=None):
    """Asserts the BENCHMARKS.md rule; the message names the worst element and both values."""
    ref_out, ref_lse = attention_reference(q, k, v, causal, softmax_scale)
    base_out, base_lse = baseline_attention(q, k, v, causal, softmax_scale)
    assert_within_rule(name, out, lse, (ref_out, ref_lse), (base_out, base_lse))


def assert_within_rule(name, out, lse, reference, baseline, out_slack=OUT_SLACK,
                       lse_slack=LSE_SLACK):
    """The rule itself, on NumPy arrays: max|actual - ref| <= 2 * max|baseline - ref| + slack,
    and no NaN/Inf where the reference is finite. reference and baseline are (out, lse) in
    float64; lse may be None to check out only. Shared by the NumPy, torch and FP8 checks (the
    FP8 rule's slacks: fp8_reference.py)."""
    pairs = [("out", out, reference[0], baseline[0], out_slack)]
    if lse is not None:
        pairs.append(("lse", lse, reference[1], baseline[1], lse_slack))
    for label, actual, ref, base, slack in pairs:
        actual64 = np.asarray(actual, dtype=np.float32).astype(np.float64)
        bad = ~np.isfinite(actual64) & np.isfinite(ref)
        assert not bad.any(), (
            f"{name}: {label} has NaN/Inf at {np.argwhere(bad)[0].tolist()} where the reference "
            f"is finite (shape {ref.shape})")
        base_error, _ = _max_error(base, ref)
        limit = 2 * base_error + slack
        error, diff = _max_error(actual64, ref)
        if error > limit:
            worst = np.unravel_index(np.nanargmax(diff), diff.shape)
            raise AssertionError(
                f"{name}: {label} max error {error:.3g} > limit {limit:.3g} (baseline "
                f"{base_error:.3g}) at {list(worst)}: got {actual64[worst]!r}, "
                f"reference {ref[worst]!r}, shape {ref.shape}")


def random_bshd(rng, batch, seqlen, heads, head_dim, dtype, std=1.0):
    return (rng.standard_normal((batch, seqlen, heads, head_dim)) * std).astype(dtype)
