"""``attntrace verify``: the trace is the attention PyTorch computes.

One config, one seed, one set of weights runs through two backends (numpy and torch) and two
independent PyTorch references: ``torch.nn.MultiheadAttention`` (weights loaded into
``in_proj_weight`` / ``in_proj_bias`` / ``out_proj``) and
``torch.nn.functional.scaled_dot_product_attention`` (projections by ``F.linear``; its attention
weights are SDPA applied to an identity value matrix, softmax(q kᵀ·scale) @ I).

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
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from attntrace.attention import trace_attention
from attntrace.backends import Backend, get_backend
from attntrace.config import AttentionConfig
from attntrace.errors import ConfigError
from attntrace.inputs import random_sources, with_tensors
from attntrace.trace import Shape, Trace

if TYPE_CHECKING:
    import numpy as np


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
        raise ConfigError(f"verify compares with numpy, which has no {config.dtype}; use --dtype {', '.join(TOLERANCES)}")
    base, factor = TOLERANCES[config.dtype], math.sqrt(max(config.hidden, 64) / 64)
    return Tolerance(rtol=base.rtol * factor, atol=base.atol * factor)
MHA, SDPA = "nn.MultiheadAttention", "SDPA"  # SDPA: torch.nn.functional.scaled_dot_product_attention


@dataclass(frozen=True)
class Comparison:
    """One tensor compared between two computations."""

    name: str  # the step, e.g. "scores"
    left: str  # e.g. "numpy"
    right: str  # e.g. "torch" or MHA
    shape: Shape
    max_abs: float
    max_rel: float
    ok: bool


@dataclass(frozen=True)
class VerifyReport:
    """Every comparison of one verify run; ``ok`` when all are within the tolerance."""

    config: AttentionConfig
    tolerance: Tolerance
    steps: tuple[Comparison, ...]  # each step, backend against backend
    references: tuple[Comparison, ...]  # output and weights of each backend against each reference

    @property
    def ok(self) -> bool:
        return all(c.ok for c in (*self.steps, *self.references))

    @property
    def failures(self) -> tuple[Comparison, ...]:
        return tuple(c for c in (*self.steps, *self.references) if not c.ok)


def verify_attention(
    config: AttentionConfig,
    *,
    backends: tuple[Backend[Any], Backend[Any]] | None = None,
    tensors: Mapping[str, np.ndarray | None] | None = None,
    max_memory: int | None = None,
) -> VerifyReport:
    """Compare the traces of two backends (numpy and torch unless given) step by step, and
    their output and attention weights with PyTorch's own attention.

    >>> report = verify_attention(AttentionConfig(seq=3, hidden=8, heads=2))
    >>> report.ok, [c.right for c in report.references][:2]
    (True, ['nn.MultiheadAttention', 'SDPA'])
    """
    tol = tolerance(config)
    first, second = backends or (get_backend("numpy"), get_backend("torch"))
    get_backend("torch")  # the references need torch: fail early with the install hint
    a, b = (trace_attention(config, be, max_memory=max_memory, tensors=tensors) for be in (first, second))
    steps = tuple(compare(s.name, a.backend, b.backend, s.value, b[s.name].value, tol) for s in a.steps)
    refs = torch_references(config, _inputs(config, tensors))
    return VerifyReport(config, tol, steps, _against(a, refs, tol) + _against(b, refs, tol))


def _against(trace: Trace, refs: Mapping[str, tuple[np.ndarray, np.ndarray]], tol: Tolerance) -> tuple[Comparison, ...]:
    return tuple(
        compare(name, trace.backend, ref, trace[name].value, values[i], tol)
        for name, i in (("output", 0), ("weights", 1)) for ref, values in refs.items()
    )


def _inputs(config: AttentionConfig, tensors: Mapping[str, np.ndarray | None] | None) -> dict[str, np.ndarray | None]:
    """The exact x and parameters the backends get (seeded, or the user's)."""
    sources = with_tensors(config, random_sources(config), tensors or {})
    return {name: None if s is None else s.make() for name, s in sources.items()}


def compare(name: str, left: str, right: str, a: np.ndarray | None, b: np.ndarray | None, tol: Tolerance) -> Comparison:
    """``a`` against ``b`` (the reference) in float64.

    >>> import numpy as np
    >>> c = compare("x", "a", "b", np.array([1.0, 2.0]), np.array([1.0, 2.001]), Tolerance(1e-4, 1e-5))
    >>> round(c.max_abs, 6), c.ok
    (0.001, False)
    """
    import numpy as np

    if a is None or b is None or a.shape != b.shape:
        shape = tuple(a.shape) if a is not None else ()
        return Comparison(name, left, right, shape, math.inf, math.inf, False)
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    diff, size = np.abs(a64 - b64), np.abs(b64)
    m = max(1.0, float(size.max(initial=0.0)))  # NaN in b makes m NaN and the check fail
    max_abs = float(diff.max(initial=0.0))
    max_rel = float((diff / np.maximum(size, m * tol.atol / tol.rtol)).max(initial=0.0))
    ok = bool(np.all(diff <= tol.atol * m + tol.rtol * size))
    return Comparison(name, left, right, tuple(a.shape), max_abs, max_rel, ok)


def torch_references(config: AttentionConfig, inputs: Mapping[str, np.ndarray | None]) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """(output, attention weights) from nn.MultiheadAttention and from SDPA, as numpy."""
    import torch

    dt = getattr(torch, config.dtype)
    t = {name: torch.from_numpy(v).to(dt) for name, v in inputs.items() if v is not None}
    zeros = torch.zeros(config.hidden, dtype=dt)
    for c in "qkvo":
        t.setdefault(f"b_{c}", zeros)  # no bias is a zero bias
    with torch.no_grad():
        return {MHA: _numpy(*_mha(config, t)), SDPA: _numpy(*_sdpa(config, t))}


def _mha(config: AttentionConfig, t: dict[str, Any]) -> tuple[Any, Any]:
    import torch

    mha = torch.nn.MultiheadAttention(config.hidden, config.heads, batch_first=True, dtype=t["x"].dtype).eval()
    # MHA always multiplies q by 1/√d; another --scale is folded into w_q and b_q (the same maths)
    fold = 1.0 if config.scale is None else config.score_scale * math.sqrt(config.head_dim)
    mha.in_proj_weight.copy_(torch.cat([t["w_q"] * fold, t["w_k"], t["w_v"]]))
    mha.in_proj_bias.copy_(torch.cat([t["b_q"] * fold, t["b_k"], t["b_v"]]))
    mha.out_proj.weight.copy_(t["w_o"])
    mha.out_proj.bias.copy_(t["b_o"])
    x = t["x"]  # (B, S, H) or (S, H): MHA takes both
    return mha(x, x, x, need_weights=True, average_attn_weights=False)  # type: ignore[no-any-return]


def _sdpa(config: AttentionConfig, t: dict[str, Any]) -> tuple[Any, Any]:
    import torch

    F = torch.nn.functional

    def heads(c: str) -> Any:  # (B, S, H) -> (B, S, h, d) -> (B, h, S, d)
        y = F.linear(t["x"], t[f"w_{c}"], t[f"b_{c}"])
        return y.reshape(*y.shape[:-1], config.heads, config.head_dim).transpose(-3, -2)

    q, k, v = heads("q"), heads("k"), heads("v")
    context = F.scaled_dot_product_attention(q, k, v, scale=config.scale)  # None: SDPA's own 1/√d
    eye = torch.eye(config.seq, dtype=q.dtype).expand(*q.shape[:-1], config.seq)  # softmax(...) @ I = the weights
    weights = F.scaled_dot_product_attention(q, k, eye, scale=config.scale)
    merged = context.transpose(-3, -2).flatten(-2)  # (B, h, S, d) -> (B, S, h, d) -> (B, S, H)
    output = F.linear(merged, t["w_o"], t["b_o"])
    return output, weights


def _numpy(output: Any, weights: Any) -> tuple[np.ndarray, np.ndarray]:
    return output.numpy(), weights.numpy()
