"""Merging partial attention results in one pass: a Triton kernel for CUDA tensors.

Ring attention ends with the partial outputs of its steps, each over a range of query rows and a
disjoint set of keys, merged through their lse: out = sum_i exp(lse_i - lse) * out_i with
lse = log(sum_i exp(lse_i)). As PyTorch ops (distributed._combine) that is a float32
accumulator read and written once per part: at 128k tokens on 4 H100s, 2.4 ms of a 56.5 ms call
(docs/distributed.md). This kernel reads every part once and writes out and lse once, keeping
the float32 sums in registers.

A launch merges up to MAX_PARTS parts; more are merged in rounds, each round's float32 result
taking the first slot of the next. A row that no part covers, or whose lse is -inf in every
part, gets out 0 and lse -inf, as _combine gives it.

Triton comes with PyTorch's CUDA wheels; without it (or for CPU tensors) distributed._combine
keeps its PyTorch ops. TRITON_INTERPRET=1 runs the kernel on the CPU (the CI's check).
"""

import contextlib

import torch

try:
    import triton
    import triton.language as tl
except ImportError:  # PyTorch without Triton (CPU-only wheels): the PyTorch merge serves
    triton = None

MAX_PARTS = 8  # part arguments of one launch: a ring of W ranks yields up to 2W parts
ROWS_PER_PROGRAM = 16  # query rows of one (batch, head) per program, head_dim wide

if triton is not None:

    @triton.jit
    def _part_lse(lse_ptr, begin, end, rows, batch_head, stride_lse_bh):
        inside = (rows >= begin) & (rows < end)
        return tl.load(lse_ptr + batch_head * stride_lse_bh + (rows - begin), mask=inside,
                       other=float("-inf"))

    @triton.jit
    def _merge_kernel(out_ptr, lse_ptr, seqlen, heads, head_dim,
                      o0, l0, b0, e0, o1, l1, b1, e1, o2, l2, b2, e2, o3, l3, b3, e3,
                      o4, l4, b4, e4, o5, l5, b5, e5, o6, l6, b6, e6, o7, l7, b7, e7,
                      NUM_PARTS: tl.constexpr, BLOCK_ROWS: tl.constexpr,
                      BLOCK_D: tl.constexpr):
        # Part i: out [batch, e_i - b_i, heads, head_dim] and lse [batch, heads, e_i - b_i],
        # contiguous, covering query rows b_i .. e_i. Program: rows of one (batch, head).
        batch_head = tl.program_id(0).to(tl.int64)  # offsets in int64: tensors past 2^31
        batch = batch_head // heads
        head = batch_head % heads
        rows = tl.program_id(1).to(tl.int64) * BLOCK_ROWS + tl.arange(0, BLOCK_ROWS)
        columns = tl.arange(0, BLOCK_D)
        outs = (o0, o1, o2, o3, o4, o5, o6, o7)
        lses = (l0, l1, l2, l3, l4, l5, l6, l7)
        begins = (b0, b1, b2, b3, b4, b5, b6, b7)
        ends = (e0, e1, e2, e3, e4, e5, e6, e7)
        # lse = log(sum exp(lse_i)), shifted by the largest; -inf rows stay -inf, never NaN.
        largest = tl.full((BLOCK_ROWS,), float("-inf"), tl.float32)
        for i in tl.static_range(NUM_PARTS):
            part = _part_lse(lses[i], begins[i], ends[i], rows, batch_head, ends[i] - begins[i])
            largest = tl.maximum(largest, part)
        shift = tl.where(largest == float("-inf"), 0.0, largest)
        total = tl.zeros((BLOCK_ROWS,), tl.float32)
        for i in tl.static_range(NUM_PARTS):
            part = _part_lse(lses[i], begins[i], ends[i], rows, batch_head, ends[i] - begins[i])
            total += tl.exp(part - shift)
        lse = shift + tl.log(total)
        safe = tl.where(lse == float("-inf"), 0.0, lse)
        acc = tl.zeros((BLOCK_ROWS, BLOCK_D), tl.float32)
        for i in tl.static_range(NUM_PARTS):
            begin, end = begins[i], ends[i]
            inside = (rows >= begin) & (rows < end)
            part = _part_lse(lses[i], begin, end, rows, batch_head, end - begin)
            weight = tl.exp(part - safe)  # 0 where the part saw nothing
            offsets = ((batch * (end - begin) + (rows - begin)[:, None]) * heads + head) * \
                head_dim + columns[None, :]
            values = tl.load(outs[i] + offsets,
                             mask=inside[:, None] & (columns[None, :] < head_dim), other=0.0)
            acc += weight[:, None] * values.to(tl.float32)
        inside = rows < seqlen
        offsets = ((batch * seqlen + rows[:, None]) * heads + head) * head_dim + columns[None, :]
        tl.store(out_ptr + offsets, acc.to(out_ptr.dtype.element_ty),
                 mask=inside[:, None] & (columns[None, :] < head_dim))
        tl.store(lse_ptr + batch_head * seqlen + rows, lse, mask=inside)


def available(parts, like):
    """Whether the kernel can merge these parts: Triton imports, every part is on like's device,
    every out contiguous [batch, rows, heads, head_dim] of like's batch, heads and head_dim, and
    every lse contiguous float32 [batch, heads, rows]. (_combine asks it for CUDA tensors only;
    TRITON_INTERPRET=1 runs the kernel on CPU ones.)"""
    if triton is None:
        return False
    batch, _, heads, head_dim = like.shape
    for begin, end, out, lse in parts:
        if out.device != like.device or lse.device != like.device:
            return False
        if tuple(out.shape) != (batch, end - begin, heads, head_dim) or not out.is_contiguous():
            return False
        if tuple(lse.shape) != (batch, heads, end - begin) or not lse.is_contiguous():
            return False
        if lse.dtype != torch.float32:
            return False
    return True


def merge(parts, like, lse_shape):
    """parts: (q_begin, q_end, out, lse) as distributed._combine takes them (available() holds);
    returns (out in like's dtype, lse float32 [batch, heads, seqlen])."""
    batch, seqlen, heads, head_dim = like.shape
    block_d = triton.next_power_of_2(head_dim)
    grid = (batch * heads, triton.cdiv(seqlen, ROWS_PER_PROGRAM))
    pending = list(parts)
    while True:
        round_parts, pending = pending[:MAX_PARTS], pending[MAX_PARTS:]
        last = not pending
        out = torch.empty(like.shape, dtype=like.dtype if last else torch.float32,
                          device=like.device)
        lse = torch.empty(lse_shape, dtype=torch.float32, device=like.device)
        arguments = []
        for begin, end, part_out, part_lse in round_parts:
            arguments += [part_out, part_lse, begin, end]
        unused = (round_parts[0][2], round_parts[0][3], 0, 0)  # never read: NUM_PARTS masks it
        arguments += list(unused) * (MAX_PARTS - len(round_parts))
        # Triton launches on the current device: make it the tensors'.
        on_device = torch.cuda.device(like.device) if like.is_cuda else contextlib.nullcontext()
        with on_device:
            _merge_kernel[grid](out, lse, seqlen, heads, head_dim, *arguments,
                                NUM_PARTS=len(round_parts), BLOCK_ROWS=ROWS_PER_PROGRAM,
                                BLOCK_D=block_d)
        if last:
            return out, lse
        pending.insert(0, (0, seqlen, out, lse))
