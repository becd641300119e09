"""Issue 41, trace's side: numpy arrays from any source are recorded (np.random.default_rng(),
np.load, np.frombuffer, views and slices of them); a mask made with tril is the mask, never x
or x_kv; a run that records nothing is exit 2; a shape error names the first step whose axes
went wrong beside the line that crashed."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import attntrace


def _attend(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    S, H = x.shape
    q = (x @ w.T).reshape(S, 2, H // 2).transpose(1, 0, 2)  # (h, S, d)
    k = (x @ w[::-1].T).reshape(S, 2, H // 2).transpose(1, 0, 2)  # (h, S, d)
    scores: np.ndarray = q @ k.transpose(0, 2, 1) / np.sqrt(H // 2)  # (h, S, S)
    return scores


@pytest.mark.parametrize("source", ["default_rng", "load", "frombuffer"])
def test_numpy_arrays_from_any_source_are_recorded(source: str, tmp_path: Path) -> None:
    raw, weight = np.random.default_rng(1).standard_normal((4, 8)), np.eye(8) * 0.5
    np.save(tmp_path / "x.npy", raw)
    np.save(tmp_path / "w.npy", weight)
    with attntrace.capture() as t:
        if source == "default_rng":
            rng = np.random.default_rng(0)
            x = rng.standard_normal((4, 8))
            w = rng.standard_normal((8, 8))
        elif source == "load":
            x = np.load(tmp_path / "x.npy")
            w = np.load(tmp_path / "w.npy")[:, ::-1]  # a view of a loaded array
        else:
            x = np.frombuffer(raw.tobytes(), dtype=np.float64).reshape(4, 8)
            w = np.frombuffer(weight.tobytes(), dtype=np.float64).reshape(8, 8)
        scores = _attend(x, w)
    assert type(scores).__name__ == "TracedArray"
    assert t["scores"].shape == (2, 4, 4)
    assert t["scores"].axes == ("h", "S", "S")
    np.testing.assert_allclose(t["scaled"].value, np.asarray(scores))
    assert t["x"].axes == ("S", "H")


def test_a_tril_mask_is_the_mask_never_the_input_and_no_cross_attention() -> None:
    """nanoGPT's way: ``torch.tril(torch.ones(T, T))`` made (and registered) before x exists."""
    torch = pytest.importorskip("torch")
    with attntrace.capture() as t:
        bias = torch.tril(torch.ones(16, 16)).view(1, 1, 16, 16)  # (1, 1, T, T)
        x = torch.randn(2, 6, 32)
        q = x.view(2, 6, 4, 8).transpose(1, 2)  # (B, h, S, d)
        att = q @ q.transpose(-2, -1)  # (B, h, S, S)
        att = att.masked_fill(bias[:, :, :6, :6] == 0, float("-inf"))
        att.softmax(dim=-1)
    roles = {s.role: s for s in t.steps if s.role}
    assert roles["x"].shape == (2, 6, 32)
    assert roles["x"].axes == ("B", "S", "H")
    assert "x_kv" not in roles
    assert roles["mask"].shape == (16, 16)
    assert t["scores"].axes == ("B", "h", "S", "S")


def _cli(*args: str) -> object:
    from typer.testing import CliRunner

    from attntrace.cli import app

    return CliRunner().invoke(app, ["trace", *args])


SHAPE_ERROR = """import torch

B, S, H, h = 2, 6, 32, 4
x = torch.randn(B, S, H)
w_q, w_k = torch.randn(H, H), torch.randn(H, H)
q = (x @ w_q.T).view(B, S, h, H // h)
k = (x @ w_k.T).view(B, S, h, H // h)
scores = q @ k.transpose(-2, -1)
mask = torch.tril(torch.ones(S, S, dtype=torch.bool))
scores = scores.masked_fill(~mask, float("-inf"))
"""


@pytest.mark.slow
def test_a_run_that_records_nothing_is_exit_2_and_a_shape_error_names_its_first_step(
    tmp_path: Path,
) -> None:
    pytest.importorskip("torch")
    nothing = tmp_path / "nothing.py"
    nothing.write_text("import numpy as np\nanswer = 6 * 7\n")
    result = _cli(str(nothing))
    assert result.exit_code == 2, result.output  # type: ignore[attr-defined]
    assert "no tensor operation was recorded" in result.stderr  # type: ignore[attr-defined]
    crash = tmp_path / "crash.py"
    crash.write_text(SHAPE_ERROR)
    result = _cli(str(crash))
    assert result.exit_code == 1
    text = " ".join(result.output.split())  # type: ignore[attr-defined]
    assert "shape error at crash.py:10" in text
    assert "first wrong: scores at crash.py:8 (q @ k.transpose(-2, -1)) is (B, S, h, h)" in text
    assert "add size-1 axes" not in text  # the local cure of the crash is not offered
    doc = json.loads(_cli(str(crash), "--format", "json").stdout)  # type: ignore[attr-defined]
    assert doc["failure"]["fix"].startswith("scores at crash.py:8 (q @ k.transpose(-2, -1)) is")
