"""What the top-level ``attntrace --help`` shows, known without importing Typer.

The description, the epilog, the root options and every command's one-line summary live here,
in a module that imports nothing heavy: :func:`attntrace.cli.main` draws ``attntrace --help``
from them without importing Typer (whose import alone is most of a start-up), and the Typer
application (:mod:`attntrace.cli.typer_app`) is built from the same strings.
tests/cli/test_help.py checks that the page drawn from here is the one Typer's group gives.
"""

from __future__ import annotations

#: What attntrace is, in one paragraph: the first of ``attntrace --help``, of the README and of
#: the documentation site's home page (tests/docs/test_front_door.py keeps the three equal).
ABOUT = (
    "Trace every intermediate tensor shape of multi-head attention (the reference, your own "
    "code or a real model's layer): each tensor's named axes, the op that made it and its cost."
)
#: The application's help: the description, then a line on where to start.
HELP = f"{ABOUT}\n\nStart with: [bold]attntrace run --heads 12 --hidden 768[/]"
EPILOG = (
    "Exit codes: 0 success, 1 a check failed, 2 bad input or usage, "
    "3 an internal error (a bug: please report it)."
)
VERSION_HELP = "Print the version and exit."
#: The names that print a help (``context_settings`` of the application).
HELP_NAMES = ("-h", "--help")


class _Value:
    """Equality, hash and repr from ``_key()``: what a frozen dataclass gives, without the
    ``exec`` a dataclass costs at import (``--help`` would pay for it)."""

    __slots__ = ()

    def _key(self) -> tuple[object, ...]:
        raise NotImplementedError

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def __repr__(self) -> str:
        return f"{type(self).__name__}{self._key()!r}"


class Option(_Value):
    """One row of the Options panel: the names in Typer's four columns (long, short, negative
    long, negative short), the value's metavar (empty for a flag), the help, required or not."""

    __slots__ = ("help", "metavar", "names", "required")

    def __init__(
        self,
        long: str,
        help: str,
        short: str = "",
        negative: str = "",
        negative_short: str = "",
        metavar: str = "",
        required: bool = False,
    ) -> None:
        self.names = (long, short, negative, negative_short)
        self.help, self.metavar, self.required = help, metavar, required

    def _key(self) -> tuple[object, ...]:
        return (*self.names, self.metavar, self.help, self.required)


class Page(_Value):
    """What a group's help shows, as plain strings: the usage line, the help (its first
    paragraph the description, the rest dimmed), the epilog and the options."""

    __slots__ = ("epilog", "help", "options", "usage")

    def __init__(self, usage: str, help: str, epilog: str, options: tuple[Option, ...]) -> None:
        self.usage, self.help, self.epilog, self.options = usage, help, epilog, options

    def _key(self) -> tuple[object, ...]:
        return (self.usage, self.help, self.epilog, self.options)


class CommandSpec:
    """Where a command lives and what the top-level help says about it (a plain class: a
    NamedTuple or dataclass is built with ``exec`` at import, a cost ``--help`` would pay)."""

    __slots__ = ("module", "summary")

    def __init__(self, module: str, summary: str) -> None:
        self.module, self.summary = module, summary


#: Every command, in the order of ``attntrace --help``. A new command: its module registers
#: it with ``@app.command``; add it here with the first paragraph of its docstring.
COMMANDS: dict[str, CommandSpec] = {
    "run": CommandSpec(
        "attntrace.cli.commands.cmd_run",
        "Run multi-head attention and print the shape of every step.",
    ),
    "trace": CommandSpec(
        "attntrace.cli.commands.cmd_trace",
        "Run your attention code and print the shape of every tensor op in your files.",
    ),
    "check": CommandSpec(
        "attntrace.cli.commands.cmd_check",
        "Check the shapes of a trace: exit 1 when one is not what you expect.",
    ),
    "report": CommandSpec(
        "attntrace.cli.commands.cmd_report",
        "Write one self-contained HTML page: steps, flow diagram, heat maps, costs, config.",
    ),
    "presets": CommandSpec(
        "attntrace.cli.commands.cmd_presets",
        "List the real models --preset knows, with their attention sizes.",
    ),
    "sweep": CommandSpec(
        "attntrace.cli.commands.cmd_sweep",
        "FLOPs, score bytes and peak memory over several sizes, eager beside flash.",
    ),
    "compare": CommandSpec(
        "attntrace.cli.commands.cmd_compare",
        "Set two configurations side by side: the steps whose shape or op changes, FLOPs, bytes.",
    ),
    "verify": CommandSpec(
        "attntrace.cli.commands.cmd_verify",
        "Check the trace against PyTorch's own attention; exit 1 beyond tolerance.",
    ),
    "diff": CommandSpec(
        "attntrace.cli.commands.cmd_diff",
        "Run your attention beside the reference with the same weights and input; name the bug.",
    ),
    "demo": CommandSpec(
        "attntrace.cli.commands.cmd_demo",
        "Walk through the study notes' worked 3×3 example, unscaled and scaled.",
    ),
    "explore": CommandSpec(
        "attntrace.cli.commands.cmd_explore",
        "Open an interactive page: turn the sizes and watch every shape follow.",
    ),
}


#: The summaries of ``attntrace --help`` in the study notes' Chinese, shown when the locale is
#: Chinese (LC_ALL, LC_MESSAGES, LANG: zh_*); tests/cli/test_help.py keeps their commands those
#: of COMMANDS. Each command's own --help stays as its docstring says.
SUMMARIES_ZH: dict[str, str] = {
    "run": "运行多头注意力，打印每一步的形状。",
    "trace": "运行你自己的注意力代码，打印你的文件里每个张量运算的形状。",
    "check": "检查一次追踪的形状：与预期不符时退出码为 1。",
    "report": "写出一个独立的 HTML 页面：步骤、数据流图、热力图、计算量、配置。",
    "presets": "列出 --preset 认识的真实模型及其注意力尺寸。",
    "sweep": "在多种尺寸下比较 FLOPs、分数矩阵字节数和峰值内存，eager 与 flash 并列。",
    "compare": "把两种配置并排比较：形状或运算变化的步骤、FLOPs、字节数。",
    "verify": "与 PyTorch 自己的注意力对比检查；超出容差时退出码为 1。",
    "diff": "用相同的权重和输入，把你的注意力与参考实现并排运行，并指出 bug。",
    "demo": "逐步演示学习笔记中 3×3 的例子：先不缩放，再缩放。",
    "explore": "打开一个交互页面：调整尺寸，看每一步的形状随之变化。",
}


def command_summary(name: str, summary: str) -> str:
    """The summary of command ``name`` for ``attntrace --help``: Chinese when the locale is.

    >>> command_summary("run", "Run it.") in ("Run it.", SUMMARIES_ZH["run"])
    True
    """
    from attntrace.text import locale_is_chinese

    return SUMMARIES_ZH.get(name, summary) if locale_is_chinese() else summary


#: The top-level help page as Typer's group describes it (tests/cli/test_help.py compares the two):
#: the root callback's ``--version``, Typer's completion options, and the help option.
PAGE = Page(
    usage="Usage: attntrace [OPTIONS] COMMAND [ARGS]...",
    help=HELP,
    epilog=EPILOG,
    options=(
        Option("--version", VERSION_HELP),
        Option("--install-completion", "Install completion for the current shell."),
        Option(
            "--show-completion",
            "Show completion for the current shell, to copy it or customize the installation.",
        ),
        Option("--help", "Show this message and exit.", short="-h"),
    ),
)
