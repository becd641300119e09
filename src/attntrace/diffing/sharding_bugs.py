"""The catalogue of sharding bugs: the silent mistakes of tensor- and context-parallel
attention, each a change to the reference's rank view (:mod:`attntrace.sharding`) that
``diff --nproc`` replays on every simulated rank to see whether it reproduces the numbers of
the user's ranks (:func:`replay`).

A bug changes steps of the rank view as :mod:`attntrace.diffing.bugs` changes the single
device's: a *tweak* gives a step (every time it is recorded, ring rounds included) the value
the mistaken code computes from the rank's own values so far. What no rank can see alone (a
kv-head that should be a copy and is not) is found from the weights before anything runs
(:mod:`attntrace.diffing.rank_weights`).

>>> from attntrace import AttentionConfig
>>> from attntrace.config.parallel_layout import ParallelLayout
>>> cfg = AttentionConfig(batch=1, seq=8, hidden=16, heads=4, causal=True,
...                       parallel=ParallelLayout(tp=2))
>>> [bug.key for bug in catalogue(cfg)][:3]
['tp-no-all-reduce', 'tp-bias-before-all-reduce', 'tp-bias-before-and-after']
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from attntrace.config.attention_config import AttentionConfig
from attntrace.engine.recorder import Recorder

if TYPE_CHECKING:
    import numpy as np

    from attntrace.backends.base import Backend
    from attntrace.sharding.rank import RankRun

#: ``fn(the rank's latest value of every step so far, the step's value) -> the mistaken value``.
Tweak = Callable[[Mapping[str, Any], Any], Any]


@dataclass(frozen=True)
class ShardingBug:
    """One suspected sharding mistake, ready to replay on the rank view."""

    key: str  # stable id, e.g. "tp-no-all-reduce" (JSON, tests)
    name: str  # what the code did, in its words
    fix: str  # what to write instead
    at: str  # the first rank-view step it changes
    tweaks: dict[str, Tweak] = field(default_factory=dict)
    config: dict[str, Any] = field(default_factory=dict)  # config fields changed (the scale)


#: What each bug of the weights is called (:class:`~attntrace.diffing.rank_weights.Mismatch`).
COPIES = {
    "kv": (
        "kv-not-replicated",
        "a kv head not replicated: rank {rank} holds another k/v projection than rank {like}",
        "with fewer kv heads than ranks, rank t keeps kv head t·g/T (rank * kv_heads // world), "
        "the one its query heads read, so T/g ranks hold copies of it",
    ),
    "bias": (
        "bias-not-replicated",
        "the output bias b_o differs on rank {rank} from rank {like}'s",
        "the row-parallel bias is one tensor, the same on every rank: keep it whole "
        "(do not slice it) and add it once after the all-reduce",
    ),
    "cp": (
        "cp-weights-differ",
        "rank {rank} holds other weights than rank {like}, its copy in the other CP group",
        "context-parallel ranks hold the same weights: build them from one seed on every rank "
        "(torch.manual_seed before the module) or broadcast them from rank 0",
    ),
}


def catalogue(config: AttentionConfig) -> list[ShardingBug]:
    """Every sharding bug that can happen under ``config``'s layout, in the order tried."""
    layout = config.parallel
    if layout is None:
        return []
    makers: list[Callable[[AttentionConfig], Iterator[ShardingBug]]] = []
    if layout.tp > 1:
        makers += [_tensor_parallel, _local_view]
    if layout.cp > 1:
        makers += [_rope_restart]
        makers += [_ring] if layout.cp_kind == "ring" else []
        makers += [_allgather] if layout.cp_kind == "allgather" else []
        makers += [_ulysses] if layout.cp_kind == "ulysses" else []
    makers.append(_causal_choice)
    return [bug for make in makers for bug in make(config)]


#: The bugs that are a model's choice when no flag stated it (CANNOT TELL, not DIFFERS).
CHOICES = {"causal-unexpected": "causal", "mask-missing": "causal"}


def _causal_choice(cfg: AttentionConfig) -> Iterator[ShardingBug]:
    """The code masks causally where the reference does not, or the other way round."""
    if cfg.causal:
        yield ShardingBug(
            "mask-missing",
            "no causal mask: every query attends to every key",
            "mask the future keys (is_causal=True, or masked_fill(triu(ones(S, S), 1), -inf) "
            "from global positions); pass --no-causal if the model is not causal",
            "masked",
            config={"causal": False},
        )
    else:
        yield ShardingBug(
            "causal-unexpected",
            "a causal mask the reference was not asked for",
            "pass --causal when the model is causal (a decoder); else drop the mask / is_causal",
            "masked",
            config={"causal": True},
        )


def _tensor_parallel(cfg: AttentionConfig) -> Iterator[ShardingBug]:
    """The row-parallel output, and the scale of a rank's heads."""
    T = cfg.parallel.tp if cfg.parallel else 1
    yield ShardingBug(
        "tp-no-all-reduce",
        "the all-reduce after the row-parallel output projection is missing: each rank returns "
        "its partial sum",
        "sum the partial outputs of the ranks: dist.all_reduce(out) after o_proj "
        "(Megatron's reduce_from_tensor_model_parallel_region), then add the bias",
        "o_all_reduce",
        tweaks={"o_all_reduce": lambda done, value: done["o_partial"]},
    )
    once = (
        "add b_o once, after the all-reduce: F.linear(x, w) then dist.all_reduce, then + b "
        "(Megatron's RowParallelLinear adds its bias after the reduction)"
    )
    for extra, key, words in (
        (T - 1, "tp-bias-before-all-reduce", f"counted {T} times"),
        (T, "tp-bias-before-and-after", f"and again after it: counted {T + 1} times"),
    ):
        if not cfg.bias:
            break
        yield ShardingBug(
            key,
            f"the output bias added on every rank before the all-reduce, {words}",
            once,
            "output",
            tweaks=_bias_before(again=extra == T),
        )
    d = cfg.head_dim
    local_heads = f"head size from the local head count: H / (h/T) = {T * d}"
    local_width = f"head size from the local width: (H/T) / h = {d / T:g}"
    for factor, key, name in (
        (T * d, "tp-scale-local-heads", local_heads),
        (d / T, "tp-scale-local-width", local_width),
    ):
        yield ShardingBug(
            key,
            f"scores scaled by 1/√{factor:g} ({name}), not 1/√d with d = {d}",
            f"scale by the head size itself: 1/math.sqrt(head_dim) with head_dim = {d}, the same "
            "on every rank (hidden // heads with the global sizes)",
            "scaled",
            config={"scale": 1.0 / math.sqrt(factor)},
        )


def _bias_before(*, again: bool) -> dict[str, Tweak]:
    """b_o added to each rank's partial sum (so T times in the all-reduce), and ``again`` once
    after it: the partial itself is then the first tensor holding the mistake."""

    def partial(done: Mapping[str, Any], value: Any) -> Any:
        return value + done["__b_o"]  # (B, S, H): the rank's share with the bias

    tweaks: dict[str, Tweak] = {"o_partial": partial}
    if not again:
        tweaks["output"] = lambda done, value: done["o_all_reduce"]  # no bias after it
    return tweaks


def _local_view(cfg: AttentionConfig) -> Iterator[ShardingBug]:
    """q, k, v viewed with the global head count on the rank's local width (DTensor code)."""
    layout = cfg.parallel
    if layout is None or cfg.grouped or cfg.rope or cfg.cross or cfg.head_dim % layout.tp:
        return
    yield ShardingBug(
        "tp-global-heads-view",
        f"the rank's q, k, v split into all {cfg.heads} heads of d/T = "
        f"{cfg.head_dim // layout.tp} (the global head count on a local shard)",
        "split the rank's width into its own heads: .view(B, S, -1, head_dim) "
        "(heads // world of them), never .view(B, S, heads, -1)",
        "context",
        tweaks={"context": _global_view(cfg)},
    )


def _global_view(cfg: AttentionConfig) -> Tweak:
    """The rank's context as the code makes it with h heads of d/T, laid out as the reference's
    (B, h/T, S, d) so that the merge gives the code's merged."""
    import numpy as np

    T = cfg.parallel.tp if cfg.parallel else 1
    h, d, scale = cfg.heads, cfg.head_dim // T, cfg.score_scale

    def wrong(done: Mapping[str, Any], value: Any) -> Any:
        q, k, v = (done[f"{c}_proj"] for c in "qkv")  # (B, S, h/T·d) each
        B, S, width = q.shape
        q, k, v = (t.reshape(B, S, h, d).transpose(0, 2, 1, 3) for t in (q, k, v))  # (B,h,S,d/T)
        scores = q @ k.transpose(0, 1, 3, 2) * scale  # (B, h, S, S)
        if cfg.causal:
            scores = np.where(np.tril(np.ones((S, S), dtype=bool)), scores, -np.inf)
        w = np.exp(scores - scores.max(-1, keepdims=True))  # (B, h, S, S)
        w = w / w.sum(-1, keepdims=True)
        merged = (w @ v).transpose(0, 2, 1, 3).reshape(B, S, width)  # (B, S, h/T·d)
        heads = value.shape[1]
        return merged.reshape(B, S, heads, width // heads).transpose(0, 2, 1, 3).astype(value.dtype)

    return wrong


def _rope_restart(cfg: AttentionConfig) -> Iterator[ShardingBug]:
    """RoPE's positions counted from 0 on every sequence shard."""
    if not cfg.rope or cfg.parallel is None or cfg.parallel.cp_kind == "allgather":
        return

    yield ShardingBug(
        "cp-rope-restart",
        "RoPE positions restart at 0 on every sequence shard (the rank's local positions)",
        "rotate each token by its global position: positions = rank * (S // world) + "
        "arange(S // world) (the shard's offset added)",
        "rope_cos",
        tweaks={
            "rope_cos": lambda done, value: done["__rope_cos"][: value.shape[0]],
            "rope_sin": lambda done, value: done["__rope_sin"][: value.shape[0]],
        },
    )


def _ring(cfg: AttentionConfig) -> Iterator[ShardingBug]:
    """The merge of ring rounds, and what each round's block sees."""

    def merged(how: str) -> Tweak:
        def wrong(done: Mapping[str, Any], value: Any) -> Any:
            before = done.get("context_merged", done["context"])  # (B, h, S/C, d)
            lse = done["lse_ring"]  # (B, h, S/C)
            if not (lse > -1e30).any():  # a block every row masks (guarded): the code skips it
                return before
            part = done["context_ring"]  # (B, h, S/C, d)
            if how == "local":
                return before
            return (before + part) / 2 if how == "mean" else before + part

        return wrong

    rescale = (
        "merge each block by its log-sum-exp: lse = logaddexp(lse, block_lse); "
        "out = out·exp(lse_old - lse) + block_out·exp(block_lse - lse)"
    )
    for how, words in (
        ("mean", "averaged (equal weights)"),
        ("sum", "summed"),
    ):
        yield ShardingBug(
            f"ring-merge-{how}",
            f"ring attention's partial outputs {words}, not rescaled by their log-sum-exp",
            rescale,
            "context_merged",
            tweaks={"context_merged": merged(how)},
        )
    yield ShardingBug(
        "ring-local-keys-only",
        "softmax over the rank's local key shard only: the blocks of the other ranks are "
        "never attended",
        "pass k and v round the ring (world - 1 send/recv) and merge every block's output "
        "by its log-sum-exp",
        "context_merged",
        tweaks={"context_merged": merged("local")},
    )
    if cfg.causal:
        yield ShardingBug(
            "cp-causal-local",
            "causal mask from the rank's local positions: every block masked as if it were the "
            "rank's own (earlier ranks' keys hidden from later queries)",
            "mask by global positions: a block from an earlier rank is seen whole, the rank's "
            "own block is causal, a later rank's is skipped (causal only where source == rank)",
            "mask_ring",
            tweaks={"mask_ring": _local_causal},
        )


def _allgather(cfg: AttentionConfig) -> Iterator[ShardingBug]:
    """All-gathered keys masked from the rank's local query positions."""
    import numpy as np

    if not cfg.causal:
        return

    def local(done: Mapping[str, Any], value: Any) -> Any:
        s, n = value.shape[-2:]  # (…, S/C, S): queries 0 … S/C-1 against every key
        return np.broadcast_to(np.tril(np.ones((s, n), dtype=bool)), value.shape).copy()

    yield ShardingBug(
        "cp-causal-local",
        "causal mask from the rank's local positions: its queries counted from 0 against the "
        "all-gathered keys (later ranks' queries blind to most of the past)",
        "mask by global positions: query i of rank c sits at c·S/C + i; keep key j where "
        "j <= c·S/C + i",
        "mask",
        tweaks={"mask": local},
    )


def _local_causal(done: Mapping[str, Any], value: Any) -> Any:
    """The keep-mask of a block as local positions give it (tril), where the block is seen."""
    import numpy as np

    if not value.any():  # a later rank's block: the code skips it either way
        return value
    s, n = value.shape[-2:]
    return np.broadcast_to(np.tril(np.ones((s, n), dtype=bool)), value.shape).copy()


def _ulysses(cfg: AttentionConfig) -> Iterator[ShardingBug]:
    """The two all-to-alls: which heads go where, and in what order the tokens come back."""
    import numpy as np

    layout = cfg.parallel
    if layout is None or cfg.grouped:
        return
    C = layout.cp
    h = cfg.heads // layout.tp
    order = [c + C * j for c in range(C) for j in range(h // C)]  # rank c: heads c, c+C, …
    strided_differs = h // C > 1  # one head a rank: both orders are the same

    def strided(done: Mapping[str, Any], value: Any) -> Any:
        return np.ascontiguousarray(value[:, order])  # (B, h/T, S/C, d) in the strided order

    def interleaved(done: Mapping[str, Any], value: Any) -> Any:
        B, heads, S, d = value.shape  # (B, h/TC, S, d), tokens as (C, S/C)
        return value.reshape(B, heads, C, S // C, d).transpose(0, 1, 3, 2, 4).reshape(value.shape)

    yield from [
        ShardingBug(
            "ulysses-heads-order",
            "heads split in the wrong order across ranks: the first all-to-all sends rank c the "
            "heads c, c+C, … while the second brings them back as contiguous blocks",
            "split the heads the same way both ways: t.reshape(B, s, world, h // world, d) before "
            "the first all-to-all (rank c gets heads c·h/C …), the inverse after the second",
            "q_all_to_all",
            tweaks={"q": strided, "k": strided, "v": strided},
        )
    ][: int(strided_differs)]
    yield ShardingBug(
        "ulysses-seq-order",
        "all-to-all read on the wrong axis: the gathered sequence laid out as (S/C, C), the "
        "ranks' tokens interleaved instead of one rank's run after another",
        "after all_to_all_single the first axis is the source rank: "
        "got.permute(1, 0, 2, 3, 4).reshape(B, world * s, h // world, d)",
        "q_all_to_all",
        tweaks={f"{c}_all_to_all": interleaved for c in "qkv"},
    )


#: Between a step's name and its round, for the rounds after the first (``context_merged@3``).
ROUND = "@"


class ReplayRecorder(Recorder[Any]):
    """A rank's recorder that gives each tweaked step its mistaken value, every time the step
    is recorded; ``latest`` holds each step's last value (and the global RoPE tables). A step
    recorded again (ring round 2 on: ``k_ring_recv``, ``context_merged``) is its own step
    ``NAME@ROUND`` with its values, so that every round is compared, not the first alone."""

    def __init__(
        self,
        be: Backend[Any],
        config: AttentionConfig,
        keep_values: bool,
        tweaks: Mapping[str, Tweak],
        extra: Mapping[str, Any],
    ) -> None:
        super().__init__(be, config, keep_values)
        self.tweaks = tweaks
        self.latest: dict[str, Any] = {f"__{k}": v for k, v in extra.items()}
        self.rounds: dict[str, int] = {}  # how many times each step was recorded

    def step(self, name: str, value: Any, op: str, axes: tuple[str, ...], **kw: Any) -> Any:
        if name in self.tweaks:
            value = self.tweaks[name](self.latest, value)
        self.latest[name] = value
        if name in self._repeats:  # a later round: its own step
            self.rounds[name] = self.rounds.get(name, 1) + 1
            name = f"{name}{ROUND}{self.rounds[name]}"
        return super().step(name, value, op, axes, **kw)


def replay(
    config: AttentionConfig, tensors: Mapping[str, np.ndarray], bug: ShardingBug | None = None
) -> list[RankRun[Any]]:
    """Every rank of ``config.parallel`` simulated on numpy from the global ``tensors`` (x and
    the weights), every value kept; with ``bug`` applied."""
    from attntrace.backends import get_backend
    from attntrace.engine.inputs import random_sources, with_tensors
    from attntrace.engine.rope import rope_sources
    from attntrace.sharding.simulate import simulate

    if bug is not None and bug.config:
        config = dataclasses.replace(config, **bug.config)
    be = get_backend("numpy")
    single = dataclasses.replace(config, parallel=None)
    seeded = {**random_sources(single), **rope_sources(single)}
    given = {n: tensors.get(n) for n in seeded if n in tensors or n.startswith("b_")}
    sources = {
        n: be.tensor(s) for n, s in with_tensors(single, seeded, given).items() if s is not None
    }
    tweaks = bug.tweaks if bug is not None else {}
    extra: dict[str, Any] = {
        n: be.to_numpy(sources[n]) for n in ("rope_cos", "rope_sin", "b_o") if n in sources
    }

    def recorder(b: Backend[Any], cfg: AttentionConfig, keep: bool) -> Recorder[Any]:
        return ReplayRecorder(b, cfg, keep, tweaks, extra)

    import numpy as np

    with np.errstate(all="ignore"):  # a mistake may well make NaN
        return simulate(config, be, sources, keep_all=True, recorder=recorder)
