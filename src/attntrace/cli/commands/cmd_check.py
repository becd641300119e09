"""``attntrace check``: trace configs and compare their shapes with expectations, exit 0 or 1."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from attntrace.cli import options as opt
from attntrace.cli.commands.cmd_trace import Init, Into, Timeout, TraceTarget
from attntrace.cli.configure import with_option_groups
from attntrace.cli.root import EPILOG
from attntrace.cli.typer_app import app, cli_errors, console, fail
from attntrace.config.attention_config import AttentionConfig
from attntrace.errors import EXIT_CHECK_FAILED, ConfigError

if TYPE_CHECKING:
    from attntrace.tools.check import CaseResult


@app.command(epilog=EPILOG)
@cli_errors
@with_option_groups
def check(
    *,
    sizes: dict[str, Any],
    backend: opt.CheckBackend = opt.BackendName.shape,
    numbers: dict[str, Any],
    max_memory: opt.MaxMemory = None,
    computation: dict[str, Any],
    layer_prefix: opt.LayerPrefix = None,
    expect: opt.Expect = None,
    golden: opt.Golden = None,
    spec: opt.Spec = None,
    trace_target: TraceTarget = None,
    init: Init = None,
    into: Into = None,
    timeout: Timeout = 60.0,
    fmt: opt.CheckFormat = opt.CheckFormatName.table,
    output_file: opt.DocumentFile = None,  # written by cli_errors: to_document
    verbose: opt.Verbose = False,
    no_color: opt.NoColor = False,
    lang: opt.Lang = None,
    model: dict[str, Any],
    page_size: opt.PageSize = None,
    backward: opt.Backward = False,
    parallel: dict[str, Any],
) -> None:
    """Check the shapes of a trace: exit 1 when one is not what you expect.

    Exit 2 when a config of a --spec cannot be checked (the others still are). Takes the
    size, variant and preset options of run.

    \b
    [bold]attntrace check --heads 12 --hidden 768 --expect scores=h,S,S[/]
    [bold]attntrace check --preset llama-3-8b --seq 16 --expect k_proj=S,g*d[/]
    [bold]attntrace check --golden trace.json[/]   saved by run --format json > trace.json
    [bold]attntrace check --spec shapes.toml[/]    many configs: N passed, M failed
    [bold]attntrace check --trace attn.py:Attn --expect weights=h,S,S[/]   your code
    [bold]attntrace check --spec shapes.toml --format junit > report.xml[/]
    [bold]attntrace check --past 9 --seq 1 --page-size 4 --expect k_paged=g,N+S,d[/]
    [bold]attntrace check --heads 8 --seq 8 --tp 4 --cp 2 --expect q=h/T,S/C,d[/]

    With GITHUB_ACTIONS=true, failures are also annotations on the spec's lines.
    """
    from attntrace.cli.configure import parallel_layout, resolve_options
    from attntrace.tools.check import load_spec, run_spec
    from attntrace.units import parse_size

    budget = parse_size(max_memory) if max_memory is not None else None
    if page_size is not None and (trace_target is not None or spec is not None):
        given = "--trace" if trace_target is not None else "--spec"
        raise ConfigError(
            f"--page-size pages run's own trace, not {given}'s; drop --page-size (or {given})"
        )
    layout = _rank_layout(parallel_layout(parallel), trace_target, spec)
    if into and trace_target is None:
        raise ConfigError("--into needs --trace: it names a package whose code --trace records")
    if trace_target is not None:
        from attntrace.cli.commands.cmd_trace import check_captured

        if spec is not None:
            raise ConfigError("--trace cannot be combined with --spec; give --expect or --golden")
        inputs = (
            sizes["batch"],
            sizes["seq"],
            sizes["hidden"],
            numbers["dtype"].value,
            numbers["seed"],
        )
        results = [
            check_captured(
                trace_target,
                init or [],
                inputs,
                expect or [],
                golden,
                no_color,
                into=into or (),
                timeout=timeout,
                budget=budget,
            )
        ]
    elif spec is not None:
        if expect or golden is not None:
            raise ConfigError(
                "--spec cannot be combined with --expect or --golden; put them into the spec file"
            )
        results = run_spec(load_spec(spec, backend.value, keep_going=True), budget, keep_going=True)
    else:
        config = resolve_options(
            **model, **sizes, **numbers, **computation, layer_prefix=layer_prefix
        )
        if layout is not None:
            from dataclasses import replace

            config = replace(config, parallel=layout)
        results = [
            check_one(config, backend.value, expect or [], golden, budget, backward, page_size)
        ]
    report(results, fmt, spec, verbose=verbose, no_color=no_color)
    for r in results:
        if r.error:
            error = fail(r.error)  # one line each on stderr; exit 2
    if any(r.error for r in results):
        raise error
    if not all(r.ok for r in results):
        raise typer.Exit(EXIT_CHECK_FAILED)


def _rank_layout(layout: Any, trace_target: Any, spec: Path | None) -> Any:
    """--tp/--cp check run's own trace of a rank: not --trace's nor a --spec's."""
    if layout is not None and (trace_target is not None or spec is not None):
        given = "--trace" if trace_target is not None else "--spec"
        raise ConfigError(f"--tp/--cp check run's own rank trace, not {given}'s; drop one")
    return layout


def report(
    results: list[CaseResult],
    fmt: opt.CheckFormatName,
    spec: Path | None,
    *,
    verbose: bool,
    no_color: bool,
) -> None:
    """Print the results as ``fmt`` on stdout, and GitHub annotations when GITHUB_ACTIONS=true
    (on stdout after a table; on stderr when stdout holds a JSON or XML document)."""
    from attntrace.render.check_report import github_annotations, render_json_report, render_junit
    from attntrace.render.check_view import render_results

    if fmt is opt.CheckFormatName.table:
        render_results(results, console(no_color), spec=spec is not None, verbose=verbose)
    else:
        sys.stdout.write(
            (render_json_report if fmt is opt.CheckFormatName.json else render_junit)(results, spec)
        )
    if os.environ.get("GITHUB_ACTIONS") == "true":
        stream = sys.stdout if fmt is opt.CheckFormatName.table else sys.stderr
        stream.write("".join(f"{line}\n" for line in github_annotations(results, spec)))


def check_one(
    config: AttentionConfig,
    backend: str,
    expect: list[str],
    golden: Path | None,
    budget: int | None,
    backward: bool = False,
    page_size: int | None = None,
) -> CaseResult:
    """Trace ``config`` and check it against the --expect values and the --golden file (with
    the backward steps under --backward, or when the golden is a version-2 document; with
    the paged cache's steps under --page-size)."""
    from attntrace.engine.attention import trace_attention
    from attntrace.engine.paged import check_page_size, paged_steps
    from attntrace.tools.check import check_trace, golden_fits, load_golden, parse_expectation

    if not expect and golden is None:
        raise ConfigError(
            "nothing to check; give --expect STEP=SHAPE, --golden FILE or --spec FILE.toml"
        )
    check_page_size(page_size, config)
    expectations = [parse_expectation(e) for e in expect]
    reference = load_golden(golden) if golden is not None else None
    if reference is not None:
        golden_fits(reference)  # before tracing: a golden of the user's code needs --trace
    from attntrace.trace import SCHEMA_ID_2

    backward = backward or (reference is not None and reference.get("schema") == SCHEMA_ID_2)
    if config.parallel is not None:  # --tp, --cp: the shown rank's steps
        from attntrace.sharding import trace_parallel

        if backward or page_size is not None:
            given = "--backward" if backward else "--page-size"
            raise ConfigError(f"{given} is not traced across devices yet; drop it or --tp/--cp")
        return check_trace(
            trace_parallel(config, backend, keep_values=False), expectations, reference
        )
    trace = trace_attention(
        config, backend, max_memory=budget, keep_values=False, backward=backward
    )
    return check_trace(paged_steps(trace, page_size), expectations, reference)
