"""Where the input x and the weights come from: seeded random values, the same on every
backend. Each tensor gets its own stream, derived from (seed, name), so adding a tensor never
changes the values of the others."""

from __future__ import annotations

import math
import zlib
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, overload

from attntrace.backends.base import Parts, RowBlock, Shape, Source
from attntrace.config.attention_config import AttentionConfig
from attntrace.errors import ConfigError

if TYPE_CHECKING:
    import numpy as np


def param_axes(config: AttentionConfig) -> dict[str, tuple[str, ...]]:
    """Parameter names in order with their axes: w_q (h·d, H), w_k and w_v (g·d, M),
    w_o (H, h·d), and the biases unless ``config.bias`` is False.

    >>> param_axes(AttentionConfig(hidden=64, heads=4, kv_heads=2, bias=False))
    {'w_q': ('H', 'H'), 'w_k': ('g·d', 'H'), 'w_v': ('g·d', 'H'), 'w_o': ('H', 'H')}
    """
    lab = config.labels()
    axes = {
        "w_q": (lab.q_width, "H"),
        "b_q": (lab.q_width,),
        "w_k": (lab.kv_width, lab.kv_in),
        "b_k": (lab.kv_width,),
        "w_v": (lab.kv_width, lab.kv_in),
        "b_v": (lab.kv_width,),
        "w_o": ("H", lab.q_width),
        "b_o": ("H",),
    }
    axes = {name: a for name, a in axes.items() if config.bias or name.startswith("w_")}
    if config.relative_bias is not None:  # T5's table: one bias per bucket and head
        axes["rel_bias"] = (config.relative_bias.split(",")[0].strip(), "h")
    if config.qk_norm is not None:  # the RMSNorm weights of q and k: (d,) per head, or the width
        full = config.qk_norm == "full"
        axes |= {
            "n_q": (lab.q_width,) if full else ("d",),
            "n_k": (lab.kv_width,) if full else ("d",),
        }
    return axes


def input_axes(config: AttentionConfig) -> tuple[str, ...]:
    """Axes of x: (B, S, H) or (S, H)."""
    return ("B", "S", "H") if config.batched else ("S", "H")


def kv_input_axes(config: AttentionConfig) -> tuple[str, ...]:
    """Axes of x_kv, the key/value input of cross-attention: (B, N, M) or (N, M)."""
    lab = config.labels()
    return (*(("B",) if config.batched else ()), lab.keys, lab.kv_in)


def cache_axes(config: AttentionConfig) -> tuple[str, ...]:
    """Axes of the KV cache read by a --past step, k_cache and v_cache: (B, g, N, d), or
    (B, g, W-1, d) when a sliding window keeps fewer keys than N."""
    lab = config.labels()
    return (*(("B",) if config.batched else ()), lab.kv_heads, config.cache_label, "d")


#: The names of the KV cache a --past step reads (user arrays may replace them: --cache FILE).
CACHE_NAMES: tuple[str, ...] = ("k_cache", "v_cache")


def shape_of(axes: tuple[str, ...], config: AttentionConfig) -> Shape:
    """The sizes of ``axes`` in ``config`` (letters, products such as ``h·d``, or digits)."""
    return tuple(config.size(a) for a in axes)


def random_sources(config: AttentionConfig) -> dict[str, Source]:
    """Seeded sources for x and, with cross-attention, x_kv (standard normal) and every
    parameter (uniform in ±1/√in_features, the initialisation of ``torch.nn.Linear``).

    >>> src = random_sources(AttentionConfig(seq=3, hidden=8, heads=2))
    >>> src["x"].shape, src["w_q"].shape
    ((3, 8), (8, 8))
    """
    sources = {"x": _normal_source("x", shape_of(input_axes(config), config), config)}
    if config.past:  # the keys and values of the N earlier tokens, as if a prefill made them
        for name in CACHE_NAMES:
            sources[name] = _normal_source(name, shape_of(cache_axes(config), config), config)
    if config.cross:
        sources["x_kv"] = _normal_source("x_kv", shape_of(kv_input_axes(config), config), config)
    params = param_axes(config)
    for name, axes in params.items():
        if name == "rel_bias":  # an embedding table: standard normal, as nn.Embedding
            sources[name] = _normal_source(name, shape_of(axes, config), config)
            continue
        if name.startswith("n_"):  # RMSNorm weights start at one, as torch initialises them
            shape = shape_of(axes, config)
            sources[name] = Source(shape=shape, dtype=config.dtype, make=_ones(shape))
            continue
        in_features = config.size(params[f"w_{name[-1]}"][1])  # a bias shares its weight's bound
        sources[name] = _uniform_source(
            name, shape_of(axes, config), 1.0 / math.sqrt(in_features), config
        )
    return sources


def with_tensors(
    config: AttentionConfig, sources: Mapping[str, Source], tensors: Mapping[str, np.ndarray | None]
) -> dict[str, Source | None]:
    """``sources`` with the user's arrays in place of the seeded ones; ``None`` removes a
    tensor (a missing bias means no bias). Each array must have the shape ``config`` gives it.

    >>> import numpy as np
    >>> cfg = AttentionConfig(seq=2, hidden=4, heads=2)
    >>> src = with_tensors(cfg, random_sources(cfg), {"x": np.ones((2, 4)), "b_q": None})
    >>> src["x"].make().sum(), src["b_q"]
    (np.float64(8.0), None)
    """
    merged: dict[str, Source | None] = dict(sources)
    params = param_axes(config)
    for name, value in tensors.items():
        if name not in merged:
            raise ConfigError(f"unknown tensor {name!r}; attntrace takes {', '.join(merged)}")
        if value is None:
            if name in ("x", "x_kv", "w_q", "w_k", "w_v", "w_o", *CACHE_NAMES):
                raise ConfigError(f"{name} cannot be left out; only the biases are optional")
            merged[name] = None
            continue
        axes = (
            input_axes(config)
            if name == "x"
            else kv_input_axes(config)
            if name == "x_kv"
            else cache_axes(config)
            if name in CACHE_NAMES
            else params[name]
        )
        expected = shape_of(axes, config)
        if tuple(value.shape) != expected:
            raise ConfigError(
                f"{name} has shape {tuple(value.shape)}, but the sizes give "
                f"({', '.join(axes)}) = {expected}; make the size options match the files"
            )
        merged[name] = Source(shape=expected, dtype=config.dtype, make=given(value))
    return merged


def _ones(shape: Shape) -> Callable[[], np.ndarray]:
    def make() -> np.ndarray:
        import numpy as np

        return np.ones(shape)

    return make


def normal_source(name: str, shape: Shape, config: AttentionConfig) -> Source:
    """Standard normal values of ``shape`` drawn from (seed, ``name``): the stream of a tensor
    the config does not name (the backward's ``d_output``).

    >>> normal_source("d_output", (3, 8), AttentionConfig(seq=3, hidden=8, heads=2)).shape
    (3, 8)
    """
    return _normal_source(name, shape, config)


def given(value: np.ndarray) -> Callable[[], np.ndarray]:
    """A ``Source.make`` that returns the user's array (the backend casts it to the dtype)."""
    return lambda: value


def _rng(name: str, seed: int, part: int = 0) -> np.random.Generator:
    """The generator of ``name``'s values (of its block of rows ``part``, beyond the first)."""
    import numpy as np

    words = [seed, zlib.crc32(name.encode())]
    return np.random.default_rng(words if part == 0 else [*words, part])


#: Rows (of all axes but the last) of a normal tensor drawn by one generator: each further block
#: of rows has a generator of its own, so x of a large run is drawn on every core, with the same
#: values on any number of cores. Tensors of at most this many rows (every small run's) are one
#: block: their values are those of one generator, as before blocks.
DRAW_ROWS = 256


def _normal_source(name: str, shape: Shape, config: AttentionConfig) -> Source:
    """Standard normal values, block of :data:`DRAW_ROWS` rows by block; drawn in float64 for
    float64 runs, else in float32.

    >>> import numpy as np
    >>> src = _normal_source("x", (600, 4), AttentionConfig(seq=600, hidden=4, heads=1))
    >>> parts = src.parts
    >>> [(b.start, b.stop) for b in parts.blocks]
    [(0, 256), (256, 512), (512, 600)]
    >>> rows = parts.empty()  # (600, 4)
    >>> for b in parts.blocks:
    ...     b.fill(rows[b.start:b.stop])
    >>> first = _rng("x", 0).standard_normal((256, 4), dtype="float32")  # one generator's
    >>> bool((src.make() == rows).all()), bool((rows[:256] == first).all())
    (True, True)
    """
    dtype = "float64" if config.dtype == "float64" else "float32"  # numpy only when drawn
    rows = math.prod(shape[:-1])

    def block(index: int) -> Callable[[np.ndarray], None]:
        def fill(out: np.ndarray) -> None:  # (stop - start, last axis)
            _rng(name, config.seed, index).standard_normal(dtype=out.dtype, out=out)

        return fill

    def empty() -> np.ndarray:  # (rows, last axis)
        import numpy as np

        return np.empty((rows, shape[-1] if shape else 1), dtype=dtype)

    parts = Parts(empty, _RowBlocks(rows, block))

    def make() -> np.ndarray:
        values = parts.empty()
        for b in parts.blocks:
            b.fill(values[b.start : b.stop])
        return values.reshape(shape)

    return Source(
        shape=shape,
        dtype=config.dtype,
        make=make,
        drawn=True,
        parts=parts if len(parts.blocks) > 1 else None,
    )


class _RowBlocks(Sequence[RowBlock]):
    """The blocks of :data:`DRAW_ROWS` rows of ``rows`` rows, made when asked for: a source of
    2³¹ rows (the shape backend's, which never draws) costs no more than one of 3."""

    def __init__(self, rows: int, block: Callable[[int], Callable[[np.ndarray], None]]) -> None:
        self._rows, self._block = rows, block

    def __len__(self) -> int:
        return (self._rows + DRAW_ROWS - 1) // DRAW_ROWS

    @overload
    def __getitem__(self, index: int) -> RowBlock: ...
    @overload
    def __getitem__(self, index: slice) -> Sequence[RowBlock]: ...
    def __getitem__(self, index: int | slice) -> RowBlock | Sequence[RowBlock]:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        if index < 0:
            index += len(self)
        if not 0 <= index < len(self):
            raise IndexError(index)
        start = index * DRAW_ROWS
        return RowBlock(start, min(start + DRAW_ROWS, self._rows), self._block(index))


def _uniform_source(name: str, shape: Shape, bound: float, config: AttentionConfig) -> Source:
    """Uniform values in [-bound, bound); drawn in float64 for float64 runs, else in float32."""

    def make() -> np.ndarray:
        rng = _rng(name, config.seed)
        values: np.ndarray = (
            rng.random(shape) if config.dtype == "float64" else rng.random(shape, dtype="float32")
        )
        values *= 2 * bound
        values -= bound
        return values

    return Source(shape=shape, dtype=config.dtype, make=make, drawn=True)
