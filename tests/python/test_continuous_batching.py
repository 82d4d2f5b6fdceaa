"""examples/python/continuous_batching.py as a test: a tiny transformers Llama served by the
continuous-batching loop (prefill through attention_varlen or the kv-cache append, decode through
attention_with_kvcache on a NaN-filled paged cache) gives every request the greedy tokens of the
same HF model run on that request alone with dense eager attention. CPU float32: identical
tokens. CUDA (`gpu` marker): bf16 and fp16, where a token may differ only at a near-tie of the
reference's logits (the example's check)."""

import importlib.util
import pathlib

import pytest

pytest.importorskip("torch", reason="PyTorch is not installed (CPU CI has no torch)")
pytest.importorskip("transformers", reason="transformers is not installed")

EXAMPLE = (pathlib.Path(__file__).resolve().parents[2] / "examples" / "python"
           / "continuous_batching.py")


@pytest.fixture(scope="module")
def example():
    spec = importlib.util.spec_from_file_location("continuous_batching", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _check(report, requests):
    assert report["tokens_match"], f"requests whose tokens differ: {report['mismatches']}"
    assert report["requests"] == requests
    assert report["pages_returned"], "pages still in use after every request finished"
    assert 0 < report["pages_peak"] <= report["num_pages"]


# Page size 1 is SGLang's token table, 16 vLLM's blocks, 5 a size that divides nothing. The last
# case's pool (24 pages of 5 slots; the longest request needs 9) holds few requests at their
# longest: newcomers wait for pages, then get the ones finished requests returned.
@pytest.mark.parametrize("page_size,prefill,num_pages", [
    (1, "varlen", None), (16, "varlen", None), (16, "append", None), (5, "append", 24)])
def test_cpu_tokens_match(example, capsys, page_size, prefill, num_pages):
    args = ["--device", "cpu", "--requests", "10", "--page-size", str(page_size), "--prefill",
            prefill, "--seed", "1"]
    report = example.main(args + (["--num-pages", str(num_pages)] if num_pages else []))
    _check(report, 10)
    assert report["exact"] == 10  # float32 on CPU: every request identical, no near-tie allowed
    if num_pages:
        assert report["page_waits"] > 0, "the small pool never made a request wait"
    assert "tokens match: yes" in capsys.readouterr().out


@pytest.mark.gpu
@pytest.mark.parametrize("dtype,page_size,prefill", [
    ("bfloat16", 1, "varlen"), ("bfloat16", 16, "varlen"), ("bfloat16", 64, "append"),
    ("float16", 16, "varlen")])
def test_cuda_tokens_match(example, dtype, page_size, prefill):
    report = example.main(["--device", "cuda", "--dtype", dtype, "--requests", "12",
                           "--max-prompt", "300", "--max-new", "32", "--page-size",
                           str(page_size), "--prefill", prefill])
    _check(report, 12)
