"""attntrace diff on the modules of a user test (timm's ViT block, nanoGPT, HF Llama, Phi-3):
the memory budget checked before anything is allocated, masks the user's code applies, packed
projections, --input for module classes, and dtypes numpy lacks."""

from __future__ import annotations

import json
import tracemalloc
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytestmark = pytest.mark.slow  # real processes or seconds per test

pytest.importorskip("torch")

#: timm's Attention block (dim 64, 4 heads); CALLS records the shape of every input it gets.
VIT = """
import torch
import torch.nn as nn

CALLS = []

class Attention(nn.Module):
    def __init__(self, dim=64, num_heads=4, qkv_bias=True):
        super().__init__()
        self.num_heads = num_heads
        self.head_dim = dim // num_heads
        self.scale = self.head_dim ** -0.5
        self.qkv = nn.Linear(dim, dim * 3, bias=qkv_bias)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x):
        CALLS.append(tuple(x.shape))
        B, N, C = x.shape
        qkv = self.qkv(x).reshape(B, N, 3, self.num_heads, self.head_dim).permute(2, 0, 3, 1, 4)
        q, k, v = qkv.unbind(0)
        q = q * self.scale
        attn = q @ k.transpose(-2, -1)
        attn = attn.softmax(dim=-1)
        x = attn @ v
        x = x.transpose(1, 2).reshape(B, N, C)
        x = self.proj(x)
        return x
"""


def _cli(*args: str) -> Any:
    from typer.testing import CliRunner

    from attntrace.cli import app

    return CliRunner().invoke(app, ["diff", *args])


def _write(tmp_path: Path, name: str, text: str) -> str:
    path = tmp_path / f"{name}.py"
    path.write_text(text)
    return str(path)


def _one_error_line(result: Any) -> str:
    assert result.exit_code == 2, result.output
    assert result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("attntrace: error: "), lines[0]
    assert "Traceback" not in result.output
    return lines[0]


# --- 1. the memory budget ----------------------------------------------------------------


def test_a_diff_over_the_budget_is_refused_before_the_code_runs_at_that_size(
    tmp_path: Path,
) -> None:
    import sys

    target = _write(tmp_path, "vit_budget", VIT)
    result = _cli(
        f"{target}:Attention", "--batch", "2", "--seq", "64", "--heads", "4", "--max-memory", "1MiB"
    )
    line = _one_error_line(result)
    assert "--max-memory" in line
    assert "--seq" in line
    assert "1.00 MiB" in line
    assert "scores (2, 4, 64, 64)" in line
    # the CLI runs the code in a child; the same refusal in process shows which calls ran
    from attntrace import AttentionConfig
    from attntrace.diffing.target import diff_target
    from attntrace.errors import MemoryBudgetError

    config = AttentionConfig(batch=2, seq=64, hidden=64, heads=4)
    with pytest.raises(MemoryBudgetError):
        diff_target(f"{target}:Attention", [], config, {"batch", "seq", "heads"}, None, 2**20)
    module = next(m for m in list(sys.modules.values()) if getattr(m, "__file__", "") == target)
    calls = module.CALLS  # none: timm's names give the weights; else only the short probe
    assert all(shape[1] < 64 for shape in calls), calls


def test_a_diff_within_the_budget_runs(tmp_path: Path) -> None:
    target = _write(tmp_path, "vit_fits", VIT)
    result = _cli(
        f"{target}:Attention",
        "--batch",
        "2",
        "--seq",
        "8",
        "--heads",
        "4",
        "--max-memory",
        "256MiB",
        "-f",
        "json",
    )
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["ok"] is True


def test_the_budget_counts_four_traces_of_every_value() -> None:
    from attntrace import AttentionConfig
    from attntrace.diffing.diff_report import TRACES_HELD, check_diff_memory
    from attntrace.engine.attention import estimate_bytes
    from attntrace.errors import MemoryBudgetError

    config = AttentionConfig(batch=2, seq=8000, hidden=64, heads=4)
    one, _ = estimate_bytes(config, True)
    assert one > 4 * 2 * 4 * 8000 * 8000 * 3  # scores, scaled and weights at least
    check_diff_memory(config, TRACES_HELD * one)  # exactly enough: no error
    with pytest.raises(MemoryBudgetError, match="diff holds the reference"):
        check_diff_memory(config, TRACES_HELD * one - 1)


def test_comparison_works_block_by_block_with_the_numbers_of_verify() -> None:
    from attntrace.diffing.match import _compare
    from attntrace.tools.verify import Tolerance, compare

    rng = np.random.default_rng(0)
    ref = rng.standard_normal((4, 1024, 1024)).astype(np.float32)  # 16 MiB
    user = ref + rng.standard_normal(ref.shape).astype(np.float32) * 1e-6
    ref[0, :5, 7] = user[0, :5, 7] = -np.inf  # masked on both sides: equal
    user[3, 1000, 1] += 0.5  # one element off
    tol = Tolerance(1e-4, 1e-5)
    view = user.transpose(0, 2, 1).copy().transpose(0, 2, 1)  # a non-contiguous layout
    tracemalloc.start()
    try:
        found = _compare(view, ref, tol, "x")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 2 * ref.nbytes  # float64 blocks, not float64 copies of both tensors (4x)
    a, b = user.astype(np.float64), ref.astype(np.float64)
    a[~np.isfinite(ref)] = b[~np.isfinite(ref)] = 0.0
    whole = compare("", "", "", a, b, tol)
    assert (found.max_abs, found.max_rel, found.ok) == (whole.max_abs, whole.max_rel, whole.ok)
    assert found.ok is False
    assert found.max_abs == pytest.approx(0.5, abs=1e-5)


# --- 4. --input for a module class -------------------------------------------------------


def test_input_file_sets_batch_and_seq_for_a_module_class(tmp_path: Path) -> None:
    target = _write(tmp_path, "vit_input", VIT)
    x = np.random.default_rng(2).standard_normal((2, 5, 64)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    result = _cli(
        f"{target}:Attention", "--input", str(tmp_path / "x.npy"), "--heads", "4", "-f", "json"
    )
    assert result.exit_code == 0, result.output
    doc = json.loads(result.output)
    assert (doc["config"]["batch"], doc["config"]["seq"]) == (2, 5)
    assert doc["ok"] is True
    assert doc["rows"][0]["user_shape"] == [2, 5, 64]


#: nanoGPT-style attention that builds its own causal mask with torch.triu and masked_fill.
MASKED = """
import math
import torch
from torch import nn

class Attention(nn.Module):
    def __init__(self, embed_dim=16, num_heads=4):
        super().__init__()
        self.num_heads = num_heads
        self.q_proj = nn.Linear(embed_dim, embed_dim)
        self.k_proj = nn.Linear(embed_dim, embed_dim)
        self.v_proj = nn.Linear(embed_dim, embed_dim)
        self.o_proj = nn.Linear(embed_dim, embed_dim)

    def forward(self, x):
        B, S, H = x.shape
        h = self.num_heads
        q = self.q_proj(x).view(B, S, h, H // h).transpose(1, 2)
        k = self.k_proj(x).view(B, S, h, H // h).transpose(1, 2)
        v = self.v_proj(x).view(B, S, h, H // h).transpose(1, 2)
        scores = q @ k.transpose(-2, -1) / math.sqrt(H // h)
        mask = torch.triu(torch.ones(S, S, dtype=torch.bool), 1)
        scores = scores.masked_fill(mask, float("-inf"))
        return self.o_proj((scores.softmax(-1) @ v).transpose(1, 2).reshape(B, S, H))

torch.manual_seed(0)
in_bfloat16 = Attention().to(torch.bfloat16)
"""


def test_a_mask_the_code_builds_without_causal_is_named_not_an_unknown_step(
    tmp_path: Path,
) -> None:
    """The mistaken reference (causal) has a ``mask`` step the reference lacks: the numbers
    of the blamed tensor are set against the step at the mistake, not looked up and lost."""
    target = _write(tmp_path, "masked", MASKED) + ":Attention"
    result = _cli(target, "--batch", "2", "--seq", "5", "--format", "json")
    assert result.exit_code == 4, result.output  # causal or not: no flag said, CANNOT TELL
    doc = json.loads(result.stdout)
    diagnosis = doc["diagnosis"]
    assert diagnosis["bug"] == "causal-unexpected"
    assert diagnosis["location"] == "masked.py:22"  # the triu line: the mask's first numbers
    assert "--causal" in diagnosis["fix"]
    assert doc["verdict"] == "cannot tell"
    assert doc["cannot_tell"]["remedy"].startswith("pass --causal if that is the model's")
    assert _cli(target, "--batch", "2", "--seq", "5", "--causal").exit_code == 0
    assert _cli(target, "--batch", "2", "--seq", "5", "--no-causal").exit_code == 1


def test_bfloat16_is_refused_in_one_line_and_a_bfloat16_module_compares_in_float32(
    tmp_path: Path,
) -> None:
    path = _write(tmp_path, "masked", MASKED)
    refused = _cli(f"{path}:Attention", "--batch", "2", "--seq", "5", "--dtype", "bfloat16")
    assert refused.exit_code == 2
    assert refused.stderr.count("\n") == 1
    assert "numpy, which has no bfloat16" in refused.stderr
    assert "--dtype float32" in refused.stderr
    converted = _cli(f"{path}:in_bfloat16", "--batch", "2", "--seq", "5", "--causal")
    assert converted.exit_code == 0, converted.output
    assert "MATCH" in converted.stdout


#: The x-transformers / vit-pytorch way: q alone, k and v from one packed to_kv, chunked.
PACKED_KV = """
import torch
from torch import nn

class Attn(nn.Module):
    def __init__(self, dim=48, heads=4):
        super().__init__()
        self.heads, self.d = heads, dim // heads
        self.to_q = nn.Linear(dim, dim, bias=False)
        self.to_kv = nn.Linear(dim, 2 * dim, bias=False)
        self.to_out = nn.Linear(dim, dim)

    def forward(self, x):
        B, S, _ = x.shape
        q = self.to_q(x)
        k, v = self.to_kv(x).chunk(2, dim=-1)
        q, k, v = (t.reshape(B, S, self.heads, self.d).transpose(1, 2) for t in (q, k, v))
        w = (q @ k.transpose(-1, -2) * self.d ** -0.5).softmax(dim=-1)
        return self.to_out((w @ v).transpose(1, 2).reshape(B, S, -1))
"""


def test_a_packed_kv_projection_is_cut_into_k_and_v(tmp_path: Path) -> None:
    path = _write(tmp_path, "packed_kv", PACKED_KV)
    result = _cli(f"{path}:Attn", "--batch", "2", "--seq", "5", "--format", "json")
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert doc["diagnosis"] is None
    assert {r["step"]: r["status"] for r in doc["rows"]}["output"] == "match"
    swapped = _write(
        tmp_path, "swapped_kv", PACKED_KV.replace("k, v = self.to_kv", "v, k = self.to_kv")
    )
    result = _cli(f"{swapped}:Attn", "--batch", "2", "--seq", "5", "--format", "json")
    assert result.exit_code == 1
    assert json.loads(result.stdout)["diagnosis"]["bug"] == "swapped-kv"
