"""Where the input x and the weights come from: seeded random values, the same on every
backend. Each tensor gets its own stream, derived from (seed, name), so adding a tensor never
changes the values of the others."""

from __future__ import annotations

import math
import zlib
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

from attntrace.backends.base import Shape, Source
from attntrace.config import AttentionConfig
from attntrace.errors import ConfigError

if TYPE_CHECKING:
    import numpy as np

#: Parameter names in order, with the axes of each (torch convention: weight (out, in)).
PARAM_AXES: dict[str, tuple[str, ...]] = {
    "w_q": ("H", "H"), "b_q": ("H",),
    "w_k": ("H", "H"), "b_k": ("H",),
    "w_v": ("H", "H"), "b_v": ("H",),
    "w_o": ("H", "H"), "b_o": ("H",),
}


def input_axes(config: AttentionConfig) -> tuple[str, ...]:
    """Axes of x: (B, S, H) or (S, H)."""
    return ("B", "S", "H") if config.batched else ("S", "H")


def shape_of(axes: tuple[str, ...], config: AttentionConfig) -> Shape:
    """The sizes of ``axes`` in ``config``."""
    sizes = config.axis_sizes()
    return tuple(sizes[a] for a in axes)


def random_sources(config: AttentionConfig) -> dict[str, Source]:
    """Seeded sources for x (standard normal) and every parameter (uniform in ±1/√in_features,
    the initialisation of ``torch.nn.Linear``).

    >>> src = random_sources(AttentionConfig(seq=3, hidden=8, heads=2))
    >>> src["x"].shape, src["w_q"].shape
    ((3, 8), (8, 8))
    """
    sources = {"x": _normal_source("x", shape_of(input_axes(config), config), config)}
    for name, axes in PARAM_AXES.items():
        bound = 1.0 / math.sqrt(config.hidden)
        sources[name] = _uniform_source(name, shape_of(axes, config), bound, config)
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
    for name, value in tensors.items():
        if name not in merged:
            raise ConfigError(f"unknown tensor {name!r}; attntrace takes x, {', '.join(PARAM_AXES)}")
        if value is None:
            if name in ("x", "w_q", "w_k", "w_v", "w_o"):
                raise ConfigError(f"{name} cannot be left out; only the biases are optional")
            merged[name] = None
            continue
        axes = input_axes(config) if name == "x" else PARAM_AXES[name]
        expected = shape_of(axes, config)
        if tuple(value.shape) != expected:
            raise ConfigError(
                f"{name} has shape {tuple(value.shape)}, but the sizes give ({', '.join(axes)}) = {expected}; "
                "make the size options match the files"
            )
        merged[name] = Source(expected, config.dtype, _given(value))
    return merged


def _given(value: np.ndarray) -> Callable[[], np.ndarray]:
    """A ``Source.make`` that returns the user's array (the backend casts it to the dtype)."""
    return lambda: value


def _rng(name: str, seed: int) -> np.random.Generator:
    import numpy as np

    return np.random.default_rng([seed, zlib.crc32(name.encode())])


def _normal_source(name: str, shape: Shape, config: AttentionConfig) -> Source:
    """Standard normal values; drawn in float64 for float64 runs, else in float32."""

    def make() -> np.ndarray:
        rng = _rng(name, config.seed)
        if config.dtype == "float64":
            return rng.standard_normal(shape)
        return rng.standard_normal(shape, dtype="float32")

    return Source(shape, config.dtype, make)


def _uniform_source(name: str, shape: Shape, bound: float, config: AttentionConfig) -> Source:
    """Uniform values in [-bound, bound); drawn in float64 for float64 runs, else in float32."""

    def make() -> np.ndarray:
        rng = _rng(name, config.seed)
        values: np.ndarray = rng.random(shape) if config.dtype == "float64" else rng.random(shape, dtype="float32")
        values *= 2 * bound
        values -= bound
        return values

    return Source(shape, config.dtype, make)
