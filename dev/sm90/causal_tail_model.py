#!/usr/bin/env python3
"""How long a persistent causal launch runs against its work, from the tile order alone.

Mirrors the claims of the causal rows (src/cuda/sm90/scheduler.cuh): the (head, batch) pairs cut
into L2 sections of `sm90_heads_per_section` pairs, sections one after another, inside a section
the m-block slowest and backwards (longest first) with the pairs interleaved; CTA i takes tile i
first, then the next unclaimed one whenever it finishes. A tile costs its K/V blocks (the keys
its rows see, bottom-right causal, so a chunked prefill's rows see the keys before the chunk too,
in BLOCK_N blocks) plus a fixed cost of `overhead` blocks. The makespan over the work's even
share per SM is the launch's efficiency: what the order loses to a tail, before any L2 effect
(larger sections keep more heads' K/V in flight at once).

    python3 dev/sm90/causal_tail_model.py                   # the shapes of runs 193-194, 335
    python3 dev/sm90/causal_tail_model.py --min-tiles 128   # a section of >= 128 tiles

Run 193-194 measured the d256 causal row at 16 MiB against 8 (MHA grid): 1k 0.97-1.01x,
2k 0.99-1.03x, 4k 1.07-1.09x, 8k 1.09x, 16k 1.00x, the Gemma-like GQA 8k 0.97-0.99x. Run 335
measured the fp8 d256 causal row (one-byte K/V: twice the heads a section) at 16 MiB against 8:
the chunks of 2k of 8k keys / 4k of 16k / 4k of 32k 1.035-1.046 / 1.015-1.029 / 0.998-1.009x,
the square grid configs within their spread, and at 32 MiB the 512 config 0.92x (an L2 effect,
which this model leaves out).
"""
import argparse
import collections
import heapq

SMS = 132  # an H100's (and H200's)
MIB = 1 << 20


def heads_per_section(seqlen_k, head_dim, element_bytes, heads_q, heads_kv, pairs, section_mib,
                      min_tiles, m_blocks):
    """sm90_heads_per_section: query heads whose K/V fit the section (a GQA group together),
    with optionally at least `min_tiles` tiles a section."""
    kv_bytes = seqlen_k * head_dim * 2 * element_bytes  # K and V
    kv_heads = max(section_mib * MIB // kv_bytes, 1)
    heads = kv_heads * (heads_q // heads_kv)
    if min_tiles:
        heads = max(heads, -(-min_tiles // m_blocks))
    return min(heads, pairs)


def tile_order(pairs_total, m_blocks, per_section):
    """(pair, m_block) in claim order."""
    order = []
    for first in range(0, pairs_total, per_section):
        pairs = min(per_section, pairs_total - first)
        for rest in range(pairs * m_blocks):
            order.append((first + rest % pairs, m_blocks - 1 - rest // pairs))
    return order


def tile_cost(m_block, seqlen_q, seqlen_k, block_m, block_n, overhead):
    rows_end = min((m_block + 1) * block_m, seqlen_q)
    return -(-(rows_end + seqlen_k - seqlen_q) // block_n) + overhead


# A launch: seqlen_k None is seqlen_q (square); element_bytes 2 for the 16-bit rows, 1 for fp8.
Shape = collections.namedtuple(
    "Shape", "name batch seqlen_q heads_q heads_kv head_dim block_m block_n overhead seqlen_k "
    "element_bytes", defaults=(None, 2))


def efficiency(shape, section_mib, min_tiles=0, sms=SMS):
    seqlen_k = shape.seqlen_k or shape.seqlen_q
    m_blocks = -(-shape.seqlen_q // shape.block_m)
    pairs = shape.batch * shape.heads_q
    per_section = heads_per_section(seqlen_k, shape.head_dim, shape.element_bytes,
                                    shape.heads_q, shape.heads_kv, pairs, section_mib,
                                    min_tiles, m_blocks)
    order = tile_order(pairs, m_blocks, per_section)
    costs = [tile_cost(m, shape.seqlen_q, seqlen_k, shape.block_m, shape.block_n,
                       shape.overhead) for _, m in order]
    free = [(0.0, cta) for cta in range(min(sms, len(costs)))]
    heapq.heapify(free)
    end = 0.0
    for cost in costs:  # the next claim goes to the CTA that frees first
        start, cta = heapq.heappop(free)
        end = max(end, start + cost)
        heapq.heappush(free, (start + cost, cta))
    return sum(costs) / sms / end, per_section


# BLOCK_M / BLOCK_N of the row, overhead in KV blocks a tile.
SHAPES = [
    Shape("d256 1k grid", 16, 1024, 8, 8, 256, 128, 80, 2.0),
    Shape("d256 2k grid", 8, 2048, 8, 8, 256, 128, 80, 2.0),
    Shape("d256 4k grid", 4, 4096, 8, 8, 256, 128, 80, 2.0),
    Shape("d256 8k grid", 2, 8192, 8, 8, 256, 128, 80, 2.0),
    Shape("d256 16k grid", 1, 16384, 8, 8, 256, 128, 80, 2.0),
    Shape("gemma-like 8k", 1, 8192, 16, 8, 256, 128, 80, 2.0),
    Shape("d128 2k grid", 8, 2048, 16, 16, 128, 128, 128, 1.2),
    Shape("d128 16k grid", 1, 16384, 16, 16, 128, 128, 128, 1.2),
    Shape("llama3-8b 4k", 1, 4096, 32, 8, 128, 128, 128, 1.2),
    Shape("llama3-8b 2k x 8", 8, 2048, 32, 8, 128, 128, 128, 1.2),
    Shape("qwen-like 3000 x 2", 2, 3000, 28, 4, 128, 128, 128, 1.2),
    # The fp8 d256 causal row (128 x 128 tiles) on chunked prefills and square launches.
    Shape("fp8 d256 chunk 2k of 8k", 1, 2048, 16, 8, 256, 128, 128, 2.0, 8192, 1),
    Shape("fp8 d256 chunk 4k of 16k", 1, 4096, 16, 8, 256, 128, 128, 2.0, 16384, 1),
    Shape("fp8 d256 chunk 4k of 32k", 1, 4096, 16, 8, 256, 128, 128, 2.0, 32768, 1),
    Shape("fp8 d256 1k grid", 16, 1024, 8, 8, 256, 128, 128, 2.0, None, 1),
    Shape("fp8 d256 8k grid", 2, 8192, 8, 8, 256, 128, 128, 2.0, None, 1),
    Shape("fp8 gemma-like 8k", 1, 8192, 16, 8, 256, 128, 128, 2.0, None, 1),
]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mib", type=int, nargs="+", default=[8, 16, 32],
                        help="L2 section sizes to compare (MiB)")
    parser.add_argument("--min-tiles", type=int, default=0,
                        help="at least this many tiles a section (0: the MiB alone)")
    args = parser.parse_args()
    header = "".join(f" | {mib} MiB eff (heads)" for mib in args.mib)
    print(f"| shape{header} |")
    print("|---" * (len(args.mib) + 1) + "|")
    for shape in SHAPES:
        cells = []
        for mib in args.mib:
            eff, heads = efficiency(shape, mib, args.min_tiles)
            cells.append(f"{eff:.3f} ({heads})")
        print(f"| {shape.name} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
