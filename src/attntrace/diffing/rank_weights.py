"""The weights of a layer split across ranks, put back together: each rank's own parameters
(read from its module, DTensor shards as their local part) joined in Megatron's layout, so the
reference's rank view runs from exactly the shards the user's ranks hold.

Megatron's layout (``ColumnParallelLinear`` / ``RowParallelLinear``, torch's ``ColwiseParallel``
/ ``RowwiseParallel``): TP rank t holds rows t·h/T·d … of ``w_q`` (and of ``b_q``), the rows of
its kv-heads of ``w_k``, ``w_v`` (with g < T the one kv-head t·g/T, a copy on T/g ranks),
columns t·h/T·d … of ``w_o`` and all of ``b_o``; the C ranks of a CP group hold the same.
What should be a copy and is not (a kv-head, ``b_o``, a CP rank's weights) is a
:class:`Mismatch`: the first sharding bug, found before anything runs.

>>> import numpy as np
>>> ranks = [{"q.weight": np.full((2, 4), r), "o.weight": np.full((4, 2), r)} for r in (0, 1)]
>>> [role_of(name) for name in ranks[0]]
['w_q', 'w_o']
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from attntrace.errors import CannotTellError

if TYPE_CHECKING:
    import numpy as np

    from attntrace.config.attention_config import AttentionConfig
    from attntrace.config.parallel_layout import ParallelLayout

#: The names people give each projection's module (the last part of a parameter's path).
_NAMES = {
    "q": ("q_proj", "q", "query", "wq", "to_q", "q_lin", "linear_q"),
    "k": ("k_proj", "k", "key", "wk", "to_k", "k_lin", "linear_k"),
    "v": ("v_proj", "v", "value", "wv", "to_v", "v_lin", "linear_v"),
    "o": ("o_proj", "out_proj", "o", "wo", "dense", "proj", "c_proj", "to_out", "out", "linear_o"),
}
#: The names of a fused q, k, v projection (rows q, then k, then v, each rank its own heads').
_FUSED = ("qkv", "c_attn", "qkv_proj", "wqkv", "to_qkv", "qkv_linear", "linear_qkv")
_PARAM = re.compile(r"(?:^|\.)(\w+)\.(weight|bias)$")


def role_of(name: str) -> str | None:
    """``w_q`` … ``b_o`` for a parameter path such as ``attn.q_proj.weight``, else None.

    >>> role_of("layers.0.attn.o_proj.bias"), role_of("norm.weight")
    ('b_o', None)
    """
    found = _PARAM.search(name)
    if found is None:
        return None
    module, kind = found.groups()
    if module.lower() in _FUSED:
        return f"{'w' if kind == 'weight' else 'b'}_qkv"
    for c, names in _NAMES.items():
        if module in names:
            return f"{'w' if kind == 'weight' else 'b'}_{c}"
    return None


@dataclass(frozen=True)
class Mismatch:
    """A parameter that should be a copy of another rank's and is not."""

    param: str  # "w_k", "b_o", …
    kind: str  # "kv" (a replicated kv-head), "bias" (b_o), "cp" (a CP rank's weights)
    rank: int  # the rank whose copy differs
    like: int  # the rank it should equal
    why: str  # in words: what should be shared, and by whom


@dataclass(frozen=True)
class Joined:
    """The global tensors the reference runs from, where each came from, and the first
    parameter that should be a copy and is not."""

    tensors: dict[str, np.ndarray]  # x, w_q, …, b_o (global shapes)
    sources: dict[str, str]  # "w_q" -> "q_proj.weight"
    mismatch: Mismatch | None


def roles(params: Mapping[str, np.ndarray]) -> dict[str, str]:
    """``{role: parameter path}`` of one rank's parameters; a role named twice or a missing
    weight cannot be told (a fused qkv is not read here)."""
    found: dict[str, str] = {}
    for name in params:
        role = role_of(name)
        if role is None:
            continue
        if role in found:
            raise CannotTellError(
                f"two parameters play {role}: {found[role]} and {name}; diff --nproc reads "
                "q_proj, k_proj, v_proj, o_proj (or query/key/value/dense, wq/wk/wv/wo)"
            )
        found[role] = name
    missing = [w for w in ("w_q", "w_k", "w_v", "w_o") if w not in found]
    if missing:
        raise CannotTellError(
            f"no parameter of the module plays {', '.join(missing)} (its parameters: "
            f"{', '.join(params) or 'none'}); name the projections q_proj, k_proj, v_proj, "
            "o_proj (or query/key/value/dense, wq/wk/wv/wo); fused qkv is not read across ranks"
        )
    return found


def join(
    config: AttentionConfig, layout: ParallelLayout, params: Sequence[Mapping[str, np.ndarray]]
) -> Joined:
    """The global weights from every rank's ``params`` (index = rank), Megatron's layout."""
    import numpy as np

    params = [unfuse(p, config, layout) for p in params]
    where = roles(params[0])
    T, C = layout.tp, layout.cp
    tensors: dict[str, np.ndarray] = {}
    for role, name in where.items():
        parts = [np.asarray(params[t][name]) for t in range(T)]
        tensors[role] = _join_role(role, parts, config, layout)
    mismatch = _copies(config, layout, params, where)
    if mismatch is None and C > 1:
        mismatch = _cp_copies(layout, params, where)
    return Joined(tensors=tensors, sources=where, mismatch=mismatch)


def unfuse(
    params: Mapping[str, np.ndarray], config: AttentionConfig, layout: ParallelLayout
) -> Mapping[str, np.ndarray]:
    """A rank's fused qkv projection split into q, k, v (rows: the rank's h/T heads of q, then
    its kv-heads of k, of v), named ``qkv.weight[q]`` …; other parameters as they are."""
    fused = {role_of(n): n for n in params if role_of(n) in ("w_qkv", "b_qkv")}
    if not fused:
        return params
    d = config.head_dim
    sizes = (config.heads // layout.tp * d, *(2 * (layout.kv_heads(config) * d,)))
    out = {n: v for n, v in params.items() if n not in fused.values()}
    for name in fused.values():
        value = params[name]
        if value.shape[0] != sum(sizes):
            raise CannotTellError(
                f"{name} has {value.shape[0]} rows, not q, k, v's {' + '.join(map(str, sizes))} "
                "on a rank; diff --nproc reads a fused qkv as the rank's q, k, v rows in turn"
            )
        at = 0
        for c, n in zip("qkv", sizes, strict=True):
            part = name.replace(name.rsplit(".", 2)[-2], f"{c}_proj", 1)
            out[part] = value[at : at + n]
            at += n
    return out


def holder(config: AttentionConfig, layout: ParallelLayout, t: int) -> int:
    """The first kv-head TP rank ``t`` holds (Megatron's: t·g/T when g < T)."""
    g, T = config.groups, layout.tp
    return t * g // T if g < T else t * (g // T)


def _join_role(
    role: str, parts: list[np.ndarray], config: AttentionConfig, layout: ParallelLayout
) -> np.ndarray:
    import numpy as np

    T = layout.tp
    if T == 1 or role == "b_o":
        return parts[0]
    if role == "w_o":
        return np.concatenate(parts, axis=1)  # (H, h·d): the columns of each rank
    if role[-1] in "kv" and config.groups < T:  # one kv-head a rank: each from its first holder
        step = T // config.groups
        return np.concatenate(parts[::step], axis=0)
    return np.concatenate(parts, axis=0)  # (h·d, H): the rows of each rank


def _copies(
    config: AttentionConfig,
    layout: ParallelLayout,
    params: Sequence[Mapping[str, np.ndarray]],
    where: Mapping[str, str],
) -> Mismatch | None:
    """The first TP copy that is not one: a replicated kv-head (g < T), or ``b_o``."""
    import numpy as np

    T = layout.tp
    checks: list[tuple[str, int, int, str]] = []  # (role, rank, the rank it copies, why)
    if config.groups < T:
        for t in range(T):
            first = (t // (T // config.groups)) * (T // config.groups)
            why = (
                f"with {config.groups} kv head(s) on {T} ranks, rank t holds kv head t·g/T "
                f"= {holder(config, layout, t)}, a copy of rank {first}'s"
            )
            checks += [(f"{c}_{p}", t, first, why) for p in "kv" for c in "wb" if t != first]
    same = "the row-parallel bias b_o is the same on every rank"
    checks += [("b_o", t, 0, same) for t in range(1, T)]
    for role, t, first, why in checks:
        if role not in where:
            continue
        a, b = np.asarray(params[t][where[role]]), np.asarray(params[first][where[role]])
        if a.shape != b.shape or not np.array_equal(a, b):
            return Mismatch(role, "bias" if role == "b_o" else "kv", t, first, why)
    return None


def _cp_copies(
    layout: ParallelLayout,
    params: Sequence[Mapping[str, np.ndarray]],
    where: Mapping[str, str],
) -> Mismatch | None:
    """The first weight of a CP rank that is not its TP twin's in CP group 0."""
    import numpy as np

    for r in range(layout.tp, layout.ranks):
        twin = r % layout.tp
        for role, name in where.items():
            a, b = np.asarray(params[r][name]), np.asarray(params[twin][name])
            if a.shape != b.shape or not np.array_equal(a, b):
                why = "context-parallel ranks hold the same weights (build them from one seed)"
                return Mismatch(role, "cp", r, twin, why)
    return None


def join_x(layout: ParallelLayout, xs: Sequence[np.ndarray]) -> np.ndarray:
    """The global x from every rank's: CP group c's contiguous run of tokens, in order (TP
    ranks hold the same x; the sequence is the second-to-last axis).

    >>> import numpy as np
    >>> from attntrace.config.parallel_layout import ParallelLayout
    >>> join_x(ParallelLayout(cp=2), [np.zeros((1, 2, 4)), np.ones((1, 2, 4))]).shape
    (1, 4, 4)
    """
    import numpy as np

    runs = [np.asarray(xs[c * layout.tp]) for c in range(layout.cp)]
    return runs[0] if len(runs) == 1 else np.concatenate(runs, axis=-2)
