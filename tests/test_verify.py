"""attntrace verify: numpy and torch agree step by step and with PyTorch's own attention; a wrong
backend is caught; torch missing is exit 2 with the install hint."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from typer.testing import CliRunner

from attntrace import AttentionConfig, trace_attention
from attntrace.backends.numpy_backend import NumpyBackend
from attntrace.backends.torch_backend import INSTALL_HINT
from attntrace.cli import app
from attntrace.verify import MHA, SDPA, TOLERANCES, Tolerance, compare, tolerance, verify_attention

torch = pytest.importorskip("torch")
REPO = Path(__file__).resolve().parents[1]
GRID = [  # (batch, seq, hidden, heads, scale)
    (None, 1, 8, 1, None), (None, 5, 16, 4, None), (2, 4, 16, 2, None), (None, 6, 64, 8, 1.0), (3, 3, 32, 4, 0.3),
]


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize(("batch", "seq", "hidden", "heads", "scale"), GRID)
def test_verify_passes_over_a_grid(dtype: str, batch: int | None, seq: int, hidden: int, heads: int, scale: float | None) -> None:
    config = AttentionConfig(batch=batch, seq=seq, hidden=hidden, heads=heads, dtype=dtype, seed=seq, scale=scale)
    report = verify_attention(config)
    assert report.ok, report.failures
    assert [c.name for c in report.steps] == list(trace_attention(config, "shape").names)
    assert {(c.name, c.left, c.right) for c in report.references} == {
        (name, be, ref) for name in ("output", "weights") for be in ("numpy", "torch") for ref in (MHA, SDPA)}
    assert max(c.max_abs for c in report.steps) < 100 * tolerance(config).atol


def test_numpy_trace_equals_torch_multihead_attention_independently() -> None:
    """The check verify makes, written out here without verify's code."""
    config = AttentionConfig(batch=2, seq=4, hidden=8, heads=2, dtype="float64")
    trace = trace_attention(config)
    p = {name: torch.from_numpy(v) for name, v in trace.params.items()}
    mha = torch.nn.MultiheadAttention(8, 2, batch_first=True, dtype=torch.float64).eval()
    with torch.no_grad():
        mha.in_proj_weight.copy_(torch.cat([p["w_q"], p["w_k"], p["w_v"]]))
        mha.in_proj_bias.copy_(torch.cat([p["b_q"], p["b_k"], p["b_v"]]))
        mha.out_proj.weight.copy_(p["w_o"])
        mha.out_proj.bias.copy_(p["b_o"])
        x = torch.from_numpy(trace["x"].value)
        out, weights = mha(x, x, x, need_weights=True, average_attn_weights=False)
    np.testing.assert_allclose(trace["output"].value, out.numpy(), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(trace["weights"].value, weights.numpy(), rtol=1e-10, atol=1e-12)


class WrongSoftmax(NumpyBackend):
    """A deliberately wrong backend: softmax over the query axis instead of the key axis."""

    name = "wrong"

    def softmax(self, x: np.ndarray) -> np.ndarray:
        e = np.exp(x - x.max(axis=-2, keepdims=True))
        out: np.ndarray = e / e.sum(axis=-2, keepdims=True)
        return out


def test_a_wrong_backend_fails_verify() -> None:
    from attntrace.backends import get_backend

    report = verify_attention(AttentionConfig(seq=4, hidden=8, heads=2), backends=(WrongSoftmax(), get_backend("torch")))
    assert not report.ok
    failed = {(c.name, c.left, c.right) for c in report.failures}
    assert ("weights", "wrong", "torch") in failed
    assert ("output", "wrong", MHA) in failed
    assert ("scores", "wrong", "torch") not in failed  # everything before the softmax still agrees
    assert not any(c.left == "torch" for c in report.failures)


def test_cli_verify_exits_0_within_tolerance() -> None:
    result = CliRunner().invoke(app, ["verify", "--hidden", "8", "--heads", "2", "--batch", "2", "--dtype", "float64"])
    assert result.exit_code == 0, result.output
    assert "PASS: all 26 comparisons within the float64 tolerance" in result.stdout
    assert "nn.MultiheadAttention" in result.stdout
    assert "SDPA" in result.stdout


def test_cli_verify_exits_1_beyond_tolerance(monkeypatch: pytest.MonkeyPatch) -> None:
    import attntrace.verify as verify_module

    real = verify_module.get_backend

    def double(name: str) -> Any:
        return WrongSoftmax() if name == "numpy" else real(name)

    monkeypatch.setattr(verify_module, "get_backend", double)
    result = CliRunner().invoke(app, ["verify", "--hidden", "8", "--heads", "2"])
    assert result.exit_code == 1
    assert "FAIL:" in result.stdout
    assert "weights (wrong vs torch)" in result.stdout


def test_cli_verify_without_torch_exits_2_with_the_install_hint() -> None:
    code = "import sys; sys.modules['torch'] = None; sys.argv = ['attntrace', 'verify', '--hidden', '8', '--heads', '2']; " \
           "from attntrace.cli import main; main()"
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120, check=False)
    assert result.returncode == 2
    assert result.stderr.startswith("attntrace: error: ")
    assert INSTALL_HINT in result.stderr
    assert result.stderr.count("\n") == 1


def test_cli_verify_refuses_bfloat16() -> None:
    result = CliRunner().invoke(app, ["verify", "--hidden", "8", "--heads", "2", "--dtype", "bfloat16"])
    assert result.exit_code == 2
    assert "numpy, which has no bfloat16" in result.stderr


def test_compare_fails_on_nan_and_on_a_shape_mismatch() -> None:
    tol = Tolerance(1e-4, 1e-5)
    assert not compare("x", "a", "b", np.array([np.nan]), np.array([1.0]), tol).ok
    assert not compare("x", "a", "b", np.zeros(3), np.zeros(4), tol).ok
    assert compare("x", "a", "b", np.array([100.0, 0.0]), np.array([100.0, 5e-4]), tol).ok  # atol is relative to max|b|
    assert not compare("x", "a", "b", np.array([1.0, 0.0]), np.array([1.0, 5e-4]), tol).ok


def test_tolerance_widens_with_hidden() -> None:
    assert tolerance(AttentionConfig(hidden=64, heads=1, dtype="float32")) == TOLERANCES["float32"]
    wide = tolerance(AttentionConfig(hidden=4096, heads=32, dtype="float32"))
    assert wide.rtol == pytest.approx(8 * TOLERANCES["float32"].rtol)


def test_importing_the_new_modules_imports_no_optional_library() -> None:
    code = ("import sys, attntrace.files, attntrace.verify, attntrace.demo, attntrace.cli; "
            "print(sorted(m for m in ('torch', 'safetensors') if m in sys.modules))")
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60, check=True)
    assert result.stdout.strip() == "[]"
