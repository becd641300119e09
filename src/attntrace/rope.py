"""Rotary position embedding (RoPE) in the convention of the Llama family as Hugging Face
transformers writes it (``rotate_half``): dimension i of a head is rotated together with
dimension i + d/2, by the angle ``position * base ** (-2i / d)``.

Meta's original Llama code pairs neighbours (2i, 2i + 1) as complex numbers instead; the two
are the same rotation up to a fixed permutation of the rows of w_q and w_k (Hugging Face's
conversion script applies it), so attention weights agree once the weights are converted.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from attntrace.backends.base import Source
from attntrace.config import AttentionConfig

if TYPE_CHECKING:
    import numpy as np

#: The steps RoPE adds, in order (after ``v``, before ``k_rep``/``k_t``).
ROPE_STEPS: tuple[str, ...] = ("rope_cos", "rope_sin", "q_rot", "k_rot")


def rope_angles(seq: int, head_dim: int, base: float) -> np.ndarray:
    """The angle of every position and dimension, duplicated over the two halves: (S, d).

    >>> rope_angles(3, 4, 10000.0).round(4).tolist()
    [[0.0, 0.0, 0.0, 0.0], [1.0, 0.01, 1.0, 0.01], [2.0, 0.02, 2.0, 0.02]]
    """
    import numpy as np

    inv_freq = float(base) ** (-np.arange(0, head_dim, 2, dtype=np.float64) / head_dim)  # (d/2,)
    angles = np.outer(np.arange(seq, dtype=np.float64), inv_freq)  # (S, d/2)
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

    def table(fn: str) -> Source:
        return Source(shape, config.dtype, lambda: getattr(np, fn)(rope_angles(*shape, config.rope_base)))

    return {"rope_cos": table("cos"), "rope_sin": table("sin")}
