"""Shape checks for scripts and CI: expectations (``scores=h,S,S``), golden traces, TOML specs.

Pure logic: parse, trace, compare, and return :class:`CaseResult` records. Printing them is
:mod:`attntrace.render.check_view`'s job, exit codes the CLI's.

>>> from attntrace import AttentionConfig, trace_attention
>>> trace = trace_attention(AttentionConfig(seq=3, hidden=768, heads=12), "shape")
>>> expected = [parse_expectation("scores=h,S,S"), parse_expectation("output=3x768")]
>>> check_expectations(trace, expected)
()
>>> check_expectations(trace, [parse_expectation("scores=(12, 3, 4)")])[0].actual
'(12, 3, 3) (h, S, S)'
"""

from __future__ import annotations

import contextlib
import functools
import math
import os
import re
import stat
import sys
import tomllib
import typing
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any, Generic, TypeVar

from attntrace.config.attention_config import AttentionConfig, parse_scale
from attntrace.errors import AttntraceError, ConfigError, InputFileError
from attntrace.files.guard import MAX_DEPTH, nesting_depth, parse_json, read_text
from attntrace.text import plain
from attntrace.trace import (
    SCHEMA_ID,
    SCHEMA_ID_2,
    SCHEMA_ID_3,
    Records,
    Shape,
    Step,
    Trace,
    UnknownStepError,
)
from attntrace.units import Dim, bounded, format_bytes, format_shape, parse_shape, quoted

T = TypeVar("T")

#: The schema of ``attntrace trace --format json``: a golden for ``check --trace``.
CAPTURE_SCHEMA_ID = "attntrace.capture/2"
#: Every version of it a golden may have been saved with (/2 added ``kernels``).
CAPTURE_SCHEMA_IDS = ("attntrace.capture/1", CAPTURE_SCHEMA_ID)


@dataclass(frozen=True)
class Expectation:
    """``STEP=SHAPE``: the step called ``step`` must have the shape ``dims``.

    >>> e = parse_expectation("scores=B,h,S,S")
    >>> e.step, e.dims, e.resolve({"B": 2, "h": 12, "S": 3})
    ('scores', ('B', 'h', 'S', 'S'), (2, 12, 3, 3))
    """

    step: str
    dims: tuple[Dim, ...]

    @property
    def text(self) -> str:
        """The shape as written with commas, e.g. ``h,S,S`` or ``12,3,3``."""
        return ",".join(str(d) for d in self.dims)

    def resolve(self, sizes: Mapping[str, int]) -> Shape:
        """The shape in numbers; axis letters, and products of them such as ``g·d``, take their
        size from ``sizes``.

        >>> parse_expectation("k_proj=S,g*d").resolve({"S": 3, "g": 8, "d": 128})
        (3, 1024)
        >>> parse_expectation("scores=h,1,N+1").resolve({"N": 4096, "h": 32})
        (32, 1, 4097)
        """
        return tuple(d if isinstance(d, int) else self._sum(d, sizes) for d in self.dims)

    def _sum(self, dim: str, sizes: Mapping[str, int]) -> int:
        """A sum or difference of products of axes (``N+1``, ``W-1+S``, ``g·d``)."""
        return sum(
            (-1 if sign == "-" else 1) * math.prod(self._size(f, sizes) for f in term.split("·"))
            for sign, term in re.findall(r"([+-]?)([^+-]+)", dim)
        )

    def _size(self, factor: str, sizes: Mapping[str, int]) -> int:
        """The size of one factor: a number, an axis letter, or a rank's share of one.

        >>> parse_expectation("q=h/T,S/2C").resolve({"h": 8, "T": 4, "S": 16, "C": 2})
        (2, 4)
        """
        if factor.isdigit():
            return int(factor)
        if "/" in factor:  # a rank's share (--tp, --cp): h/T, S/2C, S/CT
            top, under = factor.split("/", 1)
            digits = under[: len(under) - len(under.lstrip("0123456789"))]
            parts = int(digits or 1) * math.prod(self._size(c, sizes) for c in under[len(digits) :])
            return self._size(top, sizes) // parts
        if factor not in sizes:
            hint = _VARIANT_AXES.get(factor, "")
            raise ConfigError(
                f"unknown axis {factor!r} in {self.step}={self.text}; axes of this config: "
                f"{', '.join(f'{a}={n}' for a, n in sizes.items())}"
                + (f" ({factor} {hint})" if hint else "")
            )
        return sizes[factor]


#: Axis letters that exist only with their variant, and when.
_VARIANT_AXES = {
    "B": "only with --batch",
    "N": "only with --kv-seq or --past",
    "W": "only with --window and --past",
    "M": "only with --kv-hidden",
    "g": "only with --kv-heads below --heads",
    "Br": "only with --algorithm flash",
    "Bc": "only with --algorithm flash",
}


@dataclass(frozen=True)
class Mismatch:
    """One check that failed: what was checked, what was expected, what the trace has.

    ``subject`` names the check it belongs to (one golden step can differ in shape and dtype).
    """

    what: str
    expected: str
    actual: str
    subject: str = ""


@dataclass(frozen=True)
class CaseResult:
    """The checks of one config: how many were made and the ones that failed.

    ``checks`` names every check made (``expect scores=h,S,S``, ``step x``, ``param w_q``); a
    config that could not be checked at all has an ``error`` instead. ``lines`` maps a check's
    name (and ``""``, the config itself) to its line in the spec file.
    """

    name: str
    checked: int
    mismatches: tuple[Mismatch, ...]
    notes: tuple[str, ...] = ()  # context for the reader, e.g. how the golden's config differs
    checks: tuple[str, ...] = ()
    error: str = ""
    lines: Mapping[str, int] = field(default_factory=dict)
    #: check --trace: the step of your code each check read, (variable, ``file:line``)
    targets: Mapping[str, tuple[str, str]] = field(default_factory=dict)

    def target(self, check: str) -> str:
        """The step of your code ``check`` read, ``q_2 (nanogpt.py:18)``, or ""."""
        name, location = self.targets.get(check, ("", ""))
        return f"{name} ({location})" if location else name

    @property
    def ok(self) -> bool:
        return not self.mismatches and not self.error

    @property
    def failed(self) -> int:
        """Number of checks that failed."""
        return len({m.subject or m.what for m in self.mismatches})

    @property
    def passed(self) -> tuple[str, ...]:
        """The names of the checks that held."""
        failed = {m.subject or m.what for m in self.mismatches}
        return tuple(c for c in self.checks if c not in failed)


#: The most digits a size of an expected shape may have: 2⁶³ has 19, and no tensor is larger.
MAX_DIM_DIGITS = 19


def _bounded_shape(text: str, where: str) -> tuple[Dim, ...]:
    """:func:`parse_shape` of ``text``, a number of more than :data:`MAX_DIM_DIGITS` digits
    refused first (Python itself refuses to read 4,300)."""
    if re.search(rf"\d{{{MAX_DIM_DIGITS + 1}}}", text):
        raise ConfigError(
            f"{where}: a size has more than {MAX_DIM_DIGITS} digits, larger than any tensor; "
            "write the shape's sizes as numbers up to 2**63 or axis letters"
        )
    return parse_shape(text)


def parse_expectation(text: str) -> Expectation:
    """``STEP=SHAPE`` as given to ``--expect``.

    >>> parse_expectation("q_heads = S,h,d")
    Expectation(step='q_heads', dims=('S', 'h', 'd'))
    """
    step, sep, shape = bounded(text, "--expect").partition("=")
    if not sep or not step.strip():
        raise ConfigError(
            f"cannot read --expect {quoted(text)}; write STEP=SHAPE, e.g. scores=12,3,3 or "
            "scores=h,S,S"
        )
    return Expectation(step.strip(), _bounded_shape(shape, f"--expect {plain(step.strip())}"))


def check_expectations(trace: Records, expectations: Iterable[Expectation]) -> tuple[Mismatch, ...]:
    """The expectations that ``trace`` does not meet; an unknown step name raises.

    In a capture of your code (``check --trace``) a reference step name means the step playing
    that role and any other name your variable (see :func:`find_step`).
    """
    sizes = trace.axis_sizes()
    failed = []
    for e in expectations:
        step = find_step(trace, e.step)  # UnknownStepError lists the valid names
        expected = e.resolve(sizes)
        numbers = all(isinstance(d, int) for d in e.dims)
        written = str(expected) if numbers else f"{e.text} = {expected}"
        if step is None:
            failed.append(
                Mismatch(e.step, written, unplayed(trace, e.step), f"expect {e.step}={e.text}")
            )
        elif step.shape != expected:
            failed.append(
                Mismatch(
                    e.step,
                    written,
                    f"{step.shape} ({', '.join(step.axes)})",
                    f"expect {e.step}={e.text}",
                )
            )
    return tuple(failed)


#: ``--expect var:q=…`` checks the variable ``q`` of your code, though ``q`` is a reference step.
VARIABLE_PREFIX = "var:"


def reference_names() -> frozenset[str]:
    """Every step name of the reference, variants and flash included (``x`` … ``k_rep`` …).

    >>> {"q", "scores", "k_rep", "masked"} <= reference_names()
    True
    """
    from attntrace.engine.attention import STEP_NAMES, VARIANT_STEPS
    from attntrace.engine.flash import FLASH_MASK_STEPS, FLASH_STEPS

    variants = [name for _, steps in VARIANT_STEPS.values() for name in steps]
    return frozenset([*STEP_NAMES, *variants, *FLASH_STEPS, *FLASH_MASK_STEPS])


def is_capture(trace: Records) -> bool:
    """Whether ``trace`` records the user's code (steps with roles), not the reference."""
    return not isinstance(trace, Trace)


def find_step(trace: Records, name: str) -> Step | None:
    """The step that ``name`` checks.

    In a reference :class:`Trace`, the step called ``name``. In a capture of your code, a
    reference step name (``q``, ``scores``, ``k_rep`` …) means the step playing that role (None
    when no step does), ``var:NAME`` or any other name your variable ``NAME``; an unknown
    variable raises UnknownStepError.

    >>> from attntrace import AttentionConfig, trace_attention
    >>> find_step(trace_attention(AttentionConfig(), "shape"), "scores").shape
    (12, 3, 3)
    """
    variable = name.removeprefix(VARIABLE_PREFIX)
    if not is_capture(trace):
        if variable != name:
            raise ConfigError(
                f"{name!r} names a variable of your code; {VARIABLE_PREFIX} needs "
                f"--trace (the reference's steps are {', '.join(trace.names)})"
            )
        return trace[name]
    steps = trace.steps
    roles = [getattr(s, "role", "") for s in steps]
    if variable == name and (name in reference_names() or name in roles):
        return next((s for s, r in zip(steps, roles, strict=True) if r == name), None)
    found = next((s for s in steps if s.name == variable), None)
    if found is None:
        played = ", ".join(r for r in roles if r) or "none"
        raise ConfigError(
            f"unknown step {name!r}; give a reference step (the step playing it: "
            f"{played}) or a variable of your code ({', '.join(trace.names)})"
        )
    return found


def unplayed(trace: Records, role: str) -> str:
    """The actual side of a check of a role no step of the user's code plays."""
    played = ", ".join(r for s in trace.steps if (r := getattr(s, "role", "")))
    same = next((s for s in trace.steps if s.name == role), None)
    hint = (
        f"; your variable {role} is at {where(same)[1]}: to check it write {VARIABLE_PREFIX}{role}"
        if same is not None
        else ""
    )
    return f"no step plays {role} (roles found: {played or 'none'}){hint}"


def where(step: Step) -> tuple[str, str]:
    """The step of the user's code a check read: its name and ``file:line`` (``input`` for x;
    "" in the reference).

    >>> from attntrace.trace import Step
    >>> where(Step("scores", (3, 3), "float32"))
    ('scores', '')
    """
    return step.name, str(getattr(step, "location", ""))


def check_trace(
    trace: Records,
    expectations: Sequence[Expectation],
    golden: Mapping[str, Any] | None = None,
    name: str = "",
) -> CaseResult:
    """Every expectation and (if given) the golden document, against ``trace``.

    For a capture of your code (``check --trace``) ``targets`` says which step each check read;
    a reference golden (``attntrace run --format json``) is then compared step by role.
    """
    mismatches = check_expectations(trace, expectations)
    checks = [f"expect {e.step}={e.text}" for e in expectations]
    targets: dict[str, tuple[str, str]] = {}
    if is_capture(trace):
        for e, check in zip(expectations, checks, strict=True):
            if (step := find_step(trace, e.step)) is not None:
                targets[check] = where(step)
    notes: tuple[str, ...] = ()
    if golden is not None:
        golden_fits(golden, trace)
        if is_capture(trace) and golden["schema"] in (SCHEMA_ID, SCHEMA_ID_2):
            found, golden_checks, golden_targets, notes = compare_roles(trace, golden)
            mismatches += found
            checks += golden_checks
            targets |= golden_targets
        else:
            mismatches += compare_golden(trace, golden)
            steps = {r["name"]: None for r in golden["steps"]} | dict.fromkeys(trace.names)
            params = {r["name"]: None for r in golden["params"]} | {
                p.name: None for p in trace.parameters
            }
            checks += [f"step {n}" for n in steps] + [f"param {n}" for n in params]
            if is_capture(trace):
                targets |= {f"step {s.name}": where(s) for s in trace.steps}
            notes = config_notes(trace, golden) if isinstance(trace, Trace) else ()
    return CaseResult(
        name=name,
        checked=len(checks),
        mismatches=mismatches,
        notes=notes,
        checks=tuple(checks),
        targets=targets,
    )


def golden_fits(golden: Mapping[str, Any], trace: Records | None = None) -> None:
    """Raise ConfigError when a golden of your code (``attntrace trace --format json``) is
    checked against the reference rather than a ``--trace``.

    >>> golden_fits({"schema": "attntrace.capture/1"})  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    attntrace.errors.ConfigError: this golden is a trace of your code (attntrace.capture/1); ...
    """
    schema = golden.get("schema")
    if schema in CAPTURE_SCHEMA_IDS and (trace is None or not is_capture(trace)):
        raise ConfigError(f"this golden is a trace of your code ({schema}); add --trace TARGET")


def compare_roles(
    trace: Records, golden: Mapping[str, Any]
) -> tuple[tuple[Mismatch, ...], list[str], dict[str, tuple[str, str]], tuple[str, ...]]:
    """A reference golden against a capture of your code: each golden step against the step
    playing its role, by shape (dtypes and parameters are the code's own business).

    Returns the mismatches, the checks made, the step each check read and notes: the golden's
    steps no step of the code plays, and sizes that differ. None played at all raises.
    """
    mismatches, checks, not_played = [], [], []
    targets: dict[str, tuple[str, str]] = {}
    for record in golden["steps"]:
        step = find_step(trace, record["name"]) if record["name"] in reference_names() else None
        if step is None:
            not_played.append(record["name"])
            continue
        check = f"step {record['name']}"
        checks.append(check)
        targets[check] = where(step)
        if list(step.shape) != record["shape"]:
            mismatches.append(
                Mismatch(
                    f"{check} shape",
                    format_shape(record["shape"]),
                    f"{step.shape} ({', '.join(step.axes)})",
                    check,
                )
            )
    if not checks:
        raise ConfigError(
            "no step of your code plays a step of the golden; save one of your "
            "code with: attntrace trace TARGET --format json"
        )
    notes = (
        [f"not compared, no step of your code plays them: {', '.join(not_played)}"]
        if not_played
        else []
    )
    names = {r["name"] for r in golden["steps"]}
    extra = [r for s in trace.steps if (r := getattr(s, "role", "")) and r not in names]
    notes += [f"your code also plays steps the golden lacks: {', '.join(extra)}"] if extra else []
    notes += _size_notes(trace.axis_sizes(), golden["config"])
    return tuple(mismatches), checks, targets, tuple(notes)


#: The config keys of a reference golden and the axis letter each one sizes.
_SIZE_KEYS = {"batch": "B", "seq": "S", "hidden": "H", "heads": "h"}


def _size_notes(sizes: Mapping[str, int], config: Mapping[str, Any]) -> list[str]:
    diffs = [
        f"{key}={config[key]!r} (your code {axis}={sizes[axis]})"
        for key, axis in _SIZE_KEYS.items()
        if config.get(key) is not None and axis in sizes and config[key] != sizes[axis]
    ]
    return [f"the golden was made with {', '.join(diffs)}"] if diffs else []


# --- golden traces --------------------------------------------------------------------------


def load_golden(path: Path) -> dict[str, Any]:
    """A trace saved by ``attntrace run --format json``, checked for the keys a comparison reads."""
    text = read_text(path, what="golden file")
    try:
        doc = parse_json(text, f"golden file {plain(path)}")
    except InputFileError as exc:
        raise InputFileError(
            f"{exc}; save a golden with: attntrace run --format json > {plain(path)}"
        ) from None
    try:
        validate_golden(doc)
    except ConfigError as exc:
        raise InputFileError(f"{path}: not an attntrace trace: {exc}") from None
    return typing.cast(dict[str, Any], doc)


def validate_golden(doc: object) -> None:
    """Raise ConfigError naming the first key that a golden comparison cannot read.

    >>> step = {"name": "x", "shape": "3x4", "dtype": "float32"}
    >>> golden = {"schema": "attntrace.trace/1", "config": {}, "steps": [step], "params": []}
    >>> validate_golden(golden)
    Traceback (most recent call last):
    ...
    attntrace.errors.ConfigError: steps[0].shape must be a list of whole numbers, got '3x4'
    """
    if not isinstance(doc, dict):
        raise ConfigError(f"the document must be a JSON object, got {type(doc).__name__}")
    if doc.get("schema") not in (SCHEMA_ID, SCHEMA_ID_2, SCHEMA_ID_3, *CAPTURE_SCHEMA_IDS):
        raise ConfigError(f'"schema" must be {SCHEMA_ID!r}, got {_short(doc.get("schema"))}')
    if not isinstance(doc.get("config"), dict):
        raise ConfigError('"config" must be an object')
    for key in ("steps", "params"):
        records = doc.get(key)
        if not isinstance(records, list):
            raise ConfigError(f'"{key}" must be a list, got {type(records).__name__}')
        if len(records) > MAX_GOLDEN_RECORDS:
            raise ConfigError(
                f'"{key}" lists {len(records)} records; the most a golden may list is '
                f"{MAX_GOLDEN_RECORDS} (MAX_GOLDEN_RECORDS)"
            )
        for i, record in enumerate(records):
            _validate_record(record, f"{key}[{i}]")


def _validate_record(record: object, where: str) -> None:
    if not isinstance(record, dict):
        raise ConfigError(f"{where} must be an object")
    for key in ("name", "dtype"):
        if not isinstance(record.get(key), str):
            raise ConfigError(f"{where}.{key} must be a string, got {_short(record.get(key))}")
    shape = record.get("shape")
    if not isinstance(shape, list) or any(
        isinstance(n, bool) or not isinstance(n, int) for n in shape
    ):
        raise ConfigError(f"{where}.shape must be a list of whole numbers, got {_short(shape)}")


def compare_golden(trace: Records, golden: Mapping[str, Any]) -> tuple[Mismatch, ...]:
    """Differences in the shapes and dtypes of steps and parameters (values are not compared)."""
    actual_steps = {s.name: (list(s.shape), s.dtype) for s in trace.steps}
    actual_params = {p.name: (list(p.shape), p.dtype) for p in trace.parameters}
    return (
        *_compare("step", golden["steps"], actual_steps),
        *_compare("param", golden["params"], actual_params),
    )


def _compare(
    kind: str, golden: list[dict[str, Any]], actual: Mapping[str, tuple[list[int], str]]
) -> list[Mismatch]:
    expected = {r["name"]: (r["shape"], r["dtype"]) for r in golden}
    out = []
    for name in [*expected, *(n for n in actual if n not in expected)]:
        if name not in actual or name not in expected:
            out.append(
                Mismatch(
                    f"{kind} {name}",
                    "present" if name in expected else "absent",
                    "present" if name in actual else "missing",
                    f"{kind} {name}",
                )
            )
            continue
        (g_shape, g_dtype), (a_shape, a_dtype) = expected[name], actual[name]
        if g_shape != a_shape:
            out.append(
                Mismatch(
                    f"{kind} {name} shape",
                    format_shape(g_shape),
                    format_shape(a_shape),
                    f"{kind} {name}",
                )
            )
        if g_dtype != a_dtype:
            out.append(Mismatch(f"{kind} {name} dtype", g_dtype, a_dtype, f"{kind} {name}"))
    return out


def config_notes(trace: Trace, golden: Mapping[str, Any]) -> tuple[str, ...]:
    """How the golden's config differs from the traced one (the usual cause of a failure)."""
    mine = trace.config.to_dict()
    theirs = golden["config"]
    diffs = [
        f"{k}={theirs[k]!r} (now {mine[k]!r})" for k in mine if k in theirs and theirs[k] != mine[k]
    ]
    return (f"the golden was made with {', '.join(diffs)}",) if diffs else ()


# --- TOML specs -----------------------------------------------------------------------------


@dataclass(frozen=True)
class SpecCase:
    """One config of a spec file, with its expectations and optional golden file."""

    name: str
    config: AttentionConfig
    backend: str
    expectations: tuple[Expectation, ...]
    golden: Path | None = None
    origin: str = ""  # where it was written, for error messages: "shapes.toml: [config.bert]"
    # why it cannot be checked (load_spec(keep_going=True)); config is then a default
    error: str = ""
    lines: Mapping[str, int] = field(default_factory=dict)  # see CaseResult.lines


#: The largest spec file read (bytes): a spec of a thousand configs takes about 100 KiB.
SPEC_LIMIT = 1024**2
#: The most configs a spec may have; each one is traced.
MAX_SPEC_CONFIGS = 4096
#: The most steps (and the most params) a golden may list: a trace has about 30 steps, a
#: capture of a whole model a few thousand.
MAX_GOLDEN_RECORDS = 20_000

#: Keys of a spec config that are not AttentionConfig fields.
SPEC_KEYS = ("backend", "expect", "golden", "preset", "hf_config", "head_dim")
#: Keys that name where the sizes come from (as --preset and --hf-config).
_BASE_KEYS = ("preset", "hf_config")


def load_spec(path: Path, backend: str = "shape", *, keep_going: bool = False) -> list[SpecCase]:
    """The configs of a spec file (format in docs/scripting.md); ``backend`` is the default.

    A config table's keys override its ``preset`` (or ``hf_config``), which overrides the
    ``[defaults]`` table, which overrides the defaults' own preset. Any problem raises
    InputFileError naming the file and the config; with ``keep_going`` a bad config comes back
    as a SpecCase whose ``error`` says why (the file itself must still be a spec).
    """
    too_deep = InputFileError(
        f"{plain(path)}: nests tables or arrays deeper than {MAX_DEPTH} levels; fix the file"
    )
    text = read_text(path, SPEC_LIMIT, what="spec file")
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise InputFileError(f"{plain(path)}: not valid TOML ({plain(exc)})") from None
    except RecursionError:
        raise too_deep from None
    except ValueError:  # an integer of more than sys.get_int_max_str_digits() digits
        raise InputFileError(
            f"{plain(path)}: holds an integer of more than "
            f"{sys.get_int_max_str_digits()} digits; fix the file"
        ) from None
    if nesting_depth(doc) > MAX_DEPTH:
        raise too_deep
    unknown = set(doc) - {"defaults", "config"}
    configs, defaults = doc.get("config"), doc.get("defaults", {})
    if unknown or not isinstance(configs, dict) or not configs or not isinstance(defaults, dict):
        raise InputFileError(
            f"{path}: a spec has [config.NAME] tables (at least one) and optionally a [defaults] "
            "table" + (f"; unknown top-level keys: {', '.join(sorted(unknown))}" if unknown else "")
        )
    if len(configs) > MAX_SPEC_CONFIGS:
        raise InputFileError(
            f"{plain(path)}: has {len(configs)} configs; the most a spec may have is "
            f"{MAX_SPEC_CONFIGS} (MAX_SPEC_CONFIGS); split it into several specs"
        )
    _check_named_files(path, [defaults, *configs.values()])
    lines = spec_lines(text)
    cases = []
    hf_config = ReadOnce(_read_hf_config)
    for name, table in configs.items():
        try:
            case = _spec_case(path, name, {"backend": backend, **defaults}, table, hf_config)
        except InputFileError as exc:
            if not keep_going:
                raise
            case = SpecCase(
                name,
                AttentionConfig(),
                backend,
                (),
                origin=f"{path}: [config.{name}]",
                error=str(exc),
            )
        cases.append(replace(case, lines=_case_lines(lines, name, case.expectations)))
    return cases


def spec_lines(text: str) -> dict[str, int]:
    """1-based line of every table and key of a TOML spec: ``config.a``, ``config.a.expect.scores``
    (keys of inline tables too), for pointing CI annotations at them.

    >>> spec_lines('[config.a]\\nseq = 3\\nexpect = { scores = "h,S,S" }\\n')[
    ...     "config.a.expect.scores"]
    3
    """
    out: dict[str, int] = {}
    table = ""
    for number, line in enumerate(text.splitlines(), start=1):
        if (header := _table_header(line)) is not None:
            table = header
            out.setdefault(table, number)
        elif key := _KEY.match(line):
            out.setdefault(f"{table}.{key.group(1)}", number)
            for inner in _INNER_KEY.finditer(key.group(2) or ""):
                out.setdefault(f"{table}.{key.group(1)}.{inner.group(1)}", number)
    return out


#: A key at the start of a spec line, and the keys of an inline table (no backtracking: each
#: line is read in time linear in its length).
_KEY = re.compile(r'\s*+"?([\w.-]++)"?\s*+=\s*+(\{.*)?')
_INNER_KEY = re.compile(r'[{,]\s*+"?([\w.-]++)"?\s*+=')


def _table_header(line: str) -> str | None:
    """The table a ``[name]`` or ``[[name]]`` line opens (quotes and spaces dropped), read
    by ``find``, not by a pattern: a line of 10⁶ brackets and spaces takes a moment.

    >>> _table_header('  [config."a b"]  # c'), _table_header("seq = [1]"), _table_header("[ ]")
    ('config.ab', None, None)
    """
    body = line.lstrip()
    if not body.startswith("["):
        return None
    body = body.lstrip("[")
    end = body.find("]")
    name = body[:end].strip() if end >= 0 else ""
    return name.replace('"', "").replace(" ", "") if name else None


def _case_lines(
    lines: Mapping[str, int], name: str, expectations: Sequence[Expectation]
) -> dict[str, int]:
    """The spec lines of a config and of each of its expectations (0: not found)."""
    where = lines.get(f"config.{name}", 0)
    out = {"": where}
    for e in expectations:
        out[f"expect {e.step}={e.text}"] = lines.get(f"config.{name}.expect.{e.step}", where)
    return out


#: The most bytes the files a spec names (``hf_config``, ``golden``) may hold together, each
#: file counted once (each is read once, and kept while the spec is checked).
MAX_SPEC_FILE_BYTES = 128 * 2**20


class ReadOnce(Generic[T]):
    """``read`` of each file once: its result, or its error, kept by the file's real path (a
    spec of 4,096 configs naming one 14 MiB ``hf_config`` reads it once, not 4,096 times).

    >>> import json, tempfile, pathlib
    >>> f = pathlib.Path(tempfile.mkdtemp()) / "a.json"
    >>> _ = f.write_text("{}")
    >>> reads = ReadOnce(lambda p: json.loads(p.read_text()))
    >>> reads(f) is reads(f.parent / "." / "a.json")
    True
    """

    def __init__(self, read: Callable[[Path], T]) -> None:
        self._read = read
        self._done: dict[str, T | AttntraceError] = {}

    def __call__(self, path: Path) -> T:
        key = os.path.realpath(path)
        if key not in self._done:
            try:
                self._done[key] = self._read(path)
            except AttntraceError as exc:
                self._done[key] = exc
        done = self._done[key]
        if isinstance(done, AttntraceError):
            raise done.with_traceback(None)
        return done


def _read_hf_config(path: Path) -> dict[str, Any]:
    from attntrace.config.presets import read_hf_config

    return read_hf_config(path)


def _check_named_files(path: Path, tables: Sequence[object]) -> None:
    """Refuse a spec whose named files (``hf_config``, ``golden``), each counted once, hold
    more than :data:`MAX_SPEC_FILE_BYTES` together, from their sizes, before any is read."""
    named = {
        os.path.realpath(path.parent / value)
        for table in tables
        if isinstance(table, dict)
        for value in (table.get("hf_config"), table.get("golden"))
        if isinstance(value, str) and value
    }
    total = 0
    for name in named:
        with contextlib.suppress(OSError, ValueError):  # missing: its own error, when read
            st = os.stat(name)
            total += st.st_size if stat.S_ISREG(st.st_mode) else 0
    if total > MAX_SPEC_FILE_BYTES:
        raise InputFileError(
            f"{plain(path)}: names {len(named)} files (hf_config, golden) of "
            f"{format_bytes(total)} together; the most a spec may read is "
            f"{format_bytes(MAX_SPEC_FILE_BYTES)} (MAX_SPEC_FILE_BYTES); split it"
        )


def _spec_case(
    path: Path,
    name: str,
    defaults: Mapping[str, object],
    table: object,
    hf_config: Callable[[Path], dict[str, Any]],
) -> SpecCase:
    where = f"{path}: [config.{name}]"
    if not isinstance(table, dict):
        raise InputFileError(f"{where} must be a table of sizes and expectations")
    try:
        merged = {**defaults, **table}
        expect = merged.get("expect", {})
        if not isinstance(expect, dict):
            raise ConfigError(
                '"expect" must be a table of STEP = "SHAPE" entries, e.g. scores = "h,S,S"'
            )
        expectations = tuple(
            Expectation(step, _spec_shape(step, value)) for step, value in expect.items()
        )
        backend, golden = merged["backend"], merged.get("golden")
        if not isinstance(backend, str) or not (golden is None or isinstance(golden, str)):
            raise ConfigError('"backend" and "golden" must be strings')
        golden_path = path.parent / golden if golden else None
        config = AttentionConfig(**_layered_fields(path, hf_config, defaults, table))
        return SpecCase(
            name=name,
            config=config,
            backend=backend,
            expectations=expectations,
            golden=golden_path,
            origin=where,
        )
    except ConfigError as exc:
        raise InputFileError(f"{where}: {exc}") from None


def _layered_fields(
    path: Path, read_hf_config: Callable[[Path], dict[str, Any]], *layers: Mapping[str, object]
) -> dict[str, Any]:
    """AttentionConfig fields of the layers, lowest first, each one's preset below its own keys."""
    from attntrace.config.presets import get_preset

    out: dict[str, Any] = {}
    for layer in layers:
        preset, hf_config = (layer.get(k) for k in _BASE_KEYS)
        if preset is not None and hf_config is not None:
            raise ConfigError("use either preset or hf_config, not both")
        if not all(v is None or isinstance(v, str) for v in (preset, hf_config)):
            raise ConfigError('"preset" and "hf_config" must be strings')
        if isinstance(preset, str):
            out.update(get_preset(preset).config_fields())
        if isinstance(hf_config, str):
            out.update(read_hf_config(path.parent / hf_config))
        out.update(_config_fields(layer))
    return out


def _config_fields(table: Mapping[str, object]) -> dict[str, Any]:
    """The AttentionConfig fields of a spec table, type-checked; unknown keys raise.

    ``head_dim`` is ``head_dim_override`` (as ``--head-dim``), and ``scale`` may be ``"sqrt"``
    or ``"none"`` as well as a number (as ``--scale``).
    """
    hints, names = _config_hints()
    unknown = [k for k in table if k not in names and k not in SPEC_KEYS]
    if unknown:
        raise ConfigError(
            f"unknown key {unknown[0]!r}; valid keys: {', '.join([*names, *SPEC_KEYS])}"
        )
    if "head_dim" in table and "head_dim_override" in table:
        raise ConfigError("use either head_dim or head_dim_override, not both")
    aliased = {("head_dim_override" if k == "head_dim" else k): v for k, v in table.items()}
    out = {k: v for k, v in aliased.items() if k in names}
    scale = out.get("scale")
    if isinstance(scale, str):
        out["scale"] = parse_scale(scale)
    for key, value in out.items():
        if value is not None and not _is_instance(value, hints[key]):
            raise ConfigError(f"{key} must be {_type_name(hints[key])}, got {value!r}")
    return out


@functools.cache
def _config_hints() -> tuple[dict[str, Any], list[str]]:
    """AttentionConfig's field types and names, read once (not once for each spec table)."""
    return typing.get_type_hints(AttentionConfig), [f.name for f in fields(AttentionConfig)]


def _is_instance(value: object, hint: Any) -> bool:
    if isinstance(value, bool) and hint is not bool and bool not in typing.get_args(hint):
        return False  # TOML true is not a size
    if (
        isinstance(value, int)
        and not isinstance(value, bool)
        and float in (hint, *typing.get_args(hint))
    ):
        return True  # rope_base = 500000 is a number too
    try:
        return isinstance(value, hint)
    except TypeError:  # a generic hint like tuple[int, ...]: AttentionConfig checks it
        return True


def _type_name(hint: Any) -> str:
    names = {int: "a whole number", str: "a string", bool: "true or false", float: "a number"}
    args = [a for a in typing.get_args(hint) if a is not type(None)] or [hint]
    return " or ".join(names.get(a, getattr(a, "__name__", str(a))) for a in args)


def _spec_shape(step: str, value: object) -> tuple[Dim, ...]:
    where = f"expect.{plain(step)}"
    if isinstance(value, str):
        return _bounded_shape(value, where)
    if isinstance(value, list) and all(
        isinstance(d, int | str) and not isinstance(d, bool) for d in value
    ):
        if any(isinstance(d, int) and abs(d) >= 10**MAX_DIM_DIGITS for d in value):
            return _bounded_shape("9" * (MAX_DIM_DIGITS + 1), where)  # the same refusal
        return _bounded_shape(",".join(str(d) for d in value), where)
    raise ConfigError(f'{where} must be a shape like "h,S,S" or [12, 3, 3], got {_short(value)}')


def _short(value: object) -> str:
    """A value of a user's file for an error message: terminal-safe, at most 60 characters."""
    if isinstance(value, int) and abs(value) >= 10**30:
        return "a huge number"
    text = plain(repr(value)) if not isinstance(value, list | dict) or len(value) < 50 else "…"
    return text if len(text) <= 60 else text[:57] + "..."


def run_spec(
    cases: Sequence[SpecCase], max_memory: int | None = None, *, keep_going: bool = False
) -> list[CaseResult]:
    """Trace every case and check it; unknown steps or axes raise, naming the case (with
    ``keep_going`` they make that case's result an error and the others are still checked)."""
    check_spec_work(cases)
    results = []
    golden = ReadOnce(load_golden)
    for case in cases:
        try:
            if case.error:
                raise InputFileError(case.error)
            results.append(replace(_run_case(case, max_memory, golden), lines=case.lines))
        except InputFileError as exc:
            if not keep_going:
                raise
            results.append(CaseResult(case.name, 0, (), error=str(exc), lines=case.lines))
    return results


#: The most arithmetic a spec's configs on compute backends run together (as sweep's
#: MAX_COMPUTE_FLOPS: seconds of numpy, not hours).
MAX_SPEC_FLOPS = 2 * 10**11


def check_spec_work(cases: Sequence[SpecCase]) -> None:
    """Refuse a spec whose configs on a compute backend add up to more than
    :data:`MAX_SPEC_FLOPS`, from their shapes alone, before any of them is computed."""
    from attntrace.engine.attention import trace_attention

    total = 0
    for case in cases:
        if case.backend == "shape" or case.error:
            continue
        try:
            total += trace_attention(case.config, "shape").total_flops
        except ConfigError:
            continue  # the case's own error, when it runs
        if total > MAX_SPEC_FLOPS:
            raise InputFileError(
                f"the spec's configs on compute backends run more than {MAX_SPEC_FLOPS:.0e} "
                f"FLOPs together (at {case.name}: {total:.2e}); check them with backend = "
                '"shape" (the same shapes at once) or split the spec'
            )


def _run_case(
    case: SpecCase, max_memory: int | None, read_golden: Callable[[Path], dict[str, Any]]
) -> CaseResult:
    from attntrace.engine.attention import trace_attention

    golden = read_golden(case.golden) if case.golden else None
    if golden is not None and golden["schema"] in CAPTURE_SCHEMA_IDS:
        raise InputFileError(
            f"{case.origin or case.name}: golden {plain(case.golden)} is a "
            "trace of your code; a spec's golden is saved by: "
            "attntrace run --format json"
        )
    try:
        trace = trace_attention(case.config, case.backend, max_memory=max_memory, keep_values=False)
        return check_trace(trace, case.expectations, golden, case.name)
    except (UnknownStepError, ConfigError) as exc:
        raise InputFileError(f"{case.origin or case.name}: {exc}") from None


def summary(results: Sequence[CaseResult]) -> str:
    """``N passed, M failed`` over the configs.

    >>> summary([CaseResult("a", 2, ()), CaseResult("b", 1, (Mismatch("x", "(1,)", "(2,)"),))])
    '1 passed, 1 failed'
    """
    failed = sum(not r.ok and not r.error for r in results)
    errors = sum(bool(r.error) for r in results)
    return f"{len(results) - failed - errors} passed, {failed} failed" + (
        f", {errors} error{'s' * (errors > 1)}" if errors else ""
    )


__all__ = [
    "VARIABLE_PREFIX",
    "CaseResult",
    "Expectation",
    "Mismatch",
    "SpecCase",
    "check_expectations",
    "check_trace",
    "compare_golden",
    "compare_roles",
    "find_step",
    "golden_fits",
    "is_capture",
    "load_golden",
    "load_spec",
    "parse_expectation",
    "reference_names",
    "run_spec",
    "spec_lines",
    "summary",
    "validate_golden",
    "where",
]
