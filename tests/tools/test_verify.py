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
from attntrace.cli import app
from attntrace.errors import install_hint
from attntrace.tools.verify import (
    MHA,
    SDPA,
    TOLERANCES,
    Tolerance,
    compare,
    tolerance,
    verify_attention,
)
from paths import REPO

torch = pytest.importorskip("torch")
GRID = [  # (batch, seq, hidden, heads, scale)
    (None, 1, 8, 1, None),
    (None, 5, 16, 4, None),
    (2, 4, 16, 2, None),
    (None, 6, 64, 8, 1.0),
    (3, 3, 32, 4, 0.3),
]


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize(("batch", "seq", "hidden", "heads", "scale"), GRID)
def test_verify_passes_over_a_grid(
    dtype: str, batch: int | None, seq: int, hidden: int, heads: int, scale: float | None
) -> None:
    config = AttentionConfig(
        batch=batch, seq=seq, hidden=hidden, heads=heads, dtype=dtype, seed=seq, scale=scale
    )
    report = verify_attention(config)
    assert report.ok, report.failures
    assert [c.name for c in report.steps] == list(trace_attention(config, "shape").names)
    assert {(c.name, c.left, c.right) for c in report.references} == {
        (name, be, ref)
        for name in ("output", "weights")
        for be in ("numpy", "torch")
        for ref in (MHA, SDPA)
    }
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

    def softmax_(
        self, x: np.ndarray, scale: float = 1.0
    ) -> np.ndarray:  # the in-place variant, as wrong
        return self.softmax(x * x.dtype.type(scale))

    # eager's blocks, as wrong
    def softmax_into(self, x: np.ndarray, out: np.ndarray, in_range: bool = False) -> None:
        out[...] = self.softmax(x)

    # one softmax kernel: the blocks call softmax_into
    def softmax_sums_(self, x: np.ndarray, in_range: bool = False) -> None:
        return None


def test_a_wrong_backend_fails_verify() -> None:
    from attntrace.backends import get_backend

    report = verify_attention(
        AttentionConfig(seq=4, hidden=8, heads=2), backends=(WrongSoftmax(), get_backend("torch"))
    )
    assert not report.ok
    failed = {(c.name, c.left, c.right) for c in report.failures}
    assert ("weights", "wrong", "torch") in failed
    assert ("output", "wrong", MHA) in failed
    assert ("scores", "wrong", "torch") not in failed  # everything before the softmax still agrees
    assert not any(c.left == "torch" for c in report.failures)


def test_cli_verify_exits_0_within_tolerance() -> None:
    result = CliRunner().invoke(
        app, ["verify", "--hidden", "8", "--heads", "2", "--batch", "2", "--dtype", "float64"]
    )
    assert result.exit_code == 0, result.output
    assert "PASS: all 26 comparisons within the float64 tolerance" in result.stdout
    assert "nn.MultiheadAttention" in result.stdout
    assert "SDPA" in result.stdout


def test_cli_verify_exits_1_beyond_tolerance(monkeypatch: pytest.MonkeyPatch) -> None:
    import attntrace.tools.verify as verify_module

    real = verify_module.get_backend

    def double(name: str) -> Any:
        return WrongSoftmax() if name == "numpy" else real(name)

    monkeypatch.setattr(verify_module, "get_backend", double)
    result = CliRunner().invoke(app, ["verify", "--hidden", "8", "--heads", "2"])
    assert result.exit_code == 1
    assert "FAIL:" in result.stdout
    assert "weights (wrong vs torch)" in result.stdout


@pytest.mark.slow
def test_cli_verify_without_torch_exits_2_with_the_install_hint() -> None:
    code = (
        "import sys; sys.modules['torch'] = None; sys.argv = ['attntrace', 'verify', "
        "'--hidden', '8', '--heads', '2']; "
        "from attntrace.cli import main; main()"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    result = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )
    assert result.returncode == 2
    assert result.stderr.startswith("attntrace: error: ")
    assert install_hint("torch") in result.stderr
    assert result.stderr.count("\n") == 1


def test_cli_verify_refuses_bfloat16() -> None:
    result = CliRunner().invoke(
        app, ["verify", "--hidden", "8", "--heads", "2", "--dtype", "bfloat16"]
    )
    assert result.exit_code == 2
    assert "numpy, which has no bfloat16" in result.stderr


def test_compare_fails_on_nan_and_on_a_shape_mismatch() -> None:
    tol = Tolerance(1e-4, 1e-5)
    assert not compare("x", "a", "b", np.array([np.nan]), np.array([1.0]), tol).ok
    assert not compare("x", "a", "b", np.zeros(3), np.zeros(4), tol).ok
    assert compare(
        "x", "a", "b", np.array([100.0, 0.0]), np.array([100.0, 5e-4]), tol
    ).ok  # atol is relative to max|b|
    assert not compare("x", "a", "b", np.array([1.0, 0.0]), np.array([1.0, 5e-4]), tol).ok


def test_tolerance_widens_with_hidden() -> None:
    assert tolerance(AttentionConfig(hidden=64, heads=1, dtype="float32")) == TOLERANCES["float32"]
    wide = tolerance(AttentionConfig(hidden=4096, heads=32, dtype="float32"))
    assert wide.rtol == pytest.approx(8 * TOLERANCES["float32"].rtol)


def test_importing_files_tools_and_cli_imports_no_optional_library() -> None:
    code = (
        "import sys, attntrace.files, attntrace.tools.verify, attntrace.tools.reference, "
        "attntrace.tools.demo, attntrace.cli; "
        "print(sorted(m for m in ('torch', 'safetensors') if m in sys.modules))"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    result = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=True,
    )
    assert result.stdout.strip() == "[]"


# --- every variant ----------------------------------------------------------------------------

VARIANTS: dict[str, dict[str, Any]] = {
    "causal": {"batch": 2, "seq": 5, "hidden": 12, "heads": 3, "causal": True},
    "padding": {"batch": 3, "seq": 4, "hidden": 8, "heads": 2, "key_lengths": (4, 2, 1)},
    "causal+padding": {
        "batch": 2,
        "seq": 5,
        "hidden": 8,
        "heads": 2,
        "causal": True,
        "key_lengths": (5, 2),
    },
    "cross": {"batch": 2, "seq": 3, "kv_seq": 6, "hidden": 8, "heads": 2},
    "cross kv-hidden causal": {
        "seq": 3,
        "kv_seq": 5,
        "kv_hidden": 6,
        "hidden": 8,
        "heads": 2,
        "causal": True,
    },
    "gqa": {"batch": 2, "seq": 4, "hidden": 16, "heads": 4, "kv_heads": 2},
    "mqa causal": {"seq": 5, "hidden": 16, "heads": 4, "kv_heads": 1, "causal": True},
    "head-dim no-bias": {"seq": 3, "hidden": 6, "heads": 2, "head_dim_override": 5, "bias": False},
    "no-bias": {"batch": 2, "seq": 3, "hidden": 8, "heads": 2, "bias": False, "scale": 0.5},
    "rope": {"batch": 2, "seq": 6, "hidden": 16, "heads": 2, "rope": True, "rope_base": 500.0},
    "everything": {
        "batch": 2,
        "seq": 5,
        "hidden": 12,
        "heads": 4,
        "kv_heads": 2,
        "head_dim_override": 4,
        "kv_hidden": 7,
        "bias": False,
        "causal": True,
        "key_lengths": (5, 3),
        "rope": True,
    },
}
MHA_APPLIES = {"causal", "padding", "causal+padding", "cross", "cross kv-hidden causal", "no-bias"}


@pytest.mark.slow
@pytest.mark.parametrize("algorithm", ["eager", "flash"])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_verify_passes_for_every_variant(variant: str, dtype: str, algorithm: str) -> None:
    config = AttentionConfig(**VARIANTS[variant], dtype=dtype, algorithm=algorithm, block_size=2)
    report = verify_attention(config)
    assert report.ok, report.failures
    assert [c.name for c in report.steps] == list(trace_attention(config, "shape").names)
    names = ("output", "weights") if algorithm == "eager" else ("output",)
    assert [(c.name, c.left, c.right) for c in report.references] == [
        (name, be, ref) for be in ("numpy", "torch") for name in names for ref in (MHA, SDPA)
    ]
    mha = [c for c in report.references if c.right == MHA]
    assert all(c.skipped is None for c in mha) == (variant in MHA_APPLIES)
    assert all(
        c.skipped is None and np.isfinite(c.max_abs) for c in report.references if c.right == SDPA
    )


def _masks() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(3)
    keep = rng.random((2, 1, 4, 4)) < 0.7
    keep[1, 0, 2] = False  # a query row without any key
    additive = np.where(rng.random((4, 4)) < 0.8, rng.standard_normal((4, 4)), -np.inf)
    return {"bool": keep, "additive": additive, "bool heads": rng.random((2, 4, 4)) < 0.8}


@pytest.mark.parametrize("algorithm", ["eager", "flash"])
@pytest.mark.parametrize("kind", ["bool", "additive", "bool heads"])
def test_verify_with_a_mask_file(kind: str, algorithm: str) -> None:
    mask = _masks()[kind]
    config = AttentionConfig(
        batch=2, seq=4, hidden=8, heads=2, dtype="float64", algorithm=algorithm, block_size=3
    )
    report = verify_attention(config, mask=mask)
    assert report.ok, report.failures
    if kind == "bool":  # a row without any key: SDPA gives zeros, nn.MultiheadAttention NaN
        assert report.notes
        assert all("NaN" in (c.skipped or "") for c in report.references if c.right == MHA)
    else:
        assert not any(c.skipped for c in report.references)


def test_rope_reference_is_the_complex_formulation_of_the_tests() -> None:
    from attntrace.tools.reference import rope_reference

    x = torch.from_numpy(np.random.default_rng(0).standard_normal((2, 3, 7, 8)))
    d, angles = (
        8,
        torch.outer(
            torch.arange(7, dtype=torch.float64),
            500.0 ** (-torch.arange(0, 8, 2, dtype=torch.float64) / 8),
        ),
    )
    z = torch.complex(x[..., : d // 2], x[..., d // 2 :]) * torch.polar(
        torch.ones_like(angles), angles
    )
    np.testing.assert_allclose(
        rope_reference(x, 500.0).numpy(),
        torch.cat((z.real, z.imag), -1).numpy(),
        rtol=1e-12,
        atol=1e-12,
    )


def test_a_wrong_backend_fails_verify_on_a_variant() -> None:
    from attntrace.backends import get_backend

    config = AttentionConfig(batch=2, seq=4, hidden=16, heads=4, kv_heads=2, causal=True, rope=True)
    report = verify_attention(config, backends=(WrongSoftmax(), get_backend("torch")))
    failed = {(c.name, c.left, c.right) for c in report.failures}
    assert ("output", "wrong", SDPA) in failed
    assert ("weights", "wrong", "torch") in failed
    assert ("masked", "wrong", "torch") not in failed


class WrongTile(NumpyBackend):
    """A deliberately wrong flash backend: every exp of the online softmax 1% too large."""

    name = "wrong"

    def exp(self, x: np.ndarray, *, inplace: bool = False) -> np.ndarray:
        return super().exp(x, inplace=inplace) * 1.01


def test_a_wrong_flash_backend_fails_verify() -> None:
    from attntrace.backends import get_backend

    config = AttentionConfig(
        batch=2, seq=5, hidden=8, heads=2, causal=True, algorithm="flash", block_size=2
    )
    report = verify_attention(config, backends=(WrongTile(), get_backend("torch")))
    assert ("output", "wrong", SDPA) in {(c.name, c.left, c.right) for c in report.failures}


VARIANT_ARGS = [
    ["--batch", "2", "--seq", "5", "--causal", "--key-lengths", "5,3", "--kv-heads", "1", "--rope"],
    ["--seq", "3", "--kv-seq", "6", "--kv-hidden", "5", "--no-bias"],
    ["--seq", "6", "--causal", "--algorithm", "flash", "--block-size", "4", "--head-dim", "3"],
]


@pytest.mark.parametrize("args", VARIANT_ARGS, ids=["gqa-rope-masks", "cross", "flash"])
def test_cli_verify_takes_the_variant_options(args: list[str]) -> None:
    result = CliRunner().invoke(
        app,
        ["verify", "--hidden", "8", "--heads", "2", "--dtype", "float64", *args],
        env={"COLUMNS": "120"},
    )
    assert result.exit_code == 0, result.output
    assert "PASS: all" in result.stdout


@pytest.mark.slow
def test_cli_verify_with_a_preset_and_a_mask_file(tmp_path: Path) -> None:
    path = tmp_path / "mask.npy"
    np.save(path, _masks()["bool"])
    result = CliRunner().invoke(
        app,
        [
            "verify",
            "--preset",
            "llama-3-8b",
            "--hidden",
            "64",
            "--heads",
            "4",
            "--kv-heads",
            "2",
            "--batch",
            "2",
            "--seq",
            "4",
            "--mask",
            str(path),
        ],
        env={"COLUMNS": "120"},
    )
    assert result.exit_code == 0, result.output
    assert "n/a: nn.MultiheadAttention has no grouped-query attention (--kv-heads)" in result.stdout
    assert "note: 4 query row(s) attend to no key" in result.stdout
    assert "(4 n/a)" in result.stdout


def test_cli_verify_exits_1_for_a_wrong_backend_on_a_variant(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import attntrace.tools.verify as verify_module

    real = verify_module.get_backend
    monkeypatch.setattr(
        verify_module, "get_backend", lambda name: WrongSoftmax() if name == "numpy" else real(name)
    )
    result = CliRunner().invoke(
        app, ["verify", "--hidden", "8", "--heads", "2", "--kv-heads", "1", "--causal", "--rope"]
    )
    assert result.exit_code == 1
    assert "output (wrong vs SDPA)" in result.stdout or "weights (wrong vs torch)" in result.stdout


def test_cli_verify_refuses_rope_base_without_rope() -> None:
    result = CliRunner().invoke(
        app, ["verify", "--hidden", "8", "--heads", "2", "--rope-base", "500"]
    )
    assert result.exit_code == 2
    assert "--rope" in result.stderr
