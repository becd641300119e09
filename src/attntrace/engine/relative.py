"""Position biases added to the scores, the steps ``position_bias`` and ``biased``:

- T5's relative position bias: each (query i, key j) pair falls in a bucket of ``j - i``
  (exact for small distances, logarithmic up to ``max_distance``); a learned table (buckets, h)
  gives every head a bias per bucket, added to the (unscaled) scores. The bucket of each pair
  is fixed by the sizes, so it is an input: a one-hot (S, N, buckets) that picks the table's
  rows by a matrix product (exact: one non-zero term per sum).
- ALiBi (Press et al. 2021; Bloom, MPT, Falcon with alibi): head h adds ``slope_h * (j - i)``
  to the scaled scores, a fixed slope per head times the distance, never learned. Both are
  inputs: the slopes (h, 1, 1) and the distances (S, N).

Each is two inputs, a per-pair one (the one-hot, or the distances) and a per-head one (T5's
table, or the slopes), and :func:`position_bias` makes the (h, S, N) bias of them, for eager's
whole matrix and for each of flash's tiles alike.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING, TypeVar

from attntrace.backends.base import Backend, Source
from attntrace.config.attention_config import AttentionConfig
from attntrace.config.variants import RelativeBias, parse_relative_bias

if TYPE_CHECKING:
    import numpy as np

#: The steps the bias adds after ``scaled``.
RELATIVE_STEPS: tuple[str, ...] = ("position_bias", "biased")

T = TypeVar("T")

#: How the trace writes ``position_bias`` (and flash's ``bias_tile``), T5's and ALiBi's.
BIAS_OPS: dict[str, str] = {
    "t5": "rel_bias[bucket(j - i)].permute(2, 0, 1)",
    "alibi": "alibi_slopes * (j - i)",
    # Falcon: (scores + alibi) * scale, the same as scaled + this
    "alibi_scaled": "alibi_slopes * scale * (j - i)",
}


def bias_op(config: AttentionConfig) -> str:
    """How the trace writes the position bias of ``config``.

    >>> bias_op(AttentionConfig(alibi=True, alibi_scaled=True))
    'alibi_slopes * scale * (j - i)'
    """
    if config.alibi:
        return BIAS_OPS["alibi_scaled" if config.alibi_scaled else "alibi"]
    return BIAS_OPS["t5"]


def position_bias(be: Backend[T], pairs: T, heads: T, alibi: bool) -> T:
    """The (h, S, N) bias of a per-pair input (T5's one-hot (S, N, buckets), or ALiBi's
    distances (S, N)) and a per-head one (T5's table (buckets, h), or the slopes (h, 1, 1)).

    >>> from attntrace.backends import get_backend
    >>> be = get_backend("numpy")
    >>> position_bias(be, distances(2, 2), alibi_slopes(2)[:, None, None], True).tolist()
    [[[0.0, 0.0625], [-0.0625, 0.0]], [[0.0, 0.00390625], [-0.00390625, 0.0]]]
    """
    if alibi:
        return be.mul(heads, pairs)  # (h, 1, 1) * (S, N) -> (h, S, N)
    picked = be.matmul(pairs, heads)  # (S, N, buckets) @ (buckets, h) -> (S, N, h)
    return be.transpose(be.transpose(picked, 0, 2), 1, 2)  # (h, S, N)


def alibi_slopes(heads: int) -> np.ndarray:
    """ALiBi's slope of each head (h,), as Press et al.'s ``get_slopes``: for h a power of two,
    the geometric sequence 2^(-8/h), 2^(-16/h), ..., 2^(-8); otherwise those of the power of two
    P just below h, then every other slope of 2P (the odd ones) for the h - P heads left: the
    same numbers as transformers' Bloom, Falcon and MPT (alibi_bias_max 8) compute.

    >>> alibi_slopes(4).tolist()
    [0.25, 0.0625, 0.015625, 0.00390625]
    >>> [round(float(s), 4) for s in alibi_slopes(12)[7:]]
    [0.0039, 0.7071, 0.3536, 0.1768, 0.0884]
    """
    import numpy as np

    def geometric(n: int) -> np.ndarray:  # 2^(-8k/n) for k = 1..n, n a power of two
        slopes: np.ndarray = np.power(2.0, -8.0 * np.arange(1, n + 1) / n)
        return slopes

    power = 2 ** math.floor(math.log2(heads))
    if power == heads:
        return geometric(heads)
    return np.concatenate([geometric(power), geometric(2 * power)[0::2][: heads - power]])


def distances(seq: int, keys: int, start: tuple[int, int] = (0, 0)) -> np.ndarray:
    """``j - i`` of every (query, key) pair (S, N) in float64; ``start``: the first query's and
    key's positions (--past: query i is the key at i + cached; a tile of flash: its corner).

    >>> distances(2, 3).tolist(), distances(1, 2, start=(2, 0)).tolist()
    ([[0.0, 1.0, 2.0], [-1.0, 0.0, 1.0]], [[-2.0, -1.0]])
    """
    import numpy as np

    i0, j0 = start
    out: np.ndarray = (np.arange(j0, j0 + keys)[None, :] - np.arange(i0, i0 + seq)[:, None]).astype(
        np.float64
    )
    return out  # (S, N)


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


def relative_sources(config: AttentionConfig, whole: bool = True) -> dict[str, Source]:
    """T5: the one-hot of the buckets (S, N, buckets); ALiBi: the slopes (h, 1, 1) and, unless
    ``whole`` is False (flash makes them tile by tile), the distances (S, N); in the config's
    dtype; empty unless one is on.

    >>> src = relative_sources(AttentionConfig(seq=5, hidden=8, heads=2, alibi=True))
    >>> {name: s.shape for name, s in src.items()}
    {'alibi_slopes': (2, 1, 1), 'alibi_distance': (5, 5)}
    """
    if config.alibi:
        return _alibi_sources(config, whole)
    if config.relative_bias is None or not whole:
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


def _alibi_sources(config: AttentionConfig, whole: bool) -> dict[str, Source]:
    """ALiBi's slopes (h, 1, 1) (times the scale when Falcon adds the bias before it) and
    distances (S, N); --past: query i is key i + cached."""
    h = config.heads
    factor = config.score_scale if config.alibi_scaled else 1.0
    slopes = Source((h, 1, 1), config.dtype, lambda: alibi_slopes(h).reshape(h, 1, 1) * factor)
    if not whole:
        return {"alibi_slopes": slopes}
    shape = (config.seq, config.keys)
    pairs = Source(shape, config.dtype, lambda: distances(*shape, (config.cached, 0)))
    return {"alibi_slopes": slopes, "alibi_distance": pairs}


def pair_tile(config: AttentionConfig) -> Callable[[int, int, int, int], Source]:
    """``(i0, i1, j0, j1) ->`` flash's tile of the per-pair input: T5's one-hot (Br, Bc,
    buckets) or ALiBi's distances (Br, Bc), made from the rule, never whole.

    >>> tile = pair_tile(AttentionConfig(seq=9, hidden=8, heads=2, alibi=True))(1, 3, 2, 3)
    >>> tile.shape, tile.make().tolist()
    ((2, 1), [[1.0], [0.0]])
    """
    if not config.alibi:
        return onehot_tile(config)

    def tile(i0: int, i1: int, j0: int, j1: int) -> Source:
        at = (i0 + config.cached, j0)  # --past: query i is key i + cached's position
        shape = (i1 - i0, j1 - j0)
        return Source(shape, config.dtype, lambda: distances(*shape, at))

    return tile


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
