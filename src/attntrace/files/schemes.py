"""Weight naming schemes: find one attention layer in a file and give its tensors our names
(w_q, b_q, w_k, b_k, w_v, b_v, w_o, b_o; torch convention, weight (out, in)).

=================  ==========================================================================
scheme             names (after the layer prefix)
=================  ==========================================================================
attntrace          w_q, w_k, w_v, w_o, b_q, b_k, b_v, b_o
MultiheadAttention in_proj_weight (3H, H) = [w_q; w_k; w_v], in_proj_bias, out_proj.weight/.bias
q_proj/o_proj      q_proj.weight, k_proj.weight, v_proj.weight, o_proj.weight (or out_proj), .bias
BERT               attention.self.query/key/value.weight/.bias, attention.output.dense.weight/.bias
=================  ==========================================================================

A missing bias means the layer has no bias (Llama, Mistral); it is mapped to None.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from attntrace.errors import InputFileError
from attntrace.files.readers import LazyArrays, _float_array, read_arrays

if TYPE_CHECKING:
    import numpy as np

Arrays = Mapping[str, "np.ndarray"]
OUR_NAMES: tuple[str, ...] = ("w_q", "b_q", "w_k", "b_k", "w_v", "b_v", "w_o", "b_o")
#: How many candidate prefixes an error message lists.
MAX_LISTED = 6


@dataclass(frozen=True)
class Scheme:
    """A naming scheme: the key that marks a layer, and how to map a layer's keys to ours."""

    name: str
    marker: str  # the query weight (or packed in-projection) key, found after the prefix
    names: Callable[[Arrays, Path], dict[str, np.ndarray | None]]
    #: the layouts of attntrace.models that need the head counts to split: (layer, path, info)
    split: Callable[[Arrays, Path, LayoutInfo], dict[str, np.ndarray | None]] | None = None


@dataclass(frozen=True)
class LayoutInfo:
    """What a fused layout needs to be split as transformers splits it: the head counts and
    the config.json section of the model (empty when only the weights are given)."""

    heads: int | None = None  # h
    kv_heads: int | None = None  # g (None: h)
    config: Mapping[str, Any] = field(default_factory=dict)
    rope_style: str = "half"  # the trace's RoPE pairing: Meta's wq/wk rows are permuted for half


@dataclass(frozen=True)
class LoadedWeights:
    """One attention layer read from a file: our parameter names -> arrays (None: no bias).

    ``hints`` are sizes the file states (``heads``, and ``dtype`` / ``scale`` of an attntrace
    ``--save`` file); the CLI uses them when the options leave them out.
    """

    path: Path
    scheme: str
    prefix: str
    params: dict[str, np.ndarray | None]
    hints: dict[str, Any] = field(default_factory=dict)
    family: str = ""  # "llama" for q_proj ... o_proj (rotary, causal), else ""

    def _shape(self, name: str) -> tuple[int, int]:
        weight = self.params[name]
        assert weight is not None  # the four weights are never None
        return int(weight.shape[0]), int(weight.shape[1])

    @property
    def hidden(self) -> int:
        """H, the input width of w_q (h·d, H)."""
        return self._shape("w_q")[1]

    @property
    def q_width(self) -> int:
        """h·d, the output width of w_q (H unless head_dim is decoupled, as in Gemma)."""
        return self._shape("w_q")[0]

    @property
    def kv_width(self) -> int:
        """g·d, the output width of w_k and w_v (smaller than h·d for grouped-query attention)."""
        return self._shape("w_k")[0]

    @property
    def kv_in(self) -> int:
        """M, the input width of w_k and w_v (H unless the keys come from another width)."""
        return self._shape("w_k")[1]


def load_weights(
    path: Path,
    layer_prefix: str | None = None,
    *,
    schemes: tuple[Scheme, ...] | None = None,
    info: LayoutInfo | None = None,
) -> LoadedWeights:
    """The attention layer in ``path`` (under ``layer_prefix`` when given), in our names.

    >>> import numpy as np, tempfile, pathlib
    >>> f = pathlib.Path(tempfile.mkdtemp()) / "mha.npz"
    >>> np.savez(f, in_proj_weight=np.zeros((12, 4)), **{"out_proj.weight": np.eye(4)})
    >>> w = load_weights(f)
    >>> w.scheme, w.hidden, w.params["w_k"].shape, w.params["b_q"]
    ('nn.MultiheadAttention', 4, (4, 4), None)
    """
    arrays, meta = read_arrays(path)
    return load_layer(path, arrays, meta, layer_prefix, schemes=schemes, info=info)


def layer_weights(arrays: LazyArrays, path: Path, layer_prefix: str | None = None) -> LoadedWeights:
    """The attention layer among ``arrays`` (a module's state dict; ``path`` names where they
    come from in messages), in our names."""
    return load_layer(path, arrays, {}, layer_prefix)


def load_layer(
    path: Path,
    arrays: LazyArrays,
    meta: Mapping[str, str],
    layer_prefix: str | None,
    *,
    schemes: tuple[Scheme, ...] | None = None,
    info: LayoutInfo | None = None,
) -> LoadedWeights:
    """The attention layer among ``arrays`` (read from ``path``; a folder's shards for --model),
    found with ``schemes`` (default :data:`SCHEMES`); ``info`` splits the fused layouts."""
    prefix, scheme = _pick_layer(path, arrays, layer_prefix, schemes or SCHEMES)
    layer = arrays.under(prefix)
    split = scheme.split
    info = info or LayoutInfo()
    params = split(layer, path, info) if split is not None else scheme.names(layer, path)
    _check_shapes(path, prefix, params)
    family = "llama" if scheme.marker == "q_proj.weight" and "o_proj.weight" in layer else ""
    return LoadedWeights(
        path=path,
        scheme=scheme.name,
        prefix=prefix,
        params=params,
        hints=_hints(path, meta),
        family=family,
    )


def _pick_layer(
    path: Path, arrays: Arrays, layer_prefix: str | None, schemes: tuple[Scheme, ...]
) -> tuple[str, Scheme]:
    found = layer_candidates(arrays, schemes)
    if layer_prefix is not None:
        wanted = [
            layer_prefix,
            *([] if layer_prefix.endswith(".") or not layer_prefix else [layer_prefix + "."]),
        ]
        for prefix, scheme in found:
            if prefix in wanted:
                return prefix, scheme
        raise InputFileError(
            f"{path}: no attention layer under --layer-prefix {layer_prefix!r}; "
            f"{_listing(found, arrays)}"
        )
    if len(found) == 1:
        return found[0]
    if not found:
        raise InputFileError(
            f"{path}: no attention weights in a known naming scheme; {_listing(found, arrays)}"
        )
    raise InputFileError(
        f"{path}: holds {len(found)} attention layers; pick one with --layer-prefix, "
        f"{_listing(found, arrays)}"
    )


def layer_candidates(
    arrays: Arrays, schemes: tuple[Scheme, ...] | None = None
) -> list[tuple[str, Scheme]]:
    """Every (prefix, scheme) of an attention layer in ``arrays``, in file order; a layout inside
    another layer (a BERT layer's ``attention.self.query``) counts as part of that layer."""
    found = _candidates(arrays, schemes or SCHEMES)
    return [(p, s) for p, s in found if not any(p != o and p.startswith(o) for o, _ in found)]


def _candidates(arrays: Arrays, schemes: tuple[Scheme, ...]) -> list[tuple[str, Scheme]]:
    """Every (prefix, scheme) whose marker key is in ``arrays``, in file order."""
    found = []
    for key in arrays:
        for scheme in schemes:
            if key == scheme.marker or key.endswith("." + scheme.marker):
                found.append((key[: len(key) - len(scheme.marker)], scheme))
    return found


def _listing(found: list[tuple[str, Scheme]], arrays: Arrays) -> str:
    if found:
        shown = ", ".join(repr(p) for p, _ in found[:MAX_LISTED])
        more = f" and {len(found) - MAX_LISTED} more" if len(found) > MAX_LISTED else ""
        return f"prefixes found: {shown}{more}"
    keys = ", ".join(list(arrays)[:MAX_LISTED]) or "(no arrays)"
    return f"known schemes: {', '.join(s.name for s in SCHEMES)}; keys in the file: {keys}"


def _ours(layer: Arrays, path: Path) -> dict[str, np.ndarray | None]:
    return _rename(layer, path, {name: name for name in OUR_NAMES})


def _mha(layer: Arrays, path: Path) -> dict[str, np.ndarray | None]:
    """nn.MultiheadAttention: the packed in-projection is [w_q; w_k; w_v] stacked on rows."""
    import numpy as np

    packed = _rename(
        layer,
        path,
        {
            "w_in": "in_proj_weight",
            "b_in": "in_proj_bias",
            "w_o": "out_proj.weight",
            "b_o": "out_proj.bias",
        },
    )
    w_in, b_in = packed.pop("w_in"), packed.pop("b_in")
    assert w_in is not None
    if w_in.ndim != 2 or w_in.shape[0] != 3 * w_in.shape[1]:
        raise InputFileError(
            f"{path}: in_proj_weight is {w_in.shape}, not (3H, H); kdim/vdim other than H is not "
            "supported"
        )
    ws = np.split(w_in, 3)
    bs = np.split(b_in, 3) if b_in is not None and b_in.shape == (w_in.shape[0],) else [b_in] * 3
    return {
        "w_q": ws[0],
        "b_q": bs[0],
        "w_k": ws[1],
        "b_k": bs[1],
        "w_v": ws[2],
        "b_v": bs[2],
        **packed,
    }


#: The output projection beside q_proj, k_proj, v_proj, by family: Llama/Mistral/Qwen's
#: o_proj, BART/OPT's out_proj, Phi's dense, and the names people give their own.
OUT_NAMES = ("o_proj", "out_proj", "dense", "output_proj", "c_proj", "wo", "proj", "out")


def _qkvo(layer: Arrays, path: Path) -> dict[str, np.ndarray | None]:
    out = next((o for o in OUT_NAMES if f"{o}.weight" in layer), "o_proj")  # Llama, BART, Phi
    modules = {"q": "q_proj", "k": "k_proj", "v": "v_proj", "o": out}
    params = _rename(layer, path, _module_names(modules))
    for c in "qk":  # Qwen3, Gemma 3, OLMo 2: RMSNorm weights of q and k
        if f"{c}_norm.weight" in layer:
            params[f"n_{c}"] = _float_array(path, f"{c}_norm.weight", layer[f"{c}_norm.weight"])
    return params


def _bert(layer: Arrays, path: Path) -> dict[str, np.ndarray | None]:
    return _rename(
        layer,
        path,
        _module_names(
            {
                "q": "attention.self.query",
                "k": "attention.self.key",
                "v": "attention.self.value",
                "o": "attention.output.dense",
            }
        ),
    )


def _module_names(modules: dict[str, str]) -> dict[str, str]:
    """w_c -> <module>.weight and b_c -> <module>.bias for each projection c."""
    return {
        f"{kind}_{c}": f"{m}.{'weight' if kind == 'w' else 'bias'}"
        for c, m in modules.items()
        for kind in "wb"
    }


def _rename(layer: Arrays, path: Path, names: dict[str, str]) -> dict[str, np.ndarray | None]:
    """Our name -> the file's array; weights (names starting with w) are required, biases not."""
    out: dict[str, np.ndarray | None] = {}
    for ours, theirs in names.items():
        if theirs in layer:
            out[ours] = _float_array(path, theirs, layer[theirs])
        elif ours.startswith("w"):
            raise InputFileError(
                f"{path}: {theirs} is missing; the layer needs all four projection weights"
            )
        else:
            out[ours] = None
    return out


def _check_shapes(path: Path, prefix: str, params: dict[str, np.ndarray | None]) -> None:
    """w_q (h·d, H), w_k and w_v (g·d, M), w_o (H, h·d), each bias the out width of its weight."""
    w_q, w_k = params["w_q"], params["w_k"]
    assert w_q is not None
    assert w_k is not None
    for name in ("w_q", "w_k", "w_v", "w_o"):
        weight = params[name]
        if weight is not None and weight.ndim != 2:
            raise InputFileError(
                f"{path}: {prefix}{name} is {weight.shape}, not a matrix (out_features, "
                "in_features)"
            )
    for name, value in params.items():
        if value is not None and 0 in value.shape:
            raise InputFileError(
                f"{path}: {prefix}{name} has the zero-size shape {tuple(value.shape)}; "
                "every tensor of a layer needs at least one element (save it again)"
            )
    (q_width, hidden), kv_shape = w_q.shape, tuple(w_k.shape)
    expected = {
        "w_k": kv_shape,
        "w_v": kv_shape,
        "w_o": (hidden, q_width),
        "b_q": (q_width,),
        "b_k": (kv_shape[0],),
        "b_v": (kv_shape[0],),
        "b_o": (hidden,),
    }
    for name, shape in expected.items():
        value = params[name]
        if value is not None and tuple(value.shape) != shape:
            raise InputFileError(
                f"{path}: {prefix}{name} is {tuple(value.shape)}, expected {shape} "
                f"from w_q {tuple(w_q.shape)} and w_k {kv_shape}"
            )


def _hints(path: Path, meta: Mapping[str, str]) -> dict[str, Any]:
    """Sizes the file states: our --save config entry, or safetensors metadata; each checked
    for its type and range, so a bad entry is one line naming the field."""
    from attntrace.config.attention_config import DTYPE_BYTES, MAX_SIZE
    from attntrace.files.guard import json_float, json_int, json_str, parse_json
    from attntrace.text import plain

    hints: dict[str, Any] = {}
    source = f"{plain(path)}: its config entry"
    if "config" in meta:
        saved = parse_json(meta["config"], source)
        if not isinstance(saved, dict):
            raise InputFileError(
                f"{source} is not a JSON object; save it again with attntrace run --save"
            )
        if "heads" in saved:
            hints["heads"] = json_int(saved, "heads", source, lo=1, hi=MAX_SIZE)
        if "dtype" in saved:
            hints["dtype"] = json_str(saved, "dtype", source, max_len=20)
            if hints["dtype"] not in DTYPE_BYTES:
                raise InputFileError(
                    f"{source}: field 'dtype' must be one of {', '.join(DTYPE_BYTES)}"
                )
        if "scale" in saved:
            hints["scale"] = json_float(saved, "scale", source, lo=1e-300)
    for key in ("num_heads", "num_attention_heads", "n_head"):
        value = meta.get(key, "")
        if value.isdigit() and value.isascii():
            hints["heads"] = json_int(
                {key: int(value[:12])}, key, f"{plain(path)}: its metadata", lo=1, hi=MAX_SIZE
            )
    return hints


SCHEMES: tuple[Scheme, ...] = (
    Scheme("attntrace", "w_q", _ours),
    Scheme("nn.MultiheadAttention", "in_proj_weight", _mha),
    Scheme("q_proj/k_proj/v_proj/o_proj", "q_proj.weight", _qkvo),
    Scheme("BERT", "attention.self.query.weight", _bert),
)


def state_dict_weights(module: Any) -> LoadedWeights | None:
    """The module's attention weights by a known naming scheme, or None when none fits.

    ``diff`` loads a module's weights this way (:mod:`attntrace.diffing.layer`), and ``trace``
    reads the width of its seeded x from them (:mod:`attntrace.capturing.runner`).

    >>> import torch
    >>> mha = torch.nn.MultiheadAttention(8, 2)
    >>> state_dict_weights(mha).params["w_q"].shape
    (8, 8)
    >>> state_dict_weights(torch.nn.Linear(4, 4)) is None
    True
    """
    state = {k: v for k, v in module.state_dict().items() if v.is_floating_point()}
    arrays = LazyArrays(state, lambda key: torch_to_numpy(state[key]))
    try:
        return layer_weights(arrays, Path(f"{type(module).__name__}.state_dict()"))
    except InputFileError as exc:
        if "no attention weights in a known naming scheme" in str(exc):
            return None
        raise


def torch_to_numpy(t: Any) -> np.ndarray:
    """A numpy copy of the torch tensor ``t`` (bfloat16, which numpy lacks, as float32)."""
    import numpy as np

    t = t.to_local() if hasattr(t, "to_local") else t  # a DTensor: this rank's shard
    t = t.detach().cpu()
    return np.array((t.float() if str(t.dtype) == "torch.bfloat16" else t).numpy())
