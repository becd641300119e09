"""Two configurations side by side (``attntrace compare``): their steps aligned by name, the
steps whose shape or op changes, the settings that differ, and FLOPs, bytes and parameters
beside each other. It reads two traces; nothing here computes attention.

>>> from attntrace import AttentionConfig, trace_attention
>>> a = trace_attention(AttentionConfig(heads=12), "shape")
>>> b = trace_attention(AttentionConfig(heads=8), "shape")
>>> pair = side_by_side(a, b)
>>> [p.name for p in pair.steps if p.changed][:3]
['q_heads', 'k_heads', 'v_heads']
>>> {t.name: t.a == t.b for t in pair.totals}["parameters"]
True
"""

from __future__ import annotations

import dataclasses
import difflib
import math
from dataclasses import dataclass
from typing import Any

from attntrace.trace import Step, Trace

#: The ``schema`` value of :meth:`SideBySide.to_dict`.
COMPARE_SCHEMA_ID = "attntrace.compare/1"


@dataclass(frozen=True)
class StepPair:
    """One step name and its record in each trace (None where that trace has no such step)."""

    name: str
    a: Step | None
    b: Step | None

    @property
    def changed(self) -> bool:
        """True when the step is in one trace only, or its shape, axes or op differ."""
        if self.a is None or self.b is None:
            return True
        return (self.a.shape, self.a.axes, self.a.op) != (self.b.shape, self.b.axes, self.b.op)


@dataclass(frozen=True)
class Total:
    """One figure of each trace: FLOPs, parameters, bytes; ``unit`` says how to write it."""

    name: str
    a: int
    b: int
    unit: str  # "count" or "bytes"

    @property
    def ratio(self) -> float | None:
        """b / a (None when a is 0)."""
        return self.b / self.a if self.a else None


@dataclass(frozen=True)
class SideBySide:
    """The two traces, their aligned steps, the settings and the figures that differ."""

    a: Trace
    b: Trace
    steps: tuple[StepPair, ...]
    settings: tuple[tuple[str, str, str], ...]  # (setting, in a, in b), only those that differ
    totals: tuple[Total, ...]

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: schema, both configs, the settings that differ, every step of either
        with its shape, axes, op and FLOPs in each (null where it has none), the totals."""
        return {
            "schema": COMPARE_SCHEMA_ID,
            "a": {**self.a.config.to_dict(), "backend": self.a.backend},
            "b": {**self.b.config.to_dict(), "backend": self.b.backend},
            "settings": [{"name": n, "a": x, "b": y} for n, x, y in self.settings],
            "steps": [
                {"name": p.name, "changed": p.changed, "a": _step(p.a), "b": _step(p.b)}
                for p in self.steps
            ],
            "totals": {t.name: {"a": t.a, "b": t.b, "ratio": t.ratio} for t in self.totals},
        }


def side_by_side(a: Trace, b: Trace) -> SideBySide:
    """Align the steps of ``a`` and ``b`` by name (those of one only where they fall) and set
    their settings and figures beside each other."""
    return SideBySide(
        a=a, b=b, steps=_aligned(a, b), settings=_settings(a, b), totals=_totals(a, b)
    )


def _aligned(a: Trace, b: Trace) -> tuple[StepPair, ...]:
    """The steps of both in order: the longest common run of names kept in place, a step of
    one trace alone where it falls."""
    pairs: list[StepPair] = []
    matcher = difflib.SequenceMatcher(a=a.names, b=b.names, autojunk=False)
    for tag, i0, i1, j0, j1 in matcher.get_opcodes():
        if tag == "equal":
            pairs += [StepPair(n, a[n], b[n]) for n in a.names[i0:i1]]
            continue
        pairs += [StepPair(n, a[n], b[n] if n in b.names else None) for n in a.names[i0:i1]]
        pairs += [StepPair(n, None, b[n]) for n in b.names[j0:j1] if n not in a]
    return tuple(pairs)


def _settings(a: Trace, b: Trace) -> tuple[tuple[str, str, str], ...]:
    """The config fields (and the head dim, the scores' factor, the backend) that differ."""
    one = {**a.config.to_dict(), "backend": a.backend, "score scale": _scale(a)}
    two = {**b.config.to_dict(), "backend": b.backend, "score scale": _scale(b)}
    names = list(dict.fromkeys([*one, *two]))
    # a field to_dict leaves out while off: its default (--alibi's false, not "none")
    off = {f.name: f.default for f in dataclasses.fields(a.config)}
    return tuple(
        (name, _word(one.get(name, off.get(name))), _word(two.get(name, off.get(name))))
        for name in names
        if one.get(name) != two.get(name)
    )


def _scale(t: Trace) -> str:
    d = t.config.head_dim
    if t.config.scale is None:
        return f"1/√{d} = {1 / math.sqrt(d):.4g}"
    return f"{t.config.score_scale:g}"


def _word(value: object) -> str:
    return (
        "none" if value is None else str(value).lower() if isinstance(value, bool) else str(value)
    )


def _totals(a: Trace, b: Trace) -> tuple[Total, ...]:
    def both(name: str, unit: str, get: Any) -> Total:
        return Total(name=name, a=int(get(a)), b=int(get(b)), unit=unit)

    return (
        both("FLOPs", "count", lambda t: t.total_flops),
        both("parameters", "count", lambda t: t.param_count),
        both("parameter bytes", "bytes", lambda t: t.param_bytes),
        both("step bytes", "bytes", lambda t: t.step_bytes),
        both("peak activations", "bytes", lambda t: t.peak_bytes),
        both("score bytes held at once", "bytes", lambda t: t.score_bytes),
        both("KV cache per token", "bytes", lambda t: t.kv_cache_bytes_per_token),
        both("steps", "count", lambda t: len(t.steps)),
    )


def _step(step: Step | None) -> dict[str, Any] | None:
    if step is None:
        return None
    return {
        "shape": list(step.shape),
        "axes": list(step.axes),
        "op": step.op,
        "flops": step.flops,
        "bytes": step.nbytes,
    }
