"""`attntrace report --out report.html`: one self-contained page, rendered in headless Chromium."""

from __future__ import annotations

import re
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from attntrace import AttentionConfig, trace_attention
from attntrace.cli import app
from attntrace.render.report import render_report
from browser import render_in_browser

runner = CliRunner()
ARGS = ("--seq", "12", "--hidden", "32", "--heads", "4", "--kv-heads", "2", "--causal")


class _Parser(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))


def tags(html: str) -> list[tuple[str, dict[str, str | None]]]:
    parser = _Parser()
    parser.feed(html)
    return parser.tags


def test_report_holds_steps_flow_heads_costs_and_config() -> None:
    trace = trace_attention(AttentionConfig(seq=12, hidden=32, heads=4, kv_heads=2, causal=True))
    page = render_report(trace)
    found = tags(page)
    assert [t for t, _ in found].count("figure") == 4  # one heat map per head
    assert sum(1 for t, a in found if t == "g" and a.get("class") == "step") == len(trace.steps)
    for step in trace.steps:
        assert f"<td>{step.name}</td>" in page
    titles = re.findall(r"<title>(q\d+ -&gt; k\d+: [^<]+)</title>", page)
    assert len(titles) == 4 * 12 * 12  # every cell says its value on hover
    expected = trace["weights"].value[1, 5, 2]  # type: ignore[index]
    assert f"q5 -&gt; k2: {expected:.4f}" in titles[144 + 5 * 12 + 2]
    assert "q0 -&gt; k1: masked" in page
    assert "KV cache" in page
    kv_heads = '<td>kv_heads <span class="t">(g)</span></td><td>2, each serving 2 query heads</td>'
    assert kv_heads in page


def test_report_fetches_nothing() -> None:
    page = render_report(trace_attention(AttentionConfig(seq=4, hidden=8, heads=2, rope=True)))
    for tag, attrs in tags(page):
        assert tag not in ("script", "link", "img", "iframe", "object", "embed"), tag
        assert not any(k in ("src", "href") for k in attrs), (tag, attrs)
    assert "@import" not in page
    assert "url(" not in page.replace("url(#arrow)", "")
    assert re.findall(r"https?://[^\s\"'<>]+", page) == ["http://www.w3.org/2000/svg"] * page.count(
        'xmlns="http://www.w3.org/2000/svg"'
    )


def test_long_sequences_are_pooled_and_flash_says_why_there_is_no_map() -> None:
    page = render_report(trace_attention(AttentionConfig(seq=200, hidden=8, heads=2)))
    assert "head 0, 40x40 blocks" in page
    flash = render_report(
        trace_attention(AttentionConfig(seq=8, hidden=8, heads=2, algorithm="flash", block_size=4))
    )
    assert "--algorithm flash never forms them whole" in flash
    assert "tile loop" in flash


def test_report_command_writes_the_file(tmp_path: Path) -> None:
    out = tmp_path / "report.html"
    result = runner.invoke(app, ["report", "--out", str(out), *ARGS])
    assert result.exit_code == 0, result.stderr
    assert result.stdout == f"wrote {out}\n"
    assert out.read_text(encoding="utf-8").startswith("<!DOCTYPE html>")
    bad = runner.invoke(app, ["report", "--out", str(tmp_path / "r.txt")])
    assert bad.exit_code == 2
    assert "must end in .html" in bad.stderr


def test_report_shows_the_whole_model_of_layers_or_the_presets_layer_count(tmp_path: Path) -> None:
    from attntrace.trace import model_figures

    out = tmp_path / "report.html"
    result = runner.invoke(app, ["report", "--out", str(out), *ARGS, "--layers", "3"])
    assert result.exit_code == 0, result.stderr
    page = out.read_text(encoding="utf-8")
    want = model_figures(
        trace_attention(
            AttentionConfig(seq=12, hidden=32, heads=4, kv_heads=2, causal=True), "shape"
        ),
        3,
    )
    assert "<h2>Whole model: L=3 layers like this one, B=1, S=12</h2>" in page
    assert f"<td>{want.params:,}</td>" in page  # the exact count, as in the terminal's table
    assert want.kv_cache_bytes == 3 * 12 * 2 * 2 * 8 * 4  # L·N·2·g·d·bytes
    assert '<td>KV cache (float32)</td><td class="num">4.50 KiB</td>' in page
    assert page.index("<h2>Costs</h2>") < page.index("<h2>Whole model") < page.index("<h2>Config")
    preset = runner.invoke(
        app,
        [
            "report",
            "--out",
            str(out),
            "--preset",
            "llama-3.1-8b",
            "--seq",
            "4",
            "--backend",
            "shape",
        ],
    )
    assert preset.exit_code == 0, preset.stderr
    assert "<h2>Whole model: L=32 layers" in out.read_text(encoding="utf-8")
    runner.invoke(app, ["report", "--out", str(out), *ARGS])
    assert "Whole model" not in out.read_text(encoding="utf-8")  # nothing says a layer count
    bad = runner.invoke(app, ["report", "--out", str(tmp_path / "r.html"), *ARGS, "--layers", "0"])
    assert bad.exit_code == 2
    assert "--layers must be a whole number >= 1" in bad.stderr
    assert not (tmp_path / "r.html").exists()  # refused before anything is written


@pytest.mark.slow
def test_report_renders_in_headless_chromium(tmp_path: Path) -> None:
    out = tmp_path / "report.html"
    assert runner.invoke(app, ["report", "--out", str(out), *ARGS]).exit_code == 0
    image, console = render_in_browser(out, tmp_path)
    assert console == []  # no console errors (nor any other message)
    ink = (image < 0.9).any(axis=2)
    assert ink.mean() > 0.02  # not blank: text, boxes and heat maps
    assert image.std() > 0.05
    blue = (image[:, :, 2] - image[:, :, 0]) > 0.3  # the heat maps' dark blue cells
    assert blue.sum() > 50


@pytest.mark.slow
def test_the_console_check_catches_errors(tmp_path: Path) -> None:
    """The check above is not blind: a page that logs an error is caught."""
    page = tmp_path / "bad.html"
    page.write_text(
        '<!DOCTYPE html><p>x</p><script>console.error("probe"); missing();</script>',
        encoding="utf-8",
    )
    _, console = render_in_browser(page, tmp_path)
    assert any('"probe"' in line for line in console)
    assert any("Uncaught ReferenceError" in line for line in console)


@pytest.mark.slow
def test_the_reports_heat_maps_have_visible_contrast_and_labels(tmp_path: Path) -> None:
    """Issue 31: the heat maps are not blank, their darkest and lightest cells far apart, and
    each cell holds its number up to 16 tokens."""
    out = tmp_path / "report.html"
    args = ["report", "--out", str(out), "--seq", "5", "--hidden", "32", "--heads", "4"]
    assert runner.invoke(app, [*args, "--causal"]).exit_code == 0
    page = out.read_text(encoding="utf-8")
    assert page.count(">q4</text>") == 4  # token labels on every head
    assert page.count(">1.00</text>") == 4  # query 0 sees key 0 alone: its weight in the cell
    # the maps alone, with the report's style: the page's flow diagram is taller than a screen
    start, end = page.index('<div class="heads">'), page.index("<h2>Costs</h2>")
    maps = tmp_path / "maps.html"
    maps.write_text(page[: page.index("<body>") + 6] + page[start:end] + "</body></html>", "utf-8")
    image, console = render_in_browser(maps, tmp_path)
    assert console == []
    luminance = image @ np.array([0.2126, 0.7152, 0.0722])  # (rows, cols)
    blue = (image[:, :, 2] - image[:, :, 0]) > 0.3
    assert luminance[blue].min() < 0.25  # dark cells of the largest weights
    tinted = (image[:, :, 2] - image[:, :, 0]) > 0.02
    assert (tinted & (luminance > 0.65)).sum() > 200  # and light ones: visible contrast
