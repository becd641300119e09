"""flex_attention opened (capturing/flex.py): with torch 2.13 it runs eagerly on the CPU
(unfused); the replayed weights against softmax(score_mod(q·kᵀ·scale) masked by the block
mask's mask_mod), computed here independently in float64, the context against flex's own
output; a causal and a sliding-window block mask, and the fraction of blocks they skip."""

from __future__ import annotations

import math
import warnings
from typing import Any

import numpy as np
import pytest

import attntrace

torch = pytest.importorskip("torch")
flex = pytest.importorskip("torch.nn.attention.flex_attention")
#: flex_attention's eager path warms torch's dynamo up on its first call (~5 s here)
pytestmark = [pytest.mark.slow, pytest.mark.e2e]

B, h, S, d, BLOCK, WINDOW = 1, 2, 16, 8, 4, 5


def causal(b: Any, head: Any, q_idx: Any, kv_idx: Any) -> Any:
    return q_idx >= kv_idx


def window(b: Any, head: Any, q_idx: Any, kv_idx: Any) -> Any:
    return (q_idx >= kv_idx) & (q_idx - kv_idx < WINDOW)


def relative(score: Any, b: Any, head: Any, q_idx: Any, kv_idx: Any) -> Any:
    return score + 0.1 * (q_idx - kv_idx)


def _keep(rule: str) -> np.ndarray:
    """The (S, N) keep mask written out here."""
    i, j = np.arange(S)[:, None], np.arange(S)[None, :]
    return (i >= j) & ((i - j < WINDOW) if rule == "window" else True)


@pytest.fixture(scope="module")
def qkv() -> tuple[Any, Any, Any]:
    g = torch.Generator().manual_seed(0)
    return tuple(torch.randn(B, h, S, d, generator=g) for _ in range(3))  # (B, h, S, d)


@pytest.mark.parametrize("rule", ["causal", "window"])
def test_score_mod_and_block_mask(rule: str, qkv: tuple[Any, Any, Any]) -> None:
    q, k, v = qkv
    mask_mod = causal if rule == "causal" else window
    block = flex.create_block_mask(mask_mod, None, None, S, S, device="cpu", BLOCK_SIZE=BLOCK)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # flex_attention called without torch.compile
        with attntrace.capture(axes={"B": B, "h": h, "S": S, "d": d}) as t:
            y = flex.flex_attention(q, k, v, score_mod=relative, block_mask=block)
    i, j = np.arange(S)[:, None], np.arange(S)[None, :]
    logits = np.einsum("bhsd,bhnd->bhsn", q.double(), k.double()) / math.sqrt(d) + 0.1 * (i - j)
    logits = np.where(_keep(rule), logits, -np.inf)  # (B, h, S, N)
    weights = np.exp(logits - logits.max(-1, keepdims=True))
    weights /= weights.sum(-1, keepdims=True)
    np.testing.assert_allclose(t["weights"].value, weights, atol=2e-6, rtol=0)
    np.testing.assert_array_equal(t["mask"].value, np.broadcast_to(_keep(rule), (B, h, S, S)))
    (call,) = t.kernels()
    assert call.agrees, call.verdict
    np.testing.assert_allclose(t["context"].value, y.numpy(), atol=0, rtol=0)  # flex's own
    blocks = S // BLOCK  # of the 4 x 4 blocks, those above the diagonal (and, for the window,
    skipped = {"causal": 6, "window": 6 + 3}[rule]  # those past it) hold no kept score
    assert call.sparsity == pytest.approx(skipped / blocks**2)
    names = [s.op for s in t.steps]
    inside = ["transpose", "matmul", "mul", "score_mod", "mask_mod", "where", "softmax", "matmul"]
    assert names == inside
    assert t.steps[names.index("score_mod")].source.endswith(
        "return score + 0.1 * (q_idx - kv_idx)"
    )
    assert t["weights"].location == t["context"].location


class BlockInForward(torch.nn.Module):
    """flex_attention as people write it in a module: the block mask made in forward, q, k and
    v from the module's own projection (so they require grad)."""

    def __init__(self, dim: int = 16, heads: int = 2, rule: Any = window) -> None:
        super().__init__()
        self.heads, self.rule = heads, rule
        self.qkv = torch.nn.Linear(dim, 3 * dim)
        self.proj = torch.nn.Linear(dim, dim)

    def forward(self, x: Any) -> Any:
        B, S, C = x.shape
        q, k, v = self.qkv(x).view(B, S, 3, self.heads, C // self.heads).permute(2, 0, 3, 1, 4)
        block = flex.create_block_mask(self.rule, None, None, S, S, device="cpu", BLOCK_SIZE=4)
        y = flex.flex_attention(q, k, v, block_mask=block)  # (B, h, S, d)
        return self.proj(y.transpose(1, 2).reshape(B, S, C))


def test_a_block_mask_made_in_forward_is_expanded_and_grad_needing_qkv_are_detached() -> None:
    """create_block_mask inside forward runs outside the recording (it vmaps the mask_mod); q,
    k and v that require grad (the module's weights) go to flex detached, as the CPU needs."""
    torch.manual_seed(0)
    module, x = BlockInForward(), torch.randn(1, S, 16)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with attntrace.capture() as t:
            out = module(x)
    assert flex.create_block_mask.__code__.co_name == "create_block_mask"  # restored
    assert flex.flex_attention.__code__.co_name == "flex_attention"
    with torch.no_grad():
        q, k, _ = module.qkv(x).double().view(1, S, 3, 2, 8).permute(2, 0, 3, 1, 4)
    logits = np.where(_keep("window"), (q @ k.transpose(-2, -1)).numpy() / math.sqrt(8), -np.inf)
    weights = np.exp(logits - logits.max(-1, keepdims=True))  # (B, h, S, N)
    weights /= weights.sum(-1, keepdims=True)
    np.testing.assert_allclose(t["weights"].value, weights, atol=2e-6, rtol=0)
    np.testing.assert_array_equal(t["mask"].value, np.broadcast_to(_keep("window"), (1, 2, S, S)))
    (call,) = t.kernels()
    assert call.agrees
    assert call.detached
    assert call.sparsity == pytest.approx(9 / 16)
    assert out.shape == (1, S, 16)
    assert t.remarks[-1].startswith("flex_attention at test_kernel_flex.py:")
    assert t.remarks[-1].endswith("ran on q, k and v detached from autograd: torch has no "
                                  "backward for it on the CPU, so its output carries no gradient "
                                  "here")  # fmt: skip
    assert not [s for s in t.steps if s.op in ("vmap", "detach")]  # nothing of theirs recorded


@pytest.mark.parametrize("rule", [causal, window], ids=["causal", "swapped"])
def test_diff_of_a_block_mask_made_in_forward(rule: Any) -> None:
    from attntrace import AttentionConfig
    from attntrace.diffing.diff_report import diff

    def swapped(b: Any, head: Any, q_idx: Any, kv_idx: Any) -> Any:
        return kv_idx >= q_idx

    torch.manual_seed(0)
    module = BlockInForward(rule=causal if rule is causal else swapped)
    report = diff(module, AttentionConfig(batch=2, seq=S, hidden=16, heads=2, causal=True))
    if rule is causal:
        assert report.verdict == "match", (report.diagnosis, report.undecided)
        return
    assert report.verdict == "differs"
    assert report.diagnosis is not None
    assert report.diagnosis.bug == "mask-axes-swapped", report.diagnosis
    assert report.diagnosis.source == "flex.flex_attention(q, k, v, block_mask=block)"
    assert "q_idx >= kv_idx" in report.diagnosis.fix


def test_trace_of_a_flex_module_on_the_cpu_runs(tmp_path: Any) -> None:
    """attntrace trace FILE:CLASS: the module's weights make q, k and v require grad, which
    flex refuses on the CPU; trace asks for no gradient and says it detached them."""
    import inspect

    from typer.testing import CliRunner

    from attntrace.cli import app

    code = "\n".join(
        [
            "from typing import Any",
            "import torch",
            "from torch.nn.attention import flex_attention as flex",
            "S = 16",
            inspect.getsource(window).replace("WINDOW", "5"),
            inspect.getsource(BlockInForward),
        ]
    )
    (tmp_path / "flexy.py").write_text(code)
    result = CliRunner().invoke(
        app,
        ["trace", f"{tmp_path / 'flexy.py'}:BlockInForward", "--batch", "1", "--seq", "16"],
        env={"COLUMNS": "200", "NO_COLOR": "1"},
    )
    assert result.exit_code == 0, result.output
    assert "ran on q, k and v detached from autograd" in " ".join(result.output.split())
    assert "(1, 2, 16, 16)" in result.output
