"""Model folders are closed, and file values are checked: a symlinked config.json, index or
shard is followed only inside the folder or inside the Hugging Face cache entry that holds it
(a fake ``models--*/`` with ``blobs/`` and ``snapshots/``); zero-size tensors, an index that
lies and NaN weights in ``report`` are one line (exit 2) or a result; no message shows the
bytes of the file it read."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest

from hostile import invoke

pytest.importorskip("safetensors")
from safetensors.numpy import save_file

H = 8
CONFIG = {"model_type": "llama", "hidden_size": H, "num_attention_heads": 2, "num_hidden_layers": 1}
NAMES = [f"model.layers.0.self_attn.{n}_proj.weight" for n in "qkvo"]
#: A file outside every folder, with bytes no message may show.
SECRET = b"root:x:0:0:SECRET-BYTES:/root:/bin/bash\n" * 8


def _tensors(zero: str | None = None, shape: tuple[int, ...] = (0, H)) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    out = {name: rng.random((H, H), dtype=np.float32) for name in NAMES}
    if zero is not None:
        out[zero] = np.zeros(shape, np.float32)
    return out


def _folder(path: Path, *, index: bool = False) -> Path:
    path.mkdir(parents=True)
    (path / "config.json").write_text(json.dumps(CONFIG))
    if index:
        save_file(_tensors(), str(path / "model-00001-of-00001.safetensors"))
        weight_map = dict.fromkeys(NAMES, "model-00001-of-00001.safetensors")
        (path / "model.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}))
    else:
        save_file(_tensors(), str(path / "model.safetensors"))
    return path


def _hf_cache(root: Path, *, index: bool) -> Path:
    """huggingface_hub's layout: snapshots/REV/NAME -> ../../blobs/HASH."""
    source = _folder(root / "source", index=index)
    entry = root / "hub" / "models--org--tiny"
    snapshot = entry / "snapshots" / "0123abcd"
    (entry / "blobs").mkdir(parents=True)
    snapshot.mkdir(parents=True)
    for i, file in enumerate(sorted(source.iterdir())):
        blob = entry / "blobs" / f"{i:040x}"
        blob.write_bytes(file.read_bytes())
        (snapshot / file.name).symlink_to(os.path.relpath(blob, snapshot))
    return snapshot


def _one_line_naming(outcome: object, link: str) -> None:
    from hostile import Outcome

    assert isinstance(outcome, Outcome)
    outcome.assert_contained()
    assert outcome.code == 2, outcome
    assert f"{link} is a symbolic link to a file outside the folder" in outcome.err
    assert "SECRET" not in outcome.err + outcome.out


@pytest.mark.slow
@pytest.mark.parametrize("index", [False, True], ids=["single", "sharded"])
def test_a_hugging_face_cache_of_links_into_blobs_works(tmp_path: Path, index: bool) -> None:
    snapshot = _hf_cache(tmp_path, index=index)
    plain = _folder(tmp_path / "0123abcd", index=index)  # the same name: the same document
    cached = invoke("run", "--model", str(snapshot), "-f", "json")
    assert cached.code == 0, cached
    assert cached.out == invoke("run", "--model", str(plain), "-f", "json").out


@pytest.mark.slow
def test_links_inside_the_folder_work(tmp_path: Path) -> None:
    folder = _folder(tmp_path / "m")
    (folder / "real").mkdir()
    for name in ("config.json", "model.safetensors"):
        (folder / name).rename(folder / "real" / name)
        (folder / name).symlink_to(Path("real") / name)
    assert invoke("run", "--model", str(folder)).code == 0


def _targets(tmp_path: Path) -> dict[str, Path]:
    """Files outside the folder a link may point at: a secret, a real model file elsewhere,
    a blob of another cache entry, a link to a link outside."""
    tmp_path.mkdir()
    secret = tmp_path / "secret.txt"
    secret.write_bytes(SECRET)
    elsewhere = _folder(tmp_path / "elsewhere", index=True)
    other = _hf_cache(tmp_path / "other", index=False)
    chain = tmp_path / "chain"
    chain.symlink_to(secret)
    return {
        "secret": secret,
        "a model file elsewhere": elsewhere / "model-00001-of-00001.safetensors",
        "a config elsewhere": elsewhere / "config.json",
        "another cache entry's blob": other.resolve() / "config.json",
        "a link to a link": chain,
        "the index elsewhere": elsewhere / "model.safetensors.index.json",
    }


@pytest.mark.slow
@pytest.mark.parametrize(
    "link", ["config.json", "model.safetensors", "model.safetensors.index.json", "shard"]
)
def test_a_link_out_of_the_folder_is_refused_naming_it(tmp_path: Path, link: str) -> None:
    sharded = link in ("shard", "model.safetensors.index.json")
    for i, target in enumerate(_targets(tmp_path / "targets").values()):
        folder = _folder(tmp_path / f"m{i}", index=sharded)
        name = "model-00001-of-00001.safetensors" if link == "shard" else link
        (folder / name).unlink(missing_ok=True)
        (folder / name).symlink_to(target)
        _one_line_naming(invoke("run", "--model", str(folder)), name)


def test_a_link_out_of_a_cache_snapshot_is_refused(tmp_path: Path) -> None:
    snapshot = _hf_cache(tmp_path, index=False)
    secret = tmp_path / "secret.txt"
    secret.write_bytes(SECRET)
    (snapshot / "config.json").unlink()
    (snapshot / "config.json").symlink_to(secret)
    _one_line_naming(invoke("run", "--model", str(snapshot)), "config.json")


@pytest.mark.slow
@pytest.mark.parametrize("size", [0, 3, 8, 16, 64, len(SECRET)])
def test_no_message_shows_the_bytes_of_a_non_weights_file(tmp_path: Path, size: int) -> None:
    for suffix in (".safetensors", ".npz", ".npy"):
        path = tmp_path / f"w{size}{suffix}"
        path.write_bytes(SECRET[:size])
        option = "--input" if suffix == ".npy" else "--weights"
        outcome = invoke("run", option, str(path), "--hidden", str(H), "--heads", "2")
        outcome.assert_contained()
        assert outcome.code == 2
        assert "SECRET" not in outcome.err
        assert "root:x" not in outcome.err
        first8 = str(int.from_bytes(SECRET[:8], "little"))
        assert first8 not in outcome.err


SHAPES = [(0, H), (H, 0), (0, 0), (0,)]


@pytest.mark.slow
@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("name", ["w_q", "w_k", "w_o", "b_v"])
def test_zero_size_weights_are_one_line(tmp_path: Path, shape: tuple[int, ...], name: str) -> None:
    rng = np.random.default_rng(0)
    arrays = {f"w_{n}": rng.random((H, H), dtype=np.float32) for n in "qkvo"}
    arrays[name] = np.zeros(shape, np.float32)
    np.savez(tmp_path / "w.npz", **arrays)
    save_file(arrays, str(tmp_path / "w.safetensors"))
    for file in ("w.npz", "w.safetensors"):
        outcome = invoke("run", "--weights", str(tmp_path / file), "--heads", "2", "--seq", "3")
        outcome.assert_contained()
        assert outcome.code == 2, outcome
        assert name in outcome.err, outcome.err


def test_a_zero_size_tensor_in_a_model_folder_is_one_line(tmp_path: Path) -> None:
    folder = tmp_path / "m"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(CONFIG))
    save_file(_tensors(NAMES[2], (0, H)), str(folder / "model.safetensors"))
    outcome = invoke("run", "--model", str(folder))
    outcome.assert_contained()
    assert outcome.code == 2
    assert "v_proj" in outcome.err or "w_v" in outcome.err


@pytest.mark.parametrize("missing", NAMES)
def test_an_index_naming_a_tensor_its_shard_lacks_is_one_line(tmp_path: Path, missing: str) -> None:
    folder = _folder(tmp_path / "m", index=True)
    tensors = {k: v for k, v in _tensors().items() if k != missing}
    save_file(tensors, str(folder / "model-00001-of-00001.safetensors"))
    for command in ("run", "report"):
        extra = ("--out", str(tmp_path / "r.html")) if command == "report" else ()
        outcome = invoke(command, "--model", str(folder), *extra)
        outcome.assert_contained()
        assert outcome.code == 2, outcome
        assert repr(missing) in outcome.err
    assert not (tmp_path / "r.html").exists()


@pytest.mark.parametrize("value", [np.nan, np.inf, -np.inf])
def test_report_counts_nan_weights(tmp_path: Path, value: float) -> None:
    rng = np.random.default_rng(0)
    arrays = {f"w_{n}": rng.random((H, H), dtype=np.float32) for n in "qkvo"}
    arrays["w_q"][0, 0] = value
    np.savez(tmp_path / "w.npz", **arrays)
    out = tmp_path / "r.html"
    outcome = invoke(
        "report", "-o", str(out), "--weights", str(tmp_path / "w.npz"), "--seq", "3", "--heads", "2"
    )
    assert outcome.code == 0, outcome
    page = out.read_text()
    assert "<th>NaN or inf</th>" in page
    assert "red = NaN or inf" in page
    assert 'fill="#d62728"' in page


@pytest.mark.parametrize("length", [255, 256, 4096, 5000])
def test_a_model_path_of_any_length_is_one_line(tmp_path: Path, length: int) -> None:
    for path in (tmp_path / ("a" * length), tmp_path.joinpath(*["b" * 200] * (length // 200))):
        outcome = invoke("run", "--model", str(path))
        outcome.assert_contained()
        assert outcome.code == 2, outcome
        assert "--model" in outcome.err
