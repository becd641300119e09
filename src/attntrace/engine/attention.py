"""Multi-head attention, written once against the backend interface, recording every
intermediate tensor as a named step.

The step order follows the study notes: x -> Q, K, V (three linear layers) -> split heads ->
heads first -> K transposed -> scores = Q @ K^T -> scaled -> softmax -> context = weights @ V
-> sequence first -> merge heads -> output linear layer.

Variants add their own steps, only when they are on (:data:`VARIANT_STEPS`): ``x_kv`` after
``x`` (cross-attention), ``rope_cos, rope_sin, q_rot, k_rot`` after ``v`` (RoPE),
``k_rep, v_rep`` after those (grouped-query attention), ``mask, masked`` after ``scaled``
(causal, key padding or a mask file). The steps of :data:`STEP_NAMES` keep their names and order.
"""

from __future__ import annotations

import functools
import math
import threading
import warnings
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Generic, TypeVar, cast

from attntrace.backends import SMALL_WORK_FLOPS, Backend, Source, get_backend, single_threaded_blas
from attntrace.config.attention_config import AttentionConfig, AxisLabels
from attntrace.engine.costs import CostMeter, Registry, peak_live_bytes, resolve
from attntrace.engine.eager import Rows, Tally, bounded, contiguous, extremes
from attntrace.engine.inputs import given, param_axes, random_sources, with_tensors
from attntrace.engine.masks import (
    MASK_STEPS,
    MaskPlan,
    MaskWarning,
    build_mask,
    dead_rows,
    dead_rows_by_block,
)
from attntrace.engine.memory import check_budget
from attntrace.engine.parallel import check_threads, in_pool, map_parts, pool
from attntrace.engine.relative import RELATIVE_STEPS, relative_sources
from attntrace.engine.rope import ROPE_STEPS, rope_sources
from attntrace.errors import ConfigError
from attntrace.trace import Lazy, Param, Step, Trace
from attntrace.units import format_bytes

if TYPE_CHECKING:
    import numpy as np

T = TypeVar("T")
#: ``fn(values of the steps so far, the step's value) -> the value to go on with``.
StepReplacement = Callable[[Mapping[str, "np.ndarray"], Any], Any]

#: The public step names, in order (a contract: JSON, npz files and checks use them).
STEP_NAMES: tuple[str, ...] = (
    "x",
    "q_proj",
    "k_proj",
    "v_proj",
    "q_heads",
    "k_heads",
    "v_heads",
    "q",
    "k",
    "v",
    "k_t",
    "scores",
    "scaled",
    "weights",
    "context",
    "context_heads",
    "merged",
    "output",
)

#: The steps each variant adds (only when it is on), and the step each group follows.
VARIANT_STEPS: dict[str, tuple[str, tuple[str, ...]]] = {
    "cross": ("x", ("x_kv",)),
    "rope": ("v", ROPE_STEPS),
    "grouped": ("v", ("k_rep", "v_rep")),  # after the RoPE steps when both are on
    "mask": ("scaled", MASK_STEPS),
    "softcap": ("scaled", ("capped",)),  # before the mask steps
    "relative": ("scaled", RELATIVE_STEPS),  # after the soft-cap, before the mask
    "qk_norm": ("v", ("q_norm", "k_norm")),  # before RoPE; after v_proj with --qk-norm full
}


def step_names(config: AttentionConfig, *, mask: bool = False) -> tuple[str, ...]:
    """The step names of ``config`` in order (``mask``: a --mask file is given).

    >>> step_names(AttentionConfig(batch=2, kv_heads=4, causal=True))[9:17]
    ('v', 'k_rep', 'v_rep', 'k_t', 'scores', 'scaled', 'mask', 'masked')
    """
    on = {
        "cross": config.cross,
        "rope": config.rope,
        "grouped": config.grouped,
        "mask": config.masked or mask,
        "softcap": config.softcap is not None,
        "qk_norm": config.qk_norm is not None,
        "relative": config.relative_bias is not None,
    }
    names = list(STEP_NAMES)
    # later inserts first keep the indices
    for variant in ("mask", "relative", "softcap", "grouped", "rope", "qk_norm", "cross"):
        after, added = VARIANT_STEPS[variant]
        after = "v_proj" if variant == "qk_norm" and config.qk_norm == "full" else after
        if on[variant]:
            at = names.index(after) + 1
            names[at:at] = added
    return tuple(names)


def trace_attention(
    config: AttentionConfig,
    backend: str | Backend[Any] = "numpy",
    *,
    mask: np.ndarray | None = None,
    max_memory: int | None = None,
    keep_values: bool | Collection[str] = True,
    remake: Collection[str] = (),
    hold: tuple[int, ...] | None = None,
    tensors: Mapping[str, np.ndarray | None] | None = None,
    threads: int | None = None,
    replace: Mapping[str, StepReplacement] | None = None,
) -> Trace:
    """Run multi-head attention for ``config`` on ``backend`` and record every step.

    ``mask`` is an optional user mask (booleans, True = attend, or additive floats) that
    broadcasts to the scores (B, h, S, N); see :mod:`attntrace.engine.masks`.
    ``max_memory`` caps the bytes a compute backend may allocate (default: half the available
    memory); the estimate is made on shapes before anything is allocated.
    ``keep_values=False`` records shapes only, letting intermediates be freed (and lets the
    eager algorithm fold the scale into q and take the softmax in place); a collection of step
    names keeps the values of those steps only. ``remake`` names kept steps (eager's
    ``weights``) to hold as the recipe that makes them again on first read, bit for bit,
    instead of in memory: :meth:`Step.part` of one head then makes that head alone, so a
    reader of one head (``attntrace run``'s view) skips the (B, h, S, N) buffer and its pass.
    ``hold`` (batch item, head), or (head,) without a batch axis, is the one head of the remade
    ``weights`` that the trace keeps as it computes them: that reader then gets them without
    making them again.
    Query rows left without any key get zero weights, a note in ``Trace.notes`` and a
    :class:`attntrace.engine.masks.MaskWarning`.
    ``tensors`` replaces the seeded x (or x_kv) or parameters by arrays (e.g. loaded weights)
    of the shapes ``config`` gives; a bias mapped to None is left out. ``backend`` is a
    registered name or a :class:`Backend` instance. ``replace`` (numpy backend, values kept)
    maps a step name to ``fn(values so far, value) -> value``: the algorithm goes on with the
    replacement (``attntrace diff`` tests a suspected mistake this way). ``threads``: how many
    threads run flash's query blocks (each with a one-threaded BLAS; default: every usable core).

    >>> t = trace_attention(AttentionConfig(seq=3, hidden=768, heads=12))
    >>> t["scores"].shape, t["output"].shape
    ((12, 3, 3), (3, 768))
    >>> round(float(t["weights"].value.sum(axis=-1).max()), 6)
    1.0
    >>> t = trace_attention(AttentionConfig(seq=3, hidden=8, heads=2, causal=True))
    >>> t["weights"].value[0].round(2).tolist()[0]
    [1.0, 0.0, 0.0]
    >>> t = trace_attention(AttentionConfig(seq=3, hidden=768, heads=12))
    >>> t["scores"].formula, t["scores"].flops == 2 * 12 * 3 * 3 * 64
    ('2·h·S·S·d', True)
    """
    name = backend if isinstance(backend, str) else backend.name
    workers = check_threads(threads)
    shapes = (
        trace_attention(config, "shape", mask=mask) if name != "shape" else None
    )  # sizes and costs, no arrays
    if shapes is not None and shapes.total_flops < SMALL_WORK_FLOPS:
        single_threaded_blas()  # before numpy is imported: waking BLAS threads costs more than tiny maths
    be = get_backend(backend) if isinstance(backend, str) else backend
    be.check_dtype(config.dtype)
    plan = build_mask(config, mask)
    if be.computes and shapes is not None:
        _check_memory(config, max_memory, keep_values is True, shapes)
        _check_tiles(config, shapes)
    # flash: none
    whole_mask = {"mask": plan.source} if plan and config.algorithm == "eager" else {}
    relative = relative_sources(config) if config.algorithm == "eager" else {}  # flash: per tile
    seeded = {**random_sources(config), **rope_sources(config), **relative, **whole_mask}
    sources = with_tensors(config, seeded, tensors or {})
    keep = keep_values if be.computes else False
    with warnings.catch_warnings():
        # overflow, invalid: counted per step instead
        warnings.simplefilter("ignore", RuntimeWarning)
        trace = _record(
            config,
            be,
            sources,
            plan,
            keep_values=keep,
            remake=remake,
            hold=check_hold(config, hold),
            replace=replace,
            threads=workers,
            shapes=shapes,
        )
    for note in trace.notes:
        if not note.startswith(NONFINITE_NOTE):  # non-finite values are reported by the note alone
            warnings.warn(note, MaskWarning, stacklevel=2)
    return trace


def _record(
    config: AttentionConfig,
    be: Backend[T],
    sources: Mapping[str, Source | None],
    plan: MaskPlan | None,
    *,
    keep_values: bool | Collection[str],
    remake: Collection[str] = (),
    hold: tuple[int, ...] | None = None,
    replace: Mapping[str, StepReplacement] | None = None,
    threads: int = 1,
    shapes: Trace | None = None,
) -> Trace:
    """Create the tensors of ``sources`` on ``be`` (a None source is a left-out bias), run the
    algorithm through the cost meter and collect the records (``shapes``: the shape trace of the
    same config, whose totals flash's tiles take)."""
    recorder = _Recorder(be, config, keep_values, replace or {}, threads, shapes, remake, hold)
    names = param_axes(config)
    # a small run starts no threads: the pool's start (and its import) costs more than drawing
    small = shapes is not None and shapes.total_flops < SMALL_WORK_FLOPS
    made = _make_tensors(be, sources, 1 if small else threads)
    params = {name: made[name] for name in names if name in made}
    for name, t in params.items():
        recorder.registry.add(t, name, names[name])
    inputs = {name: t for name, t in made.items() if name not in names}
    _attend(config, cast("Backend[T]", recorder.meter), recorder, inputs, params, plan)
    keep_params = bool(keep_values)  # True, or a non-empty collection of step names
    parameters = tuple(
        Param(
            name,
            be.shape(t),
            be.dtype(t),
            be.to_numpy(t) if keep_params else None,
            axes=names[name],
        )
        for name, t in params.items()
    )
    steps = recorder.finish()
    notes = (*recorder.notes, *nonfinite_notes(steps))
    return Trace(config, be.name, steps, parameters, notes=notes, peak_bytes=peak_live_bytes(steps))


def _recipe(
    be: Backend[T], make: Callable[[], T], part: Callable[[tuple[int, ...]], T] | None
) -> Lazy:
    """The :class:`Lazy` values of a step: ``make()`` (and ``part(index)``) as numpy arrays.
    It holds the backend, never the recorder: a cycle would keep every step alive."""
    one = None if part is None else (lambda at: be.to_numpy(part(at)))
    return Lazy(lambda: be.to_numpy(make()), one)


#: Sources of more elements than this in all are made on the pool (x and the weights of a
#: large run: numpy's generators release the GIL, and each source has a generator of its own).
POOL_MIN_SOURCE_NUMEL = 1 << 20


def _make_tensors(
    be: Backend[T], sources: Mapping[str, Source | None], threads: int
) -> dict[str, T]:
    """Every source that is not None made into a tensor of ``be``: on ``threads`` threads
    when they are large (the same values: every seeded source draws from its own generator).

    >>> from attntrace.backends import get_backend
    >>> src = random_sources(AttentionConfig(seq=3, hidden=8, heads=2))
    >>> made = _make_tensors(get_backend("numpy"), {**src, "b_q": None}, threads=2)
    >>> made["x"].shape, "b_q" in made
    ((3, 8), False)
    """
    todo = {name: source for name, source in sources.items() if source is not None}
    # only drawn values are work worth a thread: handing a user's array to a worker costs more
    numel = sum(math.prod(source.shape) for source in todo.values() if source.drawn)
    if threads == 1 or numel < POOL_MIN_SOURCE_NUMEL or not be.computes or in_pool():
        return {name: be.tensor(source) for name, source in todo.items()}

    # each block of rows of a large drawn source is a task of its own: x is drawn on every core
    rows = {name: source.parts.empty() for name, source in todo.items() if source.parts}
    fills = [
        functools.partial(block.fill, rows[name][block.start : block.stop])
        for name, source in todo.items()
        if source.parts
        for block in source.parts.blocks
    ]
    whole = [name for name in todo if name not in rows]
    tasks = [*fills, *(functools.partial(be.tensor, todo[name]) for name in whole)]
    results = list(pool(threads).map(_call, tasks))  # in order: the blocks, then the rest
    made: dict[str, T] = dict(zip(whole, cast("list[T]", results[len(fills) :]), strict=True))
    for name, values in rows.items():  # (rows, last axis), every block filled
        made[name] = be.tensor(
            replace(todo[name], make=given(values.reshape(todo[name].shape)), parts=None)
        )
    return {name: made[name] for name in todo}


def _call(task: Callable[[], object]) -> object:
    return task()


#: How the note about non-finite values begins (a contract: scripts may look for it).
NONFINITE_NOTE = "non-finite values"


def nonfinite_notes(steps: Sequence[Step]) -> tuple[str, ...]:
    """One note naming the first step with NaN or ±inf, how many and in how many steps.

    >>> print(*nonfinite_notes([Step("x", (2,), "float32"),
    ...                         Step("scores", (2, 2), "float32", nonfinite=3)]))
    non-finite values (NaN or inf) first appear at step 'scores': 3 of 4 values; 1 step(s) hold some
    """
    bad = [s for s in steps if s.nonfinite]
    if not bad:
        return ()
    first = bad[0]
    return (
        f"{NONFINITE_NOTE} (NaN or inf) first appear at step {first.name!r}: "
        f"{first.nonfinite:,} of {first.numel * first.repeat:,} values; "
        f"{len(bad)} step(s) hold some",
    )


@dataclass(frozen=True)
class _Layout:
    """The axis bookkeeping every stage shares: leading batch axis and variant labels."""

    lead: tuple[str, ...]  # ("B",) or ()
    sizes: tuple[int, ...]  # (B,) or ()
    lab: AxisLabels
    rotary: int | None = None  # R of partial RoPE (--rotary-dims), else None
    pairs: bool = False  # --rope-style interleaved: RoPE rotates (2i, 2i + 1), not (i, i + d/2)

    @classmethod
    def of(cls, config: AttentionConfig) -> _Layout:
        batched = config.batch is not None
        sizes = (config.batch,) if config.batch is not None else ()
        return cls(
            ("B",) if batched else (),
            sizes,
            config.labels(),
            config.rotary_dims,
            config.rope_style == "interleaved",
        )

    @property
    def n(self) -> int:
        """Index of the sequence axis; heads-first swaps axes n and n + 1."""
        return len(self.lead)

    @property
    def dims(self) -> str:
        return ", ".join((*self.lead, ""))  # "B, " or ""

    @property
    def swap(self) -> str:
        return f"{self.n}, {self.n + 1}"

    def ax(self, *axes: str) -> tuple[str, ...]:
        """``axes`` behind the batch axis, if any."""
        return (*self.lead, *axes)


def _attend(
    config: AttentionConfig,
    be: Backend[T],
    rec: _Recorder[T],
    t: Mapping[str, T],
    p: Mapping[str, T],
    plan: MaskPlan | None,
) -> T:
    """The algorithm: a straight sequence of stages of backend calls, each call recorded as a
    named step. Shapes are written batched; without --batch the leading B is absent."""
    lay = _Layout.of(config)
    q, k, v = _project(config, be, rec, lay, t, p)  # (B, h, S, d), (B, g, N, d), (B, g, N, d)
    if config.qk_norm == "head":
        q, k = _qk_norm(config, be, rec, lay, q, k, p)  # (B, h, S, d), (B, g, N, d)
    if config.rope:
        q, k = _rotate(be, rec, lay, t, q, k)  # (B, h, S, d), (B, g, N, d)
    if config.grouped:
        k, v = _repeat_kv(config, be, rec, lay, k, v)  # (B, h, N, d) each
    if config.algorithm == "flash":
        from attntrace.engine.flash import flash_context

        if plan is not None:
            _declare_mask(config, rec, lay, plan)  # (B, 1, S, N), made tile by tile
        table = p.get("rel_bias")  # T5's (buckets, h), or None
        context = flash_context(config, be, rec, q, k, v, plan, table)  # (B, h, S, d), tile by tile
    elif config.relative_bias is None and not rec.replace:
        context = _attend_rows(config, be, rec, lay, q, k, v, t.get("mask"), plan)  # (B, h, S, d)
    else:  # whole (S, N) steps: T5's bias table, or a step replaced by attntrace diff
        relative = (t["rel_onehot"], p["rel_bias"]) if config.relative_bias is not None else None
        weights = _weigh(config, be, rec, lay, q, k, t.get("mask"), plan, relative)  # (B, h, S, N)
        v_name = "v_rep" if config.grouped else "v"
        context = rec.step(
            "context", be.matmul(weights, v), f"weights @ {v_name}", lay.ax("h", "S", "d")
        )  # (B, h, S, d)
    return _merge(config, be, rec, lay, context, p)  # (B, S, H)


def _project(
    config: AttentionConfig,
    be: Backend[T],
    rec: _Recorder[T],
    lay: _Layout,
    t: Mapping[str, T],
    p: Mapping[str, T],
) -> tuple[T, T, T]:
    """x (and x_kv) -> q_proj, k_proj, v_proj -> split into heads -> heads first."""
    lab = lay.lab
    x = rec.step("x", t["x"], "x", lay.ax("S", "H"))  # (B, S, H)
    kv_in = (
        rec.step("x_kv", t["x_kv"], "x_kv", lay.ax(lab.keys, lab.kv_in)) if config.cross else x
    )  # (B, N, M)
    kv_name = "x_kv" if config.cross else "x"
    # per projection: input, its name, sequence label and size, heads label and count, width label
    spec = {
        "q": (x, "x", "S", config.seq, "h", config.heads, lab.q_width),
        "k": (kv_in, kv_name, lab.keys, config.keys, lab.kv_heads, config.groups, lab.kv_width),
        "v": (kv_in, kv_name, lab.keys, config.keys, lab.kv_heads, config.groups, lab.kv_width),
    }
    proj = {
        c: rec.step(
            f"{c}_proj",
            be.linear(src, p[f"w_{c}"], p.get(f"b_{c}")),
            _linear_op(name, c, p),
            lay.ax(seq, width),
        )
        for c, (src, name, seq, _, _, _, width) in spec.items()
    }  # (B, S, h·d), (B, N, g·d), (B, N, g·d)
    if config.qk_norm == "full":  # OLMo 2: RMSNorm over the whole projection, before the heads
        proj["q"], proj["k"] = _qk_norm(config, be, rec, lay, proj["q"], proj["k"], p)
    d = config.head_dim
    split = {
        c: rec.view(
            f"{c}_heads",
            be.reshape(proj[c], (*lay.sizes, n_seq, n_heads, d)),
            f"{c}_proj.view({lay.dims}{seq}, {heads}, d)",
            lay.ax(seq, heads, "d"),
        )
        for c, (_, _, seq, n_seq, heads, n_heads, _) in spec.items()
    }  # (B, S, h, d), (B, N, g, d), (B, N, g, d)
    q, k, v = (
        rec.view(
            c,
            be.transpose(split[c], lay.n, lay.n + 1),
            f"{c}_heads.transpose({lay.swap})",
            lay.ax(heads, seq, "d"),
        )
        for c, (_, _, seq, _, heads, _, _) in spec.items()
    )  # (B, h, S, d), (B, g, N, d), (B, g, N, d)
    return q, k, v


def _rotate(
    be: Backend[T], rec: _Recorder[T], lay: _Layout, t: Mapping[str, T], q: T, k: T
) -> tuple[T, T]:
    """RoPE: the cos/sin tables of the positions, then q and k rotated, dimension i with
    i + d/2 (--rope-style half) or 2i with 2i + 1 (interleaved)."""
    lab = lay.lab
    cos = rec.step("rope_cos", t["rope_cos"], "cos(pos * base^(-2i/d))", ("S", "d"))  # (S, d)
    sin = rec.step("rope_sin", t["rope_sin"], "sin(pos * base^(-2i/d))", ("S", "d"))  # (S, d)
    if lay.rotary is not None or lay.pairs:  # partial RoPE, or pairs of neighbours
        return _rotate_part(be, rec, lay, q, k, cos, sin)
    q_rot = rec.step(
        "q_rot",
        be.add(be.mul(q, cos), be.mul(be.rotate_half(q), sin)),
        "q * cos + rotate_half(q) * sin",
        lay.ax("h", "S", "d"),
    )  # (B, h, S, d)
    k_rot = rec.step(
        "k_rot",
        be.add(be.mul(k, cos), be.mul(be.rotate_half(k), sin)),
        "k * cos + rotate_half(k) * sin",
        lay.ax(lab.kv_heads, lab.keys, "d"),
    )  # (B, g, S, d)
    return q_rot, k_rot


def _rotate_part(
    be: Backend[T], rec: _Recorder[T], lay: _Layout, q: T, k: T, cos: T, sin: T
) -> tuple[T, T]:
    """Partial RoPE (--rotary-dims R): cos is 1 and sin 0 beyond R, so those dims pass; with
    --rope-style interleaved the pairs are neighbours (2i, 2i + 1) (rotate_pairs)."""
    r = lay.rotary or be.shape(q)[-1]
    turn = be.rotate_pairs if lay.pairs else be.rotate_part
    name = "rotate_pairs" if lay.pairs else "rotate_half"
    part = "" if lay.rotary is None else f"[..., :{r}]"
    q_rot = be.add(be.mul(q, cos), be.mul(turn(q, r), sin))  # (B, h, S, d)
    q_rot = rec.step("q_rot", q_rot, f"q * cos + {name}(q{part}) * sin", lay.ax("h", "S", "d"))
    k_rot = be.add(be.mul(k, cos), be.mul(turn(k, r), sin))  # (B, g, S, d)
    k_rot = rec.step(
        "k_rot",
        k_rot,
        f"k * cos + {name}(k{part}) * sin",
        lay.ax(lay.lab.kv_heads, lay.lab.keys, "d"),
    )
    return q_rot, k_rot


def _repeat_kv(
    config: AttentionConfig, be: Backend[T], rec: _Recorder[T], lay: _Layout, k: T, v: T
) -> tuple[T, T]:
    """GQA/MQA: each of the g key/value heads serves h / g consecutive query heads."""
    r, src = config.heads // config.groups, "k_rot" if config.rope else "k"
    k_rep = rec.step(
        "k_rep",
        be.repeat_interleave(k, r, lay.n),
        f"{src}.repeat_interleave({r}, dim={lay.n})",
        lay.ax("h", lay.lab.keys, "d"),
    )  # (B, h, N, d)
    v_rep = rec.step(
        "v_rep",
        be.repeat_interleave(v, r, lay.n),
        f"v.repeat_interleave({r}, dim={lay.n})",
        lay.ax("h", lay.lab.keys, "d"),
    )  # (B, h, N, d)
    return k_rep, v_rep


def _weigh(
    config: AttentionConfig,
    be: Backend[T],
    rec: _Recorder[T],
    lay: _Layout,
    q: T,
    k: T,
    mask: T | None,
    plan: MaskPlan | None,
    relative: tuple[T, T] | None = None,
) -> T:
    """k_t -> scores -> scaled -> (mask, masked) -> softmax weights."""
    N, d = lay.lab.keys, config.head_dim
    q_name = "q_rot" if config.rope else "q"
    k_name = "k_rep" if config.grouped else "k_rot" if config.rope else "k"
    hSN = lay.ax("h", "S", N)
    k_t = rec.view(
        "k_t", be.transpose(k, -2, -1), f"{k_name}.transpose(-2, -1)", lay.ax("h", "d", N)
    )  # (B, h, d, N)
    factor = config.score_scale
    scale_op = (
        f"scores / sqrt({d})"
        if config.scale is None
        else f"scores * {config.scale:g}" + (" (unscaled)" if config.scale == 1 else "")
    )
    fast = mask is None and not (rec.keeps("scores") or rec.keeps("scaled"))
    if fast:  # nobody sees the unscaled scores: fold the scale into q (S·d multiplies, not S·N)
        q_scaled = be.scale(q, factor)  # (B, h, S, d)
        rec.meter.discard()  # charged below, as the traced algorithm does it
        scores = rec.step(
            "scores", be.matmul(q_scaled, k_t), f"{q_name} @ k_t", hSN, contract="d"
        )  # (B, h, S, N)
        rec.meter.charge("scale", scores, out=scores)
        scaled = rec.step("scaled", scores, scale_op, hSN)  # (B, h, S, N), already scaled
    else:
        scores = rec.step("scores", be.matmul(q, k_t), f"{q_name} @ k_t", hSN)  # (B, h, S, N)
        scaled = rec.step("scaled", be.scale(scores, factor), scale_op, hSN)  # (B, h, S, N)
    last = "scaled"
    if config.softcap is not None:
        scaled, last = _softcap(config.softcap, be, rec, lay, scaled), "capped"  # (B, h, S, N)
    if relative is not None:
        scaled, last = _relative(be, rec, lay, scaled, last, *relative), "biased"  # (B, h, S, N)
    if mask is not None and plan is not None:
        scaled = _apply_mask(config, be, rec, lay, scaled, mask, plan)  # (B, h, S, N)
        last = "masked"
    seen = rec.keeps("scaled") or rec.keeps("capped")
    softmax = be.softmax_ if fast and not seen else be.softmax  # in place: nobody sees its input
    return rec.step("weights", softmax(scaled), f"softmax({last}, dim=-1)", hSN)  # (B, h, S, N)


def _attend_rows(
    config: AttentionConfig,
    be: Backend[T],
    rec: _Recorder[T],
    lay: _Layout,
    q: T,
    k: T,
    v: T,
    mask: T | None,
    plan: MaskPlan | None,
) -> T:
    """k_t -> scores -> scaled -> (capped) -> (mask, masked) -> weights -> context, made block
    of query rows by block of query rows (:mod:`attntrace.engine.eager`), then each step recorded
    with the cost of the whole operation it stands for."""
    N, raw = lay.lab.keys, rec.be
    q_name = "q_rot" if config.rope else "q"
    k_name = "k_rep" if config.grouped else "k_rot" if config.rope else "k"
    # (B, h, d, N)
    k_t = rec.view(
        "k_t", be.transpose(k, -2, -1), f"{k_name}.transpose(-2, -1)", lay.ax("h", "d", N)
    )
    rows = Rows(
        raw,
        q,
        k_t,
        v,
        config.score_scale,
        config.softcap,
        mask if plan else None,
        plan is not None and plan.additive,
        rec.threads,
        causal=config.causal,
        window=config.window,
    )
    rows = bounded(rows) if raw.computes else rows
    # (B, h, S, d) by the library's own kernel, or None
    fused = _fused_context(rows, q, k, v, causal=plan is not None and plan.op == "causal")
    rows = contiguous(rows) if raw.computes and fused is None else rows  # for the blocks
    # held in a buffer the blocks fill; else (fused, or asked to) a recipe, made when read
    kept = rec.keeps("weights") and raw.computes and fused is None and "weights" not in rec.remake
    # (B, h, S, N)
    weights = raw.empty(rows.shape, rows.dtype) if kept else raw.stand_in(rows.shape, rows.dtype)
    S, h, d = config.seq, config.heads, config.head_dim
    # (B, h, S, d), a view of (B, S, h, d): merging the heads afterwards copies nothing
    context = (
        fused
        if fused is not None
        else raw.transpose(raw.empty((*lay.sizes, S, h, d), rows.dtype), lay.n, lay.n + 1)
    )
    held = _held(rec, rows) if not kept and fused is None else {}  # {at: (S, N)} or {}
    found = _run_rows(rec, rows, weights if kept else None, context, held) if fused is None else {}
    hSN = lay.ax("h", "S", N)
    cap = config.softcap
    ops = {
        "scores": f"{q_name} @ k_t",
        "capped": f"{cap:g} * tanh(scaled / {cap:g})" if cap else "",
        "scaled": f"scores / sqrt({d})"
        if config.scale is None
        else f"scores * {config.scale:g}" + (" (unscaled)" if config.scale == 1 else ""),
    }
    # (B, h, S, N)
    last = rec.made("scores", rows, ops["scores"], hSN, [("matmul", (q, k_t))], found)
    for name in rows.chain[1:]:
        if name == "masked" and mask is not None and plan is not None:
            # (B, 1, S, N), or any shape broadcasting to the scores
            mask = _record_mask(config, be, rec, lay, mask, plan)
            charge, op = (
                (("add", (last, mask)), "scaled + mask")
                if plan.additive
                else (("where", (mask, last)), "where(mask, scaled, -inf)")
            )
            last = rec.made("masked", rows, op, hSN, [charge], found)  # (B, h, S, N)
        elif name == "capped":
            charges = [("scale", (last,)), ("tanh", ()), ("scale", ())]
            last = rec.made("capped", rows, ops["capped"], hSN, charges, found)  # (B, h, S, N)
        else:
            last = rec.made(name, rows, ops[name], hSN, [("scale", (last,))], found)  # (B, h, S, N)
    op = f"softmax({rows.chain[-1]}, dim=-1)"
    if not kept:  # made again by the blocks when read (if kept), as the steps before it
        weights = rec.made("weights", rows, op, hSN, [("softmax", (last,))], found, held)
    else:
        rec.meter.charge("softmax", last, out=weights)
        weights = rec.step("weights", weights, op, hSN, nonfinite=found.get("weights", 0))
    rec.meter.charge("matmul", weights, v, out=context)
    v_name = "v_rep" if config.grouped else "v"
    # (B, h, S, d)
    proven = rows.finite and "context" not in rec.replace  # by the bounds (eager.bounded)
    if proven:  # nothing to count, here or in merged (the same values)
        rec.proven_finite.add("context")
    return rec.step(
        "context",
        context,
        f"weights @ {v_name}",
        lay.ax("h", "S", "d"),
        nonfinite=0 if proven else None,
    )


def _held(rec: _Recorder[T], rows: Rows[T]) -> dict[tuple[int, ...], T]:
    """An (S, N) buffer for the weights of the lead index ``hold`` when they are remade (not
    kept whole) on a computing backend: the blocks of that head write their weights there, so
    a view of that head reads them without making them again."""
    if (
        rec.hold is None
        or "weights" not in rec.remake
        or not rec.keeps("weights")
        or not rows.be.computes
    ):
        return {}
    return {rec.hold: rows.be.empty(rows.shape[-2:], rows.dtype)}  # (S, N)


def check_hold(config: AttentionConfig, hold: tuple[int, ...] | None) -> tuple[int, ...] | None:
    """``hold`` as a tuple of ints, checked against the config's batch and heads.

    >>> check_hold(AttentionConfig(seq=3, hidden=8, heads=2), (1,))
    (1,)
    >>> try:
    ...     check_hold(AttentionConfig(seq=3, hidden=8, heads=2), (2,))
    ... except ConfigError as error:
    ...     print(error)
    hold=(2,) is not a head of these sizes; give (head,) with head in 0..1
    """
    if hold is None:
        return None
    heads = f"head in 0..{config.heads - 1}"
    if config.batch is None:
        lead: tuple[int, ...] = (config.heads,)
        want = f"give (head,) with {heads}"
    else:
        lead = (config.batch, config.heads)
        want = f"give (batch item, head) with batch item in 0..{config.batch - 1} and {heads}"
    index = tuple(hold)
    if len(index) != len(lead) or not all(
        isinstance(i, int) and 0 <= i < n for i, n in zip(index, lead, strict=True)
    ):
        raise ConfigError(f"hold={hold!r} is not a head of these sizes; {want}")
    return index


def _fused_context(rows: Rows[T], q: T, k: T, v: T, causal: bool = False) -> T | None:
    """The context of q (B, h, S, d), k, v (B, h, N, d) as recorded, by the backend's fused
    kernel (torch's SDPA: the bits a user gets calling it on these tensors), when the chain has
    nothing it lacks (no soft-cap) and every value is proven finite (nothing to count block by
    block); else None. The (S, N) steps are then recipes, weights too. ``causal``: the mask
    is the causal rule alone."""
    be = rows.be
    if not be.computes or not rows.finite or rows.cap is not None:
        return None
    return be.fused_attention(q, k, v, rows.factor, rows.mask, rows.additive, causal)


def _run_rows(
    rec: _Recorder[T],
    rows: Rows[T],
    weights: T | None,
    context: T,
    held: Mapping[tuple[int, ...], T],
) -> dict[str, int]:
    """Compute the blocks (on a computing backend); the non-finite values of each step of the
    chain: none when bounds on q, k, v prove every value finite, else counted block by block.
    ``held``: (S, N) buffers for the weights of some lead indices (see :func:`_held`)."""
    if not rows.be.computes:
        return {}
    tally = None if rows.finite else Tally(rec.nonfinite)
    rows.run(weights, context, tally, held)
    return tally.found if tally is not None else {}


def _qk_norm(
    config: AttentionConfig,
    be: Backend[T],
    rec: _Recorder[T],
    lay: _Layout,
    q: T,
    k: T,
    p: Mapping[str, T],
) -> tuple[T, T]:
    """RMSNorm of q and k with their weights n_q, n_k: per head over d, or over the width."""
    eps = config.qk_norm_eps if config.qk_norm_eps is not None else 1e-6
    lab = lay.lab
    if config.qk_norm == "full":
        q_axes, k_axes = lay.ax("S", lab.q_width), lay.ax(lab.keys, lab.kv_width)
    else:
        q_axes, k_axes = lay.ax("h", "S", "d"), lay.ax(lab.kv_heads, lab.keys, "d")
    src = "_proj" if config.qk_norm == "full" else ""
    q_n = be.rms_norm(q, p["n_q"], eps)  # (B, h, S, d), or (B, S, h·d) with --qk-norm full
    q_n = rec.step("q_norm", q_n, f"rms_norm(q{src}) * n_q", q_axes)
    k_n = be.rms_norm(k, p["n_k"], eps)  # (B, g, N, d), or (B, N, g·d)
    k_n = rec.step("k_norm", k_n, f"rms_norm(k{src}) * n_k", k_axes)
    return q_n, k_n


def _relative(
    be: Backend[T], rec: _Recorder[T], lay: _Layout, scaled: T, last: str, onehot: T, table: T
) -> T:
    """T5: the bias of each (query, key) bucket and head, added to the scores."""
    N = lay.lab.keys
    picked = be.matmul(onehot, table)  # (S, N, buckets) @ (buckets, h) -> (S, N, h)
    bias = be.transpose(be.transpose(picked, 0, 2), 1, 2)  # (h, S, N)
    op = "rel_bias[bucket(j - i)].permute(2, 0, 1)"
    bias = rec.step("position_bias", bias, op, ("h", "S", N))
    return rec.step("biased", be.add(scaled, bias), f"{last} + position_bias", lay.ax("h", "S", N))


def _softcap(cap: float, be: Backend[T], rec: _Recorder[T], lay: _Layout, scaled: T) -> T:
    """Logit soft-capping (Gemma 2): C * tanh(scaled / C), before the mask."""
    capped = be.scale(be.tanh(be.scale(scaled, 1.0 / cap)), cap)  # (B, h, S, N)
    op = f"{cap:g} * tanh(scaled / {cap:g})"
    return rec.step("capped", capped, op, lay.ax("h", "S", lay.lab.keys))


def _apply_mask(
    config: AttentionConfig,
    be: Backend[T],
    rec: _Recorder[T],
    lay: _Layout,
    scaled: T,
    mask: T,
    plan: MaskPlan,
) -> T:
    """The combined mask, then the scores it leaves (-inf where a key is masked)."""
    mask = _record_mask(
        config, be, rec, lay, mask, plan
    )  # (B, 1, S, N), or any shape broadcasting to the scores
    if plan.additive:
        masked = rec.step(
            "masked", be.add(scaled, mask), "scaled + mask", lay.ax("h", "S", lay.lab.keys)
        )  # (B, h, S, N)
    else:
        masked = rec.step(
            "masked",
            be.where(mask, scaled, -math.inf),
            "where(mask, scaled, -inf)",
            lay.ax("h", "S", lay.lab.keys),
        )  # (B, h, S, N)
    return masked


def _record_mask(
    config: AttentionConfig,
    be: Backend[T],
    rec: _Recorder[T],
    lay: _Layout,
    mask: T,
    plan: MaskPlan,
) -> T:
    """The ``mask`` step, with a note when it leaves query rows without any key."""
    mask = rec.step(
        "mask", mask, plan.op, plan.axes
    )  # (B, 1, S, N), or any shape broadcasting to the scores
    values = be.to_numpy(mask)
    scores = (*lay.sizes, config.heads, config.seq, config.keys)  # (B, h, S, N)
    if values is not None and (dead := dead_rows(values, plan.additive, scores)):
        rec.notes.append(_dead_note(dead))
    return mask


def _declare_mask(config: AttentionConfig, rec: _Recorder[T], lay: _Layout, plan: MaskPlan) -> None:
    """Flash's ``mask`` step: the rules, made into the whole mask only if its value is read;
    counts the query rows it leaves without any key, block by block."""
    whole = plan.source
    rec.declare(
        "mask", whole.shape, whole.dtype, f"{plan.op} (made tile by tile)", plan.axes, whole.make
    )
    if rec.be.computes:
        scores = (*lay.sizes, config.heads, config.seq, config.keys)  # (B, h, S, N)
        if dead := dead_rows_by_block(plan, scores, config.blocks[0]):
            rec.notes.append(_dead_note(dead))


def _dead_note(dead: int) -> str:
    return (
        f"{dead} query row(s) attend to no key (every key masked): their weights and context "
        "are zeros, as in torch's scaled_dot_product_attention, not NaN"
    )


def _merge(
    config: AttentionConfig,
    be: Backend[T],
    rec: _Recorder[T],
    lay: _Layout,
    context: T,
    p: Mapping[str, T],
) -> T:
    """context -> sequence first -> merged heads -> output linear layer."""
    width = lay.lab.q_width
    heads_last = rec.view(
        "context_heads",
        be.transpose(context, lay.n, lay.n + 1),
        f"context.transpose({lay.swap})",
        lay.ax("S", "h", "d"),
    )  # (B, S, h, d)
    proven = 0 if "context" in rec.proven_finite else None  # the values of context, reshaped
    # (B, S, h·d)
    flat = be.reshape(heads_last, (*lay.sizes, config.seq, config.heads * config.head_dim))
    merged = rec.step(
        "merged",
        flat,
        f"context_heads.reshape({lay.dims}S, {width})",
        lay.ax("S", width),
        nonfinite=proven,
    )
    return rec.step(
        "output",
        be.linear(merged, p["w_o"], p.get("b_o")),
        _linear_op("merged", "o", p),
        lay.ax("S", "H"),
    )  # (B, S, H)


def _linear_op(x: str, c: str, p: Mapping[str, object]) -> str:
    """``x @ w_c.T + b_c``, without ``+ b_c`` when the layer has no bias."""
    return f"{x} @ w_{c}.T" + (f" + b_{c}" if f"b_{c}" in p else "")


class _Recorder(Generic[T]):
    """Turns each backend result into a :class:`Step` with its cost and passes the tensor on.

    The algorithm calls the backend through ``meter``, which charges every operation; a step's
    FLOPs are the charges since the previous step. Steps recorded again under the same name
    (the tiles of flash) add their FLOPs and count as repeats of the first record."""

    def __init__(
        self,
        be: Backend[T],
        config: AttentionConfig,
        keep_values: bool | Collection[str],
        replace: Mapping[str, StepReplacement] | None = None,
        threads: int = 1,
        shapes: Trace | None = None,
        remake: Collection[str] = (),
        hold: tuple[int, ...] | None = None,
    ) -> None:
        self.be, self.keep_values, self.replace = be, keep_values, replace or {}
        self.remake = frozenset(remake)  # kept as recipes made on first read, not held
        self.hold = hold  # the lead index whose part of the remade weights is held
        self.shapes = shapes  # the shape trace of the same config (flash's tile totals)
        self.threads = threads  # for independent blocks of work (flash's query blocks)
        self._lock = threading.Lock()
        self.meter: CostMeter[T] = CostMeter(be)
        self.registry = Registry()
        self.lead: tuple[str, ...] = (
            ("B",) if config.batched else ()
        )  # the batch axis, for flash's tile axes
        self.steps: list[Step] = []
        self.notes: list[str] = []  # warnings about the values, e.g. fully masked query rows
        self._repeats: dict[str, list[int]] = {}  # name -> [extra flops, extra repeats]
        self._late: dict[str, T] = {}  # steps whose buffer is filled after they are recorded
        self.proven_finite: set[str] = set()  # steps whose values bounds prove finite

    def keeps(self, name: str) -> bool:
        """Whether the values of step ``name`` are kept."""
        keep = self.keep_values
        return keep if isinstance(keep, bool) else name in keep

    def step(
        self,
        name: str,
        value: T,
        op: str,
        axes: tuple[str, ...],
        *,
        view: bool = False,
        contract: str | None = None,
        times: int = 1,
        again: Callable[[], T] | None = None,
        nonfinite: int | None = None,
        part: Callable[[tuple[int, ...]], T] | None = None,
    ) -> T:
        """Record ``value`` as step ``name``; ``contract`` names a contracted axis the recorder
        cannot see (an input that is no step); ``times`` counts identical repeats; ``again``
        makes the same values anew (on the plain backend), kept instead of ``value`` when the
        algorithm goes on to overwrite ``value`` in place (or never made it whole), and
        ``part(index)`` makes those of one leading index alone;
        ``nonfinite`` is the count of NaN and ±inf when the caller made it (else counted)."""
        if name in self._repeats:
            return self._repeat(name, value, axes, times)
        if name in self.replace:  # a suspected mistake, tested by attntrace diff
            done = {s.name: s.value for s in self.steps if s.value is not None}
            value = self.replace[name](done, value)
            again, nonfinite = None, None  # the replacement is what is kept, and counted
        shape = self.be.shape(value)
        assert len(shape) == len(axes), f"{name}: {shape} vs {axes}"  # a bug, not user input
        charges, inputs = self.meter.take()
        flops, terms = resolve(charges, shape, axes, self.registry, contract)
        names = tuple(
            dict.fromkeys(found[0] for found in map(self.registry.lookup, inputs) if found)
        )
        be = self.be  # the recipe must not hold the recorder: a cycle would keep every step alive
        stored = (
            None
            if not self.keeps(name)
            else be.to_numpy(value)
            if again is None
            else cast("np.ndarray", _recipe(be, again, part))
        )  # made on first read
        bad = (self._nonfinite(name, value, view) if nonfinite is None else nonfinite) * times
        self.steps.append(
            Step(
                name,
                shape,
                self.be.dtype(value),
                stored,
                index=len(self.steps),
                op=op,
                axes=axes,
                view=view,
                flops=flops * times,
                terms=terms,
                inputs=names,
                repeat=times,
                nonfinite=bad,
            )
        )
        self._repeats[name] = [0, 0, 0]
        self.registry.add(value, name, axes)
        return value

    def _repeat(self, name: str, value: T, axes: tuple[str, ...], times: int) -> T:
        charges, _ = self.meter.take()
        flops = times * sum(c.coef * math.prod(c.shape) * c.k for c in charges)
        bad = times * self._nonfinite(name, value, False)
        with self._lock:  # flash's query blocks repeat steps from several threads
            tally = self._repeats[name]
            tally[0] += flops
            tally[1] += times
            tally[2] += bad
        self.registry.add(value, name, axes)
        return value

    def made(
        self,
        name: str,
        rows: Rows[T],
        op: str,
        axes: tuple[str, ...],
        charges: Sequence[tuple[str, tuple[T, ...]]],
        found: Mapping[str, int],
        held: Mapping[tuple[int, ...], T] | None = None,
    ) -> T:
        """Record step ``name`` of the blocked chain (:mod:`attntrace.engine.eager`): a stand-in of
        no memory, charged as the backend operations ``charges`` on whole tensors would be,
        its values (when kept) made again by the same blocks on first read; the (S, N) parts
        of ``held`` (filled by the blocks) are read as they are."""
        value = self.be.stand_in(rows.shape, rows.dtype)  # (B, h, S, N)
        for op_name, args in charges:
            self.meter.charge(op_name, *args, out=value)
        again = (lambda: rows.make(name)) if self.be.computes else None
        parts = dict(held or {})

        def part(at: tuple[int, ...]) -> T:
            return parts[at] if at in parts else rows.make(name, at)

        return self.step(
            name, value, op, axes, again=again, nonfinite=found.get(name, 0), part=part
        )

    def nonfinite(self, name: str, value: T) -> int:
        """NaN and ±inf in ``value`` by the rule of step ``name`` (see :meth:`_nonfinite`)."""
        return self._nonfinite(name, value, False)

    def _nonfinite(self, name: str, value: T, view: bool) -> int:
        """NaN and ±inf in ``value`` (0 on backends without values, and for views, which hold the
        values of an earlier step); -inf is what masking writes, so mask steps count NaN and
        +inf."""
        if view or not self.be.computes:
            return 0
        array = self.be.to_numpy(value)
        if array is None:
            return 0
        import numpy as np

        if array.dtype.kind not in "fc":
            return 0  # booleans (a mask) and integers hold no NaN or inf
        # two cheap passes: a NaN makes both NaN, +inf the max, -inf the min
        pooled = self.be.pools_checks
        if array.size and np.isfinite(map_parts(extremes, array, pooled=pooled)).all():
            return 0
        if name in MASKING_STEPS:
            return int(np.count_nonzero(np.isnan(array) | np.isposinf(array)))
        return int(array.size - np.count_nonzero(np.isfinite(array)))

    def declare(
        self,
        name: str,
        shape: tuple[int, ...],
        dtype: str,
        op: str,
        axes: tuple[str, ...],
        make: Callable[[], np.ndarray],
    ) -> None:
        """Record step ``name`` that no buffer holds (a view of nothing: no memory); its values,
        when kept, are ``make()`` on first read."""
        value = cast("np.ndarray", Lazy(make)) if self.keeps(name) else None
        self.steps.append(
            Step(name, shape, dtype, value, index=len(self.steps), op=op, axes=axes, view=True)
        )
        self._repeats[name] = [0, 0, 0]

    def view(self, name: str, value: T, op: str, axes: tuple[str, ...], *, times: int = 1) -> T:
        return self.step(name, value, op, axes, view=True, times=times)

    def has(self, name: str) -> bool:
        """Whether step ``name`` is recorded."""
        return name in self._repeats

    def settle(self, names: Collection[str], nonfinite: Mapping[str, int]) -> None:
        """Steps ``names``, recorded once and then repeated without records (flash's tiles),
        take their FLOPs and repeats from the shape trace, plus ``nonfinite`` more values."""
        assert self.shapes is not None  # computing backends always have it
        first = {s.name: s for s in self.steps}
        for name in names:
            total = self.shapes[name]
            self._repeats[name] = [
                total.flops - first[name].flops,
                total.repeat - first[name].repeat,
                nonfinite.get(name, 0),
            ]

    def refresh(self, name: str, value: T) -> None:
        """Take the values of step ``name`` from ``value`` at the end (a buffer filled later)."""
        if self.keeps(name):
            self._late[name] = value

    def finish(self) -> tuple[Step, ...]:
        """The recorded steps, repeats and late values added in."""
        steps = [
            replace(s, value=self.be.to_numpy(self._late[s.name])) if s.name in self._late else s
            for s in self.steps
        ]
        return tuple(
            replace(
                s,
                flops=s.flops + self._repeats[s.name][0],
                repeat=s.repeat + self._repeats[s.name][1],
                nonfinite=s.nonfinite + self._repeats[s.name][2],
            )
            if any(self._repeats[s.name])
            else s
            for s in steps
        )


def estimate_bytes(
    config: AttentionConfig,
    keep_values: bool = True,
    shapes: Trace | None = None,
    *,
    mask: np.ndarray | None = None,
) -> tuple[int, Step]:
    """Bytes a compute backend needs for ``config`` and the largest step, from shapes alone.

    With ``keep_values`` every step that is not a view stays alive; otherwise the trace's peak
    of live tensors. Either way one temporary of the largest size is added.

    >>> needed, largest = estimate_bytes(AttentionConfig(seq=3, hidden=768, heads=12))
    >>> largest.name, needed
    ('x', 9524496)
    """
    shapes = shapes or trace_attention(config, "shape", mask=mask)
    live = sum(s.nbytes for s in shapes.steps if not s.view) if keep_values else shapes.peak_bytes
    largest = max((s for s in shapes.steps if not s.view), key=lambda s: s.nbytes)
    return shapes.param_bytes + live + largest.nbytes, largest


#: Steps that hold the -inf of masking by design: only NaN and +inf count as non-finite there.
MASKING_STEPS = frozenset({"mask", "masked", "mask_tile", "s_masked"})

#: The most flash tiles a compute backend visits (each is a few Python steps): a few seconds.
MAX_TILES = 20_000


def _check_tiles(config: AttentionConfig, shapes: Trace) -> None:
    """Refuse a flash run whose tile loop would take minutes (a tiny --block-size)."""
    tiles = shapes["s_tile"].repeat if "s_tile" in shapes else 0
    if tiles > MAX_TILES:
        raise ConfigError(
            f"--algorithm flash with tiles of {' x '.join(map(str, config.blocks))} visits "
            f"{tiles:,} tiles, "
            f"more than {MAX_TILES:,} computed one by one; raise --block-size or trace shapes only "
            "with --backend shape"
        )


def _check_memory(
    config: AttentionConfig, max_memory: int | None, keep_values: bool, shapes: Trace
) -> None:
    needed, largest = estimate_bytes(config, keep_values, shapes)
    where = f"{largest.name} {largest.shape} alone is {format_bytes(largest.nbytes)}"
    advice = "lower --seq/--hidden/--batch, or trace shapes only with --backend shape"
    if config.algorithm == "eager":
        advice += ", or compute tile by tile without the (S, S) matrix with --algorithm flash"
    check_budget(needed, max_memory, where, advice)
