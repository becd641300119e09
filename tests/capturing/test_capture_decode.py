"""attntrace trace --past N: a module called as a decode step after a prefill of N tokens made
its KV cache (a (k, v) argument, or a transformers class's DynamicCache); the steps carry the
cache's shapes and roles: k_cache (B, g, N, d), k_all (B, g, N+S, d), scores (B, h, S, N+S)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.slow  # real processes or seconds per test

pytest.importorskip("torch")

DATA = Path(__file__).parent.parent / "data" / "decode"


def _trace(*args: str) -> Any:
    from typer.testing import CliRunner

    from attntrace.cli import app

    return CliRunner().invoke(app, ["trace", *args])


def _by_role(doc: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {s["role"]: s for s in doc["steps"] if s.get("role")}


@pytest.mark.parametrize(("seq", "past"), [(1, 5), (3, 2)])
def test_tuple_cache_module_traced_with_the_cache_shapes_and_roles(seq: int, past: int) -> None:
    target = f"{DATA / 'gpt2_kv_cache.py'}:CausalSelfAttention"
    out = _trace(target, "--batch", "2", "--seq", str(seq), "--past", str(past), "-f", "json")
    assert out.exit_code == 0, out.output
    steps = _by_role(json.loads(out.output))
    assert steps["k_cache"]["shape"] == [2, 4, past, 8]
    assert steps["k_cache"]["axes"] == ["B", "g", "N", "d"]
    assert steps["v_cache"]["location"] == "input"
    assert steps["k_all"]["shape"] == steps["v_all"]["shape"] == [2, 4, past + seq, 8]
    assert steps["k_all"]["axes"] == ["B", "g", "N+S", "d"]
    assert steps["k_all"]["source"] == "torch.cat((past_key, k), dim=-2)"
    assert steps["k_t"]["axes"] == ["B", "g", "d", "N+S"]
    assert steps["scores"]["shape"] == [2, 4, seq, past + seq]
    assert steps["scores"]["axes"] == ["B", "h", "S", "N+S"]
    assert steps["weights"]["shape"] == [2, 4, seq, past + seq]
    assert steps["context"]["shape"] == [2, 4, seq, 8]
    sliced = next(s for s in json.loads(out.output)["steps"] if s["name"] == "causal_mask")
    assert sliced["source"].startswith("self.bias[:, :, key_length - query_length")
    assert sliced["shape"] == [1, 1, seq, past + seq]
    assert sliced["axes"] == ["1", "1", "1" if seq == 1 else "S", "N+S"]  # not "?"


def test_transformers_class_traced_with_a_dynamic_cache() -> None:
    pytest.importorskip("transformers")
    args = ["--batch", "1", "--seq", "2", "--past", "4", "--hidden", "32"]
    out = _trace(
        "transformers:LlamaAttention", *args, "--init", "num_key_value_heads=2", "-f", "json"
    )
    assert out.exit_code == 0, out.output
    steps = _by_role(json.loads(out.output))
    assert steps["k_cache"]["shape"] == [1, 2, 4, 8]
    assert steps["k_all"]["shape"] == [1, 2, 6, 8]
    assert steps["k_all"]["location"].startswith("cache_utils.py:")  # DynamicCache.update
    assert steps["k_rep"]["axes"] == ["B", "h", "N+S", "d"]
    assert steps["scores"]["axes"] == ["B", "h", "S", "N+S"]
    assert steps["k_rot"]["shape"] == [1, 2, 2, 8]


def test_past_refused_for_a_script_a_function_and_a_module_without_a_cache(
    tmp_path: Path,
) -> None:
    script = tmp_path / "s.py"
    script.write_text("print(1)\n")
    out = _trace(str(script), "--past", "3")
    assert out.exit_code == 2
    assert "--past needs FILE.py:NAME" in out.output
    fn = tmp_path / "fn.py"
    fn.write_text("def attend(x):\n    return x\n")
    out = _trace(f"{fn}:attend", "--past", "3")
    assert out.exit_code == 2, out.output
    assert "--past 3: attend() is a function" in out.output
    real = Path(__file__).parent.parent / "data" / "real_code" / "vit_pytorch_attention.py"
    out = _trace(f"{real}:Attention", "--init", "dim=32", "--past", "3")
    assert out.exit_code == 2, out.output
    assert "--past 3: Attention.forward takes no cache" in out.output
    out = _trace(f"{DATA / 'gpt2_kv_cache.py'}:CausalSelfAttention", "--past", "x")
    assert out.exit_code == 2
    assert "--past must be a whole number" in out.output
