"""Continuous batching with FlashCore: a transformers Llama (random weights, no download) served by
a small loop in which requests of different lengths arrive and finish, its attention done by
flashcore.attention_varlen (prefill) and flashcore.attention_with_kvcache (decode, paged cache).

    python examples/python/continuous_batching.py                  # CPU, tiny model, a few s
    python examples/python/continuous_batching.py --device cuda    # bf16, a bigger model

Each step of the loop:
  1. admit: requests that have arrived join the running batch while the page pool can hold
     them at their longest (prompt + max_new_tokens), so no request ever waits for a page
     mid-flight; pages themselves are taken only as sequences grow.
  2. prefill the newcomers in one packed batch: their prompts back to back, cu_seqlens marking
     where each starts, one attention_varlen call per layer (causal per sequence). Their K/V go
     into the paged cache by a direct scatter (slot = page * page_size + offset, vLLM's
     slot_mapping): the prompt's attention needs no cache, so the append path would only add a
     second read of what varlen already has. `--prefill append` instead runs each layer's prefill
     as one attention_with_kvcache call with a packed q and cache_seqlens = 0, which writes the
     prompt's K/V into the pages and attends over them (the chunked-prefill path).
  3. decode every running request by one token: one attention_with_kvcache call per layer on
     q [batch, 1, heads, d] that appends the new token's K/V at cache_seqlens[b] (in place) and
     attends over the pages in page_table[b]. The call does not change cache_seqlens; the loop
     advances it once per step, after the last layer.
  4. retire requests that reached max_new_tokens; their pages go back to the free list.

The cache starts filled with NaN: pages not in a sequence's table and slots past its length are
never read, so any NaN in an output would show a read out of bounds.

The check: every request's greedy tokens equal those of the same HF model run on that request
alone with its own dense eager attention and DynamicCache. On CPU (float32) the tokens must be
identical. In bf16/fp16 the two paths round differently (attention kernel, GEMM shapes), and a
near-tie between the top two logits of a random model can flip: where the tokens differ, the
check runs the reference on the served sequence (teacher forcing) and accepts a token only when
the reference's logit for it is within --tie-tolerance (a fraction of the logits' scale; default
4 epsilons of the dtype) of its best logit; the report counts them.
"""

import argparse
import dataclasses
import random
import time

import torch
import transformers
from transformers.models.llama.modeling_llama import rotate_half

import flashcore

# A near-tie, as a fraction of the logits' scale: 4 machine epsilons of the dtype (bf16: 3.1%,
# fp16: 0.4%). Rounding differences of two paths through a few layers stay around 1 eps; a wrong
# page or position gives a token the reference ranks far below its best.
TIE_EPSILONS = 4


def model_config(device):
    """Tiny on CPU (runs in seconds); on CUDA a model large enough to use the GPU. Weights
    spread wider than the default 0.02 give fewer near-tied logits."""
    if device == "cpu":
        return transformers.LlamaConfig(
            vocab_size=512, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
            num_attention_heads=4, num_key_value_heads=2, head_dim=16,
            max_position_embeddings=1024, initializer_range=0.1)
    return transformers.LlamaConfig(
        vocab_size=2048, hidden_size=1024, intermediate_size=2816, num_hidden_layers=4,
        num_attention_heads=16, num_key_value_heads=4, head_dim=64,
        max_position_embeddings=4096, initializer_range=0.05)


@dataclasses.dataclass
class Request:
    rid: int
    prompt: list
    max_new_tokens: int
    arrival_step: int
    tokens: list = dataclasses.field(default_factory=list)  # generated so far
    pages: list = dataclasses.field(default_factory=list)   # page indices, in token order
    cached: int = 0  # tokens whose K/V are in the cache (the loop's cache_seqlens)

    @property
    def max_length(self):
        return len(self.prompt) + self.max_new_tokens


def make_requests(count, max_prompt, max_new, seed):
    """Prompts of 1..max_prompt tokens and 1..max_new new tokens, arriving 0-2 steps apart."""
    rng = random.Random(seed)
    requests, step = [], 0
    for rid in range(count):
        prompt = [rng.randrange(1, 512) for _ in range(rng.randint(1, max_prompt))]  # any vocab
        requests.append(Request(rid, prompt, rng.randint(1, max_new), step))
        step += rng.randint(0, 2)
    return requests


class PagePool:
    """The paged KV cache of every layer, k/v [layers, num_pages, page_size, heads_kv, d], and
    its free list. A sequence owns the pages in `Request.pages`; token t lives in page
    pages[t // page_size], slot t % page_size."""

    def __init__(self, config, num_pages, page_size, dtype, device):
        shape = (config.num_hidden_layers, num_pages, page_size, config.num_key_value_heads,
                 config.head_dim)
        self.k = torch.full(shape, float("nan"), dtype=dtype, device=device)
        self.v = torch.full(shape, float("nan"), dtype=dtype, device=device)
        self.page_size = page_size
        self.free = list(range(num_pages - 1, -1, -1))  # a stack: pop() takes page 0 first
        self.in_use = self.peak = 0

    def pages_for(self, length):
        return -(-length // self.page_size)

    def can_admit(self, running, request):
        """Whether `request` fits once every running request has grown to its longest."""
        promised = sum(self.pages_for(r.max_length) - len(r.pages) for r in running)
        return len(self.free) - promised >= self.pages_for(request.max_length)

    def grow(self, request, length):
        """Gives `request` pages until it can hold `length` tokens."""
        while len(request.pages) * self.page_size < length:
            request.pages.append(self.free.pop())
            self.in_use += 1
        self.peak = max(self.peak, self.in_use)

    def release(self, request):
        self.free.extend(reversed(request.pages))
        self.in_use -= len(request.pages)
        request.pages = []

    def page_table(self, requests, device):
        """int32 [batch, max_pages]; entries past a sequence's pages are never read (0 here)."""
        width = max(len(r.pages) for r in requests)
        rows = [r.pages + [0] * (width - len(r.pages)) for r in requests]
        return torch.tensor(rows, dtype=torch.int32).to(device)

    def slots(self, request, start, stop):
        """Flat slot index (page * page_size + offset) of tokens start..stop of `request`."""
        return [request.pages[t // self.page_size] * self.page_size + t % self.page_size
                for t in range(start, stop)]


class FlashCoreLlama:
    """The forward of a transformers LlamaForCausalLM written out over its modules (embedding,
    RMSNorm, q/k/v/o projections, rotary embedding, MLP, lm_head) on packed tokens [T, ...],
    with the attention left to a callback: FlashCore's serving calls do it."""

    def __init__(self, model):
        self.model = model
        config = model.config
        self.heads_q, self.heads_kv = config.num_attention_heads, config.num_key_value_heads
        self.head_dim = config.head_dim

    def forward(self, tokens, positions, attend, rows=None):
        """Logits [T, vocab] of tokens [T] at positions [T] (only `rows` of them when given);
        attend(layer, q, k, v) gets q [T, heads_q, d] and k, v [T, heads_kv, d] after the rotary
        embedding, returns like q."""
        inner = self.model.model
        hidden = inner.embed_tokens(tokens)
        cos, sin = inner.rotary_emb(hidden, positions[None])
        cos, sin = cos[0, :, None, :], sin[0, :, None, :]  # [T, 1, d]: broadcast over heads
        count = tokens.shape[0]
        for index, layer in enumerate(inner.layers):
            attn = layer.self_attn
            x = layer.input_layernorm(hidden)
            q = attn.q_proj(x).view(count, self.heads_q, self.head_dim)
            k = attn.k_proj(x).view(count, self.heads_kv, self.head_dim)
            v = attn.v_proj(x).view(count, self.heads_kv, self.head_dim)
            q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
            out = attend(index, q, k, v)
            hidden = hidden + attn.o_proj(out.reshape(count, -1))
            hidden = hidden + layer.mlp(layer.post_attention_layernorm(hidden))
        if rows is not None:
            hidden = hidden[rows]
        return self.model.lm_head(inner.norm(hidden))


def prefill(llama, pool, newcomers, mode, device):
    """Runs the newcomers' prompts as one packed batch; returns each one's first token."""
    lengths = [len(r.prompt) for r in newcomers]
    for request in newcomers:
        pool.grow(request, len(request.prompt))
    tokens = torch.tensor([t for r in newcomers for t in r.prompt], device=device)
    positions = torch.cat([torch.arange(n, device=device) for n in lengths])
    cu_list = [0]
    for n in lengths:
        cu_list.append(cu_list[-1] + n)
    cu_seqlens = torch.tensor(cu_list, dtype=torch.int32, device=device)
    longest = max(lengths)
    if mode == "varlen":
        slots = torch.tensor([s for r in newcomers for s in pool.slots(r, 0, len(r.prompt))],
                             device=device)

        def attend(layer, q, k, v):
            out = flashcore.attention_varlen(q, k, v, cu_seqlens, cu_seqlens, longest, longest,
                                             causal=True)
            k_flat = pool.k[layer].view(-1, llama.heads_kv, llama.head_dim)  # pages as slots
            v_flat = pool.v[layer].view(-1, llama.heads_kv, llama.head_dim)
            k_flat[slots], v_flat[slots] = k, v
            return out
    else:  # append: the call writes the prompt's K/V into the pages, then attends over them
        page_table = pool.page_table(newcomers, device)
        empty = torch.zeros(len(newcomers), dtype=torch.int32, device=device)

        def attend(layer, q, k, v):
            return flashcore.attention_with_kvcache(
                q, pool.k[layer], pool.v[layer], empty, page_table=page_table, k=k, v=v,
                cu_seqlens_q=cu_seqlens, max_seqlen_q=longest, causal=True)

    logits = llama.forward(tokens, positions, attend, rows=cu_seqlens[1:].long() - 1)
    for request in newcomers:
        request.cached = len(request.prompt)
    return logits.argmax(-1).tolist()  # the next token after each prompt's last one


def decode(llama, pool, running, device):
    """One token for every running request: each feeds its last token, whose K/V the call
    appends at cache_seqlens[b]; returns the next tokens."""
    for request in running:
        pool.grow(request, request.cached + 1)
    tokens = torch.tensor([r.tokens[-1] for r in running], device=device)
    cache_seqlens = torch.tensor([r.cached for r in running], dtype=torch.int32, device=device)
    positions = cache_seqlens.long()  # the new token's position is the cache's length
    page_table = pool.page_table(running, device)
    batch = len(running)

    def attend(layer, q, k, v):
        out = flashcore.attention_with_kvcache(
            q[:, None], pool.k[layer], pool.v[layer], cache_seqlens, page_table=page_table,
            k=k[:, None], v=v[:, None], causal=True)
        return out.view(batch, llama.heads_q, llama.head_dim)

    logits = llama.forward(tokens, positions, attend)
    for request in running:  # the loop, not the call, advances cache_seqlens
        request.cached += 1
    return logits.argmax(-1).tolist()


def serve(llama, pool, requests, max_batch, prefill_mode, device):
    """The continuous-batching loop; fills each Request's tokens. Returns the step count and
    the steps at which an arrived request had to wait for pages."""
    waiting, running, step, page_waits = list(requests), [], 0, 0
    while waiting or running:
        newcomers = []
        while (waiting and waiting[0].arrival_step <= step
               and len(running) + len(newcomers) < max_batch):
            if not pool.can_admit(running + newcomers, waiting[0]):
                page_waits += 1
                break
            newcomers.append(waiting.pop(0))
        if newcomers:
            for request, token in zip(newcomers, prefill(llama, pool, newcomers, prefill_mode,
                                                         device)):
                request.tokens.append(token)
            running += newcomers
        running = retire(pool, running)
        if running:
            for request, token in zip(running, decode(llama, pool, running, device)):
                request.tokens.append(token)
            running = retire(pool, running)
        step += 1
    return step, page_waits


def retire(pool, running):
    for request in running:
        if len(request.tokens) >= request.max_new_tokens:
            pool.release(request)
    return [r for r in running if len(r.tokens) < r.max_new_tokens]


def _cache_argument(output):
    """The model output's KV cache as the keyword the next call takes: `cache` in the pinned
    transformers (requirements-torch.txt), `past_key_values` in other releases (the
    GPU machines' image has one)."""
    cache = getattr(output, "cache", None)
    if cache is not None:
        return {"cache": cache}
    return {"past_key_values": output.past_key_values}


def reference_tokens(model, request, device):
    """Greedy tokens of the HF model on this request alone: its own eager attention and cache."""
    ids = torch.tensor([request.prompt], device=device)
    output = model(input_ids=ids, use_cache=True)
    tokens = []
    while True:
        tokens.append(int(output.logits[0, -1].argmax()))
        if len(tokens) == request.max_new_tokens:
            return tokens
        output = model(input_ids=torch.tensor([[tokens[-1]]], device=device), use_cache=True,
                       **_cache_argument(output))


def near_ties(model, request, tolerance, device):
    """Teacher forcing: the reference on prompt + served tokens. Returns the number of served
    tokens that differ from the reference's argmax and the largest such gap (a fraction of the
    logits' scale), or None if any gap exceeds `tolerance`."""
    sequence = request.prompt + request.tokens[:-1]
    logits = model(input_ids=torch.tensor([sequence], device=device)).logits[0].float()
    logits = logits[len(request.prompt) - 1:]  # row i predicts served token i
    served = torch.tensor(request.tokens, device=device)
    gaps = logits.max(-1).values - logits.gather(-1, served[:, None])[:, 0]
    scale = logits.abs().max()
    worst = float(gaps.max() / scale)
    return None if worst > tolerance else (int((gaps > 0).sum()), worst)


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument("--dtype", choices=("auto", "float32", "bfloat16", "float16"),
                        default="auto", help="auto: float32 on CPU, bfloat16 on CUDA")
    parser.add_argument("--requests", type=int, default=None, help="default 8 (CPU), 32 (CUDA)")
    parser.add_argument("--max-prompt", type=int, default=None, help="default 40 / 512")
    parser.add_argument("--max-new", type=int, default=None, help="default 24 / 64")
    parser.add_argument("--max-batch", type=int, default=None, help="default 4 / 16")
    parser.add_argument("--page-size", type=int, default=16)
    parser.add_argument("--num-pages", type=int, default=None,
                        help="default: max-batch requests at their longest")
    parser.add_argument("--prefill", choices=("varlen", "append"), default="varlen")
    parser.add_argument("--tie-tolerance", type=float, default=None,
                        help="bf16/fp16 only; default 4 epsilons of the dtype")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    cpu = args.device == "cpu"
    for name, cpu_value, cuda_value in (("requests", 8, 32), ("max_prompt", 40, 512),
                                        ("max_new", 24, 64), ("max_batch", 4, 16)):
        if getattr(args, name) is None:
            setattr(args, name, cpu_value if cpu else cuda_value)
    if args.dtype == "auto":
        args.dtype = "float32" if cpu else "bfloat16"
    return args


def check(model, requests, dtype, tolerance, device):
    """Compares every request with the reference. Returns (identical requests, near-tied tokens,
    worst near-tie gap, [(rid, served, reference)] of requests that fail)."""
    exact, ties, worst_gap, bad = 0, 0, 0.0, []
    for request in requests:
        expected = reference_tokens(model, request, device)
        if expected == request.tokens:
            exact += 1
            continue
        tied = None if dtype == torch.float32 else near_ties(model, request, tolerance, device)
        if tied is None:
            bad.append((request.rid, request.tokens, expected))
        else:
            ties, worst_gap = ties + tied[0], max(worst_gap, tied[1])
    return exact, ties, worst_gap, bad


def print_report(args, config, requests, report):
    prompts = [len(r.prompt) for r in requests]
    new = [r.max_new_tokens for r in requests]
    print(f"device {args.device} {args.dtype}, {config.num_hidden_layers} layers, heads "
          f"{config.num_attention_heads}/{config.num_key_value_heads}, head_dim "
          f"{config.head_dim}; page_size {args.page_size}, prefill {args.prefill}")
    print(f"requests {len(requests)} (prompts {min(prompts)}-{max(prompts)} tokens, new "
          f"{min(new)}-{max(new)}), steps {report['steps']}, generated {report['generated']} "
          f"tokens in {report['seconds']:.3f} s ({report['tokens_per_s']:.0f} tokens/s)")
    print(f"pages used peak {report['pages_peak']} of {report['num_pages']} (page_size "
          f"{args.page_size}); steps a request waited for pages: {report['page_waits']}; all "
          f"returned: {report['pages_returned']}")
    bad = report["mismatches"]
    detail = f"{report['exact']}/{len(requests)} requests identical"
    diverged = len(requests) - report["exact"] - len(bad)
    if diverged:
        detail += (f"; {diverged} diverge from the reference's own run, and fed their served "
                   f"tokens the reference ranks every one first except {report['near_ties']} "
                   f"near-ties (logit gaps up to {report['worst_gap']:.2%} of the logits' scale)")
    if bad:
        detail += f"; {len(bad)} requests differ beyond a near-tie"
    print(f"tokens match: {'NO' if bad else 'yes'} ({detail})")
    for rid, served, expected in bad:
        print(f"  request {rid}: served {served}\n  reference  {expected}")


def main(argv=None):
    """Serves, checks, prints the report; returns it as a dict (tokens_match: bool)."""
    args = parse_args(argv)
    device, dtype = torch.device(args.device), getattr(torch, args.dtype)
    tolerance = args.tie_tolerance or TIE_EPSILONS * torch.finfo(dtype).eps
    torch.manual_seed(args.seed)
    config = model_config(args.device)
    model = transformers.LlamaForCausalLM(config).to(device=device, dtype=dtype).eval()
    model.set_attn_implementation("eager")  # the reference: HF's own dense eager attention
    llama = FlashCoreLlama(model)
    requests = make_requests(args.requests, args.max_prompt, args.max_new, args.seed)
    longest = max(r.max_length for r in requests)
    num_pages = args.num_pages or args.max_batch * -(-longest // args.page_size)
    if num_pages * args.page_size < longest:
        raise SystemExit(f"--num-pages {num_pages} x --page-size {args.page_size} cannot hold "
                         f"the longest request ({longest} tokens)")
    pool = PagePool(config, num_pages, args.page_size, dtype, device)

    with torch.inference_mode():
        if device.type == "cuda":  # first calls (cuBLAS handles, allocator) out of the timing
            warmup = make_requests(2, 8, 2, args.seed + 1)
            serve(llama, PagePool(config, 4, 16, dtype, device), warmup, 2, args.prefill, device)
            torch.cuda.synchronize()
        start = time.perf_counter()
        steps, page_waits = serve(llama, pool, requests, args.max_batch, args.prefill, device)
        if device.type == "cuda":
            torch.cuda.synchronize()
        seconds = time.perf_counter() - start
        exact, ties, worst_gap, bad = check(model, requests, dtype, tolerance, device)

    generated = sum(len(r.tokens) for r in requests)
    report = dict(requests=len(requests), steps=steps, generated=generated, seconds=seconds,
                  tokens_per_s=generated / seconds, pages_peak=pool.peak, num_pages=num_pages,
                  pages_returned=pool.in_use == 0, page_waits=page_waits, exact=exact,
                  near_ties=ties, worst_gap=worst_gap, mismatches=bad, tokens_match=not bad)
    print_report(args, config, requests, report)
    return report


if __name__ == "__main__":
    raise SystemExit(0 if main()["tokens_match"] else 1)
