"""The user's attention as diff runs it: a torch ``nn.Module`` (its weights read from its state
dict through the naming schemes of :mod:`attntrace.files.schemes`, else from its ``nn.Linear``
children in the order its forward calls them: q, k, v, o), or a function
``fn(x, params)`` that takes the reference's weights.

The function convention: ``params`` maps our names to arrays of the input's kind (numpy arrays
for numpy code, torch tensors for torch code) in the torch layout, a weight is
(out_features, in_features): ``q = x @ params["w_q"].T + params["b_q"]``. The names are
``w_q, b_q, w_k, b_k, w_v, b_v, w_o, b_o`` (no ``b_*`` with ``bias=False``); ``fn`` returns
the attention output (B, S, H) or (S, H), or a tuple whose first item it is.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from attntrace.diffing.region import Region, find_region, region_module
from attntrace.errors import ConfigError

if TYPE_CHECKING:
    import numpy as np

    from attntrace.files.schemes import LoadedWeights

#: Module attributes that state a size or option, by the AttentionConfig field they give.
HINTS: dict[str, tuple[str, ...]] = {
    "heads": ("num_heads", "n_heads", "n_head", "num_attention_heads", "heads"),
    "kv_heads": ("num_key_value_heads", "num_kv_heads", "n_kv_heads", "kv_heads", "n_kv_head"),
    "causal": ("causal", "is_causal"),
    "rope_base": ("rope_theta", "rope_base"),
}


@dataclass(frozen=True)
class Layer:
    """The user's attention, ready to run on an input."""

    name: str  # "Attention (nn.Module)" or "attend()"
    flavour: str  # "torch" or "numpy": the kind of array it takes
    weights: LoadedWeights | None  # a module's own weights; None for a function (it takes ours)
    hints: dict[str, Any] = field(default_factory=dict)  # sizes the module states
    call: Callable[[Any, Mapping[str, Any]], Any] = field(default=lambda x, p: None, repr=False)
    module: Any = field(default=None, repr=False)  # the nn.Module, for a copy in another dtype
    notes: tuple[str, ...] = ()  # what diff did to run it ("run in eval mode (dropout off)")
    into: tuple[str, ...] = ()  # packages whose ops are recorded (a library class's own)
    #: the norm the module applies to x first (vit-pytorch): the reference starts after it
    prenorm: Callable[[Any], Any] | None = field(default=None, repr=False)
    #: a known bug's key -> why it is this module's layout on purpose (x-transformers tiles its
    #: kv heads): when it explains the whole run, the run is compared with it
    own_layouts: dict[str, str] = field(default_factory=dict)
    #: --past: the decode step (x, a list for the cache given) -> (what it returned, its (k, v)
    #: cache or None), and the forward's code (None for a transformers class)
    decode_step: tuple[Callable[[Any, Any], tuple[Any, Any]], Any] | None = field(
        default=None, repr=False
    )


def as_layer(
    target: Any, *, seq: int = 3, batch: int | None = None, heads: int | None = None
) -> Layer:
    """The :class:`Layer` of an ``nn.Module`` instance or a function ``fn(x, params)``.

    ``seq`` and ``batch`` size the probe input when the module's projections are found by
    calling it (no known naming scheme in its state dict); ``heads`` (--heads, when typed)
    splits a layout that fuses q, k and v per head when the module states no head count.

    >>> import numpy as np
    >>> def attend(x, params):
    ...     return x @ params["w_o"].T
    >>> layer = as_layer(attend)
    >>> layer.name, layer.flavour, layer.weights
    ('attend()', 'numpy', None)
    """
    if _is_module(target):
        return _module_layer(target, seq, batch, heads)
    if callable(target) and _takes_x_alone(target):
        from attntrace.diffing.region import wrapped_forward

        module = wrapped_forward(target)  # def run(x): return attn(x, ...): the modules it uses
        if module is not None:
            return _module_layer(module, seq, batch, heads)
    if callable(target):
        return _function_layer(target)
    raise ConfigError(
        f"cannot diff a {type(target).__name__}; give an nn.Module or a function fn(x, params)"
    )


def _weights_called(module: Any, info: Any, seq: int, batch: int | None) -> Any:
    """:func:`~attntrace.diffing.names.module_weights`, and of a module holding several
    attention layers (a ``TransformerDecoderLayer``'s two), the one its forward calls."""
    from attntrace.diffing.names import module_weights
    from attntrace.diffing.region import called_layer
    from attntrace.errors import InputFileError

    try:
        return module_weights(module, info)
    except InputFileError as exc:
        called = called_layer(module, seq, batch) if "attention layers;" in str(exc) else None
        if called is None:
            raise
        return module_weights(module, info, prefix=called)


def _is_module(target: Any) -> bool:
    import sys

    torch = sys.modules.get("torch")
    return torch is not None and isinstance(target, torch.nn.Module)


def _takes_x_alone(fn: Callable[..., Any]) -> bool:
    """Whether ``fn`` needs exactly one positional argument (x)."""
    from attntrace.capturing.runner import _required

    return _required(fn) == 1


def _function_layer(fn: Callable[..., Any]) -> Layer:
    name = f"{getattr(fn, '__name__', type(fn).__name__)}()"
    try:
        params = [
            p
            for p in inspect.signature(fn).parameters.values()
            if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) and p.default is p.empty
        ]
    except (TypeError, ValueError):
        params = []
    if len(params) != 2:
        raise ConfigError(
            f"{name} takes {len(params)} argument(s); diff calls a function as fn(x, params) "
            "with params the weights by our names (w_q, b_q, ...), so both sides share them"
        )
    module = inspect.getmodule(fn)
    flavour = "torch" if module is not None and "torch" in vars(module) else "numpy"
    return Layer(name=name, flavour=flavour, weights=None, hints={}, call=fn)


def _module_layer(module: Any, seq: int, batch: int | None, heads: int | None = None) -> Layer:
    from attntrace.files.schemes import LayoutInfo

    name = f"{type(module).__name__} (nn.Module)"
    if getattr(module, "_qkv_same_embed_dim", True) is False:  # nn.MultiheadAttention(kdim=…)
        raise ConfigError(
            f"{type(module).__name__} takes keys and values of another width (kdim/vdim): "
            "cross-attention; diff runs self-attention code on x alone, so drop kdim and vdim"
        )
    notes = eval_mode(module)
    forward = module_forward(module)
    library = getattr(type(module), "attntrace_caller", False)
    attn = module.attn if library else held_attention(module)  # a transformers class's
    hints, section = module_hints(module), _section(module)
    if attn is not None:  # its config and the module itself say the rest
        _check_expressible(attn)
        section = _section(attn) or section  # Bloom's layer keeps no config: its caller's
        if library:
            hints = library_hints(attn, section)
        elif section:  # a held class without a config (DeBERTa's) states only its attributes
            hints = {**hints, **library_hints(attn, section)}
        else:  # Bloom's layer keeps no config: its forward's alibi says it
            from attntrace.diffing.library_read import alibi_hints

            hints = {**hints, **alibi_hints(attn)}
    info = LayoutInfo(hints.get("heads") or heads, hints.get("kv_heads"), section)
    weights = _weights_called(module.attn if library else module, info, seq, batch)
    region = None
    if weights is not None and weights.prefix and not library:  # the layer is a submodule's
        sub = module.get_submodule(weights.prefix.rstrip("."))
        hints = {**module_hints(sub), **hints}
        region = find_region(module, weights, seq, batch)
    if weights is not None and weights.prefix and library:  # BertAttention: its .self
        region = _library_region(module, weights, seq, batch)
    if weights is not None and attn is not None:
        from attntrace.diffing.library_read import norm_offsets, qk_norm_hints

        weights = norm_offsets(attn, weights)
        hints = qk_norm_hints(attn, weights, hints)
    if weights is None:
        weights = _called_linears(module, forward, seq, batch)
        notes += (CALL_ORDER_NOTE,)
    into = ("transformers",) if library else _package(module)
    if region is not None:
        weights = _with_output(module, region, weights)
        notes += (f"compared inside {name.split(' ', maxsplit=1)[0]}: {region.words}",)
        module = region_module(module, region)
        forward = module_forward(module)
    return Layer(
        name=name,
        flavour="torch",
        weights=weights,
        hints=hints,
        call=lambda x, p: forward(x),
        module=module,
        notes=notes,
        into=into,
        own_layouts=_own_layouts(weights),
        prenorm=None if region is not None else _prenorm(module),
    )


#: forward's first argument after ``self`` (x).
_FORWARD_X = re.compile(r"def forward\(\s*self\s*,\s*(\w+)")


def _prenorm(module: Any) -> Callable[[Any], Any] | None:
    """The norm (LayerNorm, RMSNorm) that forward applies to x itself before any of the
    module's projections (``x = self.norm(x)``, ``h = self.ln_1(x)``, ``self.qkv(self.norm(x))``),
    or None; a norm called after a projection is a post-norm, not the attention's input.

    >>> import torch
    >>> class Attention(torch.nn.Module):
    ...     def __init__(self):
    ...         super().__init__()
    ...         self.norm, self.qkv = torch.nn.LayerNorm(4), torch.nn.Linear(4, 12)
    ...     def forward(self, x):
    ...         B, S, H = x.shape
    ...         h = self.norm(x)
    ...         return self.qkv(h)
    >>> _prenorm(Attention()) is not None, _prenorm(torch.nn.Linear(4, 4))
    (True, None)
    """
    import inspect
    import textwrap

    try:
        source = textwrap.dedent(inspect.getsource(type(module).forward))
    except (TypeError, OSError):
        return None
    head = _FORWARD_X.search(source)
    if head is None:
        return None
    calls = list(re.finditer(r"self\.(\w+)\(", source))
    for call in calls:
        child: Any = getattr(module, call.group(1), None)
        if "norm" in type(child).__name__.lower():
            called_on_x = source[call.end() :].lstrip().startswith(f"{head.group(1)})")
            return child if called_on_x else None
        if getattr(getattr(child, "weight", None), "ndim", 0) == 2:
            return None  # a projection came first: no pre-norm
    return None


#: The layouts a family chooses on purpose that the reference writes otherwise.
TILED_KV = (
    "x-transformers tiles its kv heads (query head i reads kv head i mod g; "
    "repeat 'b h ... -> b (r h) ...'), where the reference repeats each (i // (h/g))"
)


def _package(module: Any) -> tuple[str, ...]:
    """The installed package that defines the module's class (x_transformers), whose ops diff
    follows as trace --into does, else those of the library modules it holds
    (:func:`~attntrace.capturing.held.held_into`); () for the user's own layers and torch's."""
    import inspect

    from attntrace.capturing.held import held_into
    from attntrace.capturing.source import is_user_file
    from attntrace.capturing.torch_inside import MHA, follows

    if follows(module):  # torch's nn.MultiheadAttention: the ops of its functional form
        return (MHA,)
    top = type(module).__module__.split(".")[0]
    try:
        where = inspect.getfile(type(module))
    except (TypeError, OSError):
        return held_into(module)
    if top in ("torch", "numpy", "attntrace", "builtins", "__main__") or is_user_file(where):
        return held_into(module)
    return (top,)


def is_library_module(module: Any) -> bool:
    """Whether ``module`` is an instance of a transformers attention class (with a config)."""
    from attntrace.capturing.library import is_library_class

    return is_library_class(type(module)) and hasattr(module, "config")


def _section(module: Any) -> dict[str, Any]:
    to_dict = getattr(getattr(module, "config", None), "to_dict", None)
    return to_dict() if callable(to_dict) else {}


def held_attention(module: Any) -> Any | None:
    """The one transformers attention module inside ``module`` (the innermost of nested
    ones); None when there is none or more than one."""
    from attntrace.capturing.library import is_library_class

    found = [m for m in list(module.modules())[1:] if is_library_class(type(m)) and _attention(m)]
    ids = {id(m) for m in found}
    inner = [m for m in found if not any(id(c) in ids for c in list(m.modules())[1:])]
    return inner[0] if len(inner) == 1 else None  # BertAttention: its BertSelfAttention


def _library_region(
    module: Any, weights: LoadedWeights, seq: int, batch: int | None
) -> Region | None:
    """The region of the attention inside a transformers class built by attntrace (its
    ``attn``): BertAttention's self-attention up to its output dense, before the residual and
    LayerNorm of BertSelfOutput."""
    from dataclasses import replace

    found = find_region(module, replace(weights, prefix=f"attn.{weights.prefix}"), seq, batch)
    if found is None:
        return None
    shown = found.words.replace(" at .attn.", " at .").replace("output attn.", "output ")
    return replace(found, words=shown)


def _check_expressible(attn: Any) -> None:
    """Stop with "cannot tell" when the reference cannot express ``attn`` (ALiBi, DeBERTa's
    disentangled scores …: :func:`attntrace.diffing.library_read.unexpressible`)."""
    from attntrace.diffing.library_read import unexpressible
    from attntrace.diffing.region import cannot_tell

    why = unexpressible(attn)
    if why is not None:
        cannot_tell(why)


def _attention(module: Any) -> bool:
    return "attention" in type(module).__name__.lower() or "attn" in type(module).__name__.lower()


def _with_output(module: Any, region: Region, weights: LoadedWeights) -> LoadedWeights:
    """``weights`` with w_o and b_o of the region's output nn.Linear when it ends there."""
    from dataclasses import replace

    from attntrace.files.schemes import torch_to_numpy

    if region.end == region.core:
        return weights
    linear = module.get_submodule(region.end)
    bias = None if linear.bias is None else torch_to_numpy(linear.bias)
    params = {**weights.params, "w_o": torch_to_numpy(linear.weight), "b_o": bias}
    own = getattr(type(module), "attntrace_caller", False)  # attntrace's .attn: not shown
    shown = region.end.removeprefix("attn.") if own else region.end
    return replace(weights, params=params, scheme=f"{weights.scheme} + {shown}")


def _own_layouts(weights: LoadedWeights) -> dict[str, str]:
    if weights.scheme.endswith("(x-transformers)"):
        return {"gqa-tile-k-v": TILED_KV}
    return {}


#: Fields of a transformers config that the weights give (and check) themselves.
_FROM_WEIGHTS = ("hidden", "head_dim_override", "bias", "kv_heads")


def library_hints(module: Any, section: dict[str, Any]) -> dict[str, Any]:
    """The AttentionConfig fields the config of a transformers class states (as ``--model``
    reads a config.json), for layer ``layer_idx``; kv_heads kept to check the weights.
    ``module``: the attention module, or attntrace's caller of it (its ``attn``)."""
    from attntrace.diffing.library_read import own_sizes, read_facts
    from attntrace.models.hf_config import attention_fields

    attn = getattr(module, "attn", module)
    layer = getattr(attn, "layer_idx", None)
    try:
        fields = attention_fields(
            own_sizes(attn, section),
            f"{type(module).__name__}'s config",
            layer if isinstance(layer, int) else 0,
        )
    except ConfigError as exc:  # Pixtral's 2-D "axial" RoPE: the class's, not the user's
        if "is not modelled" not in str(exc):
            raise
        from attntrace.diffing.region import cannot_tell

        cannot_tell(f"{str(exc).split('; attntrace models')[0]}, which the reference lacks")
    fields = read_facts(attn, fields)  # is_causal, scaling, rotate_half: the module's own
    if fields.get("relative_bias") and "relative_attention_bias" not in dict(attn.named_modules()):
        fields["relative_bias"] = None  # a T5 layer without the table adds no bias
    hints = {k: v for k, v in fields.items() if k not in _FROM_WEIGHTS}
    if fields.get("kv_heads"):
        hints["kv_heads"] = fields["kv_heads"]
    return hints


#: What the report says when no weight names were known and the projections were taken in the
#: order forward calls them.
CALL_ORDER_NOTE = (
    "weights taken in the order forward calls its nn.Linear layers (q, k, v, o): no known "
    "names in its state dict"
)


def eval_mode(module: Any) -> tuple[str, ...]:
    """Put ``module`` in eval mode (dropout off), as diff runs it; the note saying so when some
    submodule was training.

    >>> import torch
    >>> eval_mode(torch.nn.Dropout(0.1)), eval_mode(torch.nn.Dropout(0.1).eval())
    (('run in eval mode (dropout off); it was in train mode',), ())
    """
    if not any(m.training for m in module.modules()):
        return ()
    module.eval()
    return ("run in eval mode (dropout off); it was in train mode",)


def module_forward(module: Any) -> Callable[[Any], Any]:
    """How diff calls ``module`` on x: as trace calls it (``module(x, x, x)`` for one that takes
    query, key and value: ``nn.MultiheadAttention``), the first item of a returned tuple."""
    from attntrace.capturing.runner import attention_call

    return attention_call(module, dict)


def module_hints(module: Any) -> dict[str, Any]:
    """The sizes a module states in its attributes (``num_heads`` …), by config field.

    >>> class Attention:
    ...     num_heads, num_key_value_heads, is_causal = 8, 2, True
    >>> module_hints(Attention())
    {'heads': 8, 'kv_heads': 2, 'causal': True}
    """
    found: dict[str, Any] = {}
    for field_name, names in HINTS.items():
        values = (_hint(field_name, getattr(module, attr, None)) for attr in names)
        value = next((v for v in values if v is not None), None)
        if value is not None:
            found[field_name] = value
    if "rope_base" in found:
        found["rope"] = True  # a module that holds a rotary theta rotates q and k
    return found


def _hint(field_name: str, value: Any) -> Any:
    """``value`` when it can be the field's value (a bool for causal, a number else), or None."""
    if field_name == "causal":
        return value if isinstance(value, bool) else None
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    if field_name == "rope_base":
        return float(value)
    return value if isinstance(value, int) else None


def _called_linears(
    module: Any, forward: Callable[[Any], Any], seq: int, batch: int | None
) -> LoadedWeights:
    """w_q, w_k, w_v, w_o from the nn.Linear children in the order a probe forward calls them
    (one packed (3·H, H) projection counts as q, k, v)."""
    import torch

    from attntrace.files.schemes import LoadedWeights

    order: list[Any] = []
    hooks = [
        m.register_forward_hook(lambda m, i, o: order.append(m))
        for m in module.modules()
        if isinstance(m, torch.nn.Linear)
    ]
    if not hooks:
        raise ConfigError(
            f"{type(module).__name__} has no nn.Linear layers and no known weight names; "
            "name its projections q_proj, k_proj, v_proj, o_proj"
        )
    first = next(m for m in module.modules() if isinstance(m, torch.nn.Linear))
    try:
        shape = (*((batch,) if batch else ()), seq, first.in_features)
        _probe(forward, shape, first.weight.dtype)
    finally:
        for hook in hooks:
            hook.remove()
    called = list(dict.fromkeys(order))
    return LoadedWeights(
        Path(f"{type(module).__name__} (nn.Linear in call order)"),
        "nn.Linear call order",
        "",
        _linear_params(type(module).__name__, called),
    )


#: The sequence length of the probe that finds the projections: short, so that the probe is
#: cheap whatever --seq is (the memory check of a diff comes after it).
PROBE_SEQ = 4


def _probe(forward: Callable[[Any], Any], shape: tuple[int, ...], dtype: Any) -> None:
    """Call ``forward`` on zeros of ``shape`` with the sequence cut to PROBE_SEQ, and on the
    whole ``shape`` only when the short one raises (code that needs that exact length)."""
    import torch

    short = (*shape[:-2], min(shape[-2], PROBE_SEQ), shape[-1])
    for size in dict.fromkeys((short, shape)):
        try:
            with torch.no_grad():
                forward(torch.zeros(size, dtype=dtype))
            return
        except (Exception, SystemExit) as exc:  # sys.exit() in the user's code is theirs too
            error = exc
    from attntrace.capturing.runner import user_message
    from attntrace.diffing.user_side import UserCodeError

    raise UserCodeError(
        f"the code under test raised {user_message(error)} (on x of shape {shape}); "
        "check --seq/--batch, or run attntrace trace on it to see the shapes up to the failure"
    ) from None


def _linear_params(name: str, called: list[Any]) -> dict[str, np.ndarray | None]:
    """w_q … b_o from the nn.Linear layers in call order: q, k, v, o; a packed qkv (3·H rows)
    and o; or q, a packed kv (k's rows, then v's: ``to_kv(x).chunk(2, dim=-1)``) and o."""
    from attntrace.files.schemes import torch_to_numpy

    w = [torch_to_numpy(m.weight) for m in called]
    b = [None if m.bias is None else torch_to_numpy(m.bias) for m in called]
    if len(called) == 2 and w[0].shape[0] == 3 * w[1].shape[0]:  # one packed in-projection
        return {**_unpacked(w[0], b[0], "qkv"), "w_o": w[1], "b_o": b[1]}
    if len(called) == 3 and w[1].shape[0] % 2 == 0:  # q, then k and v packed
        return {"w_q": w[0], "b_q": b[0], **_unpacked(w[1], b[1], "kv"), "w_o": w[2], "b_o": b[2]}
    if len(called) != 4:
        raise ConfigError(
            f"{name}'s forward calls {len(called)} nn.Linear layer(s); diff needs q, k, v, o "
            "(4, a packed qkv and an output, or q, a packed kv and an output): name them "
            "q_proj, k_proj, v_proj, o_proj"
        )
    return {
        f"{kind}_{c}": (w if kind == "w" else b)[i] for i, c in enumerate("qkvo") for kind in "wb"
    }


def _unpacked(
    weight: np.ndarray, bias: np.ndarray | None, parts: str
) -> dict[str, np.ndarray | None]:
    """A packed projection's rows cut into ``parts`` (``"qkv"`` or ``"kv"``), in that order.

    >>> import numpy as np
    >>> {k: v.shape for k, v in _unpacked(np.zeros((6, 4)), None, "kv").items() if v is not None}
    {'w_k': (3, 4), 'w_v': (3, 4)}
    """
    import numpy as np

    weights = np.split(weight, len(parts))  # (rows / parts, H) each
    biases = np.split(bias, len(parts)) if bias is not None else [None] * len(parts)
    out: dict[str, np.ndarray | None] = {}
    for part, w_part, b_part in zip(parts, weights, biases, strict=True):
        out[f"w_{part}"], out[f"b_{part}"] = w_part, b_part
    return out
