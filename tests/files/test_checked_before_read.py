"""Checked before read (issue 45): ``demo --query FILE.npy`` reads the shape the header
declares and refuses more than 32 × 32 before a byte of the data is read; before, a 400 MB
array became a Python list first (75 s and 5 GB, or out of memory). The files are sparse: a
header and a hole, no disk used."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pytest

from hostile import invoke

#: What follows the declared shape in the refusal.
TOO_BIG = "at most 32 rows and columns (every number is printed); attntrace run --values shows "
TOO_BIG += "larger sizes"


def _declared(path: Path, shape: tuple[int, ...], dtype: str = "<f4") -> Path:
    """A .npy whose header declares ``shape``, its data a hole of the declared size."""
    with open(path, "wb") as f:
        np.lib.format.write_array_header_1_0(
            f, {"descr": dtype, "fortran_order": False, "shape": shape}
        )
        f.truncate(f.tell() + int(np.prod(shape)) * np.dtype(dtype).itemsize)
    return path


@pytest.mark.parametrize(
    ("shape", "dtype", "expected"),
    [
        (
            (10_000, 10_000),
            "<f4",
            "declares (10000, 10000); " + TOO_BIG,
        ),
        (
            (33, 2),
            "<f4",
            "declares (33, 2); " + TOO_BIG,
        ),
        (
            (2, 50_000_000),
            "<f4",
            "declares (2, 50000000); " + TOO_BIG,
        ),
        ((4, 4, 4), "<f4", "save one 2-D array of numbers with numpy.save"),
        ((4, 4), "<U8", "save one 2-D array of numbers with numpy.save"),
    ],
)
def test_demo_query_npy_is_checked_by_its_header(
    tmp_path: Path, shape: tuple[int, ...], dtype: str, expected: str
) -> None:
    path = _declared(tmp_path / "q.npy", shape, dtype)
    start = time.perf_counter()
    out = invoke("demo", "--query", str(path))
    assert time.perf_counter() - start < 5
    out.assert_contained()
    assert out.code == 2
    assert out.err == f"attntrace: error: --query {path}: {expected}\n"


def test_a_demo_query_npy_that_fits_is_read(tmp_path: Path) -> None:
    path = tmp_path / "q.npy"
    np.save(path, np.array([[1.0, 0.0, 2.0], [2.0, 2.0, 2.0]]))
    out = invoke("demo", "--query", str(path), "--key", "1 0 0; 0 1 0", "--value", "1; 2")
    assert out.code == 0, out.err
    assert "(2, 3)" in out.out


@pytest.mark.slow
def test_a_huge_weight_map_checks_each_shard_once(tmp_path: Path) -> None:
    """300,000 tensors of one shard (15 MB of index): the shard is checked once, not 300,000
    times (30 s before)."""
    import json

    from safetensors.numpy import save_file

    folder = tmp_path / "model"
    folder.mkdir()
    config = {"model_type": "llama", "num_attention_heads": 4, "num_key_value_heads": 2}
    (folder / "config.json").write_text(json.dumps({**config, "hidden_size": 64}))
    save_file({"x": np.zeros((2, 2), np.float32)}, str(folder / "s1.safetensors"))
    names = {f"model.layers.{i}.mlp.w{i}": "s1.safetensors" for i in range(300_000)}
    index = folder / "model.safetensors.index.json"
    index.write_text(json.dumps({"weight_map": names}))
    start = time.perf_counter()
    out = invoke("run", "--model", str(folder))
    assert time.perf_counter() - start < 15
    out.assert_contained()
    assert out.code == 2
