"""One rank's attention: the chain of :mod:`attntrace.engine.attention` on the rank's shard,
with the collectives as steps of their own. Every rank runs it; the shape backend runs it for
the rank shown, the numpy and torch backends for every rank at once (:mod:`.simulate`).

Megatron's split (``ColumnParallelLinear`` for q, k, v; ``RowParallelLinear`` for the output):

    x (B, S/C, H)                          with --sp: x (B, S/CT, H) -> all_gather over tp
    q_proj = x @ w_q[t].T  (B, S/C, h/T·d)   the rank's rows of w_q: its h/T heads
    k_proj, v_proj         (B, S/C, g/T·d)   g < T: the one kv-head its heads read (replicated)
    q, k, v heads first    (B, h/T, S/C, d)
    -- context parallelism: ring (C rounds, log-sum-exp merge), allgather, ulysses (all_to_all)
    context                (B, h/T, S/C, d)
    o_partial = merged @ w_o[:, t].T  (B, S/C, H)   the rank's columns of w_o: a partial sum
    o_all_reduce           (B, S/C, H)       with --sp: o_reduce_scatter (B, S/CT, H)
    output = + b_o         (B, S/C, H)       the bias once, after the sum

Every mask is made from the global positions of the rank's queries and keys, so causal,
sliding-window and key-padding masks, and RoPE's angles, hold across shards.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Generic, TypeVar

from attntrace.backends.base import Backend, Source
from attntrace.config.attention_config import MASK_DTYPE, AttentionConfig
from attntrace.config.parallel_layout import ParallelLayout
from attntrace.engine.recorder import Recorder
from attntrace.sharding.comm import Collective, Comm, concat, split

if TYPE_CHECKING:
    import numpy as np

T = TypeVar("T")
Ranges = tuple[tuple[int, int], ...]  # the global positions a rank holds: (start, stop) runs


@dataclass(frozen=True)
class RankLabels:
    """The axis labels of a rank's view (the config's letters divided by T and C)."""

    heads: str  # h/T
    kv: str  # g/T, h/T, or 1 (g < T)
    tokens: str  # S/C
    shard: str  # S/CT with --sp (x and the output), else tokens
    keys: str  # the keys one attention block reads
    kv_tokens: str  # the keys the rank projects (N/C for cross)
    q_width: str
    kv_width: str

    @classmethod
    def of(cls, config: AttentionConfig, layout: ParallelLayout) -> RankLabels:
        T, C = layout.tp, layout.cp
        lab = config.labels()
        heads = "h/T" if T > 1 else "h"
        kv = lab.kv_heads if T == 1 else "1" if config.groups < T else f"{lab.kv_heads}/T"
        tokens = "S/C" if C > 1 else "S"
        new_keys = "S" if config.past else lab.keys  # --past: k, v of the S new tokens
        kv_tokens = new_keys if C == 1 else f"{lab.keys}/C"
        shard = ("S/CT" if C > 1 else "S/T") if layout.sp else tokens
        keys = kv_tokens if layout.cp_kind == "ring" and C > 1 else lab.keys
        if layout.shards_cache(config):  # every rank: the S new tokens, N/C of the cache
            tokens = kv_tokens = "S"
            shard = "S/T" if layout.sp else tokens
            cache = "N" if config.cache_label == "N" else "(W-1)"
            keys = f"{cache}/C+S" if layout.cp_rank == C - 1 else f"{cache}/C"
        return cls(
            heads=heads,
            kv=kv,
            tokens=tokens,
            shard=shard,
            keys=keys,
            kv_tokens=kv_tokens,
            q_width=lab.q_width if T == 1 else f"{heads}·d",
            kv_width=lab.kv_width if T == 1 else "d" if kv == "1" else f"{kv}·d",
        )


def token_ranges(config: AttentionConfig, layout: ParallelLayout, cp_rank: int) -> Ranges:
    """The global positions of the queries CP rank ``cp_rank`` holds: one run of S/C, or with
    the load-balanced causal order chunks c and 2C-1-c of S/2C each (Megatron's).

    >>> cfg = AttentionConfig(seq=8, hidden=8, heads=2, causal=True)
    >>> token_ranges(cfg, ParallelLayout(cp=2), 0), token_ranges(cfg, ParallelLayout(cp=2), 1)
    (((0, 2), (6, 8)), ((2, 4), (4, 6)))
    """
    C, S = layout.cp, config.seq
    if layout.shards_cache(config):  # decoding across ranks: every rank has the new tokens
        return ((0, S),)
    if not layout.balanced(config):
        return ((cp_rank * S // C, (cp_rank + 1) * S // C),)
    size = S // (2 * C)
    low, high = cp_rank, 2 * C - 1 - cp_rank
    return ((low * size, (low + 1) * size), (high * size, (high + 1) * size))


def key_ranges(config: AttentionConfig, layout: ParallelLayout, cp_rank: int) -> Ranges:
    """The global positions of the keys CP rank ``cp_rank`` projects (its queries', or its
    N/C of cross-attention's keys)."""
    if config.kv_seq is None:
        return token_ranges(config, layout, cp_rank)
    n = config.kv_seq // layout.cp
    return ((cp_rank * n, (cp_rank + 1) * n),)


def positions(ranges: Ranges) -> np.ndarray:
    """The positions of ``ranges`` as one array."""
    import numpy as np

    return np.concatenate([np.arange(a, b) for a, b in ranges])


@dataclass
class RankRun(Generic[T]):
    """What one rank's run leaves: its recorder (the steps), its collectives, its output and
    the parameters it holds."""

    rec: Recorder[T]
    collectives: list[Collective] = field(default_factory=list)
    output: T | None = None
    params: dict[str, T] = field(default_factory=dict)
    param_axes: dict[str, tuple[str, ...]] = field(default_factory=dict)


class RankAttention(Generic[T]):
    """The chain of one rank (see the module docstring); ``be`` is the recorder's meter."""

    def __init__(
        self,
        config: AttentionConfig,
        layout: ParallelLayout,
        rank: int,
        rec: Recorder[T],
        comm: Comm[T],
    ) -> None:
        self.config, self.layout, self.rank = config, layout, rank
        self.t, self.c = rank % layout.tp, rank // layout.tp
        self.rec, self.comm = rec, comm
        self.be: Backend[T] = rec.meter  # type: ignore[assignment]  # a metered backend
        self.raw = rec.be
        self.lab = RankLabels.of(config, layout.at(rank))
        self.lead: tuple[str, ...] = ("B",) if config.batched else ()
        self.n = len(self.lead)  # the sequence axis (heads-first: the heads axis)
        self.run = RankRun(rec)
        self.q_pos = token_ranges(config, layout, self.c)  # the rows of x it holds
        self.k_pos = key_ranges(config, layout, self.c)
        # global positions of its queries and keys (--past: after the N cached tokens, and the
        # cache's keys, the last W-1 with a sliding window, before the new ones)
        past, cached = config.past, config.cached
        self.q_at = tuple((a + past, b + past) for a, b in self.q_pos)
        self.k_at = ((past - cached, past),) * bool(cached) + tuple(
            (a + past, b + past) for a, b in self.k_pos
        )
        if layout.shards_cache(config):  # its N/C of the cache; the new keys on the last rank
            part, last = cached // layout.cp, self.c == layout.cp - 1
            start = past - cached + self.c * part
            self.k_at = ((start, start + part),) + ((past, past + config.seq),) * last

    def ax(self, *axes: str) -> tuple[str, ...]:
        return (*self.lead, *axes)

    # --- the chain ---

    def shard_params(self, sources: Mapping[str, T]) -> dict[str, T]:
        """The rank's rows of w_q, w_k, w_v (and biases), its columns of w_o, all of b_o."""
        cfg, lab, d = self.config, self.lab, self.config.head_dim
        hT = cfg.heads // self.layout.tp
        kv = self.layout.kv_heads(cfg)
        kv_first = self._kv_first()
        cuts = {
            "q": (self.t * hT * d, (self.t + 1) * hT * d),
            "k": (kv_first * d, (kv_first + kv) * d),
            "v": (kv_first * d, (kv_first + kv) * d),
        }
        widths = {"q": lab.q_width, "k": lab.kv_width, "v": lab.kv_width}
        kv_in = cfg.labels().kv_in
        p: dict[str, T] = {}
        for c, (a, b) in cuts.items():
            p[f"w_{c}"] = self.raw.narrow(sources[f"w_{c}"], 0, a, b)
            self.run.param_axes[f"w_{c}"] = (widths[c], "H" if c == "q" else kv_in)
            if f"b_{c}" in sources:
                p[f"b_{c}"] = self.raw.narrow(sources[f"b_{c}"], 0, a, b)
                self.run.param_axes[f"b_{c}"] = (widths[c],)
        a, b = cuts["q"]
        p["w_o"] = self.raw.narrow(sources["w_o"], 1, a, b)
        self.run.param_axes["w_o"] = ("H", lab.q_width)
        for name in ("b_o", "n_q", "n_k"):
            if name in sources:
                p[name] = sources[name]
                self.run.param_axes[name] = ("H",) if name == "b_o" else ("d",)
        self.run.params = p
        return p

    def rows(self, x: T, ranges: tuple[tuple[int, int], ...], axis: int) -> T:
        """The rows of global ``x`` at ``ranges`` along ``axis`` (a copy when several runs)."""
        parts = [self.raw.narrow(x, axis, a, b) for a, b in ranges]
        return concat(self.raw, parts, axis)

    def project(self, sources: Mapping[str, T], p: Mapping[str, T]) -> tuple[T, T, T]:
        """x (all-gathered under --sp) -> q_proj, k_proj, v_proj -> heads -> heads first."""
        cfg, lab, rec, be = self.config, self.lab, self.rec, self.be
        x_local = self.rows(sources["x"], self.q_pos, self.n)  # (B, S/C, H)
        if self.layout.sp:
            shard = split(self.raw, x_local, self.n, self.layout.tp)[self.t]  # (B, S/CT, H)
            shard = rec.step("x", shard, "x[rank's S/CT tokens]", self.ax(lab.shard, "H"))
            x = self.collective(
                "x_all_gather", "all_gather", shard, "tp", self.ax(lab.tokens, "H"), (self.n, 0)
            )
        else:
            x = rec.step(
                "x",
                x_local,
                "x[rank's tokens]" if self.layout.cp > 1 else "x",
                self.ax(lab.tokens, "H"),
            )
        x_kv = x
        if cfg.cross:
            kv_local = self.rows(sources["x_kv"], self.k_pos, self.n)  # (B, N/C, M)
            x_kv = rec.step(
                "x_kv", kv_local, "x_kv[rank's keys]", self.ax(lab.kv_tokens, cfg.labels().kv_in)
            )
        heads = {
            "q": (x, lab.tokens, lab.heads, lab.q_width),
            "k": (x_kv, lab.kv_tokens, lab.kv, lab.kv_width),
        }
        heads["v"] = heads["k"]
        proj: dict[str, T] = {}
        for c, (src, seq, _, width) in heads.items():
            y = be.linear(src, p[f"w_{c}"], p.get(f"b_{c}"))  # (B, S/C, h/T·d)
            source = "x_kv" if c != "q" and cfg.cross else "x"
            op = f"{source} @ w_{c}[rank].T" + (f" + b_{c}[rank]" if f"b_{c}" in p else "")
            proj[c] = rec.step(f"{c}_proj", y, op, self.ax(seq, width))
        split_: dict[str, T] = {}
        for c, (_, seq, hl, _) in heads.items():
            shape = be.shape(proj[c])
            y = be.reshape(proj[c], (*shape[:-1], shape[-1] // cfg.head_dim, cfg.head_dim))
            op = f"{c}_proj.view(…, {hl}, d)"
            split_[c] = rec.view(f"{c}_heads", y, op, self.ax(seq, hl, "d"))  # (B, S/C, h/T, d)
        out: list[T] = []
        for c, (_, seq, hl, _) in heads.items():
            y = be.transpose(split_[c], self.n, self.n + 1)  # (B, h/T, S/C, d)
            op = f"{c}_heads.transpose({self.n}, {self.n + 1})"
            out.append(rec.view(c, y, op, self.ax(hl, seq, "d")))
        return out[0], out[1], out[2]

    def qk_norm(self, q: T, k: T, p: Mapping[str, T]) -> tuple[T, T]:
        """RMSNorm of each head of q and k over d (Qwen3, Gemma 3): local to the rank."""
        eps = self.config.qk_norm_eps if self.config.qk_norm_eps is not None else 1e-6
        q = self.rec.step(
            "q_norm",
            self.be.rms_norm(q, p["n_q"], eps),
            "rms_norm(q) * n_q",
            self.ax(self.lab.heads, self.lab.tokens, "d"),
        )
        k = self.rec.step(
            "k_norm",
            self.be.rms_norm(k, p["n_k"], eps),
            "rms_norm(k) * n_k",
            self.ax(self.lab.kv, self.lab.kv_tokens, "d"),
        )
        return q, k

    def rotate(self, sources: Mapping[str, T], q: T, k: T) -> tuple[T, T]:
        """RoPE at the rank's global positions: the rows of the global tables it holds."""
        be, rec, lab = self.be, self.rec, self.lab
        split = self.layout.cp > 1 and not self.layout.shards_cache(self.config)
        where = "pos = rank's tokens" if split else "pos = N..N+S-1" if self.config.past else "pos"
        cos = self.rows(sources["rope_cos"], self.q_pos, 0)  # (S/C, d)
        sin = self.rows(sources["rope_sin"], self.q_pos, 0)  # (S/C, d)
        cos = rec.step("rope_cos", cos, f"cos({where} * base^(-2i/d))", (lab.tokens, "d"))
        sin = rec.step("rope_sin", sin, f"sin({where} * base^(-2i/d))", (lab.tokens, "d"))
        cfg = self.config
        r = cfg.rotary_dims or cfg.head_dim
        pairs = cfg.rope_style == "interleaved"

        def turn(x: T) -> T:
            if cfg.rotary_dims is None and not pairs:
                return be.rotate_half(x)
            return be.rotate_pairs(x, r) if pairs else be.rotate_part(x, r)

        q_rot = be.add(be.mul(q, cos), be.mul(turn(q), sin))  # (B, h/T, S/C, d)
        q_rot = rec.step(
            "q_rot", q_rot, "q * cos + rotate(q) * sin", self.ax(lab.heads, lab.tokens, "d")
        )
        k_rot = be.add(be.mul(k, cos), be.mul(turn(k), sin))  # (B, g/T, S/C, d)
        k_rot = rec.step(
            "k_rot", k_rot, "k * cos + rotate(k) * sin", self.ax(lab.kv, lab.tokens, "d")
        )
        return q_rot, k_rot

    def append(self, sources: Mapping[str, T], k: T, v: T) -> tuple[T, T]:
        """--past: the rank's kv-heads of the cache, then the S new keys and values appended
        (the cache is sharded by heads as the projections are). With --cp the cache is also
        sharded by tokens: N/C a rank, and the new keys are appended on the last rank only."""
        cfg, lab, rec, raw = self.config, self.lab, self.rec, self.raw
        kv, first = self.layout.kv_heads(cfg), self._kv_first()
        by_tokens = self.layout.shards_cache(cfg)
        part = cfg.cached // self.layout.cp
        cache_lab = lab.keys.removesuffix("+S") if by_tokens else cfg.cache_label
        joined = []
        for c, new in (("k", k), ("v", v)):
            cache = raw.narrow(sources[f"{c}_cache"], self.n, first, first + kv)  # (B, g/T, N, d)
            if by_tokens:  # (B, g/T, N/C, d)
                cache = raw.narrow(cache, self.n + 1, self.c * part, (self.c + 1) * part)
            op = f"cache of {cfg.cache_label} earlier tokens, rank's share"
            cache = rec.step(f"{c}_cache", cache, op, self.ax(lab.kv, cache_lab, "d"))
            if by_tokens and self.c != self.layout.cp - 1:  # the new keys are the last rank's
                joined.append(
                    rec.view(f"{c}_all", cache, f"{c}_cache", self.ax(lab.kv, lab.keys, "d"))
                )
                continue
            both = concat(raw, [cache, new], self.n + 1)  # (B, g/T, N+S, d)
            rec.meter.inputs.extend((cache, new))
            op = f"cat({c}_cache, {_input_name(rec, new)}, dim={self.n + 1})"
            joined.append(rec.step(f"{c}_all", both, op, self.ax(lab.kv, lab.keys, "d")))
        return joined[0], joined[1]

    def _kv_first(self) -> int:
        """The first kv-head the rank holds."""
        g, T = self.config.groups, self.layout.tp
        return self.t * g // T if g < T else self.t * (g // T)

    def merge(self, context: T, p: Mapping[str, T]) -> T:
        """context -> sequence first -> merged -> the row-parallel output and its collective."""
        be, rec, lab = self.be, self.rec, self.lab
        last = be.transpose(context, self.n, self.n + 1)  # (B, S/C, h/T, d)
        last = rec.view(
            "context_heads",
            last,
            f"{_input_name(rec, context)}.transpose({self.n}, {self.n + 1})",
            self.ax(lab.tokens, lab.heads, "d"),
        )
        shape = be.shape(last)
        flat = be.reshape(last, (*shape[:-2], shape[-2] * shape[-1]))  # (B, S/C, h/T·d)
        merged = rec.step(
            "merged",
            flat,
            f"context_heads.reshape(…, {lab.q_width})",
            self.ax(lab.tokens, lab.q_width),
        )
        bias = p.get("b_o")
        if self.layout.tp == 1:
            out = be.linear(merged, p["w_o"], bias)  # (B, S/C, H)
            op = "merged @ w_o.T" + (" + b_o" if bias is not None else "")
            return rec.step("output", out, op, self.ax(lab.tokens, "H"))
        part = be.linear(merged, p["w_o"], None)  # (B, S/C, H), this rank's share of the sum
        part = rec.step(
            "o_partial", part, "merged @ w_o[:, rank].T (a partial sum)", self.ax(lab.tokens, "H")
        )
        if self.layout.sp:
            summed = self.collective(
                "o_reduce_scatter",
                "reduce_scatter",
                part,
                "tp",
                self.ax(lab.shard, "H"),
                (self.n, 0),
            )
        else:
            summed = self.collective(
                "o_all_reduce", "all_reduce", part, "tp", self.ax(lab.tokens, "H")
            )
        if bias is None:
            return rec.view(
                "output",
                summed,
                "o_all_reduce" if not self.layout.sp else "o_reduce_scatter",
                self.ax(lab.shard, "H"),
            )
        out = be.add(summed, bias)  # (B, S/C, H)
        src = "o_reduce_scatter" if self.layout.sp else "o_all_reduce"
        return rec.step("output", out, f"{src} + b_o", self.ax(lab.shard, "H"))

    # --- collectives and masks ---

    def collective(
        self,
        name: str,
        kind: str,
        x: T,
        group: str,
        axes: tuple[str, ...],
        dims: tuple[int, int] = (0, 0),
        count: int = 1,
    ) -> T:
        """Run collective ``kind`` on ``x`` over ``group`` and record it as step ``name``."""
        out = self.comm.run(kind, x, group, dims)
        self.rec.meter.inputs.append(x)  # the step reads x (a collective charges no FLOPs)
        op = f"{kind}({_input_name(self.rec, x)}, {group})"
        out = self.rec.step(name, out, op, axes)
        if not any(c.step == name for c in self.run.collectives):
            n, _ = self.comm.group(group)
            self.run.collectives.append(
                Collective(
                    step=name,
                    kind=kind,
                    group=group,
                    size=n,
                    shape_in=self.raw.shape(x),
                    shape_out=self.raw.shape(out),
                    dtype=self.raw.dtype(x),
                    count=count,
                )
            )
        return out

    def mask(self, q_ranges: Ranges, k_ranges: Ranges) -> T | None:
        """The (B, 1, Sq, Nk) or (1, Sq, Nk) mask of these global positions (True = attend), or
        None when nothing is masked there."""
        cfg = self.config
        if not cfg.masked:
            return None
        batch = cfg.batch
        shape = (*((batch, 1) if batch is not None else (1,)), _count(q_ranges), _count(k_ranges))

        def make() -> np.ndarray:
            import numpy as np

            keep = keep_mask(cfg, q_ranges, k_ranges)  # (B or 1, Sq, Nk)
            return np.broadcast_to(keep[:, None] if batch is not None else keep, shape).copy()

        return self.raw.tensor(Source(shape, MASK_DTYPE, make))


def keep_mask(config: AttentionConfig, q_ranges: Ranges, k_ranges: Ranges) -> np.ndarray:
    """(B or 1, Sq, Nk) booleans of the config's masks at these global positions.

    >>> cfg = AttentionConfig(seq=4, hidden=8, heads=2, causal=True)
    >>> keep_mask(cfg, ((2, 4),), ((0, 2), (3, 4))).astype(int).tolist()
    [[[1, 1, 0], [1, 1, 1]]]
    """
    import numpy as np

    qi = positions(q_ranges)[:, None]  # (Sq, 1)
    kj = positions(k_ranges)[None, :]  # (1, Nk)
    keep = np.ones((qi.shape[0], kj.shape[1]), dtype=bool)  # (Sq, Nk)
    if config.causal:
        keep &= kj <= qi
    if config.window is not None:
        keep &= kj > qi - config.window
    keep = keep[None]  # (1, Sq, Nk)
    if config.key_lengths is not None:
        lengths = np.array(config.key_lengths)[:, None, None]  # (B, 1, 1)
        keep = keep & (kj[None] < lengths)  # (B, Sq, Nk)
    return keep


def _count(ranges: Ranges) -> int:
    return sum(b - a for a, b in ranges)


def _input_name(rec: Recorder[T], x: T) -> str:
    found = rec.registry.lookup(x)
    return found[0] if found else "x"


#: A function making one rank's run (the simulation's and the shape view's).
RunRank = Callable[[int], RankRun[object]]

__all__ = ["RankAttention", "RankLabels", "RankRun", "keep_mask", "token_ranges"]
