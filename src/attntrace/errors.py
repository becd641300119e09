"""The project's own error types.

Every error a user can cause is an :class:`AttntraceError`; the CLI turns it into one line on
stderr and exit code 2 in exactly one place (``attntrace.cli.typer_app``).
"""

from __future__ import annotations


class AttntraceError(Exception):
    """Bad input or an impossible request; the message names the fix."""


class ConfigError(AttntraceError, ValueError):
    """Sizes or options that cannot describe a multi-head attention."""


class BackendUnavailableError(AttntraceError, ImportError):
    """A backend whose library is not installed."""


#: The requirements of each optional extra, as pyproject.toml declares them (a test keeps them
#: equal): installing the requirement alone works wherever attntrace came from.
EXTRAS = {"torch": "torch>=2.1", "plot": "matplotlib>=3.8", "safetensors": "safetensors>=0.4"}


#: PyTorch's index of CPU wheels: on Linux, PyPI's default torch is a multi-GB CUDA build.
TORCH_CPU_INDEX = "https://download.pytorch.org/whl/cpu"
#: Where the documentation says how to get PyTorch on each system (one place, linked from every
#: hint that names the torch extra).
TORCH_DOCS = "docs/getting-started.md#pytorch"


def install_hint(extra: str) -> str:
    """How to get an optional extra, as a command that works from where attntrace was installed.

    A checkout (``pip install .`` or ``-e .``, or a source tree on ``PYTHONPATH``) is named by
    its folder, a git URL or a wheel by what pip recorded (PEP 610's ``direct_url.json``); the
    requirement alone always works and comes second. For torch, the index of PyTorch's CPU
    wheels follows (Linux gets a multi-GB CUDA build from PyPI otherwise).

    >>> hint = install_hint("plot")
    >>> hint.startswith("install it with: pip install ") and "matplotlib>=3.8" in hint
    True
    >>> install_hint("torch").endswith(f"--extra-index-url {TORCH_CPU_INDEX} ({TORCH_DOCS})")
    True
    """
    import shlex

    alone = f"pip install {shlex.quote(EXTRAS[extra])}"
    source = _install_source()
    if source is None:
        hint = f"install it with: {alone}"
    else:
        source = source.format(extra=extra)
        hint = f"install it with: pip install {source} (or just the library: {alone})"
    if extra == "torch":
        cpu = f"--extra-index-url {TORCH_CPU_INDEX}"
        hint += f"; on Linux, for the CPU wheel add {cpu} ({TORCH_DOCS})"
    return hint


def _install_source() -> str | None:
    """What ``pip install`` takes to install attntrace again, with ``{extra}`` where the extra
    goes; None when that cannot be told (then the requirement alone is the hint)."""
    import json
    import shlex
    from importlib import metadata
    from pathlib import Path
    from urllib.parse import unquote, urlparse

    try:
        dist = metadata.distribution("attntrace")
        direct = json.loads(dist.read_text("direct_url.json") or "null")
    except (metadata.PackageNotFoundError, ValueError):
        dist, direct = None, None
    here = Path(__file__).resolve().parent  # src/attntrace in a checkout
    root = here.parent.parent
    if here.parent.name == "src" and (root / "pyproject.toml").is_file():  # a source tree
        installed = isinstance(direct, dict) and direct.get("url") == root.as_uri()
        editable = installed and direct.get("dir_info", {}).get("editable", False)
        return ("-e " if editable else "") + shlex.quote(f"{root}[{{extra}}]")
    if not isinstance(direct, dict):  # from a package index, or not installed at all
        return None if dist is None else shlex.quote("attntrace[{extra}]")
    url = str(direct.get("url", ""))
    if "vcs_info" in direct:
        vcs = direct["vcs_info"]
        rev = vcs.get("requested_revision") or vcs.get("commit_id")
        url = f"{vcs.get('vcs', 'git')}+{url}" + (f"@{rev}" if rev else "")
    elif not Path(unquote(urlparse(url).path)).exists():  # a folder or wheel since removed
        return None
    elif "dir_info" in direct:
        return shlex.quote(f"{unquote(urlparse(url).path)}[{{extra}}]")
    return shlex.quote(f"attntrace[{{extra}}] @ {url}")


def __getattr__(name: str) -> str:
    """``TORCH_INSTALL_HINT``: the torch hint, made when first read (it reads pip's records)."""
    if name == "TORCH_INSTALL_HINT":
        return install_hint("torch")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


class CannotTellError(AttntraceError):
    """diff cannot decide whether the code is right: ``missing`` says what it lacks (one line:
    a class whose attention the reference cannot express, a choice nothing stated), ``remedy``
    the one flag or file that would let it decide ("" when none would). A verdict, not bad
    input: exit code :data:`EXIT_CANNOT_TELL`.

    >>> str(CannotTellError("the model's pairing is not stated", "pass --rope-style interleaved"))
    "the model's pairing is not stated; pass --rope-style interleaved"
    """

    def __init__(self, missing: str, remedy: str = "") -> None:
        super().__init__(f"{missing}; {remedy}" if remedy else missing)
        self.missing, self.remedy = missing, remedy

    @property
    def exit_code(self) -> int:
        return EXIT_CANNOT_TELL


class MemoryBudgetError(AttntraceError, MemoryError):
    """The tensors of a trace would not fit into the memory budget."""


class InputFileError(AttntraceError, OSError):
    """A user file that is missing, unreadable, malformed or unsafe."""


#: Exit codes of the CLI (a public contract, documented in the README and in --help).
EXIT_OK = 0
EXIT_CHECK_FAILED = 1
EXIT_USAGE = 2
EXIT_INTERNAL = 3  # an unexpected error inside attntrace: a bug, reported in one line
EXIT_CANNOT_TELL = 4  # diff cannot decide (CANNOT TELL): what is missing, and what would decide
