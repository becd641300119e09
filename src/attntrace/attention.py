"""Multi-head self-attention, written once against the backend interface, recording every
intermediate tensor as a named step.

The step order follows the study notes: x -> Q, K, V (three linear layers) -> split heads ->
heads first -> K transposed -> scores = Q @ K^T -> scaled -> softmax -> context = weights @ V
-> sequence first -> merge heads -> output linear layer.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping
from dataclasses import replace
from typing import Generic, TypeVar, cast

from attntrace.backends import SMALL_WORK_FLOPS, Backend, Source, get_backend, single_threaded_blas
from attntrace.config import AttentionConfig
from attntrace.costs import CostMeter, Registry, peak_live_bytes, resolve
from attntrace.inputs import PARAM_AXES, random_sources
from attntrace.memory import check_budget, format_bytes
from attntrace.trace import Param, Step, Trace

T = TypeVar("T")

#: The public step names, in order (a contract: JSON, npz files and checks use them).
STEP_NAMES: tuple[str, ...] = (
    "x", "q_proj", "k_proj", "v_proj", "q_heads", "k_heads", "v_heads", "q", "k", "v", "k_t",
    "scores", "scaled", "weights", "context", "context_heads", "merged", "output",
)


def trace_attention(
    config: AttentionConfig,
    backend: str = "numpy",
    *,
    max_memory: int | None = None,
    keep_values: bool | Collection[str] = True,
) -> Trace:
    """Run multi-head attention for ``config`` on ``backend`` and record every step.

    ``max_memory`` caps the bytes a compute backend may allocate (default: half the available
    memory); the estimate is made on shapes before anything is allocated.
    ``keep_values=False`` records shapes only, letting intermediates be freed (and lets the
    eager algorithm fold the scale into q and take the softmax in place); a collection of step
    names keeps the values of those steps only.

    >>> t = trace_attention(AttentionConfig(seq=3, hidden=768, heads=12))
    >>> t["scores"].shape, t["output"].shape
    ((12, 3, 3), (3, 768))
    >>> round(float(t["weights"].value.sum(axis=-1).max()), 6)
    1.0
    >>> t["scores"].formula, t["scores"].flops == 2 * 12 * 3 * 3 * 64
    ('2·h·S·S·d', True)
    """
    shapes = trace_attention(config, "shape") if backend != "shape" else None  # sizes and costs, no arrays
    if shapes is not None and shapes.total_flops < SMALL_WORK_FLOPS:
        single_threaded_blas()
    be = get_backend(backend)
    be.check_dtype(config.dtype)
    if be.computes and shapes is not None:
        _check_memory(config, max_memory, keep_values is True, shapes)
    return _record(config, be, random_sources(config), keep_values=keep_values if be.computes else False)


def _record(config: AttentionConfig, be: Backend[T], sources: Mapping[str, Source], *,
            keep_values: bool | Collection[str]) -> Trace:
    """Create the tensors of ``sources`` on ``be``, run the algorithm and collect the records."""
    recorder = _Recorder(be, config, keep_values)
    params = {name: be.tensor(sources[name]) for name in PARAM_AXES}
    for name, t in params.items():
        recorder.registry.add(t, name, PARAM_AXES[name])
    _attend(config, cast("Backend[T]", recorder.meter), recorder, be.tensor(sources["x"]), params)
    keep_params = keep_values is True or bool(keep_values)
    parameters = tuple(
        Param(name, be.shape(t), be.dtype(t), be.to_numpy(t) if keep_params else None, axes=PARAM_AXES[name])
        for name, t in params.items()
    )
    steps = recorder.finish()
    return Trace(config, be.name, steps, parameters, peak_bytes=peak_live_bytes(steps))


def _attend(config: AttentionConfig, be: Backend[T], rec: _Recorder[T], x: T, p: Mapping[str, T]) -> T:
    """The algorithm: a straight sequence of backend calls, each recorded as a named step.
    Shapes are written batched; without --batch the leading B is absent."""
    q, k, v = _project(config, be, rec, x, p)  # (B, h, S, d) each
    if config.algorithm == "flash":
        from attntrace.flash import flash_context

        context = flash_context(config, be, rec, q, k, v)  # (B, h, S, d)
    else:
        context = _eager_context(config, be, rec, q, k, v)  # (B, h, S, d)
    return _merge(config, be, rec, context, p)  # (B, S, H)


def _project(config: AttentionConfig, be: Backend[T], rec: _Recorder[T], x: T, p: Mapping[str, T]) -> tuple[T, T, T]:
    """x -> q, k, v with heads first: three linear layers, split heads, swap S and h."""
    lead, n = rec.lead, len(rec.lead)  # n: index of the S axis; heads-first swaps axes n and n + 1
    S, h, d = config.seq, config.heads, config.head_dim
    dims, swap = ", ".join((*lead, "")), f"{n}, {n + 1}"  # "B, " or ""; "1, 2" or "0, 1"
    x = rec.step("x", x, "x", (*lead, "S", "H"))  # (B, S, H)
    proj = {
        c: rec.step(f"{c}_proj", be.linear(x, p[f"w_{c}"], p[f"b_{c}"]), f"x @ w_{c}.T + b_{c}", (*lead, "S", "H"))
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
    return q, k, v


def _eager_context(config: AttentionConfig, be: Backend[T], rec: _Recorder[T], q: T, k: T, v: T) -> T:
    """scores = q @ k_t, scaled, softmax, context = weights @ v: the whole (S, S) matrix."""
    lead, d = rec.lead, config.head_dim
    hSS = (*lead, "h", "S", "S")
    k_t = rec.view("k_t", be.transpose(k, -2, -1), "k.transpose(-2, -1)", (*lead, "h", "d", "S"))  # (B, h, d, S)
    if rec.keeps("scores") or rec.keeps("scaled"):
        scores = rec.step("scores", be.matmul(q, k_t), "q @ k_t", hSS)  # (B, h, S, S)
        scaled = rec.step("scaled", be.scale(scores, 1.0 / math.sqrt(d)), f"scores / sqrt({d})", hSS)  # (B, h, S, S)
    else:  # nobody sees the unscaled scores: fold the scale into q (S·d multiplies, not S·S)
        q_scaled = be.scale(q, 1.0 / math.sqrt(d))  # (B, h, S, d)
        rec.meter.discard()  # charged below as the traced algorithm does it
        scores = rec.step("scores", be.matmul(q_scaled, k_t), "q @ k_t", hSS, contract="d")  # (B, h, S, S)
        rec.meter.charge("scale", scores, out=scores)
        scaled = rec.step("scaled", scores, f"scores / sqrt({d})", hSS)  # (B, h, S, S), already scaled
    softmax = be.softmax if rec.keeps("scaled") else be.softmax_  # in place unless scaled is kept
    weights = rec.step("weights", softmax(scaled), "softmax(scaled, dim=-1)", hSS)  # (B, h, S, S)
    return rec.step("context", be.matmul(weights, v), "weights @ v", (*lead, "h", "S", "d"))  # (B, h, S, d)


def _merge(config: AttentionConfig, be: Backend[T], rec: _Recorder[T], context: T, p: Mapping[str, T]) -> T:
    """context -> sequence first -> merge heads -> output linear layer."""
    lead, n = rec.lead, len(rec.lead)
    dims, swap = ", ".join((*lead, "")), f"{n}, {n + 1}"
    heads_last = rec.view("context_heads", be.transpose(context, n, n + 1), f"context.transpose({swap})", (*lead, "S", "h", "d"))  # (B, S, h, d)
    merged = rec.step("merged", be.reshape(heads_last, (*rec.lead_sizes, config.seq, config.hidden)), f"context_heads.reshape({dims}S, H)", (*lead, "S", "H"))  # (B, S, H)
    return rec.step("output", be.linear(merged, p["w_o"], p["b_o"]), "merged @ w_o.T + b_o", (*lead, "S", "H"))  # (B, S, H)


class _Recorder(Generic[T]):
    """Turns each backend result into a :class:`Step` with its cost and passes the tensor on.

    The algorithm calls the backend through ``meter``, which charges every operation; a step's
    FLOPs are the charges since the previous step. Steps recorded again under the same name
    (the tiles of flash) add their FLOPs and count as repeats of the first record."""

    def __init__(self, be: Backend[T], config: AttentionConfig, keep_values: bool | Collection[str]) -> None:
        self.be, self.keep_values = be, keep_values
        self.meter: CostMeter[T] = CostMeter(be)
        self.registry = Registry()
        self.lead: tuple[str, ...] = ("B",) if config.batched else ()
        self.lead_sizes: tuple[int, ...] = (config.batch,) if config.batch is not None else ()
        self.steps: list[Step] = []
        self._repeats: dict[str, list[int]] = {}  # name -> [extra flops, extra repeats]
        self._late: dict[str, T] = {}  # steps whose buffer is filled after they are recorded

    def keeps(self, name: str) -> bool:
        """Whether the values of step ``name`` are kept."""
        keep = self.keep_values
        return keep if isinstance(keep, bool) else name in keep

    def step(self, name: str, value: T, op: str, axes: tuple[str, ...], *, view: bool = False,
             contract: str | None = None, times: int = 1) -> T:
        """Record ``value`` as step ``name``; ``contract`` names a contracted axis the recorder
        cannot see (an input that is no step); ``times`` counts identical repeats."""
        if name in self._repeats:
            return self._repeat(name, value, axes, times)
        shape = self.be.shape(value)
        assert len(shape) == len(axes), f"{name}: {shape} vs {axes}"  # a bug, not user input
        charges, inputs = self.meter.take()
        flops, terms = resolve(charges, shape, axes, self.registry, contract)
        names = tuple(dict.fromkeys(found[0] for found in map(self.registry.lookup, inputs) if found))
        stored = self.be.to_numpy(value) if self.keeps(name) else None
        self.steps.append(Step(name, shape, self.be.dtype(value), stored, index=len(self.steps), op=op, axes=axes,
                               view=view, flops=flops * times, terms=terms, inputs=names, repeat=times))
        self._repeats[name] = [0, 0]
        self.registry.add(value, name, axes)
        return value

    def _repeat(self, name: str, value: T, axes: tuple[str, ...], times: int) -> T:
        charges, _ = self.meter.take()
        tally = self._repeats[name]
        tally[0] += times * sum(c.coef * math.prod(c.shape) * c.k for c in charges)
        tally[1] += times
        self.registry.add(value, name, axes)
        return value

    def view(self, name: str, value: T, op: str, axes: tuple[str, ...], *, times: int = 1) -> T:
        return self.step(name, value, op, axes, view=True, times=times)

    def refresh(self, name: str, value: T) -> None:
        """Take the values of step ``name`` from ``value`` at the end (a buffer filled later)."""
        if self.keeps(name):
            self._late[name] = value

    def finish(self) -> tuple[Step, ...]:
        """The recorded steps, repeats and late values added in."""
        steps = [replace(s, value=self.be.to_numpy(self._late[s.name])) if s.name in self._late else s for s in self.steps]
        return tuple(
            replace(s, flops=s.flops + self._repeats[s.name][0], repeat=s.repeat + self._repeats[s.name][1])
            if self._repeats[s.name][1] else s
            for s in steps
        )


def estimate_bytes(config: AttentionConfig, keep_values: bool = True, shapes: Trace | None = None) -> tuple[int, Step]:
    """Bytes a compute backend needs for ``config`` and the largest step, from shapes alone.

    With ``keep_values`` every step that is not a view stays alive; otherwise the trace's peak
    of live tensors. Either way one temporary of the largest size is added.

    >>> needed, largest = estimate_bytes(AttentionConfig(seq=3, hidden=768, heads=12))
    >>> largest.name, needed
    ('x', 9524496)
    """
    shapes = shapes or trace_attention(config, "shape")
    live = sum(s.nbytes for s in shapes.steps if not s.view) if keep_values else shapes.peak_bytes
    largest = max(shapes.steps, key=lambda s: s.nbytes)
    return shapes.param_bytes + live + largest.nbytes, largest


def _check_memory(config: AttentionConfig, max_memory: int | None, keep_values: bool, shapes: Trace) -> None:
    needed, largest = estimate_bytes(config, keep_values, shapes)
    where = f"{largest.name} {largest.shape} alone is {format_bytes(largest.nbytes)}"
    advice = "lower --seq/--hidden/--batch, or trace shapes only with --backend shape"
    if config.algorithm == "eager":
        advice += ", or compute tile by tile without the (S, S) matrix with --algorithm flash"
    check_budget(needed, max_memory, where, advice)

