"""run --save: every step and parameter by name plus the config, loadable without pickle,
written atomically; --save then --weights/--input reproduces the output exactly."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from typer.testing import CliRunner

from attntrace import STEP_NAMES, AttentionConfig, trace_attention
from attntrace.cli import app
from attntrace.engine.inputs import param_axes
from attntrace.files import save_trace


def invoke(*args: object) -> Any:
    return CliRunner().invoke(app, [str(a) for a in args])


def test_save_holds_every_step_parameter_and_the_config(tmp_path: Path) -> None:
    config = AttentionConfig(batch=2, seq=3, hidden=8, heads=2, seed=4)
    trace = trace_attention(config)
    save_trace(trace, tmp_path / "t.npz")
    with np.load(tmp_path / "t.npz", allow_pickle=False) as npz:
        assert set(npz.files) == {*STEP_NAMES, *param_axes(AttentionConfig()), "config"}
        for step in trace.steps:
            np.testing.assert_array_equal(npz[step.name], step.value)
            assert npz[step.name].dtype == np.float32
        np.testing.assert_array_equal(npz["b_o"], trace.params["b_o"])
        meta = json.loads(str(npz["config"]))
    assert meta == {**config.to_dict(), "backend": "numpy", "format": "attntrace-trace/1"}


@pytest.mark.slow
@pytest.mark.parametrize(
    "extra", [[], ["--batch", "2", "--scale", "none", "--dtype", "float64"], ["--backend", "torch"]]
)
def test_save_then_weights_and_input_reproduce_the_output_exactly(
    tmp_path: Path, extra: list[str]
) -> None:
    if "torch" in extra:
        pytest.importorskip("torch")
    first = invoke(
        "run",
        "--hidden",
        8,
        "--heads",
        2,
        "--seq",
        4,
        "--seed",
        7,
        *extra,
        "--save",
        tmp_path / "a.npz",
    )
    assert first.exit_code == 0, first.output
    with np.load(tmp_path / "a.npz", allow_pickle=False) as a:
        np.save(tmp_path / "x.npy", a["x"])
        output = a["output"]
    again = invoke(
        "run",
        "--weights",
        tmp_path / "a.npz",
        "--input",
        tmp_path / "x.npy",
        *extra[-2:] if "torch" in extra else [],
        "--save",
        tmp_path / "b.npz",
    )
    assert again.exit_code == 0, again.output
    with np.load(tmp_path / "b.npz", allow_pickle=False) as b:
        np.testing.assert_array_equal(b["output"], output)
        assert (
            json.loads(str(b["config"]))["heads"] == 2
        )  # heads, dtype and scale come from the file


def test_input_may_be_the_saved_npz(tmp_path: Path) -> None:
    assert invoke("run", "--hidden", 8, "--heads", 2, "--save", tmp_path / "a.npz").exit_code == 0
    result = invoke(
        "run",
        "--weights",
        tmp_path / "a.npz",
        "--input",
        tmp_path / "a.npz",
        "--save",
        tmp_path / "b.npz",
    )
    assert result.exit_code == 0, result.output
    with np.load(tmp_path / "a.npz") as a, np.load(tmp_path / "b.npz") as b:
        np.testing.assert_array_equal(a["output"], b["output"])


def test_a_failed_write_leaves_no_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    target = tmp_path / "t.npz"
    target.write_bytes(b"the previous file")

    def half_then_fail(file: Any, **arrays: Any) -> None:
        file.write(b"PK\x03\x04 half a zip")
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(np, "savez", half_then_fail)
    with pytest.raises(
        OSError, match=r"could not be written \(No space left on device\); nothing was saved"
    ):
        save_trace(trace_attention(AttentionConfig(hidden=8, heads=2)), target)
    assert target.read_bytes() == b"the previous file"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t.npz"]  # no temporary file left


def test_an_interrupted_write_leaves_no_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def interrupted(file: Any, **arrays: Any) -> None:
        file.write(b"PK")
        raise KeyboardInterrupt

    monkeypatch.setattr(np, "savez", interrupted)
    with pytest.raises(KeyboardInterrupt):
        save_trace(trace_attention(AttentionConfig(hidden=8, heads=2)), tmp_path / "t.npz")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["--backend", "shape", "--save", "{tmp}/t.npz"],
            "--save needs values, but the shape backend keeps none",
        ),
        (["--save", "{tmp}/t.txt"], "--save writes a .npz file"),
        (["--save", "{tmp}/nope/t.npz"], "does not exist; create it or write elsewhere"),
    ],
)
def test_save_errors_are_exit_2(tmp_path: Path, args: list[str], message: str) -> None:
    result = invoke("run", "--hidden", 8, "--heads", 2, *(a.format(tmp=tmp_path) for a in args))
    assert result.exit_code == 2
    assert message in result.stderr
    assert not any(tmp_path.iterdir())
