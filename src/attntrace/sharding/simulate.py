"""The rank view of a trace: :func:`trace_parallel` runs the ranks of ``config.parallel`` and
returns the shown rank's steps as a :class:`~attntrace.trace.Trace`, its figures (per-rank cost,
collectives, the single device beside them) in ``Trace.parallel``.

On the shape backend only the shown rank runs (collectives answer with shapes): any size at
once. On numpy and torch every rank runs, each on a thread of this process, the collectives
exchange real tensors, and the gathered output is compared with the single-device trace of the
same seed (``RankFigures.max_error``).
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from attntrace.backends import Backend, get_backend
from attntrace.config.attention_config import AttentionConfig
from attntrace.config.parallel_layout import ParallelLayout
from attntrace.engine.costs import peak_live_bytes
from attntrace.engine.inputs import random_sources, with_tensors
from attntrace.engine.recorder import Recorder
from attntrace.engine.rope import rope_sources
from attntrace.errors import AttntraceError, ConfigError
from attntrace.sharding.comm import Exchange, ShapeComm, ThreadComm
from attntrace.sharding.context import forward
from attntrace.sharding.figures import parallel_figures
from attntrace.sharding.rank import RankAttention, RankRun, token_ranges
from attntrace.trace import Param, Trace

if TYPE_CHECKING:
    from collections.abc import Callable

    import numpy as np

    #: Makes a rank's recorder from (backend, config, keep_values).
    MakeRecorder = Callable[[Backend[Any], AttentionConfig, bool], Recorder[Any]]


def trace_parallel(
    config: AttentionConfig,
    backend: str | Backend[Any] = "numpy",
    *,
    tensors: Mapping[str, np.ndarray | None] | None = None,
    keep_values: bool = True,
    max_memory: int | None = None,
) -> Trace:
    """The steps of rank ``config.parallel.rank`` and the layout's figures.

    >>> cfg = AttentionConfig(batch=1, seq=8, hidden=64, heads=8, kv_heads=2, causal=True,
    ...                       parallel=ParallelLayout(tp=4, cp=2))
    >>> t = trace_parallel(cfg, "shape")
    >>> t["q"].shape, t["q"].axes  # 8/4 heads, 8/2 tokens
    ((1, 2, 4, 8), ('B', 'h/T', 'S/C', 'd'))
    >>> t["k"].axes, t["o_all_reduce"].shape  # g = 2 < T = 4: one kv-head, replicated
    (('B', '1', 'S/C', 'd'), (1, 4, 64))
    """
    layout = config.parallel
    if layout is None:
        raise ConfigError("trace_parallel needs a config with a parallel layout (--tp or --cp)")
    be = get_backend(backend) if isinstance(backend, str) else backend
    be.check_dtype(config.dtype)
    single = dataclasses.replace(config, parallel=None)
    if be.computes:  # every rank at once holds about what one device keeps: refused up front
        check_memory(single, max_memory)
    seeded = {**random_sources(single), **rope_sources(single)}
    sources = {
        n: be.tensor(s)
        for n, s in with_tensors(single, seeded, tensors or {}).items()
        if s is not None
    }
    if be.computes:
        runs = simulate(config, be, sources, keep=keep_values)
        shown = runs[layout.rank]
        error = _compare(config, be, runs, tensors)
    else:
        shown = _run_rank(
            config, be, sources, layout.rank, ShapeComm(be, layout, layout.rank), False
        )
        error = None
    return _rank_trace(config, be, shown, error)


def check_memory(single: AttentionConfig, max_memory: int | None) -> None:
    """The ranks simulated together need about one device's steps and weights, twice (the
    ranks', and the single-device trace they are compared with)."""
    from attntrace.engine.attention import estimate_bytes
    from attntrace.engine.memory import check_budget
    from attntrace.units import format_bytes

    needed, largest = estimate_bytes(single, keep_values=True)
    alone = format_bytes(largest.nbytes)
    where = f"every rank's steps; {largest.name} {largest.shape} alone is {alone}"
    check_budget(2 * needed, max_memory, where, "lower --seq/--hidden, or use --backend shape")


def _run_rank(
    config: AttentionConfig,
    be: Backend[Any],
    sources: Mapping[str, Any],
    rank: int,
    comm: Any,
    keep: bool,
    recorder: MakeRecorder | None = None,
) -> RankRun[Any]:
    rec: Recorder[Any] = (recorder or Recorder)(be, config, keep)
    return forward(
        RankAttention(config, config.parallel or ParallelLayout(), rank, rec, comm), sources
    )


def simulate(
    config: AttentionConfig,
    be: Backend[Any],
    sources: Mapping[str, Any],
    *,
    keep: bool = False,
    keep_all: bool = False,
    recorder: MakeRecorder | None = None,
) -> list[RankRun[Any]]:
    """Every rank of the layout on a thread of its own, meeting at the collectives; the shown
    rank keeps its values with ``keep``, every rank with ``keep_all``; ``recorder`` makes each
    rank's recorder (diff --nproc: one that replays a suspected sharding bug)."""
    layout = config.parallel
    assert layout is not None
    exchange = Exchange(layout)
    runs: list[RankRun[Any] | None] = [None] * layout.ranks
    errors: list[BaseException] = []

    def one(rank: int) -> None:
        import numpy as np

        try:
            comm = ThreadComm(be, layout, rank, exchange)
            with np.errstate(divide="ignore"):  # log(0) of a row a ring round masks whole
                keeps = keep_all or (keep and rank == layout.rank)
                runs[rank] = _run_rank(config, be, sources, rank, comm, keeps, recorder)
        except BaseException as error:  # raised again below, in the caller
            errors.append(error)
            exchange.abort()

    threads = [
        threading.Thread(target=one, args=(r,), name=f"rank-{r}") for r in range(layout.ranks)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        first = next((e for e in errors if not isinstance(e, AttntraceError)), errors[0])
        raise first
    return [r for r in runs if r is not None]


def gathered_output(
    config: AttentionConfig, be: Backend[Any], runs: list[RankRun[Any]]
) -> np.ndarray:
    """The (B, S, H) output put together from the simulated ranks' (:func:`gather_outputs`)."""
    return gather_outputs(config, [_values(be, run) for run in runs])


def gather_outputs(config: AttentionConfig, outputs: list[np.ndarray]) -> np.ndarray:
    """The (B, S, H) output from every rank's, by rank: each CP group's tokens at their global
    positions (with --sp each TP rank's shard of them; without, TP rank 0's whole copy)."""
    import numpy as np

    layout = config.parallel
    assert layout is not None
    lead = (config.batch,) if config.batch is not None else ()
    out = np.zeros((*lead, config.seq, config.hidden))
    for c in range(layout.cp):
        pos = np.concatenate([np.arange(a, b) for a, b in token_ranges(config, layout, c)])
        group = outputs[c * layout.tp : (c + 1) * layout.tp]
        out[..., pos, :] = np.concatenate(group, axis=-2) if layout.sp else group[0]
    return out


def _values(be: Backend[Any], run: RankRun[Any]) -> np.ndarray:
    values = be.to_numpy(run.output)
    assert values is not None  # a computing backend's
    return values


def _compare(
    config: AttentionConfig,
    be: Backend[Any],
    runs: list[RankRun[Any]],
    tensors: Mapping[str, np.ndarray | None] | None,
) -> float:
    """The largest absolute difference between the gathered output and the single-device one."""
    import numpy as np

    from attntrace.engine.attention import trace_attention

    single = dataclasses.replace(config, parallel=None)
    one = trace_attention(single, be, keep_values={"output"}, tensors=tensors)
    reference = one["output"].value
    assert reference is not None
    gathered = gathered_output(config, be, runs)
    return float(np.max(np.abs(gathered - reference))) if gathered.size else 0.0


def _rank_trace(
    config: AttentionConfig, be: Backend[Any], run: RankRun[Any], error: float | None
) -> Trace:
    steps = run.rec.finish()
    keep = run.rec.keep_values is True
    params = tuple(
        Param(
            name=name,
            shape=be.shape(t),
            dtype=be.dtype(t),
            value=be.to_numpy(t) if keep else None,
            axes=run.param_axes[name],
        )
        for name, t in run.params.items()
    )
    trace = Trace(
        config=config,
        backend=be.name,
        steps=steps,
        parameters=params,
        peak_bytes=peak_live_bytes(steps),
    )
    return dataclasses.replace(trace, parallel=parallel_figures(trace, run.collectives, error))
