"""Combine the size options with what the files say: a file fills in what the options leave
out, and a value given both ways must agree."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from attntrace.config.attention_config import AttentionConfig, _nearby_divisors
from attntrace.errors import ConfigError
from attntrace.files.schemes import LoadedWeights

if TYPE_CHECKING:
    import numpy as np


def resolve_run(
    options: Mapping[str, Any],
    explicit: set[str],
    weights: LoadedWeights | None = None,
    x: np.ndarray | None = None,
    *,
    known: Mapping[str, str] | None = None,
    x_kv: np.ndarray | None = None,
) -> tuple[AttentionConfig, dict[str, np.ndarray | None]]:
    """The config and the user tensors of a run. ``options`` holds every AttentionConfig field
    (defaults included); ``explicit`` names the ones the user typed; ``known`` the ones a
    preset or config.json set, each with its source: they count as given, and a file that
    disagrees with them is an error naming both.

    >>> import numpy as np
    >>> opts = {"batch": None, "seq": 3, "hidden": 768, "heads": 2, "dtype": "float32",
    ...         "seed": 0, "scale": None}
    >>> cfg, tensors = resolve_run(opts, {"heads"}, x=np.zeros((2, 5, 8)))
    >>> cfg.batch, cfg.seq, cfg.hidden, cfg.heads, list(tensors)
    (2, 5, 8, 2, ['x'])
    >>> cfg, _ = resolve_run(opts, {"heads"}, x=np.zeros((2, 5, 8)), x_kv=np.zeros((2, 7, 6)))
    >>> cfg.kv_seq, cfg.kv_hidden
    (7, 6)
    """
    stated = _stated(weights, x, x_kv)
    values, known = dict(options), known or {}
    for name, (value, where) in stated.items():
        flag = "--" + name.replace("_", "-")
        if name in explicit and options[name] != value:
            raise ConfigError(
                f"{flag} {_show(name, options[name])} conflicts with {where}, "
                f"which gives {_show(name, value)}; drop {flag}"
            )
        if name in known and name not in explicit and options[name] != value:
            shown = _show(name, options[name])
            raise ConfigError(
                f"{known[name]} gives {name} {shown}, but {where} "
                f"gives {_show(name, value)}; use the config of these weights"
            )
        values[name] = value
    if weights is not None and "heads" not in {*stated, *explicit, *known}:
        hidden = values["hidden"]
        raise ConfigError(
            f"the weights do not say how many heads there are; pass --heads (for H={hidden}: "
            f"{_nearby_divisors(hidden, 8)})"
        )
    if weights is not None:
        values.update(_head_layout(weights, values["heads"], options, explicit, known))
    tensors: dict[str, np.ndarray | None] = dict(weights.params) if weights is not None else {}
    if weights is not None and all(
        tensors[f"b_{c}"] is None for c in "qkvo"
    ):  # Llama & co: no biases at all
        values["bias"] = False
        tensors = {name: t for name, t in tensors.items() if not name.startswith("b_")}
    if x is not None:
        tensors["x"] = x
    if x_kv is not None:
        tensors["x_kv"] = x_kv
    return AttentionConfig(**values), tensors


def _head_layout(
    weights: LoadedWeights,
    heads: int,
    options: Mapping[str, Any],
    explicit: set[str],
    known: Mapping[str, str],
) -> dict[str, Any]:
    """head_dim, kv_heads and kv_hidden as the weight shapes give them for ``heads`` heads:
    d = (h·d) / h, g = (g·d) / d, M = in_features of w_k. None where they are the plain values.

    A typed option, or a preset's or config.json's value, that disagrees is an error.
    """
    name = weights.path.name
    if weights.q_width % heads:
        raise ConfigError(
            f"the weights ({name}) have q width {weights.q_width}, which {heads} heads cannot "
            "split; "
            f"pass --heads dividing {weights.q_width}"
        )
    d = weights.q_width // heads
    if weights.kv_width % d:
        raise ConfigError(
            f"the weights ({name}) have k/v width {weights.kv_width}, not a multiple of head_dim "
            f"{d}; check --heads"
        )
    layout = {
        "head_dim_override": d if weights.q_width != weights.hidden else None,
        "kv_heads": weights.kv_width // d if weights.kv_width != weights.q_width else None,
        "kv_hidden": weights.kv_in if weights.kv_in != weights.hidden else None,
    }
    for field, value in layout.items():
        option = "head_dim" if field == "head_dim_override" else field
        if option in explicit and options[field] != value:
            raise ConfigError(
                f"--{option.replace('_', '-')} {options[field]} conflicts with the weights "
                f"({name}), "
                f"which give {value if value is not None else 'none'}; drop "
                f"--{option.replace('_', '-')}"
            )
        if field in known and option not in explicit and options[field] != value:
            shown = _show(field, options[field])
            raise ConfigError(
                f"{known[field]} gives {field} {shown}, but the "
                f"weights ({name}) give {_show(field, value)} for {heads} heads; "
                "use the config of these weights"
            )
    return layout


def _x_sizes(x: np.ndarray) -> dict[str, Any]:
    if x.ndim == 2:
        return {"batch": None, "seq": int(x.shape[0]), "hidden": int(x.shape[1])}
    if x.ndim == 3:
        return {"batch": int(x.shape[0]), "seq": int(x.shape[1]), "hidden": int(x.shape[2])}
    raise ConfigError(f"the input x is {tuple(x.shape)}; it must be (S, H) or (B, S, H)")


def _stated(
    weights: LoadedWeights | None, x: np.ndarray | None, x_kv: np.ndarray | None
) -> dict[str, tuple[Any, str]]:
    """field -> (value, which file says so), for every size the files give."""
    stated: dict[str, tuple[Any, str]] = {}
    if weights is not None:
        _state(stated, "hidden", weights.hidden, f"the weights ({weights.path.name})")
        for name, value in weights.hints.items():
            _state(stated, name, value, f"the weights file ({weights.path.name})")
    if x is not None:
        for name, value in _x_sizes(x).items():
            _state(stated, name, value, f"the input (x {tuple(x.shape)})")
    if x_kv is not None:
        for name, value in _x_kv_sizes(x_kv).items():
            _state(stated, name, value, f"--input-kv (x_kv {tuple(x_kv.shape)})")
    return stated


def _x_kv_sizes(x_kv: np.ndarray) -> dict[str, Any]:
    """kv_seq and kv_hidden (and batch) of a cross-attention source (N, M) or (B, N, M)."""
    if x_kv.ndim not in (2, 3):
        raise ConfigError(f"--input-kv is {tuple(x_kv.shape)}; it must be (N, M) or (B, N, M)")
    sizes = {"kv_seq": int(x_kv.shape[-2]), "kv_hidden": int(x_kv.shape[-1])}
    return {**sizes, "batch": int(x_kv.shape[0])} if x_kv.ndim == 3 else sizes


def _state(stated: dict[str, tuple[Any, str]], name: str, value: Any, where: str) -> None:
    if name in stated and stated[name][0] != value:
        raise ConfigError(
            f"{where} gives {name} {_show(name, value)}, but {stated[name][1]} gives "
            f"{_show(name, stated[name][0])}; make the files agree"
        )
    stated.setdefault(name, (value, where))


def _show(name: str, value: Any) -> str:
    if value is None:
        return "sqrt" if name == "scale" else "(none)"
    return str(value)
