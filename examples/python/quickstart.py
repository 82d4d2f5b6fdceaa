"""README's Python example: attention on NumPy arrays (CPU), checked against plain NumPy."""
import numpy as np

import flashcore

rng = np.random.default_rng(0)
batch, seqlen, heads_q, heads_kv, head_dim = 2, 256, 8, 2, 64          # GQA: 4 query heads per kv
q = rng.standard_normal((batch, seqlen, heads_q, head_dim), dtype=np.float32)   # BSHD
k = rng.standard_normal((batch, seqlen, heads_kv, head_dim), dtype=np.float32)
v = rng.standard_normal((batch, seqlen, heads_kv, head_dim), dtype=np.float32)

out, lse = flashcore.attention(q, k, v, causal=True, return_lse=True)
print("backend:", flashcore.select_backend(q, k, v), "out", out.shape, "lse", lse.shape)

# The same thing in plain NumPy for one (batch, head): softmax(q k^T / sqrt(d)) v, causal.
b, h = 1, 5
scores = q[b, :, h] @ k[b, :, h // 4].T / np.sqrt(head_dim)
scores[np.triu_indices(seqlen, 1)] = -np.inf
p = np.exp(scores - scores.max(axis=1, keepdims=True))
expected = (p / p.sum(axis=1, keepdims=True)) @ v[b, :, h // 4]
print("max error vs numpy:", float(np.abs(out[b, :, h] - expected).max()))
assert np.allclose(out[b, :, h], expected, atol=1e-4)

try:
    k3 = rng.standard_normal((batch, seqlen, 3, head_dim), dtype=np.float32)
    flashcore.attention(q, k3, k3, causal=True)
except flashcore.FlashCoreError as error:  # a ValueError naming the argument and value
    print("error:", error)
