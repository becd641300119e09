"""A block as people write it: the user's own norm before the projections (assigned to any
name, or inline), a residual after the output projection, SDPA in between. The reference
starts after the norm; a norm after a projection is not taken for one."""

from __future__ import annotations

import pytest

from attntrace import AttentionConfig
from attntrace.diffing.diff_report import diff
from attntrace.diffing.layer import _prenorm

torch = pytest.importorskip("torch")
F = torch.nn.functional
H, HEADS = 32, 4


class Block(torch.nn.Module):  # type: ignore[misc]
    """Pre-norm block: ``h = self.ln(x)`` on the second line, SDPA, residual. ``bug``: the
    boolean mask given with masked_fill's polarity (``~keep``)."""

    def __init__(self, bug: bool = False, inline: bool = False) -> None:
        super().__init__()
        self.ln, self.qkv, self.out = torch.nn.LayerNorm(H), torch.nn.Linear(H, 3 * H), None
        self.out = torch.nn.Linear(H, H)
        self.bug, self.inline = bug, inline

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, S, _ = x.shape
        h = self.ln(x)  # (B, S, H)
        qkv = self.qkv(self.ln(x)) if self.inline else self.qkv(h)  # (B, S, 3H)
        q, k, v = (t.view(B, S, HEADS, -1).transpose(1, 2) for t in qkv.chunk(3, -1))
        keep = torch.ones(S, S, dtype=torch.bool).tril()  # (S, S)
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=~keep if self.bug else keep)
        return x + self.out(y.transpose(1, 2).reshape(B, S, H))  # type: ignore[no-any-return]


class PostNorm(torch.nn.Module):  # type: ignore[misc]
    def __init__(self) -> None:
        super().__init__()
        self.qkv, self.norm = torch.nn.Linear(H, 3 * H), torch.nn.LayerNorm(H)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.qkv(x)[..., :H]
        return self.norm(x)  # type: ignore[no-any-return]


def test_the_norm_before_the_projections_is_found_wherever_it_is_written() -> None:
    assert _prenorm(Block()) is not None
    assert _prenorm(Block(inline=True)) is not None
    assert _prenorm(PostNorm()) is None  # after a projection: not the attention's input


@pytest.mark.parametrize("inline", [False, True])
def test_a_prenorm_block_with_a_residual_matches_and_its_planted_bug_is_named(
    inline: bool,
) -> None:
    torch.manual_seed(0)
    config = AttentionConfig(batch=2, seq=5, hidden=H, heads=HEADS, causal=True)
    report = diff(Block(inline=inline), config)
    assert report.verdict == "match", (report.diagnosis, report.undecided)
    assert any("own norm" in n for n in report.notes)
    planted = diff(Block(bug=True, inline=inline), config)
    assert planted.verdict == "differs"
    assert planted.diagnosis is not None
    assert planted.diagnosis.bug == "mask-inverted", planted.diagnosis
    assert "SDPA keeps the keys where a boolean mask is True" in planted.diagnosis.fix
