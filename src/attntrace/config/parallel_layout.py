"""How one attention is split across devices (issue 43): tensor parallelism over T ranks
(``--tp``, Megatron's column-parallel q, k, v and row-parallel output), sequence parallelism
around it (``--sp``), context parallelism over C ranks (``--cp``, ``--cp-kind``). The layout is
checked against the sizes here, once, with the sizes that work named in the message.

Ranks are numbered as Megatron numbers them, the TP index fastest: rank = c·T + t, with t the
rank in its TP group (the heads it holds) and c the rank in its CP group (the tokens it holds).

Axis labels of a rank's view divide the config's letters: ``h/T`` heads, ``g/T`` kv-heads
(``1`` when g < T: the one kv-head the rank's query heads read, replicated), ``S/C`` tokens,
``S/2C`` one of the two chunks of the load-balanced causal order, ``S/CT`` (``S/T``) the
sequence-parallel shard, ``h/TC`` Ulysses' heads after its all-to-all.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Protocol

from attntrace.errors import ConfigError


class AttentionConfig(Protocol):
    """The sizes of :class:`attntrace.config.attention_config.AttentionConfig` a layout reads
    (a protocol: the config imports this module)."""

    @property
    def heads(self) -> int: ...
    @property
    def seq(self) -> int: ...
    @property
    def causal(self) -> bool: ...
    @property
    def past(self) -> int: ...

    @property
    def cached(self) -> int: ...
    @property
    def algorithm(self) -> str: ...
    @property
    def window(self) -> int | None: ...
    @property
    def kv_seq(self) -> int | None: ...
    @property
    def relative_bias(self) -> str | None: ...
    @property
    def qk_norm(self) -> str | None: ...
    @property
    def key_lengths(self) -> tuple[int, ...] | None: ...
    @property
    def groups(self) -> int: ...


#: How context parallelism shares keys and values: ring (blocks passed round the C ranks, the
#: partial results merged by their log-sum-exp), allgather (every rank gathers every key and
#: value), ulysses (two all-to-alls swap the sequence shard for a head shard, DeepSpeed).
CP_KINDS: tuple[str, ...] = ("ring", "allgather", "ulysses")

#: The most ranks one group may have (far beyond any cluster's TP or CP group).
MAX_GROUP = 1 << 16


@dataclass(frozen=True)
class ParallelLayout:
    """The split of one attention layer across ``tp × cp`` ranks, and the rank shown.

    >>> ParallelLayout(tp=8, cp=16).ranks, ParallelLayout(tp=8, cp=16, rank=17).tp_rank
    (128, 1)
    """

    tp: int = 1  # T: heads split across T ranks (q, k, v column-parallel, w_o row-parallel)
    sp: bool = False  # sequence parallel: x sharded S/T around the TP region (needs T > 1)
    cp: int = 1  # C: the sequence split across C ranks
    cp_kind: str = "ring"  # one of CP_KINDS
    rank: int = 0  # the rank whose steps a trace shows, 0 .. T·C - 1
    balance: bool = True  # causal ring/allgather: Megatron's load-balanced chunks; False:
    # contiguous S/C runs, as hand-written CP code hands them out (diff --nproc)

    def __post_init__(self) -> None:
        for option, value in (("tp", self.tp), ("cp", self.cp)):
            if isinstance(value, bool) or not isinstance(value, int) or not value >= 1:
                raise ConfigError(f"--{option} must be a whole number >= 1, got {value!r}")
            if value > MAX_GROUP:
                raise ConfigError(f"--{option} {value} is too large; the most is {MAX_GROUP}")
        if self.cp_kind not in CP_KINDS:
            raise ConfigError(
                f"--cp-kind must be one of {', '.join(CP_KINDS)}, got {self.cp_kind!r}"
            )
        if self.sp and self.tp == 1:
            raise ConfigError("--sp shards the sequence over the --tp group; add --tp 2 or more")
        r = self.rank
        if isinstance(r, bool) or not isinstance(r, int) or not 0 <= r < self.ranks:
            raise ConfigError(f"--rank {r!r} does not exist; use 0 to {self.ranks - 1}")

    @property
    def ranks(self) -> int:
        """T·C, the ranks of one layer."""
        return self.tp * self.cp

    @property
    def tp_rank(self) -> int:
        """t, the shown rank's place in its TP group."""
        return self.rank % self.tp

    @property
    def cp_rank(self) -> int:
        """c, the shown rank's place in its CP group."""
        return self.rank // self.tp

    def at(self, rank: int) -> ParallelLayout:
        """The same layout showing ``rank``."""
        return ParallelLayout(self.tp, self.sp, self.cp, self.cp_kind, rank, self.balance)

    @property
    def decode_kind(self) -> bool:
        """True for a kind other than ring under --past with C > 1 (not traced)."""
        return self.cp > 1 and self.cp_kind != "ring"

    def shards_cache(self, config: AttentionConfig) -> bool:
        """--past with C > 1: the cache is sharded by tokens (N/C a rank), the S new tokens are
        on every rank, and the ranks' partial results are merged (decoding across ranks)."""
        return self.cp > 1 and bool(config.past)

    def balanced(self, config: AttentionConfig) -> bool:
        """Whether the tokens sit in the load-balanced causal order: 2C chunks, rank c holding
        chunks c and 2C-1-c (Megatron's), so that every rank has as much unmasked work. Used by
        ring and allgather under a causal mask; Ulysses holds whole heads of every token."""
        return (
            self.balance
            and self.cp > 1
            and config.causal
            and self.cp_kind != "ulysses"
            and not config.past
        )

    def chunks(self, config: AttentionConfig) -> int:
        """How many equal chunks the sequence is cut into: 2C balanced, else C (1 when the
        cache is sharded instead: every rank holds the S new tokens)."""
        if self.shards_cache(config):
            return 1
        return 2 * self.cp if self.balanced(config) else self.cp

    def kv_heads(self, config: AttentionConfig) -> int:
        """Key/value heads a TP rank holds: g/T, or 1 when g < T (replicated T/g times)."""
        return max(1, config.groups // self.tp)

    def to_dict(self) -> dict[str, object]:
        """The layout as JSON-ready values."""
        return {
            "tp": self.tp,
            "sp": self.sp,
            "cp": self.cp,
            "cp_kind": self.cp_kind,
            "rank": self.rank,
        }

    def check(self, config: AttentionConfig) -> None:
        """Every size the layout divides, divided: ConfigError naming the sizes that work."""
        self._check_variants(config)
        self._check_heads(config)
        self._check_tokens(config)

    def _check_variants(self, config: AttentionConfig) -> None:
        unsupported = (
            ("--past with --cp-kind allgather/ulysses", bool(config.past) and self.decode_kind),
            ("--algorithm flash", config.algorithm == "flash"),
            ("--relative-bias", config.relative_bias is not None),
            ("--qk-norm full", config.qk_norm == "full" and self.tp > 1),
            ("--key-lengths", config.key_lengths is not None and self.cp > 1),
        )
        for option, on in unsupported:
            if on:
                raise ConfigError(
                    f"{option} is not traced across devices yet; drop it or drop --tp/--cp"
                )
        if self.cp > 1 and config.causal and config.kv_seq is not None:
            raise ConfigError("--causal cross-attention cannot be split by --cp; drop one of them")

    def _check_heads(self, config: AttentionConfig) -> None:
        h, g, t = config.heads, config.groups, self.tp
        if h % t:
            works = ", ".join(str(n) for n in _divisors(h))
            raise ConfigError(
                f"--heads {h} is not divisible by --tp {t}; --tp values that work: {works}"
            )
        if g % t and t % g:
            works = ", ".join(str(n) for n in _divisors(h) if g % n == 0 or n % g == 0)
            raise ConfigError(
                f"--kv-heads {g} and --tp {t}: one must divide the other (kv-heads are split, "
                f"or replicated when g < T); --tp values that work: {works}"
            )
        if self.cp > 1 and self.cp_kind == "ulysses":
            c, local = self.cp, h // t
            if local % c:
                works = ", ".join(str(n) for n in _divisors(local))
                raise ConfigError(
                    f"--cp-kind ulysses shares the {local} heads of a TP rank (h/T) among "
                    f"--cp {c} ranks; --cp values that work: {works}"
                )
            kv = self.kv_heads(config)
            if kv % c and c % kv:
                works = ", ".join(str(n) for n in _divisors(local) if kv % n == 0 or n % kv == 0)
                raise ConfigError(
                    f"--cp-kind ulysses: the {kv} kv-heads of a TP rank and --cp {c}: one must "
                    f"divide the other; --cp values that work: {works}"
                )

    def _check_tokens(self, config: AttentionConfig) -> None:
        parts = self.chunks(config)
        if self.sp:  # x is sharded S/(C·T): each rank's S/C tokens split again by T
            parts = math.lcm(parts, (1 if self.shards_cache(config) else self.cp) * self.tp)
        if self.shards_cache(config) and config.cached % self.cp:
            raise ConfigError(
                f"the cache's {config.cached} tokens (--past) are not divisible by --cp "
                f"{self.cp}; --past values that work: {_multiples(config.cached, self.cp)}"
            )
        if config.seq % parts:
            raise ConfigError(
                f"--seq {config.seq} is not divisible by {_parts_words(self, config)} = {parts}; "
                f"--seq values that work: {_multiples(config.seq, parts)}"
            )
        if config.kv_seq is not None and self.cp > 1 and config.kv_seq % self.cp:
            raise ConfigError(
                f"--kv-seq {config.kv_seq} is not divisible by --cp {self.cp}; "
                f"--kv-seq values that work: {_multiples(config.kv_seq, self.cp)}"
            )


def _parts_words(layout: ParallelLayout, config: AttentionConfig) -> str:
    """How the sequence's divisor reads: ``2C (--cp 4, causal: two chunks a rank)`` …"""
    words = []
    if layout.balanced(config):
        words.append(f"2C (--cp {layout.cp}, causal: two chunks a rank)")
    elif layout.cp > 1:
        words.append(f"C (--cp {layout.cp})")
    if layout.sp:
        words.append(f"T (--tp {layout.tp} with --sp)")
    return " × ".join(words)


def _multiples(n: int, step: int) -> str:
    """Multiples of ``step`` nearest ``n``.

    >>> _multiples(1000, 32)
    '992, 1024'
    >>> _multiples(3, 8)
    '8, 16'
    """
    low = n // step * step
    near = [m for m in (low, low + step) if m > 0] or [step]
    if len(near) == 1:
        near.append(near[0] + step)
    return ", ".join(str(m) for m in near)


def _divisors(n: int) -> list[int]:
    small = [i for i in range(1, int(n**0.5) + 1) if n % i == 0]
    return sorted(set(small + [n // i for i in small]))
