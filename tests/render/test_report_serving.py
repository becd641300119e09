"""attntrace report --past N: the page carries run's serving figures (the roofline of the
decode step beside the prefill of the same tokens, each step's traffic, the KV cache)."""

from __future__ import annotations

import re
from pathlib import Path

from typer.testing import CliRunner

from attntrace.cli import app


def _page(tmp_path: Path, *args: str) -> str:
    out = tmp_path / "r.html"
    result = CliRunner().invoke(app, ["report", "--out", str(out), *args])
    assert result.exit_code == 0, result.output
    return out.read_text(encoding="utf-8")


def _rows(page: str) -> list[list[str]]:
    return [
        [re.sub(r"<[^>]+>", "", c) for c in re.findall(r"<td[^>]*>(.*?)</td>", row)]
        for row in re.findall(r"<tr>(.*?)</tr>", page)
    ]


def test_report_past_has_the_prefill_and_decode_roofline(tmp_path: Path) -> None:
    args = ["--preset", "llama-3-8b", "--seq", "1", "--past", "4095", "--backend", "shape"]
    page = _page(tmp_path, *args)
    assert "<h2>Serving: prefill vs decode, the KV cache</h2>" in page
    assert "<script" not in page
    serving = page[page.index("Serving: prefill") :]
    rows = _rows(serving)
    decode = next(r for r in rows if r[:2] == ["decode", "layer"])
    prefill = next(r for r in rows if r[:2] == ["prefill", "layer"])
    assert decode[-2] == "memory"
    assert prefill[-2] == "compute"
    assert float(decode[-3]) < 295 < float(prefill[-3].replace(",", ""))  # the H100's ridge
    assert any(r[:1] == ["k_all"] for r in rows)  # each step's traffic
    assert "KV cache" in serving


def test_report_without_past_has_no_serving_section(tmp_path: Path) -> None:
    page = _page(tmp_path, "--seq", "4", "--hidden", "8", "--heads", "2")
    assert "Serving" not in page
