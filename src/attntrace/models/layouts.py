"""Checkpoint layouts beyond the four plain naming schemes, split exactly as transformers splits
them. Each gives our names (w_q, b_q, ... w_o, b_o; torch convention, weight (out, in)).

=================  =====================================  ==================================
layout             names (after the layer prefix)         how it is split
=================  =====================================  ==================================
GPT-2              c_attn.weight (H, 3H), c_proj.weight   Conv1D stores (in, out): transposed,
                   (H, H), biases                         then [q; k; v] on the rows
GPT-NeoX / Pythia  query_key_value (3H, H), dense         per head: rows (h, 3, d), as
                                                          ``qkv.view(..., h, 3 * d).chunk(3)``
Falcon             query_key_value, dense                 7B multi-query: (h + 2, d) rows;
                                                          new_decoder_architecture: (g, h/g + 2,
                                                          d); else per head like NeoX
Phi-3              qkv_proj ((h + 2g)·d, H), o_proj       rows [q (h·d); k (g·d); v (g·d)]
T5                 SelfAttention.q/k/v/o                  plain; no bias, no 1/√d
T5 cross           EncDecAttention.q/k/v/o                plain; k, v read x_kv (--kv-seq)
Meta Llama         attention.wq/wk/wv/wo                  as they are with --rope-style
                                                          interleaved (a params.json folder's
                                                          default); for half, rows of wq and
                                                          wk from interleaved pairs to halves
                                                          (as transformers' converter does)
BertSelfAttention  query/key/value (no output layer)      w_o = identity: the module returns
                                                          the merged context
=================  =====================================  ==================================
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from attntrace.errors import InputFileError
from attntrace.files.readers import _float_array
from attntrace.files.schemes import SCHEMES, Arrays, LayoutInfo, Scheme

if TYPE_CHECKING:
    import numpy as np

Params = dict[str, "np.ndarray | None"]


def _get(layer: Arrays, path: Path, name: str, required: bool = True) -> np.ndarray | None:
    if name in layer:
        return _float_array(path, name, layer[name])
    if required:
        raise InputFileError(
            f"{path}: {name} is missing; the layer needs all its projection weights"
        )
    return None


def _rows(w: np.ndarray | None, sizes: list[int]) -> list[np.ndarray | None]:
    """``w`` cut along its first axis into pieces of ``sizes`` (None stays None)."""
    import numpy as np

    if w is None:
        return [None] * len(sizes)
    return [np.ascontiguousarray(p) for p in np.split(w, np.cumsum(sizes)[:-1])]


def _heads(info: LayoutInfo, path: Path, layout: str) -> int:
    if info.heads is None:
        raise InputFileError(
            f"{path}: the {layout} layout fuses q, k and v per head; pass --heads "
            "(or use --model DIR / --hf-config so the config says it)"
        )
    return info.heads


def gpt2(layer: Arrays, path: Path, info: LayoutInfo) -> Params:
    """GPT-2's Conv1D: ``x @ W + b`` with W (in, out); c_attn's out is [q | k | v]."""
    w_in, w_o = _get(layer, path, "c_attn.weight"), _get(layer, path, "c_proj.weight")
    assert w_in is not None
    assert w_o is not None
    H = w_in.shape[0]
    w_q, w_k, w_v = _rows(w_in.T, [H, H, H])  # (3H, H) -> 3 x (H, H)
    b_q, b_k, b_v = _rows(_get(layer, path, "c_attn.bias", False), [H, H, H])
    return {
        "w_q": w_q,
        "b_q": b_q,
        "w_k": w_k,
        "b_k": b_k,
        "w_v": w_v,
        "b_v": b_v,
        "w_o": w_o.T.copy(),
        "b_o": _get(layer, path, "c_proj.bias", False),
    }


def fused_per_head(layer: Arrays, path: Path, info: LayoutInfo) -> Params:
    """GPT-NeoX / Pythia (and Falcon's other layouts): query_key_value and dense. Without a
    config, the rows tell the layouts apart: 3H rows are NeoX's (h, 3, d) (also Falcon's per
    head layout), H + 2·g·d rows Falcon's grouped (g, h/g + 2, d) (multi-query: g = 1)."""
    if str(info.config.get("model_type", "")) == "falcon":
        return falcon(layer, path, info)
    h = _heads(info, path, "GPT-NeoX")
    w, b = (
        _get(layer, path, "query_key_value.weight"),
        _get(layer, path, "query_key_value.bias", False),
    )
    assert w is not None
    if w.ndim == 2 and w.shape[0] != 3 * w.shape[1]:  # not NeoX's: Falcon's grouped rows
        return _falcon_grouped(layer, path, w, b, h, _falcon_groups(path, w.shape, h))
    d = w.shape[0] // (3 * h)
    q, k, v = (_take(w, h, 3, d, i) for i in range(3))  # rows (h, 3, d): per head q, k, v
    bq, bk, bv = (_take(b, h, 3, d, i) for i in range(3))
    return _fused(layer, path, (q, k, v), (bq, bk, bv), "dense")


def _falcon_groups(path: Path, shape: tuple[int, ...], h: int) -> int:
    """g of a query_key_value of ``shape`` (rows, H) in Falcon's grouped layout: rows are
    (h + 2g)·d with d = H / h; anything else is refused, naming the fix."""
    rows, hidden = shape
    d = hidden // h if hidden % h == 0 else 0
    g = (rows - hidden) // (2 * d) if d and rows > hidden else 0
    if not g or rows != hidden + 2 * g * d or h % g:
        raise InputFileError(
            f"{path}: query_key_value.weight is {shape}: neither GPT-NeoX's 3H = {3 * hidden} "
            f"rows nor Falcon's (h + 2g)·d rows for --heads {h}; check --heads, or give "
            "--hf-config config.json (or --model DIR) so that the config names the layout"
        )
    return g


def _falcon_grouped(
    layer: Arrays, path: Path, w: np.ndarray, b: np.ndarray | None, h: int, g: int
) -> Params:
    """Falcon's new_decoder_architecture rows (g, h/g + 2, d): per group h/g queries, k, v."""
    r = h // g
    d = w.shape[0] // (g * (r + 2))
    q, k, v, bq, bk, bv = (
        _take(x, g, r + 2, d, s) for x in (w, b) for s in (slice(0, r), r, r + 1)
    )
    return _fused(layer, path, (q, k, v), (bq, bk, bv), "dense")


def _fused(
    layer: Arrays,
    path: Path,
    weights: tuple[np.ndarray | None, ...],
    biases: tuple[np.ndarray | None, ...],
    out: str,
) -> Params:
    """Our names for q, k, v split from a fused projection, and the output projection ``out``."""
    (q, k, v), (bq, bk, bv) = weights, biases
    w_o, b_o = _get(layer, path, f"{out}.weight"), _get(layer, path, f"{out}.bias", False)
    return {"w_q": q, "b_q": bq, "w_k": k, "b_k": bk, "w_v": v, "b_v": bv, "w_o": w_o, "b_o": b_o}


def _take(
    w: np.ndarray | None, groups: int, per: int, d: int, pick: int | slice
) -> np.ndarray | None:
    """Rows of ``w`` viewed as (groups, per, d, ...): the ``pick`` of each group, flattened."""
    import numpy as np

    if w is None:
        return None
    blocks = w.reshape(groups, per, d, *w.shape[1:])[:, pick]  # (groups, [n,] d, ...)
    return np.ascontiguousarray(blocks.reshape(-1, *w.shape[1:]))


def falcon(layer: Arrays, path: Path, info: LayoutInfo) -> Params:
    """Falcon's three layouts of query_key_value (FalconAttention._split_heads)."""
    cfg, h = info.config, _heads(info, path, "Falcon")
    w, b = (
        _get(layer, path, "query_key_value.weight"),
        _get(layer, path, "query_key_value.bias", False),
    )
    assert w is not None
    if cfg.get("new_decoder_architecture"):
        return _falcon_grouped(layer, path, w, b, h, int(cfg.get("num_kv_heads") or h))
    if cfg.get("multi_query", True):
        d = w.shape[0] // (h + 2)
        parts = [p for x in (w, b) for p in _rows(x, [h * d, d, d])]
    else:
        d = w.shape[0] // (3 * h)
        parts = [_take(x, h, 3, d, i) for x in (w, b) for i in range(3)]
    q, k, v, bq, bk, bv = parts
    return _fused(layer, path, (q, k, v), (bq, bk, bv), "dense")


def phi3(layer: Arrays, path: Path, info: LayoutInfo) -> Params:
    """Phi-3's qkv_proj: rows [q (h·d); k (g·d); v (g·d)]."""
    h = _heads(info, path, "Phi-3")
    g = info.kv_heads or h
    w = _get(layer, path, "qkv_proj.weight")
    assert w is not None
    d = w.shape[0] // (h + 2 * g)
    q, k, v = _rows(w, [h * d, g * d, g * d])
    bq, bk, bv = _rows(_get(layer, path, "qkv_proj.bias", False), [h * d, g * d, g * d])
    return _fused(layer, path, (q, k, v), (bq, bk, bv), "o_proj")


def t5(layer: Arrays, path: Path, info: LayoutInfo) -> Params:
    """T5's SelfAttention.q/k/v/o (no biases), and the relative bias table of the layer that
    holds one (block 0; :mod:`attntrace.models.load` finds it for the other layers)."""
    params = {
        f"{kind}_{c}": _get(layer, path, f"SelfAttention.{c}.{name}", kind == "w")
        for c in "qkvo"
        for kind, name in (("w", "weight"), ("b", "bias"))
    }
    table = _get(layer, path, "SelfAttention.relative_attention_bias.weight", False)
    return {**params, **({"rel_bias": table} if table is not None else {})}


def t5_cross(layer: Arrays, path: Path, info: LayoutInfo) -> Params:
    """T5's EncDecAttention.q/k/v/o (no biases): q from the decoder, k and v from x_kv."""
    return {
        f"{kind}_{c}": _get(layer, path, f"EncDecAttention.{c}.{name}", kind == "w")
        for c in "qkvo"
        for kind, name in (("w", "weight"), ("b", "bias"))
    }


def meta(layer: Arrays, path: Path, info: LayoutInfo) -> Params:
    """Meta's attention.wq/wk/wv/wo; q and k rotate neighbours (2i, 2i + 1) there: read as they
    are for --rope-style interleaved; for half (i, i + d/2) the rows of each head are reordered,
    as transformers' converter does."""
    h = _heads(info, path, "Meta Llama")
    w = {c: _get(layer, path, f"attention.w{c}.weight") for c in "qkvo"}
    assert w["q"] is not None
    assert w["k"] is not None
    d = w["q"].shape[0] // h
    pairs = info.rope_style == "interleaved"  # Meta's own pairing: the rows as they are
    return {
        "w_q": w["q"] if pairs else halves(w["q"], d),
        "b_q": None,
        "w_k": w["k"] if pairs else halves(w["k"], d),
        "b_k": None,
        "w_v": w["v"],
        "b_v": None,
        "w_o": w["o"],
        "b_o": None,
    }


def halves(w: np.ndarray, d: int) -> np.ndarray:
    """Rows of each head from interleaved pairs (0, 1), (2, 3), ... to halves (0, d/2), ...

    >>> import numpy as np
    >>> halves(np.arange(4.0)[:, None], 4)[:, 0].tolist()
    [0.0, 2.0, 1.0, 3.0]
    """
    import numpy as np

    heads = w.shape[0] // d
    return np.ascontiguousarray(
        w.reshape(heads, d // 2, 2, -1).transpose(0, 2, 1, 3).reshape(w.shape)
    )


def bert_self(layer: Arrays, path: Path, info: LayoutInfo) -> Params:
    """A bare BertSelfAttention: query/key/value only; its output is the merged context."""
    import numpy as np

    params = {
        f"{kind}_{c}": _get(layer, path, f"{m}.{name}", kind == "w")
        for c, m in (("q", "query"), ("k", "key"), ("v", "value"))
        for kind, name in (("w", "weight"), ("b", "bias"))
    }
    w_q = params["w_q"]
    assert w_q is not None
    return {**params, "w_o": np.eye(w_q.shape[0], dtype=w_q.dtype), "b_o": None}


def _unused(layer: Arrays, path: Path) -> Params:
    raise AssertionError("split layouts are read with their split function")  # pragma: no cover


#: The name of T5's cross-attention layout (a decoder block's layer 1).
T5_CROSS_SCHEME = "T5 EncDecAttention (cross-attention)"

#: The layouts of this module, after the plain schemes.
LAYOUTS: tuple[Scheme, ...] = (
    Scheme("GPT-2 c_attn (Conv1D)", "c_attn.weight", _unused, gpt2),
    Scheme("query_key_value (GPT-NeoX, Falcon)", "query_key_value.weight", _unused, fused_per_head),
    Scheme("qkv_proj (Phi-3)", "qkv_proj.weight", _unused, phi3),
    Scheme("T5 SelfAttention", "SelfAttention.q.weight", _unused, t5),
    Scheme(T5_CROSS_SCHEME, "EncDecAttention.q.weight", _unused, t5_cross),
    Scheme("Meta attention.wq", "attention.wq.weight", _unused, meta),
    Scheme("BertSelfAttention", "query.weight", _unused, bert_self),
)

#: Every scheme and layout, for --weights and --model.
ALL_SCHEMES: tuple[Scheme, ...] = (*SCHEMES, *LAYOUTS)
