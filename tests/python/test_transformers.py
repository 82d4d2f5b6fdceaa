"""flashcore.transformers end to end: a tiny Llama with random weights (no download) built with
FlashCore and with SDPA from one state_dict. Prefill and cached decode logits must be as close to
a float32 reference as SDPA's are (2x SDPA's error + slack); greedy tokens must mostly agree
(random weights make near-ties, so a rare flip is not a bug). CPU in float32 when transformers
is installed; CUDA in fp16/bf16 under the `gpu` marker."""

import copy
import json
import pathlib
import subprocess
import sys
import warnings

import pytest

torch = pytest.importorskip("torch", reason="PyTorch is not installed (CPU CI has no torch)")
transformers = pytest.importorskip("transformers", reason="transformers is not installed")

import flashcore.transformers as fctf  # noqa: E402

LOGIT_SLACK = 1e-3          # absolute slack on logits on top of 2x SDPA's error
MIN_GREEDY_AGREEMENT = 0.75  # fraction of generated tokens equal to SDPA's
PROMPT_LEN, NEW_TOKENS, BATCH = 48, 8, 2
CASES = [pytest.param("cpu", torch.float32, id="cpu-fp32"),
         pytest.param("cuda", torch.float16, id="cuda-fp16", marks=pytest.mark.gpu),
         pytest.param("cuda", torch.bfloat16, id="cuda-bf16", marks=pytest.mark.gpu)]


def _tiny_llama_config():
    return transformers.LlamaConfig(
        vocab_size=1024, hidden_size=256, intermediate_size=512, num_hidden_layers=2,
        num_attention_heads=8, num_key_value_heads=2, head_dim=64, max_position_embeddings=512,
        initializer_range=0.1)  # larger than the default 0.02: fewer near-tied logits


@pytest.fixture(scope="module")
def implementation():
    return fctf.register()


def _models(implementation, device, dtype):
    """{name: model} with identical weights; each model gets its own config (transformers stores
    attn_implementation on the config object)."""
    cfg = _tiny_llama_config()
    torch.manual_seed(0)
    base = transformers.AutoModelForCausalLM.from_config(copy.deepcopy(cfg),
                                                         attn_implementation="sdpa")
    state = base.state_dict()
    models = {}
    for name, impl, model_dtype in (("flashcore", implementation, dtype), ("sdpa", "sdpa", dtype),
                                    ("fp32", "sdpa", torch.float32)):
        model = transformers.AutoModelForCausalLM.from_config(copy.deepcopy(cfg),
                                                              attn_implementation=impl)
        model.load_state_dict(state)
        models[name] = model.to(device=device, dtype=model_dtype).eval()
    return models


def _stepwise_logits(model, prompt, tokens):
    """Logits of the prefill and of each cached decode step fed with the same `tokens`."""
    cache = transformers.DynamicCache(config=model.config)
    out = model(prompt, past_key_values=cache, use_cache=True)
    logits = [out.logits[:, -1].float()]
    for step in range(tokens.shape[1] - 1):
        out = model(tokens[:, step:step + 1], past_key_values=out.past_key_values, use_cache=True)
        logits.append(out.logits[:, -1].float())
    return torch.stack(logits, dim=1)


def _check_close(name, logits, sdpa, reference):
    error = (logits - reference).abs().max().item()
    sdpa_error = (sdpa - reference).abs().max().item()
    limit = 2 * sdpa_error + LOGIT_SLACK
    assert error <= limit, (f"{name}: max logit error vs fp32 {error:.4g} > limit {limit:.4g} "
                            f"(sdpa's error {sdpa_error:.4g})")


@pytest.mark.parametrize("device,dtype", CASES)
@torch.no_grad()
def test_prefill_and_decode_match_sdpa(implementation, device, dtype):
    models = _models(implementation, device, dtype)
    gen = torch.Generator().manual_seed(1)
    prompt = torch.randint(0, 1024, (BATCH, PROMPT_LEN), generator=gen).to(device)

    fctf._warned.clear()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        prefill = {name: m(prompt).logits.float() for name, m in models.items()}
    assert not [w for w in caught if "falls back to sdpa" in str(w.message)], "ran sdpa"
    _check_close("prefill", prefill["flashcore"], prefill["sdpa"], prefill["fp32"])

    # Decode steps (seqlen_q = 1 < seqlen_k) fed the same tokens, so logits stay comparable.
    tokens = models["sdpa"].generate(prompt, max_new_tokens=NEW_TOKENS, do_sample=False,
                                     attention_mask=torch.ones_like(prompt))[:, PROMPT_LEN:]
    steps = {name: _stepwise_logits(m, prompt, tokens) for name, m in models.items()}
    _check_close("decode", steps["flashcore"], steps["sdpa"], steps["fp32"])

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        greedy = models["flashcore"].generate(
            prompt, max_new_tokens=NEW_TOKENS, do_sample=False,
            attention_mask=torch.ones_like(prompt))[:, PROMPT_LEN:]
    assert not [w for w in caught if "falls back to sdpa" in str(w.message)], "decode ran sdpa"
    agreement = (greedy == tokens).float().mean().item()
    print(f"greedy agreement flashcore vs sdpa ({device}, {dtype}): {agreement:.3f}")
    assert agreement >= MIN_GREEDY_AGREEMENT


@pytest.mark.parametrize("device,dtype", CASES)
@torch.no_grad()
def test_padding_mask_falls_back_to_sdpa_with_a_warning(implementation, device, dtype):
    models = _models(implementation, device, dtype)
    prompt = torch.randint(0, 1024, (BATCH, 24)).to(device)
    mask = torch.ones_like(prompt)
    mask[0, :5] = 0  # left padding in one sequence
    fctf._warned.clear()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        got = models["flashcore"](prompt, attention_mask=mask).logits
    assert any("falls back to sdpa" in str(w.message) for w in caught)
    expected = models["sdpa"](prompt, attention_mask=mask).logits
    torch.testing.assert_close(got, expected)


def test_register_returns_a_name_transformers_accepts(implementation):
    assert "flash" not in implementation  # transformers 5.x loads any "*flash*" as FA kernels
    model = transformers.AutoModelForCausalLM.from_config(_tiny_llama_config(),
                                                          attn_implementation=implementation)
    assert model.config._attn_implementation == implementation
    assert fctf.register() == implementation  # idempotent


@pytest.mark.parametrize("device,dtype", [CASES[0], CASES[2]])
def test_llama_benchmark_script_runs_at_a_small_size(device, dtype, tmp_path):
    """The benchmark script end to end (all phases, --profile, a pinned SDPA backend) at a tiny
    size; its accuracy figures obey the same rule as the tests above."""
    script = pathlib.Path(__file__).resolve().parents[2] / "examples/python/benchmark_llama.py"
    out = tmp_path / "llama.json"
    dtype_flag = {torch.float32: "fp32", torch.bfloat16: "bf16"}[dtype]
    result = subprocess.run(
        [sys.executable, str(script), "--device", device, "--dtype", dtype_flag, "--layers", "2",
         "--hidden", "256", "--heads", "8", "--kv-heads", "2", "--head-dim", "64",
         "--intermediate", "512", "--vocab", "1024",
         "--prompt", "128", "--decode-steps", "6", "--iters", "2", "--profile",
         "--sdpa-backends", "math", "--out", str(out)],
        capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr
    report = json.loads(out.read_text())
    rows = report["implementations"]
    assert {"flashcore", "sdpa", "eager", "sdpa[math]"} <= set(rows)
    ours, sdpa = rows["flashcore"], rows["sdpa"]
    for key in ("prefill_logits_max_abs_err_vs_fp32", "teacher_forced"):
        assert key in ours, key
    limit = 2 * sdpa["prefill_logits_max_abs_err_vs_fp32"] + LOGIT_SLACK
    assert ours["prefill_logits_max_abs_err_vs_fp32"] <= limit
    decode_limit = 2 * sdpa["teacher_forced"]["max_abs_err_vs_fp32"] + LOGIT_SLACK
    assert ours["teacher_forced"]["max_abs_err_vs_fp32"] <= decode_limit
    assert report["teacher_forced_argmax_agreement_vs_sdpa"] >= MIN_GREEDY_AGREEMENT
    assert 0.0 <= report["greedy_token_agreement"] <= 1.0  # free-running: reported, not judged
    assert all("profile_verdict" in row for row in rows.values())
    if device == "cuda":
        assert ours["profile"]["top_cuda_kernels"], "no CUDA kernels in the profile"
