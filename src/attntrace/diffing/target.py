"""What ``attntrace diff TARGET`` runs: the target loaded and built, sizes from the options
and the module, then :func:`attntrace.diffing.run_diff`."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path

from attntrace.config.attention_config import AttentionConfig
from attntrace.diffing.diff_report import DiffReport, probe_sizes, resolve_layer, run_diff
from attntrace.diffing.layer import as_layer
from attntrace.errors import ConfigError


def diff_target(
    text: str,
    init: Sequence[str],
    config: AttentionConfig,
    typed: set[str],
    input_file: Path | None,
    max_memory: int | None = None,
) -> DiffReport:
    """Load ``text`` (FILE.py:NAME or package.module:NAME), build it with ``init``, and diff it
    under ``config`` (``typed``: the options the user gave, which the module must agree with;
    ``max_memory``: the --max-memory budget in bytes)."""
    from attntrace.capturing.runner import build_callable, import_target, parse_init, parse_target

    spec = parse_target(text)
    if not spec.name:
        raise ConfigError(
            f"diff needs a NAME in the target, e.g. {text}:Attention (an nn.Module or a function)"
        )
    obj, _ = import_target(spec)
    if isinstance(obj, type):
        import torch

        torch.manual_seed(
            config.seed
        )  # a class's weights: the same on every run of the same --seed
    target = build_callable(obj, parse_init(init), spec.name)
    x = None
    if input_file is not None:
        from attntrace.files import read_npy

        x = read_npy(input_file)
    layer = as_layer(target, **probe_sizes(config.seq, config.batch, x))
    options = asdict(config)
    cfg, tensors = resolve_layer(
        layer, options, {"head_dim" if t == "head_dim_override" else t for t in typed}, x
    )
    return run_diff(layer, cfg, tensors, max_memory=max_memory)
