"""``attntrace diff --backward``: the user's gradients beside the reference's backward.

After the forward comparison, the user's attention runs backward (autograd through their code,
or their own ``torch.autograd.Function`` with a hand-written backward) from the same
``d_output`` the reference's backward (:mod:`attntrace.engine.backward`) starts from; ``d_x``
and every weight's gradient, by the reference's names (``d_w_q``, ``d_b_q`` …), are compared.
A module's parameter gradients reach our names through the weight assignment diff made for
the forward: the module is copied with each parameter element set to its own index, the
weights are read from that copy the same way, and each of our entries names the element it
came from (a packed qkv, a transposed Conv1D or an interleaved layout alike).

At the first gradient that differs, the backward bugs of :func:`backward_catalogue` (a missing
softmax backward term, a transposed gradient, GQA gradients not summed over the repeated
heads, a wrong scale) are applied to the reference's backward; the one that reproduces every
gradient of the user's is named.

>>> import torch
>>> from attntrace import AttentionConfig
>>> from attntrace import diff
>>> mha = torch.nn.MultiheadAttention(8, 2, batch_first=True)
>>> report = diff(mha, AttentionConfig(batch=1, seq=3, hidden=8, heads=2), backward=True)
>>> report.backward.ok, [r.name for r in report.backward.rows][:3]
(True, ['d_w_o', 'd_b_o', 'd_w_q'])
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from attntrace.engine.recorder import StepReplacement

if TYPE_CHECKING:
    import numpy as np

    from attntrace.config.attention_config import AttentionConfig
    from attntrace.diffing.layer import Layer
    from attntrace.tools.verify import Tolerance
    from attntrace.trace import Trace

__all__ = [
    "BackwardBug",
    "GradientReport",
    "GradientRow",
    "backward_catalogue",
    "compare_gradients",
]

Done = Mapping[str, "np.ndarray"]

#: The status of a gradient row.
MATCH, DIFFERS, MISSING = "match", "differs", "missing"


@dataclass(frozen=True)
class GradientRow:
    """One gradient of the reference beside the user's."""

    name: str  # "d_w_q", "d_x"
    shape: tuple[int, ...]
    status: str  # "match", "differs", "missing" (the user's code gave none)
    user_shape: tuple[int, ...] | None = None
    max_abs: float | None = None
    max_rel: float | None = None

    @property
    def ok(self) -> bool:
        return self.status == MATCH


@dataclass(frozen=True)
class BackwardBug:
    """One mistake of a hand-written backward, ready to apply to the reference's."""

    key: str  # stable id, e.g. "softmax-backward-no-rowsum"
    name: str  # what the code did
    fix: str  # what to write instead
    replace: dict[str, StepReplacement] = field(default_factory=dict)


@dataclass(frozen=True)
class GradientReport:
    """The ``backward`` section of a diff: the gradients compared, the first that differs and
    the backward bug that explains it; ``skipped`` says why nothing was compared."""

    rows: tuple[GradientRow, ...] = ()
    first: str | None = None
    bug: BackwardBug | None = None
    skipped: str | None = None
    notes: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        """True when every gradient compared matches (or none could be compared)."""
        return all(r.ok for r in self.rows)

    def to_dict(self) -> dict[str, Any]:
        """The ``backward`` section of the diff document."""
        return {
            "ok": self.ok,
            "skipped": self.skipped,
            "first": self.first,
            "bug": None
            if self.bug is None
            else {"key": self.bug.key, "name": self.bug.name, "fix": self.bug.fix},
            "rows": [
                {
                    "gradient": r.name,
                    "shape": list(r.shape),
                    "status": r.status,
                    "user_shape": None if r.user_shape is None else list(r.user_shape),
                    "max_abs": _finite(r.max_abs),
                    "max_rel": _finite(r.max_rel),
                }
                for r in self.rows
            ],
            "notes": list(self.notes),
        }


def _finite(value: float | None) -> float | None:
    """None for inf and NaN (JSON has neither)."""
    return value if value is None or math.isfinite(value) else None


def compare_gradients(
    layer: Layer,
    config: AttentionConfig,
    tensors: Mapping[str, Any],
    tol: Tolerance,
    *,
    forward_ok: bool,
    own_layout: bool = False,
    normed: Callable[[np.ndarray], np.ndarray] | None = None,
) -> GradientReport:
    """The user's gradients against the reference's backward (``tensors``: x as the code is
    called on it and the weights, as :func:`~attntrace.diffing.diff_report.run_diff` used
    them; ``normed``: the module's own pre-norm, which the reference starts after). Skipped,
    with the reason, for numpy code (no autograd), when the forward already differs and when
    it was compared with the module's own layout (``own_layout``: x-transformers' tiled kv
    heads, which the reference's backward does not write)."""
    if not forward_ok:
        return GradientReport(skipped="the forward differs: fix it first, then compare gradients")
    if own_layout:
        return GradientReport(
            skipped="the forward was compared with the module's own layout of the kv heads; "
            "the reference's backward repeats them its own way"
        )
    if layer.flavour != "torch":
        return GradientReport(
            skipped=f"{layer.name} is numpy code: no autograd to run its backward"
        )
    ref_tensors = dict(tensors)
    notes: tuple[str, ...] = ()
    if normed is not None:
        ref_tensors["x"] = normed(tensors["x"])
        notes += ("d_x not compared: the module's own norm comes before the reference",)
    ref = _reference(config, ref_tensors, None, {})
    d_out = ref["d_output"].value
    assert d_out is not None  # a numpy trace keeps every value
    user, unmapped = _user_gradients(layer, config, tensors, d_out)
    if normed is not None:
        user.pop("d_x", None)
    notes += tuple(f"{name} not compared: {why}" for name, why in unmapped.items())
    names = [n for n in _gradient_names(ref) if n not in unmapped]
    if normed is not None:
        names.remove("d_x")
    rows = tuple(_row(n, ref[n].value, user.get(n), tol) for n in names)
    first = next((r.name for r in rows if not r.ok), None)
    bug = None
    if first is not None:
        bug = _explain(config, ref_tensors, d_out, user, names, tol)
    return GradientReport(rows=rows, first=first, bug=bug, notes=notes)


def _gradient_names(ref: Trace) -> list[str]:
    """d_x and every parameter's gradient, in the order the backward makes them."""
    params = {f"d_{p.name}" for p in ref.parameters}
    return [s.name for s in ref.steps if s.name in params or s.name == "d_x"]


def _reference(
    config: AttentionConfig,
    tensors: Mapping[str, Any],
    d_out: np.ndarray | None,
    replace: Mapping[str, StepReplacement],
) -> Trace:
    import warnings

    from attntrace.engine.attention import trace_attention

    with warnings.catch_warnings():  # a replayed bug may overflow: it is a candidate only
        warnings.simplefilter("ignore")
        return trace_attention(
            config,
            "numpy",
            tensors=tensors,
            backward=True,
            grad_output=d_out,
            replace=replace,
        )


def _row(name: str, ref: Any, user: Any, tol: Tolerance) -> GradientRow:
    import numpy as np

    shape = tuple(int(n) for n in ref.shape)
    if user is None:
        return GradientRow(name=name, shape=shape, status=MISSING)
    user_shape = tuple(int(n) for n in user.shape)
    if user_shape != shape:
        return GradientRow(name=name, shape=shape, status=DIFFERS, user_shape=user_shape)
    a, b = np.asarray(user, np.float64), np.asarray(ref, np.float64)
    gap = np.abs(a - b)
    max_abs = float(gap.max(initial=0.0))
    max_rel = float((gap / np.maximum(np.abs(b), tol.atol)).max(initial=0.0))
    ok = bool(np.allclose(a, b, rtol=tol.rtol, atol=tol.atol))
    return GradientRow(
        name=name,
        shape=shape,
        status=MATCH if ok else DIFFERS,
        user_shape=user_shape,
        max_abs=max_abs,
        max_rel=max_rel,
    )


def _explain(
    config: AttentionConfig,
    tensors: Mapping[str, Any],
    d_out: np.ndarray,
    user: Mapping[str, np.ndarray],
    names: list[str],
    tol: Tolerance,
) -> BackwardBug | None:
    """The first backward bug whose replay on the reference gives every gradient the user's
    code gave."""
    for bug in backward_catalogue(config):
        mistaken = _reference(config, tensors, d_out, bug.replace)
        if all(_row(n, mistaken[n].value, user.get(n), tol).ok for n in names if n in user):
            return bug
    return None


def _user_gradients(
    layer: Layer, config: AttentionConfig, tensors: Mapping[str, Any], d_out: np.ndarray
) -> tuple[dict[str, np.ndarray], dict[str, str]]:
    """The user's d_x and parameter gradients by our names, and the names it could not map."""
    import torch

    from attntrace.diffing.user_side import _first_tensor, _numpy

    dtype = getattr(torch, config.dtype)
    x = torch.from_numpy(tensors["x"].copy()).requires_grad_(True)  # (B, S, H)
    grad = torch.from_numpy(d_out.copy())  # (B, S, H)
    if layer.module is None:  # fn(x, params): the params are ours
        params = {
            k: torch.from_numpy(v.copy()).requires_grad_(True)
            for k, v in tensors.items()
            if k != "x" and v is not None
        }
        with torch.enable_grad():
            _backward(_first_tensor(layer.call(x, params)), grad)
        out = {f"d_{k}": _numpy(p.grad) for k, p in params.items() if p.grad is not None}
        return ({"d_x": _numpy(x.grad)} if x.grad is not None else {}) | out, {}
    from attntrace.diffing.layer import module_forward

    module = copy.deepcopy(layer.module).to(dtype)  # the user's stays as it is
    module.zero_grad(set_to_none=True)
    with torch.enable_grad():
        _backward(_first_tensor(module_forward(module)(x)), grad)
    flat = torch.cat(
        [
            (p.grad if p.grad is not None else torch.zeros_like(p)).reshape(-1).double()
            for p in module.parameters()
        ]
    ).numpy()  # every parameter element's gradient, in parameters() order
    out = {"d_x": _numpy(x.grad)} if x.grad is not None else {}
    mapped, unmapped = _by_our_names(layer, flat, config)
    return out | mapped, unmapped


def _backward(out: Any, grad: Any) -> None:
    """Autograd from ``out`` (the user's output tensor) with ``grad``: one line saying why when
    the output has no gradient to give (computed under no_grad, or not a tensor)."""
    from attntrace.diffing.user_side import UserCodeError

    if not getattr(out, "requires_grad", False):
        raise UserCodeError(
            "diff --backward: the code's output carries no gradient (made under torch.no_grad, "
            "detached, or through numpy); drop --backward or let autograd see the computation"
        )
    try:
        out.backward(grad)
    except (Exception, SystemExit) as exc:  # the user's hand-written backward raised
        from attntrace.capturing.runner import user_message

        raise UserCodeError(
            f"the code's backward raised {user_message(exc)}; run it alone on the same shapes"
        ) from None


def _by_our_names(
    layer: Layer, flat: np.ndarray, config: AttentionConfig
) -> tuple[dict[str, np.ndarray], dict[str, str]]:
    """Each of our weights' gradient from the module's, through the indices of
    :func:`_element_indices`."""
    import numpy as np

    out: dict[str, np.ndarray] = {}
    unmapped: dict[str, str] = {}
    for name, index in _element_indices(layer, config).items():
        if index is None:
            unmapped[f"d_{name}"] = (
                "no parameter of the module holds that weight as it is (diff filled it in, "
                "or scaled it)"
            )
            continue
        out[f"d_{name}"] = flat[index].astype(np.dtype(config.dtype))
    return out, unmapped


def _element_indices(layer: Layer, config: AttentionConfig) -> dict[str, np.ndarray | None]:
    """For each of our weights, the index of the module parameter element (all parameters
    flattened in order) each entry came from; None when an entry is no element (a scaled or
    summed weight)."""
    import numpy as np
    import torch

    from attntrace.diffing.layer import as_layer

    tagged = copy.deepcopy(layer.module).double()
    start = 1  # 0 would be a zero-initialised weight's value: the tags start at 1
    with torch.no_grad():
        for p in tagged.parameters():
            tags = torch.arange(start, start + p.numel(), dtype=torch.float64)
            p.copy_(tags.reshape(p.shape))
            start += p.numel()
    try:  # read as the forward's weights were: the same names, layouts and call order
        weights = as_layer(tagged, seq=config.seq, batch=config.batch).weights
    except (Exception, SystemExit):  # the code fails on its tagged copy: no gradient mapped
        weights = None
    if weights is None:
        assert layer.weights is not None  # a module's layer has its weights
        return dict.fromkeys((k for k, v in layer.weights.params.items() if v is not None))
    found: dict[str, np.ndarray | None] = {}
    for name, value in weights.params.items():
        if value is None:
            continue
        tag = np.asarray(value, np.float64)
        whole = np.rint(tag)
        good = np.array_equal(whole, tag) and bool(((whole >= 1) & (whole < start)).all())
        found[name] = whole.astype(np.int64) - 1 if good else None
    return found


def backward_catalogue(config: AttentionConfig) -> list[BackwardBug]:
    """Every backward bug that can happen with ``config``, in the order tried.

    >>> from attntrace import AttentionConfig
    >>> [b.key for b in backward_catalogue(AttentionConfig(seq=3, hidden=8, heads=2))][:3]
    ['softmax-backward-no-rowsum', 'softmax-backward-rowsum-queries', 'backward-scale-missing']
    """
    makers: list[Callable[[AttentionConfig], Iterator[BackwardBug]]] = [
        _softmax_back,
        _scale_back,
        _transposed,
        _groups_back,
        _weights_transposed,
    ]
    return [bug for make in makers for bug in make(config)]


def _softmax_name(config: AttentionConfig) -> str:
    """The gradient the softmax backward makes: d_masked, d_biased, d_capped or d_scaled."""
    from attntrace.engine.backward import _softmax_input

    masked = config.masked
    return f"d_{_softmax_input(config, masked)}"


def _softmax_back(config: AttentionConfig) -> Iterator[BackwardBug]:
    name = _softmax_name(config)

    def no_rowsum(done: Done, value: Any) -> Any:
        return done["weights"] * done["d_weights"]  # (B, h, S, N)

    def over_queries(done: Done, value: Any) -> Any:
        w, dw = done["weights"], done["d_weights"]  # (B, h, S, N)
        return w * (dw - (dw * w).sum(axis=-2, keepdims=True))

    yield BackwardBug(
        key="softmax-backward-no-rowsum",
        name=f"softmax backward without its row-sum term ({name} = weights ⊙ d_weights)",
        fix=f"{name} = weights * (d_weights - (d_weights * weights).sum(-1, keepdim=True))",
        replace={name: no_rowsum},
    )
    yield BackwardBug(
        key="softmax-backward-rowsum-queries",
        name="softmax backward's row sum taken over the queries (dim=-2), not the keys",
        fix="take the sum over the keys: (d_weights * weights).sum(-1, keepdim=True)",
        replace={name: over_queries},
    )


def _scale_back(config: AttentionConfig) -> Iterator[BackwardBug]:
    scale = config.score_scale
    wrong = {
        "backward-scale-missing": (
            "the backward leaves out the scale (d_scores = d_scaled)",
            1.0 / scale,
        ),
        "backward-scale-twice": (
            f"the backward multiplies by the scale twice (d_scaled · {scale:.6g}²)",
            scale,
        ),
        "backward-scale-inverted": (
            "the backward multiplies by √d instead of 1/√d (d_scaled / scale)",
            1.0 / scale**2,
        ),
    }
    for key, (name, factor) in wrong.items():
        yield BackwardBug(
            key=key,
            name=name,
            fix=f"d_scores = d_scaled * {scale:.6g}, the forward's own scale, once",
            replace={"d_scores": _times(factor)},
        )


def _times(factor: float) -> StepReplacement:
    """The gradient multiplied by ``factor``."""
    return lambda done, value: value * factor


def _transposed(config: AttentionConfig) -> Iterator[BackwardBug]:
    """A gradient matmul with an operand left untransposed (the shapes agree when S = N)."""
    if config.seq != config.keys:
        return
    q = "q_rot" if config.rope else "q_norm" if config.qk_norm == "head" else "q"
    k = "k_rep" if config.grouped else "k_rot" if config.rope else "k"
    v = "v_rep" if config.grouped else "v"

    def d_v(done: Done, value: Any) -> Any:
        return done["weights"] @ done["d_context"]  # (B, h, N, d)

    def d_q(done: Done, value: Any) -> Any:
        return done["d_scores"].swapaxes(-2, -1) @ done[k]  # (B, h, S, d)

    def d_k_t(done: Done, value: Any) -> Any:
        return (done["d_scores"] @ done[q]).swapaxes(-2, -1)  # (B, h, d, N)

    yield BackwardBug(
        key="d_v-weights-not-transposed",
        name="d_v = weights @ d_context (the weights not transposed)",
        fix="d_v = weights.transpose(-2, -1) @ d_context",
        replace={f"d_{v}": d_v},
    )
    yield BackwardBug(
        key="d_q-scores-transposed",
        name="d_q = d_scoresᵀ @ k (the scores' gradient transposed)",
        fix="d_q = d_scores @ k",
        replace={f"d_{q}": d_q},
    )
    yield BackwardBug(
        key="d_k-scores-not-transposed",
        name="d_k = d_scores @ q (the scores' gradient not transposed)",
        fix="d_k = d_scores.transpose(-2, -1) @ q",
        replace={"d_k_t": d_k_t},
    )


def _groups_back(config: AttentionConfig) -> Iterator[BackwardBug]:
    """GQA: the gradient of a key/value head not summed over the query heads that shared it."""
    if not config.grouped:
        return
    r = config.heads // config.groups
    k = "k_rot" if config.rope else "k"

    def first_copy(name: str) -> StepReplacement:
        def wrong(done: Done, value: Any) -> Any:
            rep = done[f"d_{name[0]}_rep"]  # (B, h, N, d)
            return rep[..., ::r, :, :]  # (B, g, N, d): one query head's share

        return wrong

    yield BackwardBug(
        key="gqa-grad-not-summed",
        name=f"GQA: d_k and d_v taken from the first of the {r} query heads of each kv head, "
        "not summed over them",
        fix=f"sum over the repeated heads: d_k_rep.view(..., g, {r}, N, d).sum(-4)",
        replace={f"d_{k}": first_copy(k), "d_v": first_copy("v")},
    )
    yield BackwardBug(
        key="gqa-grad-mean",
        name=f"GQA: d_k and d_v averaged over the {r} repeated heads instead of summed",
        fix="sum over the repeated heads (.sum, not .mean)",
        replace={f"d_{k}": lambda done, v: v / r, "d_v": lambda done, v: v / r},
    )


def _weights_transposed(config: AttentionConfig) -> Iterator[BackwardBug]:
    """A hand-written linear backward returning xᵀ @ d_y, the weight's gradient transposed:
    in the one linear every projection shares, then in one projection alone."""
    sizes = {
        "q": (config.heads * config.head_dim, config.hidden),
        "k": (config.groups * config.head_dim, config.kv_width),
        "v": (config.groups * config.head_dim, config.kv_width),
        "o": (config.hidden, config.heads * config.head_dim),
    }
    square = [c for c, (rows, cols) in sizes.items() if rows == cols]

    def transposed(done: Done, value: Any) -> Any:
        return value.swapaxes(0, 1)  # (in, out) where the weight is (out, in)

    fix = "d_w = d_yᵀ @ x, the shape of the weight (out_features, in_features)"
    if len(square) > 1:
        yield BackwardBug(
            key="weight-grad-transposed",
            name=f"every weight gradient transposed (xᵀ @ d_y): {', '.join(square)}",
            fix=fix,
            replace={f"d_w_{c}": transposed for c in square},
        )
    for c in square:
        yield BackwardBug(
            key=f"weight-grad-transposed-{c}",
            name=f"d_w_{c} transposed (xᵀ @ d_y, where the layer's weight is (out, in))",
            fix=fix,
            replace={f"d_w_{c}": transposed},
        )
