"""T5's relative position bias: each (query i, key j) pair falls in a bucket of ``j - i``
(exact for small distances, logarithmic up to ``max_distance``); a learned table (buckets, h)
gives every head a bias per bucket, added to the (unscaled) scores.

The bucket of each pair is fixed by the sizes, so it is an input: a one-hot (S, N, buckets)
that picks the table's rows by a matrix product (exact: one non-zero term per sum).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING

from attntrace.backends.base import Source
from attntrace.config.attention_config import AttentionConfig
from attntrace.config.variants import RelativeBias, parse_relative_bias

if TYPE_CHECKING:
    import numpy as np

#: The steps the bias adds after ``scaled``.
RELATIVE_STEPS: tuple[str, ...] = ("position_bias", "biased")


def buckets(seq: int, keys: int, bias: RelativeBias, start: tuple[int, int] = (0, 0)) -> np.ndarray:
    """The bucket of every (query, key) pair (S, N), as T5Attention._relative_position_bucket;
    ``start``: the first query and key (a tile of flash: ``seq`` rows and ``keys`` keys from there).

    >>> buckets(3, 3, RelativeBias(8, 16, True)).tolist()
    [[0, 5, 6], [1, 0, 5], [2, 1, 0]]
    >>> buckets(2, 1, RelativeBias(8, 16, True), start=(1, 2)).tolist()
    [[5], [0]]
    """
    import numpy as np

    i0, j0 = start
    relative = np.arange(j0, j0 + keys)[None, :] - np.arange(i0, i0 + seq)[:, None]  # (S, N): j - i
    n, out = bias.buckets, np.zeros((seq, keys), dtype=np.int64)
    if bias.bidirectional:
        n //= 2
        out += (relative > 0) * n
        relative = np.abs(relative)
    else:
        relative = -np.minimum(relative, 0)
    exact = n // 2
    far = np.maximum(relative, 1).astype(np.float32)  # (S, N); those below exact go unused
    scaled = np.log(far / exact) / math.log(bias.max_distance / exact)
    large = np.minimum(exact + (scaled * (n - exact)).astype(np.int64), n - 1)
    picked: np.ndarray = out + np.where(relative < exact, relative, large)
    return picked


def relative_sources(config: AttentionConfig) -> dict[str, Source]:
    """The one-hot of the buckets (S, N, buckets) in the config's dtype; empty unless on."""
    if config.relative_bias is None:
        return {}
    import numpy as np

    bias = parse_relative_bias(config.relative_bias)
    shape = (config.seq, config.keys, bias.buckets)

    def make() -> np.ndarray:
        # --past: query i is key i + cached's position
        at = buckets(config.seq, config.keys, bias, (config.cached, 0))  # (S, N)
        onehot: np.ndarray = np.eye(bias.buckets)[at]
        return onehot  # (S, N, buckets)

    return {"rel_onehot": Source(shape, config.dtype, make)}


def onehot_tile(config: AttentionConfig) -> Callable[[int, int, int, int], Source]:
    """``(i0, i1, j0, j1) ->`` the one-hot of the buckets of query rows i0:i1 and keys j0:j1
    (Br, Bc, buckets): flash's tile of ``rel_onehot``, made from the rule, never whole.

    >>> tile = onehot_tile(AttentionConfig(seq=9, relative_bias="8,16"))(1, 3, 2, 3)
    >>> tile.shape, tile.make().argmax(-1).tolist()
    ((2, 1, 8), [[5], [0]])
    """
    import numpy as np

    assert config.relative_bias is not None  # a bug, not user input
    bias = parse_relative_bias(config.relative_bias)

    def tile(i0: int, i1: int, j0: int, j1: int) -> Source:
        def make() -> np.ndarray:
            at = (i0 + config.cached, j0)  # --past: query i is key i + cached's position
            onehot: np.ndarray = np.eye(bias.buckets)[buckets(i1 - i0, j1 - j0, bias, at)]
            return onehot  # (Br, Bc, buckets)

        return Source((i1 - i0, j1 - j0, bias.buckets), config.dtype, make)

    return tile
