"""The ring attention plan (flashcore._ring_plan, torch-free): every rank's blocks over all steps
cover exactly the (query, key) pairs the mask shows, each once, and zigzag balances the work."""

import itertools

import pytest

from flashcore import FlashCoreError, FlashCoreTypeError
from flashcore import _ring_plan as plan

WORLDS = [1, 2, 3, 4, 5]


def _computed_pairs(layout, causal, rank, world, seqlen):
    """(query position, key position) pairs rank `rank` computes, as a list (duplicates kept)."""
    mine = plan.local_positions(layout, rank, world, seqlen)
    pairs = []
    for step in range(world):
        source = plan.step_source(rank, step, world)
        theirs = plan.local_positions(layout, source, world, seqlen)
        for block in plan.step_blocks(layout, causal, rank, source, world, len(mine),
                                      len(theirs)):
            for i in range(block.q_begin, block.q_end):
                for j in range(block.k_begin, block.k_end):
                    if not block.causal or j - block.k_begin <= i - block.q_begin:
                        pairs.append((mine[i], theirs[j]))
    return pairs


@pytest.mark.parametrize("world", WORLDS)
@pytest.mark.parametrize("layout", plan.LAYOUTS)
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_blocks_cover_the_mask_exactly_once(world, layout, causal):
    seqlen = plan.chunk_count(layout, world) * 3
    everything = []
    for rank in range(world):
        pairs = _computed_pairs(layout, causal, rank, world, seqlen)
        assert len(pairs) == len(set(pairs)), f"rank {rank} computes a pair twice"
        expected = {(i, j) for i in plan.local_positions(layout, rank, world, seqlen)
                    for j in range(seqlen) if not causal or j <= i}
        assert set(pairs) == expected, (
            f"rank {rank}: missing {sorted(expected - set(pairs))[:5]}, "
            f"extra {sorted(set(pairs) - expected)[:5]}")
        everything += pairs
    assert len(everything) == (seqlen * (seqlen + 1) // 2 if causal else seqlen * seqlen)


@pytest.mark.parametrize("world", WORLDS)
def test_zigzag_gives_every_rank_the_same_causal_work(world):
    chunk = 4
    seqlen_local = 2 * chunk
    work = [plan.rank_pairs("zigzag", True, r, world, seqlen_local, seqlen_local)
            for r in range(world)]
    assert len(set(work)) == 1, work
    # and each step is one call of about the same size (the diagonal a little more)
    for rank in range(world):
        for step in range(world):
            blocks = plan.step_blocks("zigzag", True, rank, plan.step_source(rank, step, world),
                                      world, seqlen_local, seqlen_local)
            assert len(blocks) == 1


def test_contiguous_causal_skips_the_keys_of_later_ranks():
    assert plan.step_blocks("contiguous", True, 0, 2, 3, 8, 8) == ()
    assert plan.step_blocks("contiguous", True, 2, 0, 3, 8, 8) == (plan.Block(0, 8, 0, 8, False),)


def test_local_positions_of_zigzag():
    assert plan.local_positions("zigzag", 0, 2, 8) == [0, 1, 6, 7]
    assert plan.local_positions("zigzag", 1, 2, 8) == [2, 3, 4, 5]
    assert plan.local_positions("contiguous", 1, 2, 8) == [4, 5, 6, 7]
    positions = list(itertools.chain.from_iterable(
        plan.local_positions("zigzag", r, 3, 12) for r in range(3)))
    assert sorted(positions) == list(range(12))


def test_layout_errors_name_the_value():
    with pytest.raises(FlashCoreError, match="layout must be 'zigzag' or 'contiguous' when "
                       "causal=True, got None"):
        plan.check_layout(None, True)
    assert plan.check_layout(None, False) == "contiguous"
    with pytest.raises(FlashCoreError, match="got 'zig'"):
        plan.check_layout("zig", True)
    with pytest.raises(FlashCoreTypeError, match="got 2 of type int"):
        plan.check_layout(2, False)


def test_lengths_that_do_not_cut_into_chunks_are_refused():
    with pytest.raises(FlashCoreError, match=r"seqlen=10 must be a multiple of 4 for the zigzag "
                       r"layout over 2 ranks"):
        plan.local_positions("zigzag", 0, 2, 10)
    with pytest.raises(FlashCoreError, match="q has 5 tokens on this rank"):
        plan.check_local_length("zigzag", 5)
    plan.check_local_length("contiguous", 5)
    with pytest.raises(FlashCoreError, match="seqlen_q=4 and seqlen_k=6"):
        plan.step_blocks("zigzag", True, 0, 0, 2, 4, 6)
