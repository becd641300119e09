"""AttentionConfig: the sizes of one multi-head attention, validated once, here.

Axis letters used everywhere in attntrace (code comments, step records, tables, docs):

    B batch   S sequence (query length)   H hidden   h heads   d head_dim
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from attntrace.errors import ConfigError

#: Bytes per element of every dtype attntrace knows; backends support a subset.
DTYPE_BYTES: dict[str, int] = {"float16": 2, "bfloat16": 2, "float32": 4, "float64": 8}
#: The attention algorithms: eager builds the whole (S, N) score matrix, flash works tile by tile.
ALGORITHMS: tuple[str, ...] = ("eager", "flash")


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
    algorithm: str = "eager"  # one of ALGORITHMS: eager (the S×S matrix) or flash (tile by tile)
    block_size: int = 128  # flash: rows of a query block (Br) and of a key/value block (Bc)

    def __post_init__(self) -> None:
        self._check_sizes()
        if self.dtype not in DTYPE_BYTES:
            raise ConfigError(
                f"unknown dtype {self.dtype!r}; use one of {', '.join(DTYPE_BYTES)}"
            )
        self._check_algorithm()
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

    def _check_algorithm(self) -> None:
        if self.algorithm not in ALGORITHMS:
            raise ConfigError(f"unknown algorithm {self.algorithm!r}; use one of {', '.join(ALGORITHMS)}")
        size = self.block_size
        if isinstance(size, bool) or not isinstance(size, int) or size <= 0:
            raise ConfigError(f"--block-size must be a whole number >= 1, got {size!r}")

    def tile_sizes(self) -> dict[str, int]:
        """Br and Bc, the rows of one query block and one key/value block (flash only).

        >>> AttentionConfig(seq=300, algorithm="flash", block_size=128).tile_sizes()
        {'Br': 128, 'Bc': 128}
        >>> AttentionConfig(seq=3).tile_sizes()
        {}
        """
        if self.algorithm != "flash":
            return {}
        sizes = self.axis_sizes()
        return {"Br": min(self.block_size, sizes["S"]), "Bc": min(self.block_size, sizes.get("N", sizes["S"]))}

    @property
    def head_dim(self) -> int:
        """d = H / h."""
        return self.hidden // self.heads

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


def _nearby_divisors(hidden: int, heads: int, limit: int = 8) -> str:
    """The divisors of ``hidden`` closest to ``heads``, as a comma-separated list."""
    divisors = _divisors(hidden)
    closest = sorted(sorted(divisors, key=lambda n: (abs(n - heads), n))[:limit])
    return ", ".join(str(n) for n in closest)


def _divisors(n: int) -> list[int]:
    small = [i for i in range(1, int(n**0.5) + 1) if n % i == 0]
    return sorted(set(small + [n // i for i in small]))
