"""flashcore::attention_varlen (flashcore.torch / flashcore.attention_varlen on torch tensors) on
CPU (when torch is installed) and CUDA (marker `gpu`): each sequence against the float64
reference, opcheck, torch.compile(fullgraph=True), CUDA graph capture, errors."""

import pytest

torch = pytest.importorskip("torch", reason="PyTorch is not installed (CPU CI has no torch)")

import flashcore  # noqa: E402
import flashcore.torch as fct  # noqa: E402
from torch_reference import check_accuracy  # noqa: E402

DEVICES = [pytest.param("cpu", id="cpu"),
           pytest.param("cuda", id="cuda", marks=pytest.mark.gpu)]
DTYPES = {"cpu": [torch.float32, torch.bfloat16], "cuda": [torch.float16, torch.bfloat16]}
# (query lengths, key lengths): 0-length queries with keys, 1, tails around 64/128, 1000, 4097.
LENGTHS = {
    "cpu": ([1, 17, 0, 65, 3], [1, 17, 9, 65, 130]),
    "cuda": ([1, 17, 0, 64, 65, 1000, 4097, 5], [1, 17, 40, 64, 65, 1000, 4097, 4097]),
}
HEADS_Q, HEADS_KV = 8, 2


def _cu(lengths, device):
    offsets = [0]
    for length in lengths:
        offsets.append(offsets[-1] + length)
    return torch.tensor(offsets, dtype=torch.int32, device=device)


def _batch(device, dtype, lengths_q, lengths_k, head_dim=128, seed=0):
    gen = torch.Generator(device="cpu").manual_seed(seed)

    def make(total, heads):
        return torch.randn(total, heads, head_dim, generator=gen).to(device, dtype)

    q = make(sum(lengths_q), HEADS_Q)
    k, v = make(sum(lengths_k), HEADS_KV), make(sum(lengths_k), HEADS_KV)
    return (q, k, v, _cu(lengths_q, device), _cu(lengths_k, device), max(lengths_q),
            max(lengths_k))


def check_varlen(name, out, lse, q, k, v, cu_q, cu_k, causal):
    cu_q, cu_k = cu_q.tolist(), cu_k.tolist()
    for b in range(len(cu_q) - 1):
        rows, cols = slice(cu_q[b], cu_q[b + 1]), slice(cu_k[b], cu_k[b + 1])
        if cu_q[b + 1] == cu_q[b]:
            continue
        check_accuracy(f"{name} sequence {b}", out[rows][None],
                       None if lse is None else lse[:, rows][None], q[rows][None],
                       k[cols][None], v[cols][None], causal)


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("device", DEVICES)
def test_matches_each_sequence_alone(device, causal):
    for dtype in DTYPES[device]:
        args = _batch(device, dtype, *LENGTHS[device])
        out, lse = flashcore.attention_varlen(*args, causal=causal, return_lse=True)
        q = args[0]
        assert out.shape == q.shape and out.dtype == dtype and out.device == q.device
        assert lse.shape == (HEADS_Q, q.shape[0]) and lse.dtype == torch.float32
        check_varlen(f"{device} {dtype} causal={causal}", out, lse, *args[:5], causal)


@pytest.mark.parametrize("device", DEVICES)
def test_opcheck(device):
    q, k, v, cu_q, cu_k, max_q, max_k = _batch(device, DTYPES[device][-1], [3, 0, 17], [5, 2, 17],
                                               head_dim=64)
    for return_lse in (False, True):
        torch.library.opcheck(torch.ops.flashcore.attention_varlen.default,
                              (q, k, v, cu_q, cu_k, max_q, max_k, None, True, None, return_lse,
                               "auto", False))


@pytest.mark.parametrize("device", DEVICES)
def test_torch_compile_fullgraph(device):
    q, k, v, cu_q, cu_k, max_q, max_k = _batch(device, DTYPES[device][-1], [3, 0, 40], [5, 2, 40],
                                               head_dim=64)

    def block(q, k, v, cu_q, cu_k):
        out, lse = flashcore.attention_varlen(q * 0.5, k, v, cu_q, cu_k, max_q, max_k,
                                              causal=True, return_lse=True)
        return out.float().sum(dim=-1), lse * 2

    torch._dynamo.reset()
    compiled = torch.compile(block, fullgraph=True,
                             backend="inductor" if device == "cuda" else "aot_eager")
    expected, got = block(q, k, v, cu_q, cu_k), compiled(q, k, v, cu_q, cu_k)
    for e, g in zip(expected, got):
        torch.testing.assert_close(g, e, rtol=1e-3, atol=1e-3)


@pytest.mark.gpu
def test_cuda_graph_capture_and_replay():
    """The lengths live on the GPU: new cu_seqlens values replay without a new capture."""
    lengths = [([100, 1, 28], [300, 1, 28]), ([1, 128, 0], [1, 200, 128]),
               ([64, 64, 1], [64, 200, 65])]
    # The first batch sizes the captured buffers: every replay's totals fit them (129 q, 329 k).
    static = list(_batch("cuda", torch.bfloat16, *lengths[0]))
    max_q, max_k = 128, 300  # bounds for every replay
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        flashcore.attention_varlen(*static[:5], max_q, max_k, causal=True)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        graph_out, graph_lse = flashcore.attention_varlen(*static[:5], max_q, max_k, causal=True,
                                                          return_lse=True)
    for seed, (lengths_q, lengths_k) in enumerate(lengths):
        fresh = _batch("cuda", torch.bfloat16, lengths_q, lengths_k, seed=seed)
        for dst, src in zip(static[:5], fresh[:5]):
            dst[:src.shape[0]].copy_(src)
        graph.replay()
        torch.cuda.synchronize()
        total_q = fresh[0].shape[0]
        check_varlen(f"replay {seed}", graph_out[:total_q], graph_lse[:, :total_q],
                     *fresh[:5], True)


@pytest.mark.parametrize("device", DEVICES)
def test_errors_and_backward(device):
    q, k, v, cu_q, cu_k, max_q, max_k = _batch(device, DTYPES[device][-1], [3, 4], [5, 6],
                                               head_dim=64)
    with pytest.raises(flashcore.FlashCoreError, match="cu_seqlens_q must be int32, got int64"):
        flashcore.attention_varlen(q, k, v, cu_q.long(), cu_k, max_q, max_k)
    with pytest.raises(flashcore.FlashCoreError, match="cu_seqlens_k must be int32, got int64"):
        fct.attention_varlen(q, k, v, cu_q, cu_k.long(), max_q, max_k)
    with pytest.raises(flashcore.FlashCoreTypeError, match="seqused_k must be a torch.Tensor"):
        fct.attention_varlen(q, k, v, cu_q, cu_k, max_q, max_k, seqused_k=[5, 6])
    with pytest.raises(flashcore.FlashCoreError, match=r"cu_seqlens_k has 2 entries"):
        flashcore.attention_varlen(q, k, v, cu_q, cu_k[:2], max_q, max_k)
    q.requires_grad_(True)
    out = flashcore.attention_varlen(q, k, v, cu_q, cu_k, max_q, max_k, causal=True)
    with pytest.raises(NotImplementedError, match="FlashCore has no backward kernel yet"):
        out.float().sum().backward()


def test_out_and_stream_on_the_host():
    q, k, v, cu_q, cu_k, max_q, max_k = _batch("cpu", torch.float32, [3, 4], [5, 6], head_dim=64)
    out = torch.full_like(q, float("nan"))
    result, lse = flashcore.attention_varlen(q, k, v, cu_q, cu_k, max_q, max_k, causal=True,
                                             out=out, return_lse=True)
    assert result is out
    check_varlen("out=", out, lse, q, k, v, cu_q, cu_k, True)
    with pytest.raises(flashcore.FlashCoreError, match="stream must be None for host"):
        flashcore.attention_varlen(q, k, v, cu_q, cu_k, max_q, max_k, stream=0)


def test_symbolic_lengths_under_dynamic_compile():
    """max_seqlen from q's shape stays symbolic under dynamic=True: no specialization error."""
    q, k, v, cu_q, cu_k, _, _ = _batch("cpu", torch.float32, [3, 4], [3, 4], head_dim=64)

    def block(q, k, v, cu_q, cu_k):
        return flashcore.attention_varlen(q, k, v, cu_q, cu_k, q.shape[0], k.shape[0],
                                          causal=True)

    torch._dynamo.reset()
    compiled = torch.compile(block, fullgraph=True, dynamic=True, backend="aot_eager")
    torch.testing.assert_close(compiled(q, k, v, cu_q, cu_k), block(q, k, v, cu_q, cu_k))
