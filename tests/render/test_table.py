"""The run view drawn by Rich (attntrace.render.table): every config, width and console kind
(colours, no colour, a file, ASCII) prints every part, within the width; the exact bytes are
the golden files' (tests/cli/test_cli.py, tests/render/test_heatmap.py)."""

from __future__ import annotations

import dataclasses
import io
from collections.abc import Callable

import pytest
from rich.console import Console

from attntrace import AttentionConfig, trace_attention
from attntrace.render.table import TIGHT_WIDTH, render_trace, trace_pieces
from attntrace.render.terminal import PlainStream
from attntrace.trace import Trace, model_figures

CONSOLES: dict[str, Callable[[io.StringIO, int], Console]] = {
    "file": lambda f, w: Console(file=f, width=w),
    "truecolor": lambda f, w: Console(
        file=f, width=w, force_terminal=True, color_system="truecolor"
    ),
    "standard": lambda f, w: Console(file=f, width=w, force_terminal=True, color_system="standard"),
    "256": lambda f, w: Console(file=f, width=w, force_terminal=True, color_system="256"),
    "no_color": lambda f, w: Console(file=f, width=w, force_terminal=True, no_color=True),
    "ascii": lambda f, w: Console(
        file=PlainStream(f, ascii_only=True), width=w, force_terminal=True, color_system="truecolor"
    ),
}

CONFIGS: dict[str, tuple[AttentionConfig, dict[str, object]]] = {
    "small": (AttentionConfig(), {}),
    "gqa": (AttentionConfig(seq=5, hidden=64, heads=8, kv_heads=2), {}),
    "causal rope": (
        AttentionConfig(seq=6, hidden=32, heads=4, causal=True, rope=True, bias=False),
        {},
    ),
    "batch, key padding": (
        AttentionConfig(batch=2, seq=4, hidden=16, heads=2, key_lengths=(3, 2)),
        {"batch_item": 1, "head": 1},
    ),
    "long, pooled": (AttentionConfig(seq=40, hidden=32, heads=2), {}),
    "long causal window": (AttentionConfig(seq=40, hidden=32, heads=2, causal=True, window=8), {}),
    "cross": (AttentionConfig(seq=3, kv_seq=20, hidden=16, heads=2, kv_hidden=12), {}),
    "values": (AttentionConfig(seq=3, hidden=4, heads=2), {"values": True}),
    "values 3-d": (
        AttentionConfig(batch=2, seq=2, hidden=4, heads=2),
        {"values": True, "values_limit": 64},
    ),
    "flash": (AttentionConfig(seq=8, hidden=16, heads=2, algorithm="flash", block_size=4), {}),
    "float16, macs": (
        AttentionConfig(seq=4, hidden=16, heads=2, dtype="float16", causal=True),
        {"count": "macs"},
    ),
    "layers": (AttentionConfig(seq=4, hidden=16, heads=2, kv_heads=1), {"layers": 32}),
    "shape, huge": (
        AttentionConfig(seq=131072, hidden=8192, heads=64, kv_heads=8, causal=True),
        {"backend": "shape", "layers": 80},
    ),
}
WIDTHS = (30, 37, 44, 52, 61, 70, 79, 80, 93, 120, 200)
#: The title of each part of the view, in order (the attention part's title is its first words).
TITLES = ("attntrace  ", "steps (", "costs (", "parameters", "attention weights, head")


def _trace(name: str) -> tuple[Trace, dict[str, object]]:
    cfg, options = CONFIGS[name]
    view = dict(options)
    backend, layers = str(view.pop("backend", "numpy")), view.pop("layers", None)
    keep: bool | set[str] = True if view.get("values") else {"weights", "masked"}
    trace = trace_attention(cfg, backend, keep_values=keep if backend != "shape" else False)
    if isinstance(layers, int):
        trace = dataclasses.replace(trace, whole_model=model_figures(trace, layers))
    return trace, view


def _drawn(trace: Trace, view: dict[str, object], kind: str, width: int) -> str:
    f = io.StringIO()
    console = CONSOLES[kind](f, width)
    render_trace(trace, console, **view)  # type: ignore[arg-type]
    console.file.flush()
    return f.getvalue()


def _plain(trace: Trace, view: dict[str, object], width: int) -> list[str]:
    return _drawn(trace, view, "file", width).splitlines()


@pytest.mark.slow
@pytest.mark.parametrize("name", list(CONFIGS))
def test_every_part_is_drawn_in_order_within_the_width(name: str) -> None:
    trace, view = _trace(name)
    for width in WIDTHS:
        lines = _plain(trace, view, width)
        assert max(map(len, lines)) <= width, width
        starts = [next(i for i, line in enumerate(lines) if line.startswith(t)) for t in TITLES]
        assert starts == sorted(starts), (width, starts)
        if trace.whole_model is not None:
            assert any(line.startswith("whole model: L=") for line in lines), width


@pytest.mark.slow
@pytest.mark.parametrize("name", ["small", "gqa", "causal rope", "flash", "values", "layers"])
def test_from_80_columns_every_step_is_one_row_with_its_shape_and_axes(name: str) -> None:
    trace, view = _trace(name)
    for width in (80, 120, 200):
        rows = [line.split() for line in _plain(trace, view, width)]
        for step in trace.steps:
            row = next(r for r in rows if r[:2] == [str(step.index), step.name])
            line = " ".join(row)
            assert str(step.shape) in line, (width, step.name)
            assert "(" + ", ".join(step.axes) + ("," if len(step.axes) == 1 else "") + ")" in line


def test_costs_footer_and_caption_hold_the_totals() -> None:
    trace, view = _trace("small")
    text = "\n".join(_plain(trace, view, 120))
    assert "total" in text
    assert f"{trace.param_count:,}" in text
    assert "peak: activations alive at once; parameters" in text


def test_tight_consoles_get_one_space_between_columns() -> None:
    trace, view = _trace("small")
    wide = _plain(trace, view, TIGHT_WIDTH)
    tight = _plain(trace, view, TIGHT_WIDTH - 1)
    assert " #  step" in wide[wide.index(next(x for x in wide if x.startswith("steps"))) + 1]
    assert " # step" in tight[tight.index(next(x for x in tight if x.startswith("steps"))) + 1]


@pytest.mark.parametrize("kind", [k for k in CONSOLES if k != "file"])
def test_each_console_kind_gets_the_same_text(kind: str) -> None:
    """Colours or none, Unicode or ASCII: the same characters once escape codes are gone."""
    import re

    from attntrace.render.terminal import to_ascii

    trace, view = _trace("long, pooled")
    plain = "\n".join(line.rstrip() for line in _plain(trace, view, 100))
    drawn = re.sub(r"\x1b\[[0-9;]*m", "", _drawn(trace, view, kind, 100))
    drawn = "\n".join(line.rstrip() for line in drawn.splitlines())
    assert drawn == (to_ascii(plain) if kind == "ascii" else plain)


def test_colours_shade_the_heat_map_cells() -> None:
    out = _drawn(*_trace("long, pooled"), "truecolor", 100)
    assert "\x1b[38;2;255;255;255;48;2;" in out  # shaded cells: white on rgb
    assert "\x1b[1m" in out  # bold titles and step names


def test_narrow_consoles_shrink_the_tables_to_fit() -> None:
    trace, view = _trace("small")
    lines = _plain(trace, view, 30)
    assert max(map(len, lines)) <= 30
    assert any("…" in line for line in lines)  # cells cut, not the lines
    starts = {line.split()[0] for line in lines if line.strip()}
    assert all(any(s.startswith(step.name[:7]) for s in starts) for step in trace.steps)


def test_the_pieces_are_rich_renderables_printed_in_order() -> None:
    from rich.table import Table
    from rich.text import Text

    trace, _ = _trace("layers")
    pieces = trace_pieces(trace, 80)
    assert isinstance(pieces[0], Text)
    tables = [p for p in pieces if isinstance(p, Table)]
    titles = [str(t.title) for t in tables]
    assert titles[:3] == [
        "steps (every tensor float32)",
        "costs (FLOPs; 1 MAC = 2 FLOPs)",
        "parameters",
    ]
    assert titles[3].startswith("whole model: L=32 layers")
    assert tables[-1].title is None  # the heat map
