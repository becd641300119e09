"""A real notebook executed by a Jupyter kernel (nbclient + ipykernel): its cells display a
Trace, a capture and a diff; every output has text/html, no ANSI escape anywhere (ipykernel sets
FORCE_COLOR, which once gave the heat maps 16-colour escapes), and the HTML parses."""

from __future__ import annotations

import json
import os

import pytest
from test_notebook import check_html

from paths import SRC

pytestmark = pytest.mark.slow  # real processes or seconds per test

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")
pytest.importorskip("ipykernel")

CELLS = [
    f"import sys; sys.path.insert(0, {str(SRC)!r})\n"
    "import numpy as np\nimport attntrace\n"
    "assert attntrace.__file__.startswith(sys.path[0]), attntrace.__file__",
    "t = attntrace.trace_attention(attntrace.AttentionConfig(seq=5, hidden=32, heads=4, "
    "causal=True))\nt",
    "with attntrace.capture() as cap:\n"
    "    x = cap.track(np.ones((3, 8)))\n"
    "    q = x.reshape(3, 2, 4).transpose(1, 0, 2)\n"
    "cap",
    "def attend(x, params):\n"
    "    q, k, v = (x @ params[f'w_{c}'].T + params[f'b_{c}'] for c in 'qkv')\n"
    "    w = np.exp(q @ k.T / np.sqrt(q.shape[-1]))\n"
    "    return (w / w.sum(-1, keepdims=True)) @ v @ params['w_o'].T + params['b_o']\n"
    "attntrace.diff(attend, attntrace.AttentionConfig(seq=3, hidden=4, heads=1))",
    "attntrace.show(t, explain=True, lang='zh')",
]


def test_an_executed_notebook_displays_a_trace_a_capture_and_a_diff_as_html(
    tmp_path: os.PathLike[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FORCE_COLOR", "1")  # as ipykernel sets it
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(source) for source in CELLS]
    client = nbclient.NotebookClient(
        nb, timeout=120, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}
    )
    client.execute()
    outputs = [cell.outputs for cell in nb.cells]
    assert "\x1b" not in json.dumps(outputs)  # no ANSI escape in any output
    for cell, cell_outputs in zip(CELLS[1:], outputs[1:], strict=True):
        shown = [o for o in cell_outputs if o.output_type in ("execute_result", "display_data")]
        assert len(shown) == 1, (cell, cell_outputs)
        data = shown[0].data
        assert "text/html" in data
        assert data["text/plain"].startswith("<")  # the short repr
        check_html(data["text/html"])
    trace, capture, diffed, explained = (o[0].data["text/html"] for o in outputs[1:])
    assert trace.count("<figure>") == 4
    assert "q_heads" in trace
    assert "reshape" in capture
    assert "DiffReport" in outputs[3][0].data["text/plain"]
    assert "attend" in diffed
    assert "相似度分数" in explained
