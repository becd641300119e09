"""A step made inside a helper of the user's file names the caller's line too: "in apply_rope,
called at attn.py:N" (the line of forward that called it), walking past torch's Module call."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")

CODE = """import torch
from torch import nn


def apply_rope(x):
    return x * 2.0


class Inner(nn.Module):
    def forward(self, x):
        return x + 1.0


class Attn(nn.Module):
    def __init__(self):
        super().__init__()
        self.inner = Inner()

    def forward(self, x):
        y = apply_rope(x)
        z = self.inner(y)
        w = sum(t * 3.0 for t in (z,))
        return w - 1.0
"""


def _steps(tmp_path: Path) -> dict[str, Any]:
    import importlib.util

    from attntrace.capturing.session import capture

    path = tmp_path / "attn_called.py"
    path.write_text(CODE)
    spec = importlib.util.spec_from_file_location("attn_called", path)
    assert spec is not None
    assert spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    with capture() as t:
        mod.Attn()(t.track(torch.ones(2, 3)))
    return {s.location: s.called for s in t.steps if s.location}


def test_a_helper_names_the_line_that_called_it(tmp_path: Path) -> None:
    called = _steps(tmp_path)
    assert called["attn_called.py:6"] == "in apply_rope, called at attn_called.py:20"
    assert called["attn_called.py:11"] == "in Inner.forward, called at attn_called.py:21"
    assert called["attn_called.py:22"] == ""  # a generator expression is forward's own line
    assert called["attn_called.py:23"] == ""  # forward itself: attntrace called it


SPANNING = """import torch


def helper(x, scale):
    return x * scale


def forward(x):
    return helper(
        x,
        2.0,
    )
"""


def test_a_call_over_several_lines_is_named_by_its_first_and_last(tmp_path: Path) -> None:
    import importlib.util

    from attntrace.capturing.session import capture

    path = tmp_path / "spanning.py"
    path.write_text(SPANNING)
    spec = importlib.util.spec_from_file_location("spanning", path)
    assert spec is not None
    assert spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    with capture() as t:
        mod.forward(t.track(torch.ones(2, 3)))
    called = {s.location: s.called for s in t.steps if s.location}
    assert called["spanning.py:5"] == "in helper, called at spanning.py:9-12"
