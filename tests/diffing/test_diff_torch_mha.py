"""``attntrace diff`` of torch's own ``nn.MultiheadAttention`` compares step by step (the ops
inside ``F.multi_head_attention_forward``), not the output alone, and stays MATCH on the
correct module in train mode and eval mode, batch first or not, with and without bias."""

from __future__ import annotations

import pytest

from attntrace import AttentionConfig
from attntrace.diffing.align import MATCH
from attntrace.diffing.diff_report import diff

torch = pytest.importorskip("torch")

#: The reference steps torch's attention materialises (in its own layout, (B·h, S, d) …).
SEEN = ("q_proj", "k_proj", "v_proj", "q", "k", "v", "k_t", "scaled", "weights", "context")


@pytest.mark.parametrize("batch_first", [True, False])
@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("batch", [2, None])
def test_multihead_attention_is_compared_step_by_step(
    batch_first: bool, bias: bool, batch: int | None
) -> None:
    torch.manual_seed(0)
    mha = torch.nn.MultiheadAttention(32, 4, dropout=0.1, bias=bias, batch_first=batch_first)
    report = diff(mha, AttentionConfig(batch=batch, seq=5, hidden=32, heads=4))
    assert report.ok, report.diagnosis
    rows = {r.step.name: r for r in report.rows}
    for name in SEEN:
        assert rows[name].status == MATCH, name
        user = rows[name].user
        assert user is not None
        assert user.location.startswith("functional.py:"), (name, user.location)
    assert rows["q"].user is not None
    assert rows["q"].user.shape == ((batch or 1) * 4, 5, 8)  # the heads folded into the batch
    assert rows["output"].status == MATCH


def test_encoder_layer_attention_is_compared_step_by_step_in_both_modes() -> None:
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(32, 4, dim_feedforward=64, batch_first=True)
    config = AttentionConfig(batch=2, seq=6, hidden=32, heads=4)
    for _ in ("train", "eval"):
        report = diff(layer.self_attn, config)
        assert report.ok, report.diagnosis
        rows = {r.step.name: r.status for r in report.rows}
        assert all(rows[name] == MATCH for name in SEEN), rows
        layer.eval()


class Scaled(torch.nn.MultiheadAttention):
    """nn.MultiheadAttention whose output is scaled by 2 after torch's attention."""

    def forward(self, query, key, value, **kwargs):  # type: ignore[no-untyped-def]
        out, weights = super().forward(query, key, value, **kwargs)
        return out * 2, weights


@pytest.mark.slow
def test_a_wrong_output_after_correct_steps_is_not_blamed_on_them() -> None:
    torch.manual_seed(0)
    config = AttentionConfig(batch=2, seq=5, hidden=32, heads=4)
    report = diff(Scaled(32, 4, batch_first=True), config)
    assert not report.ok
    rows = {r.step.name: r.status for r in report.rows}
    assert all(rows[name] == MATCH for name in SEEN), rows
    assert report.diagnosis is not None
    assert report.diagnosis.step == "output"  # what it returns, not a step inside
    assert report.diagnosis.location == "(return value)"
