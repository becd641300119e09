"""Sweeps: the same attention at several sizes, eager beside flash, to watch the (S, S) growth.

Each point is one :func:`attntrace.trace_attention` on the shape backend unless asked
otherwise, reduced to a few numbers: FLOPs, bytes of the scores held at once, peak live bytes.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, fields, replace
from itertools import product
from typing import TYPE_CHECKING

from attntrace.config.attention_config import ALGORITHMS, AttentionConfig
from attntrace.errors import ConfigError
from attntrace.trace import ModelFigures
from attntrace.units import bounded, quoted

if TYPE_CHECKING:
    pass


@dataclass(frozen=True)
class SweepPoint:
    """The costs of one configuration and algorithm."""

    seq: int
    heads: int
    hidden: int
    algorithm: str
    flops: int
    score_bytes: int  # (B, h, S, S) eager; one (B, h, Br, Bc) tile flash
    peak_bytes: int  # activations alive at once
    param_bytes: int
    kv_cache_bytes_per_token: int
    whole_model: ModelFigures | None = None  # --layers L: the attention of L such layers
    saved_bytes: int | None = None  # --backward: what the forward keeps for the backward
    backward_flops: int | None = None  # --backward: the backward's FLOPs (flash: tiles again)
    past: int = 0  # N, the KV cache of a --past step (sweep --past 1024,4096: context lengths)


#: The fields of a point that only sweep --backward fills (left out of JSON and CSV otherwise).
BACKWARD_FIELDS = ("saved_bytes", "backward_flops")


#: The most values one list option takes, and the most configurations a sweep runs.
MAX_VALUES = 64
MAX_POINTS = 512
#: The most arithmetic a sweep runs on a compute backend (seconds of numpy, not minutes).
MAX_COMPUTE_FLOPS = 2 * 10**11


def parse_list(text: str, option: str) -> list[int]:
    """A comma-separated list of whole numbers; an empty entry (``128,,512``) is refused.

    >>> parse_list("128, 512,2048", "--seq")
    [128, 512, 2048]
    >>> parse_list("128,,512", "--seq")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    attntrace.errors.ConfigError: --seq has an empty entry in '128,,512'; separate the values ...
    """
    _no_empty_entry(bounded(text, option), option, "128,512,2048")
    try:
        values = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise ConfigError(
            f"{option} takes whole numbers separated by commas, e.g. 128,512,2048; "
            f"got {quoted(text)}"
        ) from None
    if not values:
        raise ConfigError(f"{option} needs at least one value")
    if len(values) > MAX_VALUES:
        raise ConfigError(f"{option} lists {len(values)} values; the most is {MAX_VALUES}")
    return values


def _no_empty_entry(text: str, option: str, example: str) -> None:
    """Refuse ``a,,b``, ``a,`` and ``,a``: a value left out is a typo, not nothing."""
    parts = text.split(",")
    if len(parts) > 1 and any(not part.strip() for part in parts):
        raise ConfigError(
            f"{option} has an empty entry in {quoted(text)}; separate the values by "
            f"single commas, e.g. {example}"
        )


def parse_algorithms(text: str) -> list[str]:
    """A comma-separated list of algorithms.

    >>> parse_algorithms("eager, flash"), parse_algorithms("flash")
    (['eager', 'flash'], ['flash'])
    """
    _no_empty_entry(bounded(text, "--algorithms"), "--algorithms", "eager,flash")
    names = [part.strip() for part in text.split(",") if part.strip()]
    unknown = [n for n in names if n not in ALGORITHMS]
    if unknown or not names:
        raise ConfigError(
            f"--algorithms takes {' and/or '.join(ALGORITHMS)} separated by commas; "
            f"got {quoted(text)}"
        )
    return names


def sweep_configs(
    base: AttentionConfig,
    seqs: Iterable[int],
    heads: Iterable[int],
    hiddens: Iterable[int],
    algorithms: Sequence[str] = ALGORITHMS,
    pasts: Iterable[int] = (),
) -> list[AttentionConfig]:
    """Every combination of the sizes, each with every algorithm (eager beside flash), and
    with ``pasts`` each context length of a --past step.

    >>> [(c.seq, c.algorithm) for c in sweep_configs(AttentionConfig(), [8, 16], [12], [768])]
    [(8, 'eager'), (8, 'flash'), (16, 'eager'), (16, 'flash')]
    >>> [c.past for c in sweep_configs(AttentionConfig(), [1], [12], [768], ["eager"], [64, 128])]
    [64, 128]
    """
    hd_list, h_list, s_list, n_list = list(hiddens), list(heads), list(seqs), list(pasts)
    count = len(hd_list) * len(h_list) * len(s_list) * len(algorithms) * max(1, len(n_list))
    if count > MAX_POINTS:
        raise ConfigError(
            f"the sweep has {count:,} configurations "
            "(--hidden x --heads x --seq x --algorithms); "
            f"the most is {MAX_POINTS}; give fewer values"
        )
    return [
        replace(base, seq=s, heads=h, hidden=hd, algorithm=a, past=n)
        for hd, h, n, s, a in product(hd_list, h_list, n_list or [base.past], s_list, algorithms)
    ]


def measure(
    config: AttentionConfig,
    backend: str = "shape",
    max_memory: int | None = None,
    layers: int | None = None,
    backward: bool = False,
) -> SweepPoint:
    """One point of the sweep (with ``layers``: also the figures of a whole model of L such
    layers, :func:`attntrace.trace.model_figures`; with ``backward``: what the forward keeps
    for the backward and the backward's FLOPs, from the shape trace of the eager backward;
    flash keeps x, q, k, v, its output and the log-sum-exp and makes its tiles again).

    >>> p = measure(AttentionConfig(seq=4096, hidden=768, heads=12), layers=12)
    >>> p.score_bytes == 12 * 4096 * 4096 * 4, p.whole_model.flops == 12 * p.flops
    (True, True)
    """
    from attntrace.engine.attention import trace_attention
    from attntrace.trace import model_figures

    t = trace_attention(config, backend, max_memory=max_memory, keep_values=False)
    whole = model_figures(t, layers) if layers is not None else None
    train = _training(config) if backward else {}
    return SweepPoint(
        **train,
        seq=config.seq,
        heads=config.heads,
        hidden=config.hidden,
        algorithm=config.algorithm,
        flops=t.total_flops,
        score_bytes=t.score_bytes,
        peak_bytes=t.peak_bytes,
        param_bytes=t.param_bytes,
        kv_cache_bytes_per_token=t.kv_cache_bytes_per_token,
        whole_model=whole,
        past=config.past,
    )


class Sweep(list[SweepPoint]):
    """The points of a sweep, in order: a list that shows itself in Jupyter (the table and the
    bar charts, :mod:`attntrace.display`).

    >>> Sweep([measure(AttentionConfig(seq=4)), measure(AttentionConfig(seq=8))])
    <Sweep: 2 points>
    """

    def __repr__(self) -> str:
        return f"<Sweep: {len(self)} points>"

    def _repr_html_(self) -> str:
        from attntrace.display import html

        return html(self)


def _training(config: AttentionConfig) -> dict[str, int]:
    """--backward: saved bytes and backward FLOPs of ``config``'s algorithm."""
    from attntrace.engine.attention import trace_attention
    from attntrace.engine.backward import check_backward

    try:  # flash: its own tiled backward (FlashAttention-2's, tiles above the diagonal skipped)
        check_backward(config)
        own = trace_attention(config, "shape", backward=True).training
        assert own is not None  # a trace with backward=True has its figures
        return {"saved_bytes": own.saved_bytes, "backward_flops": own.backward_flops}
    except ConfigError:  # a flash variant whose backward is not written: eager's + the tiles
        f = trace_attention(replace(config, algorithm="eager"), "shape", backward=True).training
        assert f is not None
        return {
            "saved_bytes": f.flash_saved_bytes,
            "backward_flops": f.backward_flops + f.flash_recompute_flops,
        }


def run_sweep(
    configs: Sequence[AttentionConfig],
    backend: str = "shape",
    max_memory: int | None = None,
    advance: Callable[[], None] | None = None,
    layers: int | None = None,
    backward: bool = False,
) -> Sweep:
    """:func:`measure` every config; ``advance`` is called after each (a progress bar).
    A compute backend gives the same numbers as the shape backend, only slower: a sweep whose
    arithmetic would take minutes there is refused up front."""
    if backend != "shape":
        work = sum(measure(c).flops for c in configs)
        if work > MAX_COMPUTE_FLOPS:
            raise ConfigError(
                f"this sweep computes {work:.2e} FLOPs on {backend}, "
                f"more than {MAX_COMPUTE_FLOPS:.0e}; "
                "--backend shape gives the same FLOPs and bytes at once"
            )
    points = Sweep()
    for config in configs:
        points.append(measure(config, backend, max_memory, layers, backward))
        if advance is not None:
            advance()
    return points


def _point(p: SweepPoint) -> dict[str, object]:
    """A point as plain values; ``whole_model`` only when --layers gave it."""
    row: dict[str, object] = {f.name: getattr(p, f.name) for f in fields(SweepPoint)}
    for name in BACKWARD_FIELDS:
        if row[name] is None:
            del row[name]
    if not p.past:  # only --past sweeps carry it
        del row["past"]
    whole = row.pop("whole_model")
    return {**row, "whole_model": whole.to_dict()} if isinstance(whole, ModelFigures) else row


#: The CSV columns of the whole-model figures (sweep --layers), after the point's own.
MODEL_COLUMNS = ("layers", "kv_cache_bytes", "flops")


def to_json(points: Sequence[SweepPoint]) -> str:
    """The points as a JSON list of objects."""
    return json.dumps([_point(p) for p in points], indent=2, allow_nan=False)


def to_csv(points: Sequence[SweepPoint]) -> str:
    """The points as CSV with a header row (and ``model_layers``, ``model_kv_cache_bytes``,
    ``model_flops`` columns with --layers)."""
    out = io.StringIO()
    backward = any(p.saved_bytes is not None for p in points)
    past = any(p.past for p in points)  # the column of --past sweeps only
    skip = {"whole_model", *(() if backward else BACKWARD_FIELDS), *(() if past else ("past",))}
    names = [f.name for f in fields(SweepPoint) if f.name not in skip]
    whole = any(p.whole_model is not None for p in points)
    extra = [f"model_{name}" for name in MODEL_COLUMNS] if whole else []
    writer = csv.DictWriter(out, [*names, *extra], lineterminator="\n")
    writer.writeheader()
    for p in points:
        row = {name: getattr(p, name) for name in names}
        if p.whole_model is not None:
            row |= {f"model_{name}": getattr(p.whole_model, name) for name in MODEL_COLUMNS}
        writer.writerow(row)
    return out.getvalue()
