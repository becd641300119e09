"""What ``attntrace diff TARGET`` runs: the target loaded and built, sizes from the options
and the module, then :func:`attntrace.diffing.run_diff`."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from attntrace.config.attention_config import AttentionConfig
from attntrace.diffing.diff_report import DiffReport, cannot_tell_report, diff_layer, probe_sizes
from attntrace.diffing.layer import as_layer
from attntrace.errors import AttntraceError, CannotTellError, ConfigError


def diff_target(
    text: str,
    init: Sequence[str],
    config: AttentionConfig,
    typed: set[str],
    input_file: Path | None,
    max_memory: int | None = None,
    backward: bool = False,
) -> DiffReport:
    """Load ``text`` (FILE.py:NAME or package.module:NAME), build it with ``init``, and diff it
    under ``config`` (``typed``: the options the user gave, which the module must agree with;
    ``max_memory``: the --max-memory budget in bytes; ``backward``: the gradients too)."""
    from attntrace.capturing.runner import TargetError, parse_init, parse_target, user_message

    spec = parse_target(text)
    if not spec.name:
        raise ConfigError(
            f"diff needs a NAME in the target, e.g. {text}:Attention (an nn.Module or a function)"
        )
    try:
        try:
            layer, x = _build(spec, parse_init(init), config, input_file, typed)
        except AttntraceError:
            raise
        except (Exception, SystemExit) as exc:  # the user's __init__ or a property raised
            raise TargetError(f"building {spec.name} failed: {user_message(exc)}") from None
        explicit = {"head_dim" if t == "head_dim_override" else t for t in typed}
        return diff_layer(layer, asdict(config), explicit, x, max_memory, backward)
    except CannotTellError as exc:  # what the reference cannot express: a verdict of its own
        return cannot_tell_report(config, spec.name, exc)


def _build(
    spec: Any,
    init: dict[str, Any],
    config: AttentionConfig,
    input_file: Path | None,
    typed: set[str] = frozenset(),  # type: ignore[assignment]
) -> tuple[Any, Any]:
    from attntrace.capturing.runner import build_callable, import_target

    obj, _ = import_target(spec)
    if isinstance(obj, type):
        import torch

        torch.manual_seed(
            config.seed
        )  # a class's weights: the same on every run of the same --seed
    sizes = {  # what a transformers class's config is built from: the sizes the user typed
        "hidden": config.hidden if "hidden" in typed else None,
        "heads": config.heads if "heads" in typed else None,
        "kv_heads": config.kv_heads if "kv_heads" in typed else None,
        "head_dim": config.head_dim_override if "head_dim_override" in typed else None,
    }
    target = build_callable(obj, init, spec.name, sizes)
    x = None
    if input_file is not None:
        from attntrace.files import read_npy

        x = read_npy(input_file)
    heads = config.heads if "heads" in typed else None  # a per-head fused qkv needs it
    layer = as_layer(target, **probe_sizes(config.seq, config.batch, x), heads=heads)
    return layer, x


def diff_in_child(
    text: str,
    init: Sequence[str],
    config: AttentionConfig,
    typed: set[str],
    input_file: Path | None,
    max_memory: int | None,
    *,
    view: dict[str, Any],
    timeout: float,
    prints: Any = None,
    backward: bool = False,
) -> dict[str, Any] | str:
    """:func:`diff_target` run in a child process (time limit ``timeout``, memory limit
    ``max_memory`` or the default budget), the report rendered there as ``view`` asks
    (``{"format": "json"}``, or ``{"format": "table", "width", "color_system", "terminal",
    "no_color", "encoding"}``): ``{"text", "ok"}``, or the one line saying why a child that
    did not finish stopped. The child's one-line errors are raised here as
    :class:`~attntrace.capturing.sandbox.ChildError` (exit 2, or 1 when the code raised)."""
    from attntrace.capturing.sandbox import Ended, _encode, run_in_child

    request = {
        "kind": "diff",
        "target": text,
        "init": list(init),
        "config": _encode(asdict(config)),
        "typed": sorted(typed),
        "input_file": None if input_file is None else str(input_file),
        "max_memory": max_memory,
        "view": view,
        "backward": backward,
    }
    result = run_in_child(
        request,
        timeout=timeout,
        budget=max_memory,
        prints=prints,
        module="attntrace.diffing.target",
    )
    if isinstance(result, Ended):
        return result.line
    if isinstance(result, dict):
        return result
    return "the code under test ended without a report"


def _prepare_diff(request: Mapping[str, Any]) -> Callable[[Callable[..., None]], dict[str, Any]]:
    """The child's side of :func:`diff_in_child`."""
    from attntrace.capturing.sandbox import _decode

    config = AttentionConfig(**_decode(request["config"]))
    input_file = None if request["input_file"] is None else Path(request["input_file"])
    view = dict(request["view"])

    def run(stream: Callable[..., None]) -> dict[str, Any]:
        report = diff_target(
            request["target"],
            list(request["init"]),
            config,
            set(request["typed"]),
            input_file,
            request["max_memory"],
            bool(request.get("backward", False)),
        )
        return {"text": _render(report, view), "ok": report.ok, "verdict": report.verdict}

    return run


def _render(report: DiffReport, view: Mapping[str, Any]) -> str:
    import io

    from attntrace.render.diff_view import render_diff, render_diff_json

    if view.get("format") == "json":
        return render_diff_json(report)
    from rich.console import Console

    class _Out(io.StringIO):
        encoding = str(view.get("encoding") or "utf-8")

    out = _Out()
    console = Console(
        file=out,
        width=int(view["width"]),
        color_system=view.get("color_system"),
        force_terminal=bool(view.get("terminal")),
        no_color=True if view.get("no_color") else None,
    )
    from attntrace.learn.lang import check_lang
    from attntrace.render.speaking import in_words

    render_diff(report, in_words(console, check_lang(str(view.get("lang") or "en"))))
    return out.getvalue()


if __name__ == "__main__":
    from attntrace.capturing.sandbox import child_main

    child_main(_prepare_diff)
