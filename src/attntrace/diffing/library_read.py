"""What a transformers attention module states about itself, beyond its config: the facts its
own attributes and code fix (``is_causal``, ``scaling``, the pairing its ``rotate_half``
rotates, the sizes a class built from ``embed_dim`` / ``num_heads`` holds, a norm that scales
by ``1 + weight``), and what the reference cannot express (ALiBi, DeBERTa's disentangled
scores, latent attention): a diff of those is "cannot tell" with the reason, never a finding.
"""

from __future__ import annotations

import inspect
import math
import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from attntrace.files.schemes import LoadedWeights


def own_sizes(attn: Any, section: dict[str, Any]) -> dict[str, Any]:
    """``section`` with the sizes a class built from sizes holds (BART's ``embed_dim``,
    ``num_heads``), which its config may name otherwise (TrOCR's decoder_attention_heads).

    >>> class Attention:
    ...     embed_dim, num_heads = 64, 4
    >>> own_sizes(Attention(), {"model_type": "trocr"})["num_attention_heads"]
    4
    """
    out = dict(section)
    if out.get("sliding_window") == 0:  # Qwen2-MoE without use_sliding_window: no window
        out["sliding_window"] = None
    for field, names in (("hidden_size", ("embed_dim",)), ("num_attention_heads", ("num_heads",))):
        value = next(
            (getattr(attn, n) for n in names if isinstance(getattr(attn, n, None), int)), 0
        )
        if value and not isinstance(value, bool):
            out[field] = value
    return out


def read_facts(attn: Any, fields: dict[str, Any]) -> dict[str, Any]:
    """``fields`` (read from the config) with what ``attn`` itself fixes: causal from its
    ``is_causal`` (OPT, StableLM, Qwen3-MoE …), the scale from its ``scaling`` (Granite's
    attention_multiplier), the RoPE pairing from its modeling module's ``rotate_half``
    (Cohere, GLM: neighbours), ALiBi from its forward's arguments (:func:`alibi_hints`)."""
    out = dict(fields)
    causal = getattr(attn, "is_causal", None)
    if isinstance(causal, bool):
        out["causal"] = causal
    scaling = getattr(attn, "scaling", None)
    d = out.get("head_dim_override") or int(out["hidden"]) // int(out["heads"])
    if isinstance(scaling, float) and not math.isclose(scaling, d**-0.5, rel_tol=1e-6):
        out["scale"] = scaling
    if out.get("rope") and _pairs_neighbours(attn):
        out["rope_style"] = "interleaved"
    return out | alibi_hints(attn)


def alibi_hints(attn: Any) -> dict[str, Any]:
    """The fields of ALiBi when ``attn`` adds it (Bloom, MPT, Falcon with alibi; none else):
    no rotation; Falcon adds the bias to the raw scores, before the scale (alibi_scaled); Bloom
    and MPT, decoder-only families whose class keeps no config nor ``is_causal``, are causal."""
    from attntrace.capturing.library import DECODERS

    if not alibi_of(attn):
        return {}
    config = getattr(attn, "config", None)
    falcon = getattr(config, "model_type", "") == "falcon"
    family = [*type(attn).__module__.split("."), "", "", ""][2]  # transformers.models.bloom
    causal = {"causal": True} if family in DECODERS else {}
    return {"alibi": True, "alibi_scaled": falcon, "rope": False, "rotary_dims": None, **causal}


def _pairs_neighbours(attn: Any) -> bool:
    """Whether the modeling module's ``rotate_half`` pairs (2i, 2i + 1) (``x[..., ::2]``)."""
    rotate = getattr(sys.modules.get(type(attn).__module__), "rotate_half", None)
    try:
        source = inspect.getsource(rotate) if rotate is not None else ""
    except (TypeError, OSError):
        return False
    return "::2]" in source


def unexpressible(attn: Any) -> str | None:
    """Why the reference cannot express ``attn``'s attention (None when it can): ALiBi
    (Bloom, MPT, Falcon with alibi), DeBERTa's disentangled relative scores, multi-head latent
    attention (DeepSeek's low-rank q and kv), attention experts, a LayerNorm of q and k, an
    attention without a softmax (MiniMax's lightning attention, RWKV)."""
    name = type(attn).__name__
    for check in (_disentangled, _children, _no_softmax, _sinks, _clipped, _prescaled):
        what = check(attn)
        if what is not None:
            return f"{name} {what}, which the reference does not model"
    return None


def alibi_of(attn: Any) -> bool:
    """Whether ``attn`` adds ALiBi's biases: its forward takes Bloom's and Falcon's ``alibi``
    (Falcon when its config says so) or MPT's ``position_bias`` beside its builder."""
    from attntrace.capturing.library import alibi_on

    try:
        params = inspect.signature(attn.forward).parameters
    except (TypeError, ValueError):
        return False
    config = getattr(attn, "config", None)
    modeling = sys.modules.get(type(attn).__module__)
    return ("alibi" in params and (config is None or alibi_on(config))) or (
        "position_bias" in params and hasattr(modeling, "build_mpt_alibi_tensor")
    )


def _disentangled(attn: Any) -> str | None:
    params = inspect.signature(attn.forward).parameters
    if "relative_pos" in params and getattr(attn, "relative_attention", False):
        return "adds DeBERTa's disentangled content-to-position and position-to-content scores"
    return None


def _children(attn: Any) -> str | None:
    children = dict(attn.named_children())
    if "q_layernorm" in children or "query_layernorm" in children:
        return "normalises q and k with its own LayerNorm (with a bias, or after the rotation)"
    if "kv_a_proj_with_mqa" in children or "q_a_proj" in children:
        return "is multi-head latent attention (low-rank q and kv, a separate rotary part)"
    if any("expert" in n for n in children):
        return "routes tokens to attention experts"
    return None


def _sinks(attn: Any) -> str | None:
    """GPT-OSS's ``sinks``: a learned logit per head that joins the softmax over the keys."""
    import torch

    if isinstance(getattr(attn, "sinks", None), torch.nn.Parameter):
        return "adds a learned sink logit per head to the softmax (attention sinks)"
    return None


def _clipped(attn: Any) -> str | None:
    """OLMo's ``clip_qkv``: q, k and v clamped to ±c after the projection."""
    clip = getattr(getattr(attn, "config", None), "clip_qkv", None)
    if isinstance(clip, int | float) and not isinstance(clip, bool):
        return f"clamps q, k and v to ±{clip:g} (clip_qkv)"
    return None


def _prescaled(attn: Any) -> str | None:
    """ESM's rotary attention: q scaled by 1/√d before the rotation, the scores by 1.0."""
    if (
        getattr(attn, "position_embedding_type", None) == "rotary"
        and getattr(attn, "scaling", 0) == 1
    ):
        return "scales q by 1/√d before its rotation (and the scores by 1.0)"
    return None


def _no_softmax(attn: Any) -> str | None:
    if any(_softmax_in(type(m)) for m in attn.modules()):
        return None
    return "computes no softmax over the keys (linear, kernel or recurrent attention)"


#: Words in a class's code that show a softmax attention: the softmax itself, or transformers'
#: dispatch to its attention functions (eager, SDPA, flash).
_SOFTMAX_WORDS = (
    "softmax",
    "attention_interface",
    "eager_attention_forward",
    "scaled_dot_product_attention",
    "ALL_ATTENTION_FUNCTIONS",
)


def _softmax_in(cls: type) -> bool:
    """Whether the code of ``cls`` takes a softmax (or hands the scores to one)."""
    try:
        source = inspect.getsource(cls)
    except (TypeError, OSError):
        return True  # unreadable: not a reason to refuse
    return any(word in source for word in _SOFTMAX_WORDS)


def norm_offsets(attn: Any, weights: LoadedWeights) -> LoadedWeights:
    """``weights`` with the q and k norm weights as applied: Gemma's RMSNorm scales by
    ``1 + weight`` (its weights start at 0), the reference by the weight."""
    from dataclasses import replace

    params = dict(weights.params)
    for c in "qk":
        norm, value = getattr(attn, f"{c}_norm", None), params.get(f"n_{c}")
        if norm is None or value is None:
            continue
        try:
            source = inspect.getsource(type(norm).forward)
        except (TypeError, OSError):
            continue
        if "1.0 + self.weight" in source or "1 + self.weight" in source:
            params[f"n_{c}"] = value + 1
    return replace(weights, params=params)


def qk_norm_hints(attn: Any, weights: LoadedWeights, hints: dict[str, Any]) -> dict[str, Any]:
    """``hints`` with the q/k norm the weights hold (q_norm over the width: "full", over d:
    "head") and its epsilon, when the config did not say (OLMoE, dots1, Apertus).

    >>> import numpy as np
    >>> from pathlib import Path
    >>> from attntrace.files.schemes import LoadedWeights
    >>> w = LoadedWeights(Path("x"), "s", "", {"w_q": np.zeros((8, 8)), "n_q": np.ones(8)})
    >>> qk_norm_hints(object(), w, {})
    {'qk_norm': 'full', 'qk_norm_eps': 1e-06}
    """
    n_q, w_q = weights.params.get("n_q"), weights.params.get("w_q")
    if n_q is None or w_q is None or hints.get("qk_norm"):
        return hints
    norm = getattr(attn, "q_norm", None)
    eps = getattr(norm, "variance_epsilon", getattr(norm, "eps", None))
    return {
        **hints,
        "qk_norm": "full" if n_q.size == w_q.shape[0] else "head",
        "qk_norm_eps": float(eps) if isinstance(eps, float) else 1e-6,
    }
