"""flashcore::attention_with_kvcache (flashcore.torch / flashcore.attention_with_kvcache on torch
tensors) on CPU (when torch is installed) and CUDA (marker `gpu`): paged and contiguous caches
with append against the float64 reference, the in-place append under opcheck,
torch.compile(fullgraph=True) and CUDA graph capture, errors."""

import pytest

torch = pytest.importorskip("torch", reason="PyTorch is not installed (CPU CI has no torch)")

import flashcore  # noqa: E402
import flashcore.torch as fct  # noqa: E402
from torch_reference import check_accuracy  # noqa: E402

DEVICES = [pytest.param("cpu", id="cpu"),
           pytest.param("cuda", id="cuda", marks=pytest.mark.gpu)]
DTYPES = {"cpu": [torch.float32, torch.bfloat16], "cuda": [torch.float16, torch.bfloat16]}
HEADS_Q, HEADS_KV, HEAD_DIM = 32, 8, 128


class Cache:
    """A kv cache of `batch` sequences holding `lengths` tokens, contiguous (page_size None) or
    paged with pages handed out in a shuffled order; NaN in every slot no sequence owns."""

    def __init__(self, device, dtype, lengths, capacity, page_size=None, seed=0):
        gen = torch.Generator(device="cpu").manual_seed(seed)
        self.lengths = lengths
        self.page_size = page_size
        self.seqlens = torch.tensor(lengths, dtype=torch.int32, device=device)
        self.tokens = [(torch.randn(n, HEADS_KV, HEAD_DIM, generator=gen).to(device, dtype),
                        torch.randn(n, HEADS_KV, HEAD_DIM, generator=gen).to(device, dtype))
                       for n in lengths]
        batch = len(lengths)
        if page_size is None:
            shape = (batch, capacity, HEADS_KV, HEAD_DIM)
            self.page_table = None
        else:
            width = -(-capacity // page_size)
            order = torch.randperm(batch * width + 1, generator=gen)
            self.page_table = order[:batch * width].reshape(batch, width).to(device, torch.int32)
            shape = (batch * width + 1, page_size, HEADS_KV, HEAD_DIM)
        self.k = torch.full(shape, float("nan"), dtype=dtype, device=device)
        self.v = torch.full(shape, float("nan"), dtype=dtype, device=device)
        for b, (k, v) in enumerate(self.tokens):
            self.write(b, 0, k, v)

    def _where(self, b, start, count):
        tokens = torch.arange(start, start + count)
        if self.page_table is None:
            return b, tokens
        return self.page_table[b].cpu()[tokens // self.page_size], tokens % self.page_size

    def write(self, b, start, k, v):
        where = self._where(b, start, k.shape[0])
        self.k[where], self.v[where] = k, v

    def read(self, b, count):
        where = self._where(b, 0, count)
        return self.k[where], self.v[where]


def _new(device, dtype, shape, seed):
    gen = torch.Generator(device="cpu").manual_seed(seed)
    return torch.randn(*shape, generator=gen).to(device, dtype)


@pytest.mark.parametrize("page_size", [None, 1, 16, 64],
                         ids=lambda p: f"page{p}" if p else "contiguous")
@pytest.mark.parametrize("device", DEVICES)
def test_decode_step_with_append(device, page_size):
    lengths = [0, 1, 63, 64, 300]
    for dtype in DTYPES[device]:
        cache = Cache(device, dtype, lengths, 320, page_size)
        q = _new(device, dtype, (len(lengths), 1, HEADS_Q, HEAD_DIM), 1)
        k, v = (_new(device, dtype, (len(lengths), 2, HEADS_KV, HEAD_DIM), s) for s in (2, 3))
        out, lse = flashcore.attention_with_kvcache(
            q, cache.k, cache.v, cache.seqlens, page_table=cache.page_table, k=k, v=v,
            causal=True, return_lse=True)
        assert out.shape == q.shape and lse.shape == (len(lengths), HEADS_Q, 1)
        assert cache.seqlens.tolist() == lengths
        for b, length in enumerate(lengths):
            keys, values = cache.read(b, length + 2)  # written in place: cache + new tokens
            torch.testing.assert_close(keys, torch.cat([cache.tokens[b][0], k[b]]), rtol=0,
                                       atol=0)
            check_accuracy(f"{device} {dtype} page {page_size} sequence {b}", out[b:b + 1],
                           lse[b:b + 1], q[b:b + 1], keys[None], values[None], causal=True)


@pytest.mark.parametrize("device", DEVICES)
def test_packed_chunked_prefill(device):
    dtype = DTYPES[device][-1]
    lengths, chunks = [5, 0, 40], [3, 7, 0]
    cache = Cache(device, dtype, lengths, 64, 16)
    cu_q = torch.tensor([0, 3, 10, 10], dtype=torch.int32, device=device)
    q = _new(device, dtype, (10, HEADS_Q, HEAD_DIM), 1)
    k, v = (_new(device, dtype, (10, HEADS_KV, HEAD_DIM), s) for s in (2, 3))
    out, lse = fct.attention_with_kvcache(q, cache.k, cache.v, cache.seqlens,
                                          page_table=cache.page_table, k=k, v=v, cu_seqlens_q=cu_q,
                                          max_seqlen_q=7, causal=True, return_lse=True)
    assert lse.shape == (HEADS_Q, 10)
    for b in range(3):
        rows = slice(cu_q[b].item(), cu_q[b + 1].item())
        if chunks[b] == 0:
            continue
        keys, values = cache.read(b, lengths[b] + chunks[b])
        check_accuracy(f"{device} packed sequence {b}", out[rows][None], lse[:, rows][None],
                       q[rows][None], keys[None], values[None], causal=True)


def _op_args(cache, q, k, v, return_lse):
    return (q, cache.k, cache.v, cache.seqlens, cache.page_table, k, v, None, 0, True, None,
            return_lse, "auto", False)


@pytest.mark.parametrize("device", DEVICES)
def test_opcheck_sees_the_declared_cache_mutation(device):
    dtype = DTYPES[device][-1]
    cache = Cache(device, dtype, [3, 20], 32, 16)
    cache.k.nan_to_num_(0.0), cache.v.nan_to_num_(0.0)  # opcheck compares outputs with NaN-safe ==
    q = _new(device, dtype, (2, 1, HEADS_Q, HEAD_DIM), 1)
    k, v = (_new(device, dtype, (2, 1, HEADS_KV, HEAD_DIM), s) for s in (2, 3))
    for return_lse in (False, True):
        torch.library.opcheck(torch.ops.flashcore.attention_with_kvcache.default,
                              _op_args(cache, q, k, v, return_lse))


@pytest.mark.parametrize("device", DEVICES)
def test_torch_compile_fullgraph_appends_in_place(device):
    dtype = DTYPES[device][-1]
    eager, compiled_cache = (Cache(device, dtype, [3, 20], 32, 16) for _ in range(2))
    q = _new(device, dtype, (2, 1, HEADS_Q, HEAD_DIM), 1)
    k, v = (_new(device, dtype, (2, 1, HEADS_KV, HEAD_DIM), s) for s in (2, 3))

    def step(q, k_cache, v_cache, seqlens, page_table, k, v):
        out = flashcore.attention_with_kvcache(q * 0.5, k_cache, v_cache, seqlens,
                                               page_table=page_table, k=k, v=v, causal=True)
        return out.float().sum(dim=-1)

    torch._dynamo.reset()
    compiled = torch.compile(step, fullgraph=True,
                             backend="inductor" if device == "cuda" else "aot_eager")
    expected = step(q, eager.k, eager.v, eager.seqlens, eager.page_table, k, v)
    got = compiled(q, compiled_cache.k, compiled_cache.v, compiled_cache.seqlens,
                   compiled_cache.page_table, k, v)
    torch.testing.assert_close(got, expected, rtol=1e-3, atol=1e-3)
    for b, length in enumerate([3, 20]):  # the compiled call wrote the caller's cache
        torch.testing.assert_close(compiled_cache.read(b, length + 1)[0],
                                   eager.read(b, length + 1)[0], rtol=0, atol=0)


@pytest.mark.gpu
@pytest.mark.parametrize("page_size", [1, 16])
def test_cuda_graph_decode_loop(page_size):
    """A captured decode step replayed as a server runs it: the caller advances cache_seqlens on
    the GPU between replays, and each replay appends at the new position."""
    lengths, steps = [10, 100, 0, 257], 4
    cache = Cache("cuda", torch.bfloat16, lengths, 272, page_size)
    q = torch.zeros(len(lengths), 1, HEADS_Q, HEAD_DIM, dtype=torch.bfloat16, device="cuda")
    k, v = torch.zeros_like(q[:, :, :HEADS_KV]), torch.zeros_like(q[:, :, :HEADS_KV])
    args = dict(page_table=cache.page_table, k=k, v=v, causal=True)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm-up: writes zeros at the first free slot, rewritten below
        flashcore.attention_with_kvcache(q, cache.k, cache.v, cache.seqlens, **args)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        graph_out = flashcore.attention_with_kvcache(q, cache.k, cache.v, cache.seqlens, **args)
    history = [list(t) for t in cache.tokens]
    for step in range(steps):
        for dst, seed in ((q, 10 * step), (k, 10 * step + 1), (v, 10 * step + 2)):
            dst.copy_(_new("cuda", torch.bfloat16, dst.shape, seed))
        graph.replay()
        torch.cuda.synchronize()
        for b, length in enumerate(lengths):
            total = length + step + 1
            keys, values = cache.read(b, total)
            history[b][0] = torch.cat([history[b][0], k[b]])
            history[b][1] = torch.cat([history[b][1], v[b]])
            torch.testing.assert_close(keys, history[b][0], rtol=0, atol=0)
            check_accuracy(f"replay {step} sequence {b}", graph_out[b:b + 1], None,
                           q[b:b + 1], keys[None], values[None], causal=True)
        cache.seqlens += 1  # on the GPU, as a server's step would


@pytest.mark.parametrize("device", DEVICES)
def test_errors_name_the_callers_arguments(device):
    dtype = DTYPES[device][-1]
    cache = Cache(device, dtype, [3, 20], 32, 16)
    q = _new(device, dtype, (2, 1, HEADS_Q, HEAD_DIM), 1)
    k, v = (_new(device, dtype, (2, 1, HEADS_KV, HEAD_DIM), s) for s in (2, 3))
    call = lambda **kw: flashcore.attention_with_kvcache(  # noqa: E731
        q, cache.k, cache.v, kw.pop("seqlens", cache.seqlens),
        **{"page_table": cache.page_table, "k": k, "v": v, **kw})
    with pytest.raises(flashcore.FlashCoreError, match="cache_seqlens must be int32, got int64"):
        call(seqlens=cache.seqlens.long())
    with pytest.raises(flashcore.FlashCoreError, match="page_table must be int32, got int64"):
        call(page_table=cache.page_table.long())
    with pytest.raises(flashcore.FlashCoreError, match="k is set but v is not"):
        call(v=None)
    # cache_seqlens on a GPU is only read when asked (check_indices): no sync otherwise.
    with pytest.raises(flashcore.FlashCoreError, match=r"cache_seqlens\[1\]=20 plus 1 new "
                                                        r"tokens is more than the cache's 16"):
        call(page_table=cache.page_table[:, :1], check_indices=True)
    with pytest.raises(flashcore.FlashCoreTypeError, match="page_table must be a torch.Tensor"):
        call(page_table=[[0, 1], [2, 3]])
    bad = cache.page_table.clone()
    bad[1, 1] = cache.k.shape[0]
    with pytest.raises(flashcore.FlashCoreError, match=r"page_table\[1\]\[1\]"):
        call(page_table=bad, check_indices=True)
    with pytest.raises(NotImplementedError, match="FlashCore has no backward kernel yet"):
        call(k=k.clone().requires_grad_(True))


def test_out_on_the_host_and_a_contiguous_cache():
    cache = Cache("cpu", torch.float32, [7, 0], 16)
    q = _new("cpu", torch.float32, (2, 3, HEADS_Q, HEAD_DIM), 1)
    out = torch.full_like(q, float("nan"))
    result = flashcore.attention_with_kvcache(q, cache.k, cache.v, cache.seqlens, causal=False,
                                              out=out)
    assert result is out
    keys, values = cache.read(0, 7)
    check_accuracy("out= contiguous", out[:1], None, q[:1], keys[None], values[None])
    assert torch.all(out[1] == 0)  # an empty cache: no key, out 0
