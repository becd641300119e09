"""``attntrace sweep --tp 1,2,4,8 --cp 1,2,4``: one rank's cost over several layouts.

Each point is the shape trace of rank 0 (:func:`attntrace.sharding.trace_parallel`), reduced to
the figures a plan needs: the rank's FLOPs, peak memory, weights, KV cache and the bytes it
sends and receives per layer, one device's FLOPs beside them. A layout whose sizes do not
divide is left out, with the reason in :attr:`RankSweep.skipped`.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field, replace
from itertools import product

from attntrace.config.attention_config import AttentionConfig
from attntrace.config.parallel_layout import ParallelLayout
from attntrace.errors import ConfigError
from attntrace.sharding.figures import RankFigures

#: The most layouts × configurations one sweep traces.
MAX_RANK_POINTS = 512


@dataclass(frozen=True)
class RankPoint:
    """Rank 0's figures for one configuration and layout (per layer)."""

    seq: int
    heads: int
    hidden: int
    tp: int
    cp: int
    cp_kind: str
    sp: bool
    flops: int  # the rank's
    single_flops: int  # one device's
    peak_bytes: int  # the rank's activations alive at once and its weights
    weight_bytes: int
    kv_cache_bytes: int
    comm_bytes: int  # sent and received per layer
    past: int = 0  # N, the KV cache of a --past step


@dataclass
class RankSweep:
    """The points, and the layouts left out with the reason."""

    points: list[RankPoint] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)


def sweep_ranks(
    configs: Iterable[AttentionConfig],
    tps: Sequence[int],
    cps: Sequence[int],
    *,
    sp: bool = False,
    cp_kind: str = "ring",
) -> RankSweep:
    """Rank 0 of every config (eager ones; a rank traces eager attention) on every T and C.

    >>> out = sweep_ranks([AttentionConfig(seq=16, hidden=64, heads=8)], [1, 2, 3], [1, 2])
    >>> [(p.tp, p.cp, p.flops) for p in out.points][:2], out.skipped[0][:31]
    ([(1, 1, 606208), (1, 2, 305664)], 'T=3 C=1 S=16 h=8: --heads 8 is ')
    """
    from attntrace.sharding import trace_parallel

    todo = [c for c in configs if c.algorithm == "eager"]
    if len(todo) * len(tps) * len(cps) > MAX_RANK_POINTS:
        raise ConfigError(
            f"the sweep has {len(todo) * len(tps) * len(cps):,} layouts; the most is "
            f"{MAX_RANK_POINTS}; give fewer --tp/--cp/--seq values"
        )
    out = RankSweep()
    for config, t, c in product(todo, tps, cps):
        try:
            layout = ParallelLayout(tp=t, sp=sp and t > 1, cp=c, cp_kind=cp_kind)
            ranked = replace(config, parallel=layout)
        except ConfigError as error:
            out.skipped.append(f"T={t} C={c} S={config.seq} h={config.heads}: {error}")
            continue
        f = trace_parallel(ranked, "shape").parallel
        assert isinstance(f, RankFigures)  # a rank trace has its figures
        out.points.append(
            RankPoint(
                seq=config.seq,
                heads=config.heads,
                hidden=config.hidden,
                tp=t,
                cp=c,
                cp_kind=cp_kind,
                sp=layout.sp,
                flops=f.flops,
                single_flops=f.single_flops,
                peak_bytes=f.peak_bytes,
                weight_bytes=f.weight_bytes,
                kv_cache_bytes=f.kv_cache_bytes,
                comm_bytes=f.comm_bytes,
                past=config.past,
            )
        )
    return out


def ranks_json(sweep: RankSweep) -> str:
    """The points and the skipped layouts as JSON."""
    doc = {"points": [asdict(p) for p in sweep.points], "skipped": sweep.skipped}
    return json.dumps(doc, indent=2)


def ranks_csv(sweep: RankSweep) -> str:
    """The points as CSV with a header row."""
    out = io.StringIO()
    names = list(RankPoint.__dataclass_fields__)
    writer = csv.DictWriter(out, names, lineterminator="\n")
    writer.writeheader()
    for p in sweep.points:
        writer.writerow(asdict(p))
    return out.getvalue()
