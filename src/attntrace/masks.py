"""Attention masks: causal, key padding (--key-lengths) and user masks (--mask FILE.npy),
combined into the one ``mask`` step that the ``masked`` step applies to the scaled scores.

Polarity. A boolean mask here means **True = attend**, as the boolean ``attn_mask`` of
``torch.nn.functional.scaled_dot_product_attention``. ``torch.nn.MultiheadAttention``'s
``key_padding_mask`` uses the **opposite** polarity (True = ignore): pass ``~key_padding_mask``.
A float mask is additive (0 keeps a score, -inf removes it), as SDPA's float ``attn_mask``.

A query row whose keys are all masked gets zero weights and a zero context (SDPA's result),
never NaN, and the trace carries a note about it (and :class:`MaskWarning` is raised).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from attntrace.backends.base import Shape, Source
from attntrace.config import MASK_DTYPE, AttentionConfig
from attntrace.errors import ConfigError, InputFileError

if TYPE_CHECKING:
    import numpy as np

#: The steps a mask adds, in order (after ``scaled``, before ``weights``).
MASK_STEPS: tuple[str, ...] = ("mask", "masked")


class MaskWarning(UserWarning):
    """Some query rows attend to no key at all; their weights are zeros."""


@dataclass(frozen=True)
class MaskPlan:
    """The combined mask of a config: how to make it, its axes, and how it applies."""

    source: Source  # bool (True = attend) or, with a float --mask, additive in the config dtype
    axes: tuple[str, ...]  # right-aligned with the scores; "1" marks a broadcast axis
    op: str  # what it is made of, e.g. "causal & key_lengths"
    additive: bool  # True: scaled + mask; False: scaled where mask else -inf


def scores_axes(config: AttentionConfig) -> tuple[str, ...]:
    """Axes of the scores: (B, h, S, N) or (h, S, N), N written S for self-attention."""
    return (*(("B",) if config.batched else ()), "h", "S", config.labels().keys)


def load_mask(path: Path | str) -> np.ndarray:
    """Read a mask from a ``.npy`` file (never unpickling): booleans (True = attend) or floats
    (added to the scores; -inf masks), of a shape that broadcasts to the scores."""
    import numpy as np

    try:
        loaded = np.load(path, allow_pickle=False)
    except (OSError, ValueError, EOFError) as exc:
        raise InputFileError(f"cannot read --mask {path}: {' '.join(str(exc).split())}; save one with numpy.save") from None
    if not isinstance(loaded, np.ndarray):
        raise InputFileError(f"--mask {path} is not a single array (.npz?); save one array with numpy.save")
    if loaded.dtype != np.bool_ and not np.issubdtype(loaded.dtype, np.floating):
        raise InputFileError(
            f"--mask {path} holds {loaded.dtype}; save booleans (True = attend) or floats (added to the scores), "
            "e.g. mask.astype(bool)"
        )
    if loaded.dtype != np.bool_ and (np.isnan(loaded).any() or np.isposinf(loaded).any()):
        raise InputFileError(f"--mask {path} holds NaN or +inf; a float mask may hold finite numbers and -inf")
    return loaded


def build_mask(config: AttentionConfig, user: np.ndarray | None = None) -> MaskPlan | None:
    """The combined mask of ``config`` (causal, key lengths) and ``user``, or None if none.

    >>> plan = build_mask(AttentionConfig(batch=2, seq=3, hidden=8, heads=2, causal=True, key_lengths=(3, 2)))
    >>> plan.source.shape, plan.axes, plan.op
    ((2, 1, 3, 3), ('B', '1', 'S', 'S'), 'causal & key_lengths')
    >>> plan.source.make()[1, 0].astype(int).tolist()
    [[1, 0, 0], [1, 1, 0], [1, 1, 0]]
    """
    parts: list[tuple[str, Shape]] = []
    lead = (config.batch,) if config.batch is not None else ()
    if config.causal:
        parts.append(("causal", (config.seq, config.keys)))  # (S, N)
    if config.key_lengths is not None:
        parts.append(("key_lengths", (*lead, 1, 1, config.keys)))  # (B, 1, 1, N)
    if config.window is not None:
        parts.append((f"window({config.window})", (config.seq, config.keys)))  # (S, N)
    if user is not None:
        parts.append(("mask file", check_mask(tuple(user.shape), config)))
    if not parts:
        return None
    shape = _broadcast_all([s for _, s in parts])
    additive = user is not None and user.dtype.kind == "f"
    source = Source(shape, config.dtype if additive else MASK_DTYPE, lambda: _make(config, user, shape))
    return MaskPlan(source, _axes(shape, config), " & ".join(name for name, _ in parts), additive)


def check_mask(shape: Shape, config: AttentionConfig) -> Shape:
    """``shape`` when it broadcasts to the scores, else a ConfigError naming shapes that do."""
    axes = scores_axes(config)
    target = tuple(config.size(a) for a in axes)
    fits = 0 < len(shape) <= len(target) and all(m in (1, n) for m, n in zip(shape[::-1], target[::-1], strict=False))
    if not fits:
        named = ", ".join(axes)
        raise ConfigError(
            f"--mask of shape {shape} does not broadcast to the scores ({named}) = {target}; "
            f"save a mask of shape ({axes[-2]}, {axes[-1]}) = {target[-2:]} or {target}"
        )
    return shape


def dead_rows(mask: np.ndarray, additive: bool, scores_shape: Shape) -> int:
    """How many query rows of the scores ``mask`` leaves without any key."""
    import numpy as np

    dead = np.isneginf(mask).all(axis=-1) if additive else ~mask.any(axis=-1)  # mask shape without N
    return int(np.broadcast_to(dead, scores_shape[:-1]).sum())


def window_band(seq: int, keys: int, window: int) -> np.ndarray:
    """(S, N) booleans: query i sees key j when j > i - W (the sliding window of Mistral and
    Gemma 2 in transformers: ``kv_idx > q_idx - sliding_window``; with --causal also j <= i).

    >>> window_band(4, 4, 2).astype(int).tolist()
    [[1, 1, 1, 1], [1, 1, 1, 1], [0, 1, 1, 1], [0, 0, 1, 1]]
    """
    import numpy as np

    return np.arange(keys)[None, :] > np.arange(seq)[:, None] - window  # (S, N)


def _make(config: AttentionConfig, user: np.ndarray | None, shape: Shape) -> np.ndarray:
    import numpy as np

    keep = np.ones((1,) * len(shape), dtype=bool)
    if config.causal:
        keep = keep & np.tri(config.seq, config.keys, dtype=bool)  # (S, N): key j <= query i
    if config.key_lengths is not None:
        lengths = np.asarray(config.key_lengths).reshape(-1, 1, 1, 1)  # (B, 1, 1, 1)
        keep = keep & (np.arange(config.keys) < lengths)  # (B, 1, 1, N)
    if config.window is not None:
        keep = keep & window_band(config.seq, config.keys, config.window)  # (S, N)
    if user is not None and user.dtype.kind == "f":
        added = np.where(keep, 0.0, -np.inf) + user.astype(np.float64)
        return np.broadcast_to(added, shape).copy()
    if user is not None:
        keep = keep & user
    return np.broadcast_to(keep, shape).copy()


def _axes(shape: Shape, config: AttentionConfig) -> tuple[str, ...]:
    """The scores' axis letters for ``shape``, right-aligned; "1" where the mask broadcasts."""
    axes = scores_axes(config)[-len(shape):]
    return tuple(a if m == config.size(a) else "1" for m, a in zip(shape, axes, strict=True))


def _broadcast_all(shapes: list[Shape]) -> Shape:
    width = max(len(s) for s in shapes)
    padded = [(1,) * (width - len(s)) + s for s in shapes]
    return tuple(max(dims) for dims in zip(*padded, strict=True))
