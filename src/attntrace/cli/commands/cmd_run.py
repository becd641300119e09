"""``attntrace run``: trace one attention and print it."""

from __future__ import annotations

import dataclasses
import sys
import warnings
from collections.abc import Callable, Collection
from pathlib import Path
from typing import Any

import typer

from attntrace.cli import options as opt
from attntrace.cli.configure import config_from_files, origin_line, with_option_groups
from attntrace.cli.root import EPILOG
from attntrace.cli.typer_app import app, cli_errors, console
from attntrace.config.attention_config import AttentionConfig
from attntrace.config.parallel_layout import ParallelLayout
from attntrace.errors import ConfigError
from attntrace.trace import Trace


@app.command(epilog=EPILOG)
@cli_errors
@with_option_groups
def run(
    ctx: typer.Context,
    *,
    sizes: dict[str, Any],
    mask: opt.MaskFile = None,
    backend: opt.Backend = opt.BackendName.numpy,
    numbers: dict[str, Any],
    max_memory: opt.MaxMemory = None,
    head: opt.Head = 0,
    batch_item: opt.BatchItem = 0,
    values: opt.Values = False,
    values_limit: opt.ValuesLimit = 256,
    fmt: opt.Format = opt.OutputFormat.table,
    output_file: opt.DocumentFile = None,  # written by cli_errors: to_document
    no_color: opt.NoColor = False,
    computation: dict[str, Any],
    threads: opt.Threads = None,
    count: opt.Count = opt.CountName.flops,
    layers: opt.Layers = None,
    files: dict[str, Any],
    save: opt.Save = None,
    plot: opt.Plot = None,
    plot_flow: opt.PlotFlow = None,
    model: dict[str, Any],
    serving: dict[str, Any],
    parallel: dict[str, Any],
    backward: opt.Backward = False,
    recompute: opt.Recompute = False,
    grad_output: opt.GradOutput = None,
    explain: opt.Explain = False,
    lang: opt.Lang = None,
    prompt: opt.Prompt = None,
    token: opt.Token = None,
) -> None:
    """Run multi-head attention and print the shape of every step.

    [bold]attntrace run --heads 12 --hidden 768[/] prints (3, 768) -> (3, 12, 64) -> (12, 3, 64)
    -> (12, 3, 3) -> ... -> (3, 768), the weight matrices and the attention weights of one head.

    \b
    --batch 2                       a leading batch axis
    --backend torch                 run on PyTorch
    --hidden 4 --heads 2 --values   every number
    --causal, --kv-heads 4, --rope  the variants of real models
    --preset llama-3-8b             a real model's sizes
    --backend shape                 any size, no arrays (--seq 131072)
    --past 4096 --seq 1             one decode step against a KV cache
    --weights model.safetensors     real weights
    --save trace.npz                keep every tensor
    --explain --lang zh             every step in words (English or Chinese)
    --model DIR --prompt TEXT       a real model on real words (--token I: a row)

    \b
    For scripts:
      [bold]attntrace run --format json | jq -c '.steps[] | [.name, .shape]'[/]
    """
    from attntrace.engine.attention import NONFINITE_NOTE
    from attntrace.learn import check_lang
    from attntrace.render import text_renderer
    from attntrace.render.table import render_trace
    from attntrace.text import plain

    def validate(config: AttentionConfig) -> None:
        check_head(head, config)
        check_batch_item(batch_item, config)
        check_values(values, fmt)
        check_pictures(plot, plot_flow, backend)
        check_layers(layers)
        check_explain(explain, fmt)
        check_token(token, config, fmt, backend)

    # only what is shown; the table view reads one head: that head is made when it is read
    shown_view = fmt.view or plot or token is not None
    keep = True if values or save else {"weights", "masked"} if shown_view else False
    remake = (
        {"weights"} if fmt is opt.OutputFormat.table and keep is not True and not plot else set()
    )
    trace = trace_from_options(
        ctx,
        model,
        validate,
        keep,
        remake=remake,
        **sizes,
        **numbers,
        **computation,
        **files,
        mask=mask,
        backend=backend,
        max_memory=max_memory,
        threads=threads,
        shown=(batch_item, head),
        training=training_options(backward, recompute, grad_output),
        page_size=serving["page_size"],
        layout=across_devices(parallel, serving, layers),
        prompt=prompt,
    )
    check_rank_head(trace, head)
    trace = with_whole_model(trace, layers, model)
    trace = with_serving(trace, serving)  # and --page-size's steps: block_table … v_paged
    if save is not None:
        from attntrace.files import save_trace

        save_trace(trace, save)
    draw_pictures(trace, plot, plot_flow, batch_item)
    for note in trace.notes:
        if note.startswith(NONFINITE_NOTE):  # exit 0, and one line on stderr whatever the format
            sys.stderr.write(f"attntrace: warning: {plain(note)}\n")
    view: dict[str, Any] = {
        "head": head,
        "batch_item": batch_item,
        "values": values,
        "values_limit": values_limit,
        "count": count.value,
    }
    words = check_lang(lang.value if lang is not None else None)
    if fmt.view:
        view |= {"explain": explain, "lang": words}
    if fmt is opt.OutputFormat.table:
        render_trace(trace, console(no_color), **view)
        print_rank_tables(trace, count.value, no_color)
        if token is not None:
            from attntrace.render.token_rows import token_table

            console(no_color).print("", token_table(trace, token, batch_item))
        if trace.serving is not None:  # --past, or a serving option
            from attntrace.render.serving_view import serving_pieces

            for piece in ["", *serving_pieces(trace, count.value)]:
                console(no_color).print(piece)
    elif fmt.picture:
        from attntrace.render.export import export_trace

        sys.stdout.write(export_trace(trace, fmt.value, **view))
    elif fmt is opt.OutputFormat.json:
        from attntrace.render.json_out import render_json

        explained = words if explain else None
        sys.stdout.write(render_json(trace, preset=model.get("preset"), explain=explained))
    else:
        sys.stdout.write(text_renderer(fmt.value, count.value, words if explain else None)(trace))


def print_rank_tables(trace: Trace, count: str, no_color: bool) -> None:
    """--tp, --cp: the rank's cost beside one device's and its collectives (none otherwise)."""
    if trace.parallel is None:
        return
    from attntrace.render.parallel_view import parallel_pieces

    for piece in ["", *parallel_pieces(trace, count)]:
        console(no_color).print(piece)


def trace_from_options(
    ctx: typer.Context,
    model: dict[str, Any],
    validate: Callable[[AttentionConfig], None],
    keep: bool | set[str],
    *,
    mask: Path | None,
    backend: opt.BackendName,
    max_memory: str | None,
    weights: Path | None,
    layer_prefix: str | None,
    input_file: Path | None,
    input_kv: Path | None = None,
    threads: int | None = None,
    remake: Collection[str] = (),
    shown: tuple[int, int] | None = None,
    training: dict[str, Any] | None = None,
    page_size: int | None = None,
    layout: ParallelLayout | None = None,
    prompt: str | None = None,
    **options: Any,
) -> Trace:
    """The trace that run's options describe (also ``report``'s): config from the options and
    files, checked by ``validate``, traced keeping the values of ``keep`` (those of ``remake``
    as recipes made when read, but for the head ``shown`` (batch item, head), which is held:
    see :func:`attntrace.trace_attention`). ``page_size`` is only checked here, before
    tracing: :func:`with_serving` adds its steps after the figures. ``prompt``: --prompt's
    text, whose tokens (and, with --model, the hidden states) replace the seeded x. ``layout``
    (--tp, --cp): the steps of one rank (:func:`attntrace.sharding.trace_parallel`)."""
    from attntrace.engine.attention import trace_attention
    from attntrace.engine.masks import MaskWarning, load_mask
    from attntrace.units import parse_size

    given = read_prompt(ctx, prompt, model, layer_prefix, input_file)
    if given is not None:
        options["seq"] = len(given.tokens.ids)
    config, tensors = config_from_files(
        ctx,
        weights,
        layer_prefix,
        input_file,
        input_kv,
        prompt_x=given.x if given is not None else None,
        **model,
        **options,
    )
    validate(config)
    if page_size is not None:  # the paged cache's modules only when it is asked for
        from attntrace.engine.paged import check_page_size

        check_page_size(page_size, config)
    user_mask = load_mask(mask) if mask is not None else None
    budget = parse_size(max_memory) if max_memory is not None else None
    hold = None if shown is None or not remake else shown if config.batched else shown[1:]
    if layout is not None:
        return _rank_trace(
            ctx, model, config, layout, backend, tensors, user_mask, training, budget
        )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", MaskWarning)  # the renderers show Trace.notes instead
        trace = trace_attention(
            config,
            backend.value,
            mask=user_mask,
            max_memory=budget,
            keep_values=keep,
            remake=remake,
            hold=hold,
            tensors=tensors,
            threads=threads,
            **(training or {}),
        )
    if origin := origin_line(ctx, model, config):
        trace = dataclasses.replace(trace, origin=origin)
    if given is not None:
        origin = f"{trace.origin}; {given.note}" if trace.origin else given.note
        trace = dataclasses.replace(trace, origin=origin, tokens=given.tokens.labels)
    return trace


def across_devices(
    parallel: dict[str, Any], serving: dict[str, Any], layers: int | None
) -> ParallelLayout | None:
    """The layout of --tp, --sp, --cp, --cp-kind, --rank; the options it does not take yet."""
    from attntrace.cli.configure import parallel_layout

    layout = parallel_layout(parallel)
    if layout is not None:
        given = [f"--{k.replace('_', '-')}" for k, v in serving.items() if v is not None]
        if layers is not None:
            given.append("--layers")
        if given:
            raise ConfigError(f"{given[0]} is not traced across devices yet; drop it or --tp/--cp")
    return layout


def _rank_trace(
    ctx: typer.Context,
    model: dict[str, Any],
    config: AttentionConfig,
    layout: ParallelLayout,
    backend: opt.BackendName,
    tensors: Any,
    mask: Any,
    training: dict[str, Any] | None,
    budget: int | None,
) -> Trace:
    """One rank's trace of ``config`` split by ``layout`` (``budget``: --max-memory)."""
    from attntrace.sharding import trace_parallel

    for given, option in ((mask is not None, "--mask"), (bool(training), "--backward")):
        if given:
            raise ConfigError(f"{option} is not traced across devices yet; drop it or --tp/--cp")
    config = dataclasses.replace(config, parallel=layout)
    trace = trace_parallel(config, backend.value, tensors=tensors, max_memory=budget)
    if origin := origin_line(ctx, model, config):
        trace = dataclasses.replace(trace, origin=origin)
    return trace


def read_prompt(
    ctx: typer.Context,
    prompt: str | None,
    model: dict[str, Any],
    layer_prefix: str | None,
    input_file: Path | None,
) -> Any:
    """--prompt's tokens and x (:class:`attntrace.models.prompt.PromptInput`); None without it.
    It sets S, and x with --model: a typed --seq or an --input would contradict it."""
    if prompt is None:
        return None
    from attntrace.cli.configure import typed
    from attntrace.models.prompt import prompt_input

    if input_file is not None:
        raise ConfigError("--prompt gives x (the model's hidden states); drop --input")
    if typed(ctx, "seq"):
        raise ConfigError("--prompt sets S (one position per token); drop --seq")
    if typed(ctx, "batch"):
        raise ConfigError("--prompt is one sequence (the unbatched (S, H) layout); drop --batch")
    return prompt_input(prompt, model.get("model_dir"), model.get("layer"), layer_prefix)


def training_options(backward: bool, recompute: bool, grad_output: Path | None) -> dict[str, Any]:
    """The keyword arguments of trace_attention that --backward, --recompute and --grad-output
    give (none without --backward; the other two need it)."""
    if not backward:
        if recompute or grad_output is not None:
            given = "--recompute" if recompute else "--grad-output"
            raise ConfigError(f"{given} needs --backward; add --backward")
        return {}
    grad = None
    if grad_output is not None:
        from attntrace.files.readers import read_npy

        grad = read_npy(grad_output)
    return {"backward": True, "recompute": recompute, "grad_output": grad}


def with_whole_model(trace: Trace, layers: int | None, model: dict[str, Any]) -> Trace:
    """``trace`` with the figures of L layers like it: --layers L, else the layer count of
    --model, --hf-config or --preset when the config states one."""
    sources = {k: model.get(k) for k in ("preset", "hf_config", "model_dir")}
    if layers is None and all(v is None for v in sources.values()):
        return trace  # nothing says a layer count (and nothing to import)
    from attntrace.config.presets import layer_count
    from attntrace.trace import model_figures

    n = layers if layers is not None else layer_count(**sources)
    return trace if n is None else dataclasses.replace(trace, whole_model=model_figures(trace, n))


def with_serving(trace: Trace, serving: dict[str, Any]) -> Trace:
    """``trace`` with its serving figures (roofline, KV cache) when it is a --past step or a
    serving option is given; the cache of as many layers as the whole model's figures. With
    --page-size, the paged cache's steps too (after the figures, which count the step's own
    traffic): run and report both come here."""
    if trace.parallel is not None or (
        not trace.config.past and all(v is None for v in serving.values())
    ):
        return trace  # (a rank's trace: its own figures, not a server's)
    from attntrace.engine.paged import paged_steps
    from attntrace.engine.serving import CACHE_DTYPES, machine, serving_figures
    from attntrace.units import parse_rate, parse_size

    peak, bandwidth = serving["peak_flops"], serving["bandwidth"]
    roofline = machine(
        parse_rate(peak, "--peak-flops", "989T or 1.98e15") if peak is not None else None,
        parse_rate(bandwidth, "--bandwidth", "3.35TB/s") if bandwidth is not None else None,
    )
    memory = parse_size(serving["memory"]) if serving["memory"] is not None else None
    dtypes = serving["cache_dtype"]
    figures = serving_figures(
        trace,
        roofline=roofline,
        layers=trace.whole_model.layers if trace.whole_model is not None else 1,
        memory=memory,
        cache_dtypes=tuple(d.strip() for d in dtypes.split(",")) if dtypes else CACHE_DTYPES,
        page_size=serving["page_size"],
    )
    return paged_steps(dataclasses.replace(trace, serving=figures), serving["page_size"])


def check_layers(layers: int | None) -> None:
    """--layers counts layers: at least one."""
    if layers is not None and layers < 1:
        raise ConfigError(
            f"--layers must be a whole number >= 1 (the model's layers), got {layers}"
        )


def check_rank_head(trace: Trace, head: int) -> None:
    """--head of a rank's trace (--tp, --cp) names one of the heads that rank holds."""
    if trace.parallel is None or "weights" not in trace:
        return
    held = trace["weights"].shape[1 if trace.config.batched else 0]
    if head >= held:
        raise ConfigError(
            f"--head {head} is not on this rank, which holds {held} heads; use 0 to {held - 1} "
            "(or --rank to show another rank)"
        )


def check_head(head: int, config: AttentionConfig) -> None:
    """--head must name one of the config's heads."""
    if not 0 <= head < config.heads:
        # --head picks the head shown; --heads is the head count (an easy slip to make)
        count = (
            f" (--head picks the head shown; the count is --heads {head})"
            if head >= config.heads
            else ""
        )
        raise ConfigError(f"--head {head} does not exist; use 0 to {config.heads - 1}{count}")


def check_pictures(plot: Path | None, plot_flow: Path | None, backend: opt.BackendName) -> None:
    """Refuse a --plot or --plot-flow that cannot be written, before tracing."""
    if plot is not None:
        from attntrace.render.plot import check_plot_path

        check_plot_path(plot)
        if backend is opt.BackendName.shape:
            raise ConfigError(
                "--plot draws the attention weights, which --backend shape "
                "does not compute; use numpy or torch"
            )
    if plot_flow is not None and plot_flow.suffix.lower() != ".svg":
        raise ConfigError(f"--plot-flow {plot_flow}: the file name must end in .svg")


def draw_pictures(trace: Trace, plot: Path | None, plot_flow: Path | None, batch_item: int) -> None:
    """Write the heat-map grid (--plot) and the flow diagram (--plot-flow)."""
    if plot is not None:
        from attntrace.render.plot import plot_heads

        plot_heads(trace, plot, batch_item=batch_item)
    if plot_flow is not None:
        from attntrace.files.output import write_output
        from attntrace.render.flow import render_flow_svg

        write_output(plot_flow, render_flow_svg(trace).encode("utf-8"))


def check_token(
    token: int | None,
    config: AttentionConfig,
    fmt: opt.OutputFormat | None = None,
    backend: opt.BackendName = opt.BackendName.numpy,
) -> None:
    """--token must name one of the S query positions, of weights that are formed and
    computed; run shows its rows in the table view (``fmt`` None: report's page)."""
    if token is None:
        return
    if not 0 <= token < config.seq:
        raise ConfigError(f"--token {token} does not exist; use 0 to {config.seq - 1}")
    if fmt is not None and fmt is not opt.OutputFormat.table:
        raise ConfigError(
            f"--token shows its rows in the table view, not --format {fmt.value}; drop --token, "
            "or use attntrace report --token for a page"
        )
    if config.algorithm == "flash":
        raise ConfigError(
            "--token reads the attention weights, which --algorithm flash never forms whole; "
            "drop --algorithm flash"
        )
    if backend is opt.BackendName.shape:
        raise ConfigError(
            "--token reads the attention weights, which the shape backend does not compute; "
            "use --backend numpy or torch"
        )


def check_batch_item(item: int, config: AttentionConfig) -> None:
    """--batch-item must name one of the batch's items (only 0 without --batch)."""
    size = config.batch if config.batch is not None else 1
    if not 0 <= item < size:
        fix = (
            f"use 0 to {size - 1}"
            if config.batch is not None
            else "add --batch or drop --batch-item"
        )
        raise ConfigError(f"--batch-item {item} does not exist; {fix}")


def check_explain(explain: bool, fmt: opt.OutputFormat) -> None:
    """--explain writes words into the table view, json and markdown; csv has no place."""
    if explain and fmt is opt.OutputFormat.csv:
        raise ConfigError(
            "--explain works with --format table, json, markdown, svg or html, not csv; "
            "drop --explain or pick one of those"
        )


def check_values(values: bool, fmt: opt.OutputFormat) -> None:
    """--values prints numbers in the table view only (and its svg and html pictures)."""
    if values and not fmt.view:
        raise ConfigError(
            f"--values only works with --format table, svg or html, not {fmt.value}; drop --values"
        )
