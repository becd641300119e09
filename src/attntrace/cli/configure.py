"""Options -> AttentionConfig, shared by the tracing commands (run, report, check, verify, diff,
sweep): the one place where the option groups they take are declared, and where the size and
variant options, --preset / --hf-config and the files that set sizes meet."""

from __future__ import annotations

import dataclasses
import functools
import inspect
from collections.abc import Callable
from enum import Enum
from pathlib import Path
from typing import Any, TypeVar

import typer

from attntrace.cli import options as opt
from attntrace.config.attention_config import AttentionConfig, parse_scale
from attntrace.config.parallel_layout import ParallelLayout
from attntrace.errors import ConfigError
from attntrace.units import MAX_NUMBER_CHARS, bounded, quoted

R = TypeVar("R")

#: The options every tracing command takes alike: the attention variants and the real-model
#: presets (each defaulting to None: "not given"), the ``model`` group of
#: :data:`OPTION_GROUPS`.
MODEL_OPTIONS: dict[str, Any] = {
    "kv_seq": opt.KvSeq,
    "kv_hidden": opt.KvHidden,
    "kv_heads": opt.KvHeads,
    "head_dim": opt.HeadDim,
    "bias": opt.Bias,
    "causal": opt.Causal,
    "key_lengths": opt.KeyLengths,
    "rope": opt.Rope,
    "rope_base": opt.RopeBase,
    "rope_style": opt.RopeStyle,
    "preset": opt.Preset,
    "hf_config": opt.HfConfig,
    "window": opt.Window,
    "model_dir": opt.ModelDir,
    "layer": opt.Layer,
    "rope_scaling": opt.RopeScaling,
    "rotary_dims": opt.RotaryDims,
    "softcap": opt.Softcap,
    "qk_norm": opt.QkNorm,
    "relative_bias": opt.RelativeBias,
    "alibi": opt.Alibi,
    "past": opt.Past,
}

#: Options that several commands take alike, by group: each option's annotation (its Typer
#: declaration) and default. A command names a group as a keyword-only parameter
#: (``sizes: dict[str, Any]``); :func:`with_option_groups` declares the group's options in its
#: place and hands the command their values as that one dict. One declaration serves run,
#: report, check, verify, diff and sweep, so their options and defaults cannot drift apart.
OPTION_GROUPS: dict[str, dict[str, tuple[Any, Any]]] = {
    "sizes": {
        "batch": (opt.Batch, None),
        "seq": (opt.Seq, 3),
        "hidden": (opt.Hidden, None),
        "heads": (opt.Heads, None),
    },
    "numbers": {
        "dtype": (opt.DType, opt.DTypeName.float32),
        "seed": (opt.Seed, 0),
        "scale": (opt.Scale, "sqrt"),
    },
    "computation": {
        "algorithm": (opt.Algorithm, opt.AlgorithmName.eager),
        "block_size": (opt.BlockSize, None),
    },
    "files": {
        "weights": (opt.Weights, None),
        "layer_prefix": (opt.LayerPrefix, None),
        "input_file": (opt.Input, None),
        "input_kv": (opt.InputKv, None),
        "cache_file": (opt.CacheFile, None),
    },
    "model": {name: (annotation, None) for name, annotation in MODEL_OPTIONS.items()},
    "parallel": {  # across devices (issue 43): one rank's steps, the collectives
        "tp": (opt.Tp, None),
        "sp": (opt.Sp, False),
        "cp": (opt.Cp, None),
        "cp_kind": (opt.CpKind, None),
        "rank": (opt.Rank, 0),
    },
    "serving": {  # the roofline and KV cache figures (engine/serving.py)
        "peak_flops": (opt.PeakFlops, None),
        "bandwidth": (opt.Bandwidth, None),
        "memory": (opt.Memory, None),
        "cache_dtype": (opt.CacheDType, None),
        "page_size": (opt.PageSize, None),
    },
}


def override_options(**annotations: Any) -> Callable[[Callable[..., R]], Callable[..., R]]:
    """Declare some options of a group otherwise for one command (sweep's --past takes a
    list): applied under :func:`with_option_groups`.

    >>> @override_options(past=int)
    ... def sweep(): ...
    >>> sweep.option_overrides  # type: ignore[attr-defined]
    {'past': <class 'int'>}
    """

    def mark(command: Callable[..., R]) -> Callable[..., R]:
        command.option_overrides = annotations  # type: ignore[attr-defined]
        return command

    return mark


def with_option_groups(command: Callable[..., R]) -> Callable[..., R]:
    """Give ``command`` the options of each group of :data:`OPTION_GROUPS` that it names as a
    parameter, in that parameter's place (so ``--help`` lists them where the group stands);
    it receives each group's values as one dict, keyed by option name.

    >>> @with_option_groups
    ... def show(*, sizes: dict[str, Any], count: int = 1) -> dict[str, Any]:
    ...     return sizes
    >>> list(inspect.signature(show).parameters)
    ['batch', 'seq', 'hidden', 'heads', 'count']
    >>> show(batch=None, seq=4, hidden=8, heads=2, count=1)["seq"]
    4
    """
    signature = inspect.signature(command, eval_str=True)
    over: dict[str, Any] = getattr(command, "option_overrides", {})
    groups = [name for name in signature.parameters if name in OPTION_GROUPS]
    parameters: list[inspect.Parameter] = []
    for p in signature.parameters.values():
        if p.name not in OPTION_GROUPS:
            parameters.append(p)
            continue
        if p.kind is not inspect.Parameter.KEYWORD_ONLY:
            raise TypeError(f"{command.__name__}: option group {p.name!r} must be keyword-only")
        parameters += [
            inspect.Parameter(
                name,
                inspect.Parameter.KEYWORD_ONLY,
                default=default,
                annotation=over.get(name, annotation),
            )
            for name, (annotation, default) in OPTION_GROUPS[p.name].items()
        ]

    @functools.wraps(command)
    def wrapper(*args: Any, **kwargs: Any) -> R:
        values = {
            group: {name: kwargs.pop(name) for name in OPTION_GROUPS[group]} for group in groups
        }
        return command(*args, **values, **kwargs)

    wrapper.__signature__ = signature.replace(parameters=parameters)  # type: ignore[attr-defined]
    return wrapper


def option_fields(
    *,
    scale: str | None = None,
    head_dim: int | None = None,
    key_lengths: str | None = None,
    past: str | int | None = None,
    **given: Any,
) -> dict[str, Any]:
    """The AttentionConfig fields of the command-line options as typed (None: not given, so a
    preset's value or the default applies); enum choices become their values.

    >>> option_fields(seq=4, scale="none", head_dim=16, key_lengths="3,2", kv_heads=None)
    ... # doctest: +NORMALIZE_WHITESPACE
    {'seq': 4, 'kv_heads': None, 'scale': 1.0, 'head_dim_override': 16, 'key_lengths': (3, 2),
     'past': None}
    """
    plain = {k: v.value if isinstance(v, Enum) else v for k, v in given.items()}
    return {
        **plain,
        "scale": parse_scale(scale) if scale is not None else None,
        "head_dim_override": head_dim,
        "key_lengths": parse_key_lengths(key_lengths),
        "past": parse_past(past),
    }


def parse_past(text: str | int | None) -> int | None:
    """``--past N``: one whole number >= 0 (a list only for sweep).

    >>> parse_past("4096"), parse_past(None), parse_past(7)
    (4096, None, 7)
    """
    if text is None or isinstance(text, int):
        return text
    bounded(text, "--past", MAX_NUMBER_CHARS)  # outside the try: a ConfigError is a ValueError
    try:
        value = int(text.strip())
    except ValueError:
        several = "," in text
        raise ConfigError(
            "--past takes one number here (sweep takes a list, e.g. --past 1024,4096)"
            if several
            else f"--past must be a whole number (tokens already in the KV cache), got {text!r}"
        ) from None
    if value < 0:
        raise ConfigError(f"--past must be a whole number from 0, got {value}")
    return value


def resolve_options(
    *, preset: str | None = None, hf_config: Path | None = None, **options: Any
) -> AttentionConfig:
    """The config of the options (see :func:`option_fields`) over a --preset or --hf-config.

    >>> resolve_options(preset="llama-3-8b", seq=16, kv_heads=None).kv_heads
    8
    """
    from attntrace.config.presets import resolve_fields

    model_dir, layer = options.pop("model_dir", None), options.pop("layer", None)
    prefix = options.pop("layer_prefix", None)
    if prefix is not None and model_dir is None:
        raise ConfigError("--layer-prefix picks a layer of --model DIR; add --model DIR")
    fields, _ = resolve_fields(
        preset=preset,
        hf_config=hf_config,
        model_dir=model_dir,
        layer=layer,
        layer_prefix=prefix,
        **option_fields(**options),
    )
    config = AttentionConfig(**fields)
    check_rope_base(options.get("rope_base"), config)
    return config


def parse_key_lengths(text: str | None) -> tuple[int, ...] | None:
    """``"3,2"`` -> ``(3, 2)``.

    >>> parse_key_lengths("3, 2")
    (3, 2)
    """
    if text is None:
        return None
    bounded(text, "--key-lengths")
    try:
        return tuple(int(part) for part in text.split(","))
    except ValueError:
        raise ConfigError(
            f"--key-lengths takes whole numbers separated by commas, e.g. 3,2; got {quoted(text)}"
        ) from None


def config_from_files(
    ctx: typer.Context,
    weights: Path | None,
    layer_prefix: str | None,
    input_file: Path | None,
    input_kv: Path | None = None,
    cache_file: Path | None = None,
    prompt_x: Any = None,
    **options: Any,
) -> tuple[AttentionConfig, dict[str, Any]]:
    """The config of the options (as :func:`resolve_options` takes them), with --weights /
    --input filling in the sizes not typed; also the tensors the files give.

    Nothing is validated before the files have spoken: the default --hidden 768 never meets
    a file's 28 heads, and --key-lengths finds the batch of an --input (B, S, H).
    --cache FILE gives k_cache and v_cache, and --past its N when not typed. ``prompt_x``: the
    x (S, H) that --prompt's model computed, taken as an --input would be."""
    if cache_file is not None:
        config, tensors = config_from_files(
            ctx, weights, layer_prefix, input_file, input_kv, **_with_past(cache_file, options)
        )
        return config, {**tensors, **_cache_tensors(cache_file, config, options.get("layer"))}
    model_dir = options.get("model_dir")
    given = (weights, input_file, model_dir, input_kv, prompt_x)
    if all(g is None for g in given):
        if layer_prefix is not None:
            raise ConfigError("--layer-prefix picks a layer of --weights; add --weights FILE")
        return resolve_options(**options), {}
    from attntrace.config.presets import resolve_fields
    from attntrace.files import read_npy, resolve_run

    sources = {k: options.pop(k, None) for k in ("preset", "hf_config", "model_dir", "layer")}
    sizes, known = resolve_fields(**sources, layer_prefix=layer_prefix, **option_fields(**options))
    explicit = {name for name in _SIZE_OPTIONS if _typed(ctx, name)}
    loaded = _load(weights, model_dir, sources["layer"], layer_prefix, sizes, known)
    x_kv = read_npy(input_kv) if input_kv is not None else None
    if loaded is not None and model_dir is not None:
        from attntrace.models.load import check_cross

        check_cross(loaded, sizes.get("kv_seq") or (x_kv.shape[-2] if x_kv is not None else None))
    if loaded is None and layer_prefix is not None:
        raise ConfigError("--layer-prefix picks a layer of --weights; add --weights FILE")
    if loaded is not None and not known:
        check_positions_said(loaded, options)
    x = read_npy(input_file) if input_file is not None else prompt_x
    config, tensors = resolve_run(sizes, explicit, loaded, x, known=known, x_kv=x_kv)
    check_rope_base(options.get("rope_base"), config)
    return config, tensors


def _with_past(cache_file: Path, options: dict[str, Any]) -> dict[str, Any]:
    """``options`` with --past set to the cache's N when it is not typed."""
    if options.get("past") is not None:
        return options
    from attntrace.files.cache_file import read_cache

    k, _ = read_cache(cache_file, options.get("layer") or 0)
    return {**options, "past": int(k.shape[-2])}


def _cache_tensors(cache_file: Path, config: AttentionConfig, layer: int | None) -> dict[str, Any]:
    """k_cache and v_cache of --cache FILE for ``config`` (the last W - 1 keys of a longer
    cache with a sliding window); their shapes are checked where the tensors are used."""
    from attntrace.files.cache_file import read_cache

    if not config.past:
        raise ConfigError("--cache is the KV cache of a --past step; add --past N (or drop it)")
    k, v = read_cache(cache_file, layer or 0)
    if config.window is not None and k.shape[-2] == config.past > config.cached:
        k, v = k[..., config.past - config.cached :, :], v[..., config.past - config.cached :, :]
    return {"k_cache": k, "v_cache": v}


def origin_line(ctx: typer.Context | None, model: dict[str, Any], config: AttentionConfig) -> str:
    """Where the settings of ``config`` come from, for the header: the --model, --hf-config or
    --preset, and each typed option that overrides it (``--kv-heads 1 over 2``); "" if none.

    >>> origin_line(None, {"preset": "gpt2", "kv_heads": 4}, AttentionConfig(kv_heads=4))
    'from --preset gpt2; typed over it: --kv-heads 4 (was none)'
    """
    from attntrace.config.presets import resolve_fields

    sources = {k: model.get(k) for k in ("preset", "hf_config", "model_dir", "layer")}
    if all(sources[k] is None for k in ("preset", "hf_config", "model_dir")):
        return ""
    prefix = ctx.params.get("layer_prefix") if ctx is not None else None
    base, known = resolve_fields(**sources, layer_prefix=prefix)
    now = dataclasses.asdict(config)  # every field, also those to_dict leaves out at default
    over = []
    for name in known:
        option = name.removesuffix("_override")
        given = model.get(option) is not None or (ctx is not None and _typed(ctx, option))
        if given and name in now and now[name] != base[name]:
            flag = "--" + option.replace("_", "-")
            over.append(f"{flag} {_word(now[name])} (was {_word(base[name])})")
    source = next(iter(known.values()), "")
    return f"from {source}" + (f"; typed over it: {', '.join(over)}" if over else "")


def _word(value: Any) -> str:
    if value is None:
        return "none"
    return str(value).lower() if isinstance(value, bool) else str(value)


def _load(
    weights: Path | None,
    model_dir: Path | None,
    layer: int | None,
    layer_prefix: str | None,
    sizes: dict[str, Any],
    known: dict[str, str],
) -> Any:
    """The layer of --weights FILE or of --model DIR (None: neither)."""
    if weights is not None and model_dir is not None:
        raise ConfigError("--model DIR brings its own weights; drop --weights (or --model)")
    if model_dir is not None:
        from attntrace.models.load import load_model_layer

        return load_model_layer(model_dir, layer, layer_prefix, sizes.get("rope_style"))
    if weights is None:
        return None
    from attntrace.files.schemes import LayoutInfo, load_weights
    from attntrace.models.layouts import ALL_SCHEMES

    heads = sizes["heads"] if "heads" in known or sizes.get("heads") is not None else None
    info = LayoutInfo(heads, sizes.get("kv_heads"), rope_style=sizes.get("rope_style", "half"))
    return load_weights(weights, layer_prefix, schemes=ALL_SCHEMES, info=info)


#: The options a file may also state; typed ones must agree with it.
_SIZE_OPTIONS = (
    "batch",
    "seq",
    "hidden",
    "heads",
    "scale",
    "head_dim",
    "kv_heads",
    "kv_hidden",
    "kv_seq",
)


def check_positions_said(loaded: Any, options: dict[str, Any]) -> None:
    """A Llama-family layer (q_proj ... o_proj) rotates q and k and masks the future, which its
    weights cannot say: refuse to guess either way unless --rope and --causal are said."""
    said = options.get("rope") is not None and options.get("causal") is not None
    if loaded.family != "llama" or said:
        return
    raise ConfigError(
        f"the weights ({loaded.path.name}) hold a Llama-family layer (q_proj ... o_proj), which "
        "uses rotary embeddings and a causal mask that the weights cannot state; add --hf-config "
        "config.json, --preset or --model DIR, or say it: --rope/--no-rope and --causal/--no-causal"
    )


def _typed(ctx: typer.Context, name: str) -> bool:
    """Whether option ``name`` was given (on the command line or from the environment)."""
    source = ctx.get_parameter_source(name)
    return source is not None and source.name not in ("DEFAULT", "DEFAULT_MAP")


typed = _typed  # the same test, for the commands


def check_rope_base(rope_base: float | None, config: AttentionConfig) -> None:
    """--rope-base means nothing without --rope."""
    if rope_base is not None and not config.rope:
        raise ConfigError("--rope-base has no effect without rotary embeddings; add --rope")


def parallel_layout(parallel: dict[str, Any]) -> ParallelLayout | None:
    """The layout that --tp, --sp, --cp, --cp-kind and --rank give, or None (one device).

    >>> parallel_layout({"tp": 8, "sp": False, "cp": None, "cp_kind": None, "rank": 0})
    ParallelLayout(tp=8, sp=False, cp=1, cp_kind='ring', rank=0, balance=True)
    """
    tp, cp, kind = parallel["tp"], parallel["cp"], parallel["cp_kind"]
    if kind is not None and cp is None:
        raise ConfigError("--cp-kind needs --cp C (the ranks that share the sequence)")
    if tp is None and cp is None and not parallel["sp"]:
        if parallel["rank"]:
            raise ConfigError("--rank needs --tp or --cp; add --tp T or --cp C")
        return None
    return ParallelLayout(
        tp=tp or 1,
        sp=parallel["sp"],
        cp=cp or 1,
        cp_kind=kind.value if kind is not None else "ring",
        rank=parallel["rank"],
    )
