"""Rotary position embedding (RoPE) in its two pairings (``--rope-style``):

- ``half`` (the default), as Hugging Face transformers writes the Llama family and GPT-NeoX
  (``rotate_half``): dimension i of a head is rotated together with dimension i + d/2, by the
  angle ``position * base ** (-2i / d)``;
- ``interleaved``, as Meta's original Llama code (neighbours (2i, 2i + 1) as one complex number)
  and GPT-J (``rotate_every_two``): dimension 2i is rotated together with 2i + 1, by the same
  angle.

The two are the same rotation up to a fixed permutation of the rows of w_q and w_k within each
head (Hugging Face's conversion script applies it), so attention weights and outputs agree once
the weights are permuted; q_rot and k_rot differ by that permutation of d.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from attntrace.backends.base import Source
from attntrace.config.attention_config import AttentionConfig
from attntrace.config.variants import parse_rope_scaling

if TYPE_CHECKING:
    import numpy as np

#: The steps RoPE adds, in order (after ``v``, before ``k_rep``/``k_t``).
ROPE_STEPS: tuple[str, ...] = ("rope_cos", "rope_sin", "q_rot", "k_rot")


def rope_angles(seq: int, head_dim: int, base: float, start: int = 0) -> np.ndarray:
    """The angle of every position and dimension, duplicated over the two halves: (S, d);
    ``start``: the first position (--past N: the new tokens sit at N..N+S-1).

    >>> rope_angles(3, 4, 10000.0).round(4).tolist()
    [[0.0, 0.0, 0.0, 0.0], [1.0, 0.01, 1.0, 0.01], [2.0, 0.02, 2.0, 0.02]]
    >>> rope_angles(1, 4, 10000.0, start=2).round(4).tolist()
    [[2.0, 0.02, 2.0, 0.02]]
    """
    import numpy as np

    inv_freq = float(base) ** (-np.arange(0, head_dim, 2, dtype=np.float64) / head_dim)  # (d/2,)
    positions = np.arange(start, start + seq, dtype=np.float64)  # (S,)
    angles = np.outer(positions, inv_freq)  # (S, d/2)
    return np.concatenate((angles, angles), axis=-1)  # (S, d)


def rope_sources(config: AttentionConfig) -> dict[str, Source]:
    """Sources of the cos and sin tables (S, d), computed in float64, stored in the config's
    dtype; empty unless ``config.rope``.

    >>> src = rope_sources(AttentionConfig(seq=5, hidden=8, heads=2, rope=True))
    >>> sorted(src), src["rope_cos"].shape
    (['rope_cos', 'rope_sin'], (5, 4))
    """
    if not config.rope:
        return {}
    import numpy as np

    shape = (config.seq, config.head_dim)
    if (
        config.rope_scaling is not None
        or config.rotary_dims is not None
        or config.rope_style != "half"
    ):  # issue 12's variants
        return {
            "rope_cos": Source(shape, config.dtype, lambda: rope_tables(config)[0]),
            "rope_sin": Source(shape, config.dtype, lambda: rope_tables(config)[1]),
        }

    def table(fn: str) -> Source:
        return Source(
            shape,
            config.dtype,
            lambda: getattr(np, fn)(rope_angles(*shape, config.rope_base, config.past)),
        )

    return {"rope_cos": table("cos"), "rope_sin": table("sin")}


def inv_frequencies(
    dim: int, base: float, scaling: str | None = None, seq: int = 1
) -> tuple[np.ndarray, float]:
    """The inverse frequencies (dim/2,) of ``dim`` rotated dimensions and the factor on cos and
    sin, as transformers' rope init functions compute them (in float64 here).

    >>> inv, factor = inv_frequencies(4, 10000.0, "linear:factor=2")
    >>> inv.tolist(), factor
    ([0.5, 0.005], 1.0)
    """
    import numpy as np

    exponents = np.arange(0, dim, 2, dtype=np.float64) / dim  # (dim/2,)
    if scaling is None:
        return float(base) ** -exponents, 1.0
    kind, p = parse_rope_scaling(scaling)
    if kind == "linear":
        return float(base) ** -exponents / p["factor"], 1.0
    if kind == "dynamic":  # NTK: a larger base once the sequence outgrows max_position_embeddings
        top, factor = p["max_position_embeddings"], p["factor"]
        grown = float(base) * ((factor * max(seq, top) / top) - (factor - 1)) ** (dim / (dim - 2))
        return grown**-exponents, 1.0
    if kind == "llama3":
        return _llama3(float(base) ** -exponents, p), 1.0
    return _yarn(dim, float(base), exponents, p)


def _llama3(inv: np.ndarray, p: dict[str, float]) -> np.ndarray:
    """Llama 3.1: long wavelengths divided by factor, short ones kept, a smooth ramp between."""
    import numpy as np

    factor, low, high, old = (
        p[k]
        for k in (
            "factor",
            "low_freq_factor",
            "high_freq_factor",
            "original_max_position_embeddings",
        )
    )
    wavelen = 2 * np.pi / inv  # (dim/2,)
    scaled = np.where(wavelen > old / low, inv / factor, inv)
    smooth = (old / wavelen - low) / (high - low)
    medium = ~(wavelen < old / high) & ~(wavelen > old / low)
    return np.where(medium, (1 - smooth) * scaled / factor + smooth * scaled, scaled)


def _yarn(
    dim: int, base: float, exponents: np.ndarray, p: dict[str, float]
) -> tuple[np.ndarray, float]:
    """YaRN: interpolation blended with extrapolation along a ramp; cos and sin scaled."""
    import math

    import numpy as np

    factor, old = p["factor"], p["original_max_position_embeddings"]

    def mscale(scale: float, m: float = 1.0) -> float:
        return 1.0 if scale <= 1 else 0.1 * m * math.log(scale) + 1.0

    attention = p.get("attention_factor") or (
        mscale(factor, p["mscale"]) / mscale(factor, p["mscale_all_dim"])
        if p.get("mscale") and p.get("mscale_all_dim")
        else mscale(factor)
    )

    def correction(rotations: float) -> float:
        return (dim * math.log(old / (rotations * 2 * math.pi))) / (2 * math.log(base))

    low, high = correction(p["beta_fast"]), correction(p["beta_slow"])
    if p.get("truncate", 1.0):
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, dim - 1)
    ramp = np.clip((np.arange(dim // 2, dtype=np.float64) - low) / ((high - low) or 0.001), 0, 1)
    pos_freqs = base**exponents
    extrapolation = 1 - ramp
    inv = (1 / (factor * pos_freqs)) * (1 - extrapolation) + (1 / pos_freqs) * extrapolation
    return inv, float(attention)


def rope_tables(config: AttentionConfig) -> tuple[np.ndarray, np.ndarray]:
    """cos and sin (S, d) in float64 for ``config``: with --rotary-dims R only the first R
    dimensions rotate (cos 1, sin 0 beyond); --rope-scaling changes the frequencies and may
    scale cos and sin (YaRN); --rope-style interleaved repeats each angle for a pair (2i, 2i + 1)
    where half repeats the R/2 angles as a whole.

    >>> cos, sin = rope_tables(AttentionConfig(seq=2, hidden=8, heads=1, rope=True, rotary_dims=4))
    >>> cos[1].round(3).tolist(), sin[1, 4:].tolist()
    ([0.54, 1.0, 0.54, 1.0, 1.0, 1.0, 1.0, 1.0], [0.0, 0.0, 0.0, 0.0])
    >>> pairs = AttentionConfig(seq=2, hidden=8, heads=1, rope=True, rope_style="interleaved")
    >>> rope_tables(pairs)[0][1].round(3).tolist()
    [0.54, 0.54, 0.995, 0.995, 1.0, 1.0, 1.0, 1.0]
    """
    import numpy as np

    d = config.head_dim
    r = config.rotary_dims or d
    inv, factor = inv_frequencies(r, config.rope_base, config.rope_scaling, config.positions)
    positions = np.arange(config.past, config.positions, dtype=np.float64)  # (S,): N..N+S-1
    angles = np.outer(positions, inv)  # (S, R/2)
    pairs = config.rope_style == "interleaved"  # theta_0, theta_0, theta_1, ... else halves
    # (S, R)
    angles = np.repeat(angles, 2, axis=-1) if pairs else np.concatenate((angles, angles), axis=-1)
    cos, sin = np.ones((config.seq, d)), np.zeros((config.seq, d))  # (S, d)
    cos[:, :r], sin[:, :r] = np.cos(angles) * factor, np.sin(angles) * factor
    return cos, sin
