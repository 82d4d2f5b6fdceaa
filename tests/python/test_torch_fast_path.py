"""flashcore.torch's eager fast path (the op's implementation called without the dispatcher)
gives exactly what the custom op gives, raises the same errors, and steps aside whenever the
dispatcher has work: dispatch modes, the profiler, autograd, torch.compile."""

import pytest

torch = pytest.importorskip("torch", reason="PyTorch is not installed (CPU CI has no torch)")

from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402

import flashcore.torch as fct  # noqa: E402
from flashcore import FlashCoreError  # noqa: E402

DEVICES = [pytest.param("cpu", id="cpu"),
           pytest.param("cuda", id="cuda", marks=pytest.mark.gpu)]
OP = torch.ops.flashcore.attention_forward


def _bshd(device, dtype, batch=2, seqlen_q=5, seqlen_k=9, heads_q=4, heads_kv=2, head_dim=64):
    gen = torch.Generator(device="cpu").manual_seed(1)
    make = lambda s, h: torch.randn(batch, s, h, head_dim, generator=gen).to(device, dtype)  # noqa: E731
    return make(seqlen_q, heads_q), make(seqlen_k, heads_kv), make(seqlen_k, heads_kv)


class _RecordOps(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.names = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.names.append(str(func))
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize("layout", ["bshd", "bhsd"])
@pytest.mark.parametrize("device", DEVICES)
def test_fast_path_equals_the_op_bitwise(device, layout):
    dtype = torch.float16 if device == "cuda" else torch.float32
    q, k, v = _bshd(device, dtype)
    if layout == "bhsd":
        q, k, v = (t.transpose(1, 2).contiguous() for t in (q, k, v))
    with torch.no_grad():
        out, lse = fct.attention(q, k, v, causal=True, return_lse=True, layout=layout)
        op_out, op_lse = OP(q, k, v, True, None, True, layout, "auto")
    assert out.is_contiguous() and out.shape == q.shape
    assert torch.equal(out, op_out) and torch.equal(lse, op_lse)


@pytest.mark.parametrize("device", DEVICES)
def test_transformers_entry_reads_bhsd_and_writes_contiguous_bshd(device):
    dtype = torch.float16 if device == "cuda" else torch.float32
    q, k, v = (t.transpose(1, 2) for t in _bshd(device, dtype))  # BHSD views, like transformers
    with torch.inference_mode():
        out = fct.attention_bhsd_to_bshd(q, k, v, True, 0.125)
        expected, _ = OP(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), True, 0.125,
                         False, "bshd", "auto")
    assert out.is_contiguous() and out.shape == expected.shape
    assert torch.equal(out, expected)


def test_non_contiguous_last_dim_gets_one_copy_on_the_fast_path():
    q, k, v = _bshd("cpu", torch.float32)
    strided_k = torch.empty(*k.shape, 2).select(-1, 0).copy_(k)  # last-dim stride 2
    with torch.no_grad():
        out = fct.attention(q, strided_k, v)
        expected = fct.attention(q, k, v)
    assert torch.equal(out, expected)


def test_errors_are_the_same_on_both_paths():
    q, k, v = _bshd("cpu", torch.float32)
    bad_cases = [
        (q, k.to(torch.int32), v),                 # dtype the wrapper rejects
        (q, k.to(torch.float16), v),               # dtype mismatch the library rejects
        (q, k[:, :, :1].expand(-1, -1, 3, -1), v),  # k and v shapes differ
    ]
    for args in bad_cases:
        with torch.no_grad(), pytest.raises(FlashCoreError) as fast:
            fct.attention(*args)
        with torch.no_grad(), _RecordOps(), pytest.raises(FlashCoreError) as via_op:
            fct.attention(*args)
        assert str(fast.value) == str(via_op.value)


def test_dispatch_mode_sees_the_op():
    q, k, v = _bshd("cpu", torch.float32)
    with torch.no_grad(), _RecordOps() as mode:
        fct.attention(q, k, v, causal=True)
    assert any("flashcore.attention_forward" in name for name in mode.names), mode.names


def test_profiler_records_the_op():
    q, k, v = _bshd("cpu", torch.float32)
    with torch.no_grad(), torch.profiler.profile(activities=[
            torch.profiler.ProfilerActivity.CPU]) as prof:
        fct.attention(q, k, v, causal=True)
    assert any(e.name == "flashcore::attention_forward" for e in prof.events())


def test_inputs_needing_grad_go_through_the_op_and_refuse_backward():
    q, k, v = _bshd("cpu", torch.float32)
    q.requires_grad_(True)
    out = fct.attention(q, k, v, causal=True)
    assert out.grad_fn is not None  # the op's autograd node, which refuses backward
    with pytest.raises(NotImplementedError, match="no backward kernel"):
        out.sum().backward()


def test_meta_tensors_still_get_the_fake_implementation():
    q, k, v = (t.to("meta") for t in _bshd("cpu", torch.float32))
    out, lse = fct.attention(q, k, v, causal=True, return_lse=True)
    assert out.device.type == "meta" and out.shape == q.shape
    assert lse.shape == (q.shape[0], q.shape[2], q.shape[1])
