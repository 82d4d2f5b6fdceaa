"""flashcore.distributed on the CPU: ring attention over gloo in 2 and 3 processes, checked
against the float64 reference by the BENCHMARKS.md rule (out and lse) next to single-process
flashcore.attention on the whole sequence; the sharding helpers, the lse merge and bad inputs.

The processes are forked from pytest (torch is already imported: ~0.2 s a case instead of
seconds of imports), each joins a gloo group through a file store, and an assertion or error in
any of them fails the test with its traceback."""

import datetime
import json
import math
import os
import pathlib
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch", reason="PyTorch is not installed (CPU CI has no torch)")
import torch.distributed as dist  # noqa: E402
import torch.multiprocessing as torch_mp  # noqa: E402

import flashcore  # noqa: E402
from flashcore import FlashCoreError, FlashCoreTypeError  # noqa: E402
from flashcore import distributed as fd  # noqa: E402
from torch_reference import assert_within_rule, baseline, reference  # noqa: E402

pytestmark = pytest.mark.skipif(not dist.is_available() or not dist.is_gloo_available(),
                                reason="torch.distributed with gloo is not available")

REPO = pathlib.Path(__file__).resolve().parents[2]
BENCH = REPO / "examples" / "python" / "ring_attention_bench.py"
PROCESS_TIMEOUT_S = 60  # a hang (a mismatched transfer) fails the test instead of CI
GLOO_TIMEOUT = datetime.timedelta(seconds=30)


def _worker(rank, world, store, fn, args, backend="gloo"):
    torch.set_num_threads(1)
    if backend == "nccl":  # NVLink multicast stays off on the shared machines
        os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
        os.environ.setdefault("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1")
        torch.cuda.set_device(rank)
    dist.init_process_group(backend, init_method=f"file://{store}", rank=rank, world_size=world,
                            timeout=GLOO_TIMEOUT)
    try:
        fn(rank, world, *args)
    finally:
        dist.destroy_process_group()


def run_ranks(tmp_path, world, fn, *args, backend="gloo"):
    """Runs fn(rank, world, *args) in `world` processes of one group: forked for gloo, spawned
    for NCCL (a forked child cannot use CUDA once the parent has)."""
    store = tmp_path / f"store-{world}"
    context = torch_mp.start_processes(
        _worker, args=(world, str(store), fn, args, backend), nprocs=world, join=False,
        start_method="fork" if backend == "gloo" else "spawn")
    deadline = datetime.datetime.now() + datetime.timedelta(seconds=PROCESS_TIMEOUT_S)
    try:
        while not context.join(timeout=1):
            if datetime.datetime.now() > deadline:
                raise AssertionError(f"{world} ranks still running after {PROCESS_TIMEOUT_S} s")
    finally:
        for process in context.processes:
            if process.is_alive():
                process.kill()


DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
SHARD = {"zigzag": (fd.zigzag_shard, fd.zigzag_unshard),
         "contiguous": (fd.contiguous_shard, fd.contiguous_unshard)}

# name: batch, tokens per chunk, heads_q, heads_kv, head_dim, dtype, causal, layout, extra
CASES = {
    "causal-zigzag-gqa2-d64-fp32": (1, 5, 4, 2, 64, "fp32", True, "zigzag", {}),
    "causal-zigzag-d128-bf16-batch2": (2, 4, 2, 2, 128, "bf16", True, "zigzag", {}),
    "causal-zigzag-gqa4-d128-bf16": (1, 9, 8, 2, 128, "bf16", True, "zigzag", {}),
    "causal-contiguous-mqa-d64-fp16": (1, 7, 4, 1, 64, "fp16", True, "contiguous", {}),
    "causal-zigzag-std30-bf16": (1, 6, 2, 1, 64, "bf16", True, "zigzag", {"std": 30.0}),
    "full-contiguous-gqa4-d128-bf16": (1, 6, 8, 2, 128, "bf16", False, "contiguous", {}),
    "full-zigzag-d64-fp32-scale": (2, 3, 2, 2, 64, "fp32", False, "zigzag", {"scale": 0.3}),
    "full-contiguous-q-shorter-than-k": (1, 8, 2, 2, 64, "fp32", False, "contiguous",
                                         {"q_chunk": 3}),
    # GPU only (the CPU backend would take seconds): kernel tiles with tails
    "causal-zigzag-gqa4-d256-bf16-long": (1, 1000, 8, 2, 256, "bf16", True, "zigzag",
                                          {"gpu": True}),
    "full-contiguous-gqa4-d128-fp16-long": (1, 1000, 8, 2, 128, "fp16", False, "contiguous",
                                            {"gpu": True}),
}
CPU_CASES = sorted(c for c in CASES if not CASES[c][8].get("gpu"))
GPU_CASES = sorted(c for c in CASES if CASES[c][5] != "fp32")


def _inputs(case, world, seed=0, device="cpu"):
    batch, chunk, heads_q, heads_kv, head_dim, dtype, causal, layout, extra = CASES[case]
    chunks = 2 * world if layout == "zigzag" else world
    seqlen_k = chunk * chunks
    seqlen_q = extra.get("q_chunk", chunk) * chunks
    std = extra.get("std", 1.0)
    generator = torch.Generator().manual_seed(seed)

    def draw(seqlen, heads):
        values = torch.randn(batch, seqlen, heads, head_dim, generator=generator) * std
        return values.to(device=device, dtype=DTYPES[dtype])

    return draw(seqlen_q, heads_q), draw(seqlen_k, heads_kv), draw(seqlen_k, heads_kv)


def _ring_case(rank, world, case, device="cpu"):
    causal, layout, extra = CASES[case][6], CASES[case][7], CASES[case][8]
    scale = extra.get("scale")
    q, k, v = _inputs(case, world, device=torch.device("cuda", rank) if device == "cuda"
                      else device)
    shard, unshard = SHARD[layout]
    out, lse = fd.ring_attention(shard(q), shard(k), shard(v), causal=causal, layout=layout,
                                 softmax_scale=scale, return_lse=True)
    assert out.dtype == q.dtype and out.is_contiguous() and lse.dtype == torch.float32
    out, lse = unshard(out, dim=1), unshard(lse, dim=2)
    if rank != 0:
        return
    single_out, single_lse = flashcore.attention(q, k, v, causal=causal, softmax_scale=scale,
                                                 return_lse=True)
    ref = reference(q, k, v, causal, scale)
    base = baseline(q, k, v, causal, scale)
    as_numpy = (lambda t: t.double().cpu().numpy())
    name = f"{case} over {world} ranks"
    assert_within_rule(name + " (single process)", as_numpy(single_out), as_numpy(single_lse),
                       tuple(map(as_numpy, ref)), tuple(map(as_numpy, base)))
    assert_within_rule(name, as_numpy(out), as_numpy(lse), tuple(map(as_numpy, ref)),
                       tuple(map(as_numpy, base)))


@pytest.mark.parametrize("world", [2, 3])
@pytest.mark.parametrize("case", CPU_CASES)
def test_ring_attention_matches_one_process(tmp_path, case, world):
    run_ranks(tmp_path, world, _ring_case, case)


@pytest.mark.gpu
@pytest.mark.parametrize("case", GPU_CASES)
def test_ring_attention_over_nccl_matches_one_gpu(tmp_path, case):
    """2 GPUs over NCCL (skips with fewer): the same check on the GPU kernels."""
    if torch.cuda.device_count() < 2 or not dist.is_nccl_available():
        pytest.skip(f"needs 2 GPUs and NCCL, found {torch.cuda.device_count()} GPUs")
    run_ranks(tmp_path, 2, _ring_case, case, "cuda", backend="nccl")


def _helpers_case(rank, world):
    x = torch.arange(2 * 4 * world * 3).reshape(2, 4 * world, 3)
    for layout in ("zigzag", "contiguous"):
        shard, unshard = SHARD[layout]
        local = shard(x, dim=1)
        positions = fd.local_positions(x.shape[1], layout)
        assert torch.equal(local, x[:, positions]), layout
        assert torch.equal(unshard(local, dim=1), x), layout
        assert torch.equal(shard(x, dim=-2), local)
    assert fd.zigzag_shard(x, dim=1, rank=0, world_size=2).shape[1] == 2 * world


def test_shard_helpers_round_trip(tmp_path):
    run_ranks(tmp_path, 3, _helpers_case)


def _one_rank_differs_case(rank, world, field):
    q = torch.randn(1, 8, 2, 64)
    kv = torch.randn(1, 8, 2, 64)
    causal = True
    if rank == 1 and field == "seqlen_q":
        q = kv = torch.randn(1, 12, 2, 64)
    if rank == 1 and field == "causal":
        causal = False
    with pytest.raises(FlashCoreError, match=f"every rank must pass the same {field} "
                       r"\(rank 0: .*rank 1: .*\)"):
        fd.ring_attention(q, kv, kv, causal=causal, layout="zigzag")


@pytest.mark.parametrize("field", ["seqlen_q", "causal"])
def test_a_rank_with_other_shapes_or_options_is_named(tmp_path, field):
    run_ranks(tmp_path, 2, _one_rank_differs_case, field)


def _single_rank_case(rank, world):
    q = torch.randn(1, 6, 2, 64)
    out = fd.ring_attention(q, q, q, causal=True, layout="zigzag")
    assert torch.equal(out, flashcore.attention(q, q, q, causal=True))


def test_one_rank_is_one_call(tmp_path):
    run_ranks(tmp_path, 1, _single_rank_case)


# ---- merge_partials (no process group) -------------------------------------------------------

def test_merge_of_split_keys_equals_one_call():
    generator = torch.Generator().manual_seed(1)
    q = torch.randn(2, 9, 4, 64, generator=generator)
    k = torch.randn(2, 20, 2, 64, generator=generator)
    v = torch.randn(2, 20, 2, 64, generator=generator)
    whole, whole_lse = flashcore.attention(q, k, v, return_lse=True)
    parts = [flashcore.attention(q, k[:, s], v[:, s], return_lse=True)
             for s in (slice(0, 7), slice(7, 8), slice(8, 20))]
    out, lse = fd.merge_partials([p[0] for p in parts], [p[1] for p in parts])
    torch.testing.assert_close(out, whole, atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(lse, whole_lse, atol=1e-6, rtol=1e-6)


@pytest.mark.gpu
def test_merge_on_the_gpu_passes_the_rule():
    """bf16 partial outputs from the GPU kernels, merged on the GPU (mixed-dtype addcmul)."""
    generator = torch.Generator(device="cuda").manual_seed(2)
    q, k, v = (torch.randn(1, seqlen, heads, 128, generator=generator, device="cuda")
               .to(torch.bfloat16) for seqlen, heads in ((300, 8), (1000, 2), (1000, 2)))
    parts = [flashcore.attention(q, k[:, s], v[:, s], return_lse=True)
             for s in (slice(0, 129), slice(129, 1000))]
    out, lse = fd.merge_partials([p[0] for p in parts], [p[1] for p in parts])
    as_numpy = (lambda t: t.double().cpu().numpy())
    assert_within_rule("merge of 2 parts", as_numpy(out), as_numpy(lse),
                       tuple(map(as_numpy, reference(q, k, v))),
                       tuple(map(as_numpy, baseline(q, k, v))))


def test_merge_of_parts_that_saw_no_key_is_zero_and_minus_inf():
    out = torch.randn(1, 3, 2, 8).to(torch.bfloat16)
    empty_lse = torch.full((1, 2, 3), -math.inf)
    lse = torch.randn(1, 2, 3)
    lse[0, 1, 2] = -math.inf  # this row saw no key in either part
    merged, merged_lse = fd.merge_partials([torch.zeros_like(out), out], [empty_lse, lse])
    assert merged.dtype == torch.bfloat16 and not torch.isnan(merged).any()
    assert torch.equal(merged[0, 2, 1], torch.zeros(8, dtype=torch.bfloat16))
    assert torch.equal(merged[0, :2], out[0, :2])
    assert merged_lse[0, 1, 2] == -math.inf and torch.equal(merged_lse[0, 0], lse[0, 0])
    all_empty, all_empty_lse = fd.merge_partials([out, out], [empty_lse, empty_lse])
    assert not all_empty.any() and torch.isneginf(all_empty_lse).all()


def test_merge_partials_checks_its_lists():
    out, lse = torch.zeros(1, 3, 2, 8), torch.zeros(1, 2, 3)
    with pytest.raises(FlashCoreError, match="same length, got 2 and 1"):
        fd.merge_partials([out, out], [lse])
    with pytest.raises(FlashCoreError, match=r"lses\[1\] has shape \(1, 3, 2\)"):
        fd.merge_partials([out, out], [lse, lse.transpose(1, 2)])
    with pytest.raises(FlashCoreTypeError, match="lists of torch.Tensor"):
        fd.merge_partials(out, lse)


# ---- bad inputs, refused before any communication ---------------------------------------------

def _qkv(seqlen=8, requires_grad=False):
    q = torch.randn(1, seqlen, 2, 64, requires_grad=requires_grad)
    return q, torch.randn(1, seqlen, 2, 64), torch.randn(1, seqlen, 2, 64)


BAD_CALLS = {
    "requires_grad": (lambda: fd.ring_attention(*_qkv(requires_grad=True)), FlashCoreError,
                      "q requires grad: ring_attention is forward-only"),
    "causal_without_layout": (lambda: fd.ring_attention(*_qkv(), causal=True), FlashCoreError,
                              "layout must be 'zigzag' or 'contiguous' when causal=True"),
    "unknown_layout": (lambda: fd.ring_attention(*_qkv(), layout="ring"), FlashCoreError,
                       "got 'ring'"),
    "odd_zigzag_shard": (lambda: fd.ring_attention(*_qkv(7), causal=True, layout="zigzag"),
                         FlashCoreError, "q has 7 tokens on this rank"),
    "causal_lengths_differ": (
        lambda: fd.ring_attention(_qkv(4)[0], *_qkv(6)[1:], causal=True, layout="zigzag"),
        FlashCoreError, "seqlen_q=4 and seqlen_k=6"),
    "k_v_shapes_differ": (lambda: fd.ring_attention(*_qkv()[:2], _qkv(6)[2]), FlashCoreError,
                          r"k and v must have the same shape, got k \(1, 8, 2, 64\) and v "
                          r"\(1, 6, 2, 64\)"),
    "q_not_a_tensor": (lambda: fd.ring_attention([1.0], *_qkv()[1:]), FlashCoreTypeError,
                       "q must be a torch.Tensor, got list"),
    "q_rank_3": (lambda: fd.ring_attention(torch.zeros(8, 2, 64), *_qkv()[1:]), FlashCoreError,
                 r"q must have 4 dimensions \[batch, seqlen, heads, head_dim\], got 3"),
    "causal_not_bool": (lambda: fd.ring_attention(*_qkv(), causal="yes"), FlashCoreTypeError,
                        "causal must be a bool"),
    "no_process_group": (lambda: fd.ring_attention(*_qkv()), FlashCoreError,
                         "needs torch.distributed initialized"),
    "shard_not_divisible": (
        lambda: fd.zigzag_shard(torch.zeros(1, 10, 2), rank=0, world_size=2), FlashCoreError,
        r"x.shape\[1\]=10 must be a multiple of 4 for the zigzag layout over 2 ranks"),
    "shard_dim_out_of_range": (
        lambda: fd.zigzag_shard(torch.zeros(1, 8), dim=2, rank=0, world_size=2),
        FlashCoreError, r"dim must be an int in \[-2, 2\), got 2"),
    "shard_rank_without_world_size": (lambda: fd.contiguous_shard(torch.zeros(4), dim=0, rank=0),
                                      FlashCoreError, "pass both rank and world_size"),
    "shard_rank_out_of_range": (
        lambda: fd.contiguous_shard(torch.zeros(4), dim=0, rank=2, world_size=2),
        FlashCoreError, r"rank must be in \[0, world_size=2\), got 2"),
}


@pytest.mark.parametrize("case", sorted(BAD_CALLS))
def test_bad_input_is_named(case):
    call, error, message = BAD_CALLS[case]
    assert not dist.is_initialized()
    with pytest.raises(error, match=message):
        call()


def test_only_flashcore_distributed_imports_torch():
    result = subprocess.run(
        [sys.executable, "-c", "import sys, flashcore, flashcore._ring_plan; "
         "print('torch' in sys.modules)"], capture_output=True, text=True, timeout=120,
        env=dict(os.environ))
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "False"


def test_inputs_that_require_grad_pass_without_grad_mode():
    with torch.no_grad():
        with pytest.raises(FlashCoreError, match="needs torch.distributed initialized"):
            fd.ring_attention(*_qkv(requires_grad=True))  # past the grad check


def test_bench_smoke_run_on_cpu(tmp_path):
    """examples/python/ring_attention_bench.py end to end with torchrun, 2 gloo ranks."""
    pytest.importorskip("torch.distributed.run")
    out = tmp_path / "ring.json"
    env = dict(os.environ, OMP_NUM_THREADS="1")
    result = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2",
         str(BENCH), "--device", "cpu",
         "--seqlen", "64", "--heads", "4", "2", "--head-dim", "64", "--masks", "causal,full",
         "--warmup", "1", "--iters", "2", "--json", str(out)],
        capture_output=True, text=True, timeout=240, env=env)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    report = json.loads(out.read_text())
    assert [r["causal"] for r in report["results"]] == [True, False]
    assert all(r["check"]["pass"] for r in report["results"]), report["results"]
    assert report["env"] == {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
                             "FLASHCORE_SM_MARGIN": None}
    assert "scaling efficiency" in result.stdout
    summary = subprocess.run([sys.executable, str(BENCH), "--summary", str(out)],
                             capture_output=True, text=True, timeout=60)
    assert summary.returncode == 0, summary.stderr
    assert "| 2 | 64 | 4/2 d64 bf16 | causal zigzag | pass |" in summary.stdout


@pytest.mark.parametrize("flags, message", [
    (["--nccl-max-ctas", "0"], "--nccl-max-ctas must be at least 1, got 0"),
    (["--nccl-max-ctas", "2", "--device", "cpu"], "it needs --device cuda, got --device cpu"),
])
def test_bench_refuses_a_bad_nccl_cap(flags, message):
    result = subprocess.run([sys.executable, str(BENCH), *flags], capture_output=True,
                            text=True, timeout=60)
    assert result.returncode == 2
    assert message in result.stderr


def test_bench_summary_names_the_margin_and_the_nccl_cap(tmp_path):
    """A GPU run's JSON (as ring.sh's margin runs write it) is summarized with both settings."""
    report = {"device": "NVIDIA H100 80GB HBM3", "world": 4, "commit": "abc1234",
              "env": {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
                      "FLASHCORE_SM_MARGIN": "2"},
              "args": {"nccl_max_ctas": 2},
              "results": [{"seqlen": 131072, "heads_q": 32, "heads_kv": 8, "head_dim": 128,
                           "dtype": "bf16", "causal": True, "layout": "zigzag", "check": None,
                           "ring_ms": 56.5, "tflops_per_gpu": 622.6,
                           "single_full_tflops": 642.2, "share_tflops": 679.8,
                           "efficiency_vs_share": 0.916, "efficiency_vs_full": 0.969,
                           "comm_ms": 11.6, "comm_GBps": 34.8, "hidden_fraction": 0.77}]}
    path = tmp_path / "w4.json"
    path.write_text(json.dumps(report))
    summary = subprocess.run([sys.executable, str(BENCH), "--summary", str(path)],
                             capture_output=True, text=True, timeout=60)
    assert summary.returncode == 0, summary.stderr
    assert "| 4 (SM margin 2, NCCL max 2 CTAs) | 131072 |" in summary.stdout
