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
+ {0, 1}), that no ldmatrix / stmatrix matrix has two rows on one 16-byte bank group, and that a
mutant (stmatrix rows without the lanes' alternation of 2p and 2p + 1) fails.
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


def byte_perm(a, b, selector):
    """PRMT: byte i of the result is byte (selector >> 4i) & 7 of the 8 bytes a, b."""
    both = a + b
    return [both[(selector >> (4 * i)) & 7] for i in range(4)]


def transpose(head_dim, block_n, v, mutant=False):
    """sm90_transpose_v_stage: returns V^T as a dict address -> byte. ldmatrix.trans and stmatrix
    are replayed from their PTX definitions: lanes 8m..8m+7 address the 8 rows of matrix m; with
    .trans lane l gets elements (rows 2(l % 4), 2(l % 4) + 1; column l / 4) of 16-bit elements,
    stmatrix stores lane l's register m at row l / 4, elements 2(l % 4), 2(l % 4) + 1."""
    vt = {}
    key_steps, dim_chunks = block_n // 32, head_dim // 16
    units = key_steps * dim_chunks
    even, odd_bytes = 0x6420, 0x7531
    for warp in range(THREADS // 32):
        for unit in range(warp, units, THREADS // 32):
            key_step, chunk = unit % key_steps, unit // key_steps
            v_addresses, vt_addresses, selectors = [], [], []
            for lane in range(32):
                # The lane bases hold the swizzle bits (4-6); the unit offsets leave them zero
                # and the unit's chunk goes in by xor (sm90_transpose_warp_units).
                row, matrix = lane % 8, lane // 8
                v_lane = (8 * matrix + row) * ROW + (row << 4)
                v_unit = (chunk // 8) * block_n * ROW + key_step * 32 * ROW
                assert v_unit & 0x70 == 0
                v_addresses.append((v_lane + v_unit) ^ ((chunk % 8) << 4))
                odd = (matrix % 2) ^ (row >= 4)
                vt_row = 2 * row + (0 if mutant else odd)
                vt_lane = vt_row * ROW + (((matrix // 2) ^ (vt_row % 8)) << 4)
                vt_unit = (key_step // 4) * head_dim * ROW + chunk * 16 * ROW
                assert vt_unit & 0x70 == 0
                vt_addresses.append((vt_lane + vt_unit) ^ ((2 * (key_step % 4)) << 4))
                selectors.append((even, odd_bytes) if lane // 4 < 4 else (odd_bytes, even))
            for lane in range(32):
                t, p = lane % 4, lane // 4
                words = []
                for m in range(4):  # ldmatrix.trans: rows 2t, 2t + 1 of column p, 2 bytes each
                    rows = [v_addresses[8 * m + 2 * t], v_addresses[8 * m + 2 * t + 1]]
                    words.append([v[rows[0] + 2 * p], v[rows[0] + 2 * p + 1],
                                  v[rows[1] + 2 * p], v[rows[1] + 2 * p + 1]])
                first, second = selectors[lane]
                stored = [byte_perm(words[0], words[1], first),
                          byte_perm(words[0], words[1], second),
                          byte_perm(words[2], words[3], first),
                          byte_perm(words[2], words[3], second)]
                for m in range(4):  # stmatrix: row p of matrix m, bytes 4t..4t+3
                    address = vt_addresses[8 * m + p] + 4 * t
                    for b in range(4):
                        if address + b in vt:
                            raise AssertionError(f"d{head_dim} n{block_n}: byte written twice")
                        vt[address + b] = stored[m][b]
    return vt


def bank_conflicts(head_dim, block_n):
    """The 16-byte chunks of one ldmatrix / stmatrix matrix (8 rows) must fall on 8 different
    positions of 128 bytes (one wavefront per matrix)."""
    key_steps, dim_chunks = block_n // 32, head_dim // 16
    for unit in range(key_steps * dim_chunks):
        key_step, chunk = unit % key_steps, unit // key_steps
        for matrix in range(4):
            v_banks, vt_banks = set(), set()
            for row in range(8):
                v_banks.add(((chunk % 8) ^ row))
                vt_row = 2 * row + ((matrix % 2) ^ (row >= 4))
                vt_banks.add((2 * (key_step % 4) + matrix // 2) ^ (vt_row % 8))
            if len(v_banks) != 8 or len(vt_banks) != 8:
                raise AssertionError(f"d{head_dim} n{block_n}: bank conflict in unit {unit}")


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
    # The fp8 rows (d128 n128 / n192, d256 n128; d64 n128 / n160 and d96, whose V^T holds the
    # computed rows only) and the shapes a tuning run may try.
    for head_dim, block_n in ((128, 128), (256, 96), (128, 96), (128, 160), (128, 192),
                              (128, 224), (256, 128), (256, 64), (64, 128), (64, 160), (96, 128)):
        check(head_dim, block_n)
        bank_conflicts(head_dim, block_n)
        print(f"ok V^T of d{head_dim} n{block_n}, no bank conflicts")
    try:
        check(128, 128, mutant=True)
    except AssertionError:
        print("ok mutant (stmatrix rows without the alternation) caught")
    else:
        print("FAIL the mutant passed")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
