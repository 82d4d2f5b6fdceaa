"""Ragged batches and kv caches for the serving tests, and their check: every sequence against
the float64 reference of that sequence run alone (the BENCHMARKS.md rule, as
attention_reference.check_accuracy applies it to a dense call). Torch-free, like
attention_reference."""

import numpy as np

from attention_reference import assert_within_rule, attention_reference, baseline_attention


def cu_seqlens(lengths):
    """int32 [batch + 1] offsets of sequences of these lengths packed back to back."""
    return np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)


def random_packed(rng, total, heads, head_dim, dtype, std=1.0):
    return (rng.standard_normal((total, heads, head_dim)) * std).astype(dtype)


def check_sequence(name, out, lse, q, k, v, causal, softmax_scale=None):
    """One sequence: out [seqlen_q, heads_q, d], lse [heads_q, seqlen_q] (or None) against the
    reference of q [seqlen_q, heads_q, d], k/v [seqlen_k, heads_kv, d]. An empty sequence has
    nothing to check."""
    if q.shape[0] == 0:
        return
    q1, k1, v1 = q[None], k[None], v[None]
    reference = attention_reference(q1, k1, v1, causal, softmax_scale)
    baseline = baseline_attention(q1, k1, v1, causal, softmax_scale)
    assert_within_rule(name, out[None], None if lse is None else lse[None], reference, baseline)


def check_varlen(name, out, lse, q, k, v, cu_q, cu_k, causal, seqused_k=None,
                 softmax_scale=None):
    """Every sequence of a packed call; lse [heads_q, total_q] or None."""
    for b in range(len(cu_q) - 1):
        rows = slice(cu_q[b], cu_q[b + 1])
        keys = cu_k[b + 1] - cu_k[b] if seqused_k is None else seqused_k[b]
        cols = slice(cu_k[b], cu_k[b] + keys)
        check_sequence(f"{name} sequence {b}", out[rows], None if lse is None else lse[:, rows],
                       q[rows], k[cols], v[cols], causal, softmax_scale)


class PagedCache:
    """A paged kv cache built from per-sequence keys: pages handed out in a shuffled order (so
    that a sequence's pages are not contiguous), spare pages and unused slots filled with
    `fill` (NaN: never read)."""

    def __init__(self, rng, capacities, page_size, heads_kv, head_dim, dtype, fill=np.nan,
                 spare_pages=2):
        self.page_size = page_size
        pages_per_seq = [-(-c // page_size) for c in capacities]
        self.width = max(pages_per_seq, default=0)
        num_pages = sum(pages_per_seq) + spare_pages
        order = rng.permutation(num_pages).astype(np.int32)
        # Unused entries of the table point at a spare page: never read either.
        self.page_table = np.full((len(capacities), self.width), order[-1], dtype=np.int32)
        start = 0
        for b, count in enumerate(pages_per_seq):
            self.page_table[b, :count] = order[start:start + count]
            start += count
        shape = (num_pages, page_size, heads_kv, head_dim)
        self.k = np.full(shape, fill, dtype=dtype)
        self.v = np.full(shape, fill, dtype=dtype)

    def slots(self, b, length):
        """(page, slot) index arrays of tokens 0..length-1 of sequence b."""
        tokens = np.arange(length)
        return self.page_table[b, tokens // self.page_size], tokens % self.page_size

    def write(self, b, k, v):
        pages, slots = self.slots(b, k.shape[0])
        self.k[pages, slots] = k
        self.v[pages, slots] = v

    def read(self, b, length):
        pages, slots = self.slots(b, length)
        return self.k[pages, slots], self.v[pages, slots]
