"""Config grids for bench/compare.py (pure Python: no torch needed to list them)."""
import dataclasses
import os
from dataclasses import dataclass, asdict

# BENCHMARKS.md standard grid: batch * seqlen and heads * head_dim held constant.
STANDARD_TOKENS = 16384      # batch = STANDARD_TOKENS // seqlen
STANDARD_HIDDEN = 2048       # heads = STANDARD_HIDDEN // head_dim
STANDARD_HEAD_DIMS = (64, 128, 256)
STANDARD_SEQLENS = (512, 1024, 2048, 4096, 8192, 16384)
DTYPES = ("bf16", "fp16")
# Issue 26: fp8 rows (float8_e4m3fn q/k/v with per-(batch, kv head) descales, bf16 out) are a
# grid's bf16 shapes, asked for with --dtypes fp8; no grid holds them by default.
FP8 = "fp8"
ALL_DTYPES = DTYPES + (FP8,)


@dataclass(frozen=True)
class Config:
    batch: int
    seqlen_q: int
    seqlen_k: int
    heads_q: int
    heads_kv: int
    head_dim: int
    dtype: str
    causal: bool
    name: str = ""   # a model shape's name ("llama3-8b-4k"), shown before the shape

    def describe(self):
        mask = " causal" if self.causal else ""
        shape = (f"b{self.batch} sq{self.seqlen_q} sk{self.seqlen_k} hq{self.heads_q} "
                 f"hkv{self.heads_kv} d{self.head_dim} {self.dtype}{mask}")
        return f"{self.name}: {shape}" if self.name else shape

    def visible_pairs(self):
        """(query, key) pairs one (batch, head) computes: sq * sk, or under the bottom-right
        causal mask (query i sees key j <= i + sk - sq) the exact count of visible pairs."""
        sq, sk = self.seqlen_q, self.seqlen_k
        if not self.causal:
            return sq * sk
        if sq <= sk:  # rows see sk - sq + 1 ... sk keys
            return sq * (2 * sk - sq + 1) // 2
        return sk * (sk + 1) // 2  # the first sq - sk rows see no key, the rest 1 ... sk

    def flops(self):
        """4 * b * hq * d * (query, key) pairs. BENCHMARKS.md: 4 * b * hq * sq * sk * d, halved
        when causal; that convention is kept exactly for sq == sk (where it is the visible
        pairs' count within a factor 1 + 1/sq: sq^2 / 2 against sq (sq + 1) / 2), so figures
        stay comparable with FlashAttention-3's published ones. Causal with sq != sk (chunked
        prefill, speculative decoding) counts the visible pairs exactly: halving sq * sk there
        is wrong by up to 2x (sq 4, sk 4096: every row sees about 4096 keys, not 2048)."""
        per_head = 4.0 * self.batch * self.heads_q * self.head_dim
        if self.causal and self.seqlen_q == self.seqlen_k:
            return per_head * self.seqlen_q * self.seqlen_k / 2
        return per_head * self.visible_pairs()

    def as_dict(self):
        return asdict(self)


def standard_config(seqlen, head_dim, dtype, causal):
    heads = STANDARD_HIDDEN // head_dim
    return Config(STANDARD_TOKENS // seqlen, seqlen, seqlen, heads, heads, head_dim, dtype, causal)


def extra_configs():
    """The original FlashCore config (both masks) and GQA prefill (BENCHMARKS.md)."""
    return [Config(16, 2048, 2048, 16, 16, 64, "fp16", False),
            Config(16, 2048, 2048, 16, 16, 64, "fp16", True),
            Config(1, 8192, 8192, 32, 8, 128, "bf16", True)]


# Prefill shapes of the models people run, shared with flashcore-bench's `--grid llm`: name,
# batch, seqlen_q, seqlen_k, heads_q, heads_kv, head_dim, causal (bf16: FA3's forward has no fp16).
# torch SDPA's is_causal aligns top-left, so cuDNN and FA2 are n/a on the chunked-prefill rows.
LLM_SHAPES_FILE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "llm_shapes.txt")


def read_llm_shapes(path=LLM_SHAPES_FILE):
    shapes = []
    with open(path) as f:
        for number, line in enumerate(f, 1):
            fields = line.split("#", 1)[0].split()
            if not fields:
                continue
            if len(fields) != 8:
                raise SystemExit(f"{path}:{number}: expected 8 fields, got {len(fields)}")
            name, *numbers = fields
            try:
                b, sq, sk, hq, hkv, d, causal = (int(x) for x in numbers)
            except ValueError:
                raise SystemExit(f"{path}:{number}: expected 7 integers after the name, got "
                                 f"{' '.join(numbers)!r}")
            if causal not in (0, 1):
                raise SystemExit(f"{path}:{number}: causal is 0 or 1, got {causal}")
            shapes.append((name, b, sq, sk, hq, hkv, d, bool(causal)))
    return tuple(shapes)


LLM_SHAPES = read_llm_shapes()


def llm_configs():
    return [Config(b, sq, sk, hq, hkv, d, "bf16", causal, name)
            for name, b, sq, sk, hq, hkv, d, causal in LLM_SHAPES]


def product(dtypes, head_dims, seqlens, masks):
    return [standard_config(s, d, t, c)
            for t in dtypes for d in head_dims for s in seqlens for c in masks]


# name -> (description, builder). Filters (--dtypes, --head-dims, --seqlens, --causal) apply after.
GRIDS = {
    "standard": ("BENCHMARKS.md grid (72 configs) + original FlashCore config + GQA prefill",
                 lambda: product(DTYPES, STANDARD_HEAD_DIMS, STANDARD_SEQLENS, (False, True))
                 + extra_configs()),
    "quick": ("bf16, head_dim 64/128/256, seqlen 2k and 16k, both masks + GQA prefill (13)",
              lambda: product(("bf16",), STANDARD_HEAD_DIMS, (2048, 16384), (False, True))
              + extra_configs()[2:]),
    "hd64": ("standard grid, head_dim 64 only",
             lambda: product(DTYPES, (64,), STANDARD_SEQLENS, (False, True))),
    "hd128": ("standard grid, head_dim 128 only",
              lambda: product(DTYPES, (128,), STANDARD_SEQLENS, (False, True))),
    "hd256": ("standard grid, head_dim 256 only",
              lambda: product(DTYPES, (256,), STANDARD_SEQLENS, (False, True))),
    "extra": ("original FlashCore config and GQA prefill", extra_configs),
    "llm": ("model prefill shapes: Llama-3 8B/70B, Qwen2.5-7B, MQA, Gemma-3 d256, Flux/DiT "
            "non-causal, chunked prefill sq < sk; GQA, bf16, 2k..32k (14)", llm_configs),
    # Not in BENCHMARKS.md: head_dim 96, which the sm90 kernels run padded to 128. Heads 32 as in
    # Phi-3-mini (hidden 3072; 2048 is no multiple of 96).
    "hd96": ("head_dim 96, heads 32, batch 16384/seqlen, 512..16k, both dtypes and masks (24)",
             lambda: [Config(STANDARD_TOKENS // s, s, s, 32, 32, 96, t, c)
                      for t in DTYPES for s in STANDARD_SEQLENS for c in (False, True)]),
    # Not in BENCHMARKS.md: one query row per sequence against a KV cache (decode), GQA 4:1 at
    # d128 as in Llama-3-8B. Memory-bound: TFLOPS are small, the ratios are what to read.
    "decode": ("seqlen_q 1, seqlen_k 1k/4k/16k, batch 1/16/64, hq 32 hkv 8 d128 bf16 (9)",
               lambda: [Config(b, 1, sk, 32, 8, 128, "bf16", False)
                        for b in (1, 16, 64) for sk in (1024, 4096, 16384)]),
    # Not in BENCHMARKS.md: decode of a model without GQA (Llama-2-7B: 32 heads of 128), where
    # batch 1 runs 32 tiles and splits their keys.
    "decode_mha": ("seqlen_q 1, seqlen_k 1k/4k/16k, batch 1/16, hq 32 hkv 32 d128 bf16 (6)",
                   lambda: [Config(b, 1, sk, 32, 32, 128, "bf16", False)
                            for b in (1, 16) for sk in (1024, 4096, 16384)]),
    # Not in BENCHMARKS.md: a few query rows per sequence against a KV cache (speculative
    # decoding's draft tokens, small prefill chunks), same model shape. Those calls are causal
    # (bottom-right), which SDPA cannot time (its is_causal aligns top-left), so the grid also
    # holds them unmasked: nearly the same work (every row sees all but < 16 of 4096 keys), timed
    # against cuDNN and FA2.
    "spec": ("seqlen_q 4/16, seqlen_k 4k, batch 16/64, hq 32 hkv 8 d128 bf16, both masks (8)",
             lambda: [Config(b, sq, 4096, 32, 8, 128, "bf16", c)
                      for c in (False, True) for b in (16, 64) for sq in (4, 16)]),
    # CPU-sized (the CPU backend, before any CUDA kernel exists): seconds on a laptop core.
    "tiny": ("CPU-sized: b1 h4 seqlen 256/1000 head_dim 64/128, fp16 and bf16, both masks",
             lambda: [Config(1, s, s, 4, 4, d, t, c) for t in DTYPES for d in (64, 128)
                      for s in (256, 1000) for c in (False, True)]),
}


def parse_int_list(text, flag):
    try:
        values = [int(part) for part in text.split(",") if part]
    except ValueError:
        raise SystemExit(f"{flag} expects comma-separated integers, got {text!r}")
    if not values or min(values) <= 0:
        raise SystemExit(f"{flag} expects positive integers, got {text!r}")
    return values


def shape_file_configs(path, dtypes=None):
    """The configs of a shapes file in llm_shapes.txt's format (compare.py --shapes): a user's
    own shapes in bf16, and in fp16 too when `dtypes` holds it (FA3's forward has no fp16: its
    cells say so); select_configs derives fp8 rows from the bf16 ones."""
    try:
        shapes = read_llm_shapes(path)
    except OSError as error:
        raise SystemExit(f"--shapes: cannot read {path!r}: {error.strerror}")
    if not shapes:
        raise SystemExit(f"--shapes: {path!r} holds no shape (one a line: name batch seqlen_q "
                         "seqlen_k heads_q heads_kv head_dim causal)")
    for name, b, sq, sk, hq, hkv, d, _ in shapes:
        if min(b, sq, sk, hq, hkv, d) <= 0 or hq % hkv:
            raise SystemExit(f"--shapes: {path!r}: shape {name!r} needs positive sizes and "
                             f"heads_q a multiple of heads_kv, got b{b} sq{sq} sk{sk} hq{hq} "
                             f"hkv{hkv} d{d}")
    shape_dtypes = ("bf16", "fp16") if dtypes and "fp16" in dtypes else ("bf16",)
    return [Config(b, sq, sk, hq, hkv, d, dtype, causal, name)
            for dtype in shape_dtypes for name, b, sq, sk, hq, hkv, d, causal in shapes]


def select_configs(grid, dtypes=None, head_dims=None, seqlens=None, causal="both",
                   configs=None):
    """The grid's configs (or `configs`, a shapes file's) filtered by the options; a filter
    value that leaves nothing is an error."""
    if configs is None:
        if grid not in GRIDS:
            raise SystemExit(f"--grid expects one of {', '.join(GRIDS)}, got {grid!r}")
        configs = GRIDS[grid][1]()
    if dtypes:
        fp8 = [dataclasses.replace(c, dtype=FP8) for c in configs if c.dtype == "bf16"]
        configs = [c for c in configs if c.dtype in dtypes] + (fp8 if FP8 in dtypes else [])
    if head_dims:
        configs = [c for c in configs if c.head_dim in head_dims]
    if seqlens:
        configs = [c for c in configs if c.seqlen_q in seqlens]
    if causal != "both":
        want = causal == "yes"
        configs = [c for c in configs if c.causal == want]
    if not configs:
        raise SystemExit(f"no config of grid {grid!r} is left after the filters")
    return configs
