"""The JSON the explore page asks for: the page's controls (query parameters) read into an
:class:`AttentionConfig`, traced by the engine, and every step as the page shows it.

The page never computes: each change of a control asks ``/api/trace`` again, and this module
answers with the steps of the engine's own trace (their shapes, axes, costs, their explanation
in English and Chinese and, at small sizes, their numbers).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from attntrace.errors import AttntraceError, ConfigError

if TYPE_CHECKING:
    from attntrace.config.attention_config import AttentionConfig
    from attntrace.trace import Trace

#: The page's controls: query parameter -> (AttentionConfig field, kind, the page's default).
CONTROLS: dict[str, tuple[str, str, str]] = {
    "B": ("batch", "size?", ""),
    "S": ("seq", "size", "3"),
    "H": ("hidden", "size", "768"),
    "h": ("heads", "size", "12"),
    "g": ("kv_heads", "size?", ""),
    "rope": ("rope", "flag", "0"),
    "causal": ("causal", "flag", "0"),
    "window": ("window", "size?", ""),
    "past": ("past", "count", "0"),
    "algorithm": ("algorithm", "choice", "eager"),
}
#: The largest size a control takes (the page is for learning; the engine's shape backend
#: would take far more).
MAX_SIZE = 1 << 20
#: Up to this many elements in its largest step, the trace runs on numpy and shows numbers.
NUMBERS_MAX_ELEMENTS = 1 << 16
#: A step's numbers are sent when it holds at most this many.
VALUES_MAX = 256


class ParameterError(AttntraceError):
    """A bad query parameter: the page shows the one line, the server answers 400."""


def read_controls(query: Mapping[str, str]) -> dict[str, Any]:
    """The AttentionConfig fields of the page's controls (unknown names are refused).

    >>> read_controls({"S": "4", "h": "8", "causal": "1", "B": ""})
    {'seq': 4, 'heads': 8, 'causal': True}
    >>> read_controls({"h": "twelve"})
    Traceback (most recent call last):
    ...
    attntrace.explore.api.ParameterError: h must be a whole number, got 'twelve'
    """
    unknown = sorted(set(query) - set(CONTROLS) - {"token", "lang"})
    if unknown:
        raise ParameterError(f"unknown parameter {unknown[0]!r}; use {', '.join(CONTROLS)}")
    fields: dict[str, Any] = {}
    for name, text in query.items():
        if name in CONTROLS and text != "":
            field, kind, _ = CONTROLS[name]
            fields[field] = _value(name, kind, text)
    return fields


def _value(name: str, kind: str, text: str) -> Any:
    if kind == "flag":
        if text not in ("0", "1", "true", "false"):
            raise ParameterError(f"{name} must be 0 or 1, got {text!r}")
        return text in ("1", "true")
    if kind == "choice":
        from attntrace.config.attention_config import ALGORITHMS

        if text not in ALGORITHMS:
            raise ParameterError(f"{name} must be one of {', '.join(ALGORITHMS)}, got {text!r}")
        return text
    try:
        value = int(text)
    except ValueError:
        raise ParameterError(f"{name} must be a whole number, got {text!r}") from None
    least = 0 if kind == "count" else 1
    if not least <= value <= MAX_SIZE:
        raise ParameterError(f"{name} must be from {least} to {MAX_SIZE}, got {value}")
    return value


def config_of(query: Mapping[str, str]) -> AttentionConfig:
    """The config the controls describe, validated by AttentionConfig itself (a ConfigError
    names the fix, e.g. the head counts that divide H).

    >>> config_of({"h": "8", "g": "2"}).kv_heads
    2
    """
    from attntrace.config.attention_config import AttentionConfig

    try:
        return AttentionConfig(**read_controls(query))
    except ConfigError as error:
        raise ParameterError(_controls_words(str(error))) from None


def _controls_words(message: str) -> str:
    """A config error in the page's words (``--heads`` is the h control).

    >>> _controls_words("--hidden 768 is not divisible by --heads 7")
    'H 768 is not divisible by h 7'
    """
    names = {"--hidden": "H", "--heads": "h", "--kv-heads": "g", "--seq": "S", "--batch": "B"}
    for flag, letter in names.items():
        message = message.replace(flag, letter)
    return message


@dataclass(frozen=True)
class Computed:
    """A traced config and whether its steps hold numbers (numpy) or shapes alone."""

    trace: Trace
    numbers: bool


def compute(config: AttentionConfig) -> Computed:
    """The engine's trace of ``config``: numpy (with numbers) at small sizes, else shapes."""
    from attntrace.engine.attention import trace_attention

    shapes = trace_attention(config, "shape")
    largest = max(_numel(step.shape) for step in shapes.steps)
    if largest > NUMBERS_MAX_ELEMENTS:
        return Computed(shapes, False)
    return Computed(trace_attention(config, "numpy", keep_values=True), True)


def _numel(shape: tuple[int, ...]) -> int:
    n = 1
    for size in shape:
        n *= size
    return n


def trace_document(query: Mapping[str, str]) -> dict[str, Any]:
    """What ``/api/trace`` answers: the config, the flow line and every step.

    >>> doc = trace_document({"S": "2", "H": "8", "h": "2"})
    >>> doc["steps"][11]["name"], doc["steps"][11]["shape"], doc["numbers"]
    ('scores', [2, 2, 2], True)
    >>> sorted(doc["steps"][11]["explanation"])
    ['en', 'zh']
    """
    from attntrace.learn import explain_trace
    from attntrace.render.table import flow_line

    computed = compute(config_of(query))
    trace = computed.trace
    words = {lang: explain_trace(trace, lang) for lang in ("en", "zh")}
    body = trace.to_dict()
    steps = [
        {
            **step,
            "explanation": {lang: words[lang][step["name"]] for lang in words},
            "values": _values(trace, step["name"]) if computed.numbers else None,
        }
        for step in body["steps"]
    ]
    return {
        "config": body["config"],
        "sizes": trace.axis_sizes(),
        "flow": flow_line(trace).plain,
        "steps": steps,
        "totals": body["totals"],
        "notes": body["notes"],
        "backend": trace.backend,
        "numbers": computed.numbers,
    }


def _values(trace: Trace, name: str) -> list[Any] | None:
    """The step's numbers (rounded to 4 places) when it holds at most :data:`VALUES_MAX`."""
    value = trace[name].value
    if value is None or value.size > VALUES_MAX:
        return None
    import numpy as np

    if value.dtype == np.bool_:
        return value.tolist()  # type: ignore[no-any-return]
    rounded = np.round(value.astype(np.float64), 4).astype(object)
    rounded[~np.isfinite(value)] = None  # -inf of a masked score: JSON has no infinity
    return rounded.tolist()  # type: ignore[no-any-return]
