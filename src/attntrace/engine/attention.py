"""Multi-head attention, written once against the backend interface, recording every
intermediate tensor as a named step (:class:`~attntrace.engine.recorder.Recorder`).

The step order follows the study notes: x -> Q, K, V (three linear layers) -> split heads ->
heads first -> K transposed -> scores = Q @ K^T -> scaled -> softmax -> context = weights @ V
-> sequence first -> merge heads -> output linear layer. :func:`_attend` is that chain. From
the scores to the context, :func:`attntrace.engine.eager.attend` makes the same steps block of
query rows by block, with the speed paths (bounds, a fused kernel, remade weights);
:func:`_weigh` is the same chain on whole (S, N) tensors (T5's bias, attntrace diff), and
:mod:`attntrace.engine.flash` the tiled algorithm.

Variants add their own steps, only when they are on (:data:`VARIANT_STEPS`): ``x_kv`` after
``x`` (cross-attention), ``rope_cos, rope_sin, q_rot, k_rot`` after ``v`` (RoPE),
``k_cache, v_cache, k_all, v_all`` after those (--past: the KV cache read and the keys and
values after the new ones are appended), ``k_rep, v_rep`` after those (grouped-query
attention), ``mask, masked`` after ``scaled`` (causal, key padding or a mask file). The steps
of :data:`STEP_NAMES` keep their names and order.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import warnings
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, NamedTuple, TypeVar, cast

from attntrace.backends import SMALL_WORK_FLOPS, Backend, Source, get_backend, single_threaded_blas
from attntrace.config.attention_config import AttentionConfig, AxisLabels
from attntrace.engine import eager
from attntrace.engine.costs import peak_live_bytes
from attntrace.engine.inputs import given, param_axes, random_sources, with_tensors
from attntrace.engine.masks import MASK_STEPS, MaskPlan, MaskWarning, build_mask, record_mask
from attntrace.engine.memory import check_budget
from attntrace.engine.parallel import check_threads, in_pool, pool
from attntrace.engine.recorder import Recorder, StepReplacement
from attntrace.engine.relative import RELATIVE_STEPS, bias_op, position_bias, relative_sources
from attntrace.engine.rope import ROPE_STEPS, rope_sources
from attntrace.errors import ConfigError
from attntrace.trace import Param, Step, Trace
from attntrace.units import format_bytes

if TYPE_CHECKING:
    import numpy as np

__all__ = [
    "CACHE_STEPS",
    "NONFINITE_NOTE",
    "STEP_NAMES",
    "VARIANT_STEPS",
    "StepReplacement",
    "check_hold",
    "estimate_bytes",
    "nonfinite_notes",
    "step_names",
    "trace_attention",
]

T = TypeVar("T")

#: The steps --past adds: the KV cache read (B, g, N, d), then the keys and values after the S
#: new ones are appended (B, g, N+S, d), which attention reads and the next step caches.
CACHE_STEPS: tuple[str, ...] = ("k_cache", "v_cache", "k_all", "v_all")

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
    "past": ("v", CACHE_STEPS),  # after RoPE, before k_rep: the cache holds rotated keys
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
        "relative": config.position_biased,
        "past": config.past > 0,
    }
    names = list(STEP_NAMES)
    # later inserts first keep the indices
    for variant in ("mask", "relative", "softcap", "grouped", "past", "rope", "qk_norm", "cross"):
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
    backward: bool = False,
    grad_output: np.ndarray | None = None,
    recompute: bool = False,
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
    ``backward``: the gradient steps follow the forward's, from ``grad_output`` (default: drawn
    from the seed) back to d_x and every parameter (:mod:`attntrace.engine.backward`);
    ``recompute``: the forward keeps x alone and runs again in the backward.

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
    >>> t = trace_attention(AttentionConfig(seq=3, hidden=768, heads=12), backward=True)
    >>> t["d_scores"].shape, t["d_scaled"].op
    ((12, 3, 3), 'weights ⊙ (d_weights − rowsum(d_weights ⊙ weights))')
    """
    name = backend if isinstance(backend, str) else backend.name
    workers = check_threads(threads)
    shapes = (
        trace_attention(config, "shape", mask=mask, backward=backward) if name != "shape" else None
    )  # sizes and costs, no arrays (the backward's in the memory estimate too)
    if shapes is not None and shapes.total_flops < SMALL_WORK_FLOPS:
        # before numpy is imported: waking BLAS threads costs more than tiny maths
        single_threaded_blas()
    be = get_backend(backend) if isinstance(backend, str) else backend
    be.check_dtype(config.dtype)
    plan = build_mask(config, mask)
    if be.computes and shapes is not None:
        _check_memory(config, max_memory, keep_values is True, shapes)
        _check_tiles(config, shapes)
    # flash: none
    whole_mask = {"mask": plan.source} if plan and config.algorithm == "eager" else {}
    relative = relative_sources(config, config.algorithm == "eager")  # flash: pairs per tile
    seeded = {**random_sources(config), **rope_sources(config), **relative, **whole_mask}
    sources = with_tensors(config, seeded, tensors or {})
    keep = keep_values if be.computes else False
    if backward:  # the steps the backward reads keep their values
        from attntrace.engine.backward import check_backward, with_saved

        check_backward(config, mask_file=mask is not None)
        keep = with_saved(keep) if be.computes else False
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
            lse=backward and config.algorithm == "flash",
        )
    if backward:
        from attntrace.engine.backward import with_backward

        flash = trace_attention(dataclasses.replace(config, algorithm="flash"), "shape", mask=mask)
        eager_shapes = (
            trace_attention(dataclasses.replace(config, algorithm="eager"), "shape", mask=mask)
            if config.algorithm == "flash"
            else None
        )  # the eager figures beside flash's
        trace = with_backward(
            trace,
            be,
            flash=flash,
            eager=eager_shapes,
            grad_output=grad_output,
            keep_values=keep_values,
            recompute=recompute,
            mistaken=replace,
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
    lse: bool = False,
) -> Trace:
    """Create the tensors of ``sources`` on ``be`` (a None source is a left-out bias), run the
    algorithm through the cost meter and collect the records (``shapes``: the shape trace of the
    same config, whose totals flash's tiles take)."""
    recorder = Recorder(
        be,
        config,
        keep_values,
        replace=replace,
        threads=threads,
        shapes=shapes,
        remake=remake,
        hold=hold,
    )
    names = param_axes(config)
    # a small run starts no threads: the pool's start (and its import) costs more than drawing
    small = shapes is not None and shapes.total_flops < SMALL_WORK_FLOPS
    made = _make_tensors(be, sources, 1 if small else threads)
    params = {name: made[name] for name in names if name in made}
    for name, t in params.items():
        recorder.registry.add(t, name, names[name])
    inputs = {name: t for name, t in made.items() if name not in names}
    _attend(config, cast("Backend[T]", recorder.meter), recorder, inputs, params, plan, lse)
    keep_params = bool(keep_values)  # True, or a non-empty collection of step names
    parameters = tuple(
        Param(
            name=name,
            shape=be.shape(t),
            dtype=be.dtype(t),
            value=be.to_numpy(t) if keep_params else None,
            axes=names[name],
        )
        for name, t in params.items()
    )
    steps = recorder.finish()
    notes = (*recorder.notes, *nonfinite_notes(steps))
    return Trace(
        config=config,
        backend=be.name,
        steps=steps,
        parameters=parameters,
        notes=notes,
        peak_bytes=peak_live_bytes(steps),
    )


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

    >>> x = Step(name="x", shape=(2,), dtype="float32")
    >>> scores = Step(name="scores", shape=(2, 2), dtype="float32", nonfinite=3)
    >>> print(*nonfinite_notes([x, scores]))
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
    new_keys: str = "S"  # the label of the keys x makes: S (with --past too), N (cross)

    @classmethod
    def of(cls, config: AttentionConfig) -> _Layout:
        batched = config.batch is not None
        sizes = (config.batch,) if config.batch is not None else ()
        return cls(
            lead=("B",) if batched else (),
            sizes=sizes,
            lab=config.labels(),
            rotary=config.rotary_dims,
            pairs=config.rope_style == "interleaved",
            new_keys="S" if config.past else config.labels().keys,
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


class _Projection(NamedTuple):
    """One of the q, k, v projections: the step it reads and the labels and sizes of its axes."""

    source: str  # "x", or "x_kv" with cross-attention
    seq: str  # its sequence label: S, or the keys' N
    n_seq: int
    heads: str  # its heads label: h, or the key/value heads' g
    n_heads: int
    width: str  # the label of the projection's width: h·d, or g·d


def _attend(
    config: AttentionConfig,
    be: Backend[T],
    rec: Recorder[T],
    t: Mapping[str, T],
    p: Mapping[str, T],
    plan: MaskPlan | None,
    lse: bool = False,
) -> T:
    """The algorithm of the study notes, a straight chain of backend calls, each recorded as a
    named step. Shapes are written batched; without --batch the leading B is absent."""
    lay = _Layout.of(config)
    q, k, v = _project(config, be, rec, lay, t, p)  # (B, h, S, d), (B, g, N, d), (B, g, N, d)
    if config.qk_norm == "head":
        q, k = _qk_norm(config, be, rec, lay, q, k, p)  # (B, h, S, d), (B, g, N, d)
    if config.rope:
        q, k = _rotate(be, rec, lay, t, q, k)  # (B, h, S, d), (B, g, N, d)
    if config.past:
        k, v = _append(config, be, rec, lay, t, k, v)  # (B, g, N+S, d) each
    if config.grouped:
        k, v = _repeat_kv(config, be, rec, lay, k, v)  # (B, h, N, d) each
    if config.algorithm == "flash":  # tile by tile: no (S, N) matrix is ever formed
        from attntrace.engine.flash import flash_context  # its module only on this path

        # T5's table (buckets, h), ALiBi's slopes (h, 1, 1), or None
        table = p["rel_bias"] if config.relative_bias is not None else t.get("alibi_slopes")
        context = flash_context(config, be, rec, q, k, v, plan, table, lse)  # (B, h, S, d)
        return _merge(config, be, rec, lay, context, p)  # (B, S, H)
    k_name = "k_rep" if config.grouped else _kv_names(config)[0]
    k_t = be.transpose(k, -2, -1)  # (B, h, d, N)
    k_t = rec.view("k_t", k_t, f"{k_name}.transpose(-2, -1)", lay.ax("h", "d", lay.lab.keys))
    ops = _chain_ops(config, plan)
    mask = t.get("mask")  # (B, 1, S, N), or any shape broadcasting to the scores; or None
    if not config.position_biased and not rec.replace:  # block by block: the speed paths
        context = eager.attend(config, rec, q, k_t, v, mask=mask, plan=plan, ops=ops)
    else:  # whole (S, N) steps: a position bias, or a step replaced by attntrace diff
        relative = _bias_inputs(config, t, p)
        weights = _weigh(config, be, rec, lay, q, k_t, mask, plan, relative, ops)  # (B, h, S, N)
        context = be.matmul(weights, v)  # (B, h, S, d)
        context = rec.step("context", context, ops["context"], lay.ax("h", "S", "d"))
    return _merge(config, be, rec, lay, context, p)  # (B, S, H)


def _project(
    config: AttentionConfig,
    be: Backend[T],
    rec: Recorder[T],
    lay: _Layout,
    t: Mapping[str, T],
    p: Mapping[str, T],
) -> tuple[T, T, T]:
    """x (and x_kv) -> q_proj, k_proj, v_proj -> split into heads -> heads first."""
    lab = lay.lab
    x = rec.step("x", t["x"], "x", lay.ax("S", "H"))  # (B, S, H)
    inputs = {"x": x}
    if config.cross:  # (B, N, M)
        inputs["x_kv"] = rec.step("x_kv", t["x_kv"], "x_kv", lay.ax(lab.keys, lab.kv_in))
    of_q = _Projection(
        source="x", seq="S", n_seq=config.seq, heads="h", n_heads=config.heads, width=lab.q_width
    )
    of_kv = _Projection(
        source="x_kv" if config.cross else "x",
        seq=lay.new_keys,
        n_seq=config.keys if config.cross else config.seq,  # --past: the S new tokens' k, v
        heads=lab.kv_heads,
        n_heads=config.groups,
        width=lab.kv_width,
    )
    spec = {"q": of_q, "k": of_kv, "v": of_kv}
    proj: dict[str, T] = {}
    for c, s in spec.items():
        y = be.linear(inputs[s.source], p[f"w_{c}"], p.get(f"b_{c}"))  # (B, S, h·d), (B, N, g·d)
        proj[c] = rec.step(f"{c}_proj", y, _linear_op(s.source, c, p), lay.ax(s.seq, s.width))
    if config.qk_norm == "full":  # OLMo 2: RMSNorm over the whole projection, before the heads
        proj["q"], proj["k"] = _qk_norm(config, be, rec, lay, proj["q"], proj["k"], p)
    d = config.head_dim
    split: dict[str, T] = {}
    for c, s in spec.items():
        y = be.reshape(proj[c], (*lay.sizes, s.n_seq, s.n_heads, d))  # (B, S, h, d), (B, N, g, d)
        op = f"{c}_proj.view({lay.dims}{s.seq}, {s.heads}, d)"
        split[c] = rec.view(f"{c}_heads", y, op, lay.ax(s.seq, s.heads, "d"))
    first: dict[str, T] = {}
    for c, s in spec.items():
        y = be.transpose(split[c], lay.n, lay.n + 1)  # (B, h, S, d), (B, g, N, d)
        op = f"{c}_heads.transpose({lay.swap})"
        first[c] = rec.view(c, y, op, lay.ax(s.heads, s.seq, "d"))
    return first["q"], first["k"], first["v"]


def _chain_ops(config: AttentionConfig, plan: MaskPlan | None) -> dict[str, str]:
    """The op the trace writes for each step from the scores to the context.

    >>> ops = _chain_ops(AttentionConfig(seq=3, hidden=8, heads=2, softcap=30.0), None)
    >>> ops["scaled"], ops["capped"], ops["weights"]
    ('scores / sqrt(4)', '30 * tanh(scaled / 30)', 'softmax(capped, dim=-1)')
    """
    cap, scale = config.softcap, config.scale
    below = "biased" if config.position_biased else "capped" if cap is not None else "scaled"
    last = "masked" if plan is not None else below
    unscaled = " (unscaled)" if scale == 1 else ""
    return {
        "scores": f"{'q_rot' if config.rope else 'q'} @ k_t",
        "scaled": f"scores / sqrt({config.head_dim})"
        if scale is None
        else f"scores * {scale:g}{unscaled}",
        "capped": "" if cap is None else f"{cap:g} * tanh(scaled / {cap:g})",
        "masked": f"{below} + mask"
        if plan is not None and plan.additive
        else f"where(mask, {below}, -inf)",
        "weights": f"softmax({last}, dim=-1)",
        "context": f"weights @ {'v_rep' if config.grouped else _kv_names(config)[1]}",
    }


def _weigh(
    config: AttentionConfig,
    be: Backend[T],
    rec: Recorder[T],
    lay: _Layout,
    q: T,
    k_t: T,
    mask: T | None,
    plan: MaskPlan | None,
    relative: tuple[T, T] | None,
    ops: Mapping[str, str],
) -> T:
    """scores -> scaled -> (capped) -> (position_bias, biased) -> (mask, masked) -> softmax
    weights, each a whole (B, h, S, N) tensor."""
    hSN = lay.ax("h", "S", lay.lab.keys)
    # nobody sees the unscaled scores: fold the scale into q (S·d multiplies, not S·N)
    fold = mask is None and not (rec.keeps("scores") or rec.keeps("scaled"))
    if fold:
        q_scaled = be.scale(q, config.score_scale)  # (B, h, S, d)
        rec.meter.discard()  # charged below, as the traced algorithm does it
        scores = be.matmul(q_scaled, k_t)  # (B, h, S, N)
        scores = rec.step("scores", scores, ops["scores"], hSN, contract="d")
        rec.meter.charge("scale", scores, out=scores)
        scaled = rec.step("scaled", scores, ops["scaled"], hSN)  # (B, h, S, N), already scaled
    else:
        scores = rec.step("scores", be.matmul(q, k_t), ops["scores"], hSN)  # (B, h, S, N)
        scaled = be.scale(scores, config.score_scale)  # (B, h, S, N)
        scaled = rec.step("scaled", scaled, ops["scaled"], hSN)
    last = "scaled"
    if config.softcap is not None:
        c = config.softcap
        capped = be.scale(be.tanh(be.scale(scaled, 1.0 / c)), c)  # (B, h, S, N)
        scaled, last = rec.step("capped", capped, ops["capped"], hSN), "capped"
    if relative is not None:
        scaled = _relative(be, rec, lay, (scaled, last), relative, config)  # (B, h, S, N)
    if mask is not None and plan is not None:
        scores_shape = (*lay.sizes, config.heads, config.seq, config.keys)  # (B, h, S, N)
        mask = record_mask(rec, mask, plan, scores_shape)  # (B, 1, S, N), or broadcasting
        # (B, h, S, N): a float mask added, or -inf where a bool mask is False
        masked = be.add(scaled, mask) if plan.additive else be.where(mask, scaled, -math.inf)
        scaled = rec.step("masked", masked, ops["masked"], hSN)
    if fold and not (rec.keeps("scaled") or rec.keeps("capped")):  # nobody sees its input
        weights = rec.fast.softmax_(scaled)  # (B, h, S, N), in place
        rec.meter.charge("softmax", scaled, out=weights)
    else:
        weights = be.softmax(scaled)  # (B, h, S, N)
    return rec.step("weights", weights, ops["weights"], hSN)


def _repeat_kv(
    config: AttentionConfig, be: Backend[T], rec: Recorder[T], lay: _Layout, k: T, v: T
) -> tuple[T, T]:
    """GQA/MQA: each of the g key/value heads serves h / g consecutive query heads."""
    r, (k_src, v_src) = config.heads // config.groups, _kv_names(config)
    hNd = lay.ax("h", lay.lab.keys, "d")
    k_rep = be.repeat_interleave(k, r, lay.n)  # (B, h, N, d)
    k_rep = rec.step("k_rep", k_rep, f"{k_src}.repeat_interleave({r}, dim={lay.n})", hNd)
    v_rep = be.repeat_interleave(v, r, lay.n)  # (B, h, N, d)
    v_rep = rec.step("v_rep", v_rep, f"{v_src}.repeat_interleave({r}, dim={lay.n})", hNd)
    return k_rep, v_rep


def _kv_names(config: AttentionConfig) -> tuple[str, str]:
    """The steps attention reads its keys and values from (before GQA's repeat).

    >>> _kv_names(AttentionConfig(rope=True)), _kv_names(AttentionConfig(past=4))
    (('k_rot', 'v'), ('k_all', 'v_all'))
    """
    if config.past:
        return "k_all", "v_all"
    return ("k_rot" if config.rope else "k"), "v"


def _append(
    config: AttentionConfig,
    be: Backend[T],
    rec: Recorder[T],
    lay: _Layout,
    t: Mapping[str, T],
    k: T,
    v: T,
) -> tuple[T, T]:
    """--past: the KV cache of the earlier tokens is read, and the S new keys (rotated, when
    RoPE is on) and values are appended along the sequence axis: what attention reads, and
    what the cache holds after the step (a sliding window's cache then keeps the last W-1)."""
    lab = lay.lab
    cache_ax = lay.ax(lab.kv_heads, config.cache_label, "d")  # (B, g, N, d)
    all_ax = lay.ax(lab.kv_heads, lab.keys, "d")  # (B, g, N+S, d)
    k_new = "k_rot" if config.rope else "k_norm" if config.qk_norm == "head" else "k"
    read = f"cache of {config.cache_label} earlier tokens"
    caches = [rec.step(f"{c}_cache", t[f"{c}_cache"], read, cache_ax) for c in "kv"]
    joined = []
    for c, cache, new, new_name in (("k", caches[0], k, k_new), ("v", caches[1], v, "v")):
        shape = (*be.shape(new)[:-2], config.keys, config.head_dim)  # (B, g, N+S, d)
        out = be.full(shape, 0.0, be.dtype(new))  # (B, g, N+S, d)
        if config.cached:  # (--window 1 keeps none)
            be.write(out, lay.n + 1, 0, cache)  # the cache's N keys first
        be.write(out, lay.n + 1, config.cached, new)  # then the S new ones
        rec.meter.inputs.extend((cache, new))  # what the step reads (writes return nothing)
        op = f"cat({c}_cache, {new_name}, dim={lay.n + 1})"
        joined.append(rec.step(f"{c}_all", out, op, all_ax))
    return joined[0], joined[1]


def _bias_inputs(
    config: AttentionConfig, t: Mapping[str, T], p: Mapping[str, T]
) -> tuple[T, T] | None:
    """The per-pair and per-head inputs of the position bias: T5's one-hot (S, N, buckets) and
    table (buckets, h), ALiBi's distances (S, N) and slopes (h, 1, 1); None without a bias."""
    if config.alibi:
        return t["alibi_distance"], t["alibi_slopes"]
    if config.relative_bias is not None:
        return t["rel_onehot"], p["rel_bias"]
    return None


def _relative(
    be: Backend[T],
    rec: Recorder[T],
    lay: _Layout,
    below: tuple[T, str],
    inputs: tuple[T, T],
    config: AttentionConfig,
) -> T:
    """The bias of each (query, key) pair and head (T5's bucket's, or ALiBi's slope times the
    distance), added to the scores ``below`` (the value and its step's name)."""
    N = lay.lab.keys
    (scaled, last), (pairs, heads) = below, inputs
    bias = position_bias(be, pairs, heads, config.alibi)  # (h, S, N)
    bias = rec.step("position_bias", bias, bias_op(config), ("h", "S", N))
    biased = be.add(scaled, bias)  # (B, h, S, N)
    return rec.step("biased", biased, f"{last} + position_bias", lay.ax("h", "S", N))


def _qk_norm(
    config: AttentionConfig,
    be: Backend[T],
    rec: Recorder[T],
    lay: _Layout,
    q: T,
    k: T,
    p: Mapping[str, T],
) -> tuple[T, T]:
    """RMSNorm of q and k with their weights n_q, n_k: per head over d, or over the width."""
    eps = config.qk_norm_eps if config.qk_norm_eps is not None else 1e-6
    lab = lay.lab
    if config.qk_norm == "full":
        q_axes, k_axes = lay.ax("S", lab.q_width), lay.ax(lay.new_keys, lab.kv_width)
    else:
        q_axes, k_axes = lay.ax("h", "S", "d"), lay.ax(lab.kv_heads, lay.new_keys, "d")
    src = "_proj" if config.qk_norm == "full" else ""
    q_n = be.rms_norm(q, p["n_q"], eps)  # (B, h, S, d), or (B, S, h·d) with --qk-norm full
    q_n = rec.step("q_norm", q_n, f"rms_norm(q{src}) * n_q", q_axes)
    k_n = be.rms_norm(k, p["n_k"], eps)  # (B, g, N, d), or (B, N, g·d)
    k_n = rec.step("k_norm", k_n, f"rms_norm(k{src}) * n_k", k_axes)
    return q_n, k_n


def _rotate(
    be: Backend[T], rec: Recorder[T], lay: _Layout, t: Mapping[str, T], q: T, k: T
) -> tuple[T, T]:
    """RoPE: the cos/sin tables of the positions, then q and k rotated, dimension i with
    i + d/2 (--rope-style half) or 2i with 2i + 1 (interleaved)."""
    lab = lay.lab
    at = ", pos = N..N+S-1" if lay.new_keys == "S" and lab.keys != "S" else ""  # --past
    cos = rec.step("rope_cos", t["rope_cos"], f"cos(pos * base^(-2i/d)){at}", ("S", "d"))  # (S, d)
    sin = rec.step("rope_sin", t["rope_sin"], f"sin(pos * base^(-2i/d)){at}", ("S", "d"))  # (S, d)
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
        lay.ax(lab.kv_heads, lay.new_keys, "d"),
    )  # (B, g, S, d)
    return q_rot, k_rot


def _rotate_part(
    be: Backend[T], rec: Recorder[T], lay: _Layout, q: T, k: T, cos: T, sin: T
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
        lay.ax(lay.lab.kv_heads, lay.new_keys, "d"),
    )
    return q_rot, k_rot


def _merge(
    config: AttentionConfig,
    be: Backend[T],
    rec: Recorder[T],
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
