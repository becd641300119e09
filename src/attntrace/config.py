"""AttentionConfig: the sizes of one multi-head attention, validated once, here.

Axis letters used everywhere in attntrace (code comments, step records, tables, docs):

    B batch   S sequence (query length)   H hidden   h heads   d head_dim
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

from attntrace.errors import ConfigError

#: Bytes per element of every dtype attntrace knows; backends support a subset.
DTYPE_BYTES: dict[str, int] = {"float16": 2, "bfloat16": 2, "float32": 4, "float64": 8}


@dataclass(frozen=True)
class AttentionConfig:
    """Sizes and options of one multi-head self-attention.

    >>> cfg = AttentionConfig(seq=3, hidden=768, heads=12)
    >>> cfg.head_dim
    64
    >>> cfg.axis_sizes()
    {'S': 3, 'H': 768, 'h': 12, 'd': 64}
    """

    batch: int | None = None  # B; None means the unbatched layout (S, H) of the study notes
    seq: int = 3  # S, tokens in the sequence
    hidden: int = 768  # H, model width; must be heads * head_dim
    heads: int = 12  # h, attention heads
    dtype: str = "float32"  # one of DTYPE_BYTES
    seed: int = 0  # the same seed gives the same x and weights on every backend
    scale: float | None = None  # factor on the scores; None is 1/sqrt(d) (the paper), 1.0 none (the notes)

    def __post_init__(self) -> None:
        self._check_sizes()
        if self.scale is not None and (isinstance(self.scale, bool) or not isinstance(self.scale, int | float)
                                       or not math.isfinite(self.scale) or self.scale <= 0):
            raise ConfigError(f"--scale must be a positive number, 'sqrt' or 'none', got {self.scale!r}")
        if self.dtype not in DTYPE_BYTES:
            raise ConfigError(
                f"unknown dtype {self.dtype!r}; use one of {', '.join(DTYPE_BYTES)}"
            )
        if self.hidden % self.heads:
            raise ConfigError(
                f"--hidden {self.hidden} is not divisible by --heads {self.heads}; "
                f"valid head counts for hidden {self.hidden}: {_nearby_divisors(self.hidden, self.heads)}"
            )

    def _check_sizes(self) -> None:
        for option, value in (("batch", self.batch), ("seq", self.seq),
                              ("hidden", self.hidden), ("heads", self.heads)):
            if value is None and option == "batch":
                continue
            if isinstance(value, bool) or not isinstance(value, int):
                raise ConfigError(f"--{option} must be a whole number, got {value!r}")
            if value <= 0:
                hint = " (omit --batch for the unbatched layout)" if option == "batch" else ""
                raise ConfigError(f"--{option} must be at least 1, got {value}{hint}")
        if isinstance(self.seed, bool) or not isinstance(self.seed, int) or self.seed < 0:
            raise ConfigError(f"--seed must be a whole number >= 0, got {self.seed!r}")

    @property
    def head_dim(self) -> int:
        """d = H / h."""
        return self.hidden // self.heads

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

    def axis_sizes(self) -> dict[str, int]:
        """Size of every axis letter in this config (B only when batched)."""
        sizes = {"B": self.batch} if self.batch is not None else {}
        return {**sizes, "S": self.seq, "H": self.hidden, "h": self.heads, "d": self.head_dim}

    def to_dict(self) -> dict[str, Any]:
        """The fields as plain JSON-ready values, plus the derived head_dim."""
        return {**asdict(self), "head_dim": self.head_dim}


def parse_scale(text: str) -> float | None:
    """The value of ``--scale``: ``sqrt`` (1/√d, the default), ``none`` (1, the study notes'
    worked example) or a positive number.

    >>> parse_scale("sqrt"), parse_scale("none"), parse_scale("0.125")
    (None, 1.0, 0.125)
    """
    word = text.strip().lower()
    if word == "sqrt":
        return None
    if word == "none":
        return 1.0
    try:
        value = float(word)
    except ValueError:
        raise ConfigError(f"--scale must be sqrt, none or a positive number (e.g. 0.125), got {text!r}") from None
    if not math.isfinite(value) or value <= 0:
        raise ConfigError(f"--scale must be a positive number, 'sqrt' or 'none', got {text!r}")
    return value


def _nearby_divisors(hidden: int, heads: int, limit: int = 8) -> str:
    """The divisors of ``hidden`` closest to ``heads``, as a comma-separated list."""
    divisors = _divisors(hidden)
    closest = sorted(sorted(divisors, key=lambda n: (abs(n - heads), n))[:limit])
    return ", ".join(str(n) for n in closest)


def _divisors(n: int) -> list[int]:
    small = [i for i in range(1, int(n**0.5) + 1) if n % i == 0]
    return sorted(set(small + [n // i for i in small]))
