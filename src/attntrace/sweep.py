"""Sweeps: the same attention at several sizes, eager beside flash, to watch the (S, S) growth.

Each point is one :func:`attntrace.trace_attention` on the shape backend unless asked
otherwise, reduced to a few numbers: FLOPs, bytes of the scores held at once, peak live bytes.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, fields, replace
from itertools import product
from typing import TYPE_CHECKING

from attntrace.config import ALGORITHMS, AttentionConfig
from attntrace.errors import ConfigError

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


#: The most values one list option takes, and the most configurations a sweep runs.
MAX_VALUES = 64
MAX_POINTS = 512
#: The most arithmetic a sweep runs on a compute backend (seconds of numpy, not minutes).
MAX_COMPUTE_FLOPS = 2 * 10**11


def parse_list(text: str, option: str) -> list[int]:
    """A comma-separated list of whole numbers.

    >>> parse_list("128, 512,2048", "--seq")
    [128, 512, 2048]
    """
    try:
        values = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise ConfigError(f"{option} takes whole numbers separated by commas, e.g. 128,512,2048; got {text!r}") from None
    if not values:
        raise ConfigError(f"{option} needs at least one value")
    if len(values) > MAX_VALUES:
        raise ConfigError(f"{option} lists {len(values)} values; the most is {MAX_VALUES}")
    return values


def parse_algorithms(text: str) -> list[str]:
    """A comma-separated list of algorithms.

    >>> parse_algorithms("eager, flash"), parse_algorithms("flash")
    (['eager', 'flash'], ['flash'])
    """
    names = [part.strip() for part in text.split(",") if part.strip()]
    unknown = [n for n in names if n not in ALGORITHMS]
    if unknown or not names:
        raise ConfigError(f"--algorithms takes {' and/or '.join(ALGORITHMS)} separated by commas; got {text!r}")
    return names


def sweep_configs(base: AttentionConfig, seqs: Iterable[int], heads: Iterable[int], hiddens: Iterable[int],
                  algorithms: Sequence[str] = ALGORITHMS) -> list[AttentionConfig]:
    """Every combination of the sizes, each with every algorithm (eager beside flash).

    >>> [(c.seq, c.algorithm) for c in sweep_configs(AttentionConfig(), [8, 16], [12], [768])]
    [(8, 'eager'), (8, 'flash'), (16, 'eager'), (16, 'flash')]
    """
    hd_list, h_list, s_list = list(hiddens), list(heads), list(seqs)
    count = len(hd_list) * len(h_list) * len(s_list) * len(algorithms)
    if count > MAX_POINTS:
        raise ConfigError(f"the sweep has {count:,} configurations "
                          "(--hidden x --heads x --seq x --algorithms); "
                          f"the most is {MAX_POINTS}; give fewer values")
    return [replace(base, seq=s, heads=h, hidden=hd, algorithm=a)
            for hd, h, s, a in product(hd_list, h_list, s_list, algorithms)]


def measure(config: AttentionConfig, backend: str = "shape", max_memory: int | None = None) -> SweepPoint:
    """One point of the sweep.

    >>> p = measure(AttentionConfig(seq=4096, hidden=768, heads=12))
    >>> p.score_bytes == 12 * 4096 * 4096 * 4
    True
    """
    from attntrace.attention import trace_attention

    t = trace_attention(config, backend, max_memory=max_memory, keep_values=False)
    return SweepPoint(config.seq, config.heads, config.hidden, config.algorithm, t.total_flops, t.score_bytes,
                      t.peak_bytes, t.param_bytes, t.kv_cache_bytes_per_token)


def run_sweep(configs: Sequence[AttentionConfig], backend: str = "shape", max_memory: int | None = None,
              advance: Callable[[], None] | None = None) -> list[SweepPoint]:
    """:func:`measure` every config; ``advance`` is called after each (a progress bar).
    A compute backend gives the same numbers as the shape backend, only slower: a sweep whose
    arithmetic would take minutes there is refused up front."""
    if backend != "shape":
        work = sum(measure(c).flops for c in configs)
        if work > MAX_COMPUTE_FLOPS:
            raise ConfigError(f"this sweep computes {work:.2e} FLOPs on {backend}, "
                              f"more than {MAX_COMPUTE_FLOPS:.0e}; "
                              "--backend shape gives the same FLOPs and bytes at once")
    points = []
    for config in configs:
        points.append(measure(config, backend, max_memory))
        if advance is not None:
            advance()
    return points


def to_json(points: Sequence[SweepPoint]) -> str:
    """The points as a JSON list of objects."""
    return json.dumps([asdict(p) for p in points], indent=2, allow_nan=False)


def to_csv(points: Sequence[SweepPoint]) -> str:
    """The points as CSV with a header row."""
    out = io.StringIO()
    writer = csv.DictWriter(out, [f.name for f in fields(SweepPoint)], lineterminator="\n")
    writer.writeheader()
    writer.writerows(asdict(p) for p in points)
    return out.getvalue()
