"""flashcore.torch: the custom op flashcore::attention_forward on CPU (when torch is installed) and
CUDA (marker `gpu`): accuracy vs float64, layouts, non-contiguous inputs, torch.compile, CUDA
graphs, the workspace of the persistent schedule, autograd refusal, dtype errors."""

import pytest

torch = pytest.importorskip("torch", reason="PyTorch is not installed (CPU CI has no torch)")

import flashcore  # noqa: E402
import flashcore.torch as fct  # noqa: E402
from torch_reference import check_accuracy  # noqa: E402

DEVICES = [pytest.param("cpu", id="cpu"),
           pytest.param("cuda", id="cuda", marks=pytest.mark.gpu)]
# CUDA kernels take fp16/bf16; the CPU backends also fp32.
DTYPES = {"cpu": [torch.float32, torch.float16, torch.bfloat16],
          "cuda": [torch.float16, torch.bfloat16]}
# (batch, seqlen_q, seqlen_k, heads_q, heads_kv, head_dim)
SHAPES = [
    (2, 128, 128, 8, 8, 64),
    (1, 65, 1000, 8, 2, 128),   # chunked prefill / decode-like: s_q < s_k
    (1, 127, 63, 4, 1, 64),     # s_q > s_k: top rows see nothing when causal
    (1, 1, 4097, 32, 8, 128),   # one decode step, GQA 4
]


def _id(value):
    return str(value).replace("torch.", "")


def _inputs(device, dtype, shape, seed=0):
    batch, seqlen_q, seqlen_k, heads_q, heads_kv, head_dim = shape
    gen = torch.Generator(device="cpu").manual_seed(seed)
    make = lambda s, h: torch.randn(batch, s, h, head_dim, generator=gen).to(device, dtype)  # noqa: E731
    return make(seqlen_q, heads_q), make(seqlen_k, heads_kv), make(seqlen_k, heads_kv)


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "b{}_sq{}_sk{}_hq{}_hkv{}_d{}".format(*s))
@pytest.mark.parametrize("device", DEVICES)
def test_matches_float64_reference(device, shape, causal):
    for dtype in DTYPES[device]:
        q, k, v = _inputs(device, dtype, shape)
        out, lse = fct.attention(q, k, v, causal=causal, return_lse=True)
        assert out.shape == q.shape and out.dtype == dtype and out.device == q.device
        assert lse.shape == (shape[0], shape[3], shape[1]) and lse.dtype == torch.float32
        check_accuracy(f"{device} {_id(dtype)} {shape} causal={causal}", out, lse, q, k, v,
                       causal)


@pytest.mark.parametrize("device", DEVICES)
def test_bhsd_layout_reads_sdpa_tensors_without_copies(device):
    dtype = DTYPES[device][-1]
    q, k, v = (t.transpose(1, 2).contiguous() for t in _inputs(device, dtype, (2, 65, 65, 8, 2, 64)))
    out = fct.attention(q, k, v, causal=True, layout="bhsd")
    assert out.shape == q.shape and out.is_contiguous()  # [b, h, s, d] like SDPA's output
    bshd = [t.transpose(1, 2) for t in (q, k, v)]
    check_accuracy("bhsd", out.transpose(1, 2), None, *bshd, causal=True)
    if device == "cuda":
        expected = torch.nn.functional.scaled_dot_product_attention(
            q, k, v, is_causal=True, enable_gqa=True)
        assert (out.float() - expected.float()).abs().max().item() < 2e-2


@pytest.mark.parametrize("device", DEVICES)
def test_packed_qkv_slices(device):
    dtype = DTYPES[device][-1]
    qkv = torch.randn(2, 63, 3, 4, 64).to(device, dtype)
    q, k, v = qkv.unbind(dim=2)
    assert not q.is_contiguous()
    check_accuracy("packed qkv", fct.attention(q, k, v, causal=True), None, q, k, v, causal=True)


@pytest.mark.parametrize("device", DEVICES)
def test_generic_entry_point_out_and_stream(device):
    dtype = DTYPES[device][-1]
    q, k, v = _inputs(device, dtype, (1, 33, 33, 4, 2, 64))
    out = torch.full_like(q, float("nan"))
    stream = torch.cuda.Stream() if device == "cuda" else None
    if stream is not None:
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            result, lse = flashcore.attention(q, k, v, causal=True, out=out, return_lse=True,
                                              stream=stream.cuda_stream)
        torch.cuda.current_stream().wait_stream(stream)
    else:
        result, lse = flashcore.attention(q, k, v, causal=True, out=out, return_lse=True)
    assert result is out
    check_accuracy("out=", out, lse, q, k, v, causal=True)
    check_accuracy("flashcore.attention", flashcore.attention(q, k, v), None, q, k, v)


@pytest.mark.parametrize("device", DEVICES)
def test_opcheck(device):
    q, k, v = _inputs(device, DTYPES[device][-1], (1, 17, 33, 4, 2, 64))
    for return_lse in (False, True):
        torch.library.opcheck(torch.ops.flashcore.attention_forward.default,
                              (q, k, v, True, None, return_lse, "bshd", "auto"))


@pytest.mark.parametrize("device", DEVICES)
def test_torch_compile_fullgraph(device):
    q, k, v = _inputs(device, DTYPES[device][-1], (2, 64, 64, 8, 2, 64))

    def block(q, k, v):
        out, lse = fct.attention(q * 0.5, k, v, causal=True, return_lse=True)
        return out.float().sum(dim=-1), lse * 2

    compiled = torch.compile(block, fullgraph=True,
                             backend="inductor" if device == "cuda" else "aot_eager")
    torch._dynamo.reset()
    expected, got = block(q, k, v), compiled(q, k, v)
    for e, g in zip(expected, got):
        torch.testing.assert_close(g, e, rtol=1e-3, atol=1e-3)


# (batch, seqlen_q, seqlen_k, heads_q, heads_kv, head_dim). The decode shape splits its keys on
# sm90: the attention kernel and the combine kernel both replay from the graph.
@pytest.mark.gpu
@pytest.mark.parametrize("shape", [(1, 128, 256, 8, 2, 128), (1, 1, 4096, 32, 8, 128)],
                         ids=["prefill", "split_decode"])
def test_cuda_graph_capture_and_replay(shape):
    q, k, v = _inputs("cuda", torch.bfloat16, shape)
    static = [t.clone() for t in (q, k, v)]
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm-up off the default stream, as torch recommends
        fct.attention(*static, causal=True)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        graph_out, graph_lse = fct.attention(*static, causal=True, return_lse=True)
    for seed in (1, 2, 3):
        fresh = _inputs("cuda", torch.bfloat16, shape, seed=seed)
        for dst, src in zip(static, fresh):
            dst.copy_(src)
        graph.replay()
        torch.cuda.synchronize()
        check_accuracy(f"graph replay {seed}", graph_out, graph_lse, *fresh, causal=True)


@pytest.mark.gpu
@pytest.mark.parametrize("head_dim", [64, 96, 128, 256])  # 96: the d128 sm90 kernels, padded
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_scores_rising_across_kv_tiles(head_dim, causal):
    # The sm90 kernel visits KV tiles last to first and moves a row's softmax max only when the
    # scores rise more than 2^8 above it (lazy rescaling, src/cuda/sm90/softmax.cuh). Keys
    # scaled up 1x (last) to 16x (first) make the scores climb by about 2.5 x 15 over the walk, so
    # rows move their max again and again with corrections between 0 and 1, at every head_dim.
    shape = (2, 1024, 1024, 4, 2, head_dim)
    q, k, v = _inputs("cuda", torch.bfloat16, shape)
    rise = 1.0 + 15.0 * torch.linspace(1.0, 0.0, shape[2], device="cuda")
    k = (k.float() * rise[None, :, None, None]).to(torch.bfloat16)
    out, lse = fct.attention(q, k, v, causal=causal, return_lse=True)
    check_accuracy(f"rising scores d{head_dim} causal={causal}", out, lse, q, k, v, causal)


@pytest.mark.parametrize("device", DEVICES)
def test_workspace_bytes(device):
    q = torch.zeros(1, 4, 2, 8, device=device, dtype=DTYPES[device][-1])
    k = torch.zeros_like(q)
    if device == "cpu":
        assert flashcore.attention_workspace_bytes(q) == 0
        assert flashcore.attention_workspace_bytes(q, k) == 0
        return
    # Four keys, nothing to split: the two uint32 tile counters. Without k the answer must hold
    # for any k, so it is at least that.
    assert flashcore.attention_workspace_bytes(q, k) == 8
    assert flashcore.attention_workspace_bytes(q) >= 8


@pytest.mark.gpu
@pytest.mark.parametrize("causal", [False, True])
def test_decode_splits_keys_through_the_torch_workspace(causal):
    # Batch-1 decode at GQA 4:1 runs 8 tiles; on a Hopper GPU the keys are split over CTAs and
    # the partial results live in the workspace the wrapper sizes from q and k.
    shape = (1, 1, 16384, 32, 8, 128)
    q, k, v = _inputs("cuda", torch.bfloat16, shape)
    bytes_needed = flashcore.attention_workspace_bytes(q, k, causal=causal)
    if torch.cuda.get_device_capability() == (9, 0):
        assert bytes_needed > 8, "no split-KV partials for batch-1 decode on sm90"
    assert bytes_needed <= flashcore.attention_workspace_bytes(q)  # the q-only bound holds
    out, lse = fct.attention(q, k, v, causal=causal, return_lse=True)
    check_accuracy(f"split-KV decode causal={causal}", out, lse, q, k, v, causal)


@pytest.mark.gpu
def test_persistent_schedule_with_torch_workspace():
    # seqlen <= 4096 takes the sm90 persistent schedule (tile claiming through the workspace the
    # wrapper allocates from torch); the other calls run on a side stream at the same time.
    shape = (2, 1000, 1000, 8, 2, 128)
    q, k, v = _inputs("cuda", torch.bfloat16, shape)
    q2, k2, v2 = _inputs("cuda", torch.bfloat16, shape, seed=1)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    out = fct.attention(q, k, v, causal=True)
    with torch.cuda.stream(side):
        out2 = fct.attention(q2, k2, v2, causal=True)
    out3 = torch.empty_like(q)
    flashcore.attention(q, k, v, causal=True, out=out3, stream=side.cuda_stream)
    torch.cuda.synchronize()
    check_accuracy("persistent", out, None, q, k, v, causal=True)
    check_accuracy("persistent, side stream", out2, None, q2, k2, v2, causal=True)
    check_accuracy("persistent, explicit stream", out3, None, q, k, v, causal=True)


@pytest.mark.parametrize("device", DEVICES)
def test_backward_raises_clear_error_and_no_grad_runs(device):
    q, k, v = _inputs(device, DTYPES[device][-1], (1, 16, 16, 2, 2, 64))
    q.requires_grad_(True)
    out = fct.attention(q, k, v, causal=True)  # forward still runs
    with pytest.raises(NotImplementedError, match="FlashCore has no backward kernel yet"):
        out.float().sum().backward()
    with torch.no_grad():
        check_accuracy("no_grad", fct.attention(q, k, v), None, q.detach(), k, v)


@pytest.mark.parametrize("device", DEVICES)
def test_dtype_and_argument_errors(device):
    q, k, v = _inputs(device, torch.float16, (1, 16, 16, 2, 2, 64))
    cases = [
        ((q.double(), k, v), {}, r"q has dtype torch.float64, expected torch.float16"),
        ((q, k.bfloat16(), v), {}, r"dtype of k \(bf16\) does not match dtype of q \(fp16\)"),
        ((q[0], k, v), {},
         r"^q must have 4 dimensions \[batch, seqlen, heads, head_dim\], got 3 "
         r"\(shape \[16, 2, 64\]\)$"),
        ((q, k, v[0]), {"layout": "bhsd"},
         r"^v must have 4 dimensions \[batch, heads, seqlen, head_dim\], got 3 "
         r"\(shape \[16, 2, 64\]\)$"),
        ((q, k, v), {"causal": "yes"},
         r"^causal must be a bool \(True or False\), got 'yes' of type str$"),
        ((q, k, v), {"return_lse": 1},
         r"^return_lse must be a bool \(True or False\), got 1 of type int$"),
        ((q, k, v), {"softmax_scale": "a"},
         r"^softmax_scale must be None or a real number \(a finite float > 0\), got 'a'"),
        ((q, k, v), {"layout": "sbhd"}, r"layout must be one of \('bshd', 'bhsd'\), got 'sbhd'"),
        ((q, k, v), {"backend": "nope"}, r"unknown backend 'nope'"),
        ((q, k[:, :, :1].expand(1, 16, 3, 64).contiguous(),
          v[:, :, :1].expand(1, 16, 3, 64).contiguous()), {},
         r"heads_q=2 is not a multiple of heads_kv=3"),
    ]
    if device == "cuda":
        cases.append(((q.float(), k.float(), v.float()), {},
                      r"dtype fp32 of q on cuda:\d+ is only supported by the cpu and reference"))
    for args, kwargs, message in cases:
        with pytest.raises(flashcore.FlashCoreError, match=message):
            fct.attention(*args, **kwargs)
    # Wrong types are TypeErrors too, through both entry points.
    for kwargs in ({"causal": "yes"}, {"softmax_scale": "a"}, {"return_lse": None}):
        with pytest.raises(TypeError, match=next(iter(kwargs))):
            fct.attention(q, k, v, **kwargs)
        with pytest.raises(TypeError, match=next(iter(kwargs))):
            flashcore.attention(q, k, v, **kwargs)


def test_stream_with_cpu_tensors_is_refused():
    q, k, v = _inputs("cpu", torch.float32, (1, 16, 16, 2, 2, 64))
    out = torch.empty_like(q)
    for stream in (5, 0):
        with pytest.raises(flashcore.FlashCoreError,
                           match=rf"^stream must be None for host \(cpu\) arrays, got {stream}:"):
            flashcore.attention(q, k, v, out=out, stream=stream)


@pytest.mark.gpu
def test_stream_object_of_q_device_is_taken_and_its_handle_used():
    q, k, v = _inputs("cuda", torch.float16, (1, 33, 33, 4, 2, 64))
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        out = flashcore.attention(q, k, v, causal=True, stream=stream)  # the object itself
    torch.cuda.current_stream().wait_stream(stream)
    check_accuracy("stream object", out, None, q, k, v, causal=True)
    with pytest.raises(TypeError, match=r"^stream must be None, a cudaStream_t handle"):
        flashcore.attention(q, k, v, stream="default")
