"""The serving view of a trace (issue 34): what a prefill or a decode step (``--past N``) costs
against a machine's roofline, and what the KV cache costs a server.

Memory traffic is counted two ways, both from the trace's shapes in its dtype:

- **fused** (:func:`fused_traffic`), what a server's kernels must move at least: the linear
  layers read x, the parameters and the merged heads and write q, k, v and the output; the
  attention kernel (FlashAttention, or FlashDecoding for one token) reads q, the new k and v and
  the KV cache, and writes the context and the new keys and values into the cache. Nothing
  (S, N) ever reaches memory. This is the figure that decides memory- or compute-bound.
- **as traced** (:func:`step_traffic`), each step materialised: a step reads its inputs (steps
  and parameters, every time it repeats) and writes its output; a view moves nothing, and an
  input (x, the cache, a table) is counted where a step reads it.

Arithmetic intensity is FLOPs per byte moved. A machine with peak P FLOP/s and bandwidth W B/s
has its ridge at P / W FLOPs per byte: below it a kernel waits on memory (memory-bound), above it
on arithmetic (compute-bound). A decode step reads the whole cache for a single query row:
about h/g FLOPs per cache element, far below any GPU's ridge.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from attntrace.config.attention_config import CACHE_DTYPE_BYTES, AttentionConfig
from attntrace.errors import ConfigError
from attntrace.trace import Trace

#: The machine of the roofline when neither --peak-flops nor --bandwidth is given.
DEFAULT_MACHINE = "H100 SXM"
#: Its dense bf16 tensor-core peak (FLOP/s) and HBM3 bandwidth (B/s), NVIDIA's data sheet.
DEFAULT_PEAK_FLOPS = 989e12
DEFAULT_BANDWIDTH = 3.35e12

#: The linear layers of a layer's attention (their FLOPs are the projections').
LINEAR_STEPS: tuple[str, ...] = ("q_proj", "k_proj", "v_proj", "output")

#: The cache dtypes the serving figures list when --cache-dtype is not given.
CACHE_DTYPES: tuple[str, ...] = ("float16", "bfloat16", "float8")


@dataclass(frozen=True, kw_only=True)
class Traffic:
    """FLOPs and bytes read and written by one step, kernel or phase.

    >>> t = Traffic(name="scores", flops=1000, read=300, written=200)
    >>> t.moved, t.intensity
    (500, 2.0)
    """

    name: str
    flops: int
    read: int  # bytes
    written: int  # bytes

    @property
    def moved(self) -> int:
        """Bytes read and written."""
        return self.read + self.written

    @property
    def intensity(self) -> float:
        """Arithmetic intensity: FLOPs per byte moved (0 when nothing moves)."""
        return self.flops / self.moved if self.moved else 0.0

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "flops": self.flops,
            "bytes_read": self.read,
            "bytes_written": self.written,
            "intensity": self.intensity,
        }


@dataclass(frozen=True, kw_only=True)
class Machine:
    """A roofline: peak FLOP/s and memory bandwidth (B/s).

    >>> m = Machine(peak_flops=989e12, bandwidth=3.35e12, name="H100 SXM")
    >>> round(m.ridge), m.bound(Traffic(name="decode", flops=4, read=1, written=0))
    (295, 'memory-bound')
    """

    peak_flops: float
    bandwidth: float
    name: str = "given"

    @property
    def ridge(self) -> float:
        """FLOPs per byte where the time of the arithmetic equals the time of the memory."""
        return self.peak_flops / self.bandwidth

    def bound(self, t: Traffic) -> str:
        """Which side of the ridge ``t`` falls."""
        return "memory-bound" if t.intensity < self.ridge else "compute-bound"

    def seconds(self, t: Traffic) -> float:
        """The roofline's time: the slower of the arithmetic and the memory traffic."""
        return max(t.flops / self.peak_flops, t.moved / self.bandwidth)

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "peak_flops": self.peak_flops,
            "bandwidth": self.bandwidth,
            "ridge": self.ridge,
        }


def machine(peak_flops: float | None = None, bandwidth: float | None = None) -> Machine:
    """The roofline of --peak-flops and --bandwidth; the default machine fills what is not given.

    >>> machine().name, machine(peak_flops=1e15).name
    ('H100 SXM', 'given')
    """
    given = peak_flops is not None or bandwidth is not None
    return Machine(
        peak_flops=DEFAULT_PEAK_FLOPS if peak_flops is None else peak_flops,
        bandwidth=DEFAULT_BANDWIDTH if bandwidth is None else bandwidth,
        name="given" if given else DEFAULT_MACHINE,
    )


def step_traffic(trace: Trace) -> tuple[Traffic, ...]:
    """Each step as traced: it reads its inputs (steps and parameters) and writes its output,
    once per repeat (flash's tiles); a view reads and writes nothing.

    >>> from attntrace import AttentionConfig, trace_attention
    >>> t = trace_attention(AttentionConfig(seq=4, hidden=8, heads=2, bias=False), "shape")
    >>> scores = {s.name: s for s in step_traffic(t)}["scores"]
    >>> scores.read, scores.written  # q (2, 4, 4) and k_t (2, 4, 4) read, (2, 4, 4) written
    (256, 128)
    """
    sizes = {p.name: p.nbytes for p in trace.parameters} | {s.name: s.nbytes for s in trace.steps}
    return tuple(
        Traffic(
            name=s.name,
            flops=s.flops,
            read=0 if s.view else sum(sizes.get(name, 0) for name in s.inputs) * s.repeat,
            written=0 if s.view or not s.inputs else s.nbytes * s.repeat,
        )
        for s in trace.steps
    )


def fused_traffic(trace: Trace) -> tuple[Traffic, Traffic, Traffic]:
    """The layer, its linear layers and its attention kernel, each moving only what it must
    (see the module docstring): the figures a server's kernels approach.

    >>> from attntrace import AttentionConfig, trace_attention
    >>> config = AttentionConfig(seq=1, past=8, hidden=8, heads=2, bias=False)
    >>> layer, linear, attention = fused_traffic(trace_attention(config, "shape"))
    >>> attention.read  # q, k, v: (1, 8) floats, 32 B each; the cache: 2 x (2, 8, 4), 256 B each
    608
    """
    size = {s.name: s.nbytes for s in trace.steps}
    inputs = size["x"] + size.get("x_kv", 0)
    qkv = size["q_proj"] + size["k_proj"] + size["v_proj"]
    new_kv = size["k_proj"] + size["v_proj"]  # into the cache
    linear_flops = sum(trace[name].flops for name in LINEAR_STEPS)
    linear = Traffic(
        name="linear",
        flops=linear_flops,
        read=inputs + trace.param_bytes + size["merged"],
        written=qkv + size["output"],
    )
    attention = Traffic(
        name="attention",
        flops=trace.total_flops - linear_flops,
        read=qkv + size.get("k_cache", 0) + size.get("v_cache", 0),
        written=size["merged"] + new_kv,
    )
    layer = Traffic(
        name="layer",
        flops=trace.total_flops,
        read=linear.read + attention.read,
        written=linear.written + attention.written,
    )
    return layer, linear, attention


@dataclass(frozen=True, kw_only=True)
class CacheRow:
    """What the KV cache costs in one dtype, for every layer."""

    dtype: str
    per_token: int  # bytes of one token of one sequence, every layer
    per_request: int  # bytes of one sequence of ``context`` tokens, every layer
    fits: int | None  # sequences of that length that fit in --memory (None: no --memory)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass(frozen=True, kw_only=True)
class CacheFigures:
    """The KV cache a server holds: per token, per request of ``context`` tokens, and how many
    requests fit in ``memory`` bytes, for each cache dtype."""

    layers: int  # L (1 when nothing says the layer count)
    context: int  # tokens of one request: N + S
    memory: int | None  # --memory: the bytes the cache may take
    rows: tuple[CacheRow, ...]

    def to_dict(self) -> dict[str, Any]:
        return {
            "layers": self.layers,
            "context": self.context,
            "memory": self.memory,
            "dtypes": [r.to_dict() for r in self.rows],
        }


def cache_figures(
    config: AttentionConfig,
    layers: int = 1,
    memory: int | None = None,
    dtypes: tuple[str, ...] = CACHE_DTYPES,
) -> CacheFigures:
    """The KV cache of ``layers`` layers like ``config``'s per token and per request of N + S
    tokens (a sliding window's cache holds at most W - 1 + S of them during the step), and the
    requests that fit in ``memory`` bytes; by :meth:`AttentionConfig.kv_cache_bytes`.

    >>> config = AttentionConfig(seq=1, past=4095, hidden=4096, heads=32, kv_heads=8)
    >>> row = cache_figures(config, layers=32, memory=80 << 30, dtypes=("float16",)).rows[0]
    >>> row.per_token, row.per_request, row.fits  # 128 KiB a token, 512 MiB a request
    (131072, 536870912, 160)
    """
    for dtype in dtypes:
        if dtype not in CACHE_DTYPE_BYTES:
            raise ConfigError(
                f"--cache-dtype {dtype!r} is not a cache dtype; use one of "
                + ", ".join(CACHE_DTYPE_BYTES)
            )
    context = config.positions
    kept = config.keys  # N + S, or W - 1 + S with a sliding window (cross: the encoder's N)
    rows = []
    for dtype in dtypes:
        per_token = layers * config.kv_cache_bytes(1, dtype)
        per_request = layers * config.kv_cache_bytes(kept, dtype)
        fits = None if memory is None else memory // per_request
        rows.append(CacheRow(dtype=dtype, per_token=per_token, per_request=per_request, fits=fits))
    return CacheFigures(layers=layers, context=context, memory=memory, rows=tuple(rows))


@dataclass(frozen=True, kw_only=True)
class PagedFigures:
    """A paged KV cache (vLLM's blocks of P tokens) for one layer: each sequence's tokens live
    in whole blocks of a shared pool; its row of the block table lists them in order, and a
    gather rebuilds its keys: ``k[b] = k_pool[block_table[b]].reshape(-1, g, d)[:L_b]``."""

    page_size: int  # P, tokens per block
    lengths: tuple[int, ...]  # L_b, the keys k_all holds of each sequence: held_lengths
    blocks: tuple[int, ...]  # ⌈L_b / P⌉ blocks of each sequence
    table_shape: tuple[int, int]  # (B, ⌈max L / P⌉), the block table (int32)
    pool_shape: tuple[int, ...]  # (num_blocks, P, g, d), for k and for v
    gathered_shape: tuple[int, ...]  # (B, g, max L, d): each sequence's keys after the gather
    waste_tokens: int  # slots left empty in the last block of each sequence
    pool_bytes: int  # k and v pools
    waste_bytes: int  # the empty slots of both pools
    padded_bytes: int  # a contiguous cache padded to the longest sequence, k and v
    table_bytes: int  # the block table, int32

    def to_dict(self) -> dict[str, Any]:
        return {
            name: list(v) if isinstance(v, tuple) else v
            for name, v in dataclasses.asdict(self).items()
        }


#: The largest --page-size: 65,536 tokens a block (vLLM's are 16 to 256); a larger block only
#: adds empty slots, and on a values backend each one is allocated.
MAX_PAGE_SIZE = 1 << 16
#: The one line of --page-size without --past (every command says the same).
NEEDS_PAST = "--page-size pages the KV cache of a --past step; add --past N"


def check_page_size(page_size: object, config: AttentionConfig | None = None) -> None:
    """Refuse a --page-size that is not 1 to :data:`MAX_PAGE_SIZE`, or (given ``config``) one
    without --past; None (not given) passes.

    >>> from attntrace import AttentionConfig
    >>> check_page_size(16, AttentionConfig(seq=1, past=7))
    >>> check_page_size(0)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    attntrace.errors.ConfigError: --page-size must be a whole number from 1 to 65,536 ..., got 0
    >>> check_page_size(16, AttentionConfig(seq=4))
    Traceback (most recent call last):
    attntrace.errors.ConfigError: --page-size pages the KV cache of a --past step; add --past N
    """
    if page_size is None:
        return
    if (
        isinstance(page_size, bool)
        or not isinstance(page_size, int)
        or not 1 <= page_size <= MAX_PAGE_SIZE
    ):
        raise ConfigError(
            f"--page-size must be a whole number from 1 to {MAX_PAGE_SIZE:,} (tokens a block, "
            f"e.g. 16), got {page_size!r}"
        )
    if config is not None and not config.past:
        raise ConfigError(NEEDS_PAST)


def held_lengths(config: AttentionConfig) -> tuple[int, ...]:
    """L_b, the keys of each sequence that the step's k_all holds: N + S (W - 1 + S with a
    window) or, with --key-lengths, those below each length, in the keys' frame (a sliding
    cache starts at position N - (W - 1), so its keys of a shorter sequence are fewer).

    >>> held_lengths(AttentionConfig(batch=2, seq=2, past=7, hidden=8, heads=2,
    ...                              key_lengths=(9, 4)))
    (9, 4)
    >>> held_lengths(AttentionConfig(batch=2, seq=2, past=7, hidden=8, heads=2, window=3,
    ...                              key_lengths=(9, 6)))  # keys at positions 5..8
    (4, 1)
    """
    if config.key_lengths is None:
        return (config.keys,) * (config.batch or 1)
    first = config.past - config.cached  # the position of key 0 (a sliding cache's start)
    return tuple(min(max(n - first, 0), config.keys) for n in config.key_lengths)


def paged_figures(config: AttentionConfig, page_size: int) -> PagedFigures:
    """The paged cache of ``config``'s keys and values in blocks of ``page_size`` tokens.

    >>> p = paged_figures(AttentionConfig(batch=2, seq=1, past=99, hidden=64, heads=4,
    ...                                   key_lengths=(100, 37)), page_size=16)
    >>> p.blocks, p.table_shape, p.pool_shape, p.waste_tokens  # 7 + 3 blocks; 12 + 11 empty
    ((7, 3), (2, 7), (10, 16, 4, 16), 23)
    """
    check_page_size(page_size)
    batch = config.batch or 1
    lengths = held_lengths(config)
    blocks = tuple(-(-n // page_size) for n in lengths)
    g, d, b = config.groups, config.head_dim, config.itemsize
    slot = 2 * g * d * b  # k and v of one token
    longest = max(lengths)
    waste = sum(n * page_size for n in blocks) - sum(lengths)
    return PagedFigures(
        page_size=page_size,
        lengths=tuple(lengths),
        blocks=blocks,
        table_shape=(batch, max(blocks)),
        pool_shape=(sum(blocks), page_size, g, d),
        gathered_shape=(batch, g, longest, d),
        waste_tokens=waste,
        pool_bytes=sum(blocks) * page_size * slot,
        waste_bytes=waste * slot,
        padded_bytes=batch * longest * slot,
        table_bytes=batch * max(blocks) * 4,
    )


@dataclass(frozen=True, kw_only=True)
class ServingFigures:
    """Everything ``run``'s serving view shows: the fused figures of this step (and of the
    prefill of the same N + S tokens when it is a --past step) against ``machine``, each step's
    traffic as traced, and the KV cache's figures."""

    machine: Machine
    step: tuple[Traffic, ...]  # layer, linear layers, attention (fused)
    prefill: tuple[Traffic, ...]  # the same of a prefill of N + S tokens; () without --past
    steps: tuple[Traffic, ...]  # each step as traced
    cache: CacheFigures
    paged: PagedFigures | None = None  # --page-size P

    def to_dict(self) -> dict[str, Any]:
        return {
            **({"paged": self.paged.to_dict()} if self.paged is not None else {}),
            "machine": self.machine.to_dict(),
            "step": [_phase(t, self.machine) for t in self.step],
            "prefill": [_phase(t, self.machine) for t in self.prefill],
            "steps": [t.to_dict() for t in self.steps],
            "cache": self.cache.to_dict(),
        }


def _phase(t: Traffic, m: Machine) -> dict[str, Any]:
    return {**t.to_dict(), "bound": m.bound(t), "seconds": m.seconds(t)}


def serving_figures(
    trace: Trace,
    *,
    roofline: Machine | None = None,
    layers: int = 1,
    memory: int | None = None,
    cache_dtypes: tuple[str, ...] = CACHE_DTYPES,
    page_size: int | None = None,
) -> ServingFigures:
    """The serving view of ``trace`` (see :class:`ServingFigures`); the prefill beside a --past
    step is traced on the shape backend (sizes only, any length).

    >>> from attntrace import AttentionConfig, trace_attention
    >>> config = AttentionConfig(seq=1, past=4095, hidden=4096, heads=32, kv_heads=8)
    >>> f = serving_figures(trace_attention(config, "shape"))
    >>> [f.machine.bound(t) for t in (f.step[2], f.prefill[2])]
    ['memory-bound', 'compute-bound']
    """
    from attntrace.engine.attention import trace_attention

    config = trace.config
    prefill: tuple[Traffic, ...] = ()
    if config.past:
        whole = dataclasses.replace(config, seq=config.positions, past=0)
        prefill = fused_traffic(trace_attention(whole, "shape"))
    return ServingFigures(
        machine=roofline or machine(),
        step=fused_traffic(trace),
        prefill=prefill,
        steps=step_traffic(trace),
        cache=cache_figures(config, layers, memory, cache_dtypes),
        paged=paged_figures(config, page_size) if page_size is not None else None,
    )


def requests_note(figures: CacheFigures) -> str:
    """One line on what bounds the batch: the cache of one request against --memory.

    >>> config = AttentionConfig(seq=1, past=7, hidden=8, heads=2)
    >>> requests_note(cache_figures(config, memory=None))
    'add --memory 80GiB to see how many requests of 8 tokens fit'
    """
    if figures.memory is None:
        return f"add --memory 80GiB to see how many requests of {figures.context:,} tokens fit"
    best = max(figures.rows, key=lambda r: r.fits or 0)
    return f"at most {best.fits:,} requests of {figures.context:,} tokens ({best.dtype} cache)"


__all__ = [
    "DEFAULT_BANDWIDTH",
    "DEFAULT_MACHINE",
    "DEFAULT_PEAK_FLOPS",
    "MAX_PAGE_SIZE",
    "NEEDS_PAST",
    "CacheFigures",
    "Machine",
    "PagedFigures",
    "ServingFigures",
    "Traffic",
    "cache_figures",
    "check_page_size",
    "fused_traffic",
    "held_lengths",
    "machine",
    "paged_figures",
    "serving_figures",
    "step_traffic",
]
