"""``attntrace diff``: run the user's attention beside the reference with the same weights and
input, align the steps by their numbers, and name the bug at the first step that differs.

>>> import numpy as np
>>> from attntrace import AttentionConfig
>>> def attend(x, p):  # softmax over the queries: a silent bug
...     q, k, v = (x @ p[f"w_{c}"].T + p[f"b_{c}"] for c in "qkv")
...     q, k, v = (t.reshape(3, 2, 4).transpose(1, 0, 2) for t in (q, k, v))
...     scores = q @ k.transpose(0, 2, 1) / np.sqrt(4)
...     e = np.exp(scores - scores.max(axis=1, keepdims=True))
...     weights = e / e.sum(axis=1, keepdims=True)
...     merged = (weights @ v).transpose(1, 0, 2).reshape(3, 8)
...     return merged @ p["w_o"].T + p["b_o"]
>>> report = diff(attend, AttentionConfig(seq=3, hidden=8, heads=2))
>>> report.ok, report.diagnosis.step, report.diagnosis.bug
(False, 'weights', 'softmax-axis-1')
"""

from __future__ import annotations

import copy
import math
from dataclasses import asdict, dataclass, fields, replace
from typing import TYPE_CHECKING, Any

from attntrace.config.attention_config import AttentionConfig
from attntrace.errors import ConfigError

if TYPE_CHECKING:  # the machinery is imported when a diff runs: import attntrace stays light
    from collections.abc import Collection

    import numpy as np

    from attntrace.diffing.align import Row, UserSteps
    from attntrace.diffing.backward_diff import GradientReport
    from attntrace.diffing.diagnose import Diagnosis
    from attntrace.diffing.layer import Layer
    from attntrace.diffing.verdict import Read, Undecided
    from attntrace.errors import CannotTellError
    from attntrace.tools.verify import Tolerance

__all__ = [
    "DIFF_SCHEMA_ID",
    "DiffReport",
    "cannot_tell_report",
    "check_diff_memory",
    "decode_diff",
    "diff",
    "diff_layer",
    "judge",
    "probe_sizes",
    "resolve_layer",
    "resolve_read",
    "run_diff",
    "with_gradients",
]

#: The ``schema`` value of :meth:`DiffReport.to_dict` (2: ``verdict``, ``cannot_tell``,
#: ``read``, ``nonfinite`` and each row's ``nan``/``inf`` added; the keys of 1 unchanged).
DIFF_SCHEMA_ID = "attntrace.diff/2"


@dataclass(frozen=True)
class DiffReport:
    """The aligned steps of one diff and the diagnosis at the first that differs."""

    config: AttentionConfig
    target: str  # the user's layer, e.g. "Attention (nn.Module)"
    weights: str  # where the shared weights came from
    tolerance: Tolerance
    rows: tuple[Row, ...]
    diagnosis: Diagnosis | None
    notes: tuple[str, ...] = ()  # how the code was run ("run in eval mode (dropout off)")
    backward: GradientReport | None = None  # the gradients compared (diff --backward)
    read: tuple[Read, ...] = ()  # the choices read from the module, not given as flags
    undecided: Undecided | None = None  # CANNOT TELL: what is missing and what would decide
    nonfinite: str = ""  # where the code's numbers first turn NaN or inf, and why

    def __repr__(self) -> str:
        first = self.first
        where = "every step matches" if first is None else f"first differs at {first.step.name}"
        return f"<DiffReport {self.target}: {len(self.rows)} steps, {where}>"

    def _repr_html_(self) -> str:
        """Jupyter's view: the aligned steps and the diagnosis (:mod:`attntrace.display`)."""
        from attntrace.display import html

        return html(self)

    @property
    def ok(self) -> bool:
        """True when every step the user's code makes matches the reference (and, with
        ``backward``, every gradient)."""
        return (
            self.undecided is None
            and all(r.ok for r in self.rows)
            and (self.backward is None or self.backward.ok)
        )

    @property
    def verdict(self) -> str:
        """``"match"``, ``"differs"`` or ``"cannot tell"`` (:mod:`attntrace.diffing.verdict`)."""
        if self.undecided is not None:
            return "cannot tell"
        return "match" if self.ok else "differs"

    @property
    def first(self) -> Row | None:
        """The row of the diagnosis (the highlighted one), else the first that differs."""
        step = self.diagnosis.step if self.diagnosis is not None else None
        return next((r for r in self.rows if r.step.name == step and not r.ok), None) or next(
            (r for r in self.rows if not r.ok), None
        )

    def to_dict(self) -> dict[str, Any]:
        """The report as JSON-ready data (``attntrace diff --format json``)."""
        d = self.diagnosis
        return {
            "schema": DIFF_SCHEMA_ID,
            "target": self.target,
            "weights": self.weights,
            "config": self.config.to_dict(),
            "ok": self.ok,
            "tolerance": {"rtol": self.tolerance.rtol, "atol": self.tolerance.atol},
            "rows": [_row_dict(r) for r in self.rows],
            "diagnosis": None if d is None else {k: _finite(v) for k, v in asdict(d).items()},
            "notes": list(self.notes),
            **({} if self.backward is None else {"backward": self.backward.to_dict()}),
            "verdict": self.verdict,
            "cannot_tell": None
            if self.undecided is None
            else {"missing": self.undecided.missing, "remedy": self.undecided.remedy},
            "read": [r.to_dict() for r in self.read],
            "nonfinite": self.nonfinite or None,
        }


def _finite(value: Any) -> Any:
    return None if isinstance(value, float) and not math.isfinite(value) else value


def _row_dict(row: Row) -> dict[str, Any]:
    u, a = row.user, row.agreement
    return {
        "step": row.step.name,
        "shape": list(row.step.shape),
        "axes": list(row.step.axes),
        "status": row.status,
        "user_step": u.name if u else None,
        "location": u.location if u else None,
        "source": u.source if u else None,
        "user_shape": list(u.shape) if u else None,
        "layout": a.layout if a else None,
        "max_abs": _finite(a.max_abs) if a else None,
        "max_rel": _finite(a.max_rel) if a else None,
        "nan": a.nan if a else 0,
        "inf": a.inf if a else 0,
    }


def judge(
    report: DiffReport, explicit: Collection[str], reads: tuple[Read, ...] = ()
) -> DiffReport:
    """``report`` with what was read from the module and, where the evidence does not decide,
    the reason it cannot tell (``explicit``: the options the user gave;
    :func:`attntrace.diffing.verdict.undecided`)."""
    from attntrace.diffing.verdict import undecided

    report = replace(report, read=reads, nonfinite=nonfinite_line(report))
    if report.diagnosis is None or all(r.ok for r in report.rows):
        return report
    why = undecided(report, explicit, reads)
    return report if why is None else replace(report, undecided=why)


def cannot_tell_report(config: AttentionConfig, target: str, error: CannotTellError) -> DiffReport:
    """The report of a diff that could not run to a verdict (a class whose attention the
    reference cannot express): no rows, the reason and the remedy.

    >>> from attntrace.errors import CannotTellError
    >>> r = cannot_tell_report(AttentionConfig(), "X (nn.Module)", CannotTellError("no", "yes"))
    >>> r.verdict, r.ok, r.undecided
    ('cannot tell', False, Undecided(missing='no', remedy='yes'))
    """
    from attntrace.diffing.verdict import Undecided
    from attntrace.tools.verify import tolerance

    return DiffReport(
        config=config,
        target=target,
        weights="",
        tolerance=tolerance(config),
        rows=(),
        diagnosis=None,
        undecided=Undecided(error.missing, error.remedy),
    )


def nonfinite_line(report: DiffReport) -> str:
    """Where the code's numbers first turn NaN or inf where the reference's are numbers, and
    why when a step says so ("" when they never do)."""
    seen = [(r, r.agreement) for r in report.rows if r.agreement is not None and r.user]
    found = next(((r, a) for r, a in seen if a.nan), None)
    found = found or next(  # -inf where a mask fills the scores is the mask's doing
        ((r, a) for r, a in seen if a.inf and r.step.name not in ("mask", "masked")), None
    )
    if found is None:
        return ""
    row, a = found
    assert row.user is not None
    kinds = f"{a.nan} NaN" if a.nan else f"{a.inf} inf"
    why = _why_nonfinite(report, row.step.name)
    return (
        f"the code's {row.user.name} holds {kinds} from step {row.step.name} "
        f"({row.user.location}), where the reference has numbers{why}"
    )


def _why_nonfinite(report: DiffReport, step: str) -> str:
    """The cause a NaN in the weights usually has: every key of some query masked."""
    import numpy as np

    masked = next((r for r in report.rows if r.step.name == "masked"), None)
    if step not in ("weights", "context", "context_heads", "merged", "output"):
        return ""
    if masked is None or masked.user is None:
        return ""
    v = np.asarray(masked.user.value)
    if v.ndim == 0 or not v.size or v.dtype.kind != "f":
        return ""
    with np.errstate(invalid="ignore"):
        rows = np.all(np.isneginf(v) | (v <= -1e30), axis=-1)  # (…, S): a query with no key
    n = int(np.count_nonzero(rows))
    return f": every key masked in {n} row(s) of the scores (-inf throughout)" if n else ""


def diff(
    target: Any,
    config: AttentionConfig | None = None,
    *,
    x: np.ndarray | None = None,
    max_memory: int | None = None,
    backward: bool = False,
) -> DiffReport:
    """Run ``target`` (an ``nn.Module`` or a function ``fn(x, params)``, see
    :mod:`attntrace.diffing.layer`) beside the reference attention of ``config`` with the same
    weights and input ``x`` (seeded when None), and diagnose the first step that differs.
    A module's own sizes (its weights, ``num_heads`` …) fill in and must agree with ``config``;
    ``x`` gives the batch and sequence length. ``max_memory``: see :func:`check_diff_memory`.
    ``backward``: the gradients too (:mod:`attntrace.diffing.backward_diff`).

    A module is put in eval mode (dropout off; the report's notes say so) and must give the
    same output on two calls on the same x.

    ``target`` runs in this process, without a time or memory limit (the CLI's ``attntrace
    diff`` runs it in a child process: ``--timeout`` and the budget)."""
    options = asdict(config if config is not None else AttentionConfig())
    given = set() if config is None else _non_default(config)
    from attntrace.diffing.layer import as_layer
    from attntrace.errors import CannotTellError

    name = getattr(target, "__name__", type(target).__name__)
    try:
        heads = options["heads"] if "heads" in given else None  # a per-head fused qkv needs it
        layer = as_layer(target, **probe_sizes(options["seq"], options["batch"], x), heads=heads)
        name = layer.name
        return diff_layer(layer, options, given, x, max_memory, backward)
    except CannotTellError as exc:  # what the reference cannot express: a verdict of its own
        return cannot_tell_report(config or AttentionConfig(), name, exc)


def diff_layer(
    layer: Layer,
    options: dict[str, Any],
    explicit: set[str],
    x: np.ndarray | None,
    max_memory: int | None = None,
    backward: bool = False,
) -> DiffReport:
    """The diff of a built :class:`~attntrace.diffing.layer.Layer` under ``options`` (every
    AttentionConfig field; ``explicit``: those the user gave), judged
    (:func:`attntrace.diffing.verdict.judge`)."""
    cfg, tensors, reads = resolve_read(layer, options, explicit, x)
    if backward:
        from attntrace.engine.backward import check_backward

        check_backward(cfg)  # --past: a decode step keeps no gradients (one line, exit 2)
    if cfg.past:  # a decode step: the code is called with the reference's cache
        from attntrace.diffing.decode import decode_layer

        layer = decode_layer(layer, tensors, cfg.past)
        report = decode_diff(layer, cfg, tensors, max_memory)  # and the cache it returns
    else:
        report = run_diff(layer, cfg, tensors, max_memory=max_memory)
    report = judge(report, explicit, reads)
    from attntrace.diffing.unstated import explain

    report = explain(report, tensors, explicit)  # an unstated RoPE, a padding mask made inside
    return with_gradients(report, layer, tensors) if backward else report


def decode_diff(
    layer: Layer, config: AttentionConfig, tensors: dict[str, Any], max_memory: int | None = None
) -> DiffReport:
    """:func:`run_diff` of a decode step (``layer`` from
    :func:`~attntrace.diffing.decode.decode_layer`), then the cache it returns set against the
    reference's after the append; a step that raised after joining the cache on the wrong axis
    is reported with that bug named (:mod:`attntrace.diffing.decode_cache`)."""
    import numpy as np

    from attntrace.diffing.decode_cache import check_cache, stopped_fields, wrong_axis
    from attntrace.diffing.user_side import UserCodeError

    try:
        report = run_diff(layer, config, tensors, max_memory=max_memory)
    except UserCodeError as exc:
        wrong = wrong_axis(layer, config, tensors)  # run again, its cat calls watched
        if wrong is None:
            raise
        x = np.asarray(tensors["x"]).astype(config.dtype)  # (B, S, H)
        if layer.prenorm is not None:
            x = _normed(layer, config, x)
        return DiffReport(**stopped_fields(layer, config, tensors, x, wrong, exc))
    return check_cache(report, layer, tensors)  # type: ignore[no-any-return]


def with_gradients(report: DiffReport, layer: Layer, tensors: dict[str, Any]) -> DiffReport:
    """``report`` with its ``backward`` section (``tensors``: x and the weights the diff ran
    with, before their cast to the config's dtype): :mod:`attntrace.diffing.backward_diff`."""
    import numpy as np

    from attntrace.diffing.backward_diff import compare_gradients

    cfg = report.config
    cast = {k: None if v is None else np.asarray(v).astype(cfg.dtype) for k, v in tensors.items()}
    section = compare_gradients(
        layer,
        cfg,
        cast,
        report.tolerance,
        forward_ok=all(r.ok for r in report.rows),
        own_layout=any(n.startswith("compared with its own layout") for n in report.notes),
        normed=None if layer.prenorm is None else lambda x: _normed(layer, cfg, x),
    )
    return replace(report, backward=section)


def probe_sizes(seq: int, batch: int | None, x: np.ndarray | None) -> dict[str, Any]:
    """The ``seq`` and ``batch`` of the input a module is probed with: those of ``x``, (B, S, H)
    or (S, H), when given, else the options'.

    >>> import numpy as np
    >>> probe_sizes(3, None, np.zeros((2, 5, 64))), probe_sizes(3, 4, None)
    ({'seq': 5, 'batch': 2}, {'seq': 3, 'batch': 4})
    """
    if x is None or x.ndim not in (2, 3):
        return {"seq": seq, "batch": batch}  # another rank: resolve_run names the fix
    return {"seq": int(x.shape[-2]), "batch": int(x.shape[0]) if x.ndim == 3 else None}


#: What a diff holds at its peak, in reference traces with every step's values: the reference,
#: the user's captured tensors (about as many), a bug replayed on the reference, and the first
#: replay that explained the divergence (kept for the report).
TRACES_HELD = 4


def check_diff_memory(config: AttentionConfig, max_memory: int | None = None) -> None:
    """Refuse a diff whose tensors would not fit ``max_memory`` bytes (default: half the
    available memory), from the shapes alone, before anything is allocated.

    >>> check_diff_memory(AttentionConfig(batch=2, seq=8000, hidden=64, heads=4),
    ...                   2**30)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    attntrace.errors.MemoryBudgetError: this trace needs about 30.62 GiB (diff holds ...
    """
    from attntrace.engine.attention import estimate_bytes
    from attntrace.engine.memory import check_budget
    from attntrace.units import format_bytes

    one, largest = estimate_bytes(config, True)
    where = (
        f"diff holds the reference, your code's tensors and bug replays, each with every "
        f"step's values; {largest.name} {largest.shape} alone is {format_bytes(largest.nbytes)}"
    )
    advice = (
        "lower --seq or --batch (diff compares values, so it keeps them all), or give "
        "--max-memory a larger budget if the machine has the room"
    )
    check_budget(TRACES_HELD * one, max_memory, where, advice)


def check_diff_dtype(config: AttentionConfig) -> None:
    """Refuse bfloat16: the reference that diff compares against runs on numpy, which has none.

    >>> check_diff_dtype(AttentionConfig(dtype="bfloat16"))
    Traceback (most recent call last):
    ...
    attntrace.errors.ConfigError: diff --dtype bfloat16: the reference runs on numpy, which ...
    """
    if config.dtype == "bfloat16":
        raise ConfigError(
            "diff --dtype bfloat16: the reference runs on numpy, which has no bfloat16; give "
            "--dtype float32 (a bfloat16 module is compared converted to it) or float16"
        )


def _non_default(config: AttentionConfig) -> set[str]:
    """The fields of ``config`` that differ from the defaults, by option name."""
    default = AttentionConfig()
    names = {f.name for f in fields(config) if getattr(config, f.name) != getattr(default, f.name)}
    return {"head_dim" if n == "head_dim_override" else n for n in names} | {"batch", "seq"}


def resolve_layer(
    layer: Layer, options: dict[str, Any], explicit: set[str], x: np.ndarray | None
) -> tuple[AttentionConfig, dict[str, Any]]:
    """The config and tensors of a diff: the options over what the layer states (its weights
    and sizes, which must agree with typed options; a choice it states gives way to a typed
    flag), seeded x and weights for the rest."""
    config, tensors, _ = resolve_read(layer, options, explicit, x)
    return config, tensors


def resolve_read(
    layer: Layer, options: dict[str, Any], explicit: set[str], x: np.ndarray | None
) -> tuple[AttentionConfig, dict[str, Any], tuple[Read, ...]]:
    """:func:`resolve_layer`, and the choices read from the module instead of the command line
    (:class:`~attntrace.diffing.verdict.Read`)."""
    from attntrace.diffing.verdict import split_hints
    from attntrace.engine.inputs import random_sources
    from attntrace.files import resolve_run

    stands, reads = split_hints(layer, explicit)
    weights = layer.weights
    if weights is not None:
        hints = {k: v for k, v in stands.items() if k != "kv_heads"}
        weights = replace(weights, hints={**weights.hints, **hints})
        if "dtype" not in explicit:
            options = {
                **options,
                "dtype": str(next(p for p in weights.params.values() if p is not None).dtype),
            }
    config, tensors = resolve_run(options, explicit, weights, x)
    if "kv_heads" in layer.hints and layer.hints["kv_heads"] != config.groups:
        raise ConfigError(
            f"{layer.name} says {layer.hints['kv_heads']} kv heads, "
            f"its weights give {config.groups}"
        )
    _check_supported(config)
    config = replace(config, algorithm="eager")  # the steps to compare are the eager ones
    seeded = {name: s.make() for name, s in random_sources(config).items() if name not in tensors}
    return config, {**seeded, **tensors}, reads


def _check_supported(config: AttentionConfig) -> None:
    """diff calls the code on x alone: no second input. (--key-lengths masks the reference's
    keys as a padding mask the code makes itself does.)"""
    if config.cross:
        raise ConfigError(
            "diff runs self-attention code on x alone; drop --kv-seq/--kv-hidden "
            "(cross-attention code needs a second input diff does not pass)"
        )


def run_diff(
    layer: Layer,
    config: AttentionConfig,
    tensors: dict[str, Any],
    *,
    max_memory: int | None = None,
    checking: bool = True,
) -> DiffReport:
    """Reference and user side by side (``tensors``: x and the weights, in our names), once
    :func:`check_diff_memory` finds that they fit ``max_memory``; weights taken in call
    order are ``checking``: the swaps of two projections are tried too
    (:mod:`attntrace.diffing.call_order`)."""
    import numpy as np

    from attntrace.diffing.align import UserSteps, align
    from attntrace.diffing.bugs import Setting
    from attntrace.diffing.diagnose import counterparts, diagnose
    from attntrace.diffing.user_side import UserStep, run_user
    from attntrace.engine.attention import trace_attention
    from attntrace.tools.verify import tolerance

    check_diff_dtype(config)
    check_diff_memory(config, max_memory)
    dtype = np.dtype(config.dtype)
    tensors = {k: None if v is None else np.asarray(v).astype(dtype) for k, v in tensors.items()}
    given = tensors["x"]  # what the code is called on
    notes = layer.notes
    if layer.prenorm is not None:  # the reference starts after the module's own norm
        tensors["x"] = _normed(layer, config, given)
        notes += ("the reference starts after the module's own norm (x = self.norm(x))",)
    ref = trace_attention(config, "numpy", tensors=tensors)
    params = {k: v for k, v in tensors.items() if k not in ("x", "x_kv") and v is not None}
    from attntrace.diffing.kernel_args import calls_kernel, random_kernel

    untracked = lambda: _call(layer, config, _untracked, given, params)  # noqa: E731
    dropout = random_kernel(lambda: check_deterministic(layer, untracked), untracked)
    steps, out = run_user(lambda track: _call(layer, config, track, given, params), layer.into)
    tol = tolerance(config)
    user = UserSteps(
        (
            UserStep(-1, "x", tensors["x"], "(input)" if layer.prenorm is None else "(normed)"),
            *steps,
            UserStep(len(steps), "returned", out, "(return value)"),
        ),
        tol,
    )
    rows = align(ref, user)
    rows, notes = _residual(rows, user, given, notes)
    kernel = calls_kernel(s.source for s in steps)
    diagnosis, mistaken = diagnose(Setting(config, ref, tensors, kernel), rows, user, tensors)
    if dropout is not None:  # torch's draws cannot be replayed: named from the call
        from attntrace.diffing.kernel_args import dropout_diagnosis

        diagnosis, mistaken = dropout_diagnosis(dropout, rows[-1].agreement), None
    own = layer.own_layouts.get(diagnosis.bug or "") if diagnosis is not None else None
    if own is not None and mistaken is not None:  # the module's layout on purpose, not a bug
        rows, diagnosis = align(mistaken, user), None
        notes += (f"compared with its own layout: {own}",)
    elif mistaken is not None:
        rows = counterparts(rows, mistaken, user)
    if diagnosis is not None:  # the fix in the user's framework, layout and batch
        from attntrace.diffing.kernel_args import in_kernel_terms
        from attntrace.diffing.wording import in_users_terms

        diagnosis = in_users_terms(diagnosis, layer.flavour, batched=config.batch is not None)
        diagnosis = in_kernel_terms(diagnosis, kernel, steps)
    notes += _shift_notes(rows)
    source = "its state dict" if layer.weights is None else layer.weights.scheme
    report = DiffReport(
        config=config,
        target=layer.name,
        weights=f"{source}" if layer.weights else "the reference's, as fn(x, params)",
        tolerance=tol,
        rows=rows,
        diagnosis=diagnosis,
        notes=notes,
    )
    from attntrace.diffing.call_order import swap_notes

    if not checking:
        return report
    more = swap_notes(
        report.ok,
        layer,
        tensors,
        lambda t: run_diff(layer, config, t, max_memory=max_memory, checking=False).ok,
    )
    return replace(report, notes=(*report.notes, *more)) if more else report


def _shift_notes(rows: tuple[Any, ...]) -> tuple[str, ...]:
    """The note saying which ALiBi steps matched up to a constant per query row."""
    from attntrace.diffing.align import SHIFT_NOTE

    steps = [r.step.name for r in rows if getattr(r, "shifted", False)]
    return (SHIFT_NOTE.format(steps=" and ".join(steps)),) if steps else ()


def _residual(
    rows: tuple[Row, ...], user: UserSteps, x: np.ndarray, notes: tuple[str, ...]
) -> tuple[tuple[Row, ...], tuple[str, ...]]:
    """The rows and notes when the code returns ``x + output`` (its own residual connection,
    :func:`attntrace.diffing.align.residual`), else as they are."""
    from attntrace.diffing.align import RESIDUAL_NOTE, residual

    kept = residual(rows, user, x)
    return (rows, notes) if kept is None else (kept, (*notes, RESIDUAL_NOTE))


def _normed(layer: Layer, config: AttentionConfig, x: np.ndarray) -> np.ndarray:
    """x through the module's own pre-norm, in the config's dtype, as numpy."""
    import torch

    from attntrace.diffing.user_side import _numpy

    assert layer.prenorm is not None
    with torch.no_grad():
        out = layer.prenorm(torch.from_numpy(x.copy()))
    return _numpy(out).astype(config.dtype)


def _untracked(x: Any) -> Any:
    return x


def check_deterministic(layer: Layer, call: Any) -> None:
    """Refuse code whose output is not the same on two calls on the same x (dropout in
    training mode, sampling): diff would take its noise for a bug.

    >>> import numpy as np
    >>> from attntrace.diffing.layer import Layer
    >>> rng = np.random.default_rng(0)
    >>> check_deterministic(Layer("noisy()", "numpy", None), lambda: rng.standard_normal(3))
    Traceback (most recent call last):
    ...
    attntrace.errors.ConfigError: noisy() is not deterministic: two calls on the same x ...
    """
    import numpy as np

    from attntrace.diffing.user_side import _first_tensor, _numpy

    try:
        first, second = (_numpy(_first_tensor(call())) for _ in range(2))
    except (Exception, SystemExit):
        return  # the traced call reports the user's error, with its line
    if first.shape == second.shape and np.array_equal(first, second, equal_nan=True):
        return
    gap = np.abs(first.astype(np.float64) - second.astype(np.float64)).max(initial=0.0)
    raise ConfigError(
        f"{layer.name} is not deterministic: two calls on the same x differ (by {gap:.3g}) "
        "even in eval mode; diff cannot tell a bug from that randomness: seed it or turn "
        "the random op off (dropout called with training=True, sampling)"
    )


def _call(
    layer: Layer, config: AttentionConfig, track: Any, x: np.ndarray, params: dict[str, np.ndarray]
) -> Any:
    """The user's layer on x (numpy, or torch in the config's dtype)."""
    if layer.flavour == "numpy":
        return layer.call(track(x.copy()), params)
    import torch

    call = layer.call
    if config.key_lengths is not None and getattr(type(layer.module), "attntrace_caller", False):
        layer.module.key_lengths = config.key_lengths  # attntrace's caller pads as a model does
    if (
        not config.past  # a decode step casts its module itself (diffing/decode.py)
        and layer.module is not None
        and any(p.dtype != getattr(torch, config.dtype) for p in layer.module.parameters())
    ):
        from attntrace.diffing.layer import module_forward

        module = copy.deepcopy(layer.module).to(
            getattr(torch, config.dtype)
        )  # the user's stays as it is
        forward = module_forward(module)
        call = lambda x, p: forward(x)  # noqa: E731
    with torch.no_grad():
        return call(
            torch.from_numpy(x.copy()), {k: torch.from_numpy(v.copy()) for k, v in params.items()}
        )
