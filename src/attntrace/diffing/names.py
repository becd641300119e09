"""A module's attention weights read by its own names, before diff falls back on the order its
forward calls its ``nn.Linear`` layers. Beside the schemes and layouts of
:mod:`attntrace.files.schemes` and :mod:`attntrace.models.layouts` (nn.MultiheadAttention's
``in_proj_weight``, q_proj … o_proj, BERT's query/key/value, GPT-2's Conv1D ``c_attn``,
Falcon's ``query_key_value``, Phi-3's ``qkv_proj``), the names of the code people run:

=====================  =====================================  ===============================
code                   names                                  split
=====================  =====================================  ===============================
timm ``Attention``     qkv (3H, H), proj                      rows [q; k; v] (``reshape(B, N,
                                                              3, h, d)``)
vit-pytorch            to_qkv (3·h·d, H), to_out.0            ``chunk(3, dim=-1)``: [q; k; v]
x-transformers         to_q, to_k and to_v or to_kv, to_out   to_kv's rows [k; v]
nanoGPT                c_attn (3H, H) nn.Linear, c_proj       ``split(n_embd, dim=2)``: [q; k; v]
MPT ``MptAttention``   Wqkv (3H, H), out_proj                 ``chunk(3, dim=2)``: [q; k; v]
T5 ``T5Attention``     q, k, v, o; relative_attention_bias    plain; the table as rel_bias
=====================  =====================================  ===============================
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from attntrace.errors import InputFileError
from attntrace.files.readers import LazyArrays, _float_array
from attntrace.files.schemes import SCHEMES, Arrays, LayoutInfo, LoadedWeights, Scheme, load_layer

if TYPE_CHECKING:
    import numpy as np

Params = dict[str, "np.ndarray | None"]


def _get(layer: Arrays, path: Path, name: str) -> np.ndarray | None:
    return _float_array(path, name, layer[name]) if name in layer else None


def _need(layer: Arrays, path: Path, name: str) -> np.ndarray:
    found = _get(layer, path, name)
    if found is None:
        raise InputFileError(f"{path}: {name} is missing; the layer needs all its projections")
    return found


def _thirds(w: np.ndarray | None) -> list[np.ndarray | None]:
    import numpy as np

    return [None] * 3 if w is None else [np.ascontiguousarray(p) for p in np.split(w, 3)]


def _packed(layer: Arrays, path: Path, packed: str, out: tuple[str, ...]) -> Params:
    """q, k, v stacked on the rows of ``packed``; the output projection the first of ``out``
    that the module has."""
    w_q, w_k, w_v = _thirds(_need(layer, path, f"{packed}.weight"))
    b_q, b_k, b_v = _thirds(_get(layer, path, f"{packed}.bias"))
    o = next((name for name in out if f"{name}.weight" in layer), out[0])
    return {
        "w_q": w_q,
        "b_q": b_q,
        "w_k": w_k,
        "b_k": b_k,
        "w_v": w_v,
        "b_v": b_v,
        "w_o": _need(layer, path, f"{o}.weight"),
        "b_o": _get(layer, path, f"{o}.bias"),
    }


#: Other names of the output projection beside a packed ``qkv`` or ``to_qkv`` (a user's own
#: module: ``self.qkv``, ``self.out``), tried after the library's own.
PACKED_OUTPUTS = ("out", "out_proj", "o_proj", "output_proj", "dense", "c_proj", "wo", "o")
TIMM_OUTPUTS = ("proj", "to_out.0", "to_out", *PACKED_OUTPUTS)
TO_QKV_OUTPUTS = ("to_out.0", "to_out", "proj", *PACKED_OUTPUTS)


def timm(layer: Arrays, path: Path) -> Params:
    """timm's ``qkv`` and ``proj`` (or another familiar output name)."""
    return _packed(layer, path, "qkv", TIMM_OUTPUTS)


def wqkv(layer: Arrays, path: Path) -> Params:
    """MPT's ``Wqkv`` (rows [q; k; v], no biases) and ``out_proj``."""
    return _packed(layer, path, "Wqkv", ("out_proj",))


def to_qkv(layer: Arrays, path: Path) -> Params:
    """vit-pytorch's ``to_qkv`` and ``to_out`` (a Linear, or Sequential(Linear, Dropout))."""
    return _packed(layer, path, "to_qkv", TO_QKV_OUTPUTS)


def to_q(layer: Arrays, path: Path) -> Params:
    """x-transformers' (and vit-pytorch's cross) ``to_q`` with ``to_k``/``to_v`` or a packed
    ``to_kv`` whose rows are [k; v] (``to_kv(x).chunk(2, dim=-1)``)."""
    import numpy as np

    params: Params = {
        "w_q": _need(layer, path, "to_q.weight"),
        "b_q": _get(layer, path, "to_q.bias"),
    }
    if "to_kv.weight" in layer:
        w, b = _need(layer, path, "to_kv.weight"), _get(layer, path, "to_kv.bias")
        params["w_k"], params["w_v"] = (np.ascontiguousarray(p) for p in np.split(w, 2))
        params["b_k"], params["b_v"] = (None, None) if b is None else np.split(b, 2)
    else:
        for c in "kv":
            params[f"w_{c}"] = _need(layer, path, f"to_{c}.weight")
            params[f"b_{c}"] = _get(layer, path, f"to_{c}.bias")
    o = "to_out.0" if "to_out.0.weight" in layer else "to_out"
    return {
        **params,
        "w_o": _need(layer, path, f"{o}.weight"),
        "b_o": _get(layer, path, f"{o}.bias"),
    }


def c_attn(layer: Arrays, path: Path, info: LayoutInfo) -> Params:
    """``c_attn``/``c_proj``: GPT-2's Conv1D (weight (in, out) = (H, 3H)), nanoGPT's
    nn.Linear (weight (out, in) = (3H, H)), or GPTBigCode's multi-query nn.Linear (rows
    [q (H); k (d); v (d)])."""
    from attntrace.models.layouts import gpt2

    w = _need(layer, path, "c_attn.weight")
    if w.ndim == 2 and w.shape[1] == 3 * w.shape[0]:
        return gpt2(layer, path, info)  # Conv1D stores (in, out)
    hidden = w.shape[1]
    if info.heads and w.shape[0] == hidden + 2 * (hidden // info.heads):
        return _multi_query(layer, path, hidden)
    return _packed(layer, path, "c_attn", ("c_proj",))


def _multi_query(layer: Arrays, path: Path, hidden: int) -> Params:
    """GPTBigCode's ``c_attn`` with multi_query: q's H rows, then one head of k and of v."""
    import numpy as np

    w, b = _need(layer, path, "c_attn.weight"), _get(layer, path, "c_attn.bias")
    cuts = [hidden, hidden + (w.shape[0] - hidden) // 2]
    w_q, w_k, w_v = (np.ascontiguousarray(p) for p in np.split(w, cuts))
    b_q, b_k, b_v = (None, None, None) if b is None else np.split(b, cuts)
    return {
        "w_q": w_q,
        "b_q": b_q,
        "w_k": w_k,
        "b_k": b_k,
        "w_v": w_v,
        "b_v": b_v,
        "w_o": _need(layer, path, "c_proj.weight"),
        "b_o": _get(layer, path, "c_proj.bias"),
    }


def renamed(q: str, k: str, v: str, o: str | None) -> Any:
    """The split of a layer whose projections are named ``q``, ``k``, ``v`` and ``o`` (None: no
    output projection, the merged context is the output: w_o is the identity)."""
    import numpy as np

    def split(layer: Arrays, path: Path) -> Params:
        params: Params = {}
        for c, name in (("q", q), ("k", k), ("v", v), *((("o", o),) if o else ())):
            params[f"w_{c}"] = _need(layer, path, f"{name}.weight")
            params[f"b_{c}"] = _get(layer, path, f"{name}.bias")
        if o is None:
            w_q = params["w_q"]
            assert w_q is not None
            params["w_o"], params["b_o"] = np.eye(w_q.shape[0], dtype=w_q.dtype), None
        return params

    return split


def t5_attention(layer: Arrays, path: Path) -> Params:
    """A bare ``T5Attention``: q, k, v, o (T5's without biases; a user's module of those names
    with its biases read); its relative bias table, if it has one, as rel_bias."""
    params: Params = {}
    for c in "qkvo":
        params[f"w_{c}"] = _need(layer, path, f"{c}.weight")
        params[f"b_{c}"] = _get(layer, path, f"{c}.bias")
    table = _get(layer, path, "relative_attention_bias.weight")
    return {**params, **({"rel_bias": table} if table is not None else {})}


#: The packed schemes whose output projection goes by other names than the library's.
TIMM, VIT, T5 = "qkv/proj (timm)", "to_qkv/to_out (vit-pytorch)", "T5Attention q/k/v/o"
_OUTPUTS = {TIMM: ("qkv", TIMM_OUTPUTS[:1]), VIT: ("to_qkv", TO_QKV_OUTPUTS[:2])}


def _as_read(weights: LoadedWeights, arrays: LazyArrays) -> LoadedWeights:
    """``weights`` under the names it was read by: a packed ``qkv`` beside an output named
    otherwise than the library's (a user's ``self.out``) is ``qkv/out``, not timm's scheme;
    ``q``, ``k``, ``v``, ``o`` with biases (T5 has none) are a user's ``q/k/v/o``."""
    from dataclasses import replace

    if weights.scheme == T5 and any(weights.params.get(f"b_{c}") is not None for c in "qkvo"):
        return replace(weights, scheme="q/k/v/o")
    packed, own = _OUTPUTS.get(weights.scheme, ("", ()))
    if not packed:
        return weights
    layer = arrays.under(weights.prefix)
    names = TIMM_OUTPUTS if packed == "qkv" else TO_QKV_OUTPUTS
    o = next((name for name in names if f"{name}.weight" in layer), names[0])
    return weights if o in own else replace(weights, scheme=f"{packed}/{o}")


#: DeBERTa's query_proj/key_proj/value_proj: no output projection of its own.
DEBERTA = "query_proj/key_proj/value_proj (DeBERTa)"


def _plain(split: Any) -> Any:
    return lambda layer, path, info: split(layer, path)


def _schemes() -> tuple[Scheme, ...]:
    from attntrace.models.layouts import LAYOUTS

    ours = (
        Scheme("c_attn/c_proj (GPT-2 Conv1D, nanoGPT)", "c_attn.weight", _unused, c_attn),
        Scheme(TIMM, "qkv.weight", _unused, _plain(timm)),
        Scheme(VIT, "to_qkv.weight", _unused, _plain(to_qkv)),
        Scheme("Wqkv/out_proj (MPT)", "Wqkv.weight", _unused, _plain(wqkv)),
        Scheme("to_q/to_kv/to_out (x-transformers)", "to_q.weight", _unused, _plain(to_q)),
        Scheme(T5, "q.weight", _unused, _plain(t5_attention)),
        Scheme(
            "q_lin/k_lin/v_lin/out_lin (DistilBERT)",
            "q_lin.weight",
            _unused,
            _plain(renamed("q_lin", "k_lin", "v_lin", "out_lin")),
        ),
        Scheme(
            DEBERTA,
            "query_proj.weight",
            _unused,
            _plain(renamed("query_proj", "key_proj", "value_proj", None)),
        ),
    )
    return (*SCHEMES, *(s for s in LAYOUTS if s.marker != "c_attn.weight"), *ours)


def _unused(layer: Arrays, path: Path) -> Params:
    raise AssertionError("read with the scheme's split function")  # pragma: no cover


def module_weights(
    module: Any, info: LayoutInfo, prefix: str | None = None
) -> LoadedWeights | None:
    """The attention weights of ``module`` by its own names (``info``: its head counts and
    config, which the fused layouts need; ``prefix``: the layer's, when it holds several), or
    None when no name is known.

    >>> import torch
    >>> class Attention(torch.nn.Module):  # timm's names
    ...     def __init__(self):
    ...         super().__init__()
    ...         self.qkv, self.proj = torch.nn.Linear(8, 24), torch.nn.Linear(8, 8)
    >>> w = module_weights(Attention(), LayoutInfo(heads=2))
    >>> w.scheme, w.params["w_k"].shape
    ('qkv/proj (timm)', (8, 8))
    >>> class Block(torch.nn.Module):  # a user's own names, the scheme named by them
    ...     def __init__(self):
    ...         super().__init__()
    ...         self.qkv, self.out = torch.nn.Linear(8, 24), torch.nn.Linear(8, 8)
    >>> module_weights(Block(), LayoutInfo(heads=2)).scheme
    'qkv/out'
    """
    from attntrace.files.schemes import torch_to_numpy

    state = {k: v for k, v in module.state_dict().items() if v.is_floating_point()}
    arrays = LazyArrays(state, lambda key: torch_to_numpy(state[key]))
    path = Path(f"{type(module).__name__}.state_dict()")
    try:
        top = _top(arrays) if prefix is None else prefix  # prefix: the layer forward calls
        loaded = load_layer(path, arrays, {}, top, schemes=_schemes(), info=info)
    except InputFileError as exc:
        if "no attention weights in a known naming scheme" in str(exc):
            return None
        raise
    return _as_read(loaded, arrays)


def _top(arrays: Mapping[str, Any]) -> str | None:
    """The module's own layer (prefix ""), when its names are those of a scheme: its weights,
    not those of a submodule that happens to hold a marker."""
    markers = {s.marker for s in _schemes()}
    return "" if any(key in markers for key in arrays) else None
