"""A spec's work is bounded by its total (issue 45): a file many configs name (``hf_config``,
``golden``) is read once, not once a config (4,096 configs naming one 14 MiB config.json took
about 40 minutes); the files a spec names are refused by their sizes together, and its
configs on compute backends by their FLOPs together, before any is read or computed."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from attntrace.config import presets
from attntrace.errors import InputFileError
from attntrace.tools import check
from attntrace.tools.check import (
    MAX_SPEC_FILE_BYTES,
    MAX_SPEC_FLOPS,
    load_spec,
    run_spec,
)

HF_CONFIG = {
    "model_type": "llama",
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "hidden_size": 64,
}


def _spec(tmp_path: Path, tables: list[str]) -> Path:
    path = tmp_path / "shapes.toml"
    path.write_text("".join(f"[config.c{i}]\n{t}\n" for i, t in enumerate(tables)))
    return path


def _counted(monkeypatch: pytest.MonkeyPatch, module: Any, name: str) -> list[Path]:
    """Every call of ``module.name`` recorded (its first argument), the call itself kept."""
    calls: list[Path] = []
    real = getattr(module, name)

    def counted(path: Path, *args: Any, **kwargs: Any) -> Any:
        calls.append(path)
        return real(path, *args, **kwargs)

    monkeypatch.setattr(module, name, counted)
    return calls


def test_a_shared_hf_config_is_read_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "config.json").write_text(json.dumps(HF_CONFIG))
    reads = _counted(monkeypatch, presets, "_load_json")
    names = ["config.json", "./config.json", "sub/../config.json"]
    (tmp_path / "sub").mkdir()
    spec = _spec(tmp_path, [f'hf_config = "{names[i % 3]}"\nseq = {i + 1}' for i in range(60)])
    cases = load_spec(spec)
    assert len(reads) == 1
    assert [c.config.seq for c in cases] == list(range(1, 61))
    assert {(c.config.heads, c.config.kv_heads, c.config.hidden) for c in cases} == {(4, 2, 64)}


def test_a_broken_shared_file_is_read_once_and_refused_for_each_config(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "config.json").write_text("{not json")
    reads = _counted(monkeypatch, presets, "_load_json")
    spec = _spec(tmp_path, ['hf_config = "config.json"'] * 40)
    cases = load_spec(spec, keep_going=True)
    assert len(reads) == 1
    assert len(cases) == 40
    assert all("config.json: is not valid JSON" in c.error for c in cases)


def test_a_shared_golden_is_read_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from hostile import invoke

    golden = tmp_path / "golden.json"
    out = invoke("run", "--seq", "3", "--hidden", "64", "--heads", "4", "--format", "json")
    golden.write_text(out.out)
    reads = _counted(monkeypatch, check, "load_golden")
    spec = _spec(tmp_path, ['golden = "golden.json"\nseq = 3\nhidden = 64\nheads = 4'] * 50)
    results = run_spec(load_spec(spec))
    assert len(reads) == 1
    assert [r.ok for r in results] == [True] * 50


def test_the_named_files_are_refused_by_their_sizes_before_any_is_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    size = 14 * 2**20
    for i in range(10):  # sparse: a size, no data
        with open(tmp_path / f"c{i}.json", "wb") as f:
            f.truncate(size)
    reads = _counted(monkeypatch, presets, "_load_json")
    spec = _spec(tmp_path, [f'hf_config = "c{i % 10}.json"' for i in range(4096)])
    start = time.perf_counter()
    with pytest.raises(InputFileError) as caught:
        load_spec(spec)
    assert time.perf_counter() - start < 10
    assert reads == []
    assert 10 * size > MAX_SPEC_FILE_BYTES
    assert str(caught.value) == (
        f"{spec}: names 10 files (hf_config, golden) of 140.00 MiB together; the most a spec "
        "may read is 128.00 MiB (MAX_SPEC_FILE_BYTES); split it"
    )


def test_compute_configs_are_refused_by_their_flops_together(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    table = 'backend = "numpy"\nseq = 4096\nhidden = 1024\nheads = 8'
    spec = _spec(tmp_path, [table] * 40)
    cases = load_spec(spec)
    computed = _counted(monkeypatch, check, "check_trace")
    start = time.perf_counter()
    with pytest.raises(InputFileError) as caught:
        run_spec(cases)
    assert time.perf_counter() - start < 10
    assert computed == []
    assert str(caught.value).startswith(
        f"the spec's configs on compute backends run more than {MAX_SPEC_FLOPS:.0e} FLOPs together"
    )
