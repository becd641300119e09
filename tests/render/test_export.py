"""`run --format svg|html`: the table view exported by Rich, compared with golden files."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from collections.abc import Callable
from html.parser import HTMLParser

import pytest
from typer.testing import CliRunner

from attntrace import AttentionConfig, trace_attention
from attntrace.cli import app
from attntrace.render.export import export_trace, record
from attntrace.render.table import render_trace

runner = CliRunner()
CHAR_WIDTH = 0.61 * 20  # Rich's SVG: font size 20, a cell 0.61 of it
SMALL = ("run", "--seq", "4", "--hidden", "8", "--heads", "2")


def run_cli(*args: str) -> tuple[int, str, str]:
    result = runner.invoke(app, list(args), env={"COLUMNS": "80"})
    return result.exit_code, result.stdout, result.stderr


def svg_text(svg: str) -> str:
    """The characters an SVG export shows, line by line (Rich writes one <text> per span)."""
    root = ET.fromstring(svg)
    lines: dict[float, dict[int, str]] = {}
    for node in root.iter("{http://www.w3.org/2000/svg}text"):
        if node.text is not None and "clip-path" in node.attrib:
            column = round(float(node.get("x", 0)) / CHAR_WIDTH)
            lines.setdefault(float(node.get("y", 0)), {})[column] = node.text.replace("\xa0", " ")
    out = []
    for _, spans in sorted(lines.items()):
        line = ""
        for column, text in sorted(spans.items()):
            line = line.ljust(column) + text
        out.append(line.rstrip())
    return "\n".join(out)


class _Text(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.parts: list[str] = []
        self.in_code = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.in_code = self.in_code or tag == "code"

    def handle_endtag(self, tag: str) -> None:
        self.in_code = self.in_code and tag != "code"

    def handle_data(self, data: str) -> None:
        if self.in_code:
            self.parts.append(data)


def html_text(html: str) -> str:
    parser = _Text()
    parser.feed(html)
    return "".join(parser.parts)


def test_svg_export_matches_golden(golden: Callable[[str, str], None]) -> None:
    code, out, err = run_cli(*SMALL, "--format", "svg")
    assert code == 0, err
    golden(out, "svg")


def test_html_export_matches_golden(golden: Callable[[str, str], None]) -> None:
    code, out, err = run_cli(*SMALL, "--format", "html")
    assert code == 0, err
    golden(out, "html")


@pytest.mark.parametrize("fmt", ["svg", "html"])
def test_export_shows_exactly_the_table_view(fmt: str) -> None:
    """The picture holds the same characters as the table view at the same width."""
    trace = trace_attention(AttentionConfig(seq=4, hidden=8, heads=2))
    plain = record(lambda c: render_trace(trace, c), width=100).export_text(styles=False)
    doc = export_trace(trace, fmt)
    shown = svg_text(doc) if fmt == "svg" else html_text(doc)
    assert [line.rstrip() for line in shown.strip("\n").splitlines()] == [
        line.rstrip() for line in plain.strip("\n").splitlines()
    ]


def test_svg_is_well_formed_xml_without_network_fonts() -> None:
    _, out, _ = run_cli(*SMALL, "--format", "svg")
    root = ET.fromstring(out)
    assert root.tag == "{http://www.w3.org/2000/svg}svg"
    assert "@font-face" not in out  # Rich's web-font fallback is dropped: no network request
    assert "url(http" not in out
    assert "scores" in svg_text(out)


def test_html_keeps_the_heat_map_colours() -> None:
    _, out, _ = run_cli(*SMALL, "--format", "html")
    assert out.startswith("<!DOCTYPE html>")
    assert re.search(r"background-color: #[0-9a-f]{6}", out)  # the shaded heat-map cells
    assert "<script" not in out


def test_values_work_with_pictures_but_not_with_json() -> None:
    code, out, _ = run_cli(
        "run", "--seq", "3", "--hidden", "4", "--heads", "2", "--values", "-f", "html"
    )
    assert code == 0
    assert "w_q (4, 4)" in html_text(out)
    code, _, err = run_cli("run", "--values", "-f", "json")
    assert code == 2
    assert "table, svg or html" in err
