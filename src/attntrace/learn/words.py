"""Every step of a trace in words, with this run's numbers: what it does and why its shape is
what it is (``attntrace run --explain``).

A step's message is chosen by its name and the variant that made it (``scaled.none`` for an
unscaled run, ``context.flash``...), and variants add a sentence of their own (``extra.*``). A
step no catalogue knows (a capability newer than the catalogues) gets a plain sentence from
its name, op and shape: the lookup never fails.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from attntrace.config.attention_config import AttentionConfig
from attntrace.learn.lang import Lang, catalogue, message
from attntrace.trace import Records, Step, Trace
from attntrace.units import format_axes, format_shape

#: What separates two sentences: a space in English, nothing after Chinese punctuation.
SENTENCE_GAP: dict[Lang, str] = {"en": " ", "zh": ""}

__all__ = [
    "SENTENCE_GAP",
    "explain_roles",
    "explain_step",
    "explain_trace",
    "message_keys",
    "number",
    "step_facts",
]


def number(x: float) -> str:
    """A figure as a sentence writes it: whole numbers without a point, else 4 digits.

    >>> number(8.0), number(1 / math.sqrt(64)), number(math.sqrt(3))
    ('8', '0.125', '1.732')
    """
    return str(int(x)) if float(x).is_integer() else f"{x:.4g}"


def explain_trace(trace: Trace, lang: Lang = "en") -> dict[str, str]:
    """Each step's explanation by step name, in order.

    >>> from attntrace import AttentionConfig, trace_attention
    >>> words = explain_trace(trace_attention(AttentionConfig(), "shape"))
    >>> print(words["q_heads"])  # doctest: +NORMALIZE_WHITESPACE
    Splits the 768 features of each of the 3 tokens into 12 heads of 64 (12 × 64 = 768):
    (3, 768) → (3, 12, 64). A view: no number moves.
    >>> print(explain_trace(trace_attention(AttentionConfig(), "shape"), "zh")["scaled"])
    ... # doctest: +NORMALIZE_WHITESPACE
    对相似度分数进行缩放：除以 √64 = 8，让 64 个数的点积方差保持在 1 左右，softmax
    不会饱和（防止梯度消失）：(12, 3, 3)，形状不变。
    """
    return {step.name: explain_step(trace, step, lang) for step in trace.steps}


def explain_step(trace: Trace, step: Step | str, lang: Lang = "en") -> str:
    """One step's explanation (a step name or record of ``trace``) in ``lang``."""
    step = trace[step] if isinstance(step, str) else step
    facts = step_facts(trace, step)
    if lang != "en":  # an op's few words ("from the rules") in the learner's language
        from attntrace.learn.lang import translate

        facts["op"] = translate(str(facts["op"]), lang, "cell.")
    keys = message_keys(trace.config, step)
    known = catalogue(lang)
    if keys[0] not in known:
        return message("ui.unknown", lang, **facts)
    return SENTENCE_GAP[lang].join(message(key, lang, **facts) for key in keys)


def message_keys(config: AttentionConfig, step: Step) -> tuple[str, ...]:
    """The catalogue keys of ``step``'s explanation: its own message, then the sentences its
    variants add.

    >>> from attntrace import AttentionConfig, trace_attention
    >>> t = trace_attention(AttentionConfig(batch=2, causal=True, scale=1.0), "shape")
    >>> message_keys(t.config, t["scaled"]), message_keys(t.config, t["mask"])
    (('scaled.none',), ('mask', 'extra.causal'))
    >>> message_keys(t.config, t["x"])
    ('x', 'extra.batch')
    """
    return (_main_key(config, step), *_extra_keys(config, step))


def _main_key(config: AttentionConfig, step: Step) -> str:
    name = step.name
    if name == "scaled" and config.scale is not None:
        return "scaled.none" if config.score_scale == 1 else "scaled.custom"
    if name == "context" and config.algorithm == "flash":
        return "context.flash"
    if name in ("q_norm", "k_norm") and config.qk_norm == "full":
        return f"{name}.full"
    if name in ("masked", "position_bias"):
        return _bias_key(config, step)
    if config.parallel is not None:
        return _rank_key(config, name)
    return _view_key(config, step)


def _bias_key(config: AttentionConfig, step: Step) -> str:
    """An added mask's key, and ALiBi's position bias's (fixed slopes, not T5's table)."""
    if step.name == "masked" and "+ mask" in step.op:
        return "masked.additive"
    return f"{step.name}.alibi" if step.name == "position_bias" and config.alibi else step.name


def _rank_key(config: AttentionConfig, name: str) -> str:
    """A rank's view: its ring rounds read as the steps they are; lse and the output its own.

    >>> from attntrace.config.parallel_layout import ParallelLayout
    >>> cfg = AttentionConfig(seq=4, hidden=16, heads=4, parallel=ParallelLayout(tp=2, cp=2))
    >>> _rank_key(cfg, "scores_late"), _rank_key(cfg, "lse"), _rank_key(cfg, "output")
    ('scores', 'lse.ring', 'output.tp')
    """
    name = name.removesuffix("_ring").removesuffix("_early").removesuffix("_late")
    if name == "output" and config.parallel is not None and config.parallel.tp > 1:
        return "output.tp"
    return "lse.ring" if name == "lse" else name


def _view_key(config: AttentionConfig, step: Step) -> str:
    """The key of the decode step's k and v (--past) and of every gradient step (--backward)."""
    if step.name in ("k", "v") and config.past:
        return f"{step.name}.past"
    if step.phase == "backward":  # flash's delta, s_again, p_again are no gradients
        return "backward" if step.name.startswith("d_") else step.name
    return step.name


def _extra_keys(config: AttentionConfig, step: Step) -> tuple[str, ...]:
    name, extras = step.name, []
    if name == "x" and config.batched:
        extras.append("extra.batch")
    if name in ("k_proj", "v_proj"):
        extras += ["extra.grouped"] * config.grouped + ["extra.cross"] * config.cross
    if name in ("mask", "mask_tile"):
        extras += ["extra.causal"] * config.causal + ["extra.window"] * (config.window is not None)
        extras += ["extra.padding"] * (config.key_lengths is not None)
        extras += ["extra.mask_file"] * ("mask file" in step.op)
    if name == "weights" and "masked" in step.op:
        extras.append("extra.weights_masked")
    if name in ("q_rot", "k_rot"):
        extras += ["extra.partial_rope"] * (config.rotary_dims is not None)
        extras += ["extra.interleaved"] * (config.rope_style == "interleaved")
    if step.repeat > 1 and name not in ("k_block", "s_tile"):
        extras.append("extra.tiles")
    return tuple(extras)


def step_facts(trace: Trace, step: Step) -> dict[str, object]:
    """The figures a message of ``step`` may name: the sizes of the run, the step's shape and
    the shapes it reads, the scale, the variants' settings.

    >>> from attntrace import AttentionConfig, trace_attention
    >>> t = trace_attention(AttentionConfig(seq=5, hidden=32, heads=4), "shape")
    >>> facts = step_facts(t, t["scores"])
    >>> facts["S"], facts["d"], facts["in0"], facts["in1"], facts["sqrt_d"]
    (5, 8, '(4, 5, 8)', '(4, 8, 5)', '2.828')
    """
    cfg = trace.config
    shapes = _input_shapes(trace, step)
    d = cfg.head_dim
    return {
        **_size_facts(cfg),
        "name": step.name,
        "op": step.op,
        "shape": format_shape(step.shape),
        "axes": format_axes(step.axes),
        "src": shapes[0] if shapes else format_shape(step.shape),
        "in0": shapes[0] if shapes else "",
        "in1": shapes[1] if len(shapes) > 1 else "",
        "sqrt_d": number(math.sqrt(d)),
        "inv_sqrt_d": number(1 / math.sqrt(d)),
        "scale": number(cfg.score_scale),
        "tiles": step.repeat,
        "of": step.name.removeprefix("d_"),
    }


def _size_facts(cfg: AttentionConfig) -> dict[str, object]:
    """The run's sizes and the settings of its variants."""
    facts: dict[str, object] = {
        "S": cfg.seq,
        "N": cfg.keys,
        "P": cfg.cached,
        "H": cfg.hidden,
        "M": cfg.kv_hidden if cfg.kv_hidden is not None else cfg.hidden,
        "h": cfg.heads,
        "g": cfg.groups,
        "d": cfg.head_dim,
        "r": cfg.heads // cfg.groups,
        "hd": cfg.heads * cfg.head_dim,
        "kvw": cfg.groups * cfg.head_dim,
        "B": cfg.batch if cfg.batch is not None else 1,
        "base": number(cfg.rope_base),
        "R": cfg.rotary_dims if cfg.rotary_dims is not None else cfg.head_dim,
        "C": number(cfg.softcap) if cfg.softcap is not None else "",
        "W": cfg.window if cfg.window is not None else "",
        "lengths": ", ".join(map(str, cfg.key_lengths or ())),
    }
    if cfg.relative_bias is not None:
        from attntrace.config.variants import parse_relative_bias

        bias = parse_relative_bias(cfg.relative_bias)
        facts |= {"buckets": bias.buckets, "max_distance": bias.max_distance}
    if cfg.alibi:
        from attntrace.engine.relative import alibi_slopes

        slopes = alibi_slopes(cfg.heads)
        facts |= {"slope_first": number(float(slopes[0])), "slope_last": number(float(slopes[-1]))}
    if cfg.algorithm == "flash":
        tiles = cfg.tile_sizes()
        facts |= {**tiles, "blocks": math.ceil(cfg.seq / tiles["Br"])}
    if cfg.parallel is not None:
        facts |= _rank_facts(cfg)
    return facts


def _rank_facts(cfg: AttentionConfig) -> dict[str, object]:
    """A rank's sizes (--tp, --cp): its heads, kv-heads and tokens, and T and C.

    >>> from attntrace.config.parallel_layout import ParallelLayout
    >>> cfg = AttentionConfig(seq=8, hidden=64, heads=8, parallel=ParallelLayout(tp=2, cp=4))
    >>> facts = _rank_facts(cfg)
    >>> facts["h"], facts["S"], facts["hd"], facts["TP"], facts["CP"]
    (4, 2, 32, 2, 4)
    """
    layout = cfg.parallel
    assert layout is not None
    h, g, tokens = cfg.heads // layout.tp, layout.kv_heads(cfg), cfg.seq // layout.cp
    keys = tokens if layout.cp_kind == "ring" else cfg.keys
    return {
        "S": tokens,
        "N": keys,
        "h": h,
        "g": g,
        "r": max(1, h // g),
        "hd": h * cfg.head_dim,
        "kvw": g * cfg.head_dim,
        "TP": layout.tp,
        "CP": layout.cp,
    }


def _input_shapes(trace: Trace, step: Step) -> list[str]:
    """The shapes of the recorded tensors ``step`` reads (steps and parameters), in order."""
    known: Mapping[str, tuple[int, ...]] = {
        **{p.name: p.shape for p in trace.parameters},
        **{s.name: s.shape for s in trace.steps},
    }
    return [format_shape(known[name]) for name in step.inputs if name in known]


def explain_roles(records: Records, lang: Lang = "en") -> dict[str, str]:
    """What each step of the user's code that plays a reference step (its ``role``) does, in
    words with the user's own sizes and shapes (``attntrace trace --explain``); steps without a
    role, or a capture whose sizes make no attention, get none.

    >>> import numpy as np
    >>> import attntrace
    >>> with attntrace.capture() as t:
    ...     x = t.track(np.ones((3, 8)))
    ...     q = x.reshape(3, 2, 4).transpose(1, 0, 2)
    ...     scores = q @ q.transpose(0, 2, 1)
    >>> print(explain_roles(t)["scores"])  # doctest: +NORMALIZE_WHITESPACE
    The similarity scores: the dot product of every query with every key, 4 products summed
    per pair. Row i, column j: how well token i's query matches token j's key. (2, 3, 4) @
    (2, 4, 3) → (2, 3, 3).
    """
    config = _config_of(records.axis_sizes())
    if config is None:
        return {}
    from attntrace.engine.attention import trace_attention

    reference = trace_attention(config, "shape")
    words: dict[str, str] = {}
    for step in records.steps:
        role = getattr(step, "role", "")
        if not role or role not in reference:
            continue
        facts = {**step_facts(reference, reference[role]), "shape": format_shape(step.shape)}
        shapes = [format_shape(s) for s in getattr(step, "input_shapes", ())]
        if shapes:
            facts |= {"src": shapes[0], "in0": shapes[0], "in1": shapes[-1]}
        keys = message_keys(config, reference[role])
        words[step.name] = SENTENCE_GAP[lang].join(message(k, lang, **facts) for k in keys)
    return words


def _config_of(sizes: Mapping[str, int]) -> AttentionConfig | None:
    """The reference config of the sizes a capture found (None when they make none)."""
    from attntrace.errors import ConfigError

    h, d = sizes.get("h"), sizes.get("d")
    if h is None or d is None or "S" not in sizes:
        return None
    g = sizes.get("g")
    try:
        return AttentionConfig(
            batch=sizes.get("B"),
            seq=sizes["S"],
            hidden=sizes.get("H", h * d),
            heads=h,
            head_dim_override=d if sizes.get("H", h * d) != h * d else None,
            kv_heads=g if g is not None and g != h else None,
            kv_seq=sizes["N"] if sizes.get("N", sizes["S"]) != sizes["S"] else None,
        )
    except ConfigError:
        return None
