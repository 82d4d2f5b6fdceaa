#!/usr/bin/env python3
"""The FP8 kernel's V transpose (src/cuda/sm90/v_transpose.cuh) on the host: its address
arithmetic, step by step as sm90_transpose_v_stage writes it, applied to a V stage whose every
byte names its (key, head_dim byte), checked against what the consumers' P V needs:

  V^T[d][p] = V[32 (p / 32) + fp8_a_position_key(p % 32)][d]   for every head_dim row d and
  position p < BLOCK_N, in 128-byte-swizzled column blocks (V: 128 head_dim bytes x BLOCK_N rows;
  V^T: 128 positions x head_dim rows), every byte written once.

Also checks fp8_a_position_key (cuda/common/accumulator_layout.h) against the e4m3 A-fragment
layout (CUTLASS's ALayout_64x32: register v1 + 2 v2 of lane l holds row l / 4 + 8 v1, k
4 (l % 4) + v0 + 16 v2 in byte v0) and the fp32 accumulator's (lane l holds columns 8 i + 2 (l % 4)
+ {0, 1}), and that a mutant (the V swizzle without the key's row) fails.
Keep it in step with the kernel. Run: python3 dev/sm90/v_transpose_model.py   (no GPU needed)
"""

import sys

ROW = 128  # bytes of a swizzled row
THREADS = 96  # kSm90TransposerThreads


def fp8_a_position_key(position):
    half, lane_in_quad, byte = position // 16, (position % 16) // 4, position % 4
    chunk = 2 * half + byte // 2
    return 8 * chunk + 2 * lane_in_quad + byte % 2


def swizzled(rows, row, col):
    """Byte offset of (row, byte col) in column blocks of 128 bytes x `rows` rows."""
    return (col // ROW) * rows * ROW + row * ROW + ((((col % ROW) // 16) ^ (row % 8)) * 16) + col % 16


def transpose(head_dim, block_n, v, mutant=False):
    """sm90_transpose_v_stage: returns V^T as a dict address -> byte."""
    vt = {}
    key_steps, dim_chunks = block_n // 32, head_dim // 16
    for thread in range(THREADS):
        lane, warp = thread % 32, thread // 32
        lane_keys, lane_dims = lane % 8, lane // 8
        first_key = fp8_a_position_key(4 * lane_keys)
        v_row = first_key * ROW + 4 * lane_dims
        key_swizzle = 0 if mutant else first_key % 8
        vt_row = 4 * lane_dims * ROW + (4 * lane_keys) % 16
        vt_swizzle = ((4 * lane_dims) % 8) ^ (lane_keys // 4)
        for block in range(warp, key_steps * dim_chunks, THREADS // 32):
            key_step, dim_chunk = block % key_steps, block // key_steps
            v_base = (dim_chunk // 8) * block_n * ROW + key_step * 32 * ROW + v_row
            chunk = (dim_chunk % 8) ^ key_swizzle
            words = []
            for e in range(4):
                address = v_base + (8 * (e // 2) + e % 2) * ROW + ((chunk ^ (e % 2)) << 4)
                words.append([v[address + b] for b in range(4)])
            vt_base = (key_step // 4) * head_dim * ROW + dim_chunk * 16 * ROW + vt_row
            vt_chunk = (2 * (key_step % 4)) ^ vt_swizzle
            for r in range(4):
                address = vt_base + r * ROW + ((vt_chunk ^ r) << 4)
                for b in range(4):  # byte b of row r = byte r of word b (the PRMTs)
                    if address + b in vt:
                        raise AssertionError(f"d{head_dim} n{block_n}: byte written twice")
                    vt[address + b] = words[b][r]
    return vt


def check(head_dim, block_n, mutant=False):
    v = {swizzled(block_n, key, dim): (key, dim)
         for key in range(block_n) for dim in range(head_dim)}
    vt = transpose(head_dim, block_n, v, mutant)
    for dim in range(head_dim):
        for p in range(block_n):
            want = (32 * (p // 32) + fp8_a_position_key(p % 32), dim)
            got = vt.get(swizzled(head_dim, dim, p))
            if got != want:
                raise AssertionError(f"d{head_dim} n{block_n}: V^T[{dim}][{p}] = {got}, "
                                     f"expected {want}")
    if len(vt) != head_dim * block_n:
        raise AssertionError(f"d{head_dim} n{block_n}: {len(vt)} bytes written")


def check_fragment_layouts():
    assert sorted(fp8_a_position_key(p) for p in range(32)) == list(range(32))
    for lane in range(32):
        for v1 in range(2):  # row half
            for v2 in range(2):  # k half
                for v0 in range(4):  # byte
                    k = 4 * (lane % 4) + v0 + 16 * v2  # ALayout_64x32
                    column = fp8_a_position_key(k)
                    # The accumulator element the conversion packs there (wgmma.cuh):
                    # acc[8 v2 + 2 v1 + 4 (v0 / 2) + v0 % 2], chunk = index / 4, element index % 2.
                    index = 8 * v2 + 2 * v1 + 4 * (v0 // 2) + v0 % 2
                    acc_column = 8 * (index // 4) + 2 * (lane % 4) + index % 2
                    assert (index % 4) // 2 == v1, "the register's row half"
                    assert acc_column == column, (lane, v1, v2, v0)


def main():
    check_fragment_layouts()
    print("ok fp8_a_position_key: a permutation; A fragment and accumulator agree")
    # The fp8 rows (d128 n128, d256 n96) and the shapes a tuning run may try.
    for head_dim, block_n in ((128, 128), (256, 96), (128, 96), (128, 160), (128, 192),
                              (128, 224), (256, 128), (256, 64)):
        check(head_dim, block_n)
        print(f"ok V^T of d{head_dim} n{block_n}")
    try:
        check(128, 128, mutant=True)
    except AssertionError:
        print("ok mutant (V swizzle without the key's row) caught")
    else:
        print("FAIL the mutant passed")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
