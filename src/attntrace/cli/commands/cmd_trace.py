"""``attntrace trace``: run the user's attention code and print the shape of every op."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from attntrace.cli import options as opt
from attntrace.cli.root import EPILOG
from attntrace.cli.typer_app import app, cli_errors, command_lang, console
from attntrace.errors import EXIT_CHECK_FAILED, EXIT_USAGE

if TYPE_CHECKING:
    from rich.console import Console

    from attntrace.capturing.ranks import RankRuns
    from attntrace.capturing.runner import Outcome
    from attntrace.capturing.sandbox import Ended
    from attntrace.learn import Lang
    from attntrace.tools.check import CaseResult

CODE = "Your code"


class ArrayName(StrEnum):
    """The kind of array a NAME target is called with."""

    numpy = "numpy"
    torch = "torch"


class TraceFormatName(StrEnum):
    """What ``trace`` prints: the Rich table, or one document for scripts."""

    table = "table"
    json = "json"
    csv = "csv"
    markdown = "markdown"


TraceFormat = Annotated[
    TraceFormatName,
    typer.Option(
        "--format",
        "-f",
        help="table (Rich, for people), or one document on stdout for scripts (the code's own "
        "prints go to stderr): json (schema attntrace.capture/2: steps, axis sizes and the "
        "failure, null when none), csv (run's columns, the costs left empty, then role), "
        "markdown.",
        rich_help_panel=opt.OUTPUT,
    ),
]
Target = Annotated[
    str,
    typer.Argument(
        help="script.py, FILE.py:NAME or package.module:NAME "
        "(an nn.Module class, a module, or a function of one array).",
        show_default=False,
    ),
]
Args = Annotated[
    list[str] | None, typer.Argument(help="Arguments of the script (after --).", show_default=False)
]
Init = Annotated[
    list[str] | None,
    typer.Option(
        "--init",
        metavar="KEY=VALUE",
        help="Constructor argument of an nn.Module class NAME, repeatable; "
        "values are Python literals.",
        rich_help_panel=CODE,
        show_default=False,
    ),
]
Axes = Annotated[
    str | None,
    typer.Option(
        help="Sizes of axis letters that the sizes alone cannot tell apart, e.g. h=12,d=64.",
        rich_help_panel=CODE,
        show_default=False,
    ),
]
Into = Annotated[
    list[str] | None,
    typer.Option(
        metavar="PACKAGE",
        help="Also record the ops inside this installed package (repeatable), e.g. "
        "--into transformers: the lines of its attention modules instead of one row per call.",
        rich_help_panel=CODE,
        show_default=False,
    ),
]
NoInto = Annotated[
    bool,
    typer.Option(
        "--no-into",
        help="A library's class (transformers:LlamaAttention) as one row: do not record the ops "
        "inside its package (recorded by default for such a target).",
        rich_help_panel=CODE,
        show_default=False,
    ),
]
Array = Annotated[
    ArrayName | None,
    typer.Option(
        help="Call NAME with a numpy array or a torch tensor \\[default: torch for modules "
        "and for functions whose file imports torch].",
        rich_help_panel=CODE,
        show_default=False,
    ),
]
TraceHidden = Annotated[
    int | None,
    typer.Option(
        help="H of the input x \\[default: the module's embed_dim / hidden_size / "
        "first Linear, else 768].",
        rich_help_panel=opt.SIZES,
        show_default=False,
    ),
]
TraceTarget = Annotated[
    str | None,
    typer.Option(
        "--trace",
        metavar="TARGET",
        help="Check the shapes of your own code instead: script.py, FILE.py:NAME or "
        "package.module:NAME, as attntrace trace runs it; steps by name or by role.",
        rich_help_panel="Checks",
        show_default=False,
    ),
]
TraceDType = Annotated[
    opt.DTypeName,
    typer.Option(
        "--dtype",
        help="Element type of x; an nn.Module target's weights are converted to it (a module "
        "instance is copied first). bfloat16 needs a torch tensor: a module, a torch function "
        "or --array torch.",
        rich_help_panel=CODE,
    ),
]
TraceInput = Annotated[
    Path | None,
    typer.Option(
        "--input", help="x from a .npy file for a NAME target.", rich_help_panel=opt.FILES
    ),
]

TracePast = Annotated[
    str | None,
    typer.Option(
        "--past",
        metavar="N",
        help="Call a NAME module as a decode step: after a prefill of N seeded tokens (not "
        "traced) made its KV cache, the traced call passes it (a (k, v) argument layer_past, "
        "past_key_value, kv_cache …, or a transformers class's DynamicCache).",
        rich_help_panel=CODE,
        show_default=False,
    ),
]

Opaque = Annotated[
    bool,
    typer.Option(
        "--opaque",
        help="Keep each fused attention kernel (F.scaled_dot_product_attention, flex_attention) "
        "one row per call, as it runs; without it its steps are replayed from its arguments and "
        "shown at the line of the call (k_t, scores, scaled, mask, masked, weights, context).",
        rich_help_panel=CODE,
        show_default=False,
    ),
]


Timeout = Annotated[
    float,
    typer.Option(
        "--timeout",
        metavar="SECONDS",
        min=0.1,
        help="Stop the code under test after this many seconds (it runs in a child process, "
        "its memory limited to --max-memory or the default budget); what it ran is shown, "
        "exit 1 \\[default: 60].",
        rich_help_panel=CODE,
        show_default=False,
    ),
]


def _script_request(path: Path, argv: Sequence[str], into: Sequence[str]) -> dict[str, Any]:
    from attntrace.capturing.runner import check_torch

    check_torch(path)
    return {"kind": "script", "script": str(path), "argv": list(argv), "into": list(into)}


def _target_request(
    target: str, init: dict[str, Any], inputs: dict[str, Any], into: Sequence[str]
) -> dict[str, Any]:
    from attntrace.capturing.sandbox import _encode

    return {
        "kind": "target",
        "target": target,
        "init": _encode(init),
        "inputs": inputs,
        "into": list(into),
    }


def sandboxed(
    request: dict[str, Any],
    letters: dict[str, int],
    timeout: float,
    *,
    table: bool = False,
    budget: int | None = None,
) -> Outcome | Ended:
    """The request run in a child process (see :mod:`attntrace.capturing.sandbox`); the
    code's prints on stdout beside a table, on stderr beside a document."""
    from attntrace.capturing.sandbox import run_in_child

    prints = sys.stdout if table else sys.stderr
    result = run_in_child(request, axes=letters, timeout=timeout, budget=budget, prints=prints)
    if isinstance(result, dict):
        raise RuntimeError("the child of trace answered a report")
    return result


@app.command(epilog=EPILOG)
@cli_errors
def trace(
    target: Target,
    args: Args = None,
    init: Init = None,
    batch: opt.Batch = None,
    seq: opt.Seq = 3,
    hidden: TraceHidden = None,
    dtype: TraceDType = opt.DTypeName.float32,
    seed: opt.Seed = 0,
    past: TracePast = None,
    array: Array = None,
    input_file: TraceInput = None,
    axes: Axes = None,
    into: Into = None,
    no_into: NoInto = False,
    opaque: Opaque = False,
    fmt: TraceFormat = TraceFormatName.table,
    output_file: opt.DocumentFile = None,  # written by cli_errors: to_document
    timeout: Timeout = 60.0,
    max_memory: opt.MaxMemory = None,
    no_color: opt.NoColor = False,
    explain: opt.Explain = False,
    lang: opt.Lang = None,
    nproc: opt.CodeNproc = None,
    shard_x: opt.ShardX = opt.ShardXName.none,
    rank: opt.ShowRank = None,
) -> None:
    """Run your attention code and print the shape of every tensor op in your files.

    A wrong shape is explained: the failing line, its operands' axes, the rule and a fix
    (exit 1).

    \b
    [bold]attntrace trace examples/seed_001_numpy.py[/]   a script, run as python would
    [bold]attntrace trace attn.py:Attention --init embed_dim=768 --batch 2[/]
    [bold]attntrace trace attn.py:Attention --format json[/]   for scripts
    [bold]attntrace trace tp_attn.py:ParallelAttention --nproc 2[/]   every rank's ops
    """
    from attntrace.capturing.runner import parse_init, parse_target

    letters = _axes(axes)
    spec = parse_target(target, args or [])
    _check_ranks(nproc, rank, spec.name, past, explain, fmt.value)
    if spec.name is None:
        if init:
            raise _usage("--init needs FILE.py:NAME or package.module:NAME, not a script")
        if past:
            raise _usage("--past needs FILE.py:NAME or package.module:NAME, not a script")
        # the table and the documents show shapes: no values are kept (and copied)
        request = _script_request(spec.path or Path(target), spec.argv, into or ())
    else:
        inputs = {
            "batch": batch,
            "seq": seq,
            "hidden": hidden,
            "dtype": dtype.value,
            "seed": seed,
            "array": array.value if array else None,
            "input_file": None if input_file is None else str(input_file),
            "past": _past(past),
        }
        packages = ("",) if no_into else tuple(into or ())  # ("",): none, even by default
        request = _target_request(target, parse_init(init or []), inputs, packages)
    request["opaque"] = opaque
    budget = None if max_memory is None else _size(max_memory)
    if nproc is not None:  # every rank its own sandbox child (capturing/ranks.py)
        from attntrace.capturing.ranks import run_ranks

        prints = sys.stdout if fmt.value == "table" else sys.stderr
        ranked = {**request, "shard": shard_x.value}
        runs = run_ranks(ranked, nproc, axes=letters, timeout=timeout, budget=budget, prints=prints)
        cut = (
            f"x: each rank's S/{nproc} of the {seq} tokens (--shard-x seq)"
            if shard_x.value == "seq"
            else ""
        )
        show_ranks(runs, fmt.value, no_color, target, rank, cut)
        return
    words = _explained(explain, lang, fmt.value)
    result = sandboxed(request, letters, timeout, table=fmt.value == "table", budget=budget)
    show(result, fmt.value, no_color, target, explain=words, lang=_lang(lang))


def _check_ranks(
    nproc: int | None, rank: int | None, name: str | None, past: str | None, explain: bool, fmt: str
) -> None:
    """--nproc's company, refused in one line before anything runs."""
    if nproc is None:
        if rank is not None:
            raise _usage("--rank shows one rank of --nproc N; add --nproc N")
        return
    from attntrace.capturing.ranks import check_nproc

    check_nproc(nproc)
    if name is None:
        raise _usage("--nproc needs FILE.py:NAME or package.module:NAME, not a script")
    if past or explain:
        raise _usage(f"--nproc does not take {'--past' if past else '--explain'}; drop it")
    if fmt not in ("table", "json"):
        raise _usage(f"trace --nproc prints a table or json, not {fmt}; give --format json")
    if rank is not None and not 0 <= rank < nproc:
        raise _usage(f"--rank {rank} is not a rank of --nproc {nproc}; give 0 to {nproc - 1}")


def show_ranks(
    runs: RankRuns, fmt: str, no_color: bool, title: str, rank: int | None, note: str = ""
) -> None:
    """Every rank's steps (or rank ``rank``'s), then the one line of the first failure, its
    shape error explained (exit 1)."""
    from attntrace.render.ranks_view import ranks_document, render_ranks

    shown = list(range(runs.world)) if rank is None else [rank]
    captures = [runs.outcomes()[r].capture for r in shown]
    moved = [runs.collectives()[r] for r in shown]
    if fmt == "json":
        failures = [runs.failure_dict(r) for r in shown]
        failed = None if runs.line is None else {"rank": runs.rank, "line": runs.line}
        import json

        doc = ranks_document(captures, moved, failures, failed, world=runs.world, numbers=shown)
        typer.echo(json.dumps(doc, indent=2))
    else:
        out = console(no_color)
        render_ranks(captures, moved, out, title=title, numbers=shown, world=runs.world, note=note)
    if runs.line is not None:
        _explain_rank(runs, no_color if fmt == "table" else True)
        sys.stderr.write(f"attntrace: {runs.line}\n")
        raise typer.Exit(EXIT_CHECK_FAILED)
    if not any(c.steps for c in captures):
        sys.stderr.write(f"attntrace: error: {NOTHING_RECORDED}\n")
        raise typer.Exit(EXIT_USAGE)


def _explain_rank(runs: RankRuns, no_color: bool) -> None:
    """The failing rank's shape error explained, as trace explains one (on stderr)."""
    from attntrace.capturing.explain import told, with_first_wrong
    from attntrace.render.capture_view import render_failure

    if runs.rank is None:
        return
    outcome = runs.outcomes()[runs.rank]
    failure = outcome.capture.failure
    if failure is not None and failure.error is outcome.error and failure.kind != "collective":
        steps = outcome.capture.steps
        render_failure(failure, with_first_wrong(told(failure), steps), _stderr(no_color))


def _lang(lang: opt.LangName | None) -> Lang:
    """The language of the view's words: --lang, else the locale."""
    from attntrace.learn import check_lang

    return check_lang(lang.value if lang is not None else None)


def _past(text: str | None) -> int:
    from attntrace.cli.configure import parse_past

    return parse_past(text) or 0


def _explained(explain: bool, lang: opt.LangName | None, fmt: str) -> Lang | None:
    """--explain's language (None without it); the words go into the table view only."""
    from attntrace.learn import check_lang

    if explain and fmt != "table":
        raise _usage(f"trace --explain works with --format table, not {fmt}; drop --explain")
    return check_lang(lang.value if lang is not None else None) if explain else None


def _size(text: str) -> int:
    from attntrace.units import parse_size

    return parse_size(text)


def _axes(text: str | None) -> dict[str, int]:
    from attntrace.capturing.axes import parse_axes

    return parse_axes(text) if text else {}


#: The one line of a run that recorded no tensor operation (exit 2).
NOTHING_RECORDED = (
    "no tensor operation was recorded: the code made no torch tensor or numpy array that "
    "attntrace sees; make the arrays in the traced code (np.array, np.random.default_rng(), "
    "np.load, torch.randn ...) or trace a function or module as FILE.py:NAME"
)


def _usage(message: str) -> Exception:
    from attntrace.errors import ConfigError

    return ConfigError(message)


def show(
    result: Outcome | Ended,
    fmt: str,
    no_color: bool,
    title: str,
    explain: Lang | None = None,
    lang: Lang | None = None,
) -> None:
    """Print the capture (and what broke); exit 1 when the user's code raised. A child that
    did not end normally: the steps it ran, then one line saying what happened (exit 1)."""
    from attntrace.capturing.explain import told, with_first_wrong
    from attntrace.capturing.sandbox import Ended
    from attntrace.render.capture_view import render_capture, render_error, render_failure
    from attntrace.render.speaking import in_words

    lang = lang or command_lang()  # check --trace: the running command's language
    ended = result if isinstance(result, Ended) else None
    outcome = result.outcome if isinstance(result, Ended) else result
    t = outcome.capture
    if ended is not None and outcome.error is not None and fmt != "json":
        outcome.error = None  # the one line says it; the document's failure too (json)
    out = in_words(console(no_color), lang)
    if fmt == "table":
        render_capture(t, out, title=title)
        if explain is not None:
            from attntrace.render.table import roles_table

            if (words := roles_table(t, explain)) is not None:
                out.print()
                out.print(words)
    elif fmt != "none":
        from attntrace.render.capture_view import render_document

        typer.echo(render_document(t, fmt, outcome.error, outcome.frames), nl=False)
    if ended is not None:
        from attntrace.text import plain

        sys.stderr.write(plain(_said(f"attntrace: {ended.line}", lang)) + "\n")
        raise typer.Exit(EXIT_CHECK_FAILED)
    if outcome.error is None:
        if outcome.exit_code:  # sys.exit(N): the user's code failed, in attntrace's codes
            said = _said(f"attntrace: the traced code called sys.exit({outcome.exit_code})", lang)
            sys.stderr.write(said + "\n")
            raise typer.Exit(1)
        if not t.steps:  # a CI job must not pass on a trace that saw nothing
            sys.stderr.write(f"attntrace: error: {NOTHING_RECORDED}\n")
            raise typer.Exit(EXIT_USAGE)
        return
    err = in_words(console(no_color) if fmt == "table" else _stderr(no_color), lang)
    failure = t.failure
    if failure is not None and failure.error is outcome.error:
        render_failure(failure, with_first_wrong(told(failure), t.steps), err)
    else:
        render_error(outcome.error, outcome.frames, err)
    raise typer.Exit(EXIT_CHECK_FAILED)


def _said(line: str, lang: Lang) -> str:
    """A line of stderr in ``lang``."""
    from attntrace.learn.lang import translate

    return translate(line, lang)


def _stderr(no_color: bool) -> Console:
    from rich.console import Console

    return Console(stderr=True, no_color=True if no_color else None)


def check_captured(
    target: str,
    init: list[str],
    sizes: tuple[int | None, int, int | None, str, int],
    expect: list[str],
    golden: Path | None,
    no_color: bool,
    *,
    into: Sequence[str] = (),
    timeout: float = 60.0,
    budget: int | None = None,
) -> CaseResult:
    """``check --trace``: run the target (in a child, ``timeout`` seconds at most) and check
    its captured steps (by name or role); ``into`` as for trace."""
    from attntrace.capturing.runner import parse_init, parse_target
    from attntrace.capturing.sandbox import Ended
    from attntrace.errors import ConfigError
    from attntrace.tools.check import check_trace, load_golden, parse_expectation

    if not expect and golden is None:
        raise ConfigError("nothing to check; give --expect STEP=SHAPE or --golden FILE.json")
    expectations = [parse_expectation(e) for e in expect]
    reference = load_golden(golden) if golden is not None else None
    spec = parse_target(target)
    if spec.name is None:
        request = _script_request(spec.path or Path(target), (), into)
    else:
        batch, seq, hidden, dtype, seed = sizes
        inputs = {"batch": batch, "seq": seq, "hidden": hidden, "dtype": dtype, "seed": seed}
        request = _target_request(target, parse_init(init), inputs, into)
    result = sandboxed(request, {}, timeout, budget=budget)
    if isinstance(result, Ended) or result.error is not None:
        show(result, "none", no_color, target)
    outcome = result.outcome if isinstance(result, Ended) else result
    return check_trace(outcome.capture, expectations, reference, target)
