"""The serving configs of bench/compare.py --grid serving (issue 25), and their work: FLOPs and
bytes of K/V read. Pure Python: no torch needed to list them or test them.

Three groups, each measured against what the issue asks it to match:
  varlen   ragged prefill (8192+4096+...+17+1 tokens, GQA 32/8, d128, causal) against FA3's
           flash_attn_varlen_func, and FlashCore's dense kernel on equal-length batches of the
           same number of tokens (b2 x 8192 and b8 x 2048, about the same 16k tokens), each
           also packed as a varlen call: the varlen path's own cost against the dense one's.
  decode   batch 64, 4096 keys, one query each: FlashCore's dense decode (flashcore.attention),
           its contiguous cache and paged caches at page 1, 16 and 64 (KV read rate, TB/s).
  mid      batch 16 with 8192 keys (128 tiles on 132 SMs): dense, contiguous cache, paged at 16.
  long     batch 1 with 32k keys (split-KV): dense, contiguous cache, paged at page 16 and 1.
FA3 (the fa3-fwd wheel) runs the varlen, dense and contiguous-cache rows; its paged decode needs
flash_attn3_jax (its own process): compare.py says so and skips it.
"""
from dataclasses import asdict, dataclass

from compare_grids import FP8

HEADS_Q, HEADS_KV, HEAD_DIM = 32, 8, 128
VARLEN_LENGTHS = (8192, 4096, 2048, 1024, 512, 256, 128, 64, 17, 1)
EQUAL_LENGTH_BATCHES = ((2, 8192), (8, 2048))  # (batch, seqlen): 16384 tokens, as 16337 above
DECODE_BATCH, DECODE_KEYS = 64, 4096
DECODE_PAGE_SIZES = (1, 16, 64)
MID_BATCH, MID_KEYS = 16, 8192
MID_PAGE_SIZES = (16,)
LONG_KEYS = 32768
LONG_PAGE_SIZES = (16, 1)
ELEMENT_BYTES = {"bf16": 2, "fp16": 2, "fp32": 4, "fp8": 1}
# fp8 rows: the varlen group only, beside FA3's FP8 flash_attn_varlen_func (issue 26). The cache
# rows' anchor in fp8 (FA3's kv-cache call with descales) is not set up here.
FP8_GROUPS = ("varlen",)
# The tiny grid: the same rows with every length divided by this (a CPU smoke run).
TINY_DIVISOR = 64

# How a row lays out its keys: a dense call, a varlen call, or a kv cache (contiguous or paged).
DENSE, VARLEN, CONTIGUOUS, PAGED = "dense", "varlen", "contiguous", "paged"


@dataclass(frozen=True)
class ServingConfig:
    group: str            # varlen, decode, mid, long
    layout: str           # dense, varlen, contiguous, paged
    lengths_q: tuple      # queries per sequence
    lengths_k: tuple      # keys per sequence
    dtype: str = "bf16"
    causal: bool = True
    page_size: int = 0    # paged only
    heads_q: int = HEADS_Q
    heads_kv: int = HEADS_KV
    head_dim: int = HEAD_DIM

    @property
    def batch(self):
        return len(self.lengths_q)

    def describe(self):
        if len(set(self.lengths_q)) == 1 and len(set(self.lengths_k)) == 1:
            shape = f"b{self.batch} sq{self.lengths_q[0]} sk{self.lengths_k[0]}"
        else:
            shape = f"lengths {'+'.join(map(str, self.lengths_q))}"
        layout = f"paged p{self.page_size}" if self.layout == PAGED else self.layout
        mask = " causal" if self.causal else ""
        return (f"{self.group} {layout}: {shape} hq{self.heads_q} hkv{self.heads_kv} "
                f"d{self.head_dim} {self.dtype}{mask}")

    def flops(self):
        """Sum over sequences of BENCHMARKS.md's count (compare_grids.Config.flops): 4 * hq * d
        * sq * sk, halved when causal and sq == sk, the visible pairs when causal and sq != sk."""
        total = 0.0
        for sq, sk in zip(self.lengths_q, self.lengths_k):
            if not self.causal:
                pairs = sq * sk
            elif sq == sk:
                pairs = sq * sk / 2
            elif sq <= sk:
                pairs = sq * (2 * sk - sq + 1) // 2
            else:
                pairs = sk * (sk + 1) // 2
            total += 4.0 * self.heads_q * self.head_dim * pairs
        return total

    def kv_bytes(self):
        """Bytes of K and V the call must read: every key of every sequence, once."""
        return 2 * sum(self.lengths_k) * self.heads_kv * self.head_dim * ELEMENT_BYTES[self.dtype]

    def is_decode(self):
        """Rows whose figure of merit is the KV read rate (TB/s) rather than TFLOPS."""
        return self.group in ("decode", "mid", "long")

    def as_dict(self):
        return {**asdict(self), "batch": self.batch, "describe": self.describe()}


def _scaled(lengths, divisor):
    return tuple(max(1, length // divisor) for length in lengths)


def serving_configs(dtypes=("bf16",), divisor=1):
    """Every row of the serving grid, for each dtype (fp8: FP8_GROUPS); `divisor` shrinks every
    length (the tiny grid)."""
    configs = []
    for dtype in dtypes:
        rows = []
        lengths = _scaled(VARLEN_LENGTHS, divisor)
        rows.append(ServingConfig("varlen", VARLEN, lengths, lengths, dtype))
        for batch, seqlen in EQUAL_LENGTH_BATCHES:
            (length,) = _scaled((seqlen,), divisor)
            equal = (length,) * batch
            rows.append(ServingConfig("varlen", DENSE, equal, equal, dtype))
            rows.append(ServingConfig("varlen", VARLEN, equal, equal, dtype))
        for group, batch, keys, page_sizes in (
                ("decode", DECODE_BATCH, DECODE_KEYS, DECODE_PAGE_SIZES),
                ("mid", MID_BATCH, MID_KEYS, MID_PAGE_SIZES),
                ("long", 1, LONG_KEYS, LONG_PAGE_SIZES)):
            (keys,) = _scaled((keys,), divisor)
            row = dict(group=group, lengths_q=(1,) * batch, lengths_k=(keys,) * batch,
                       dtype=dtype)
            rows.append(ServingConfig(layout=DENSE, **row))
            rows.append(ServingConfig(layout=CONTIGUOUS, **row))
            rows.extend(ServingConfig(layout=PAGED, page_size=page, **row)
                        for page in page_sizes)
        configs.extend(c for c in rows if dtype != FP8 or c.group in FP8_GROUPS)
    return configs


SERVING_GRIDS = {
    "serving": ("issue 25: varlen prefill, paged decode b64 x 4096, b16 x 8k, b1 x 32k (GPU)",
                lambda dtypes: serving_configs(dtypes)),
    "serving-tiny": (f"the serving rows with lengths / {TINY_DIVISOR} (CPU smoke run)",
                     lambda dtypes: serving_configs(dtypes, TINY_DIVISOR)),
}
