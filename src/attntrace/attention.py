"""Multi-head self-attention, written once against the backend interface, recording every
intermediate tensor as a named step.

The step order follows the study notes: x -> Q, K, V (three linear layers) -> split heads ->
heads first -> K transposed -> scores = Q @ K^T -> scaled -> softmax -> context = weights @ V
-> sequence first -> merge heads -> output linear layer.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from attntrace.backends import Backend, Source, get_backend
from attntrace.config import AttentionConfig
from attntrace.inputs import PARAM_AXES, random_sources, with_tensors
from attntrace.memory import check_budget, format_bytes
from attntrace.trace import Param, Step, Trace

if TYPE_CHECKING:
    import numpy as np

T = TypeVar("T")

#: The public step names, in order (a contract: JSON, npz files and checks use them).
STEP_NAMES: tuple[str, ...] = (
    "x", "q_proj", "k_proj", "v_proj", "q_heads", "k_heads", "v_heads", "q", "k", "v", "k_t",
    "scores", "scaled", "weights", "context", "context_heads", "merged", "output",
)


def trace_attention(
    config: AttentionConfig,
    backend: str | Backend[Any] = "numpy",
    *,
    max_memory: int | None = None,
    keep_values: bool = True,
    tensors: Mapping[str, np.ndarray | None] | None = None,
) -> Trace:
    """Run multi-head attention for ``config`` on ``backend`` and record every step.

    ``max_memory`` caps the bytes a compute backend may allocate (default: half the available
    memory); the estimate is made on shapes before anything is allocated.
    ``keep_values=False`` records shapes only, letting intermediates be freed.
    ``tensors`` replaces the seeded x or parameters by arrays (e.g. loaded weights) of the
    shapes ``config`` gives; a bias mapped to None is left out. ``backend`` is a registered
    name or a :class:`Backend` instance.

    >>> t = trace_attention(AttentionConfig(seq=3, hidden=768, heads=12))
    >>> t["scores"].shape, t["output"].shape
    ((12, 3, 3), (3, 768))
    >>> round(float(t["weights"].value.sum(axis=-1).max()), 6)
    1.0
    """
    be = get_backend(backend) if isinstance(backend, str) else backend
    be.check_dtype(config.dtype)
    if be.computes:
        _check_memory(config, max_memory, keep_values)
    sources = with_tensors(config, random_sources(config), tensors or {})
    return _record(config, be, sources, keep_values=keep_values and be.computes)


def _record(config: AttentionConfig, be: Backend[T], sources: Mapping[str, Source | None], *, keep_values: bool) -> Trace:
    """Create the tensors of ``sources`` on ``be``, run the algorithm and collect the records."""
    recorder = _Recorder(be, config, keep_values)
    params = {name: be.tensor(source) for name in PARAM_AXES if (source := sources[name]) is not None}
    x = sources["x"]
    assert x is not None  # with_tensors refuses to drop x
    _attend(config, be, recorder, be.tensor(x), params)
    parameters = tuple(
        Param(name, be.shape(t), be.dtype(t), be.to_numpy(t) if keep_values else None, axes=PARAM_AXES[name])
        for name, t in params.items()
    )
    return Trace(config, be.name, tuple(recorder.steps), parameters)


def _attend(config: AttentionConfig, be: Backend[T], rec: _Recorder[T], x: T, p: Mapping[str, T]) -> T:
    """The algorithm: a straight sequence of backend calls, each recorded as a named step.
    Shapes are written batched; without --batch the leading B is absent."""
    lead = ("B",) if config.batched else ()
    sizes = config.axis_sizes()
    S, H, h, d = sizes["S"], sizes["H"], sizes["h"], sizes["d"]
    n = len(lead)  # index of the S axis; heads-first swaps axes n and n + 1
    dims = ", ".join((*lead, ""))  # "B, " or ""
    swap = f"{n}, {n + 1}"
    x = rec.step("x", x, "x", (*lead, "S", "H"))  # (B, S, H)
    proj = {
        c: rec.step(f"{c}_proj", be.linear(x, p[f"w_{c}"], p.get(f"b_{c}")), _linear_op("x", c, p), (*lead, "S", "H"))
        for c in "qkv"
    }  # (B, S, H) each
    split = {
        c: rec.view(f"{c}_heads", be.reshape(proj[c], (*rec.lead_sizes, S, h, d)), f"{c}_proj.view({dims}S, h, d)", (*lead, "S", "h", "d"))
        for c in "qkv"
    }  # (B, S, h, d) each
    q, k, v = (
        rec.view(c, be.transpose(split[c], n, n + 1), f"{c}_heads.transpose({swap})", (*lead, "h", "S", "d"))
        for c in "qkv"
    )  # (B, h, S, d) each
    k_t = rec.view("k_t", be.transpose(k, -2, -1), "k.transpose(-2, -1)", (*lead, "h", "d", "S"))  # (B, h, d, S)
    scores = rec.step("scores", be.matmul(q, k_t), "q @ k_t", (*lead, "h", "S", "S"))  # (B, h, S, S)
    scale_op = f"scores / sqrt({d})" if config.scale is None else f"scores * {config.scale:g}" + (" (unscaled)" if config.scale == 1 else "")
    scaled = rec.step("scaled", be.scale(scores, config.score_scale), scale_op, (*lead, "h", "S", "S"))  # (B, h, S, S)
    weights = rec.step("weights", be.softmax(scaled), "softmax(scaled, dim=-1)", (*lead, "h", "S", "S"))  # (B, h, S, S)
    context = rec.step("context", be.matmul(weights, v), "weights @ v", (*lead, "h", "S", "d"))  # (B, h, S, d)
    heads_last = rec.view("context_heads", be.transpose(context, n, n + 1), f"context.transpose({swap})", (*lead, "S", "h", "d"))  # (B, S, h, d)
    merged = rec.step("merged", be.reshape(heads_last, (*rec.lead_sizes, S, H)), f"context_heads.reshape({dims}S, H)", (*lead, "S", "H"))  # (B, S, H)
    return rec.step("output", be.linear(merged, p["w_o"], p.get("b_o")), _linear_op("merged", "o", p), (*lead, "S", "H"))  # (B, S, H)


def _linear_op(x: str, c: str, p: Mapping[str, object]) -> str:
    """``x @ w_c.T + b_c``, without ``+ b_c`` when the layer has no bias."""
    return f"{x} @ w_{c}.T" + (f" + b_{c}" if f"b_{c}" in p else "")


class _Recorder(Generic[T]):
    """Turns each backend result into a :class:`Step` and passes the tensor on."""

    def __init__(self, be: Backend[T], config: AttentionConfig, keep_values: bool) -> None:
        self.be, self.keep_values = be, keep_values
        self.lead_sizes: tuple[int, ...] = (config.batch,) if config.batch is not None else ()
        self.steps: list[Step] = []

    def step(self, name: str, value: T, op: str, axes: tuple[str, ...], *, view: bool = False) -> T:
        shape = self.be.shape(value)
        assert len(shape) == len(axes), f"{name}: {shape} vs {axes}"  # a bug, not user input
        stored = self.be.to_numpy(value) if self.keep_values else None
        self.steps.append(Step(name, shape, self.be.dtype(value), stored, index=len(self.steps), op=op, axes=axes, view=view))
        return value

    def view(self, name: str, value: T, op: str, axes: tuple[str, ...]) -> T:
        return self.step(name, value, op, axes, view=True)


def estimate_bytes(config: AttentionConfig, keep_values: bool = True) -> tuple[int, Step]:
    """Bytes a compute backend needs for ``config`` and the largest step, from shapes alone.

    With ``keep_values`` every step that is not a view stays alive; otherwise about the two
    largest tensors at once. Either way one temporary of the largest size is added.

    >>> needed, largest = estimate_bytes(AttentionConfig(seq=3, hidden=768, heads=12))
    >>> largest.name, needed
    ('x', 9524496)
    """
    shapes = trace_attention(config, "shape")
    owned = sorted((s.nbytes for s in shapes.steps if not s.view), reverse=True)
    live = sum(owned) if keep_values else sum(owned[:2])
    largest = max(shapes.steps, key=lambda s: s.nbytes)
    return shapes.param_bytes + live + largest.nbytes, largest


def _check_memory(config: AttentionConfig, max_memory: int | None, keep_values: bool) -> None:
    needed, largest = estimate_bytes(config, keep_values)
    where = f"{largest.name} {largest.shape} alone is {format_bytes(largest.nbytes)}"
    check_budget(needed, max_memory, where, "lower --seq/--hidden/--batch, or trace shapes only with --backend shape")

