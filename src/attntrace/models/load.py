"""``--model DIR --layer N``: the attention settings of layer N from the folder's config and its
weights from the shard that holds them."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from attntrace.errors import ConfigError, InputFileError
from attntrace.files.schemes import LayoutInfo, LoadedWeights, layer_candidates, load_layer
from attntrace.models.folder import folder_config, open_folder
from attntrace.models.hf_config import attention_fields, config_section
from attntrace.models.layouts import ALL_SCHEMES

#: Prefixes of towers that are not the language model (a multimodal checkpoint's vision encoder).
OTHER_TOWERS = re.compile(r"vision|visual|image|audio|speech", re.IGNORECASE)


def model_fields(path: Path, layer: int | None) -> dict[str, Any]:
    """The AttentionConfig fields of layer ``layer`` (default 0) of the model folder ``path``.

    >>> import json, tempfile, pathlib
    >>> d = pathlib.Path(tempfile.mkdtemp())
    >>> cfg = {"model_type": "gpt2", "n_embd": 8, "n_head": 2}
    >>> _ = (d / "config.json").write_text(json.dumps(cfg))
    >>> f = model_fields(d, 0)
    >>> f["hidden"], f["heads"], f["causal"], f["rope"]
    (8, 2, True, False)
    """
    return attention_fields(
        folder_config(path), path / "config.json", 0 if layer is None else layer
    )


def load_model_layer(
    path: Path, layer: int | None, layer_prefix: str | None = None
) -> LoadedWeights:
    """The weights of layer ``layer`` (default 0) of the folder, read from its shard only."""
    n = 0 if layer is None else layer
    folder = open_folder(path)
    arrays = folder.arrays()
    prefix = layer_prefix if layer_prefix is not None else _prefix(path, arrays, n)
    section = config_section(folder.config)
    fields = attention_fields(folder.config, path / "config.json", n)
    info = LayoutInfo(fields["heads"], fields["kv_heads"], section)
    loaded = load_layer(path, arrays, {}, prefix, schemes=ALL_SCHEMES, info=info)
    if str(section.get("model_type", "")).startswith("gemma3"):  # Gemma3RMSNorm: 1 + weight
        for name in ("n_q", "n_k"):
            if (weight := loaded.params.get(name)) is not None:
                loaded.params[name] = 1.0 + weight
    return loaded


def _prefix(path: Path, arrays: Any, layer: int) -> str:
    """The prefix of the one attention layer numbered ``layer`` in the language model."""
    found = [p for p, _ in layer_candidates(arrays, ALL_SCHEMES) if not OTHER_TOWERS.search(p)]
    if not found:
        raise InputFileError(
            f"--model {path}: no attention layer in a known layout (see the README's layout table)"
        )
    numbered = [p for p in found if re.search(rf"(^|\.){layer}\.", p)]
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
