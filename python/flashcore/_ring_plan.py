"""Where a rank's tokens sit in the sequence, and which (query rows, key rows) blocks it computes
at each step of ring attention. Pure Python without torch, so CI checks the plan against a
brute-force causal mask even where torch is not installed (flashcore.distributed runs it).

Layouts (W ranks, the sequence cut into equal chunks):
    contiguous  W chunks; rank r holds chunk r.
    zigzag      2W chunks; rank r holds chunks r and 2W-1-r, in that order. Under a causal mask
                every rank then has the same number of visible (query, key) pairs.

At step t rank r holds the keys and values of rank (r - t) mod W (they travel r -> r + 1).
"""

from typing import NamedTuple, Tuple

from ._flashcore import FlashCoreError, FlashCoreTypeError

LAYOUTS = ("contiguous", "zigzag")


class Block(NamedTuple):
    """One attention call of a step, in local row numbers: query rows [q_begin, q_end) against
    key rows [k_begin, k_end); `causal` for a block on the diagonal (equal lengths, so the
    library's bottom-right mask is the ordinary one)."""

    q_begin: int
    q_end: int
    k_begin: int
    k_end: int
    causal: bool

    def pairs(self):
        """(query, key) pairs this call computes, per batch entry and head."""
        rows, keys = self.q_end - self.q_begin, self.k_end - self.k_begin
        return rows * (rows + 1) // 2 if self.causal else rows * keys


def check_layout(layout, causal):
    """The layout name to use. A causal call must name how its inputs were sharded: with the
    wrong one the mask would silently hide the wrong keys. A non-causal result does not depend
    on where the tokens sit, so None means contiguous there."""
    if layout is None:
        if causal:
            raise FlashCoreError(
                "layout must be 'zigzag' or 'contiguous' when causal=True, got None: name how "
                "the sequence was sharded (zigzag_shard gives the balanced 'zigzag' layout)")
        return "contiguous"
    if not isinstance(layout, str):
        raise FlashCoreTypeError(
            f"layout must be a string ('zigzag' or 'contiguous'), got {layout!r} of type "
            f"{type(layout).__name__}")
    if layout not in LAYOUTS:
        raise FlashCoreError(f"layout must be 'zigzag' or 'contiguous', got {layout!r}")
    return layout


def chunk_count(layout, world):
    return 2 * world if layout == "zigzag" else world


def rank_chunks(layout, rank, world):
    """The global chunk numbers rank `rank` holds, in local order."""
    if layout == "zigzag":
        return (rank, 2 * world - 1 - rank)
    return (rank,)


def check_divisible(layout, seqlen, world, name="seqlen"):
    """The chunk length of a `seqlen`-token sequence over `world` ranks; FlashCoreError unless
    it cuts into equal chunks."""
    chunks = chunk_count(layout, world)
    if seqlen % chunks:
        raise FlashCoreError(
            f"{name}={seqlen} must be a multiple of {chunks} for the {layout} layout over "
            f"{world} ranks ({chunks} equal chunks)")
    return seqlen // chunks


def check_local_length(layout, seqlen_local, name="q"):
    """A shard holds 1 (contiguous) or 2 (zigzag) equal chunks."""
    if layout == "zigzag" and seqlen_local % 2:
        raise FlashCoreError(
            f"{name} has {seqlen_local} tokens on this rank: a zigzag shard holds two equal "
            "chunks, so its length must be even (shard with zigzag_shard)")


def local_positions(layout, rank, world, seqlen):
    """Global token positions (a list) of rank `rank`'s shard of a `seqlen`-token sequence."""
    chunk = check_divisible(layout, seqlen, world)
    return [c * chunk + i for c in rank_chunks(layout, rank, world) for i in range(chunk)]


def step_source(rank, step, world):
    """Whose keys and values rank `rank` holds at step `step`."""
    return (rank - step) % world


def step_blocks(layout, causal, rank, source, world, seqlen_q, seqlen_k) -> Tuple[Block, ...]:
    """The calls rank `rank` makes on the keys of rank `source`; empty when the mask hides them
    all. Each step is at most one call: under zigzag, keys from a lower rank are seen in full by
    both query chunks but only their first chunk is visible, keys from a higher rank are seen
    in full by the second query chunk only, and the rank's own keys are one causal call over
    its two chunks (the first chunk sees none of the second)."""
    if not causal:
        return (Block(0, seqlen_q, 0, seqlen_k, False),)
    if seqlen_q != seqlen_k:
        raise FlashCoreError(
            f"causal ring attention needs q and k of equal local length, got seqlen_q="
            f"{seqlen_q} and seqlen_k={seqlen_k}")
    whole = seqlen_q
    if layout == "contiguous":
        if source == rank:
            return (Block(0, whole, 0, whole, True),)
        return (Block(0, whole, 0, whole, False),) if source < rank else ()
    half = whole // 2
    if source == rank:
        return (Block(0, whole, 0, whole, True),)
    if source < rank:
        return (Block(0, whole, 0, half, False),)
    return (Block(half, whole, 0, whole, False),)


def rank_pairs(layout, causal, rank, world, seqlen_q, seqlen_k):
    """Visible (query, key) pairs rank `rank` computes over the whole ring, per batch and head."""
    return sum(block.pairs()
               for step in range(world)
               for block in step_blocks(layout, causal, rank, step_source(rank, step, world),
                                        world, seqlen_q, seqlen_k))
