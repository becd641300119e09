"""`verify --backward`: every gradient of both backends against torch autograd (plain eager
torch, SDPA, nn.MultiheadAttention) and the saved bytes against saved_tensors_hooks."""

from __future__ import annotations

import json

import numpy as np
import pytest
from typer.testing import CliRunner

from attntrace import AttentionConfig

pytest.importorskip("torch")

from attntrace.cli import app
from attntrace.tools.gradients import EAGER, torch_gradients
from attntrace.tools.verify import verify_attention

runner = CliRunner()


@pytest.mark.slow
@pytest.mark.parametrize(
    "fields",
    [
        {"batch": 2, "causal": True},
        {"kv_heads": 1, "rope": True},
        {"kv_seq": 5, "kv_hidden": 6},
        {"softcap": 2.0, "scale": 0.3},
        {"relative_bias": "8,16", "batch": 2, "causal": True},
        {"qk_norm": "head", "rope": True, "kv_heads": 1},
    ],
)
def test_verify_backward_passes_for_each_variant(fields: dict[str, object]) -> None:
    report = verify_attention(AttentionConfig(seq=4, hidden=8, heads=2, **fields), backward=True)
    assert report.ok, report.failures
    names = {c.name for c in report.references}
    assert {"d_x", "d_w_q", "d_w_o", "saved bytes"} <= names
    assert any(c.name.startswith("d_") for c in report.steps)  # numpy vs torch, step by step


def test_a_wrong_gradient_fails_against_every_reference() -> None:
    from attntrace import trace_attention

    trace = trace_attention(
        AttentionConfig(seq=4, hidden=8, heads=2, dtype="float64"), backward=True
    )
    refs = torch_gradients(trace)
    for name in ("SDPA", EAGER, "nn.MultiheadAttention"):
        values = refs[name]
        assert not isinstance(values, str)
        np.testing.assert_allclose(trace["d_w_k"].value, values["d_w_k"], rtol=1e-10, atol=1e-12)
        # the transposed gradient, a classic bug, is far from every reference
        assert not np.allclose(trace["d_w_k"].value.T, values["d_w_k"], rtol=1e-3)


@pytest.mark.slow
def test_verify_backward_from_the_command_line() -> None:
    args = ["verify", "--backward", "--seq", "4", "--hidden", "8", "--heads", "2", "--format"]
    result = runner.invoke(app, [*args, "json"], env={"COLUMNS": "100"})
    assert result.exit_code == 0, result.stdout
    doc = json.loads(result.stdout)
    assert doc["ok"] is True
    saved = [r for r in doc["references"] if r["name"] == "saved bytes"]
    assert saved[0]["ok"] is True
    assert saved[0]["max_abs"] == 0.0
    flash = [*args, "json", "--algorithm", "flash", "--causal", "--seq", "8"]
    result = runner.invoke(app, flash, env={"COLUMNS": "100"})
    assert result.exit_code == 0, result.stdout  # flash's tiled gradients, eager's saved count
    assert json.loads(result.stdout)["ok"] is True
