"""Host cost per attention call on the GPU: FlashCore's entry points vs torch SDPA pinned to its
FlashAttention-2 and cuDNN backends (and FA3's flash_attn_with_kvcache when the fa3-fwd wheel is
importable), on a Llama decode shape and a prefill shape; the decode shape also through
FlashCore's kv-cache entry, contiguous and paged (issue 25's eager decode step). Under 30 s on an
H100/H200.

    PYTHONPATH=<build>/python python dev/host_overhead/bench_host_overhead.py [--calls 2000]
        [--rounds 5] [--profile]

Per row: host us/call (the loop of N calls until it returns, nothing synchronised inside: what
a host-bound decode step pays) and wall us/call (until the GPU has finished too). When host >=
wall the GPU waits for the host. A shape's rows are timed in --rounds interleaved rounds of
calls / rounds calls each, the order rotated and reversed from round to round, so a slow spell
of the host lands on every row alike; the figures are the medians over rounds, with the
spread (slowest round's host time over the fastest's) beside them. --profile adds
torch.profiler's CPU-side table (CUDA runtime calls included) for 20 calls of each FlashCore row.
"""
import argparse
import statistics
import time

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

import flashcore
import flashcore.torch as fct
from flashcore import _flashcore

PAGE_SIZE = 16  # vLLM's block size, for the paged decode row

WARMUP = 200  # allocator, lazy module loading, cudaFuncSetAttribute: all paid before timing
REWARM = 20  # calls before each later round's timing: the caches the other rows left cold
# (name, batch, seqlen_q, seqlen_k, heads_q, heads_kv, head_dim): Llama-3-8B-like attention.
SHAPES = [("decode", 1, 1, 4096, 32, 8, 128), ("prefill", 1, 1024, 1024, 32, 8, 128)]


def warm(fn, calls):
    for _ in range(calls):
        fn()
    torch.cuda.synchronize()


def timed(fn, calls, warmup):
    warm(fn, warmup)
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    host = time.perf_counter() - start
    torch.cuda.synchronize()
    wall = time.perf_counter() - start
    return host / calls * 1e6, wall / calls * 1e6


def raw_entry(q, k, v, backend):
    """The nanobind entry with prebuilt tuples and workspace: nanobind + library only (per
    backend: sm80 builds no tensor maps and zeroes no workspace, so the two rows bracket the
    sm90 launcher's own host cost)."""
    out = torch.empty_like(q)
    raws = [fct._raw(n, t) for n, t in (("q", q), ("k", k), ("v", v), ("out", out))]
    workspace = torch.empty(_flashcore.attention_workspace_bytes_raw(raws[0]), dtype=torch.uint8,
                            device=q.device)
    stream = torch.cuda.current_stream().cuda_stream
    return lambda: _flashcore.attention_forward_raw(*raws, None, None, True, backend, stream,
                                                    workspace.data_ptr(), workspace.numel())


def rows_for(shape):
    _, b, sq, sk, hq, hkv, d = shape
    make = lambda s, h: torch.randn(b, s, h, d, device="cuda", dtype=torch.bfloat16)  # noqa: E731
    q, k, v = make(sq, hq), make(sk, hkv), make(sk, hkv)
    qh, kh, vh = (t.transpose(1, 2).contiguous() for t in (q, k, v))
    # SDPA's is_causal is top-left aligned: decode (one query row) must pass False to see the
    # whole cache, which is what transformers does; prefill (s_q == s_k) is the same either way.
    sdpa_causal = sq == sk
    try:
        with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
            F.scaled_dot_product_attention(qh, kh, vh, is_causal=sdpa_causal, enable_gqa=True)
        sdpa_k, sdpa_v, gqa, sdpa_name = kh, vh, True, "sdpa flash (enable_gqa)"
    except RuntimeError:  # this torch's flash backend takes no GQA: repeat K/V outside the timing
        sdpa_k, sdpa_v = (t.repeat_interleave(hq // hkv, dim=1) for t in (kh, vh))
        gqa, sdpa_name = False, "sdpa flash (K/V pre-repeated)"

    def sdpa():
        with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
            return F.scaled_dot_product_attention(qh, sdpa_k, sdpa_v, is_causal=sdpa_causal,
                                                  enable_gqa=gqa)

    op = torch.ops.flashcore.attention_forward
    rows = [
        (sdpa_name, sdpa),
        ("flashcore.torch.attention bshd", lambda: fct.attention(q, k, v, causal=True)),
        ("flashcore.torch.attention bhsd",
         lambda: fct.attention(qh, kh, vh, causal=True, layout="bhsd")),
        ("torch.ops.flashcore (dispatcher) bhsd",
         lambda: op(qh, kh, vh, True, None, False, "bhsd", "auto")),
    ]
    def sdpa_cudnn():
        with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
            return F.scaled_dot_product_attention(qh, kh, vh, is_causal=sdpa_causal,
                                                  enable_gqa=True)

    try:
        sdpa_cudnn()
        rows.insert(1, ("sdpa cudnn (enable_gqa)", sdpa_cudnn))
    except RuntimeError as error:
        print(f"  sdpa cudnn: not run ({str(error).splitlines()[0][:80]})")
    if sq == 1:
        rows += kvcache_rows(q, k, v)
    for backend in ("sm90", "sm80"):
        if _flashcore.backend_available(backend, q.get_device()):
            rows.append((f"raw nanobind entry, {backend} (library only)",
                         raw_entry(q, k, v, backend)))
    if hasattr(fct, "attention_bhsd_to_bshd"):
        rows.insert(3, ("transformers entry bhsd->bshd",
                        lambda: fct.attention_bhsd_to_bshd(qh, kh, vh, True, None)))
    return rows


def kvcache_rows(q, k, v):
    """A decode step through the kv-cache entries: FlashCore's contiguous and paged caches (the
    keys already in the cache, nothing appended), and FA3's flash_attn_with_kvcache."""
    b, sk, hkv, d = k.shape
    seqlens = torch.full((b,), sk, dtype=torch.int32, device=q.device)
    pages = -(-sk // PAGE_SIZE)
    order = torch.randperm(b * pages, device=q.device)  # pages as a free list leaves them
    table = order.to(torch.int32).reshape(b, pages)
    k_pages = torch.empty(b * pages, PAGE_SIZE, hkv, d, dtype=k.dtype, device=q.device)
    v_pages = torch.empty_like(k_pages)
    padded = pages * PAGE_SIZE
    for dense, paged in ((k, k_pages), (v, v_pages)):
        flat = torch.zeros(b, padded, hkv, d, dtype=k.dtype, device=q.device)
        flat[:, :sk] = dense
        paged[table.reshape(-1).long()] = flat.reshape(b * pages, PAGE_SIZE, hkv, d)
    rows = [
        ("flashcore.attention_with_kvcache contiguous",
         lambda: flashcore.attention_with_kvcache(q, k, v, seqlens, causal=True)),
        (f"flashcore.attention_with_kvcache paged (page {PAGE_SIZE})",
         lambda: flashcore.attention_with_kvcache(q, k_pages, v_pages, seqlens, page_table=table,
                                                  causal=True)),
    ]
    try:
        import fa3_fwd_interface as fa3
    except Exception as error:  # not installed, or a build that will not load
        print(f"  fa3: not run ({str(error).splitlines()[0][:80] if str(error) else error!r})")
        return rows
    rows.append(("fa3 flash_attn_with_kvcache contiguous",
                 lambda: fa3.flash_attn_with_kvcache(q, k, v, cache_seqlens=seqlens, causal=True)))
    rows.append(("fa3 flash_attn_func dense", lambda: fa3.flash_attn_func(q, k, v, causal=True)))
    return rows


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--profile", action="store_true")
    args = parser.parse_args()
    if args.calls < 1 or args.rounds < 1:
        parser.error(f"--calls and --rounds must be at least 1, got {args.calls} and "
                     f"{args.rounds}")
    print(f"{torch.cuda.get_device_name()}  torch {torch.__version__}  calls={args.calls}  "
          f"rounds={args.rounds}")
    with torch.inference_mode():
        for shape in SHAPES:
            print(f"\n{shape[0]}: b{shape[1]} sq{shape[2]} sk{shape[3]} hq{shape[4]} "
                  f"hkv{shape[5]} d{shape[6]} bf16 causal")
            rows = rows_for(shape)
            for name, fn in rows:
                warm(fn, WARMUP)  # before any row is timed
            samples = {name: [] for name, _ in rows}
            calls = max(1, args.calls // args.rounds)
            for round_index in range(args.rounds):
                shift = round_index % len(rows)
                order = rows[shift:] + rows[:shift]
                for name, fn in order[::-1] if round_index % 2 else order:
                    samples[name].append(timed(fn, calls, REWARM))
            print(f"{'host us/call':>13} {'wall us/call':>13} {'spread':>7}  entry")
            for name, fn in rows:
                hosts = [host for host, _ in samples[name]]
                host = statistics.median(hosts)
                wall = statistics.median(wall for _, wall in samples[name])
                print(f"{host:13.1f} {wall:13.1f} {max(hosts) / min(hosts):7.2f}  {name}")
                if args.profile and "flashcore" in name and shape[0] == "decode":
                    with torch.profiler.profile(
                            activities=[torch.profiler.ProfilerActivity.CPU,
                                        torch.profiler.ProfilerActivity.CUDA]) as prof:
                        for _ in range(20):
                            fn()
                        torch.cuda.synchronize()
                    print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=15))


if __name__ == "__main__":
    main()
