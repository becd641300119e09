"""``--model DIR --layer N``: the attention settings of layer N from the folder's config and its
weights from the shard that holds them."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from attntrace.errors import ConfigError, InputFileError
from attntrace.files.schemes import LayoutInfo, LoadedWeights, layer_candidates, load_layer
from attntrace.models.folder import folder_config, is_meta, open_folder
from attntrace.models.hf_config import attention_fields, config_section
from attntrace.models.layouts import ALL_SCHEMES, T5_CROSS_SCHEME

#: Prefixes of towers that are not the language model (a multimodal checkpoint's vision encoder).
OTHER_TOWERS = re.compile(r"vision|visual|image|audio|speech", re.IGNORECASE)


def model_fields(path: Path, layer: int | None, prefix: str | None = None) -> dict[str, Any]:
    """The AttentionConfig fields of layer ``layer`` (default 0) of the model folder ``path``
    (of the layer under ``prefix`` when given: a T5 decoder's layers are causal).

    >>> import json, tempfile, pathlib
    >>> d = pathlib.Path(tempfile.mkdtemp())
    >>> cfg = {"model_type": "gpt2", "n_embd": 8, "n_head": 2}
    >>> _ = (d / "config.json").write_text(json.dumps(cfg))
    >>> f = model_fields(d, 0)
    >>> f["hidden"], f["heads"], f["causal"], f["rope"], f["rope_style"]
    (8, 2, True, False, 'half')
    """
    config = folder_config(path)
    if prefix is None and config.get("is_encoder_decoder"):  # encoder or decoder: weights say
        prefix = _prefix(path, open_folder(path).arrays(), 0 if layer is None else layer)
    return _fields(path, config, layer, prefix)


#: The decoder stack of an encoder-decoder checkpoint (T5): its self-attention is causal.
DECODER = re.compile(r"(?:^|\.)decoder\.")
#: T5's cross-attention: layer 1 of a decoder block (EncDecAttention), no position bias.
T5_CROSS = re.compile(r"(?:^|\.)decoder\.block\.\d+\.layer\.1\.$")


def _fields(
    path: Path, config: dict[str, Any], layer: int | None, prefix: str | None = None
) -> dict[str, Any]:
    """The fields of ``layer`` of the folder's config; Meta's own folders pair neighbours; a
    layer of an encoder-decoder's decoder stack (T5) is read as its decoder config says it."""
    if prefix is not None and DECODER.search(prefix) and config.get("is_encoder_decoder", True):
        config = {**config, "is_decoder": True}
    fields = attention_fields(config, path / "config.json", 0 if layer is None else layer)
    if prefix is not None and T5_CROSS.search(prefix):  # keys: the encoder's output, no bias
        fields = {**fields, "causal": False, "relative_bias": None}
    return {**fields, "rope_style": "interleaved"} if is_meta(path) else fields


def check_cross(loaded: LoadedWeights, kv_seq: int | None) -> None:
    """A cross-attention layer (T5's EncDecAttention) needs the length of the encoder's output:
    without --kv-seq it would silently attend its own input."""
    if loaded.scheme == T5_CROSS_SCHEME and kv_seq is None:
        raise ConfigError(
            f"{loaded.prefix}EncDecAttention is T5's cross-attention: its keys and values come "
            "from the encoder's output; give it with --input-kv FILE.npy (B, N, M), or add "
            "--kv-seq N for its length alone (x_kv is then seeded)"
        )


def load_model_layer(
    path: Path,
    layer: int | None,
    layer_prefix: str | None = None,
    rope_style: str | None = None,
) -> LoadedWeights:
    """The weights of layer ``layer`` (default 0) of the folder, read from its shard only, for a
    trace that pairs RoPE's dims as ``rope_style`` says (default: the model's own pairing)."""
    n = 0 if layer is None else layer
    folder = open_folder(path)
    arrays = folder.arrays()
    prefix = layer_prefix if layer_prefix is not None else _prefix(path, arrays, n)
    section = config_section(folder.config)
    fields = _fields(path, folder.config, n, prefix)
    info = LayoutInfo(
        fields["heads"], fields["kv_heads"], section, rope_style or fields["rope_style"]
    )
    loaded = load_layer(path, arrays, {}, prefix, schemes=ALL_SCHEMES, info=info)
    if fields.get("relative_bias") and "rel_bias" not in loaded.params:  # T5: block 0 holds it
        first = re.sub(r"\.block\.\d+\.", ".block.0.", prefix, count=1)
        name = f"{first}SelfAttention.relative_attention_bias.weight"
        if name not in arrays:
            raise InputFileError(f"--model {path}: {name} (the relative bias table) is missing")
        loaded.params["rel_bias"] = arrays[name]
    if str(section.get("model_type", "")).startswith("gemma3"):  # Gemma3RMSNorm: 1 + weight
        for name in ("n_q", "n_k"):
            if (weight := loaded.params.get(name)) is not None:
                loaded.params[name] = 1.0 + weight
    return loaded


def _number(prefix: str) -> int | None:
    """The first numbered component of a prefix (``encoder.block.3.layer.0.`` -> 3)."""
    found = re.search(r"(?:^|\.)(\d+)\.", prefix)
    return int(found.group(1)) if found else None


def _prefix(path: Path, arrays: Any, layer: int) -> str:
    """The prefix of the one attention layer numbered ``layer`` in the language model."""
    found = [p for p, _ in layer_candidates(arrays, ALL_SCHEMES) if not OTHER_TOWERS.search(p)]
    if not found:
        raise InputFileError(
            f"--model {path}: no attention layer in a known layout (see the README's layout table)"
        )
    numbered = [p for p in found if _number(p) == layer]  # the first number: the block index
    if len(numbered) == 1:
        return numbered[0]
    if not numbered:
        raise ConfigError(
            f"--model {path}: has no attention layer {layer}; it has {len(found)} "
            f"(--layer 0 to {len(found) - 1}), e.g. {found[0]!r}"
        )
    shown = ", ".join(repr(p) for p in numbered[:4])
    raise ConfigError(
        f"--model {path}: layer {layer} is one of {shown}; pick one with --layer-prefix"
    )


def layer_prefix_of(path: Path, layer: int) -> str:
    """The weight prefix of attention layer ``layer`` of the folder's language model (an
    unknown layer is a one-line error naming the layers there are)."""
    return _prefix(path, open_folder(path).arrays(), layer)
