"""Running the user's code under a capture: a script as ``__main__`` (its folder on
``sys.path``, its arguments in ``sys.argv``), or ``FILE.py:NAME`` / ``package.module:NAME``
(a module class built with ``--init``, a module instance, or a function of one array)."""

from __future__ import annotations

import ast
import importlib
import importlib.util
import re
import runpy
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from attntrace.capturing.events import Event
from attntrace.capturing.session import Session, capture
from attntrace.errors import AttntraceError, BackendUnavailableError, install_hint

if TYPE_CHECKING:
    from attntrace.capturing.rank_setup import Rank


class TargetError(AttntraceError):
    """A target that cannot be run: no such file, no such name, not callable, a bad --init."""


@dataclass(frozen=True)
class Target:
    """What to run: a script, or NAME in a file or module."""

    path: Path | None  # the script or the file holding NAME
    module: str | None  # package.module holding NAME
    name: str | None
    argv: tuple[str, ...] = ()


def parse_target(text: str, argv: Sequence[str] = ()) -> Target:
    """``script.py``, ``FILE.py:NAME`` or ``package.module:NAME``.

    >>> parse_target("pkg.attn:Attention").name, parse_target("pkg.mod:fn").module
    ('Attention', 'pkg.mod')
    """
    from attntrace.units import bounded, quoted

    bounded(text, "the target", MAX_TARGET_CHARS)
    where, sep, name = text.rpartition(":") if ":" in text else (text, "", "")
    if sep and not name.isidentifier():
        raise TargetError(
            f"cannot read the target {quoted(text)}; write FILE.py, FILE.py:NAME or "
            "package.module:NAME"
        )
    if where.endswith(".py") or not sep:
        path = Path(where)
        if not _is_file(path):
            raise TargetError(f"no such file: {where}; give a Python script or FILE.py:NAME")
        if not sep and argv is not None:
            return Target(path, None, None, tuple(argv))
        return Target(path, None, name, tuple(argv))
    if not all(p.isidentifier() for p in where.split(".")):
        raise TargetError(
            f"cannot read the target {quoted(text)}; write FILE.py, FILE.py:NAME or "
            "package.module:NAME"
        )
    return Target(None, where, name, tuple(argv))


#: The longest target read: a path of PATH_MAX (4096) and a name.
MAX_TARGET_CHARS = 8192


def _is_file(path: Path) -> bool:
    """Whether ``path`` is a file; a path the system cannot look up (too long, a name of
    more than 255 bytes, a loop of links) is not one."""
    try:
        return path.is_file()
    except (OSError, ValueError):
        return False


def parse_init(pairs: Sequence[str]) -> dict[str, Any]:
    """``--init key=value`` pairs, values read as Python literals (a bare word is a string).

    >>> parse_init(["embed_dim=768", "num_heads=12", "causal=True", "name=gpt"])
    {'embed_dim': 768, 'num_heads': 12, 'causal': True, 'name': 'gpt'}
    """
    from attntrace.units import bounded, quoted

    out: dict[str, Any] = {}
    for pair in pairs:
        bounded(pair, "--init")
        key, sep, value = pair.partition("=")
        if not sep or not key.strip().isidentifier():
            raise TargetError(
                f"cannot read --init {quoted(pair)}; write KEY=VALUE, e.g. --init num_heads=12"
            )
        try:
            out[key.strip()] = ast.literal_eval(value.strip())
        except (ValueError, SyntaxError, TypeError, RecursionError, MemoryError):
            if not value.strip().isidentifier():
                raise TargetError(
                    f"cannot read --init {quoted(pair)}: {quoted(value)} is not a Python literal"
                ) from None
            out[key.strip()] = value.strip()
    return out


def imports_torch(path: Path, seen: set[Path] | None = None) -> bool:
    """True when the script (or a module beside it that it imports) imports torch."""
    seen = seen if seen is not None else set()
    if path in seen or not path.is_file():
        return False
    seen.add(path)
    try:
        tree = ast.parse(path.read_text(encoding="utf-8", errors="replace"))
    except SyntaxError:
        return False
    for node in ast.walk(tree):
        names = (
            [a.name for a in node.names]
            if isinstance(node, ast.Import)
            else [node.module or ""]
            if isinstance(node, ast.ImportFrom) and node.level == 0
            else []
        )
        for name in names:
            top = name.split(".")[0]
            if top == "torch" or imports_torch(path.parent / f"{top}.py", seen):
                return True
    return False


def check_torch(path: Path) -> None:
    """Refuse a script that imports torch where torch cannot be imported, in one line, before
    anything runs (torch is found, not imported)."""
    if not imports_torch(path):
        return
    try:
        found = importlib.util.find_spec("torch") is not None
    except (ImportError, ValueError):
        found = False
    if not found:
        raise BackendUnavailableError(
            f"{path.name} imports torch, which is not installed; {install_hint('torch')}"
        )


def _import_torch(path: Path) -> None:
    """Load torch before a script that imports it runs; without torch, one line saying so."""
    try:
        import torch  # noqa: F401
    except ImportError:
        raise BackendUnavailableError(
            f"{path.name} imports torch, which is not installed; {install_hint('torch')}"
        ) from None


@contextmanager
def _script_context(path: Path, argv: Sequence[str]) -> Iterator[None]:
    saved_argv, saved_path = sys.argv[:], sys.path[:]
    sys.argv = [str(path), *argv]
    sys.path.insert(0, str(path.resolve().parent))
    try:
        yield
    finally:
        sys.argv, sys.path[:] = saved_argv, saved_path


@dataclass
class Outcome:
    """What running the target gave: the capture, and the user's exception if one was raised."""

    capture: Session
    error: BaseException | None = None
    exit_code: int = 0
    frames: list[tuple[str, int, str, str]] = field(default_factory=list)  # the user's frames


def run_script(
    path: Path,
    argv: Sequence[str],
    *,
    axes: Mapping[str, int] | None = None,
    keep_values: bool = True,
    into: Sequence[str] = (),
    stream: Callable[[Event], None] | None = None,
) -> Outcome:
    """Run the script as ``python script.py ARGS`` would, capturing its ops (and those of
    the packages ``into``; ``stream`` is given each raw event as it is recorded). It runs in
    this process; the CLI runs it in a child (:mod:`attntrace.capturing.sandbox`)."""
    if imports_torch(path):
        _import_torch(path)  # the capture hooks torch only when it is loaded
    context = capture(axes=axes, keep_values=keep_values, into=into, stream=stream)
    with _script_context(path, argv), context as t:
        outcome = Outcome(t)
        try:
            runpy.run_path(str(path), run_name="__main__")
        except SystemExit as exc:
            outcome.exit_code = exit_status(exc)
        except Exception as exc:
            _failed(outcome, exc)
    return outcome


def exit_status(exc: SystemExit) -> int:
    """The status ``sys.exit(code)`` asks for, as Python itself reports it.

    >>> exit_status(SystemExit()), exit_status(SystemExit(7)), exit_status(SystemExit("bye"))
    (0, 7, 1)
    """
    return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)


def _failed(outcome: Outcome, exc: BaseException) -> None:
    import traceback

    from attntrace.capturing.source import is_user_file

    outcome.error = exc
    outcome.exit_code = 1
    outcome.frames = [
        (f.filename, f.lineno or 0, f.name, f.line or "")
        for f in traceback.StackSummary.extract(tb_frames(exc.__traceback__))
        if is_user_file(f.filename)
    ]


def tb_frames(tb: Any, keep: int = 500) -> list[tuple[Any, int]]:
    """The (frame, line) pairs of a traceback, only its ``keep`` outermost and ``keep``
    innermost of a deep one (a recursion of millions of frames is read in moments)."""
    pairs: list[tuple[Any, int]] = []
    while tb is not None:
        pairs.append((tb.tb_frame, tb.tb_lineno))
        tb = tb.tb_next
    return pairs if len(pairs) <= 2 * keep else pairs[:keep] + pairs[-keep:]


def load_target(target: Target) -> tuple[Any, Any]:
    """The object NAME names, and the module holding it."""
    if target.path is not None:
        module = _load_file(target.path)
    else:
        assert target.module is not None
        try:
            module = importlib.import_module(target.module)
        except ImportError as exc:
            raise TargetError(f"cannot import {target.module}: {exc}") from None
    name = target.name or ""
    if not hasattr(module, name) and target.module is not None:
        from attntrace.capturing.library import find_class

        found = find_class(target.module, name)
        if found is not None:
            return found, sys.modules[found.__module__]
    if not hasattr(module, name):
        where = target.path or target.module
        found = sorted(n for n, v in vars(module).items() if callable(v) and not n.startswith("_"))[
            :8
        ]
        raise TargetError(f"{where} has no {name!r}; callables there: {', '.join(found) or 'none'}")
    return getattr(module, name), module


def _load_file(path: Path) -> Any:
    folder = str(path.resolve().parent)
    if folder not in sys.path:
        sys.path.insert(0, folder)
    spec = importlib.util.spec_from_file_location(f"_attntrace_target_{path.stem}", path)
    if spec is None or spec.loader is None:
        raise TargetError(f"cannot load {path} as Python")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


@dataclass(frozen=True)
class Inputs:
    """How to build the input of a NAME target: sizes, dtype, seed, array kind, or a file."""

    batch: int | None = None
    seq: int = 3
    hidden: int | None = None
    dtype: str = "float32"
    seed: int = 0
    array: str | None = None  # numpy or torch; None: torch for modules and torch functions
    input_file: Path | None = None
    past: int = 0  # --past N: called as a decode step after a prefill of N tokens


_WIDTH_ATTRS = ("embed_dim", "hidden_size", "d_model", "hidden", "n_embd", "dim", "hidden_dim")


def run_target(
    target: Target,
    init: Mapping[str, Any],
    inputs: Inputs,
    *,
    axes: Mapping[str, int] | None = None,
    keep_values: bool = True,
    into: Sequence[str] = (),
    stream: Callable[[Event], None] | None = None,
    rank: Rank | None = None,
) -> Outcome:
    """Build NAME (a module class with ``init``, a module, or a function) and call it on a
    seeded x (B, S, H) / (S, H), capturing the ops (and those of the packages ``into``;
    ``stream`` as for :func:`run_script`). An exception of the user's code while it is
    imported or built (``__init__``, a property) is a :class:`TargetError` with its message
    and ``file:line``; one while it is called is the outcome's error. ``rank``: one rank of
    ``trace --nproc N`` (:mod:`attntrace.capturing.rank_setup`: what NAME is given, its x)."""
    obj, module = import_target(target)
    asked, into = tuple(into), library_into(obj, into)
    try:
        if rank is not None:
            obj, init = _on_rank(obj, init, rank)
        call = build_callable(obj, init, target.name or "", {"hidden": inputs.hidden})
        if not asked and not into:  # a library module held inside the user's: its steps too
            into = held_packages(call)
        if not axes:  # a transformers class states h and d: sizes two axes share are told apart
            from attntrace.capturing.library import known_axes

            axes = known_axes(call) or None
        torch_side = _wants_torch(obj, call, module, inputs.array)
        if not torch_side and inputs.dtype == "bfloat16":
            raise TargetError(
                f"numpy has no bfloat16, and {target.name} is called with a numpy array; "
                "add --array torch, or pick --dtype float16, float32 or float64"
            )
        if torch_side:
            call = in_dtype(call, inputs.dtype, built=isinstance(obj, type))
        x = _input(inputs, _width(call) if inputs.hidden is None else inputs.hidden, torch_side)
        if rank is not None:
            from attntrace.capturing.rank_setup import shard_x

            x = shard_x(x, rank)  # (B, S/N, H) with --shard-x seq
        apply = attention_call(call, lambda: _params(inputs, int(x.shape[-1]), torch_side))
        if inputs.past:  # a decode step: the module's own cache of a prefill (decode_step.py)
            from attntrace.capturing.decode_step import decode_call

            apply = decode_call(call, x, inputs.past, inputs.seed)
    except AttntraceError:
        raise
    except (Exception, SystemExit) as exc:  # the user's __init__ or property raised
        raise TargetError(f"building {target.name} failed: {user_message(exc)}") from None
    letters = ("B", "S", "H") if x.ndim == 3 else ("S", "H") if x.ndim == 2 else None
    context = capture(
        axes=axes, keep_values=keep_values, torch=torch_side, into=into, stream=stream
    )
    with context as t:
        outcome = Outcome(t)
        x = _root(t, x, letters)
        if inputs.past:
            from attntrace.capturing.decode_step import record_cache

            record_cache(t, apply, x)
        try:
            apply(x)
        except SystemExit as exc:  # the user's code ended the program: what ran is shown
            outcome.exit_code = exit_status(exc)
        except Exception as exc:
            _failed(outcome, exc)
    return outcome


def _on_rank(obj: Any, init: Mapping[str, Any], rank: Rank) -> tuple[Any, Mapping[str, Any]]:
    """A class's ``init`` with the rank's group, rank and world size where ``__init__`` names
    them; a function with them bound (:func:`attntrace.capturing.rank_setup.filled`)."""
    import functools

    from attntrace.capturing.rank_setup import filled

    if isinstance(obj, type):
        return obj, {**init, **filled(obj, init, rank)}  # the class: its __init__'s names
    given = filled(obj, {}, rank) if callable(obj) else {}
    return (functools.partial(obj, **given) if given else obj), init


def held_packages(call: Any) -> tuple[str, ...]:
    """The packages of the library modules that ``call`` (a module of the user's, or a function
    of x that reaches modules) holds: :func:`attntrace.capturing.held.held_into`."""
    from attntrace.capturing.held import function_module, held_into

    torch = sys.modules.get("torch")
    if torch is None:
        return ()
    module = call if isinstance(call, torch.nn.Module) else function_module(call)
    return () if module is None else held_into(module)


def library_into(obj: Any, into: Sequence[str]) -> tuple[str, ...]:
    """The packages whose ops are recorded: ``into``, or for an installed library's class
    (transformers:LlamaAttention, x_transformers:Attention) its package, so that its steps are
    seen (``--no-into``: ``("",)``, none). torch's own classes are not followed.

    >>> library_into(dict, ()), library_into(dict, ("einops",)), library_into(dict, ("",))
    ((), ('einops',), ())
    """
    import inspect

    from attntrace.capturing.library import PACKAGE, is_library_class
    from attntrace.capturing.source import is_user_file
    from attntrace.capturing.torch_inside import MHA, follows

    if tuple(into) == ("",):
        return ()
    if not into and follows(obj):  # torch's nn.MultiheadAttention: its ops, not one row
        return (MHA,)
    if into or not isinstance(obj, type):
        return tuple(into)
    if is_library_class(obj):
        return (PACKAGE,)
    top = obj.__module__.split(".")[0]
    try:
        where = inspect.getfile(obj)
    except (TypeError, OSError):
        return ()
    never = ("torch", "numpy", "attntrace", "builtins", "__main__")
    return () if top in never or top.startswith("_") or is_user_file(where) else (top,)


def import_target(target: Target) -> tuple[Any, Any]:
    """The object a target names and its module; a failing import of the user's code is one
    :class:`TargetError` naming the file or module (the traceback is theirs, not ours).

    >>> import_target(parse_target("json:dumps"))[0].__name__
    'dumps'
    """
    try:
        return load_target(target)
    except AttntraceError:
        raise
    except (Exception, SystemExit) as exc:  # sys.exit() on import ends nothing but the import
        raise TargetError(
            f"importing {target.path or target.module} failed: {user_message(exc)}"
        ) from None


def user_message(exc: BaseException) -> str:
    """``Type: message at file.py:LINE``, the line the innermost frame of the user's code
    where ``exc`` was raised (no ``at`` when none of its frames is the user's).

    >>> user_message(ValueError("embed_dim must be positive"))
    'ValueError: embed_dim must be positive'
    """
    text = str(exc).strip()
    head = f"{type(exc).__name__}: {text.splitlines()[0] if text else ''}".rstrip(": ")
    return head + _at(exc)


def _at(exc: BaseException) -> str:
    """`` at file.py:LINE`` of the innermost frame of the user's code in ``exc``'s
    traceback, or "" when none is theirs."""
    import os
    import traceback

    from attntrace.capturing.source import is_user_file

    found = traceback.StackSummary.extract(tb_frames(exc.__traceback__))
    frames = [f for f in found if is_user_file(f.filename)]
    if not frames:
        return ""
    return f" at {os.path.basename(frames[-1].filename)}:{frames[-1].lineno}"


def _init_hint(exc: TypeError) -> str:
    """How to build a class that failed: --init for literals; a config object (a layer of a
    model library) that --init cannot write is built by attntrace for transformers' classes.

    >>> _init_hint(TypeError("__init__() missing 1 required positional argument: 'config'"))[:38]
    'a layer built from a config object is '
    """
    if re.search(r"\bargument[s]?: .*'config'", str(exc)):
        return (
            "a layer built from a config object is built by attntrace for transformers' "
            "attention classes (transformers:LlamaAttention); for another library, trace a "
            "file that builds it and calls it as its model does"
        )
    return "pass its arguments with --init KEY=VALUE"


def build_callable(
    obj: Any, init: Mapping[str, Any], name: str, sizes: Mapping[str, Any] | None = None
) -> Any:
    """What attntrace calls for ``obj``: an ``nn.Module`` class built with ``init`` (a
    transformers attention class from a config of ``sizes``: hidden, heads, kv_heads, see
    :mod:`attntrace.capturing.library`), else ``obj`` itself when it is callable (a module
    instance or a function).

    >>> build_callable(len, {}, "len")([1, 2])
    2
    """
    torch = sys.modules.get("torch")
    is_module_class = (
        torch is not None and isinstance(obj, type) and issubclass(obj, torch.nn.Module)
    )
    if is_module_class:
        from attntrace.capturing.library import build, is_library_class

        try:
            if is_library_class(obj):
                return build(obj, init, sizes or {})
            return obj(**init)
        except TypeError as exc:
            raise TargetError(
                f"cannot build {name}({_show(init)}): {exc}{_at(exc)}; {_init_hint(exc)}"
            ) from None
        except AttntraceError:
            raise
        except (Exception, SystemExit) as exc:  # the user's own check of its arguments
            raise TargetError(f"cannot build {name}({_show(init)}): {user_message(exc)}") from None
    if init:
        raise TargetError(f"--init builds an nn.Module class; {name} is not one")
    if isinstance(obj, type):
        raise TargetError(
            f"{name} is a class but not an nn.Module; give a module class, a module or a function"
        )
    if not callable(obj):
        raise TargetError(
            f"{name} is a {type(obj).__name__}, not callable; "
            "give a module class, a module or a function"
        )
    return obj


def in_dtype(call: Any, dtype: str, *, built: bool) -> Any:
    """``call`` with its floating-point weights in ``dtype`` when it is an ``nn.Module`` (as
    ``diff`` runs a module): the module attntrace ``built`` is converted, a module instance of
    the user's is copied first so theirs stays as it is; a function is returned as it is.

    >>> in_dtype(len, "float64", built=False) is len
    True
    """
    torch = sys.modules.get("torch")
    if torch is None or not isinstance(call, torch.nn.Module):
        return call
    want = getattr(torch, dtype)
    tensors = [*call.parameters(), *call.buffers()]
    if all(t.dtype == want for t in tensors if t.is_floating_point()):
        return call
    if not built:
        import copy

        try:
            call = copy.deepcopy(call)
        except Exception as exc:
            raise TargetError(
                f"cannot copy {type(call).__name__} to convert it to {dtype} ({exc}); "
                "give its class (FILE.py:CLASS with --init), or build it in that dtype"
            ) from None
    return call.to(want)


def _show(init: Mapping[str, Any]) -> str:
    return ", ".join(f"{k}={v!r}" for k, v in init.items())


def _wants_torch(obj: Any, call: Any, module: Any, array: str | None) -> bool:
    if array is not None:
        return array == "torch"
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(call, torch.nn.Module):
        return True
    return any(getattr(v, "__name__", "") == "torch" for v in vars(module).values())


def attention_call(call: Any, params: Callable[[], Mapping[str, Any]]) -> Callable[[Any], Any]:
    """How ``call`` is called on x: as self-attention ``call(x, x, x)`` when it takes query,
    key and value (``nn.MultiheadAttention``), as ``call(x, params())`` when it is a function
    of two arguments (``diff``'s ``fn(x, params)``: seeded weights w_q, b_q, …), else
    ``call(x)``; a returned tuple gives its first item (the attention output).

    >>> attention_call(lambda q, k, v: (q + k + v, None), dict)(1)
    3
    >>> attention_call(lambda x, p: x + len(p), lambda: {"w_q": 0})(1)
    2
    """
    torch = sys.modules.get("torch")
    module = torch is not None and isinstance(call, torch.nn.Module)
    needed = _required(call.forward if module else call)
    if needed == 3 and getattr(call, "batch_first", None) is False:  # it takes (S, B, H)
        return lambda x: _sequence_first(call, x)
    if needed == 3:
        return lambda x: _first(call(x, x, x))
    if needed == 2 and not module:
        return lambda x: _first(call(x, params()))
    return lambda x: _first(call(x))


def _sequence_first(call: Any, x: Any) -> Any:
    """``call`` (``nn.MultiheadAttention(batch_first=False)``) on x (B, S, H) given as (S, B, H),
    its output turned back to (B, S, H); x (S, H) as it is."""
    if x.ndim != 3:
        return _first(call(x, x, x))
    t = x.transpose(0, 1)  # (S, B, H)
    return _first(call(t, t, t)).transpose(0, 1)  # (B, S, H)


def _required(fn: Any) -> int:
    """How many positional arguments ``fn`` needs (-1 when its signature cannot be read)."""
    import inspect

    try:
        found = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return -1
    kinds = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    return sum(1 for p in found if p.kind in kinds and p.default is p.empty)


def _first(out: Any) -> Any:
    return out[0] if isinstance(out, tuple) and out else out


def _params(inputs: Inputs, hidden: int, torch_side: bool) -> dict[str, Any]:
    """The seeded weights of ``fn(x, params)`` as ``diff`` makes them (the reference's w_q,
    b_q, …, torch layout (out, in)), one head: the function decides how it splits them."""
    from attntrace.config.attention_config import AttentionConfig
    from attntrace.engine.inputs import random_sources

    dtype = "float32" if inputs.dtype == "bfloat16" else inputs.dtype
    config = AttentionConfig(
        batch=inputs.batch, seq=inputs.seq, hidden=hidden, heads=1, dtype=dtype, seed=inputs.seed
    )
    made = {k: s.make() for k, s in random_sources(config).items() if k != "x"}
    if not torch_side:
        return made
    import torch

    return {k: torch.from_numpy(v).to(getattr(torch, inputs.dtype)) for k, v in made.items()}


def _width(call: Any) -> int:
    """H of the seeded x: the module's width attribute, the width of its attention weights as
    ``diff`` reads them from its state dict, its first ``nn.Linear``, else 768."""
    for attr in _WIDTH_ATTRS:
        value = getattr(call, attr, None)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    torch = sys.modules.get("torch")
    if torch is None:
        return 768
    if not isinstance(call, torch.nn.Module):  # a function of x: the modules it reaches
        from attntrace.capturing.held import function_module

        held = function_module(call)
        return 768 if held is None else _width(held)
    from attntrace.files.schemes import state_dict_weights

    try:
        weights = state_dict_weights(call)
    except AttntraceError:
        weights = None
    w_q = weights.params.get("w_q") if weights is not None else None
    if w_q is not None:
        return int(w_q.shape[-1])  # (out, in): in is H
    first = next((m for m in call.modules() if isinstance(m, torch.nn.Linear)), None)
    return 768 if first is None else int(first.in_features)


def _input(inputs: Inputs, hidden: int, torch_side: bool) -> Any:
    import numpy as np

    if inputs.input_file is not None:
        x = read_input(inputs.input_file)
    else:
        shape = (inputs.seq, hidden) if inputs.batch is None else (inputs.batch, inputs.seq, hidden)
        x = np.random.default_rng(inputs.seed).standard_normal(shape)
    if not torch_side:
        return x.astype(inputs.dtype)
    import torch

    return torch.from_numpy(np.ascontiguousarray(x)).to(getattr(torch, inputs.dtype))


def read_input(path: Path) -> Any:
    """x of ``--input``, read as ``run --input`` and ``diff --input`` read it: a floating-point
    ``.npy`` array or the ``x`` of a ``.npz``, never unpickled; anything else is one
    :class:`~attntrace.errors.InputFileError` line naming the fix.

    >>> import numpy as np, tempfile, pathlib
    >>> f = pathlib.Path(tempfile.mkdtemp()) / "x.npy"
    >>> np.save(f, np.zeros((5, 64), dtype=np.float32))
    >>> read_input(f).shape
    (5, 64)
    """
    from attntrace.errors import InputFileError
    from attntrace.files import read_npy

    x = read_npy(path)
    if x.dtype.kind != "f":  # the x of a .npz: read_npy checks the dtype of a .npy only
        raise InputFileError(
            f"{path}: x is {x.dtype.name}, not floating point; save it as float32 or float64"
        )
    return x


def _root(t: Session, x: Any, letters: tuple[str, ...] | None) -> Any:
    """x recorded as the first step, with the letters of the layout."""
    from attntrace.capturing.source import Site

    site = Site("input", "x", "x")
    if t._torch is not None and not hasattr(x, "__array_function__"):
        t._recorder.record(
            x.detach(),
            0,
            "input",
            "create",
            site,
            [],
            t._torch.adapter,
            {"axes": letters} if letters else None,
            key=x,
        )
        return x
    from attntrace.capturing.numpy_hooks import TracedArray

    traced = x.view(TracedArray)
    assert t._numpy is not None
    t._recorder.record(
        traced,
        0,
        "input",
        "create",
        site,
        [],
        t._numpy.adapter,
        {"axes": letters} if letters else None,
    )
    return traced
