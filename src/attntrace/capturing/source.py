"""Where an operation happens in the user's code: which files are the user's, the frame that
called a library, the source text of the expression and the name the line assigns it to."""

from __future__ import annotations

import ast
import dataclasses
import linecache
import os
import sys
import sysconfig
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from types import CodeType, FrameType

from attntrace.capturing.torch_inside import is_followed_code

#: Folders whose files are never the user's: the standard library, installed packages, and
#: attntrace itself (its reference code is traced by ``run``, not by ``trace``).
_LIBRARY_DIRS: tuple[str, ...] = tuple(
    os.path.realpath(p) + os.sep
    for p in {sysconfig.get_paths()[k] for k in ("stdlib", "platstdlib", "purelib", "platlib")}
    | {os.path.dirname(os.path.dirname(__file__))}
)


#: Folders of installed packages whose files count as the user's (``attntrace trace --into``).
_INTO: list[str] = []


def trace_into(places: Sequence[str]) -> None:
    """Count the files under ``places`` (folders of installed packages, or single files) as
    the user's, from now on; ``()`` ends it."""
    _INTO[:] = [os.path.realpath(f) + ("" if f.endswith(".py") else os.sep) for f in places]
    is_user_file.cache_clear()


#: Packages whose own files are their internals, not attention code to read.
_NEVER_INTO = ("torch", "numpy", "attntrace", "typer", "rich")


def package_folders(names: Sequence[str]) -> tuple[str, ...]:
    """The folders of installed packages ``names`` (``transformers``, or a part of one,
    ``transformers.models.gpt2``), found without running them.

    >>> package_folders(["json"])[0].endswith("json")
    True
    """
    from attntrace.errors import ConfigError

    folders = []
    for name in names:
        if name.split(".")[0] in _NEVER_INTO:
            raise ConfigError(
                f"--into {name} would record {name.split('.')[0]}'s own internals; "
                "name the package whose attention code you want to see, "
                "e.g. --into transformers"
            )
        places = _places(name)
        if not places:
            raise ConfigError(
                f"--into {name}: no installed package {name!r}; give a name "
                "that python -c 'import NAME' imports, e.g. --into transformers"
            )
        folders += places
    return tuple(folders)


#: Tensor libraries whose calls are the user's own tensor ops: einops' ``rearrange(t, "b n
#: (h d) -> b h n d", h=h)`` is a reshape and a permute written on the user's line, so its ops
#: are recorded with that line (their frames are walked past, as torch's dispatch layers are).
PASS_THROUGH = ("einops",)


@lru_cache(maxsize=1)
def pass_through_folders() -> tuple[str, ...]:
    """The folders of the :data:`PASS_THROUGH` libraries that are installed (found without
    importing them), each ending in a separator.

    >>> all(folder.endswith(os.sep) for folder in pass_through_folders())
    True
    """
    places = (place for name in PASS_THROUGH for place in _places(name))
    return tuple(os.path.realpath(place) + os.sep for place in places if not place.endswith(".py"))


def _places(name: str) -> list[str]:
    """The folders of the installed package ``name`` (the file of a single-file module),
    found without importing it; ``[]`` when it is not installed."""
    import importlib.util

    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        spec = None
    places = [str(p) for p in spec.submodule_search_locations or []] if spec else []
    if spec is not None and not places and spec.origin:  # a single-file module
        places = [spec.origin]
    return places


@lru_cache(maxsize=4096)
def is_user_file(filename: str) -> bool:
    """True for a file of the user's code: not the standard library, not an installed package
    (but those of :func:`trace_into`), not attntrace; ``<stdin>``, ``<string>`` and notebook
    cells count as the user's.

    >>> is_user_file(ast.__file__), is_user_file("/home/me/attn.py"), is_user_file("<frozen os>")
    (False, True, False)
    """
    if filename.startswith("<"):
        return not filename.startswith("<frozen")
    real = _real(filename)
    return not real.startswith(_LIBRARY_DIRS) or real.startswith(tuple(_INTO))


def user_frame(skip: int = 1, *, through: tuple[str, ...] = ()) -> FrameType | None:
    """The frame of the user's code that made the current call, or None when a library did.

    Frames of files under the ``through`` folders (torch's dispatch layers, say) are walked
    past; the first other frame decides: the user's file, or a library (None).
    """
    frame: FrameType | None = sys._getframe(skip + 1)
    while frame is not None:
        if is_followed_code(frame.f_code):  # torch's own attention, followed (--into)
            return frame
        name = frame.f_code.co_filename
        if not (through and _real(name).startswith(through)):
            return frame if is_user_file(name) else None
        frame = frame.f_back
    return None


@lru_cache(maxsize=4096)
def _real(filename: str) -> str:
    return os.path.realpath(filename)


@dataclass(frozen=True)
class Site:
    """The place of one operation: ``file:line``, the expression's text, the assigned name."""

    location: str
    source: str
    target: str = ""  # the variable the statement assigns, when this op is its whole value
    targets: tuple[str, ...] = ()  # the names of a tuple assignment ``q, k, v = …``
    called: str = ""  # inside a helper: "in apply_rope, called at ring.py:81", else ""


def site_of(frame: FrameType) -> Site:
    """The :class:`Site` of the instruction ``frame`` is executing. A helper's last assignment
    of the variable it returns (``output = …; return output``) takes the name its caller
    assigns the call to (``Q = split_heads(Q, …)`` names it ``Q``)."""
    code = frame.f_code  # equal code objects of two files compare equal: the name is in the key
    site = _site(code.co_filename, code, frame.f_lasti, frame.f_lineno)
    caller = frame.f_back
    line = int(site.location.rsplit(":", 1)[1])
    returned = bool(site.target) and _returned(code).get(site.target) == line
    called = called_from(frame)
    if returned and caller is not None and is_user_file(caller.f_code.co_filename):
        named = site_of(caller).target or site.target
        return Site(site.location, site.source, named, site.targets, called)
    return dataclasses.replace(site, called=called) if called else site


#: How many of the user's call sites above a helper are named (the helper's caller first).
CALLERS = 2


def called_from(frame: FrameType) -> str:
    """Where the code of ``frame``'s own file called the helper ``frame`` runs in, walking past
    the frames between (``nn.Module.__call__``): "in apply_rope, called at ring.py:81", or ""
    when no function of that file called it (the forward attntrace called)."""
    sites: list[str] = []
    file = frame.f_code.co_filename
    while frame.f_code.co_name.startswith("<") and _same_file(frame.f_back, file):
        frame = frame.f_back  # type: ignore[assignment]  # a genexpr: its function's frame
    up = frame.f_back
    while up is not None and len(sites) < CALLERS:
        site = f"{os.path.basename(file)}:{_lines(up)}"
        if up.f_code.co_filename == file and up.f_code.co_name != "<module>" and site not in sites:
            sites.append(site)  # a genexpr's line and its function's are one call site
        up = up.f_back
    if not sites:
        return ""
    return f"in {frame.f_code.co_qualname}, called at {', '.join(sites)}"


def _lines(frame: FrameType) -> str:
    """The line of the call ``frame`` is making, or its first-last lines when it spans several
    (``block_attention(⏎ q, k, v, …⏎ )``: "87-89")."""
    span = _positions(frame.f_code)[frame.f_lasti // 2] if frame.f_lasti >= 0 else None
    if span is None or span[0] is None or span[1] is None or span[0] == span[1]:
        return str(frame.f_lineno)
    return f"{span[0]}-{span[1]}"


def _same_file(frame: FrameType | None, file: str) -> bool:
    return frame is not None and frame.f_code.co_filename == file


@lru_cache(maxsize=1024)
def _returned(code: CodeType) -> dict[str, int]:
    """The names the function of ``code`` returns (``return NAME``), each with the line of its
    last assignment in that function."""
    tree = _tree(code.co_filename)
    func = next(
        (
            node
            for node in (ast.walk(tree) if tree is not None else ())
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
            and node.name == code.co_name
            and min([node.lineno, *(d.lineno for d in node.decorator_list)]) == code.co_firstlineno
        ),
        None,
    )
    if func is None:
        return {}
    names = {
        n.value.id
        for n in ast.walk(func)
        if isinstance(n, ast.Return) and isinstance(n.value, ast.Name)
    }
    last: dict[str, int] = {}
    for node in ast.walk(func):
        if isinstance(node, ast.Assign) and node.value is not None:
            for target in node.targets:
                if isinstance(target, ast.Name) and target.id in names:
                    last[target.id] = max(last.get(target.id, 0), node.value.lineno)
    return last


def forget() -> None:
    """Drop what was read of the user's files (a new capture reads them as they are now)."""
    for cached in (_site, _tree):  # _assignments checks each file's stamp itself
        cached.cache_clear()
    linecache.checkcache()


@lru_cache(maxsize=8192)
def _site(filename: str, code: CodeType, lasti: int, lineno: int) -> Site:
    span = _positions(code)[lasti // 2] if lasti >= 0 else None
    line = lineno if span is None or span[0] is None else span[0]
    where = f"{os.path.basename(code.co_filename)}:{line}"
    if span is None or None in span:
        return Site(where, linecache.getline(code.co_filename, line).strip())
    source = _text(code.co_filename, span)
    assign = _assignment(code.co_filename, span)
    if assign is None:
        return Site(where, source)
    return Site(where, source, assign[0], assign[1])


Span = tuple[int | None, int | None, int | None, int | None]


@lru_cache(maxsize=512)
def _positions(code: CodeType) -> list[Span]:
    return list(code.co_positions())


def _text(filename: str, span: Span) -> str:
    first, last, col, end_col = span
    if first is None or last is None or col is None or end_col is None:
        return ""
    lines = [linecache.getline(filename, n) for n in range(first, last + 1)]
    if not lines or not lines[0]:
        return ""
    if len(lines) == 1:
        return _cut(lines[0].encode()[col:end_col])
    pieces = [
        lines[0].encode()[col:],
        *(s.encode() for s in lines[1:-1]),
        lines[-1].encode()[:end_col],
    ]
    return " ".join(_cut(p) for p in pieces)


def _cut(raw: bytes) -> str:
    return " ".join(raw.decode(errors="replace").split())


def _assignment(filename: str, span: Span) -> tuple[str, tuple[str, ...]] | None:
    """The target names when the expression at ``span`` is the whole value of an assignment."""
    return _assignments(filename, _stamp(filename)).get(span)


def assigned_lines(filename: str) -> dict[str, set[int]]:
    """The lines of ``filename`` that assign each name (tuple targets name each part), from the
    file's one indexed walk.

    >>> assigned_lines(__file__)["found"] != set()
    True
    """
    found: dict[str, set[int]] = {}
    for (line, *_), (name, parts) in _assignments(filename, _stamp(filename)).items():
        for each in (name, *parts):
            if each and line is not None:
                found.setdefault(each, set()).add(line)
    return found


def _stamp(filename: str) -> tuple[int, int] | None:
    """What tells a changed file from the one read before: its mtime and size."""
    try:
        stat = os.stat(filename)
    except OSError:
        return None
    return stat.st_mtime_ns, stat.st_size


@lru_cache(maxsize=256)
def _assignments(
    filename: str, stamp: tuple[int, int] | None
) -> dict[Span, tuple[str, tuple[str, ...]]]:
    """Every assignment of the file by the span of its value, from one walk of its tree (read
    again only when the file changed: ``stamp``); the first in walk order wins."""
    tree = _tree(filename)
    found: dict[Span, tuple[str, tuple[str, ...]]] = {}
    for node in ast.walk(tree) if tree is not None else ():
        if isinstance(node, ast.Assign | ast.AnnAssign | ast.AugAssign) and node.value is not None:
            value = node.value
            where = (value.lineno, value.end_lineno, value.col_offset, value.end_col_offset)
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            found.setdefault(where, _names(targets[-1]))
    return found


def _names(target: ast.expr) -> tuple[str, tuple[str, ...]]:
    if isinstance(target, ast.Tuple | ast.List):
        parts = tuple(_names(e)[0] for e in target.elts)
        return "", parts
    if isinstance(target, ast.Name):
        return target.id, ()
    if isinstance(target, ast.Attribute):
        return target.attr, ()  # self.cache = ... -> cache
    if isinstance(target, ast.Subscript):
        return _names(target.value)[0], ()
    return "", ()


@lru_cache(maxsize=256)
def _tree(filename: str) -> ast.Module | None:
    text = "".join(linecache.getlines(filename))
    try:
        return ast.parse(text)
    except (SyntaxError, ValueError):
        return None
