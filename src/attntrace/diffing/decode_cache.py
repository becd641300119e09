"""``diff --past N`` beyond the output: the cache the user's decode step returns, set against the
reference's cache after the append ``k_all``, ``v_all`` (B, g, N+S, d), and the cache appended on
the wrong axis, named where the code then raises.

- A step that returns the cache it was given (GPT-2's ``present`` made before the ``cat``, or
  ``layer_past`` returned as it came) attends right but its next step misses the new tokens: the
  cache not updated, named at the line that made the stale value (or the ``return``).
- ``torch.cat((past_key, k), dim=-1)``: the cache and the new keys joined on another axis than
  the sequence. With N ≠ S the ``cat`` raises; with N = S the next matmul does. The ``cat`` is
  seen as it runs (a ``TorchFunctionMode``), so either error is named at the ``cat``'s line.
"""

from __future__ import annotations

import dataclasses
import functools
import linecache
import math
import os
import sys
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from attntrace.capturing.source import assigned_lines
from attntrace.diffing.decode import FIX_AXIS, Step, wrong_axis_name

if TYPE_CHECKING:
    import numpy as np

    from attntrace.config.attention_config import AttentionConfig
    from attntrace.diffing.align import Row
    from attntrace.diffing.layer import Layer
    from attntrace.diffing.user_side import UserCodeError

#: The names of the axes of a (B, g, N, d) cache, by dim.
AXES = ("batch", "heads", "sequence", "head dim")

FIX_UPDATE = (
    "return the cache after the append: present = (k, v) made after "
    "k = torch.cat((past_key, k), dim=-2) and v = torch.cat((past_value, v), dim=-2)"
)
#: key -> (name, the reference step it shows at), by the state of (k, v) returned.
NOT_UPDATED = {
    ("stale", "stale"): (
        "decode-cache-not-updated",
        "the cache not updated: the step returns the cache it was given, without the new tokens",
        "k_all",
    ),
    ("ok", "stale"): (
        "decode-v-cache-not-updated",
        "the v cache not updated: the step returns the new keys but the values it was given",
        "v_all",
    ),
    ("stale", "ok"): (
        "decode-k-cache-not-updated",
        "the k cache not updated: the step returns the new values but the keys it was given",
        "k_all",
    ),
    ("new", "new"): (
        "decode-cache-new-only",
        "the cache holds only the new tokens: the step returns (k, v) made before the append",
        "k_all",
    ),
    ("side", "side"): (
        "decode-wrong-axis",
        "new keys and values appended on the wrong axis (dim=-1, the head dim, not -2, the "
        "sequence)",
        "k_all",
    ),
}


@dataclasses.dataclass(frozen=True)
class WrongCat:
    """A ``cat`` of the given cache on another axis than the sequence, where the user wrote it."""

    what: str  # "keys" or "values"
    dim: int  # as written
    axis: str  # the name of the axis it joins on
    location: str
    source: str

    @property
    def name(self) -> str:
        return wrong_axis_name(self.what, self.dim, self.axis)

    @property
    def step(self) -> str:
        return "k_all" if self.what == "keys" else "v_all"


def wrong_axis(layer: Layer, cfg: AttentionConfig, tensors: Mapping[str, Any]) -> WrongCat | None:
    """The decode step of ``layer`` run again on x (outside the capture), its ``cat`` calls
    watched: the first that joins the cache on another axis than the sequence when the run
    raises, else None (the error is the user's own)."""
    import numpy as np
    import torch

    entry = layer.decode_step
    if entry is None or entry[1] is None:
        return None
    x = torch.from_numpy(np.asarray(tensors["x"]).astype(cfg.dtype))
    given: list[Any] = []
    watch = watch_cat(given)
    try:
        with torch.no_grad(), watch:
            entry[0](x, given)
    except Exception:
        return watch.wrong  # type: ignore[no-any-return]
    return None


def watch_cat(given: list[Any]) -> Any:
    """A torch function mode that notes the first ``cat`` of a tensor of ``given`` (the cache
    handed to the code, (B, g, N, d); filled once the step starts) on another axis than the
    sequence (``.wrong``)."""
    return _watch_class()(given)


@functools.cache
def _watch_class() -> type:
    import torch
    from torch.overrides import TorchFunctionMode

    cats = (torch.cat, torch.concat, torch.concatenate)

    class WatchCat(TorchFunctionMode):
        def __init__(self, given: list[Any]) -> None:
            super().__init__()
            self.given = given
            self.wrong: WrongCat | None = None

        def __torch_function__(
            self, func: Any, types: Any, args: Any = (), kwargs: Any = None
        ) -> Any:
            kwargs = kwargs or {}
            if func in cats and self.wrong is None and args:
                self.wrong = _wrong_cat(self.given, args[0], kwargs.get("dim", args[1:2] or 0))
            return func(*args, **kwargs)

    return WatchCat


def _wrong_cat(given: list[Any], operands: Any, dim: Any) -> WrongCat | None:
    if isinstance(dim, list | tuple):
        dim = dim[0] if dim else 0
    if not isinstance(dim, int) or not isinstance(operands, list | tuple) or len(operands) != 2:
        return None
    found = [
        i for i, c in enumerate(given) for t in operands if t is c or _same_storage(t, c)
    ]  # which of k_cache, v_cache is joined
    if not found:
        return None
    ndim = given[found[0]].ndim
    if ndim < 3 or dim % ndim == ndim - 2:
        return None  # the sequence axis: right
    axis = AXES[4 - ndim + dim % ndim] if ndim <= 4 else f"axis {dim % ndim}"
    location, source = _user_line()
    return WrongCat("keys" if found[0] == 0 else "values", dim, axis, location, source)


def _same_storage(t: Any, c: Any) -> bool:
    return bool(hasattr(t, "data_ptr") and t.shape == c.shape and t.data_ptr() == c.data_ptr())


def _user_line() -> tuple[str, str]:
    """``file:line`` and the source of the innermost frame of the user's code on the stack."""
    from attntrace.capturing.source import is_user_file

    frame = sys._getframe(1)
    while frame is not None and not is_user_file(frame.f_code.co_filename):
        frame = frame.f_back  # type: ignore[assignment]
    if frame is None:
        return "", ""
    name = frame.f_code.co_filename
    source = linecache.getline(name, frame.f_lineno).strip()
    return f"{os.path.basename(name)}:{frame.f_lineno}", source


# --- the report ----------------------------------------------------------------------------


def stopped_fields(
    layer: Layer,
    cfg: AttentionConfig,
    tensors: Mapping[str, Any],
    x: np.ndarray,
    wrong: WrongCat,
    exc: UserCodeError,
) -> dict[str, Any]:
    """The fields of the :class:`~attntrace.diffing.diff_report.DiffReport` of a step that
    raised after a ``cat`` on the wrong axis (x: what the reference starts from, (B, S, H)):
    the steps it made before, the rest missing, the bug named at the ``cat``."""
    import numpy as np

    from attntrace.capturing.runner import user_message
    from attntrace.diffing.align import UserSteps, align
    from attntrace.diffing.diagnose import Diagnosis
    from attntrace.diffing.user_side import UserStep
    from attntrace.engine.attention import trace_attention
    from attntrace.tools.verify import tolerance

    dtype = np.dtype(cfg.dtype)
    cast = {k: None if v is None else np.asarray(v).astype(dtype) for k, v in tensors.items()}
    ref = trace_attention(cfg, "numpy", tensors={**cast, "x": x})
    tol = tolerance(cfg)
    user = UserSteps((UserStep(-1, "x", x, "(input)"), *exc.steps), tol)
    diagnosis = Diagnosis(
        step=wrong.step,
        bug="decode-wrong-axis",
        name=wrong.name,
        fix=FIX_AXIS,
        location=wrong.location,
        source=wrong.source,
        max_abs=math.nan,
        max_rel=math.nan,
    )
    cause = exc.__cause__
    return {
        "config": cfg,
        "target": layer.name,
        "weights": layer.weights.scheme if layer.weights else "the reference's, as fn(x, params)",
        "tolerance": tol,
        "rows": tuple(_stopped_row(r, wrong.step) for r in align(ref, user)),
        "diagnosis": diagnosis,
        "notes": (*layer.notes, f"the code raised {user_message(cause)}" if cause else "raised"),
    }


def _stopped_row(row: Row, step: str) -> Row:
    """The row of ``step`` differs (nothing holds it); the cache handed in is not seen when no
    later step shows it (the step stopped)."""
    from attntrace.diffing.align import DIFFERS, NOT_SEEN, Row

    if row.step.name == step:
        return Row(row.step, DIFFERS)
    if row.step.name in ("k_cache", "v_cache") and row.status == DIFFERS and row.user is None:
        return Row(row.step, NOT_SEEN)
    return row


def check_cache(report: Any, layer: Layer, tensors: Mapping[str, Any]) -> Any:
    """``report`` with the cache the step returns set against ``k_all``, ``v_all``: a note when
    it returns none, a named bug when it returns the cache it was given (or half of it)."""
    import numpy as np

    entry = layer.decode_step
    rows = {r.step.name: r for r in report.rows}
    if entry is None or "k_all" not in rows or "v_all" not in rows:
        return report
    cfg = report.config
    x = np.asarray(tensors["x"]).astype(cfg.dtype)
    made: dict[str, Any] = {}
    cache = _traced(*entry, x, made)
    if cache is None:
        note = "it returns no (k, v) cache: the cache after the step is not compared"
        return dataclasses.replace(report, notes=(*report.notes, note))
    from attntrace.diffing.user_side import _numpy

    got = [_numpy(t).astype(cfg.dtype) for t in cache]  # (B, g, N+S, d) each when right
    given = [np.asarray(tensors[n]).astype(cfg.dtype) for n in ("k_cache", "v_cache")]
    k_state = _state(got[0], rows["k_all"], given[0], report)
    states = (k_state, _state(got[1], rows["v_all"], given[1], report))
    if states == ("ok", "ok"):
        return report
    bug = NOT_UPDATED.get(states)
    return _named(report, bug, states, got, given, made)


def _traced(step: Step, code: Any, x: np.ndarray, made: dict[str, Any]) -> Any:
    """The cache ``step`` returns on x, with ``made`` filled by where it was made: the last
    assignment run to a local of the forward that holds it when it returns, else the
    ``return``; and that local's name."""
    import torch

    lines: list[int] = []
    ended: dict[str, Any] = {}

    def local(frame: Any, event: str, arg: Any) -> Any:
        if event == "line":
            lines.append(frame.f_lineno)
        elif event == "return":
            ended.update(line=frame.f_lineno, locals=dict(frame.f_locals), value=arg)
        return local

    def outer(frame: Any, event: str, arg: Any) -> Any:
        return local if frame.f_code is code else None

    old = sys.gettrace()
    if code is not None:
        sys.settrace(outer)
    try:
        with torch.no_grad():
            cache = step(torch.from_numpy(x.copy()), None)[1]
    finally:
        if code is not None:
            sys.settrace(old)
    if ended and cache is not None:
        made.update(_where_made(code, ended, lines, cache))
    return cache


def _where_made(
    code: Any, ended: Mapping[str, Any], lines: list[int], cache: tuple[Any, Any]
) -> dict[str, Any]:
    held = next(
        (
            item
            for item in reversed(_items(ended["value"]))
            if isinstance(item, tuple | list) and len(item) == 2 and item[0] is cache[0]
        ),
        None,
    )
    names = [n for n, v in ended["locals"].items() if held is not None and v is held]
    assigned = assigned_lines(code.co_filename)  # every assignment of the file, by name
    runs = [
        (i, line, n) for n in names for i, line in enumerate(lines) if line in assigned.get(n, ())
    ]
    line, var = max(runs)[1:] if runs else (ended["line"], names[-1] if names else None)
    filename = code.co_filename
    return {
        "location": f"{os.path.basename(filename)}:{line}",
        "source": linecache.getline(filename, line).strip(),
        "var": var,
    }


def _state(user: np.ndarray, row: Row, given: np.ndarray, report: Any) -> str:
    """ "ok" (the cache after the append, or the window's tail of it), "stale" (the cache given),
    "new" (the new tokens alone: the last S of the cache after the append) or "wrong"."""
    ref = row.step.value
    assert ref is not None
    if _holds(user, ref, row, report):
        return "ok"
    m, s = (user.shape[-2] if user.ndim >= 2 else 0), report.config.seq
    window = report.config.window is not None and 0 < m < ref.shape[-2]
    if window and _holds(user, ref[..., -m:, :], row, report):
        return "ok"  # a sliding window's cache: the last W-1 keys
    if _holds(user, given, row, report):
        return "stale"
    if s < ref.shape[-2] and _holds(user, ref[..., -s:, :], row, report):
        return "new"
    side = _side_by_side(given, ref, s)
    return "side" if side is not None and _holds(user, side, row, report) else "wrong"


def _side_by_side(given: np.ndarray, ref: np.ndarray, s: int) -> np.ndarray | None:
    """The cache and the new keys (the last S of ``ref``) joined on the head dim, read back as
    the sequence (B, g, N+S, d): only N = S allows it."""
    import numpy as np

    if given.shape[-2] != s or s == 0:
        return None
    return np.concatenate((given, ref[..., -s:, :]), axis=-1).reshape(ref.shape)


def _holds(user: np.ndarray, ref: np.ndarray, row: Row, report: Any) -> bool:
    from attntrace.diffing.match import agree

    found = agree(user, ref, row.step.axes, report.tolerance) if user.size == ref.size else None
    return found is not None and found.ok


def _named(
    report: Any,
    bug: tuple[str, str, str] | None,
    states: tuple[str, ...],
    got: list[np.ndarray],
    given: list[np.ndarray],
    made: Mapping[str, Any],
) -> Any:
    import numpy as np

    from attntrace.diffing.align import DIFFERS, Row
    from attntrace.diffing.diagnose import Diagnosis
    from attntrace.diffing.match import agree
    from attntrace.diffing.user_side import UserStep

    key, name, at = bug or (
        None,
        "the cache it returns is not the keys and values after the append "
        "(no known bug reproduces it)",
        "k_all" if states[0] != "ok" else "v_all",
    )
    location, source, var = made.get("location", ""), made.get("source", ""), made.get("var")
    if report.diagnosis is not None:  # the output differs too: that diagnosis stays first
        note = f"the cache it returns: {name}" + (f" at {location}" if location else "")
        return dataclasses.replace(report, notes=(*report.notes, note))
    by_step = {"k_all": 0, "v_all": 1}
    rows = []
    for row in report.rows:
        i = by_step.get(row.step.name)
        if i is None or states[i] == "ok" or row.step.value is None:
            rows.append(row)
            continue
        user = UserStep(10**6 + i, f"{var or 'returned cache'}[{i}]", got[i], location, source)
        rows.append(
            Row(
                row.step,
                DIFFERS,
                user,
                agree(got[i], row.step.value, row.step.axes, report.tolerance),
            )
        )
    i = by_step[at]
    shown = next(r for r in rows if r.step.name == at)
    numbers = shown.agreement
    s = report.config.seq
    ref = shown.step.value
    kept = {
        "stale": given[i],
        "new": None if ref is None else ref[..., -s:, :],
        "side": None if ref is None else _side_by_side(given[i], ref, s),
    }
    meant = kept.get(states[i])  # what the mistake returns, in the reference's layout
    stale = (
        np.abs(got[i].astype(np.float64) - meant).max()
        if meant is not None and got[i].shape == meant.shape
        else math.nan
    )
    diagnosis = Diagnosis(
        step=at,
        bug=key,
        name=name,
        fix=FIX_AXIS if key == "decode-wrong-axis" else FIX_UPDATE,
        location=location,
        source=source,
        max_abs=numbers.max_abs if numbers else math.inf,
        max_rel=numbers.max_rel if numbers else math.inf,
        explained_abs=float(stale) if key else math.nan,
    )
    return dataclasses.replace(report, rows=tuple(rows), diagnosis=diagnosis)


def _items(value: Any) -> tuple[Any, ...]:
    return tuple(value) if isinstance(value, tuple | list) else (value,)
