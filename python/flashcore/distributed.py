"""Context parallelism: ring attention over torch.distributed (NCCL on GPUs, gloo on CPUs).

    import torch.distributed as dist
    from flashcore.distributed import ring_attention, zigzag_shard, zigzag_unshard

    dist.init_process_group("nccl")                      # torchrun; torch.cuda.set_device(...)
    q_local = zigzag_shard(q, dim=1)                     # [b, S / W, hq, d] on each rank
    k_local, v_local = zigzag_shard(k, dim=1), zigzag_shard(v, dim=1)
    out_local = ring_attention(q_local, k_local, v_local, causal=True, layout="zigzag")
    out = zigzag_unshard(out_local, dim=1)               # the whole [b, S, hq, d], every rank

Every rank of the group holds a shard of the sequence (BSHD, all heads) and the keys and values
of its own tokens. The K/V shards travel once around the ring (rank r sends to r + 1) in batched
P2P sends and receives into a second buffer, while the rank computes on the shard in hand; the
partial outputs are merged through their lse in float32 (on CUDA in one Triton kernel,
_merge_triton.py, where PyTorch brings Triton). On CUDA, NCCL runs the transfers on its
own stream: each transfer waits for the attention already queued on the current stream (the
receive buffer was last read there) and the current stream waits for it before the next step's
attention reads it (work.wait()). Under a causal mask use the zigzag layout: rank r holds chunks
r and 2W-1-r of 2W, so every rank computes the same number of visible pairs, and blocks the mask
hides entirely are skipped. docs/distributed.md has the layouts, the costs and what is not
covered (backward, varlen, FP8).

Forward only: inputs that require grad (with grad mode on) are refused.
"""

import math

import torch
import torch.distributed as dist

from . import _arrays
from . import _ring_plan as plan
from . import attention
from ._flashcore import FlashCoreError, FlashCoreTypeError
from ._ring_plan import LAYOUTS

__all__ = [
    "LAYOUTS",
    "contiguous_shard",
    "contiguous_unshard",
    "local_positions",
    "merge_partials",
    "ring_attention",
    "zigzag_shard",
    "zigzag_unshard",
]

_DTYPE_CODES = {torch.float16: 0, torch.bfloat16: 1, torch.float32: 2}
_NEG_INF = -math.inf


# ---- the process group ------------------------------------------------------------------------

class _Ring:
    """rank / world size within `group`, and the global ranks of the neighbours (P2P ops take
    global ranks)."""

    def __init__(self, group):
        if not (dist.is_available() and dist.is_initialized()):
            raise FlashCoreError(
                "ring attention needs torch.distributed initialized: call "
                "torch.distributed.init_process_group first (torchrun sets the environment)")
        self.group = group
        self.rank = dist.get_rank(group)
        self.world = dist.get_world_size(group)
        if self.rank < 0:
            raise FlashCoreError("this process is not a member of `group`")
        self.next_peer = self._global((self.rank + 1) % self.world)
        self.prev_peer = self._global((self.rank - 1) % self.world)

    def _global(self, group_rank):
        if self.group is None or self.group is dist.group.WORLD:
            return group_rank
        return dist.get_global_rank(self.group, group_rank)

    def exchange(self, send, recv):
        """Starts sending `send` to the next rank and receiving the previous rank's into
        `recv`; returns the works to wait on. On CUDA both ops queue on NCCL's stream after
        the work already queued on the current stream."""
        ops = [dist.P2POp(dist.isend, send, self.next_peer, self.group),
               dist.P2POp(dist.irecv, recv, self.prev_peer, self.group)]
        return dist.batch_isend_irecv(ops)


def _wait(works):
    for work in works:
        work.wait()


def _group_size(group, rank, world_size):
    """(rank, world size): the given ones, else the group's."""
    if (rank is None) != (world_size is None):
        raise FlashCoreError("pass both rank and world_size, or neither (then the group's)")
    if rank is None:
        ring = _Ring(group)
        return ring.rank, ring.world
    for name, value in (("rank", rank), ("world_size", world_size)):
        if not isinstance(value, int) or isinstance(value, bool):
            raise FlashCoreTypeError(f"{name} must be an int, got {value!r}")
    if not 0 <= rank < world_size:
        raise FlashCoreError(f"rank must be in [0, world_size={world_size}), got {rank}")
    return rank, world_size


# ---- sharding helpers -------------------------------------------------------------------------

def _check_dim(x, dim):
    if not isinstance(x, torch.Tensor):
        raise FlashCoreTypeError(f"x must be a torch.Tensor, got {type(x).__name__}")
    if not isinstance(dim, int) or isinstance(dim, bool) or not -x.dim() <= dim < x.dim():
        raise FlashCoreError(f"dim must be an int in [{-x.dim()}, {x.dim()}), got {dim!r} "
                             f"(x has shape {tuple(x.shape)})")
    return dim % x.dim()


def _shard(x, layout, dim, group, rank, world_size):
    dim = _check_dim(x, dim)
    rank, world = _group_size(group, rank, world_size)
    chunk = plan.check_divisible(layout, x.shape[dim], world, name=f"x.shape[{dim}]")
    pieces = [x.narrow(dim, c * chunk, chunk) for c in plan.rank_chunks(layout, rank, world)]
    return pieces[0] if len(pieces) == 1 else torch.cat(pieces, dim)


def _unshard(x, layout, dim, group):
    dim = _check_dim(x, dim)
    ring = _Ring(group)
    plan.check_local_length(layout, x.shape[dim], name="x")
    local = x.contiguous()
    shards = [torch.empty_like(local) for _ in range(ring.world)]
    dist.all_gather(shards, local, group=group)
    per_rank = len(plan.rank_chunks(layout, 0, ring.world))
    chunk = x.shape[dim] // per_rank
    pieces = [None] * plan.chunk_count(layout, ring.world)
    for rank, shard in enumerate(shards):
        for slot, c in enumerate(plan.rank_chunks(layout, rank, ring.world)):
            pieces[c] = shard.narrow(dim, slot * chunk, chunk)
    return torch.cat(pieces, dim)


def zigzag_shard(x, dim=1, group=None, *, rank=None, world_size=None):
    """This rank's zigzag shard of the whole tensor `x`: chunks r and 2W-1-r of 2W along `dim`
    (x.shape[dim] a multiple of 2W), concatenated. No communication; rank and world_size default
    to the group's. Returns a new tensor."""
    return _shard(x, "zigzag", dim, group, rank, world_size)


def zigzag_unshard(x, dim=1, group=None):
    """The whole tensor from every rank's zigzag shard (an all_gather): on every rank."""
    return _unshard(x, "zigzag", dim, group)


def contiguous_shard(x, dim=1, group=None, *, rank=None, world_size=None):
    """This rank's contiguous shard of `x`: chunk r of W along `dim` (a view)."""
    return _shard(x, "contiguous", dim, group, rank, world_size)


def contiguous_unshard(x, dim=1, group=None):
    """The whole tensor from every rank's contiguous shard (an all_gather): on every rank."""
    return _unshard(x, "contiguous", dim, group)


def local_positions(seqlen, layout, group=None, *, rank=None, world_size=None, device=None):
    """Global positions (int64 tensor) of this rank's tokens of a `seqlen`-token sequence, e.g.
    the position ids of rotary embeddings."""
    layout = plan.check_layout(layout, causal=False)
    rank, world = _group_size(group, rank, world_size)
    return torch.tensor(plan.local_positions(layout, rank, world, seqlen), dtype=torch.int64,
                        device=device)


# ---- merging partial results ------------------------------------------------------------------

def _combine(parts, like, lse_shape):
    """Merges partial results in float32. parts: (q_begin, q_end, out [b, rows, hq, d],
    lse [b, hq, rows]) with at least one part over all rows; like: q (dtype, device, shape).
    out_total = sum_i exp(lse_i - lse_total) * out_i; a row that no part sees, or whose lse is
    -inf in every part, gets out 0 and lse -inf. On CUDA one Triton kernel reads every part once
    (_merge_triton.py, imported only then); elsewhere, PyTorch ops."""
    if len(parts) > 1 and like.is_cuda:
        from . import _merge_triton
        if _merge_triton.available(parts, like):
            return _merge_triton.merge(parts, like, lse_shape)
    return _combine_with_torch(parts, like, lse_shape)


def _combine_with_torch(parts, like, lse_shape):
    """_combine in PyTorch ops: a float32 accumulator, read and written once a part."""
    seqlen = like.shape[1]
    full = [p for p in parts if p[0] == 0 and p[1] == seqlen]
    partial = [p for p in parts if not (p[0] == 0 and p[1] == seqlen)]
    if len(parts) == 1:
        return full[0][2], full[0][3]
    lse = torch.full(lse_shape, _NEG_INF, dtype=torch.float32, device=like.device)
    for begin, end, _, part_lse in parts:
        rows = lse[:, :, begin:end]
        torch.logaddexp(rows, part_lse, out=rows)
    # exp(part - total) is 0 where the part saw nothing; where no part saw anything the total
    # is -inf too and 0 stands in for it (exp(-inf - 0) = 0, never exp(-inf + inf) = NaN).
    safe = torch.where(lse == _NEG_INF, torch.zeros((), device=like.device), lse)

    def weight(part):
        begin, end, _, part_lse = part
        return torch.exp(part_lse - safe[:, :, begin:end]).transpose(1, 2).unsqueeze(-1)

    acc = torch.mul(full[0][2], weight(full[0]))  # float32: bf16 * f32 promotes
    for part in partial:
        acc[:, part[0]:part[1]].addcmul_(part[2], weight(part))
    rest = full[1:]
    if rest and like.dtype != torch.float32:  # the last merge writes the output's dtype
        for part in rest[:-1]:
            acc.addcmul_(part[2], weight(part))
        out = torch.empty(like.shape, dtype=like.dtype, device=like.device)
        torch.addcmul(acc, rest[-1][2], weight(rest[-1]), out=out)
        return out, lse
    for part in rest:
        acc.addcmul_(part[2], weight(part))
    return acc.to(like.dtype), lse


def merge_partials(outs, lses):
    """Merges attention results over disjoint key sets of the same queries: outs [b, s, h, d]
    (any float dtype), lses [b, h, s] float32 (natural log, -inf for a row with no key), as
    flashcore.attention(..., return_lse=True) gives them. Computed in float32; returns (out in
    outs[0]'s dtype, lse float32) as one call over all the keys would."""
    if not isinstance(outs, (list, tuple)) or not isinstance(lses, (list, tuple)):
        raise FlashCoreTypeError("outs and lses must be lists of torch.Tensor")
    if not outs or len(outs) != len(lses):
        raise FlashCoreError(f"outs and lses must be non-empty lists of the same length, got "
                             f"{len(outs)} and {len(lses)}")
    like = outs[0]
    batch, seqlen, heads = like.shape[0], like.shape[1], like.shape[2]
    for i, (out, lse) in enumerate(zip(outs, lses)):
        if out.shape != like.shape:
            raise FlashCoreError(f"outs[{i}] has shape {tuple(out.shape)}, expected "
                                 f"{tuple(like.shape)} like outs[0]")
        if tuple(lse.shape) != (batch, heads, seqlen) or lse.dtype != torch.float32:
            raise FlashCoreError(f"lses[{i}] has shape {tuple(lse.shape)} and dtype {lse.dtype}, "
                                 f"expected {(batch, heads, seqlen)} float32")
    parts = [(0, seqlen, out, lse.float()) for out, lse in zip(outs, lses)]
    return _combine(parts, like, (batch, heads, seqlen))


# ---- ring attention ---------------------------------------------------------------------------

def _check_tensors(q, k, v):
    for name, tensor in (("q", q), ("k", k), ("v", v)):
        if not isinstance(tensor, torch.Tensor):
            raise FlashCoreTypeError(f"{name} must be a torch.Tensor, got {type(tensor).__name__}")
        if tensor.dim() != 4:
            raise _arrays.rank_error(name, tuple(tensor.shape))
    if torch.is_grad_enabled():
        for name, tensor in (("q", q), ("k", k), ("v", v)):
            if tensor.requires_grad:
                raise FlashCoreError(
                    f"{name} requires grad: ring_attention is forward-only (FlashCore has no "
                    "backward kernel yet); call it under torch.no_grad() or "
                    "torch.inference_mode(), or on tensors that do not require grad")
    if k.shape != v.shape:
        raise FlashCoreError(f"k and v must have the same shape, got k {tuple(k.shape)} and "
                             f"v {tuple(v.shape)}")
    if k.dtype != v.dtype or k.device != v.device:
        raise FlashCoreError(f"k and v must have the same dtype and device, got k {k.dtype} on "
                             f"{k.device} and v {v.dtype} on {v.device}")


_SIGNATURE = ("batch", "seqlen_q", "heads_q", "head_dim", "seqlen_k", "heads_kv", "dtype",
              "causal", "layout", "softmax_scale", "cuda")


def _check_same_on_every_rank(ring, q, k, causal, layout, softmax_scale):
    """One all_gather of a few numbers: every rank must pass the same shapes and options, or the
    ring's transfers would not match (a hang or garbage). On CUDA it costs a host sync."""
    mine = [*q.shape, k.shape[1], k.shape[2], _DTYPE_CODES.get(q.dtype, -1), float(causal),
            float(LAYOUTS.index(layout)), -1.0 if softmax_scale is None else softmax_scale,
            float(q.is_cuda)]
    device = q.device if q.is_cuda else torch.device("cpu")
    local = torch.tensor(mine, dtype=torch.float64, device=device)
    gathered = [torch.empty_like(local) for _ in range(ring.world)]
    dist.all_gather(gathered, local, group=ring.group)
    rows = [g.tolist() for g in gathered]
    for index, name in enumerate(_SIGNATURE):
        values = [row[index] for row in rows]
        if any(value != values[0] for value in values):
            shown = ", ".join(f"rank {r}: {_shown(name, value)}" for r, value in enumerate(values))
            raise FlashCoreError(
                f"ring_attention: every rank must pass the same {name} ({shown}); shapes of "
                "q and k on this rank: q " f"{tuple(q.shape)}, k {tuple(k.shape)}")


def _shown(name, value):
    if name == "dtype":
        return {code: str(dtype) for dtype, code in _DTYPE_CODES.items()}.get(int(value), "?")
    if name == "layout":
        return LAYOUTS[int(value)]
    if name in ("causal", "cuda"):
        return str(bool(value))
    if name == "softmax_scale":
        return "None" if value == -1.0 else repr(value)
    return str(int(value))


def _packed_kv(k, v):
    """k and v in one contiguous buffer [2, b, s, hkv, d]: one send and one receive per step,
    whatever the strides of the caller's tensors."""
    kv = torch.empty((2, *k.shape), dtype=k.dtype, device=k.device)
    kv[0].copy_(k)
    kv[1].copy_(v)
    return kv


def _ring_steps(q, kv, ring, causal, layout, softmax_scale, communicate=True):
    """The ring's attention calls: a list of (q_begin, q_end, out, lse) parts. communicate=False
    (timing only) keeps the rank's own K/V at every step: the same calls, no transfers."""
    seqlen_q, seqlen_k = q.shape[1], kv.shape[2]
    spare = torch.empty_like(kv) if communicate and ring.world > 1 else None
    parts = []
    for step in range(ring.world):
        works = ()
        if spare is not None and step + 1 < ring.world:
            # Queued before this step's attention, so it runs under it. `spare` was last read
            # by the previous step's attention, which is already queued ahead of the transfer.
            works = ring.exchange(kv, spare)
        source = plan.step_source(ring.rank, step, ring.world)
        try:
            for block in plan.step_blocks(layout, causal, ring.rank, source, ring.world,
                                          seqlen_q, seqlen_k):
                keys = slice(block.k_begin, block.k_end)
                out, lse = attention(q[:, block.q_begin:block.q_end], kv[0][:, keys],
                                     kv[1][:, keys], causal=block.causal,
                                     softmax_scale=softmax_scale, return_lse=True)
                parts.append((block.q_begin, block.q_end, out, lse))
        except BaseException:
            _wait(works)  # every rank fails alike; the buffers must outlive the transfer
            raise
        if works:
            _wait(works)  # the current stream (or the host, on gloo) waits for the transfer
            kv, spare = spare, kv
    return parts


def ring_attention(q, k, v, *, causal=False, softmax_scale=None, group=None, return_lse=False,
                   layout=None, check_ranks=True):
    """Attention over a sequence sharded across the ranks of `group` (default: the world).

    q: [batch, seqlen_q, heads_q, head_dim], k, v: [batch, seqlen_k, heads_kv, head_dim]: this
        rank's shard, BSHD (any strides, last dimension contiguous), the same shapes on every
        rank; fp16 / bf16 on CUDA (NCCL), fp16 / bf16 / fp32 on CPU (gloo). GQA / MQA as in
        flashcore.attention: K/V travel at heads_kv.
    causal: a bool. Causal needs seqlen_q == seqlen_k and `layout`.
    layout: how the sequence was sharded: "zigzag" (zigzag_shard: chunks r and 2W-1-r of 2W;
        balanced under a causal mask) or "contiguous" (contiguous_shard: chunk r of W). Required
        when causal; without a mask the result does not depend on it.
    softmax_scale: as flashcore.attention (default 1/sqrt(head_dim)).
    return_lse: also return lse [batch, heads_q, seqlen_q] float32 of this rank's queries.
    check_ranks: one all_gather of the shapes and options first, so a rank that passes another
        shape gets FlashCoreError instead of a hang (a host sync on CUDA; False skips it).

    Returns this rank's out [batch, seqlen_q, heads_q, head_dim] (contiguous, q's dtype), or
    (out, lse). Forward only.
    """
    causal = _arrays.flag("causal", causal)
    return_lse = _arrays.flag("return_lse", return_lse)
    check_ranks = _arrays.flag("check_ranks", check_ranks)
    softmax_scale = _arrays.softmax_scale_value(softmax_scale)
    _check_tensors(q, k, v)
    layout = plan.check_layout(layout, causal)
    if causal:
        plan.step_blocks(layout, True, 0, 0, 1, q.shape[1], k.shape[1])  # equal lengths
        plan.check_local_length(layout, q.shape[1], "q")
    ring = _Ring(group)
    if check_ranks and ring.world > 1:
        _check_same_on_every_rank(ring, q, k, causal, layout, softmax_scale)
    with torch.no_grad():
        if ring.world == 1 or q.shape[1] == 0 or k.shape[1] == 0 or q.numel() == 0:
            out, lse = attention(q, k, v, causal=causal, softmax_scale=softmax_scale,
                                 return_lse=True)
        else:
            parts = _ring_steps(q, _packed_kv(k, v), ring, causal, layout, softmax_scale)
            out, lse = _combine(parts, q, (q.shape[0], q.shape[2], q.shape[1]))
    return (out, lse) if return_lse else out
