"""attntrace diff on attention code people run, built from the installed packages: torch's own
modules, in train mode and eval mode, batched and unbatched; code that stays random is refused;
the user's own exceptions are reported as theirs (message and file:line)."""

from __future__ import annotations

from pathlib import Path

import pytest

from attntrace import AttentionConfig
from attntrace.diffing.diff_report import diff
from attntrace.diffing.user_side import UserCodeError
from attntrace.errors import ConfigError

torch = pytest.importorskip("torch")


@pytest.mark.parametrize("batch_first", [True, False])
@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("batch", [2, None])
def test_multihead_attention_with_dropout_in_train_mode_matches(
    batch_first: bool, bias: bool, batch: int | None
) -> None:
    torch.manual_seed(0)
    mha = torch.nn.MultiheadAttention(32, 4, dropout=0.1, bias=bias, batch_first=batch_first)
    assert mha.training
    report = diff(mha, AttentionConfig(batch=batch, seq=5, hidden=32, heads=4))
    assert report.ok, report.diagnosis
    assert report.weights == "nn.MultiheadAttention"
    assert report.notes == ("run in eval mode (dropout off); it was in train mode",)
    assert report.to_dict()["notes"] == list(report.notes)
    out = next(r for r in report.rows if r.step.name == "output")
    assert out.user is not None
    assert out.user.shape == ((batch, 5, 32) if batch else (5, 32))


def test_transformer_encoder_layer_self_attention_in_train_mode_matches() -> None:
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(d_model=32, nhead=4, dropout=0.1, batch_first=True)
    report = diff(layer.self_attn, AttentionConfig(batch=2, seq=6, hidden=32, heads=4))
    assert report.ok
    layer.eval()
    again = diff(layer.self_attn, AttentionConfig(batch=2, seq=6, hidden=32, heads=4))
    assert again.ok
    assert again.notes == ()


class Noisy(torch.nn.Module):
    """Dropout that ignores eval mode (F.dropout with training=True)."""

    def __init__(self) -> None:
        super().__init__()
        self.q_proj, self.k_proj = torch.nn.Linear(8, 8), torch.nn.Linear(8, 8)
        self.v_proj, self.o_proj = torch.nn.Linear(8, 8), torch.nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q, k, v = self.q_proj(x), self.k_proj(x), self.v_proj(x)
        w = torch.softmax(q @ k.transpose(-2, -1) / 8**0.5, dim=-1)
        w = torch.nn.functional.dropout(w, 0.5, training=True)
        return self.o_proj(w @ v)


def test_code_still_random_in_eval_mode_is_refused_with_that_reason() -> None:
    with pytest.raises(ConfigError, match=r"Noisy \(nn.Module\) is not deterministic: two calls"):
        diff(Noisy(), AttentionConfig(batch=2, seq=4, hidden=8, heads=1))


def test_the_users_exception_in_forward_names_their_line(tmp_path: Path) -> None:
    class Broken(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.qkv, self.proj = torch.nn.Linear(8, 24), torch.nn.Linear(8, 8)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            raise ValueError("my own message")

    with pytest.raises(UserCodeError, match=r"ValueError: my own message at test_diff_real_code"):
        diff(Broken(), AttentionConfig(batch=2, seq=4, hidden=8, heads=2))
