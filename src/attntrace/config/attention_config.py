"""AttentionConfig: the sizes of one multi-head attention, validated once, here.

Axis letters used everywhere in attntrace (code comments, step records, tables, docs):

    B batch   S query length   N key length   H hidden   M key/value input width
    h heads   g kv-heads       d head_dim

N, M and g appear only when their variant is on (cross-attention, --kv-hidden, grouped-query
attention); otherwise keys run along S, the key/value input is H wide and there are h kv-heads.
Two compound labels name widths that are products, ``h·d`` and ``g·d`` (used only where they
differ from H), and ``1`` names a broadcast axis of a mask.
"""

from __future__ import annotations

import math
import re
from dataclasses import asdict, dataclass
from dataclasses import fields as dataclass_fields
from typing import Any, NamedTuple

from attntrace.config.parallel_layout import ParallelLayout
from attntrace.config.variants import parse_relative_bias, parse_rope_scaling
from attntrace.errors import ConfigError

#: Bytes per element of every dtype attntrace knows; backends support a subset.
DTYPE_BYTES: dict[str, int] = {"float16": 2, "bfloat16": 2, "float32": 4, "float64": 8}
#: Bytes per element of a KV cache: the compute dtypes, and float8 (e4m3/e5m2), which servers
#: store the cache in but attntrace does not compute in.
CACHE_DTYPE_BYTES: dict[str, int] = {**DTYPE_BYTES, "float8": 1}
#: The dtype of boolean masks (a mask step), which is no compute dtype.
MASK_DTYPE = "bool"
#: Bytes per element of every tensor a trace can record.
ELEMENT_BYTES: dict[str, int] = {**DTYPE_BYTES, MASK_DTYPE: 1, "int32": 4}  # int32: a block table


class AxisLabels(NamedTuple):
    """The labels a config gives to the axes that variants change."""

    keys: str  # "N" for cross-attention (--kv-seq), else "S"
    kv_heads: str  # "g" for grouped-query attention, else "h"
    kv_in: str  # "M" with --kv-hidden, else "H"
    q_width: str  # width of q_proj and merged: "H" when h·d = H, else "h·d"
    kv_width: str  # width of k_proj and v_proj: "H" when it equals H, else "h·d" or "g·d"


#: Fields that :meth:`AttentionConfig.to_dict` leaves out while they have their default (off).
OPTIONAL_FIELDS: tuple[str, ...] = (
    "window",
    "rope_scaling",
    "rotary_dims",
    "softcap",
    "qk_norm",
    "qk_norm_eps",
    "relative_bias",
    "rope_style",
    "past",
    "parallel",
)

#: How RoPE pairs the dimensions of a head: half rotates i with i + d/2 (Hugging Face's
#: rotate_half, GPT-NeoX), interleaved rotates 2i with 2i + 1 (Meta's Llama code, GPT-J).
ROPE_STYLES: tuple[str, ...] = ("half", "interleaved")

#: The largest size any axis may have (2**31 - 1): far beyond every model, and small enough that
#: every count derived from the sizes stays exact and every suggestion is computed at once.
MAX_SIZE = 2**31 - 1

#: The attention algorithms: eager builds the whole (S, N) score matrix, flash works tile by tile.
ALGORITHMS: tuple[str, ...] = ("eager", "flash")

#: flash's default tiles (no --block-size): query blocks of QUERY_BLOCK rows, key blocks as many
#: QUERY_BLOCK-multiples wide as fit one (B, h, Br, Bc) tile of TILE_BYTES (all the keys when
#: they fit): fewer, larger tiles than Br = Bc = 128, each still cache-sized (docs/benchmarks.md).
QUERY_BLOCK = 128
TILE_BYTES = 2 << 20


@dataclass(frozen=True)
class AttentionConfig:
    """Sizes and options of one multi-head attention.

    >>> cfg = AttentionConfig(seq=3, hidden=768, heads=12)
    >>> cfg.head_dim
    64
    >>> cfg.axis_sizes()
    {'S': 3, 'H': 768, 'h': 12, 'd': 64}
    >>> gqa = AttentionConfig(seq=3, hidden=4096, heads=32, kv_heads=8, kv_seq=5)
    >>> gqa.axis_sizes()
    {'S': 3, 'N': 5, 'H': 4096, 'h': 32, 'g': 8, 'd': 128}
    >>> gqa.kv_cache_bytes_per_token  # 2 (k and v) * g * d * 4 bytes, per layer
    8192
    """

    batch: int | None = None  # B; None means the unbatched layout (S, H) of the study notes
    seq: int = 3  # S, tokens in the (query) sequence
    hidden: int = 768  # H, model width; must be heads * head_dim unless head_dim_override is set
    heads: int = 12  # h, attention heads
    dtype: str = "float32"  # one of DTYPE_BYTES
    seed: int = 0  # the same seed gives the same x and weights on every backend
    # --- variants (issue 5); the defaults give plain multi-head self-attention ---
    kv_seq: int | None = (
        None  # N, key/value length of cross-attention; None: self-attention (N = S)
    )
    kv_hidden: int | None = None  # M, key/value input width (kdim/vdim); None: H
    kv_heads: int | None = None  # g, key/value heads (GQA; 1 is MQA); None: h
    head_dim_override: int | None = None  # d when decoupled from H / h (T5, Gemma); None: H / h
    bias: bool = True  # False: no b_q, b_k, b_v, b_o (Llama, T5)
    causal: bool = False  # query i attends keys 0..i (top-left aligned, as SDPA's is_causal)
    key_lengths: tuple[int, ...] | None = None  # valid keys per batch item (key padding mask)
    rope: bool = False  # rotary position embedding on q and k (pairs: rope_style)
    rope_base: float = 10000.0  # theta of RoPE (rope_theta in a config.json)
    algorithm: str = "eager"  # one of ALGORITHMS: eager (the S×S matrix) or flash (tile by tile)
    block_size: int | None = None  # flash: Br = Bc = block_size; None: tile_sizes() chooses
    # factor on the scores; None (or "sqrt") is 1/sqrt(d) (the paper), 1.0 (or "none") none
    # (the notes): the words of --scale are read into those values
    scale: float | None = None
    # --- variants of current models (issue 12); to_dict leaves them out while they are off ---
    window: int | None = None  # W, sliding window: query i sees keys j > i - W (Mistral, Gemma 2)
    rope_scaling: str | None = None  # "llama3", "linear:factor=8", "yarn:factor=4,..." (rope.py)
    rotary_dims: int | None = None  # R < d: only the first R dims of a head rotate (NeoX, Phi)
    softcap: float | None = None  # C: scores -> C * tanh(scores / C) before the mask (Gemma 2)
    qk_norm: str | None = None  # RMSNorm of q, k: "head" (over d: Qwen3, Gemma 3), "full" (OLMo 2)
    qk_norm_eps: float | None = None  # epsilon of --qk-norm (rms_norm_eps); None: 1e-6
    relative_bias: str | None = None  # T5: "BUCKETS,MAX_DISTANCE[,causal]", a bias per bucket
    rope_style: str = "half"  # one of ROPE_STYLES: pairs (i, i + d/2) or (2i, 2i + 1)
    # --- the serving view (issue 34) ---
    past: int = 0  # N, tokens already in the KV cache: the S new tokens sit at N..N+S-1
    # --- across devices (issue 43): --tp, --sp, --cp, --cp-kind; None: one device ---
    parallel: ParallelLayout | None = None

    def __post_init__(self) -> None:
        if self.key_lengths is not None and not isinstance(self.key_lengths, tuple):
            object.__setattr__(
                self, "key_lengths", tuple(self.key_lengths)
            )  # keep the config hashable
        self._check_sizes()
        if isinstance(self.scale, str):  # the words of --scale: "sqrt", "none"
            object.__setattr__(self, "scale", parse_scale(self.scale))
        if self.scale is not None and (
            isinstance(self.scale, bool)
            or not isinstance(self.scale, int | float)
            or not math.isfinite(self.scale)
            or self.scale <= 0
        ):
            raise ConfigError(
                f"--scale must be a positive number, 'sqrt' or 'none', got {self.scale!r}"
            )
        if self.dtype not in DTYPE_BYTES:
            raise ConfigError(f"unknown dtype {self.dtype!r}; use one of {', '.join(DTYPE_BYTES)}")
        self._check_algorithm()
        if self.head_dim_override is None and self.hidden % self.heads:
            raise ConfigError(
                f"--hidden {self.hidden} is not divisible by --heads {self.heads}; "
                f"valid head counts for hidden {self.hidden}: "
                f"{_nearby_divisors(self.hidden, self.heads)} "
                "(or set --head-dim)"
            )
        self._check_past()
        self._check_variants()
        self._check_model_variants()
        if self.parallel is not None:
            if not isinstance(self.parallel, ParallelLayout):
                raise ConfigError(f"parallel must be a ParallelLayout, got {self.parallel!r}")
            self.parallel.check(self)

    def _check_past(self) -> None:
        """--past N: a decode (or chunked prefill) step of self-attention against a cache."""
        n = self.past
        if isinstance(n, bool) or not isinstance(n, int) or not 0 <= n <= MAX_SIZE - self.seq:
            raise ConfigError(
                f"--past must be a whole number from 0 to {MAX_SIZE - self.seq} "
                f"(tokens already in the KV cache), got {_short(n)}"
            )
        if n and self.cross:
            raise ConfigError(
                "--past caches the keys of self-attention; drop --kv-seq/--kv-hidden "
                "(cross-attention reads its encoder keys whole)"
            )

    def _check_model_variants(self) -> None:
        """The variants of current models (issue 12): --window, RoPE's scaling and rotary
        dims, --softcap."""
        w, r, c = self.window, self.rotary_dims, self.softcap
        if w is not None and (isinstance(w, bool) or not isinstance(w, int) or w < 1):
            raise ConfigError(f"--window must be a whole number >= 1 (keys per query), got {w!r}")
        if (self.rope_scaling is not None or r is not None) and not self.rope:
            raise ConfigError("--rope-scaling and --rotary-dims change RoPE; add --rope")
        if self.rope_style not in ROPE_STYLES:
            raise ConfigError(f"--rope-style must be half or interleaved, got {self.rope_style!r}")
        if self.rope_style != "half" and not self.rope:
            raise ConfigError("--rope-style interleaved pairs the dims RoPE rotates; add --rope")
        if self.rope_scaling is not None:
            parse_rope_scaling(self.rope_scaling)
        if r is not None and (
            isinstance(r, bool) or not isinstance(r, int) or r < 2 or r % 2 or r > self.head_dim
        ):
            raise ConfigError(f"--rotary-dims must be even, 2 to d = {self.head_dim}; got {r!r}")
        if c is not None and (
            isinstance(c, bool) or not isinstance(c, int | float) or not math.isfinite(c) or c <= 0
        ):
            raise ConfigError(f"--softcap must be a number > 0, got {c!r}")
        if self.qk_norm not in (None, "head", "full"):
            raise ConfigError(f"--qk-norm must be head or full, got {self.qk_norm!r}")
        if self.relative_bias is not None:
            parse_relative_bias(self.relative_bias)

    def _check_sizes(self) -> None:
        for option, value in (
            ("batch", self.batch),
            ("seq", self.seq),
            ("hidden", self.hidden),
            ("heads", self.heads),
            ("kv-seq", self.kv_seq),
            ("kv-hidden", self.kv_hidden),
            ("kv-heads", self.kv_heads),
            ("head-dim", self.head_dim_override),
        ):
            if value is None and option not in ("seq", "hidden", "heads"):
                continue
            if isinstance(value, bool) or not isinstance(value, int):
                raise ConfigError(f"--{option} must be a whole number, got {value!r}")
            if value <= 0:
                hint = " (omit --batch for the unbatched layout)" if option == "batch" else ""
                raise ConfigError(f"--{option} must be at least 1, got {value}{hint}")
            if value > MAX_SIZE:
                raise ConfigError(
                    f"--{option} {_short(value)} is too large; the most is {MAX_SIZE}"
                )
        if (
            isinstance(self.seed, bool)
            or not isinstance(self.seed, int)
            or not 0 <= self.seed < 2**64
        ):
            raise ConfigError(
                f"--seed must be a whole number from 0 to 2**64 - 1, got {_short(self.seed)}"
            )

    def _check_variants(self) -> None:
        if self.kv_heads is not None and self.heads % self.kv_heads:
            raise ConfigError(
                f"--heads {self.heads} is not divisible by --kv-heads {self.kv_heads}; "
                f"use one of {', '.join(str(n) for n in _divisors(self.heads))}"
            )
        if self.key_lengths is not None:
            self._check_key_lengths(self.key_lengths)
        if self.rope:
            if self.head_dim % 2:
                raise ConfigError(
                    f"--rope needs an even head_dim, got d = {self.head_dim}; "
                    "choose --hidden/--heads (or --head-dim) so that d is even"
                )
            if self.kv_seq is not None:
                raise ConfigError(
                    "--rope encodes positions within one sequence; drop --rope or --kv-seq "
                    "(cross-attention uses no rotary embedding)"
                )
        base = self.rope_base
        if not isinstance(base, int | float) or isinstance(base, bool) or not 0 < base < math.inf:
            raise ConfigError(f"--rope-base must be a number > 0 and finite, got {_short(base)}")

    def _check_key_lengths(self, lengths: tuple[int, ...]) -> None:
        if self.batch is None:
            raise ConfigError("--key-lengths needs --batch (one length per batch item)")
        if len(lengths) != self.batch:
            raise ConfigError(
                f"--key-lengths has {len(lengths)} length(s) but --batch is {self.batch}; "
                "give one length per batch item, e.g. --key-lengths "
                + ",".join(["3"] * min(self.batch, 4))
                + (",..." if self.batch > 4 else "")
            )
        for n in lengths:
            top = self.kv_seq if self.kv_seq is not None else self.positions
            if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= top:
                raise ConfigError(
                    f"--key-lengths {_short(n)} does not fit the {top} keys; "
                    f"use lengths from 1 to {top}"
                    + ("" if self.kv_seq is not None else " (or raise --seq)")
                )

    def _check_algorithm(self) -> None:
        if self.algorithm not in ALGORITHMS:
            raise ConfigError(
                f"unknown algorithm {self.algorithm!r}; use one of {', '.join(ALGORITHMS)}"
            )
        size = self.block_size
        if size is None:
            return
        if isinstance(size, bool) or not isinstance(size, int) or not 1 <= size <= MAX_SIZE:
            raise ConfigError(
                f"--block-size must be a whole number from 1 to {MAX_SIZE}, got {_short(size)}"
            )

    def tile_sizes(self) -> dict[str, int]:
        """Br and Bc, the rows of one query block and one key/value block (flash only):
        ``block_size`` for both, or by default Br = 128 and Bc a multiple of it, as wide as fits
        a (B, h, Br, Bc) tile of 2 MiB (:data:`TILE_BYTES`), at most N (and at most --window
        rounded up).

        >>> AttentionConfig(seq=300, algorithm="flash", block_size=128).tile_sizes()
        {'Br': 128, 'Bc': 128}
        >>> AttentionConfig(batch=1, seq=2048, hidden=1024, heads=16,
        ...                 algorithm="flash").tile_sizes()  # (1, 16, 128, 256) floats: 2 MiB
        {'Br': 128, 'Bc': 256}
        >>> AttentionConfig(seq=300, hidden=64, heads=4, algorithm="flash").tile_sizes()
        {'Br': 128, 'Bc': 300}
        >>> AttentionConfig(seq=4096, heads=1, window=200, algorithm="flash").tile_sizes()
        {'Br': 128, 'Bc': 256}
        >>> AttentionConfig(seq=3).tile_sizes()
        {}
        """
        if self.algorithm != "flash":
            return {}
        rows, cols = self.blocks
        return {"Br": rows, "Bc": cols}

    @property
    def blocks(self) -> tuple[int, int]:
        """(Br, Bc) of :meth:`tile_sizes`, whichever the algorithm.

        >>> AttentionConfig(seq=5, block_size=2).blocks
        (2, 2)
        """
        if self.block_size is not None:
            return min(self.block_size, self.seq), min(self.block_size, self.keys)
        row_bytes = (self.batch or 1) * self.heads * QUERY_BLOCK * self.itemsize  # one key column
        wide = max(1, TILE_BYTES // row_bytes // QUERY_BLOCK) * QUERY_BLOCK
        if self.window is not None:  # no wider than the band: the tiles outside it are skipped
            wide = min(wide, -(-self.window // QUERY_BLOCK) * QUERY_BLOCK)
        return min(QUERY_BLOCK, self.seq), min(wide, self.keys)

    @property
    def head_dim(self) -> int:
        """d: ``head_dim_override`` when set, else H / h."""
        return (
            self.head_dim_override
            if self.head_dim_override is not None
            else self.hidden // self.heads
        )

    @property
    def keys(self) -> int:
        """N, the number of keys: kv_seq for cross-attention, else S; with --past the cache
        read and the S new keys (:attr:`cached` + S).

        >>> AttentionConfig(seq=1, past=9).keys, AttentionConfig(seq=2, past=9, window=4).keys
        (10, 5)
        """
        if self.kv_seq is not None:
            return self.kv_seq
        return self.cached + self.seq

    @property
    def cached(self) -> int:
        """Keys read from the KV cache (--past): all N, or with --window W the W - 1 a sliding
        cache keeps (the most the first new query sees, as transformers' sliding layer keeps).
        It is also where query 0's own key sits among the keys (the causal diagonal's offset).

        >>> AttentionConfig(past=100).cached, AttentionConfig(past=100, window=8).cached
        (100, 7)
        """
        return self.past if self.window is None else min(self.past, self.window - 1)

    @property
    def positions(self) -> int:
        """Positions of the sequence so far, N + S (the cache's and the new tokens')."""
        return self.past + self.seq

    @property
    def kv_width(self) -> int:
        """M, the width of the key/value input: kv_hidden when set, else H."""
        return self.kv_hidden if self.kv_hidden is not None else self.hidden

    @property
    def groups(self) -> int:
        """g, the number of key/value heads (h unless grouped-query attention)."""
        return self.kv_heads if self.kv_heads is not None else self.heads

    @property
    def cross(self) -> bool:
        """True when keys and values come from a second input (--kv-seq or --kv-hidden)."""
        return self.kv_seq is not None or self.kv_hidden is not None

    @property
    def grouped(self) -> bool:
        """True for grouped-query or multi-query attention (g < h): k and v are repeated."""
        return self.groups != self.heads

    @property
    def masked(self) -> bool:
        """True when a built-in mask applies (--causal, --key-lengths or --window)."""
        return self.causal or self.key_lengths is not None or self.window is not None

    @property
    def score_scale(self) -> float:
        """The factor the scores are multiplied by: ``scale``, or 1/√d when it is None.

        >>> AttentionConfig(hidden=8, heads=2).score_scale, AttentionConfig(scale=1.0).score_scale
        (0.5, 1.0)
        """
        return 1.0 / math.sqrt(self.head_dim) if self.scale is None else float(self.scale)

    @property
    def batched(self) -> bool:
        return self.batch is not None

    @property
    def itemsize(self) -> int:
        """Bytes of one element in ``dtype``."""
        return DTYPE_BYTES[self.dtype]

    def kv_cache_bytes(self, tokens: int = 1, dtype: str | None = None) -> int:
        """Bytes a KV cache of ``tokens`` tokens stores per layer: k and v, g heads of d values
        each, in ``dtype`` (default: the config's). The one definition of the KV-cache figure.

        >>> cfg = AttentionConfig(hidden=4096, heads=32, kv_heads=8)
        >>> cfg.kv_cache_bytes(), cfg.kv_cache_bytes(tokens=10, dtype="float16")
        (8192, 40960)
        >>> cfg.kv_cache_bytes(dtype="float8")  # a server's cache may be 1 byte an element
        2048
        """
        return 2 * self.groups * self.head_dim * CACHE_DTYPE_BYTES[dtype or self.dtype] * tokens

    @property
    def kv_cache_bytes_per_token(self) -> int:
        """Bytes a KV cache stores per token and layer: :meth:`kv_cache_bytes` of one token."""
        return self.kv_cache_bytes()

    def labels(self) -> AxisLabels:
        """The axis labels of keys, kv-heads and projection widths in this config.

        >>> AttentionConfig(hidden=3072, heads=16, head_dim_override=256, kv_heads=4).labels()
        AxisLabels(keys='S', kv_heads='g', kv_in='H', q_width='h·d', kv_width='g·d')
        """
        h, g, d, H = self.heads, self.groups, self.head_dim, self.hidden
        q_width = "H" if h * d == H else "h·d"
        kv_width = q_width if not self.grouped else "H" if g * d == H else "g·d"
        return AxisLabels(
            keys="N" if self.kv_seq is not None else f"{self.cache_label}+S" if self.past else "S",
            kv_heads="g" if self.grouped else "h",
            kv_in="M" if self.kv_hidden is not None else "H",
            q_width=q_width,
            kv_width=kv_width,
        )

    @property
    def cache_label(self) -> str:
        """The label of the cache's key axis (--past): N, or W-1 when a sliding window keeps
        fewer keys than N."""
        return "N" if self.cached == self.past else "W-1"

    def axis_sizes(self) -> dict[str, int]:
        """Size of every axis letter in this config (B, N, M, g only when they apply)."""
        sizes = {"B": self.batch} if self.batch is not None else {}
        sizes["S"] = self.seq
        if self.kv_seq is not None:
            sizes["N"] = self.kv_seq
        if self.past:
            sizes["N"] = self.past
            if self.window is not None:
                sizes["W"] = self.window
        sizes["H"] = self.hidden
        if self.kv_hidden is not None:
            sizes["M"] = self.kv_hidden
        sizes["h"] = self.heads
        if self.grouped:
            sizes["g"] = self.groups
        sizes["d"] = self.head_dim
        if self.parallel is not None:  # the rank view's divisors (h/T, S/C)
            sizes |= {"T": self.parallel.tp, "C": self.parallel.cp}
        return sizes

    def size(self, label: str) -> int:
        """Size of an axis label: a letter, a product such as ``h·d``, a digit (``1``), or a sum
        of those such as ``N+S`` or ``W-1+S`` (--past).

        >>> AttentionConfig(hidden=64, heads=2, head_dim_override=16).size("h·d")
        32
        >>> AttentionConfig(seq=2, past=7, window=4).size("W-1+S")
        5
        """
        if label.isdigit():
            return int(label)
        if "+" in label or "-" in label:
            terms = re.findall(r"([+-]?)([^+-]+)", label)
            return sum((-1 if sign == "-" else 1) * self.size(term.strip()) for sign, term in terms)
        sizes, total = self.axis_sizes(), 1
        for letter in label.split("·"):
            if "/" in letter:  # a rank's share: h/T, S/2C, S/CT
                top, under = letter.split("/", 1)
                digits = under[: len(under) - len(under.lstrip("0123456789"))]
                parts = int(digits or 1) * math.prod(self.size(c) for c in under[len(digits) :])
                total *= self.size(top) // parts
                continue
            if letter not in sizes:
                raise ConfigError(
                    f"axis {letter!r} does not apply to this config; axes: {', '.join(sizes)}"
                )
            total *= sizes[letter]
        return total

    def to_dict(self) -> dict[str, Any]:
        """The fields as plain JSON-ready values, plus the derived head_dim."""
        fields = asdict(self)
        defaults = {f.name: f.default for f in dataclass_fields(self)}
        for name in OPTIONAL_FIELDS:  # issue 12's variants: present only when on
            if fields[name] == defaults[name]:
                del fields[name]
        if self.key_lengths is not None:
            fields["key_lengths"] = list(self.key_lengths)
        if fields.get("parallel") and fields["parallel"].get("balance"):
            del fields["parallel"]["balance"]  # the default order: trace/3's keys unchanged
        return {**fields, "head_dim": self.head_dim}


def parse_scale(text: str) -> float | None:
    """The value of ``--scale``: ``sqrt`` (1/√d, the default), ``none`` (1, the study notes'
    worked example) or a positive number.

    >>> parse_scale("sqrt"), parse_scale("none"), parse_scale("0.125")
    (None, 1.0, 0.125)
    """
    from attntrace.units import MAX_NUMBER_CHARS, bounded

    word = bounded(text, "--scale", MAX_NUMBER_CHARS).strip().lower()
    if word == "sqrt":
        return None
    if word == "none":
        return 1.0
    try:
        value = float(word)
    except ValueError:
        raise ConfigError(
            f"--scale must be sqrt, none or a positive number (e.g. 0.125), got {word!r}"
        ) from None
    if not math.isfinite(value) or value <= 0:
        raise ConfigError(f"--scale must be a positive number, 'sqrt' or 'none', got {word!r}")
    return value


def _short(value: object) -> str:
    """A value as an error message quotes it: a huge number cut short.

    >>> _short(10**40), _short(3)
    ('1000000000...0000000000 (41 digits)', '3')
    """
    try:
        text = repr(value)
    except ValueError:  # an int beyond sys.get_int_max_str_digits()
        return "a number of thousands of digits"
    if len(text) <= 24:
        return text
    return f"{text[:10]}...{text[-10:]}" + (f" ({len(text)} digits)" if text.isdigit() else "")


def _nearby_divisors(hidden: int, heads: int, limit: int = 8) -> str:
    """The divisors of ``hidden`` closest to ``heads``, as a comma-separated list."""
    divisors = _divisors(hidden)
    closest = sorted(sorted(divisors, key=lambda n: (abs(n - heads), n))[:limit])
    return ", ".join(str(n) for n in closest)


def _divisors(n: int) -> list[int]:
    small = [i for i in range(1, int(n**0.5) + 1) if n % i == 0]
    return sorted(set(small + [n // i for i in small]))
