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
