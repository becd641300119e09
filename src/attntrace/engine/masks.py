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

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

from attntrace.backends.base import Shape, Source
from attntrace.config.attention_config import MASK_DTYPE, AttentionConfig
from attntrace.errors import ConfigError, InputFileError

if TYPE_CHECKING:
    import numpy as np

    from attntrace.engine.recorder import Recorder

T = TypeVar("T")

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
    # (i0, i1, j0, j1) -> the mask of query rows i0:i1 and keys j0:j1
    box: Callable[[int, int, int, int], np.ndarray] | None = field(
        default=None, repr=False, compare=False
    )

    def tile(self, i0: int, i1: int, j0: int, j1: int) -> Source:
        """The mask of query rows i0:i1 and keys j0:j1 (axes of size 1 stay 1), made from the
        rules (and a slice of the --mask file) without the whole mask.

        >>> plan = build_mask(AttentionConfig(seq=4, hidden=8, heads=2, causal=True))
        >>> plan.tile(2, 4, 1, 4).make().astype(int).tolist()
        [[1, 1, 0], [1, 1, 1]]
        """
        assert self.box is not None  # build_mask always sets it
        make = self.box
        shape = _tile_shape(self.source.shape, (i0, i1), (j0, j1))
        return Source(shape=shape, dtype=self.source.dtype, make=lambda: make(i0, i1, j0, j1))


def scores_axes(config: AttentionConfig) -> tuple[str, ...]:
    """Axes of the scores: (B, h, S, N) or (h, S, N), N written S for self-attention."""
    return (*(("B",) if config.batched else ()), "h", "S", config.labels().keys)


def load_mask(path: Path | str) -> np.ndarray:
    """Read a mask from a ``.npy`` file (never unpickling): booleans (True = attend) or floats
    (added to the scores; -inf masks), of a shape that broadcasts to the scores."""
    import numpy as np

    from attntrace.files.declared import check_npy

    try:
        check_npy(Path(path))  # a regular file whose declared size fits the budget
    except InputFileError as exc:
        raise InputFileError(f"cannot read --mask {exc}") from None
    try:
        loaded = np.load(path, allow_pickle=False)
    except (OSError, ValueError, EOFError) as exc:
        raise InputFileError(
            f"cannot read --mask {path}: {' '.join(str(exc).split())}; save one with numpy.save"
        ) from None
    if not isinstance(loaded, np.ndarray):
        raise InputFileError(
            f"--mask {path} is not a single array (.npz?); save one array with numpy.save"
        )
    if loaded.dtype != np.bool_ and not np.issubdtype(loaded.dtype, np.floating):
        raise InputFileError(
            f"--mask {path} holds {loaded.dtype}; save booleans (True = attend) or floats "
            "(added to the scores), e.g. mask.astype(bool)"
        )
    if loaded.dtype != np.bool_ and (np.isnan(loaded).any() or np.isposinf(loaded).any()):
        raise InputFileError(
            f"--mask {path} holds NaN or +inf; a float mask may hold finite numbers and -inf"
        )
    return loaded


def build_mask(config: AttentionConfig, user: np.ndarray | None = None) -> MaskPlan | None:
    """The combined mask of ``config`` (causal, key lengths) and ``user``, or None if none.

    >>> config = AttentionConfig(batch=2, seq=3, hidden=8, heads=2, causal=True, key_lengths=(3, 2))
    >>> plan = build_mask(config)
    >>> plan.source.shape, plan.axes, plan.op
    ((2, 1, 3, 3), ('B', '1', 'S', 'S'), 'causal & key_lengths')
    >>> plan.source.make()[1, 0].astype(int).tolist()
    [[1, 0, 0], [1, 1, 0], [1, 1, 0]]
    """
    parts: list[tuple[str, Shape]] = []
    lead = (config.batch,) if config.batch is not None else ()
    if config.causal:  # with --past aligned bottom-right: query i sees keys up to N + i
        name = "causal(bottom-right)" if config.past else "causal"
        parts.append((name, (config.seq, config.keys)))  # (S, N)
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

    def box(i0: int, i1: int, j0: int, j1: int) -> np.ndarray:
        return _box(config, user, shape, (i0, i1), (j0, j1))

    dtype = config.dtype if additive else MASK_DTYPE
    whole = Source(shape=shape, dtype=dtype, make=lambda: box(0, config.seq, 0, config.keys))
    op = " & ".join(name for name, _ in parts)
    return MaskPlan(source=whole, axes=_axes(shape, config), op=op, additive=additive, box=box)


def check_mask(shape: Shape, config: AttentionConfig) -> Shape:
    """``shape`` when it broadcasts to the scores, else a ConfigError naming shapes that do."""
    axes = scores_axes(config)
    target = tuple(config.size(a) for a in axes)
    fits = 0 < len(shape) <= len(target) and all(
        m in (1, n) for m, n in zip(shape[::-1], target[::-1], strict=False)
    )
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

    dead = (
        np.isneginf(mask).all(axis=-1) if additive else ~mask.any(axis=-1)
    )  # mask shape without N
    return int(np.broadcast_to(dead, scores_shape[:-1]).sum())


def record_mask(rec: Recorder[T], mask: T, plan: MaskPlan, scores: Shape) -> T:
    """The ``mask`` step (B, 1, S, N), or any shape broadcasting to the ``scores`` shape
    (B, h, S, N), with a note when it leaves query rows without any key."""
    mask = rec.step("mask", mask, plan.op, plan.axes)
    values = rec.be.to_numpy(mask)
    if values is not None and (dead := dead_rows(values, plan.additive, scores)):
        rec.notes.append(dead_note(dead))
    return mask


def declare_mask(rec: Recorder[T], plan: MaskPlan, scores: Shape, block: int) -> None:
    """Flash's ``mask`` step: the rules, made into the whole mask only if its value is read;
    counts the query rows it leaves without any key, ``block`` query rows at a time."""
    whole = plan.source
    op = f"{plan.op} (made tile by tile)"
    rec.declare("mask", whole.shape, whole.dtype, op, plan.axes, whole.make)
    if rec.be.computes and (dead := dead_rows_by_block(plan, scores, block)):
        rec.notes.append(dead_note(dead))


def dead_note(dead: int) -> str:
    """The note about ``dead`` query rows that attend to no key.

    >>> dead_note(2)[:36]
    '2 query row(s) attend to no key (eve'
    """
    return (
        f"{dead} query row(s) attend to no key (every key masked): their weights and context "
        "are zeros, as in torch's scaled_dot_product_attention, not NaN"
    )


def window_band(seq: int, keys: int, window: int) -> np.ndarray:
    """(S, N) booleans: query i sees key j when j > i - W (the sliding window of Mistral and
    Gemma 2 in transformers: ``kv_idx > q_idx - sliding_window``; with --causal also j <= i).

    >>> window_band(4, 4, 2).astype(int).tolist()
    [[1, 1, 1, 1], [1, 1, 1, 1], [0, 1, 1, 1], [0, 0, 1, 1]]
    """
    import numpy as np

    return np.arange(keys)[None, :] > np.arange(seq)[:, None] - window  # (S, N)


def dead_rows_by_block(plan: MaskPlan, scores_shape: Shape, block: int) -> int:
    """:func:`dead_rows` of the mask of ``plan``, made ``block`` query rows at a time."""
    rows, keys = scores_shape[-2:]
    whole_rows = len(plan.source.shape) < 2 or plan.source.shape[-2] == 1
    step = rows if whole_rows else max(block, 1)
    dead = 0
    for i0 in range(0, rows, step):
        i1 = min(i0 + step, rows)
        part = plan.tile(i0, i1, 0, keys).make()
        part_rows = rows if whole_rows else i1 - i0
        dead += dead_rows(part, plan.additive, (*scores_shape[:-2], part_rows, keys))
    return dead


def _box(
    config: AttentionConfig,
    user: np.ndarray | None,
    shape: Shape,
    rows: tuple[int, int],
    cols: tuple[int, int],
) -> np.ndarray:
    """The combined mask of ``shape`` (the whole mask's) for query ``rows`` and key ``cols``
    (half-open ranges; an axis of size 1 stays 1): the one place the rules are written."""
    import numpy as np

    # positions: with --past the S queries sit at N..N+S-1 and the keys end at the last query
    # (aligned bottom-right); key j's position is j + N - cached, query i's is i + N
    query = np.arange(*rows)[:, None] + config.cached  # (Br, 1), in the keys' frame
    key = np.arange(*cols)  # (Bc,)
    keep = np.ones((1,) * len(shape), dtype=bool)
    if config.causal:
        keep = keep & (key <= query)  # (Br, Bc): key j <= query i
    if config.key_lengths is not None:
        lengths = np.asarray(config.key_lengths).reshape(-1, 1, 1, 1)  # (B, 1, 1, 1)
        first = config.past - config.cached  # the position of key 0 (a sliding cache's start)
        keep = keep & (key + first < lengths)  # (B, 1, 1, Bc)
    if config.window is not None:
        keep = keep & (key > query - config.window)  # (Br, Bc): the band of window_band
    out_shape = _tile_shape(shape, rows, cols)
    if user is not None:
        part = user[_spans(user.shape, rows, cols)]  # the user's slice, axes of size 1 kept
        if user.dtype.kind == "f":
            added = np.where(keep, 0.0, -np.inf) + part.astype(np.float64)
            return np.broadcast_to(added, out_shape).copy()
        keep = keep & part
    return np.broadcast_to(keep, out_shape).copy()


def _spans(shape: Shape, rows: tuple[int, int], cols: tuple[int, int]) -> tuple[slice, ...]:
    """The index of query ``rows`` and key ``cols`` into an array of ``shape`` that broadcasts
    to the scores (its last two axes, right-aligned; an axis of size 1 is taken whole)."""
    last = (rows, cols)[-len(shape) :] if len(shape) < 2 else (rows, cols)
    lead = (slice(None),) * (len(shape) - len(last))
    tail = zip(shape[-len(last) :], last, strict=True)
    return (*lead, *(slice(None) if n == 1 else slice(*span) for n, span in tail))


def _tile_shape(shape: Shape, rows: tuple[int, int], cols: tuple[int, int]) -> Shape:
    """The shape of ``rows`` and ``cols`` of an array of ``shape`` (see :func:`_spans`)."""
    spans = _spans(shape, rows, cols)
    return tuple(len(range(n)[span]) for n, span in zip(shape, spans, strict=True))


def _axes(shape: Shape, config: AttentionConfig) -> tuple[str, ...]:
    """The scores' axis letters for ``shape``, right-aligned; "1" where the mask broadcasts."""
    axes = scores_axes(config)[-len(shape) :]
    return tuple(a if m == config.size(a) else "1" for m, a in zip(shape, axes, strict=True))


def _broadcast_all(shapes: list[Shape]) -> Shape:
    width = max(len(s) for s in shapes)
    padded = [(1,) * (width - len(s)) + s for s in shapes]
    return tuple(max(dims) for dims in zip(*padded, strict=True))
