"""``attntrace verify``: compare numpy, torch, nn.MultiheadAttention and SDPA."""

from __future__ import annotations

import inspect
import json
import math
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

import typer

from attntrace.cli import options as opt
from attntrace.cli.configure import with_option_groups
from attntrace.cli.typer_app import app, cli_errors, console
from attntrace.config.parallel_layout import ParallelLayout
from attntrace.errors import EXIT_CHECK_FAILED, ConfigError

if TYPE_CHECKING:
    from attntrace.tools.verify import Comparison, VerifyReport

F = TypeVar("F", bound=Callable[..., Any])
#: The ``schema`` of ``attntrace verify --format json``.
VERIFY_SCHEMA = "attntrace.verify/1"


def _verify_help(command: F) -> F:
    """verify's own --dtype help (the shared one speaks of a --backend verify does not have)."""
    signature = inspect.signature(command)
    parameters = [
        p.replace(annotation=opt.VerifyDType) if p.name == "dtype" else p
        for p in signature.parameters.values()
    ]
    command.__signature__ = signature.replace(parameters=parameters)  # type: ignore[attr-defined]
    return command


@app.command()
@cli_errors
@_verify_help
@with_option_groups
def verify(
    ctx: typer.Context,
    *,
    sizes: dict[str, Any],
    mask: opt.MaskFile = None,
    numbers: dict[str, Any],
    max_memory: opt.MaxMemory = None,
    computation: dict[str, Any],
    files: dict[str, Any],
    model: dict[str, Any],
    page_size: opt.PageSize = None,
    fmt: opt.VerifyFormat = opt.ListingFormatName.table,
    output_file: opt.DocumentFile = None,  # written by cli_errors: to_document
    backward: opt.Backward = False,
    parallel: dict[str, Any],
    nproc: opt.Nproc = None,
    timeout: opt.NprocTimeout = 120.0,
    lang: opt.Lang = None,
) -> None:
    """Check the trace against PyTorch's own attention; exit 1 beyond tolerance.

    numpy vs torch at every step, and the output and attention weights vs
    nn.MultiheadAttention and F.scaled_dot_product_attention, for every variant (masks,
    cross, GQA, RoPE, presets, --algorithm flash). Exit 0 when every difference is within
    the dtype's tolerance, 1 when one is not, 2 when torch is missing (the line says how to
    install it). --backward: every gradient too, against torch autograd (plain eager torch,
    SDPA, nn.MultiheadAttention), and the saved bytes against what autograd saves. Needs torch:
    the torch extra, attntrace\\[torch] (on Linux its CPU wheel: docs/getting-started.md#pytorch).
    --past N --page-size P: the paged cache's steps too,
    and its gather k_paged / v_paged bit-equal to k_all / v_all.

    \b
    Example:
      [bold]attntrace verify --preset llama-3-8b --hidden 256 --heads 8 --seq 16[/]
    """
    from attntrace.cli.configure import config_from_files
    from attntrace.engine.masks import load_mask
    from attntrace.tools.verify import verify_attention
    from attntrace.units import parse_size

    config, tensors = config_from_files(ctx, **files, **model, **sizes, **numbers, **computation)
    layout = _layout(parallel, nproc, mask, backward, page_size, tensors)
    if layout is not None:
        from dataclasses import replace

        from attntrace.tools.verify_ranks import verify_ranks, verify_simulated

        ranked = replace(config, parallel=layout)
        report = (
            verify_ranks(ranked, nproc, timeout=timeout)
            if nproc is not None
            else verify_simulated(ranked)
        )
        _show(report, fmt)
        return
    user_mask = load_mask(mask) if mask is not None else None
    budget = parse_size(max_memory) if max_memory is not None else None
    report = verify_attention(
        config,
        tensors=tensors,
        mask=user_mask,
        max_memory=budget,
        backward=backward,
        page_size=page_size,
    )
    _show(report, fmt)


def _show(report: VerifyReport, fmt: opt.ListingFormatName) -> None:
    """The report in ``fmt``; exit 1 when a comparison is beyond tolerance."""
    from attntrace.render.verify_view import render_verify

    if fmt is opt.ListingFormatName.json:
        sys.stdout.write(json.dumps(verify_document(report), indent=2) + "\n")
    else:
        render_verify(report, console())
    if not report.ok:
        raise typer.Exit(EXIT_CHECK_FAILED)


def _layout(
    parallel: dict[str, Any], nproc: int | None, mask: Any, backward: bool, page: Any, tensors: Any
) -> ParallelLayout | None:
    """--tp, --cp … for verify, and the options it does not take with them."""
    from attntrace.cli.configure import parallel_layout

    layout = parallel_layout(parallel)
    if layout is None:
        if nproc is not None:
            raise ConfigError("--nproc starts one process a rank; add --tp T and/or --cp C")
        return None
    given = {"--mask": mask is not None, "--backward": backward, "--page-size": page is not None}
    given["--weights/--input"] = any(v is not None for v in tensors.values())
    for option, on in given.items():
        if on:
            raise ConfigError(f"{option} is not verified across devices yet; drop it or --tp/--cp")
    return layout


def verify_document(report: VerifyReport) -> dict[str, Any]:
    """The report as ``--format json`` prints it (schema ``attntrace.verify/1``); a difference
    that is not a finite number (shapes that differ, a NaN) is null, and so is a skipped one.

    >>> from attntrace.config.attention_config import AttentionConfig
    >>> from attntrace.tools.verify import Comparison, Tolerance, VerifyReport
    >>> c = Comparison("x", "numpy", "torch", (3, 4), 0.0, 0.0, True)
    >>> doc = verify_document(VerifyReport(AttentionConfig(), Tolerance(1e-4, 1e-5), (c,), ()))
    >>> doc["ok"], doc["compared"], doc["steps"][0]["shape"], doc["tolerance"]["rtol"]
    (True, 1, [3, 4], 0.0001)
    """
    return {
        "schema": VERIFY_SCHEMA,
        "config": report.config.to_dict(),
        "tolerance": {"rtol": report.tolerance.rtol, "atol": report.tolerance.atol},
        "ok": report.ok,
        "compared": report.compared,
        "failed": len(report.failures),
        "steps": [_comparison(c) for c in report.steps],
        "references": [_comparison(c) for c in report.references],
        "notes": list(report.notes),
    }


def _comparison(c: Comparison) -> dict[str, Any]:
    def number(x: float) -> float | None:
        return x if c.skipped is None and math.isfinite(x) else None

    return {
        "name": c.name,
        "left": c.left,
        "right": c.right,
        "shape": list(c.shape),
        "max_abs": number(c.max_abs),
        "max_rel": number(c.max_rel),
        "ok": c.ok,
        "skipped": c.skipped,
    }
