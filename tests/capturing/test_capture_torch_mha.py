"""``attntrace trace`` follows the ops inside torch's own ``nn.MultiheadAttention`` (its
``F.multi_head_attention_forward``): the in-projection from the packed ``in_proj_weight``,
the heads folded into the batch (B·h, S, d), scores, weights, context, merged and output, each
with its role and axes; the fast path is off while traced, and the fused SDPA path
(``need_weights=False``) shows what is visible and says so."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest
from typer.testing import CliRunner

import attntrace
from attntrace.capturing.torch_inside import FASTPATH_NOTE, MHA, SDPA_NOTE
from attntrace.cli import app

pytestmark = pytest.mark.slow  # real processes or seconds per test

torch = pytest.importorskip("torch")

runner = CliRunner()


def _trace(*args: str) -> dict[str, Any]:
    result = runner.invoke(
        app,
        [
            "trace",
            "torch.nn:MultiheadAttention",
            "--init",
            "embed_dim=64",
            "--init",
            "num_heads=4",
            *args,
            "--format",
            "json",
        ],
    )
    assert result.exit_code == 0, result.output
    return dict(json.loads(result.stdout))


def _roles(doc: dict[str, Any]) -> dict[str, tuple[tuple[int, ...], str]]:
    return {s["role"]: (tuple(s["shape"]), " ".join(s["axes"])) for s in doc["steps"] if s["role"]}


#: Batched (B=2, S=3, H=64, h=4): torch folds the heads into the batch, sequence first.
BATCHED = {
    "x": ((2, 3, 64), "B S H"),
    "q_proj": ((3, 2, 64), "S B H"),
    "k_proj": ((3, 2, 64), "S B H"),
    "v_proj": ((3, 2, 64), "S B H"),
    "q_heads": ((3, 8, 16), "S B·h d"),
    "k_heads": ((3, 8, 16), "S B·h d"),
    "v_heads": ((3, 8, 16), "S B·h d"),
    "q": ((8, 3, 16), "B·h S d"),
    "k": ((8, 3, 16), "B·h S d"),
    "v": ((8, 3, 16), "B·h S d"),
    "k_t": ((8, 16, 3), "B·h d S"),
    "scores": ((8, 3, 3), "B·h S S"),
    "weights": ((8, 3, 3), "B·h S S"),
    "context": ((8, 3, 16), "B·h S d"),
    "context_heads": ((3, 8, 16), "S B·h d"),
    "merged": ((6, 64), "S·B H"),
    "output": ((6, 64), "S·B H"),
}


@pytest.mark.parametrize("batch_first", [True, False])
@pytest.mark.parametrize("bias", [True, False])
def test_the_steps_inside_multihead_attention_have_their_roles(
    batch_first: bool, bias: bool
) -> None:
    doc = _trace("--init", f"batch_first={batch_first}", "--init", f"bias={bias}", "--batch", "2")
    assert _roles(doc) == BATCHED
    assert doc["config"]["axis_sizes"]["h"] == 4
    assert doc["config"]["axis_sizes"]["d"] == 16
    assert doc["notes"] == [FASTPATH_NOTE]
    out = [s for s in doc["steps"] if s["shape"][-1] == 64][-1]
    if batch_first:  # the output turned back to (B, S, H) by MultiheadAttention.forward
        assert (out["shape"], out["axes"]) == ([2, 3, 64], ["B", "S", "H"])
    else:  # given (S, B, H) by attntrace, as nn.MultiheadAttention takes it
        assert (out["shape"], out["axes"]) == ([3, 2, 64], ["S", "B", "H"])
    proj = next(s for s in doc["steps"] if s["role"] == "q_proj")
    assert proj["location"].startswith("functional.py:")
    assert proj["source"] == "proj[0]"  # a part of the packed in_proj_weight's projection


def test_unbatched_multihead_attention_has_heads_first() -> None:
    roles = _roles(_trace())
    assert roles["q_proj"] == ((3, 1, 64), "S 1 H")
    assert roles["q"] == ((4, 3, 16), "h S d")
    assert roles["scores"] == ((4, 3, 3), "h S S")
    assert roles["weights"] == ((4, 3, 3), "h S S")
    assert roles["context"] == ((4, 3, 16), "h S d")
    assert roles["merged"] == ((3, 64), "S H")
    assert roles["output"] == ((3, 64), "S H")


def test_no_into_keeps_one_row() -> None:
    doc = _trace("--no-into")
    assert [s["name"] for s in doc["steps"]] == ["x"]
    assert doc["notes"] == []


def test_the_fused_path_is_opened_at_its_line() -> None:
    """need_weights=False runs F.scaled_dot_product_attention: its steps are replayed at the
    line of torch's call, the weights equal to those need_weights=True returns."""
    torch.manual_seed(0)
    mha = torch.nn.MultiheadAttention(32, 4, batch_first=True)
    x = torch.randn(2, 5, 32)
    with attntrace.capture(into=[MHA]) as t:
        mha(x, x, x, need_weights=False)
    roles = {s.role: s for s in t.steps if s.role}
    assert roles["scores"].shape == roles["weights"].shape == (2, 4, 5, 5)
    assert roles["weights"].axes == ("B", "h", "S", "S")
    assert roles["weights"].location == roles["context"].location
    _, expected = mha(x, x, x, need_weights=True, average_attn_weights=False)
    np.testing.assert_allclose(roles["weights"].value, expected.detach().numpy(), atol=1e-6)
    assert t.remarks[0] == FASTPATH_NOTE
    assert t.remarks[1].startswith("scaled_dot_product_attention opened at functional.py:")
    assert t.kernels()[0].agrees


def test_the_fused_path_knows_the_users_line_that_called_the_module() -> None:
    """The SDPA call torch makes inside nn.MultiheadAttention carries the user's call of the
    module (where diff blames a bug of its arguments); a call the user makes carries none."""
    import inspect

    mha = torch.nn.MultiheadAttention(32, 4, batch_first=True)
    x = torch.randn(2, 5, 32)
    keep = torch.ones(5, 5, dtype=torch.bool).tril()
    with attntrace.capture(into=[MHA]) as t:
        here = inspect.currentframe().f_lineno  # type: ignore[union-attr]
        mha(x, x, x, attn_mask=~keep, need_weights=False)
        torch.nn.functional.scaled_dot_product_attention(x, x, x)
    followed, own = t.kernels()
    assert followed.location.startswith("functional.py:")
    assert followed.caller == f"test_capture_torch_mha.py:{here + 1}"
    assert followed.caller_source == "mha(x, x, x, attn_mask=~keep, need_weights=False)"
    assert own.location == f"test_capture_torch_mha.py:{here + 2}"
    assert (own.caller, own.caller_source) == ("", "")


def test_the_fused_path_opaque_shows_what_is_visible_and_says_so() -> None:
    torch.manual_seed(0)
    mha = torch.nn.MultiheadAttention(32, 4, batch_first=True)
    x = torch.randn(2, 5, 32)
    with attntrace.capture(into=[MHA], opaque=True) as t:
        out, _ = mha(x, x, x, need_weights=False)
    roles = {s.role: (s.shape, s.axes) for s in t.steps if s.role}
    assert "scores" not in roles
    assert "weights" not in roles
    assert roles["q"] == ((8, 5, 8), ("B·h", "S", "d"))
    assert roles["context"] == ((2, 4, 5, 8), ("B", "h", "S", "d"))
    assert roles["output"] == ((10, 32), ("S·B", "H"))
    assert t.remarks == (FASTPATH_NOTE, SDPA_NOTE)
    expected, _ = mha(x, x, x, need_weights=False)
    torch.testing.assert_close(out, expected)


def test_encoder_layer_attention_in_eval_mode_is_followed_not_fast_pathed() -> None:
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(32, 4, dim_feedforward=64, batch_first=True).eval()
    x = torch.randn(2, 5, 32)
    assert torch.backends.mha.get_fastpath_enabled()
    with torch.no_grad(), attntrace.capture(into=[MHA]) as t:
        out, _ = layer.self_attn(x, x, x)
    assert torch.backends.mha.get_fastpath_enabled()  # restored after the capture
    roles = {s.role: s for s in t.steps if s.role}
    assert roles["weights"].shape == (8, 5, 5)
    weights = roles["weights"].value
    assert weights is not None
    torch.testing.assert_close(
        torch.from_numpy(weights.sum(-1).copy()), torch.ones(8, 5), rtol=1e-5, atol=1e-5
    )
    with torch.no_grad():
        expected, _ = layer.self_attn(x, x, x)
    torch.testing.assert_close(out, expected)


def test_without_the_name_torch_attention_stays_one_row() -> None:
    mha = torch.nn.MultiheadAttention(32, 4, batch_first=True)
    x = torch.randn(2, 5, 32)
    with attntrace.capture() as t:
        mha(x, x, x)
    assert not any(s.location.startswith("functional.py") for s in t.steps)
    assert t.remarks == ()
