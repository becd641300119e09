"""Weights taken in call order (no known names) are checked: the swaps of two projections
that the assignment could hide are tried, and one under which the module agrees differently
is named in a note."""

from __future__ import annotations

import pytest

from attntrace import AttentionConfig
from attntrace.diffing.call_order import CALL_ORDER
from attntrace.diffing.diff_report import diff

torch = pytest.importorskip("torch")

CONFIG = AttentionConfig(batch=2, seq=5, hidden=32, heads=4)


class KFirst(torch.nn.Module):
    """Correct attention whose nn.Linear layers (no known names) are called k, q, v, o."""

    def __init__(self, use_first_as_q: bool = False) -> None:
        super().__init__()
        self.a, self.b = torch.nn.Linear(32, 32), torch.nn.Linear(32, 32)
        self.c, self.d = torch.nn.Linear(32, 32), torch.nn.Linear(32, 32)
        self.num_heads = 4
        self.use_first_as_q = use_first_as_q

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, S, H = x.shape
        k = self.a(x)
        q = self.b(x)
        v = self.c(x)
        if self.use_first_as_q:
            q, k = k, q
        q, k, v = (t.view(B, S, 4, 8).transpose(1, 2) for t in (q, k, v))
        w = torch.softmax(q @ k.transpose(-2, -1) / 8**0.5, dim=-1)
        return self.d((w @ v).transpose(1, 2).reshape(B, S, H))  # type: ignore[no-any-return]


@pytest.mark.slow
def test_a_module_that_calls_k_first_is_told_the_swap_that_matches() -> None:
    torch.manual_seed(0)
    report = diff(KFirst(), CONFIG)
    assert report.weights == CALL_ORDER
    assert not report.ok  # the verdict of the order forward calls them in
    swap = [n for n in report.notes if "swapped" in n]
    assert swap == [
        "with q and k swapped the module MATCHes: forward may call k's projection before q's, "
        "so the assignment by call order is not sure; name the projections (q_proj, k_proj, "
        "v_proj, o_proj) to tell"
    ]
    assert report.to_dict()["notes"] == list(report.notes)


def test_a_module_in_call_order_has_no_swap_note() -> None:
    torch.manual_seed(0)
    report = diff(KFirst(use_first_as_q=True), CONFIG)
    assert report.ok
    assert not [n for n in report.notes if "swapped" in n]


def test_weights_by_name_are_not_checked_by_swaps() -> None:
    torch.manual_seed(0)
    mha = torch.nn.MultiheadAttention(32, 4, batch_first=True)
    report = diff(mha, CONFIG)
    assert report.ok
    assert not [n for n in report.notes if "swapped" in n]
