"""bench/compare_grids.py (pure Python): the grids hold what their descriptions and BENCHMARKS.md
say, so a results table is never read against a different set of configs than it names."""
import os
import re
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "bench"))
import compare_grids  # noqa: E402


@pytest.mark.parametrize("name", sorted(compare_grids.GRIDS))
def test_grid_size_matches_its_description(name):
    description, build = compare_grids.GRIDS[name]
    configs = build()
    assert configs, name
    assert len(set(configs)) == len(configs), f"{name} repeats a config"
    total = re.search(r"\((\d+)\)$", description)  # "... (13)": every config
    part = re.search(r"\((\d+) configs\) \+", description)  # "grid (72 configs) + extras"
    if total:
        assert len(configs) == int(total.group(1)), description
    if part:
        extras = len(compare_grids.extra_configs())
        assert len(configs) == int(part.group(1)) + extras, description


def test_standard_grid_is_the_benchmarks_grid():
    configs = compare_grids.GRIDS["standard"][1]()
    grid = [c for c in configs if c not in compare_grids.extra_configs()]
    assert len(grid) == 72
    for c in grid:
        assert c.batch * c.seqlen_q == compare_grids.STANDARD_TOKENS
        assert c.heads_q * c.head_dim == compare_grids.STANDARD_HIDDEN
        assert c.heads_q == c.heads_kv and c.seqlen_q == c.seqlen_k


def test_decode_spec_and_hd96_grids():
    for c in compare_grids.GRIDS["decode"][1]():
        assert (c.seqlen_q, c.heads_q, c.heads_kv, c.head_dim) == (1, 32, 8, 128)
        assert c.flops() == 4.0 * c.batch * 32 * c.seqlen_k * 128
    for c in compare_grids.GRIDS["decode_mha"][1]():
        assert (c.seqlen_q, c.heads_q, c.heads_kv, c.head_dim) == (1, 32, 32, 128)
    for c in compare_grids.GRIDS["spec"][1]():
        assert (c.seqlen_k, c.heads_q, c.heads_kv, c.head_dim) == (4096, 32, 8, 128)
        assert c.seqlen_q in (4, 16)
    assert sum(c.causal for c in compare_grids.GRIDS["spec"][1]()) == 4
    for c in compare_grids.GRIDS["hd96"][1]():
        assert (c.head_dim, c.heads_q) == (96, 32)
        assert c.batch * c.seqlen_q == compare_grids.STANDARD_TOKENS
