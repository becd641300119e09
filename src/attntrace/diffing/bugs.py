"""The catalogue of silent attention bugs: each is a change to the reference computation
(a step computed the mistaken way, swapped weights, other RoPE tables or another scale) that
:mod:`attntrace.diffing.diagnose` runs to see whether it reproduces the user's numbers."""

from __future__ import annotations

import dataclasses
import itertools
import math
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from attntrace.config.attention_config import AttentionConfig
from attntrace.engine.attention import StepReplacement
from attntrace.engine.rope import rope_tables
from attntrace.trace import Trace

if TYPE_CHECKING:
    import numpy as np

Done = Mapping[str, "np.ndarray"]


@dataclass(frozen=True)
class Bug:
    """One suspected mistake, ready to apply to the reference."""

    key: str  # stable id, e.g. "softmax-axis" (JSON, tests)
    name: str  # what the user did, e.g. "softmax over the wrong axis"
    fix: str  # what to write instead
    at: str  # the first reference step the mistake changes
    replace: dict[str, StepReplacement] = field(default_factory=dict)
    tensors: dict[str, Any] = field(default_factory=dict)  # weights or RoPE tables to use instead
    config: dict[str, Any] = field(default_factory=dict)  # config fields changed, e.g. the scale
    needs_match: str = ""  # a step the user must have right for this bug to apply (scaled twice)
    blame_first: bool = (
        False  # blame the first user tensor with the mistaken numbers, even one that
    )
    # matches another reference step (swapped projections); else the first that matches none


@dataclass(frozen=True)
class Setting:
    """What the bugs are built from: the config, the reference trace and its tensors."""

    config: AttentionConfig
    ref: Trace
    tensors: Mapping[str, Any]  # x and the parameters the reference ran with
    kernel: bool = False  # the code calls a fused kernel (SDPA): its argument bugs are tried

    @property
    def lead(self) -> tuple[int, ...]:
        return (self.config.batch,) if self.config.batch is not None else ()

    @property
    def k_name(self) -> str:
        """The step that k_t transposes."""
        return "k_rep" if self.config.grouped else "k_rot" if self.config.rope else "k"


def catalogue(s: Setting) -> list[Bug]:
    """Every bug that can happen with ``s.config`` (shapes allowing), in the order tried."""
    makers: list[Callable[[Setting], Iterator[Bug]]] = [
        _projection_layout,
        _swapped,
        _split,
        _rope,
        _repeat,
        _k_transpose,
        _scaling,
        _mask,
        _softmax_axis,
        _merge,
        _output,
        _decode,
        _kernel,
    ]
    return [bug for make in makers for bug in make(s)]


def _kernel(s: Setting) -> Iterator[Bug]:
    """The bugs only a kernel call makes (:mod:`attntrace.diffing.kernel_bugs`)."""
    from attntrace.diffing.kernel_bugs import kernel_bugs

    return (Bug(**fields) for fields in kernel_bugs(s))


def _decode(s: Setting) -> Iterator[Bug]:
    """--past: the bugs of a decode step (:mod:`attntrace.diffing.decode`)."""
    from attntrace.diffing.decode import decode_bugs

    return (Bug(**fields) for fields in decode_bugs(s))


def _cast(out: np.ndarray, like: np.ndarray) -> np.ndarray:
    return out.astype(like.dtype, copy=False)


def _projection_layout(s: Setting) -> Iterator[Bug]:
    """``x @ W`` where the weight is (out, in): the same shape only when W is square."""
    for c in "qkvo":
        w = s.tensors.get(f"w_{c}")
        if w is None or w.shape[0] != w.shape[1]:
            continue
        step = "output" if c == "o" else f"{c}_proj"
        src = "merged" if c == "o" else "x_kv" if c in "kv" and s.config.cross else "x"
        bias = s.tensors.get(f"b_{c}")

        def wrong(
            done: Done, value: np.ndarray, w: np.ndarray = w, src: str = src, b: Any = bias
        ) -> np.ndarray:
            # (B, S, out): x @ W, W (out, in) square
            return _cast(done[src] @ w + (0 if b is None else b), value)

        yield Bug(
            key=f"untransposed-w_{c}",
            name=f"x @ W instead of x @ W.T in the {c} projection",
            fix=f"a weight is (out_features, in_features): write x @ w_{c}.T "
            "(or use nn.Linear / F.linear)",
            at=step,
            replace={step: wrong},
        )


def _swapped(s: Setting) -> Iterator[Bug]:
    """Two of the q, k, v projections used in each other's place."""
    for a, b in itertools.combinations("qkv", 2):
        wa, wb = s.tensors.get(f"w_{a}"), s.tensors.get(f"w_{b}")
        if wa is None or wb is None or wa.shape != wb.shape or s.config.cross:
            continue
        swap = {f"w_{a}": wb, f"w_{b}": wa}
        if s.config.bias:
            swap |= {f"b_{a}": s.tensors.get(f"b_{b}"), f"b_{b}": s.tensors.get(f"b_{a}")}
        yield Bug(
            f"swapped-{a}{b}",
            f"the {a} and {b} projections swapped",
            f"compute {a} with the {a} projection (w_{a}) and {b} with w_{b}",
            f"{a}_proj",
            tensors=swap,
            blame_first=True,
        )
    yield from _borrowed(s)


def _borrowed(s: Setting) -> Iterator[Bug]:
    """One of the q, k, v projections computed with another's weights (``q =
    self.k_proj(x)``): the other keeps its own."""
    for a, b in itertools.permutations("qkv", 2):
        wa, wb = s.tensors.get(f"w_{a}"), s.tensors.get(f"w_{b}")
        if wa is None or wb is None or wa.shape != wb.shape or s.config.cross:
            continue
        taken = {f"w_{a}": wb} | ({f"b_{a}": s.tensors.get(f"b_{b}")} if s.config.bias else {})
        yield Bug(
            f"{a}-from-{b}",
            f"{a} computed with the {b} projection",
            f"compute {a} with its own projection (w_{a}), not w_{b}",
            f"{a}_proj",
            tensors=taken,
            blame_first=True,
        )


def _split(s: Setting) -> Iterator[Bug]:
    """Heads split by a bare view to (B, h, S, d), without the transpose."""
    cfg = s.config

    def wrong(c: str) -> StepReplacement:
        new_keys = cfg.seq if cfg.past else cfg.keys  # --past: x makes S new keys
        heads, seq = (cfg.heads, cfg.seq) if c == "q" else (cfg.groups, new_keys)
        shape = (*s.lead, heads, seq, cfg.head_dim)
        # (B, h, S, d) straight from (B, S, H)
        return lambda done, value: done[f"{c}_proj"].reshape(shape)

    def columns_dh(c: str) -> StepReplacement:
        new_keys = cfg.seq if cfg.past else cfg.keys
        heads, seq = (cfg.heads, cfg.seq) if c == "q" else (cfg.groups, new_keys)
        lead = len(s.lead)
        order = (*range(lead), lead + 2, lead, lead + 1)  # (B, d, h) columns -> (B, h, S, d)

        def wrong(done: Done, value: np.ndarray) -> np.ndarray:
            t = done[f"{c}_proj"].reshape(*s.lead, seq, cfg.head_dim, heads)  # (B, S, d, h)
            return t.transpose(order)  # (B, h, S, d): head i takes every h-th column

        return wrong

    yield Bug(
        key="split-d-h-qkv",
        name="heads of q, k, v taken from the columns as (d h) instead of (h d)",
        fix="the columns of a projection are (h d), head by head: "
        'rearrange(t, "b s (h d) -> b h s d", h=h) or t.view(B, S, h, d).transpose(1, 2)',
        at="q",
        replace={c: columns_dh(c) for c in "qkv"},
    )
    for which in ("qkv", "q", "k", "v"):
        yield Bug(
            key=f"split-no-transpose-{which}",
            name=f"heads of {', '.join(which)} split without the transpose",
            fix="split with .view(B, S, h, d).transpose(1, 2); "
            "a bare view(B, h, S, d) mixes tokens into heads",
            at=which[0],
            replace={c: wrong(c) for c in which},
        )


def _merge(s: Setting) -> Iterator[Bug]:
    """Heads merged straight from (B, h, S, d), without transposing back."""
    shape = (*s.lead, s.config.seq, s.config.heads * s.config.head_dim)

    def wrong(done: Done, value: np.ndarray) -> np.ndarray:
        return done["context"].reshape(shape)  # (B, S, H) straight from (B, h, S, d)

    yield Bug(
        key="merge-no-transpose",
        name="heads merged without transposing back",
        fix="transpose back first: context.transpose(1, 2).reshape(B, S, H)",
        at="merged",
        replace={"merged": wrong},
    )


def _softmax(x: np.ndarray, axis: int, max_axis: int | None = None) -> np.ndarray:
    """Softmax as user code writes it (a row of only -inf gives NaN); ``max_axis``: the axis
    of the max subtracted first, where it is not ``axis`` (the sum alone on the wrong axis)."""
    import numpy as np

    shift = axis if max_axis is None else max_axis
    with np.errstate(invalid="ignore", over="ignore"):
        e = np.exp(x - x.max(axis=shift, keepdims=True))  # (B, h, S, N)
        out: np.ndarray = e / e.sum(axis=axis, keepdims=True)  # (B, h, S, N)
    return out


def _softmax_axis(s: Setting) -> Iterator[Bug]:
    names = [step.name for step in s.ref.steps]
    last = names[names.index("weights") - 1]  # what the softmax reads: masked, biased, scaled
    axes = s.ref["weights"].axes
    for axis in range(len(axes) - 1):

        def wrong(done: Done, value: np.ndarray, axis: int = axis) -> np.ndarray:
            return _cast(_softmax(done[last], axis), value)  # (B, h, S, N)

        def wrong_sum(done: Done, value: np.ndarray, axis: int = axis) -> np.ndarray:
            return _cast(_softmax(done[last], axis, max_axis=-1), value)  # (B, h, S, N)

        yield Bug(
            key=f"softmax-axis-{axis}",
            name=f"softmax over the wrong axis (dim={axis}, {axes[axis]})",
            fix="take the softmax over the keys, the last axis: softmax(scores, dim=-1)",
            at="weights",
            replace={"weights": wrong},
        )
        yield Bug(
            key=f"softmax-sum-axis-{axis}",
            name=f"softmax's sum over the wrong axis (axis={axis}, {axes[axis]}; "
            "the max over the keys)",
            fix="divide by the sum over the keys, the last axis: e / e.sum(axis=-1, keepdims=True)",
            at="weights",
            replace={"weights": wrong_sum},
        )


def _scaling(s: Setting) -> Iterator[Bug]:
    cfg = s.config
    d, right = cfg.head_dim, cfg.score_scale
    factors = [
        (right * right, "scaling applied twice", "scaled-twice"),
        (1.0, "scores not scaled", "unscaled"),
        (1 / d, "scores scaled by 1/d instead of 1/√d", "scaled-1/d"),
        (1 / math.sqrt(cfg.hidden), "scores scaled by 1/√H instead of 1/√d", "scaled-1/sqrt(H)"),
        (math.sqrt(d), "scores multiplied by √d instead of divided", "scaled-sqrt(d)"),
    ]
    for factor, name, key in factors:
        if math.isclose(factor, right, rel_tol=1e-9):
            continue
        yield Bug(
            key,
            name,
            f"scale the scores once, by {right:.6g} (1/√d with d = {d}): scores / math.sqrt(d)",
            "scaled",
            config={"scale": factor},
            needs_match="scaled" if key == "scaled-twice" else "",
        )


def _k_transpose(s: Setting) -> Iterator[Bug]:
    """K made (…, d, N) by the wrong permutation, or by a reshape."""
    k = s.ref[s.k_name].value
    shape = s.ref["k_t"].shape
    assert k is not None
    right = (*range(k.ndim - 2), k.ndim - 1, k.ndim - 2)
    orders = [
        o
        for o in itertools.permutations(range(k.ndim))
        if o != right and tuple(k.shape[i] for i in o) == shape
    ]
    for order in orders:

        def wrong(done: Done, value: np.ndarray, order: tuple[int, ...] = order) -> np.ndarray:
            return done[s.k_name].transpose(order)  # (B, h, d, N) by another order

        yield Bug(
            key=f"k-permute{order}",
            name=f"K transposed over the wrong axes (permute{order})",
            fix="swap only the last two axes of k: k.transpose(-2, -1)",
            at="k_t",
            replace={"k_t": wrong},
        )

    def reshaped(done: Done, value: np.ndarray) -> np.ndarray:
        return done[s.k_name].reshape(shape)  # (B, h, d, N) by a reshape

    yield Bug(
        key="k-reshape",
        name="K reshaped to (…, d, S) instead of transposed",
        fix="transpose, don't reshape: k.transpose(-2, -1)",
        at="k_t",
        replace={"k_t": reshaped},
    )


def _mask(s: Setting) -> Iterator[Bug]:
    import numpy as np

    cfg = s.config
    if "mask" not in s.ref and cfg.seq == cfg.keys:
        yield Bug(
            "causal-unexpected",
            "a causal mask the reference was not asked for",
            "pass --causal when the model is causal (a decoder); else drop the mask / is_causal",
            "scaled",
            config={"causal": True},
        )
    if "mask" not in s.ref or s.ref["mask"].dtype != "bool":
        return

    def inverted(done: Done, value: np.ndarray) -> np.ndarray:
        return np.where(done["mask"], -np.inf, done["scaled"]).astype(value.dtype)  # (B, h, S, N)

    yield Bug(
        key="mask-inverted",
        name="mask polarity inverted (the kept keys are masked)",
        fix="mask where the mask says *not* to attend: masked_fill(~keep, -inf), or flip the mask",
        at="masked",
        replace={"masked": inverted},
    )
    if cfg.causal and cfg.key_lengths is None:
        for offset, name in (
            (-1, "causal mask excludes the diagonal (off by one)"),
            (1, "causal mask lets each query see one future key (off by one)"),
        ):

            def shifted(done: Done, value: np.ndarray, offset: int = offset) -> np.ndarray:
                return np.broadcast_to(
                    np.tril(np.ones((cfg.seq, cfg.keys), dtype=bool), offset), value.shape
                )

            yield Bug(
                key=f"causal-offset{offset:+d}",
                name=name,
                fix="a query attends keys up to and including itself: "
                "torch.tril(ones(S, S)), masked where 0 "
                "(or torch.triu(ones, diagonal=1) as the positions to mask)",
                at="mask",
                replace={"mask": shifted},
            )
    yield Bug(
        key="mask-missing",
        name="mask not applied",
        fix="apply the mask to the scaled scores before the softmax",
        at="masked",
        replace={"masked": lambda done, value: done["scaled"]},
    )
    for fill, how in ((0.0, "zeros"), (-np.inf, "-inf")):

        def after(done: Done, value: np.ndarray, fill: float = fill) -> np.ndarray:
            # (B, h, S, N)
            return np.where(done["mask"], _softmax(done["scaled"], -1), fill).astype(value.dtype)

        yield Bug(
            key=f"mask-after-softmax-{how}",
            name=f"mask applied after the softmax (masked weights set to {how})",
            fix="mask the scaled scores with -inf *before* the softmax, "
            "so each row sums to 1 over the kept keys",
            at="masked",
            replace={"masked": lambda done, value: done["scaled"], "weights": after},
        )


def _repeat(s: Setting) -> Iterator[Bug]:
    """GQA: kv heads tiled (0, 1, 0, 1) instead of interleaved (0, 0, 1, 1)."""
    import numpy as np

    cfg = s.config
    if not cfg.grouped:
        return
    r, axis = cfg.heads // cfg.groups, len(s.lead)
    src = {"k_rep": "k_rot" if cfg.rope else "k", "v_rep": "v"}
    if cfg.past:  # --past: the repeat reads the keys and values after the append
        src = {"k_rep": "k_all", "v_rep": "v_all"}

    def tiled(name: str) -> StepReplacement:
        def wrong(done: Done, value: np.ndarray) -> np.ndarray:
            reps = [1] * value.ndim
            reps[axis] = r
            return np.tile(done[src[name]], reps)  # (B, h, N, d): heads 0, 1, 0, 1

        return wrong

    for which, label in ((("k_rep", "v_rep"), "k and v"), (("k_rep",), "k"), (("v_rep",), "v")):
        yield Bug(
            key=f"gqa-tile-{'-'.join(w[0] for w in which)}",
            name=f"kv heads of {label} expanded with repeat/tile instead of repeat_interleave",
            fix=f"each kv head serves {r} consecutive query heads: k.repeat_interleave({r}, dim=1)",
            at=which[0],
            replace={name: tiled(name) for name in which},
        )


#: What each --rope-style pairs, and how to say the other is wrong.
_PAIRINGS = {
    "half": (
        "halves (i, i + d/2)",
        "rotate dimension i with i + d/2 (rotate_half), as Hugging Face Llama does",
    ),
    "interleaved": (
        "neighbours (2i, 2i+1)",
        "rotate dimension 2i with 2i + 1, as Meta's original checkpoints and GPT-J do",
    ),
}


def _rope(s: Setting) -> Iterator[Bug]:
    cfg = s.config
    if not cfg.rope:
        return
    other = "interleaved" if cfg.rope_style == "half" else "half"
    wrong_pairs = dataclasses.replace(cfg, rope_style=other)
    yield Bug(
        key=f"rope-{other}",
        name=f"RoPE pairs {_PAIRINGS[other][0]} where the weights expect "
        f"{_PAIRINGS[cfg.rope_style][0]}",
        fix=f"{_PAIRINGS[cfg.rope_style][1]}; or, if your model pairs "
        f"{_PAIRINGS[other][0]}, diff it with --rope-style {other}",
        at="q_rot",
        replace={"q_rot": _rotated("q", wrong_pairs), "k_rot": _rotated("k", wrong_pairs)},
    )
    for base in (10000.0, 500000.0, 1000000.0, 100000.0):
        if base != cfg.rope_base:
            yield Bug(
                key=f"rope-theta-{base:g}",
                name=f"RoPE with θ = {base:g} instead of {cfg.rope_base:g}",
                fix=f"use the model's rope_theta = {cfg.rope_base:g}",
                at="q_rot",
                replace=_tables(cfg, base, 0),
            )
    for start in (1, 2):
        yield Bug(
            key=f"rope-positions-from-{start}",
            name=f"RoPE positions start at {start}, not 0",
            fix="rotate position p by p·θᵢ with positions 0, 1, …, S-1 (torch.arange(S))",
            at="q_rot",
            replace=_tables(cfg, cfg.rope_base, start),
        )


def _tables(cfg: AttentionConfig, base: float, start: int) -> dict[str, StepReplacement]:
    """The cos and sin tables of another θ or of positions start, …, start + S - 1 (with the
    config's pairing, rotary dims and scaling)."""
    cos, sin = rope_tables(dataclasses.replace(cfg, rope_base=base, seq=cfg.seq + start))
    return {
        "rope_cos": lambda done, value: cos[start:].astype(value.dtype),  # (S, d)
        "rope_sin": lambda done, value: sin[start:].astype(value.dtype),  # (S, d)
    }


def _rotated(name: str, cfg: AttentionConfig) -> StepReplacement:
    """q or k rotated as ``cfg`` says (its pairing and tables), from the step before RoPE."""
    from attntrace.backends.numpy_backend import backend

    be, cos, sin = backend(), *rope_tables(cfg)  # (S, d) each
    r = cfg.rotary_dims or cfg.head_dim
    turn = be.rotate_pairs if cfg.rope_style == "interleaved" else be.rotate_part

    def wrong(done: Done, value: Any) -> Any:
        x = done[name]  # (B, h, S, d)
        return (x * cos + turn(x, r) * sin).astype(value.dtype)  # (B, h, S, d)

    return wrong


def _output(s: Setting) -> Iterator[Bug]:
    if s.ref["merged"].shape == s.ref["output"].shape:
        yield Bug(
            key="output-missing",
            name="output projection missing",
            fix="end with the output projection: o_proj(merged)",
            at="output",
            replace={"output": lambda done, value: done["merged"]},
        )
