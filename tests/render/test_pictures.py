"""`run --plot` (matplotlib heat-map grid) and `run --plot-flow` (hand-written SVG diagram)."""

from __future__ import annotations

import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from collections import deque
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from attntrace import AttentionConfig, trace_attention
from attntrace.cli import app
from attntrace.errors import install_hint
from attntrace.render.flow import BOX_H, BOX_W, inputs, layout, render_flow_svg
from attntrace.units import format_axes, format_shape
from paths import REPO, SRC

SVG = "{http://www.w3.org/2000/svg}"
runner = CliRunner()


def run_cli(*args: str) -> tuple[int, str, str]:
    result = runner.invoke(app, list(args), env={"COLUMNS": "80", "NO_COLOR": "1"})
    return result.exit_code, result.stdout, result.stderr


def colour_panels(png: Path) -> int:
    """Connected regions of saturated colour in the image: the heat maps and the colour bar
    (text, frames and the grey of masked cells have none)."""
    image = pytest.importorskip("matplotlib.image").imread(png)[
        ::4, ::4, :3
    ]  # (rows, cols, rgb), a quarter each way
    mask = (image.max(axis=2) - image.min(axis=2)) > 0.15
    seen = np.zeros_like(mask)
    regions = 0
    for start in zip(*np.nonzero(mask), strict=True):
        if seen[start]:
            continue
        regions += 1
        queue = deque([start])
        seen[start] = True
        while queue:
            r, c = queue.popleft()
            for nr, nc in ((r + 1, c), (r - 1, c), (r, c + 1), (r, c - 1)):
                if (
                    0 <= nr < mask.shape[0]
                    and 0 <= nc < mask.shape[1]
                    and mask[nr, nc]
                    and not seen[nr, nc]
                ):
                    seen[nr, nc] = True
                    queue.append((nr, nc))
    return regions


@pytest.mark.slow
@pytest.mark.parametrize(("heads", "causal"), [(6, True), (4, False), (1, False)])
def test_plot_has_one_panel_per_head_and_a_colour_bar(
    tmp_path: Path, heads: int, causal: bool
) -> None:
    pytest.importorskip("matplotlib")
    png = tmp_path / "heads.png"
    args = [
        "run",
        "--seq",
        "20",  # beyond 16 tokens: no numbers in the cells (they would split the colour regions)
        "--hidden",
        str(8 * heads),
        "--heads",
        str(heads),
        "--plot",
        str(png),
    ]
    code, _, err = run_cli(*args, *(["--causal"] if causal else []))
    assert code == 0, err
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert colour_panels(png) == heads + 1


@pytest.mark.slow
def test_masked_cells_are_a_grey_no_weight_has(tmp_path: Path) -> None:
    image_module = pytest.importorskip("matplotlib.image")
    for causal in (True, False):
        png = tmp_path / f"{causal}.png"
        code, _, _ = run_cli(
            "run",
            "--seq",
            "8",
            "--hidden",
            "8",
            "--heads",
            "2",
            "--plot",
            str(png),
            *(["--causal"] * causal),
        )
        assert code == 0
        rgb = image_module.imread(png)[:, :, :3]
        grey = np.all(np.abs(rgb - 0xB8 / 255) < 0.01, axis=2).sum()
        assert (grey > 500) == causal


@pytest.mark.slow
@pytest.mark.parametrize("suffix", [".svg", ".pdf"])
def test_plot_writes_svg_and_pdf(tmp_path: Path, suffix: str) -> None:
    pytest.importorskip("matplotlib")
    out = tmp_path / f"heads{suffix}"
    code, _, err = run_cli("run", "--hidden", "16", "--heads", "4", "--plot", str(out))
    assert code == 0, err
    head = out.read_bytes()[:64]
    assert head.startswith(b"%PDF") if suffix == ".pdf" else b"<svg" in out.read_bytes()[:2000]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--plot", "x.gif"], "must end in .png, .svg, .pdf"),
        (["--plot", "x.png", "--backend", "shape"], "--backend shape does not compute"),
        (["--plot", "x.png", "--algorithm", "flash"], "never forms whole"),
        (["--plot-flow", "x.png"], "--plot-flow x.png: the file name must end in .svg"),
        (["--plot", "no/such/folder/x.png"], "the folder no/such/folder does not exist"),
    ],
)
def test_bad_pictures_are_one_line_exit_2(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, args: list[str], message: str
) -> None:
    pytest.importorskip("matplotlib")
    monkeypatch.chdir(tmp_path)
    code, _, err = run_cli("run", "--seq", "4", "--hidden", "8", "--heads", "2", *args)
    assert code == 2
    assert message in err
    assert err.count("\n") == 1


@pytest.mark.slow
def test_without_matplotlib_the_error_names_the_extra(tmp_path: Path) -> None:
    code = (
        "import sys; sys.modules['matplotlib'] = None; sys.argv = ['attntrace', 'run', '--plot', "
        f"{str(tmp_path / 'x.png')!r}]; from attntrace.cli import main; main()"
    )
    result = subprocess.run(
        [sys.executable, "-c", code],
        env={**os.environ, "PYTHONPATH": str(SRC)},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 2
    assert result.stderr == (
        "attntrace: error: --plot needs matplotlib, which is not installed; "
        f"{install_hint('plot')}\n"
    )
    assert not (tmp_path / "x.png").exists()


# --- the flow diagram -------------------------------------------------------------------------

FLOW_CONFIGS = [
    AttentionConfig(),
    AttentionConfig(batch=2, kv_heads=4, rope=True, causal=True),
    AttentionConfig(seq=4, hidden=8, heads=2, kv_seq=6, kv_hidden=12),
    AttentionConfig(seq=4, hidden=8, heads=2, algorithm="flash", block_size=2),
]


@pytest.mark.parametrize("config", FLOW_CONFIGS, ids=["mha", "gqa-rope-causal", "cross", "flash"])
def test_flow_draws_every_step_and_every_edge_without_overlap(config: AttentionConfig) -> None:
    trace = trace_attention(config, "shape")
    root = ET.fromstring(render_flow_svg(trace))
    steps = root.findall(f"{SVG}g[@class='step']")
    assert [g.get("data-name") for g in steps] == list(trace.names)
    for g, step in zip(steps, trace.steps, strict=True):
        texts = [t.text for t in g.findall(f"{SVG}text")]
        assert texts == [step.name, format_shape(step.shape), format_axes(step.axes)]
    edges = {
        (p.get("data-from"), p.get("data-to")) for p in root.findall(f"{SVG}path[@class='edge']")
    }
    assert edges == {(i, s.name) for s in trace.steps for i in inputs(trace, s) if i in trace}
    assert {(i, s.name) for s in trace.steps for i in s.inputs if i in trace} <= edges
    boxes = layout(trace)
    for i, a in enumerate(boxes):
        for b in boxes[i + 1 :]:
            assert abs(a.x - b.x) >= BOX_W or abs(a.y - b.y) >= BOX_H, (a.step.name, b.step.name)
        for i_name in inputs(trace, a.step):  # data flows down the page
            assert (
                i_name not in trace or next(b for b in boxes if b.step.name == i_name).row < a.row
            )
    assert (root.find(f"{SVG}rect[@class='loop']") is not None) == (config.algorithm == "flash")


def test_flow_branches_x_into_the_q_k_v_lanes() -> None:
    lanes = {b.step.name: b.lane for b in layout(trace_attention(AttentionConfig(), "shape"))}
    assert (lanes["q_proj"], lanes["k_proj"], lanes["v_proj"]) == (0, 1, 2)
    assert lanes["q_heads"] == lanes["q"] == 0
    assert lanes["v_heads"] == lanes["v"] == 2


def test_flow_svg_matches_golden(golden: Callable[[str, str], None]) -> None:
    golden(render_flow_svg(trace_attention(AttentionConfig(), "shape")), "svg")


def test_plot_flow_option_writes_the_file(tmp_path: Path) -> None:
    out = tmp_path / "flow.svg"
    code, stdout, err = run_cli("run", "--kv-heads", "4", "--plot-flow", str(out))
    assert code == 0, err
    assert "steps (every tensor float32)" in stdout  # the table is still printed
    root = ET.parse(out).getroot()
    assert len(root.findall(f"{SVG}g[@class='step']")) == len(
        trace_attention(AttentionConfig(kv_heads=4), "shape").steps
    )
    assert "http" not in out.read_text().replace("http://www.w3.org/2000/svg", "")


def test_the_readme_flow_picture_is_what_the_documented_command_draws() -> None:
    """docs/flow.svg (shown at the top of the README) cannot go stale."""
    config = AttentionConfig(seq=5, hidden=32, heads=4, kv_heads=2, rope=True, causal=True)
    committed = (REPO / "docs" / "flow.svg").read_text(encoding="utf-8")
    assert committed == render_flow_svg(trace_attention(config, "shape"))
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    assert (
        "--kv-heads 2 --rope --causal --seq 5 --hidden 32 --heads 4 --plot-flow docs/flow.svg"
        in readme
    )


@pytest.mark.slow
def test_small_plots_label_the_tokens_and_write_each_weight_in_its_cell(tmp_path: Path) -> None:
    """Up to 16 tokens every cell holds its weight and the axes say q0.., k0.. (issue 31)."""
    matplotlib = pytest.importorskip("matplotlib")
    from attntrace import AttentionConfig, trace_attention
    from attntrace.render.plot import plot_heads

    trace = trace_attention(AttentionConfig(seq=5, hidden=32, heads=4, causal=True))
    svg = tmp_path / "heads.svg"
    with matplotlib.rc_context({"svg.fonttype": "none"}):  # text as <text>, not paths
        assert plot_heads(trace, svg) == 4
    text = svg.read_text(encoding="utf-8")
    assert text.count(">1.00<") == 4  # query 0 sees key 0 only: weight 1 in every head
    for label in (">q4<", ">k4<", ">k0<"):
        assert label in text
    weights = trace["weights"].value
    assert f">{weights[2, 4, 1]:.2f}<" in text
