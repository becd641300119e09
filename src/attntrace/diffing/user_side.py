"""The user's side of a diff: run their attention under :func:`attntrace.capture` and keep
every captured tensor with its value and ``file:line``."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from attntrace.errors import AttntraceError

if TYPE_CHECKING:
    import numpy as np


class UserCodeError(AttntraceError):
    """The user's attention raised; diff cannot compare what never ran (exit 1)."""

    exit_code = 1
    steps: tuple[UserStep, ...] = ()  # what the code made before it raised


@dataclass(frozen=True)
class UserStep:
    """One tensor the user's code made: its name, values and where."""

    index: int  # order of execution, from 0
    name: str  # the variable it was assigned to, or the op and a counter
    value: np.ndarray
    location: str = ""  # "file:line"
    source: str = ""  # the expression on that line
    role: str = ""  # the reference step capture recognised it as, or ""
    #: a step replayed from a kernel call made by followed torch code (nn.MultiheadAttention):
    #: the user's line that called it and that statement
    caller: str = ""
    caller_source: str = ""
    called: str = ""  # made in a helper: "in apply_rope, called at ring.py:81"

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(int(n) for n in self.value.shape)


def run_user(
    call: Callable[[Callable[[Any], Any]], Any], into: tuple[str, ...] = ()
) -> tuple[tuple[UserStep, ...], np.ndarray]:
    """Run ``call(track)`` (the user's attention on ``track(x)``; ``track`` marks a numpy
    input for capture) under capture (with the ops of the packages ``into``): the captured
    steps with values, and what it returned, as numpy. The user's exceptions become
    :class:`UserCodeError`."""
    from attntrace.capturing.session import capture

    try:
        with capture(into=into) as t:
            out = call(t.track)
    except AttntraceError:
        raise
    except (Exception, SystemExit) as exc:  # sys.exit() in the user's code is theirs too
        from attntrace.capturing.runner import user_message

        error = UserCodeError(
            f"the code under test raised {user_message(exc)}; "
            "run attntrace trace on it to see the shapes up to the failure"
        )
        error.steps = _user_steps(t.steps, _calls(t))
        raise error from exc
    return _user_steps(t.steps, _calls(t)), _numpy(_first_tensor(out))


def _calls(capture: Any) -> dict[str, Any]:
    """Each kernel call the capture opened (``F.scaled_dot_product_attention(…)``), by its
    ``file:line``: its text is the source of the steps replayed there, as the user wrote it."""
    kernels = getattr(capture, "kernels", None)
    return {k.location: k for k in kernels()} if callable(kernels) else {}


def _user_steps(captured: Any, calls: dict[str, Any] | None = None) -> tuple[UserStep, ...]:
    """The captured steps with a value, as numpy (floating and boolean ones); a step replayed
    from a kernel call has the call's text as its source (and the user's line that called the
    torch code making it, when followed code made it)."""
    kept = [(s, _numpy(s.value)) for s in captured if s.value is not None]
    calls = calls or {}
    out = []
    for i, (s, value) in enumerate((s, v) for s, v in kept if v.dtype.kind in "fb"):
        at = getattr(s, "location", "")
        call = calls.get(at)
        out.append(
            UserStep(
                index=i,
                name=s.name,
                value=value,
                location=at,
                source=call.source if call is not None else getattr(s, "source", ""),
                role=getattr(s, "role", ""),
                caller=getattr(call, "caller", ""),
                caller_source=getattr(call, "caller_source", ""),
                called=getattr(s, "called", ""),
            )
        )
    return tuple(out)


def _first_tensor(out: object) -> object:
    """The attention output: the value itself, or the first item of a returned tuple."""
    if isinstance(out, tuple | list) and out:
        return out[0]
    return out


def _numpy(value: object) -> np.ndarray:
    """``value`` as a numpy array, without a copy where it already is one (capture's values are
    its own read-only copies; diff never writes to them)."""
    import numpy as np

    if hasattr(value, "detach"):
        value = value.detach().cpu()
        if str(getattr(value, "dtype", "")) == "torch.bfloat16":
            value = value.float()  # type: ignore[attr-defined]
        value = value.numpy()  # type: ignore[attr-defined]
    return np.asarray(value)
