"""The backward pass of attention: from ``d_output`` back to ``d_x`` (and ``d_x_kv``) and every
parameter's gradient, written once against the backend interface and recorded as named steps.

It is a stage of its own that runs after the forward and reads only what the forward keeps for
it, as autograd does for eager attention written in plain torch (:func:`saved_names`): the
inputs of the linear layers (x, merged), the operands of the two matmuls (q, k, v, weights) and
what a variant's derivative needs (RoPE's tables, the soft-cap's tanh, the boolean mask).

The gradient of step ``s`` is the step ``d_s``; the chain, for plain self-attention::

    d_output -> d_w_o, d_b_o, d_merged -> d_context_heads -> d_context
    -> d_weights = d_context @ vᵀ, d_v = weightsᵀ @ d_context
    -> d_scaled = weights ⊙ (d_weights − rowsum(d_weights ⊙ weights))   (softmax backward)
    -> d_scores = d_scaled · scale -> d_q = d_scores @ k, d_k_t = qᵀ @ d_scores -> d_k
    -> d_q_heads, d_q_proj (un-transpose, un-split) -> d_w_q, d_b_q, ... -> d_x

Variants: the mask zeroes the gradient where it hid a key (``where(mask, d_masked, 0)``), the
soft-cap multiplies by ``1 − (capped/c)²``, grouped-query attention sums the gradients of the
h/g query heads that shared a key/value head, RoPE rotates back (``d_q = d_q_rot·cos −
rotate_half(d_q_rot·sin)``), cross-attention's keys and values give ``d_x_kv``, T5's bias
table gets its gradient (each bucket's sum over its (query, key) pairs) and the q/k norms go
back through their RMSNorm (``d_n_q``, ``d_n_k``).

Flash (:func:`_flash_core`, FlashAttention-2's backward) keeps q, k, v, the context and the
forward's ``lse`` (B, h, S) instead of the weights: ``delta`` = rowsum(d_context ⊙ context),
then per key/value block and query block the weights tile made again (``s_again``,
``p_again`` = exp(s_again − lse)), ``d_v_block``, ``d_p_tile``, ``d_s_tile`` = p_again ⊙
(d_p_tile − delta) · scale, ``d_q_block``, ``d_k_block``; the rest of the chain is eager's.
Flash with a tile mask other than --causal, --softcap or T5's bias is refused
(:func:`check_backward`).
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, TypeVar, cast

from attntrace.backends.base import Backend, Source
from attntrace.engine.costs import peak_live_bytes
from attntrace.engine.flash import tiles
from attntrace.engine.inputs import normal_source, param_axes
from attntrace.engine.recorder import Recorder, StepReplacement
from attntrace.engine.relative import relative_sources
from attntrace.errors import ConfigError
from attntrace.trace import Training

if TYPE_CHECKING:
    import numpy as np

    from attntrace.config.attention_config import AttentionConfig
    from attntrace.trace import Step, Trace

T = TypeVar("T")

__all__ = [
    "BACKWARD_REFUSED",
    "backward_steps",
    "check_backward",
    "saved_names",
    "with_backward",
    "with_saved",
]

#: Variants whose backward is not written yet: ``--backward`` refuses them in one line.
BACKWARD_REFUSED: dict[str, str] = {
    "flash_mask": "flash with --window, --key-lengths or --mask",
    "flash_score": "flash with --softcap or --relative-bias",
    "past": "--past N (a decode step against a KV cache: training keeps none)",
    "alibi": "--alibi",
}


def check_backward(config: AttentionConfig, mask_file: bool = False) -> None:
    """Raise ConfigError naming the variant when ``config``'s backward is not written yet
    (``mask_file``: a --mask file is given).

    >>> from attntrace import AttentionConfig
    >>> check_backward(AttentionConfig(seq=3, hidden=8, heads=2, causal=True, algorithm="flash"))
    >>> try:
    ...     check_backward(AttentionConfig(seq=3, hidden=8, heads=2, algorithm="flash", softcap=5))
    ... except ConfigError as error:
    ...     print(error)
    --backward does not cover flash with --softcap or --relative-bias yet; leave out one of the two
    """
    flash = config.algorithm == "flash"
    on = {
        "flash_mask": flash
        and (config.window is not None or config.key_lengths is not None or mask_file),
        "flash_score": flash and (config.softcap is not None or config.relative_bias is not None),
        "past": config.past > 0,
        "alibi": config.alibi,
    }
    for variant, is_on in on.items():
        if is_on:
            name = BACKWARD_REFUSED[variant]
            raise ConfigError(f"--backward does not cover {name} yet; leave out one of the two")


def saved_names(
    config: AttentionConfig, names: tuple[str, ...], bool_mask: bool
) -> tuple[str, ...]:
    """The forward steps eager attention keeps for its backward (autograd's saved tensors, a
    view counted as the step that owns its memory), in the order of ``names``.

    >>> from attntrace import AttentionConfig
    >>> from attntrace.engine.attention import step_names
    >>> config = AttentionConfig(seq=3, hidden=8, heads=2)
    >>> saved_names(config, step_names(config), bool_mask=False)
    ('x', 'q_proj', 'k_proj', 'v_proj', 'weights', 'merged')
    """
    normed = config.qk_norm is not None
    q = "q_rot" if config.rope else "q_norm" if normed else "q_proj"
    k = "k_rep" if config.grouped else "k_rot" if config.rope else "k_norm" if normed else "k_proj"
    v = "v_rep" if config.grouped else "v_proj"
    saved = {"x", "x_kv", q, k, v, "rope_cos", "rope_sin", "capped", "weights", "merged"}
    if normed:  # RMSNorm keeps its input (and r and x·r, no steps: :func:`saved_extra`)
        saved |= {"q_proj", "k_proj"}
    if bool_mask:
        saved.add("mask")  # where(mask, scaled, -inf) keeps its condition; an added mask nothing
    return tuple(name for name in names if name in saved)


@dataclass(frozen=True)
class _Chain:
    """The forward tensors the backward reads, on the backend, and the axis bookkeeping."""

    config: AttentionConfig
    fwd: Mapping[str, Any]  # forward step or parameter name -> tensor on the backend
    lead: tuple[str, ...]  # ("B",) or ()
    sizes: tuple[int, ...]  # (B,) or ()

    def ax(self, *axes: str) -> tuple[str, ...]:
        return (*self.lead, *axes)

    @property
    def n(self) -> int:
        return len(self.lead)

    @property
    def rows(self) -> str:
        """The letters of the rows a weight gradient sums over: B·S or S."""
        return "·".join((*self.lead, "S"))


def backward_steps(
    forward: Trace,
    be: Backend[T],
    *,
    d_output: np.ndarray | None = None,
    keep_values: bool | Collection[str] = True,
    mistaken: Mapping[str, StepReplacement] | None = None,
) -> tuple[Step, ...]:
    """The backward steps of ``forward`` (a trace whose saved steps kept their values on a
    computing backend), from ``d_output`` (default: standard normal drawn from the seed),
    keeping the values of ``keep_values`` (True, False or step names). ``mistaken`` maps
    gradient names (``d_scaled`` …) to a mistaken computation, called with the values done so
    far, the forward's included (``attntrace diff --backward`` names a backward bug with it).

    >>> from attntrace import AttentionConfig, trace_attention
    >>> from attntrace.backends import get_backend
    >>> t = trace_attention(AttentionConfig(seq=3, hidden=8, heads=2), "shape")
    >>> steps = backward_steps(t, get_backend("shape"))
    >>> [(s.name, s.shape) for s in steps][6:9]
    [('d_weights', (2, 3, 3)), ('d_v', (2, 3, 4)), ('d_scaled', (2, 3, 3))]
    >>> steps[8].formula, steps[8].op
    ('4·h·S·S', 'weights ⊙ (d_weights − rowsum(d_weights ⊙ weights))')
    """
    config = forward.config
    check_backward(config)
    keep = keep_values if be.computes else False
    rec: Recorder[T] = Recorder(be, config, keep, replace=_with_forward(forward, mistaken))
    fwd = {s.name: _tensor(be, s) for s in forward.steps if s.name in _READ}
    fwd |= {p.name: _tensor(be, p) for p in forward.parameters}
    fwd |= {name: be.tensor(source) for name, source in relative_sources(config).items()}
    for s in forward.steps:
        if s.name in fwd:
            rec.registry.add(fwd[s.name], s.name, s.axes)
    lead, sizes = (("B",), (config.batch,)) if config.batch is not None else ((), ())
    chain = _Chain(config=config, fwd=fwd, lead=lead, sizes=sizes)
    out = forward["output"]
    d_out = rec.step(
        "d_output",
        be.tensor(_grad_source(config, out, d_output)),
        "∂L/∂output" + (" (given)" if d_output is not None else " (seeded normal)"),
        out.axes,
    )  # (B, S, H)
    mask = next((s for s in forward.steps if s.name == "mask"), None)
    _backward(chain, cast("Backend[T]", rec.meter), rec, d_out, mask=mask)
    return rec.finish()


def _with_forward(
    forward: Trace, mistaken: Mapping[str, StepReplacement] | None
) -> dict[str, StepReplacement]:
    """The gradient replacements of ``mistaken``, each given the forward's values beside the
    backward's (a mistaken softmax backward reads ``weights``)."""
    wanted = {name: f for name, f in (mistaken or {}).items() if name.startswith("d_")}
    if not wanted:
        return {}
    values = {s.name: s.value for s in forward.steps if s.value is not None}
    values |= {p.name: p.value for p in forward.parameters if p.value is not None}

    def wrap(f: StepReplacement) -> StepReplacement:
        return lambda done, value: f({**values, **done}, value)

    return {name: wrap(f) for name, f in wanted.items()}


#: The forward steps (and views) whose values the backward reads.
_READ = frozenset(
    {"x", "x_kv", "q", "q_rot", "k", "k_rot", "k_rep", "v", "v_rep", "rope_cos", "rope_sin"}
    | {"capped", "weights", "merged", "mask", "q_proj", "k_proj", "q_norm", "k_norm"}
    | {"context", "lse"}  # flash: its output and log-sum-exp
)


def _tensor(be: Backend[T], record: Any) -> T:
    """The forward record's kept values (or its shape alone) as a tensor of ``be``."""
    value = record.value
    return be.tensor(Source(shape=record.shape, dtype=record.dtype, make=lambda: value))


def _grad_source(config: AttentionConfig, out: Step, given: np.ndarray | None) -> Source:
    """``d_output``: the user's array (checked against the output's shape), or seeded."""
    if given is None:
        return normal_source("d_output", out.shape, config)
    if tuple(given.shape) != out.shape:
        raise ConfigError(
            f"--grad-output has shape {tuple(given.shape)}, the output is {out.shape}; "
            "save an array of the output's shape"
        )
    return Source(shape=out.shape, dtype=config.dtype, make=lambda: given)


def _backward(c: _Chain, be: Backend[T], rec: Recorder[T], d_out: T, *, mask: Step | None) -> None:
    """The chain of the module docstring, each gradient recorded as a step."""
    cfg, lab = c.config, c.config.labels()
    d_merged = _linear_back(c, be, rec, d_out, "merged", "o", lab.q_width)  # (B, S, h·d)
    d_heads = be.reshape(d_merged, (*c.sizes, cfg.seq, cfg.heads, cfg.head_dim))  # (B, S, h, d)
    d_heads = rec.view(
        "d_context_heads",
        d_heads,
        f"d_merged.view({', '.join((*c.lead, 'S'))}, h, d)",
        c.ax("S", "h", "d"),
    )
    d_context = be.transpose(d_heads, c.n, c.n + 1)  # (B, h, S, d)
    d_context = rec.view(
        "d_context",
        d_context,
        f"d_context_heads.transpose({c.n}, {c.n + 1})",
        c.ax("h", "S", "d"),
    )
    if cfg.algorithm == "flash":  # tile by tile from the lse: no (S, N) matrix either
        d_q, d_k, d_v = _flash_core(c, be, rec, d_context)  # (B, h, S, d), (B, h, N, d) twice
        d_q, d_k, d_v = _below_heads(c, be, rec, d_q, d_k, d_v)  # (B, g, N, d) with GQA
    else:
        d_logits, d_v = _through_softmax(c, be, rec, d_context, mask)  # (B, h, S, N), (B, h, N, d)
        d_scores = _to_scores(c, be, rec, d_logits, mask)  # (B, h, S, N)
        d_q, d_k, d_v = _to_heads(c, be, rec, d_scores, d_v)  # (B, h, S, d), (B, g, N, d) twice
    _to_inputs(c, be, rec, d_q, d_k, d_v)


def _through_softmax(
    c: _Chain, be: Backend[T], rec: Recorder[T], d_context: T, mask: Step | None
) -> tuple[T, T]:
    """d_weights and d_v from the context's matmul, then the softmax's backward."""
    N, v_name = c.config.labels().keys, "v_rep" if c.config.grouped else "v"
    weights, v = c.fwd["weights"], c.fwd[v_name]  # (B, h, S, N), (B, h, N, d)
    d_weights = be.matmul(d_context, be.transpose(v, -2, -1))  # (B, h, S, N)
    d_weights = rec.step(
        "d_weights", d_weights, f"d_context @ {v_name}ᵀ", c.ax("h", "S", N), contract="d"
    )
    d_v = be.matmul(be.transpose(weights, -2, -1), d_context)  # (B, h, N, d)
    d_v = rec.step(f"d_{v_name}", d_v, "weightsᵀ @ d_context", c.ax("h", N, "d"), contract="S")
    product = be.mul(d_weights, weights)  # (B, h, S, N)
    rows = be.reduce_sum(product)  # (B, h, S)
    rows = be.reshape(rows, (*be.shape(rows), 1))  # (B, h, S, 1)
    # nobody reads d_weights or the product again: one (S, N) buffer instead of three
    spare = be.computes and not rec.keeps("d_weights")
    d_logits = be.binary("sub", d_weights, rows, inplace=spare)  # (B, h, S, N)
    d_logits = be.binary("mul", d_logits, weights, inplace=spare)  # (B, h, S, N)
    del product
    rec.meter.discard()  # mul, row sum, sub, mul: 4 per element, in the step's letters
    for _ in range(4):
        rec.meter.charge("binary", out=d_logits)
    op = "weights ⊙ (d_weights − rowsum(d_weights ⊙ weights))"
    name = f"d_{_softmax_input(c.config, mask is not None)}"
    return rec.step(name, d_logits, op, c.ax("h", "S", N)), d_v


#: The op of flash's d_p_tile step: the gradient of a weights tile.
_D_P_TILE_OP = "d_context_block @ v_blockᵀ"


def _flash_core(c: _Chain, be: Backend[T], rec: Recorder[T], d_context: T) -> tuple[T, T, T]:
    """FlashAttention-2's backward: ``delta`` = rowsum(d_context ⊙ context), then per key/value
    block (outer) and query block (inner), the forward's tiling, the weights tile made again
    from q, k and the lse, and d_v, d_q, d_k summed tile by tile. Each tile step is recorded
    with a full tile's shape, ``repeat`` its number of tiles and FLOPs summed over them."""
    cfg = c.config
    q_name, k_name, v_name = _core_names(cfg)
    q, k, v = c.fwd[q_name], c.fwd[k_name], c.fwd[v_name]  # (B, h, S, d), (B, h, N, d) twice
    lse = be.reshape(c.fwd["lse"], (*be.shape(c.fwd["lse"]), 1))  # (B, h, S, 1)
    product = be.mul(d_context, c.fwd["context"])  # (B, h, S, d)
    delta = be.reduce_sum(product)  # (B, h, S)
    rec.meter.discard()  # the product and its sum: 2 per element, in the step's letters
    rec.meter.charge("reduce_sum", product, out=delta)
    rec.meter.charge("reduce_sum", product, out=delta)
    delta = rec.step("delta", delta, "rowsum(d_context ⊙ context)", c.ax("h", "S"), contract="d")
    delta = be.reshape(delta, (*be.shape(delta), 1))  # (B, h, S, 1)
    plain = rec.be  # the sums of the tiles into the whole gradients: bookkeeping, no FLOPs
    # (B, h, S, d) copies of the head views: each tile's matmuls then read contiguous rows
    if be.computes:
        q, k, v, d_context = (rec.fast.contiguous(t) for t in (q, k, v, d_context))
    d_q = plain.full(be.shape(q), 0.0, be.dtype(q))  # (B, h, S, d)
    d_k = plain.full(be.shape(k), 0.0, be.dtype(k))  # (B, h, N, d)
    d_v = plain.full(be.shape(v), 0.0, be.dtype(v))  # (B, h, N, d)
    rows, cols = cfg.blocks
    work = tiles(
        cfg.seq,
        cfg.keys,
        rows,
        causal=cfg.causal,
        every=be.computes,
        key_size=cols,
        offset=cfg.cached,
    )
    pairs = sorted(
        ((j0, j1, n), (i0, i1)) for (i0, i1, _), kv in work for j0, j1, n in kv if n
    )  # key/value blocks outer, as FlashAttention-2's backward
    ax = {"r": c.ax("h", "Br", "Bc"), "q": c.ax("h", "Br", "d"), "k": c.ax("h", "Bc", "d")}
    for (j0, j1, n), (i0, i1) in pairs:
        q_i, do_i = be.narrow(q, -2, i0, i1), be.narrow(d_context, -2, i0, i1)  # (B, h, Br, d)
        k_j, v_j = be.narrow(k, -2, j0, j1), be.narrow(v, -2, j0, j1)  # (B, h, Bc, d)
        s = be.scale(be.matmul(q_i, be.transpose(k_j, -2, -1)), cfg.score_scale)  # (B, h, Br, Bc)
        if cfg.causal:  # -inf above the diagonal, as the forward's mask_tile
            s = be.where(be.tensor(_causal_tile(cfg, i0, i1, j0, j1)), s, -math.inf)
        op = f"q_block @ k_blockᵀ * {cfg.score_scale:.6g}" + (", masked" if cfg.causal else "")
        s = rec.step("s_again", s, op + " (recomputed)", ax["r"], contract="d", times=n)
        p = be.exp(be.binary("sub", s, be.narrow(lse, -2, i0, i1)))  # (B, h, Br, Bc)
        p = rec.step("p_again", p, "exp(s_again − lse[..., None]): the weights", ax["r"], times=n)
        dv = be.matmul(be.transpose(p, -2, -1), do_i)  # (B, h, Bc, d)
        dv = rec.step(
            "d_v_block", dv, "p_againᵀ @ d_context_block", ax["k"], contract="Br", times=n
        )
        dp = be.matmul(do_i, be.transpose(v_j, -2, -1))  # (B, h, Br, Bc)
        dp = rec.step("d_p_tile", dp, _D_P_TILE_OP, ax["r"], contract="d", times=n)
        ds = be.mul(p, be.binary("sub", dp, be.narrow(delta, -2, i0, i1)))  # (B, h, Br, Bc)
        ds = be.scale(ds, cfg.score_scale)  # (B, h, Br, Bc): the gradient of q·kᵀ
        op = f"p_again ⊙ (d_p_tile − delta[..., None]) * {cfg.score_scale:.6g}"
        ds = rec.step("d_s_tile", ds, op, ax["r"], times=n)
        dq = rec.step("d_q_block", be.matmul(ds, k_j), "d_s_tile @ k_block", ax["q"], times=n)
        dk = be.matmul(be.transpose(ds, -2, -1), q_i)  # (B, h, Bc, d)
        dk = rec.step("d_k_block", dk, "d_s_tileᵀ @ q_block", ax["k"], contract="Br", times=n)
        if be.computes:
            for whole, at, part in ((d_q, i0, dq), (d_k, j0, dk), (d_v, j0, dv)):
                done = plain.narrow(whole, -2, at, at + plain.shape(part)[-2])  # (B, h, ·, d)
                plain.write(whole, -2, at, plain.add(done, part))
    lab = cfg.labels()
    summed = "the sum of its blocks' d_{0}_block"
    d_q = rec.view(f"d_{q_name}", d_q, summed.format("q"), c.ax("h", "S", "d"))
    d_k = rec.view(f"d_{k_name}", d_k, summed.format("k"), c.ax("h", lab.keys, "d"))
    d_v = rec.view(f"d_{v_name}", d_v, summed.format("v"), c.ax("h", lab.keys, "d"))
    return d_q, d_k, d_v


def _causal_tile(config: AttentionConfig, i0: int, i1: int, j0: int, j1: int) -> Source:
    """The boolean (Br, Bc) tile of the causal mask: query i + cached sees keys j <= it."""

    def make() -> Any:
        import numpy as np

        rows = np.arange(i0, i1)[:, None] + config.cached  # (Br, 1)
        return rows >= np.arange(j0, j1)[None, :]  # (Br, Bc)

    return Source(shape=(i1 - i0, j1 - j0), dtype="bool", make=make)


def _softmax_input(config: AttentionConfig, masked: bool) -> str:
    """The name of the step the softmax read: masked, biased, capped or scaled."""
    if masked:
        return "masked"
    return _below_mask(config)


def _below_mask(config: AttentionConfig) -> str:
    """The step the mask read: biased (T5), capped or scaled."""
    if config.relative_bias is not None:
        return "biased"
    return "capped" if config.softcap is not None else "scaled"


def _to_scores(c: _Chain, be: Backend[T], rec: Recorder[T], d_logits: T, mask: Step | None) -> T:
    """Back through the mask (zeroed where it hid a key), the soft-cap and the scale."""
    cfg, hSN = c.config, c.ax("h", "S", c.config.labels().keys)
    d = d_logits  # (B, h, S, N)
    below = _below_mask(cfg)
    if mask is not None:
        if mask.dtype == "bool":
            d = be.where(c.fwd["mask"], d, 0.0)  # (B, h, S, N): no gradient where it hid a key
            d = rec.step(f"d_{below}", d, "where(mask, d_masked, 0)", hSN)
        else:  # an added mask has a gradient of one: the same values
            d = rec.view(f"d_{below}", d, "d_masked (an added mask passes it on)", hSN)
    if cfg.relative_bias is not None:
        _relative_back(c, be, rec, d)
        below = "capped" if cfg.softcap is not None else "scaled"
        d = rec.view(f"d_{below}", d, "d_biased (the bias is added: the same gradient)", hSN)
    if cfg.softcap is not None:
        cap = cfg.softcap
        t = be.scale(c.fwd["capped"], 1.0 / cap)  # (B, h, S, N): tanh(scaled / c)
        d = be.binary("sub", d, be.mul(d, be.mul(t, t)))  # (B, h, S, N)
        d = rec.step("d_scaled", d, f"d_capped ⊙ (1 − (capped / {cap:g})²)", hSN)
    d_scores = be.scale(d, cfg.score_scale)  # (B, h, S, N)
    return rec.step("d_scores", d_scores, f"d_scaled * {cfg.score_scale:.6g}", hSN)


def _relative_back(c: _Chain, be: Backend[T], rec: Recorder[T], d_biased: T) -> None:
    """T5: the bias's gradient summed over the batch, then each bucket's over its (i, j)
    pairs: d_rel_bias = onehotᵀ @ d_position_bias (buckets, h)."""
    cfg, N = c.config, c.config.labels().keys
    S, h = cfg.seq, cfg.heads
    d = d_biased  # (B, h, S, N)
    if c.lead:  # (B, h·S·N) -> (h·S·N, B) -> summed over B
        columns = be.transpose(be.reshape(d, (cfg.batch or 1, h * S * cfg.keys)), 0, 1)
        d = be.reshape(be.reduce_sum(columns), (h, S, cfg.keys))  # (h, S, N)
        rec.meter.discard()  # one add per summed element, in the step's letters
        rec.meter.charge("reduce_sum", columns, out=d)
        d = rec.step("d_position_bias", d, "d_biased.sum(0)", ("h", "S", N), contract="B")
    else:
        d = rec.view("d_position_bias", d, "d_biased", ("h", "S", N))
    pairs = be.reshape(be.transpose(be.transpose(d, 0, 2), 0, 1), (S * cfg.keys, h))  # (S·N, h)
    onehot = c.fwd["rel_onehot"]  # (S, N, buckets)
    rows = be.reshape(onehot, (S * cfg.keys, be.shape(onehot)[-1]))  # (S·N, buckets)
    d_table = be.matmul(be.transpose(rows, 0, 1), pairs)  # (buckets, h)
    axes = param_axes(cfg)["rel_bias"]
    op = "rel_onehotᵀ @ d_position_bias (each bucket's pairs summed)"
    rec.step("d_rel_bias", d_table, op, axes, contract=f"S·{N}")


def _to_heads(c: _Chain, be: Backend[T], rec: Recorder[T], d_scores: T, d_v: T) -> tuple[T, T, T]:
    """d_q and d_k from the scores' matmul; GQA's sums over the repeated heads; RoPE back."""
    cfg, lab = c.config, c.config.labels()
    head_norm = cfg.qk_norm == "head"
    q_name = "q_rot" if cfg.rope else "q_norm" if head_norm else "q"
    k_name = "k_rep" if cfg.grouped else "k_rot" if cfg.rope else "k_norm" if head_norm else "k"
    d_q = be.matmul(d_scores, c.fwd[k_name])  # (B, h, S, d)
    d_q = rec.step(f"d_{q_name}", d_q, f"d_scores @ {k_name}", c.ax("h", "S", "d"))
    d_k_t = be.matmul(be.transpose(c.fwd[q_name], -2, -1), d_scores)  # (B, h, d, N)
    d_k_t = rec.step(
        "d_k_t", d_k_t, f"{q_name}ᵀ @ d_scores", c.ax("h", "d", lab.keys), contract="S"
    )
    d_k = be.transpose(d_k_t, -2, -1)  # (B, h, N, d)
    d_k = rec.view(f"d_{k_name}", d_k, "d_k_t.transpose(-2, -1)", c.ax("h", lab.keys, "d"))
    return _below_heads(c, be, rec, d_q, d_k, d_v)


def _core_names(config: AttentionConfig) -> tuple[str, str, str]:
    """The forward steps the attention core read: q, k, v (rotated, normed, repeated)."""
    head_norm = config.qk_norm == "head"
    q = "q_rot" if config.rope else "q_norm" if head_norm else "q"
    k = "k_rep" if config.grouped else "k_rot" if config.rope else "k_norm" if head_norm else "k"
    return q, k, "v_rep" if config.grouped else "v"


def _below_heads(
    c: _Chain, be: Backend[T], rec: Recorder[T], d_q: T, d_k: T, d_v: T
) -> tuple[T, T, T]:
    """GQA's sums over the repeated heads, RoPE and the head norm back."""
    cfg, lab = c.config, c.config.labels()
    head_norm = cfg.qk_norm == "head"
    if cfg.grouped:
        d_k, d_v = _sum_groups(c, be, rec, d_k, d_v)  # (B, g, N, d) each
    if cfg.rope:
        d_q, d_k = _unrotate(c, be, rec, d_q, d_k)  # (B, h, S, d), (B, g, N, d)
    if head_norm:
        d_q = _unnorm(c, be, rec, "q", d_q, c.ax("h", "S", "d"))  # (B, h, S, d)
        d_k = _unnorm(c, be, rec, "k", d_k, c.ax(lab.kv_heads, lab.keys, "d"))  # (B, g, N, d)
    return d_q, d_k, d_v


def _unnorm(
    c: _Chain, be: Backend[T], rec: Recorder[T], x: str, d_y: T, axes: tuple[str, ...]
) -> T:
    """RMSNorm back, y = u ⊙ n with u = x·r, r = 1/√(mean(x²) + eps) over the last axis D:
    d_x = r·(g − u·mean(g ⊙ u)) with g = d_y ⊙ n, and d_n = Σ_rows d_y ⊙ u."""
    cfg = c.config
    eps = cfg.qk_norm_eps if cfg.qk_norm_eps is not None else 1e-6
    full = cfg.qk_norm == "full"
    src = c.fwd[f"{x}_proj" if full else x]  # (B, h, S, d), or (B, S, h·d) with --qk-norm full
    D = be.shape(src)[-1]
    ms = be.scale(be.reduce_sum(be.mul(src, src)), 1.0 / D)  # (B, h, S)
    r = be.rsqrt(be.add(ms, be.full((1,), eps, be.dtype(src))))  # (B, h, S)
    r = be.reshape(r, (*be.shape(r), 1))  # (B, h, S, 1)
    u = be.mul(src, r)  # (B, h, S, d): the normalized x
    g = be.mul(d_y, c.fwd[f"n_{x}"])  # (B, h, S, d)
    m = be.scale(be.reduce_sum(be.mul(g, u)), 1.0 / D)  # (B, h, S)
    m = be.reshape(m, (*be.shape(m), 1))  # (B, h, S, 1)
    d_x = be.mul(be.binary("sub", g, be.mul(u, m)), r)  # (B, h, S, d)
    rec.meter.discard()  # x², its sum, u, g, g ⊙ u, its sum, u·m, −, ·r: 9 per element
    for _ in range(9):
        rec.meter.charge("binary", out=d_x)
    name = f"d_{x}_proj" if full else f"d_{x}"
    op = f"r ⊙ (g − u·mean(g ⊙ u)), g = d_{x}_norm ⊙ n_{x}, u = {x}·r"
    d_x = rec.step(name, d_x, op, axes)
    rows = be.transpose(be.reshape(be.mul(d_y, u), (_rows(be, u), D)), 0, 1)  # (d, B·h·S)
    d_n = be.reduce_sum(rows)  # (d,)
    rec.meter.discard()  # the product and its sum: 2 per element of u
    rec.meter.charge("reduce_sum", rows, out=d_n)
    rec.meter.charge("reduce_sum", rows, out=d_n)
    op = f"(d_{x}_norm ⊙ {x}·r).sum(rows)"
    rec.step(f"d_n_{x}", d_n, op, param_axes(cfg)[f"n_{x}"], contract="·".join(axes[:-1]))
    return d_x


def _sum_groups(c: _Chain, be: Backend[T], rec: Recorder[T], d_k: T, d_v: T) -> tuple[T, T]:
    """GQA: each key/value head served h/g query heads; its gradient is their sum."""
    cfg, lab = c.config, c.config.labels()
    g, r = cfg.groups, cfg.heads // cfg.groups
    dims = (*c.sizes, g, r, cfg.keys, cfg.head_dim)
    summed = []
    for name, d in (("k_rot" if cfg.rope else "k", d_k), ("v", d_v)):
        split = be.reshape(d, dims)  # (B, g, r, N, d)
        total = be.reduce_sum(be.transpose(split, c.n + 1, -1))  # (B, g, d, N)
        total = be.transpose(total, -2, -1)  # (B, g, N, d)
        rec.meter.discard()  # one add per summed element: r per element of the sum
        for _ in range(r):
            rec.meter.charge("binary", out=total)
        op = f"d_{name[0]}_rep.view({', '.join((*c.lead, 'g'))}, {r}, {lab.keys}, d).sum({c.n + 1})"
        summed.append(rec.step(f"d_{name}", total, op, c.ax("g", lab.keys, "d")))
    return summed[0], summed[1]


def _unrotate(c: _Chain, be: Backend[T], rec: Recorder[T], d_q: T, d_k: T) -> tuple[T, T]:
    """RoPE back: the rotation's transpose is its inverse, rotate_half's transpose its
    negative: d_q = d_q_rot·cos − rotate_half(d_q_rot·sin)."""
    cfg, lab = c.config, c.config.labels()
    cos, sin = c.fwd["rope_cos"], c.fwd["rope_sin"]  # (S, d)
    dims = cfg.rotary_dims or cfg.head_dim
    pairs = cfg.rope_style == "interleaved"
    name = "rotate_pairs" if pairs else "rotate_half"
    out = []
    for x, d, axes in (
        ("q", d_q, c.ax("h", "S", "d")),
        ("k", d_k, c.ax(lab.kv_heads, lab.keys, "d")),
    ):
        turned = be.mul(d, sin)  # (B, h, S, d)
        turned = be.rotate_pairs(turned, dims) if pairs else be.rotate_part(turned, dims)
        back = be.binary("sub", be.mul(d, cos), turned)  # (B, h, S, d)
        op = f"d_{x}_rot * cos − {name}(d_{x}_rot * sin)"
        below = f"{x}_norm" if cfg.qk_norm == "head" else x
        out.append(rec.step(f"d_{below}", back, op, axes))
    return out[0], out[1]


def _to_inputs(c: _Chain, be: Backend[T], rec: Recorder[T], d_q: T, d_k: T, d_v: T) -> None:
    """Un-transpose and un-split each head gradient, then through the q, k, v projections."""
    cfg, lab = c.config, c.config.labels()
    spec = {
        "q": ("S", cfg.seq, "h", cfg.heads, lab.q_width, d_q),
        "k": (lab.keys, cfg.keys, lab.kv_heads, cfg.groups, lab.kv_width, d_k),
        "v": (lab.keys, cfg.keys, lab.kv_heads, cfg.groups, lab.kv_width, d_v),
    }
    flat: dict[str, T] = {}
    for x, (seq, n_seq, heads, n_heads, width, d) in spec.items():
        d_heads = be.transpose(d, c.n, c.n + 1)  # (B, S, h, d)
        d_heads = rec.view(
            f"d_{x}_heads", d_heads, f"d_{x}.transpose({c.n}, {c.n + 1})", c.ax(seq, heads, "d")
        )
        d_proj = be.reshape(d_heads, (*c.sizes, n_seq, n_heads * cfg.head_dim))  # (B, S, h·d)
        op = f"d_{x}_heads.reshape({', '.join((*c.lead, seq))}, {width})"
        normed = cfg.qk_norm == "full" and x in "qk"
        flat[x] = rec.step(f"d_{x}_norm" if normed else f"d_{x}_proj", d_proj, op, c.ax(seq, width))
        if normed:  # OLMo 2: the norm over the whole projection, before the heads
            flat[x] = _unnorm(c, be, rec, x, flat[x], c.ax(seq, width))
    source = "x_kv" if cfg.cross else "x"
    for x in "qkv":
        _weight_grads(c, be, rec, flat[x], "x" if x == "q" else source, x)
    _input_grad(c, be, rec, "x", ("q",) if cfg.cross else ("q", "k", "v"), flat)
    if cfg.cross:
        _input_grad(c, be, rec, "x_kv", ("k", "v"), flat)


def _input_grad(
    c: _Chain, be: Backend[T], rec: Recorder[T], x: str, of: tuple[str, ...], flat: Mapping[str, T]
) -> None:
    """d_x: the sum of what each projection that read x sends back (d_q_proj @ w_q + ...)."""
    total: T | None = None
    for name in of:
        part = be.linear(flat[name], be.transpose(c.fwd[f"w_{name}"], 0, 1), None)  # (B, S, H)
        total = part if total is None else be.add(total, part)
    assert total is not None
    op = " + ".join(f"d_{name}_proj @ w_{name}" for name in of)
    axes = c.ax("S", "H") if x == "x" else c.ax(c.config.labels().keys, c.config.labels().kv_in)
    rec.step(f"d_{x}", total, op, axes)


def _linear_back(
    c: _Chain, be: Backend[T], rec: Recorder[T], d_y: T, x: str, name: str, width: str
) -> T:
    """A linear layer y = x @ w.T + b backwards: d_w, d_b and d_x = d_y @ w."""
    _weight_grads(c, be, rec, d_y, x, name)
    d_x = be.linear(d_y, be.transpose(c.fwd[f"w_{name}"], 0, 1), None)  # (B, S, in)
    return rec.step(f"d_{x}", d_x, f"d_output @ w_{name}", c.ax("S", width))


def _weight_grads(c: _Chain, be: Backend[T], rec: Recorder[T], d_y: T, x: str, name: str) -> None:
    """d_w = d_yᵀ @ x and d_b = d_y summed over the rows (B·S)."""
    w = c.fwd[f"w_{name}"]  # (out, in)
    out_f, in_f = be.shape(w)
    rows_y = be.transpose(be.reshape(d_y, (_rows(be, d_y), out_f)), 0, 1)  # (out, B·S)
    rows_x = be.reshape(c.fwd[x], (_rows(be, c.fwd[x]), in_f))  # (B·S, in)
    d_w = be.matmul(rows_y, rows_x)  # (out, in)
    w_axes = param_axes(c.config)[f"w_{name}"]
    dy_name = "d_output" if name == "o" else f"d_{name}_proj"
    rec.step(f"d_w_{name}", d_w, f"{dy_name}ᵀ @ {x}", w_axes, contract=c.rows)
    if f"b_{name}" in c.fwd:
        d_b = be.reduce_sum(rows_y)  # (out,)
        rec.step(f"d_b_{name}", d_b, f"{dy_name}.sum(rows)", w_axes[:1], contract=c.rows)


def _rows(be: Backend[Any], x: Any) -> int:
    """Elements of ``x`` per entry of its last axis: B·S."""
    shape = be.shape(x)
    n = 1
    for size in shape[:-1]:
        n *= size
    return n


def with_saved(keep: bool | Collection[str]) -> bool | set[str]:
    """``keep_values`` widened by the forward steps the backward reads.

    >>> sorted(with_saved({"weights"}))[:3]
    ['capped', 'context', 'k']
    """
    return True if keep is True else set(_READ) | (set(keep) if keep else set())


def with_backward(
    forward: Trace,
    be: Backend[T],
    *,
    flash: Trace,
    eager: Trace | None = None,
    grad_output: np.ndarray | None = None,
    keep_values: bool | Collection[str] = True,
    recompute: bool = False,
    mistaken: Mapping[str, StepReplacement] | None = None,
) -> Trace:
    """``forward`` with its backward steps after its own, its saved steps marked and the
    figures of :class:`~attntrace.trace.Training` (``flash``: the shape trace of the same
    config with ``--algorithm flash``, whose tiles its backward makes again; ``eager``: the
    shape trace with ``--algorithm eager`` when ``forward`` is flash's). Values the
    caller did not ask to keep (``keep_values``) are dropped once the backward has read them.

    >>> from attntrace import AttentionConfig, trace_attention
    >>> t = trace_attention(AttentionConfig(seq=4, hidden=8, heads=2), "shape", backward=True)
    >>> t["d_x"].phase, t["weights"].saved, t.training.saved_bytes
    ('backward', True, 768)
    """
    bwd = backward_steps(
        forward, be, d_output=grad_output, keep_values=keep_values, mistaken=mistaken
    )
    config, names = forward.config, forward.names
    base = eager or forward  # the eager steps: the figures of eager beside flash
    bool_mask = "mask" in base and base["mask"].dtype == "bool"
    saved = set(saved_names(config, base.names, bool_mask))
    inputs = {"x", "x_kv"} & set(names)
    flash_kept = _flash_names(saved) | {"lse"}
    marked = inputs if recompute else flash_kept if eager is not None else saved

    def kept(step: Step) -> Step:
        drop = keep_values is False or (keep_values is not True and step.name not in keep_values)
        marked_step = replace(step, saved=step.name in marked)
        return replace(marked_step, value=None) if drop else marked_step

    steps = tuple(map(kept, forward.steps))
    n = len(steps)
    steps += tuple(replace(s, index=n + s.index, phase="backward") for s in bwd)
    training = _figures(base, bwd, flash, saved, inputs, recompute, grad_output is not None)
    if eager is not None:  # flash keeps no weights: its own figures are the saved ones
        grads = sum(s.nbytes for s in bwd if s.name.startswith(("d_w_", "d_b_")))
        own = training.recompute_saved_bytes if recompute else training.flash_saved_bytes
        training = replace(training, saved_bytes=own, peak_bytes=own + peak_live_bytes(bwd) + grads)
    extras = saved_extra(forward)
    if extras:
        n = sum(numel for _, numel in extras)
        training = replace(
            training,
            saved_bytes=training.saved_bytes + (0 if recompute else n * config.itemsize),
            eager_saved_bytes=training.eager_saved_bytes + n * config.itemsize,
            peak_bytes=training.peak_bytes + n * config.itemsize,
            ours_16bit_bytes=training.ours_16bit_bytes + 2 * n,
            megatron_terms=_add_term(training.megatron_terms, -2 * n),
            saved_extra=tuple((name, numel * config.itemsize) for name, numel in extras),
        )
    return replace(forward, steps=steps, training=training)


def _figures(
    forward: Trace,
    bwd: tuple[Step, ...],
    flash: Trace,
    eager: set[str],
    inputs: set[str],
    recompute: bool,
    given: bool,
) -> Training:
    """The saved bytes of eager, flash and recomputation, the backward's peak and FLOPs, and
    the Megatron formula beside them."""
    config = forward.config
    by_name = {s.name: s for s in forward.steps}
    eager_bytes = sum(by_name[n].nbytes for n in eager)
    lse = math.prod((*((config.batch,) if config.batched else ()), config.heads, config.seq)) * 4
    flash_names = _flash_names(eager)
    recomputed = [s for s in flash.steps if s.name in {"s_tile", "s_masked", "p_tile"}]
    grads = sum(s.nbytes for s in bwd if s.name.startswith(("d_w_", "d_b_")))
    fwd_flops = forward.total_flops
    bwd_flops = sum(s.flops for s in bwd) + (fwd_flops if recompute else 0)
    megatron, terms, ours16 = _megatron(config, by_name, eager)
    return Training(
        d_output="given" if given else "seeded",
        recompute=recompute,
        saved_bytes=sum(by_name[n].nbytes for n in inputs) if recompute else eager_bytes,
        peak_bytes=eager_bytes + peak_live_bytes(bwd) + grads,
        forward_flops=fwd_flops,
        backward_flops=bwd_flops,
        eager_saved_bytes=eager_bytes,
        flash_saved_bytes=sum(by_name[n].nbytes for n in flash_names) + lse,
        flash_lse_bytes=lse,
        flash_tiles=flash["s_tile"].repeat if "s_tile" in flash else 0,
        flash_recompute_flops=sum(s.flops for s in recomputed),
        recompute_saved_bytes=sum(by_name[n].nbytes for n in inputs),
        megatron_bytes=megatron,
        ours_16bit_bytes=ours16,
        megatron_terms=terms,
    )


def _flash_names(eager: set[str]) -> set[str]:
    """The steps flash keeps for its backward (beside the lse): eager's but the (S, N) ones, and
    the output of the attention."""
    return (eager - {"weights", "capped", "mask"}) | {"context"}


def _megatron(
    config: AttentionConfig, by_name: Mapping[str, Step], eager: set[str]
) -> tuple[int, tuple[tuple[str, int], ...], int]:
    """Korthikanti et al. (2022)'s 11·s·b·h + 5·a·s²·b bytes (16-bit, dropout included), our
    saved elements at 2 bytes (a boolean mask at 1), and the difference term by term: the three
    dropout terms it counts and we do not, the layout of x, q, k, v and merged (it takes each
    s·b·h; grouped or narrower projections are smaller), and what our variants keep beside."""
    s, b, hid, a = config.seq, config.batch or 1, config.hidden, config.heads
    sn = s * config.keys  # s² for self-attention
    megatron = 11 * s * b * hid + 5 * a * sn * b

    def b16(name: str) -> int:
        step = by_name[name]
        return step.numel * (1 if step.dtype == "bool" else 2)

    layout = {"x", "merged", "q_proj", "k_proj", "v_proj", "q_rot", "k_rot", "k_rep", "v_rep"}
    ours = sum(b16(n) for n in eager)
    terms = (
        ("softmax dropout mask (a·s²·b)", a * sn * b),
        ("attention dropout output (2·a·s²·b)", 2 * a * sn * b),
        ("output dropout mask (s·b·h)", s * b * hid),
        (
            "layout of x, q, k, v, merged (10·s·b·h)",
            10 * s * b * hid - sum(b16(n) for n in eager & layout),
        ),
        ("softmax output (2·a·s²·b)", 2 * a * sn * b - b16("weights")),
        ("kept by our variants", -sum(b16(n) for n in eager - layout - {"weights"})),
    )
    return megatron, terms, ours


def saved_extra(forward: Trace) -> tuple[tuple[str, int], ...]:
    """What the forward keeps for the backward that is no step, as (name, elements): T5's
    one-hot of the buckets (it picks the table's rows); the RMSNorm of --qk-norm keeps r (one
    per row) and the normalized x·r.

    >>> from attntrace import AttentionConfig, trace_attention
    >>> t = trace_attention(AttentionConfig(seq=3, hidden=8, heads=2, qk_norm="head"), "shape")
    >>> saved_extra(t)
    (('q_norm.r', 6), ('q_norm.x·r', 24), ('k_norm.r', 6), ('k_norm.x·r', 24))
    """
    config = forward.config
    out: list[tuple[str, int]] = []
    if config.relative_bias is not None:
        out.append(("rel_onehot", math.prod(relative_sources(config)["rel_onehot"].shape)))
    if config.qk_norm is not None:
        for x in "qk":
            source = forward[f"{x}_proj" if config.qk_norm == "full" else x]
            rows = source.numel // source.shape[-1]
            out += [(f"{x}_norm.r", rows), (f"{x}_norm.x·r", source.numel)]
    return tuple(out)


def _add_term(terms: tuple[tuple[str, int], ...], extra: int) -> tuple[tuple[str, int], ...]:
    """``terms`` with ``extra`` added to the variants' term."""
    return tuple((n, b + extra if n == "kept by our variants" else b) for n, b in terms)
