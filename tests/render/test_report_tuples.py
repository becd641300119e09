"""The report at 1280 px in headless Chromium: no shape or axes tuple broken across lines, in
English and in Chinese (with a CJK font), read from the laid-out DOM: every tuple of every table
cell measured as a range of text, its line boxes counted."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from attntrace import AttentionConfig, trace_attention
from attntrace.render.report import render_report
from browser import dom_after

#: For every text node in a table cell: each tuple in it, and the tops of its line boxes.
MEASURE = r"""
const tuple = /\((?:[^(),\s]{1,16}, ){1,8}[^(),\s]{1,16}\)/g;
const found = [];
const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
for (let node = walker.nextNode(); node; node = walker.nextNode()) {
  if (!node.parentElement.closest('td')) continue;
  for (const m of node.textContent.matchAll(tuple)) {
    const range = document.createRange();
    range.setStart(node, m.index);
    range.setEnd(node, m.index + m[0].length);
    const tops = new Set(Array.from(range.getClientRects(), r => Math.round(r.top)));
    found.push([m[0], tops.size]);
  }
}
const out = document.createElement('pre');
out.id = 'measured';
out.textContent = JSON.stringify(found);
document.body.appendChild(out);
"""

#: The longest ops, shapes and sentences: a batch, GQA, RoPE, a mask.
CONFIG = AttentionConfig(batch=2, seq=5, hidden=64, heads=8, kv_heads=2, rope=True, causal=True)


def cjk_font() -> bool:
    """Whether fontconfig knows a font with Chinese characters (fonts-wqy-microhei...)."""
    fc = shutil.which("fc-list")
    if fc is None:
        return False
    listed = subprocess.run([fc, ":lang=zh"], capture_output=True, text=True, check=False)
    return bool(listed.stdout.strip())


def measured(dom: str) -> list[tuple[str, int]]:
    found = re.search(r'<pre id="measured">(.*?)</pre>', dom, re.S)
    assert found is not None, dom[-2000:]
    return [(text, lines) for text, lines in json.loads(found.group(1).replace("&amp;", "&"))]


@pytest.mark.slow
@pytest.mark.parametrize("lang", ["en", "zh"])
def test_no_tuple_breaks_across_lines_at_1280_px(lang: str, tmp_path: Path) -> None:
    if lang == "zh" and not cjk_font():
        pytest.skip("no CJK font (apt-get install fonts-wqy-microhei): Chinese would be boxes")
    page = tmp_path / f"report-{lang}.html"
    trace = trace_attention(CONFIG)
    page.write_text(render_report(trace, explain=lang, lang=lang), encoding="utf-8")  # type: ignore[arg-type]
    tuples = measured(dom_after(page, tmp_path, MEASURE, size="1280,1600"))
    assert len(tuples) > 100  # the shapes, axes and the tuples of the explanations
    assert "(2, 8, 5, 8)" in {text for text, _ in tuples}
    assert [text for text, lines in tuples if lines != 1] == []


@pytest.mark.slow
def test_the_measure_sees_a_broken_tuple(tmp_path: Path) -> None:
    """The check can fail: a cell too narrow for its tuple, without nowrap, breaks it."""
    page = tmp_path / "narrow.html"
    cell = '<td style="width: 3em; display: inline-block">(2, 8, 5, 8)</td>'
    page.write_text(f"<html><body><table><tr>{cell}</tr></table></body></html>")
    assert measured(dom_after(page, tmp_path, MEASURE)) == [("(2, 8, 5, 8)", 2)]
