"""The records in a notebook: ``_repr_html_`` (steps, explanations when asked, heat maps as
inline SVG, flow) and a short ``__repr__`` for a Trace, a capture, a DiffReport, verify's report
and a sweep; ``attntrace.show``; an executed notebook (nbclient + ipykernel)."""

from __future__ import annotations

import io
import re
from contextlib import redirect_stdout
from html.parser import HTMLParser
from typing import Any

import numpy as np
import pytest

import attntrace
from attntrace import AttentionConfig, trace_attention
from attntrace.display import html
from attntrace.errors import AttntraceError
from attntrace.tools.sweep import measure, run_sweep

#: Elements without an end tag in HTML.
VOID = {"meta", "br", "img", "input", "hr", "link", "col", "area", "base", "source", "wbr"}


class Balance(HTMLParser):
    """Every element closed in order (SVG's self-closed ones count as closed)."""

    def __init__(self) -> None:
        super().__init__()
        self.stack: list[str] = []
        self.errors: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag not in VOID:
            self.stack.append(tag)

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        pass

    def handle_endtag(self, tag: str) -> None:
        if not self.stack or self.stack[-1] != tag:
            self.errors.append(f"</{tag}> closes {self.stack[-1:] or 'nothing'}")
        else:
            self.stack.pop()


def check_html(page: str) -> None:
    """The fragment parses: balanced tags, no ANSI escape, nothing fetched, no script."""
    parser = Balance()
    parser.feed(page)
    parser.close()
    assert parser.errors == []
    assert parser.stack == []
    assert "\x1b" not in page
    assert "<script" not in page
    assert not re.search(r"(src|href)=\"https?:", page)


def small_trace(**options: Any) -> attntrace.Trace:
    return trace_attention(AttentionConfig(seq=5, hidden=32, heads=4, **options))


def test_a_trace_shows_its_steps_heat_maps_and_flow_in_html() -> None:
    page = small_trace(causal=True)._repr_html_()
    check_html(page)
    assert page.count("<figure>") == 4  # one heat map per head
    assert ">q4</text>" in page  # token labels
    assert ">k4</text>" in page
    assert ">1.00</text>" in page  # the numbers in the cells (S <= 16)
    assert "<td><b>q_heads</b></td>" in page
    assert "(5, 4, 8)" in page
    assert "<details><summary>data flow</summary><svg" in page
    assert "what each step does" not in page  # explanations only when asked


def test_explanations_and_the_language_when_asked() -> None:
    page = html(small_trace(), explain=True, lang="zh")
    check_html(page)
    assert "<th>解释</th>" in page
    assert "相似度分数" in page
    assert "<td><b>scores</b></td>" in page  # the step names as they are
    english = html(small_trace(), explain=True, lang="en")
    assert "Divides every score by √8 = 2.828" in english


def test_a_shape_trace_and_a_flash_trace_say_why_there_is_no_map() -> None:
    page = html(trace_attention(AttentionConfig(seq=3, hidden=8, heads=2), "shape"))
    check_html(page)
    assert "the shape backend computes no values" in page
    flash = html(small_trace(algorithm="flash", block_size=2))
    assert "never forms them whole" in flash


@pytest.mark.parametrize("make", ["trace", "capture", "sweep", "diff"])
def test_every_record_has_a_short_repr_and_an_html_view(make: str) -> None:
    record = RECORDS[make]()
    text = repr(record)
    assert len(text) < 120
    assert "\n" not in text
    assert text.startswith("<")
    page = record._repr_html_()
    check_html(page)
    assert page.startswith('<div class="attntrace">')


def test_a_verify_report_shows_itself() -> None:
    pytest.importorskip("torch")
    from attntrace.tools.verify import verify_attention

    report = verify_attention(AttentionConfig(seq=3, hidden=8, heads=2))
    assert repr(report).startswith("<VerifyReport: ")
    assert "ok>" in repr(report)
    check_html(report._repr_html_())


def _capture() -> object:
    with attntrace.capture() as t:
        x = t.track(np.ones((3, 8)))
        q = x.reshape(3, 2, 4).transpose(1, 0, 2)
        _ = q @ q.transpose(0, 2, 1)
    return t


def _diff() -> object:
    def attend(x: np.ndarray, params: dict[str, np.ndarray]) -> np.ndarray:
        q, k, v = (x @ params[f"w_{c}"].T + params[f"b_{c}"] for c in "qkv")
        w = np.exp(q @ k.T / np.sqrt(q.shape[-1]))  # one head
        return (w / w.sum(-1, keepdims=True)) @ v @ params["w_o"].T + params["b_o"]

    return attntrace.diff(attend, AttentionConfig(seq=3, hidden=4, heads=1))


RECORDS = {
    "trace": small_trace,
    "capture": _capture,
    "sweep": lambda: run_sweep([AttentionConfig(seq=4), AttentionConfig(seq=8)]),
    "diff": _diff,
}


def test_show_prints_the_terminal_view_with_the_words() -> None:
    out = io.StringIO()
    with redirect_stdout(out):
        attntrace.show(small_trace(), explain=True, lang="en")
    text = " ".join(out.getvalue().split())
    assert "what each step does" in text
    assert "every row sums to 1" in text


def test_show_refuses_what_it_does_not_show() -> None:
    with pytest.raises(AttntraceError, match="not int"):
        attntrace.show(3)
    with pytest.raises(AttntraceError, match="not list"):
        attntrace.show([])


def test_a_sweep_is_still_a_list_of_points() -> None:
    points = run_sweep([AttentionConfig(seq=4)])
    assert isinstance(points, list)
    assert points == [measure(AttentionConfig(seq=4))]


@pytest.mark.slow
def test_the_notebook_view_renders_in_headless_chromium_with_visible_heat_maps(
    tmp_path: Any,
) -> None:
    """The HTML Jupyter shows, opened in a browser: no console message, not blank, and heat
    maps with contrast (the darkest cell far from the lightest)."""
    from test_report import render_in_browser

    page = tmp_path / "notebook.html"
    view = html(small_trace(causal=True), explain=True)
    page.write_text(f'<!DOCTYPE html><meta charset="utf-8"><body>{view}</body>', "utf-8")
    image, console = render_in_browser(page, tmp_path)
    assert console == []
    assert (image < 0.9).any(axis=2).mean() > 0.02  # not blank
    luminance = image @ np.array([0.2126, 0.7152, 0.0722])  # (rows, cols)
    blue = (image[:, :, 2] - image[:, :, 0]) > 0.3  # the heat maps' blue cells
    assert blue.sum() > 200
    assert luminance[blue].min() < 0.25  # the largest weights: dark blue
    tinted = (image[:, :, 2] - image[:, :, 0]) > 0.02
    assert (tinted & (luminance > 0.65)).sum() > 200  # light blue cells too: visible contrast
