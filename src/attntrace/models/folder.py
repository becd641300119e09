"""A saved model folder: its config and where each tensor lives, so that one layer is read
from the one shard that holds it and nothing else is touched.

Hugging Face folders: ``config.json`` plus ``model.safetensors``, a sharded
``model.safetensors.index.json`` (``weight_map``: tensor -> shard), ``pytorch_model.bin`` or
``pytorch_model.bin.index.json`` (read by torch's weights-only loader, never unpickled). Meta's
original folders: ``params.json`` plus one ``consolidated.00.pth``.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from attntrace.errors import ConfigError, InputFileError
from attntrace.files.readers import LazyArrays, read_arrays
from attntrace.text import plain

if TYPE_CHECKING:
    import numpy as np

#: The largest config.json or index file read (bytes).
JSON_LIMIT = 16 * 1024 * 1024
#: Weight files of a folder, in the order they are looked for: (index, single file).
WEIGHT_FILES: tuple[tuple[str, str], ...] = (
    ("model.safetensors.index.json", "model.safetensors"),
    ("pytorch_model.bin.index.json", "pytorch_model.bin"),
)


@dataclass(frozen=True)
class ModelFolder:
    """A model folder: its config (config.json, or Meta's params.json as such) and the file
    that holds each tensor."""

    path: Path
    config: dict[str, Any]
    weight_map: dict[str, Path]  # tensor name -> the file (shard) that holds it

    def arrays(self) -> LazyArrays:
        """Every tensor by name; reading one opens only its shard (header and that tensor)."""
        opened: dict[Path, LazyArrays] = {}

        def load(name: str) -> np.ndarray:
            shard = self.weight_map[name]
            if shard not in opened:
                opened[shard] = read_arrays(shard)[0]
            if name not in opened[shard]:  # the index lies about where the tensor is
                raise InputFileError(
                    f"--model {plain(self.path)}: its index puts {plain(repr(name))[:120]} in "
                    f"{plain(shard.name)}, which does not hold it; save the model again with "
                    "save_pretrained"
                )
            return opened[shard][name]

        return LazyArrays(self.weight_map, load)


def open_folder(path: Path) -> ModelFolder:
    """The folder at ``path``: its config and tensor map (only headers and index files read)."""
    return ModelFolder(path, folder_config(path), _weight_map(path))


def folder_config(path: Path) -> dict[str, Any]:
    """config.json of the folder (or Meta's params.json, as a Llama config); no weights read."""
    if not _is_dir(path):
        raise InputFileError(
            f"--model {path}: not a folder; give a saved model's folder "
            "(config.json and model.safetensors), or use --weights FILE"
        )
    if _is_file(path / "config.json"):
        return read_json(closed(path, path / "config.json"))
    if _is_file(path / "params.json"):
        params = read_json(closed(path, path / "params.json"))
        config = {"model_type": "llama", **params}  # Meta's own format
        _refuse_meta_features(path, config)
        return config
    raise InputFileError(f"--model {path}: has no config.json (or Meta's params.json)")


def _is_file(path: Path) -> bool:
    """``Path.is_file`` without its OSErrors (a name too long, a loop): False."""
    try:
        return path.is_file()
    except (OSError, ValueError):
        return False


def _is_dir(path: Path) -> bool:
    try:
        return path.is_dir()
    except (OSError, ValueError):
        return False


def is_meta(path: Path) -> bool:
    """Whether ``path`` is one of Meta's own folders (params.json, no config.json): its wq and
    wk rotate neighbours (2i, 2i + 1), RoPE's interleaved pairing.

    >>> import tempfile, pathlib
    >>> d = pathlib.Path(tempfile.mkdtemp())
    >>> _ = (d / "params.json").write_text("{}")
    >>> is_meta(d), is_meta(d.parent)
    (True, False)
    """
    return not _is_file(path / "config.json") and _is_file(path / "params.json")


def _weight_map(path: Path) -> dict[str, Path]:
    for index, single in WEIGHT_FILES:
        if _is_file(path / index):
            return _index(path, index)
        if _is_file(path / single):
            file = closed(path, path / single)
            return dict.fromkeys(read_arrays(file)[0], file)
    meta = sorted(path.glob("consolidated.*.pth"))
    if len(meta) > 1:
        raise InputFileError(
            f"--model {path}: {len(meta)} consolidated.*.pth files split each layer "
            "across model-parallel ranks; convert the checkpoint to Hugging Face format"
        )
    if meta:
        file = closed(path, meta[0])
        return dict.fromkeys(read_arrays(file)[0], file)
    names = " or ".join(single for _, single in WEIGHT_FILES)
    raise InputFileError(
        f"--model {path}: no weights found ({names}, their .index.json, or consolidated.00.pth)"
    )


def _index(path: Path, name: str) -> dict[str, Path]:
    """The weight_map of a sharded checkpoint; every shard must be a file in the folder."""
    doc = read_json(closed(path, path / name))
    weight_map = doc.get("weight_map")
    if not isinstance(weight_map, Mapping) or not weight_map:
        raise InputFileError(
            f"{path / name}: has no weight_map; save the model again with save_pretrained"
        )
    out: dict[str, Path] = {}
    shards: dict[str, Path] = {}  # each shard checked once, not once for each of its tensors
    for tensor, shard in weight_map.items():
        if not isinstance(shard, str) or shard not in shards:
            shards[shard] = _shard(path, name, tensor, shard)
        out[str(tensor)] = shards[shard]
    return out


def _shard(path: Path, name: str, tensor: object, shard: object) -> Path:
    """The file of one shard an index names: a plain name of a file in the folder."""
    if not isinstance(shard, str) or not re.fullmatch(r"[\w.-]++", shard) or shard.startswith("."):
        raise InputFileError(
            f"{path / name}: shard {plain(repr(shard))[:80]} of {plain(repr(tensor))[:80]} is "
            "not a file name in the folder"
        )
    if not _is_file(path / shard):
        raise InputFileError(
            f"{path / name}: shard {plain(shard)[:80]} (of {plain(str(tensor))[:80]}) is missing "
            "from the folder"
        )
    return closed(path, path / shard)


def closed(folder: Path, file: Path) -> Path:
    """``file`` of ``folder`` when it is the folder's own: a plain file in it, or a symbolic
    link that resolves inside the folder or inside the Hugging Face cache entry that holds it
    (``models--ORG--NAME/``, whose ``snapshots/REV/`` files link into its ``blobs/``). Any other
    link is refused in one line naming it: a model folder never reads a file outside itself.

    >>> import tempfile, pathlib
    >>> d = pathlib.Path(tempfile.mkdtemp())
    >>> (d / "config.json").symlink_to("/etc/hostname")
    >>> closed(d, d / "config.json")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    attntrace.errors.InputFileError: --model ...: config.json is a symbolic link to a file ...
    """
    home = os.path.realpath(folder)
    target = os.path.realpath(file)
    roots = [home]
    snapshots = os.path.dirname(home)
    entry = os.path.dirname(snapshots)
    if (
        os.path.basename(snapshots) == "snapshots"
        and os.path.basename(entry).startswith("models--")
        and os.path.isdir(os.path.join(entry, "blobs"))
    ):
        roots.append(entry)  # the cache entry: its snapshots' links point into its blobs/
    if any(target.startswith(root + os.sep) for root in roots):
        return file
    raise InputFileError(
        f"--model {plain(folder)}: {plain(file.name)} is a symbolic link to a file outside "
        "the folder (and outside the Hugging Face cache that holds it), which attntrace does "
        "not follow; copy the file into the folder"
    )


def read_json(path: Path, limit: int = JSON_LIMIT) -> dict[str, Any]:
    """A JSON object from ``path``: a regular file, size-capped, strict JSON (files.guard)."""
    from attntrace.files.guard import load_json

    data = load_json(path, limit, what=f"--model {path.parent.name}")
    if not isinstance(data, dict):
        raise InputFileError(f"{path}: holds a JSON {type(data).__name__}, not an object")
    return data


def _refuse_meta_features(path: Path, config: Mapping[str, Any]) -> None:
    if config.get("use_scaled_rope"):
        raise ConfigError(
            f"--model {path}: params.json sets use_scaled_rope (Llama 3.1 rope scaling), "
            "which is not modelled yet"
        )
