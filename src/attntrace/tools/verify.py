"""``attntrace verify``: the trace is the attention PyTorch computes.

One config, one seed, one set of weights runs through two backends (numpy and torch) and two
independent PyTorch references: ``torch.nn.MultiheadAttention`` (weights loaded into
``in_proj_weight`` / ``in_proj_bias`` / ``out_proj``) and
``torch.nn.functional.scaled_dot_product_attention`` (projections by ``F.linear``; its attention
weights are SDPA applied to an identity value matrix, softmax(q kᵀ·scale) @ I).

Every variant is verified. The SDPA reference rebuilds the layer from x (and x_kv) and the
parameters with torch alone: masks as SDPA's ``attn_mask`` (bool, True = attend, or additive
floats; built here from the options, not by :mod:`attntrace.engine.masks`) or ``is_causal``,
``enable_gqa=True`` for grouped-query attention, and RoPE in Meta's complex-number formulation
(:func:`rope_reference`). ``nn.MultiheadAttention`` is a reference only where it applies: no
grouped-query attention, no RoPE, d = H / h, and no query row left without a key (it gives NaN
there, SDPA zeros); elsewhere its rows read "n/a" with the reason. Its bool ``attn_mask`` (and
``key_padding_mask``) mean True = *ignore*, the opposite of SDPA's, so the mask is inverted.
With ``--algorithm flash`` the trace has no attention weights; the output is compared.

Two arrays agree when every element passes ``|a - b| <= atol * m + rtol * |b|`` with
``m = max(1, max |b|)``: numpy.isclose, but with atol relative to the tensor's largest value, so
that a score that is small only because large terms cancel is judged on the scale of the
terms. The tolerance of each dtype (:data:`TOLERANCES`), for H <= 64:

=========  ======  ======
dtype      rtol    atol
=========  ======  ======
float16    4e-2    4e-3
float32    1e-4    1e-5
float64    1e-10   1e-12
=========  ======  ======

Each step sums up to H products, and the two backends sum in different orders, so rounding
differences grow like √H: for H > 64 both numbers are multiplied by √(H / 64) (×3.5 at H=768,
×8 at H=4096).

Reported per comparison: the max absolute difference and the max relative difference
``|a - b| / max(|b|, m * atol / rtol)`` (below that floor the absolute tolerance governs).
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from attntrace.backends import Backend, get_backend
from attntrace.config.attention_config import AttentionConfig
from attntrace.engine.attention import trace_attention
from attntrace.engine.inputs import random_sources, with_tensors
from attntrace.engine.masks import MaskWarning
from attntrace.errors import ConfigError
from attntrace.tools.reference import MHA, SDPA, torch_references
from attntrace.trace import Shape, Trace

if TYPE_CHECKING:
    import numpy as np

__all__ = [
    "MHA",
    "SDPA",
    "TOLERANCES",
    "Comparison",
    "Tolerance",
    "VerifyReport",
    "compare",
    "tolerance",
    "verify_attention",
]


@dataclass(frozen=True)
class Tolerance:
    """Allowed difference: ``|a - b| <= atol + rtol * |b|`` element by element."""

    rtol: float
    atol: float


#: Tolerance per dtype for H <= 64 (float16 keeps 11 significant bits, float32 24, float64 53);
#: :func:`tolerance` widens it by √(H / 64) for larger H.
TOLERANCES: dict[str, Tolerance] = {
    "float16": Tolerance(rtol=4e-2, atol=4e-3),
    "float32": Tolerance(rtol=1e-4, atol=1e-5),
    "float64": Tolerance(rtol=1e-10, atol=1e-12),
}


def tolerance(config: AttentionConfig) -> Tolerance:
    """The tolerance of ``config``'s dtype, widened by √(H / 64) when H > 64.

    >>> tolerance(AttentionConfig(hidden=256, heads=4, dtype="float32"))
    Tolerance(rtol=0.0002, atol=2e-05)
    """
    if config.dtype not in TOLERANCES:
        raise ConfigError(
            f"verify compares with numpy, which has no {config.dtype}; use --dtype "
            f"{', '.join(TOLERANCES)}"
        )
    base, factor = TOLERANCES[config.dtype], math.sqrt(max(config.hidden, 64) / 64)
    return Tolerance(rtol=base.rtol * factor, atol=base.atol * factor)


@dataclass(frozen=True)
class Comparison:
    """One tensor compared between two computations (``skipped``: why it could not be)."""

    name: str  # the step, e.g. "scores"
    left: str  # e.g. "numpy"
    right: str  # e.g. "torch" or MHA
    shape: Shape
    max_abs: float
    max_rel: float
    ok: bool
    skipped: str | None = None  # the reason when the reference does not apply ("n/a")


@dataclass(frozen=True)
class VerifyReport:
    """Every comparison of one verify run; ``ok`` when all are within the tolerance."""

    config: AttentionConfig
    tolerance: Tolerance
    steps: tuple[Comparison, ...]  # each step, backend against backend
    references: tuple[Comparison, ...]  # output and weights of each backend against each reference
    notes: tuple[str, ...] = ()  # the trace's notes, e.g. query rows without any key

    def __repr__(self) -> str:
        verdict = "ok" if self.ok else f"{len(self.failures)} failed"
        return f"<VerifyReport: {self.compared} comparisons, {verdict}>"

    def _repr_html_(self) -> str:
        """Jupyter's view: every comparison and the verdict (:mod:`attntrace.display`)."""
        from attntrace.display import html

        return html(self)

    @property
    def ok(self) -> bool:
        return all(c.ok for c in (*self.steps, *self.references))

    @property
    def failures(self) -> tuple[Comparison, ...]:
        return tuple(c for c in (*self.steps, *self.references) if not c.ok)

    @property
    def compared(self) -> int:
        """How many comparisons were made (the "n/a" rows are not)."""
        return sum(c.skipped is None for c in (*self.steps, *self.references))


def verify_attention(
    config: AttentionConfig,
    *,
    backends: tuple[Backend[Any], Backend[Any]] | None = None,
    tensors: Mapping[str, np.ndarray | None] | None = None,
    mask: np.ndarray | None = None,
    max_memory: int | None = None,
    backward: bool = False,
    page_size: int | None = None,
) -> VerifyReport:
    """Compare the traces of two backends (numpy and torch unless given) step by step, and
    their output and attention weights with PyTorch's own attention. ``mask`` is a user mask
    as in :func:`attntrace.trace_attention`. ``backward``: the backward steps too, and every
    gradient (x and each parameter) and the saved bytes against torch autograd
    (:mod:`attntrace.tools.gradients`). ``page_size`` (a --past step): the paged cache's
    steps too (:mod:`attntrace.engine.paged`), and each backend's gather k_paged / v_paged
    bit-equal to its k_all / v_all (a copy) in each sequence's tokens, zeros beyond.

    >>> report = verify_attention(AttentionConfig(seq=3, hidden=8, heads=2))
    >>> report.ok, [c.right for c in report.references][:2]
    (True, ['nn.MultiheadAttention', 'SDPA'])
    >>> gqa = verify_attention(
    ...     AttentionConfig(seq=4, hidden=8, heads=2, kv_heads=1, causal=True, rope=True)
    ... )
    >>> gqa.ok, gqa.references[0].skipped
    (True, 'nn.MultiheadAttention has no grouped-query attention (--kv-heads)')
    """
    from attntrace.engine.paged import check_page_size, paged_steps

    check_page_size(page_size, config)
    tol = tolerance(config)
    first, second = backends or (get_backend("numpy"), get_backend("torch"))
    get_backend("torch")  # the references need torch: fail early with the install hint
    check_verify_memory(config, mask, max_memory)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", MaskWarning)  # kept in the report's notes instead
        a, b = (
            trace_attention(
                config, be, mask=mask, max_memory=max_memory, tensors=tensors, backward=backward
            )
            for be in (first, second)
        )
    a, b = paged_steps(a, page_size), paged_steps(b, page_size)
    steps = tuple(
        compare(s.name, a.backend, b.backend, s.value, b[s.name].value, tol) for s in a.steps
    )
    if config.past:  # a decode step: SDPA on the concatenated cache, transformers' own layer
        from attntrace.tools.verify_past import past_references

        refs = past_references(config, _inputs(config, tensors))
    else:
        refs = torch_references(config, _inputs(config, tensors), mask)
    grads = _gradients(a, b, mask, tol) if backward else ()
    gathers = _gathers(a) + _gathers(b) if page_size is not None else ()
    return VerifyReport(
        config=config,
        tolerance=tol,
        steps=steps,
        references=_against(a, refs, tol) + _against(b, refs, tol) + gathers + grads,
        notes=a.notes,
    )


def _gathers(trace: Trace) -> tuple[Comparison, ...]:
    """The paged gathers of ``trace`` against its unpaged keys and values: a copy, so equal to
    the bit in each sequence's L_b tokens and zeros beyond (``max_abs`` over the L_b tokens)."""
    import numpy as np

    from attntrace.engine.serving import held_lengths

    lengths = held_lengths(trace.config)
    rows = []
    for kind in ("k", "v"):
        paged, full = trace[f"{kind}_paged"].value, trace[f"{kind}_all"].value
        assert paged is not None  # a values backend
        assert full is not None
        p4, f4 = (x if trace.config.batched else x[None] for x in (paged, full))  # (B, g, L, d)
        diffs = [
            np.abs(p4[i, :, :n].astype(np.float64) - f4[i, :, :n]).max(initial=0.0)
            for i, n in enumerate(lengths)
        ]
        same = all(
            np.array_equal(p4[i, :, :n], f4[i, :, :n]) and not p4[i, :, n:].any()
            for i, n in enumerate(lengths)
        )
        biggest = max(1.0, float(np.abs(f4.astype(np.float64)).max(initial=0.0)))
        rows.append(
            Comparison(
                name=f"{kind}_paged",
                left=trace.backend,
                right=f"{kind}_all (bit-equal)",
                shape=tuple(paged.shape),
                max_abs=float(max(diffs)),
                max_rel=float(max(diffs)) / biggest,
                ok=same,
            )
        )
    return tuple(rows)


def _gradients(
    a: Trace, b: Trace, mask: np.ndarray | None, tol: Tolerance
) -> tuple[Comparison, ...]:
    """Every gradient of x and the parameters of both traces against torch autograd's, and
    the saved bytes against what autograd saves for the same eager computation."""
    from attntrace.tools.gradients import EAGER, eager_autograd, torch_gradients

    rows: list[Comparison] = []
    for trace in (a, b):
        refs = torch_gradients(trace, mask)
        names = [s.name for s in trace.steps if s.name in _GRADIENT_NAMES or s.name[2:4] in _W_B]
        rows += _against(trace, refs, tol, names=tuple(names))
    _, saved = eager_autograd(a)
    f = a.training
    # flash keeps no weights: autograd's count is that of eager, the figure beside flash's
    ours = (
        0 if f is None else f.eager_saved_bytes if a.config.algorithm == "flash" else f.saved_bytes
    )
    rows.append(
        Comparison(
            name="saved bytes",
            left=a.backend,
            right=f"{EAGER} (saved_tensors_hooks)",
            shape=(),
            max_abs=float(abs(ours - saved)),
            max_rel=float(abs(ours - saved)) / max(saved, 1),
            ok=ours == saved,
        )
    )
    return tuple(rows)


_GRADIENT_NAMES = frozenset({"d_x", "d_x_kv"})
_W_B = frozenset({"w_", "b_"})


def check_verify_memory(
    config: AttentionConfig, mask: np.ndarray | None, max_memory: int | None
) -> None:
    """Everything verify holds at once: two full traces (every value kept) and the torch
    references, each of which forms the (B, h, S, N) weights and the output again.

    >>> check_verify_memory(AttentionConfig(seq=4096, hidden=768, heads=12), None,
    ...                     2**30)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    attntrace.errors.MemoryBudgetError: this trace needs about 12.22 GiB (two traces and ...
    """
    from attntrace.engine.attention import estimate_bytes
    from attntrace.engine.memory import check_budget
    from attntrace.units import format_bytes

    shapes = trace_attention(config, "shape", mask=mask)
    trace_bytes, largest = estimate_bytes(config, True, shapes)
    scores = 4 * config.heads * config.seq * config.keys * (config.batch or 1) * config.itemsize
    # weights, masks, output
    reference_bytes = 2 * (scores + shapes.param_bytes + shapes["output"].nbytes)
    where = (
        f"two traces and the torch references; {largest.name} {largest.shape} alone is "
        f"{format_bytes(largest.nbytes)}"
    )
    check_budget(
        2 * trace_bytes + reference_bytes,
        max_memory,
        where,
        "lower --seq/--hidden/--batch (verify compares values, so it needs them all)",
    )


def _against(
    trace: Trace,
    refs: Mapping[str, Mapping[str, np.ndarray] | str],
    tol: Tolerance,
    names: tuple[str, ...] | None = None,
) -> tuple[Comparison, ...]:
    """The ``names`` of ``trace`` against each reference: by default the output and weights
    (flash has no weights) and, with --past, the keys and values after the append and the
    cache after the step; --backward passes the gradients' names."""
    rows = []
    for name in COMPARED if names is None else names:
        mine = _compared_value(trace, name)
        if mine is None:
            continue
        for ref, values in refs.items():
            if not isinstance(values, str) and name not in values:
                continue
            if isinstance(values, str) and name in PAST_ONLY:
                continue
            if isinstance(values, str):
                rows.append(
                    Comparison(
                        name=name,
                        left=trace.backend,
                        right=ref,
                        shape=trace[name].shape,
                        max_abs=math.nan,
                        max_rel=math.nan,
                        ok=True,
                        skipped=values,
                    )
                )
            else:
                rows.append(compare(name, trace.backend, ref, mine, values[name], _of(ref, tol)))
    return tuple(rows)


def _of(ref: str, tol: Tolerance) -> Tolerance:
    """The tolerance against ``ref``: float32's at least when its softmax runs in float32."""
    from attntrace.tools.verify_past import SOFTMAX_FLOAT32

    if SOFTMAX_FLOAT32 not in ref:
        return tol
    f32 = TOLERANCES["float32"]
    return Tolerance(rtol=max(tol.rtol, f32.rtol), atol=max(tol.atol, f32.atol))


#: What verify compares with the references: the output, the weights and (--past) the keys
#: and values attention read after the append, and what the cache holds after the step.
COMPARED = ("output", "weights", "k_all", "v_all", "k_cache_after", "v_cache_after")
PAST_ONLY = COMPARED[2:]


def _compared_value(trace: Trace, name: str) -> np.ndarray | None:
    """The trace's value of ``name`` (``k_cache_after``: its k_all as a cache keeps it)."""
    if name.endswith("_cache_after") and trace.config.past:
        from attntrace.tools.verify_past import cache_after

        values = trace[f"{name[0]}_all"].value
        return None if values is None else cache_after(trace.config, values)
    return trace[name].value if name in trace else None


def _inputs(
    config: AttentionConfig, tensors: Mapping[str, np.ndarray | None] | None
) -> dict[str, np.ndarray | None]:
    """The exact x and parameters the backends get (seeded, or the user's)."""
    sources = with_tensors(config, random_sources(config), tensors or {})
    return {name: None if s is None else s.make() for name, s in sources.items()}


def compare(
    name: str, left: str, right: str, a: np.ndarray | None, b: np.ndarray | None, tol: Tolerance
) -> Comparison:
    """``a`` against ``b`` (the reference) in float64.

    >>> import numpy as np
    >>> tol = Tolerance(1e-4, 1e-5)
    >>> c = compare("x", "a", "b", np.array([1.0, 2.0]), np.array([1.0, 2.001]), tol)
    >>> round(c.max_abs, 6), c.ok
    (0.001, False)
    >>> compare("masked", "a", "b", np.array([-np.inf, 1.0]), np.array([-np.inf, 1.0]), tol).ok
    True
    """
    import numpy as np

    if a is None or b is None or a.shape != b.shape:
        shape = tuple(a.shape) if a is not None else ()
        return Comparison(
            name=name,
            left=left,
            right=right,
            shape=shape,
            max_abs=math.inf,
            max_rel=math.inf,
            ok=False,
        )
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    same = a64 == b64  # equal infinities (the -inf of masked scores) are equal, not inf - inf = NaN
    with np.errstate(invalid="ignore"):
        diff = np.where(same, 0.0, np.abs(a64 - b64))  # NaN or inf where they differ so
    size = np.abs(np.where(np.isfinite(b64), b64, 0.0))
    m = max(1.0, float(size.max(initial=0.0)))
    max_abs = float(diff.max(initial=0.0))
    max_rel = float((diff / np.maximum(size, m * tol.atol / tol.rtol)).max(initial=0.0))
    ok = bool(np.all(diff <= tol.atol * m + tol.rtol * size))  # False for any NaN or inf in diff
    return Comparison(
        name=name,
        left=left,
        right=right,
        shape=tuple(a.shape),
        max_abs=max_abs,
        max_rel=max_rel,
        ok=ok,
    )
