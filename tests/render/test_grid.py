"""The run view laid out by attntrace.render.grid is byte for byte what Rich lays out: every
config, width and console kind (colours, no colour, a file, ASCII); where the grid does not apply
it hands the piece to Rich. Property tests compare texts and tables of random content."""

from __future__ import annotations

import dataclasses
import io
from collections.abc import Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from rich.cells import cell_len
from rich.console import Console

from attntrace import AttentionConfig, trace_attention
from attntrace.render.grid import BLANK, ONE_CELL, Column, Grid, Piece, Prose, show
from attntrace.render.table import render_trace, trace_pieces
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
#: Every width the small config is drawn at (every fourth with the other consoles); the other
#: configs at a few, narrow ones included.
SMALL_WIDTHS = range(30, 201)
WIDTHS = (30, 37, 44, 52, 61, 70, 79, 80, 93, 120, 200)


def _trace(name: str) -> tuple[Trace, dict[str, object]]:
    cfg, options = CONFIGS[name]
    view = dict(options)
    backend, layers = str(view.pop("backend", "numpy")), view.pop("layers", None)
    keep: bool | set[str] = True if view.get("values") else {"weights", "masked"}
    trace = trace_attention(cfg, backend, keep_values=keep if backend != "shape" else False)
    if isinstance(layers, int):
        trace = dataclasses.replace(trace, whole_model=model_figures(trace, layers))
    return trace, view


def _both(trace: Trace, view: dict[str, object], kind: str, width: int) -> tuple[str, str]:
    """(Rich's rendering, attntrace's) of the table view on a console of ``kind``."""
    out = []
    for fast in (False, True):
        f = io.StringIO()
        console = CONSOLES[kind](f, width)
        render_trace(trace, console, fast=fast, **view)  # type: ignore[arg-type]
        console.file.flush()
        out.append(f.getvalue())
    return out[0], out[1]


@pytest.mark.parametrize("kind", list(CONSOLES))
def test_small_run_is_what_rich_prints_at_every_width(kind: str) -> None:
    trace, view = _trace("small")
    for width in SMALL_WIDTHS if kind in ("file", "truecolor") else SMALL_WIDTHS[::4]:
        rich, ours = _both(trace, view, kind, width)
        assert ours == rich, width


@pytest.mark.parametrize("name", [n for n in CONFIGS if n != "small"])
@pytest.mark.parametrize("kind", ["file", "truecolor", "standard", "no_color", "ascii"])
def test_every_config_is_what_rich_prints(name: str, kind: str) -> None:
    trace, view = _trace(name)
    for width in WIDTHS:
        rich, ours = _both(trace, view, kind, width)
        assert ours == rich, width


def test_colours_come_one_escape_per_segment_as_rich_writes_them() -> None:
    rich, ours = _both(*_trace("long, pooled"), "truecolor", 100)
    assert ours == rich
    assert "\x1b[1m #\x1b[0m\x1b[1m \x1b[0m" in ours  # the header cell, then its padding
    assert "\x1b[37;48;2;" in ours  # shaded cells: white on rgb


@pytest.mark.parametrize("name", ["small", "gqa", "long, pooled", "layers", "values"])
def test_the_grid_draws_every_piece_from_80_columns(name: str) -> None:
    """Rich is the fallback, not the rule: at common widths nothing is handed to it."""
    trace, view = _trace(name)
    options = {k: v for k, v in view.items() if k in ("values", "values_limit", "count")}
    for width in (80, 100, 200):
        pieces = trace_pieces(trace, width, **options)  # type: ignore[arg-type]
        assert all(piece.lines(width) is not None for piece in pieces), width


def test_narrow_consoles_hand_tables_that_must_shrink_to_rich() -> None:
    trace, _ = _trace("small")
    pieces = trace_pieces(trace, 30)
    assert [p.lines(30) is None for p in pieces if isinstance(p, Grid)] == [True, True, True, False]


def test_one_cell_characters_are_one_cell_for_rich_too() -> None:
    assert all(cell_len(c) == 1 for c in ONE_CELL)


def _printed(pieces: list[Piece], width: int, fast: bool, kind: str = "truecolor") -> str:
    f = io.StringIO()
    show(CONSOLES[kind](f, width), pieces, fast)
    return f.getvalue()


WORDS = st.text(st.sampled_from("ab xy·→:[]\\/#@-\n(),."), max_size=12)
STYLES = st.sampled_from(["", "bold", "dim", "cyan", "bold cyan", "white on rgb(1,2,3)"])


@settings(max_examples=300, deadline=None)
@given(
    runs=st.lists(st.tuples(WORDS, STYLES), max_size=6),
    style=STYLES,
    no_wrap=st.booleans(),
    width=st.integers(1, 30),
)
def test_any_prose_is_what_rich_prints(
    runs: list[tuple[str, str]], style: str, no_wrap: bool, width: int
) -> None:
    prose = Prose(runs, style, no_wrap=no_wrap)
    assert _printed([prose, BLANK], width, True) == _printed([prose, BLANK], width, False)


CELLS = st.text(st.sampled_from("ab 1·:[\n"), max_size=7)


@settings(max_examples=300, deadline=None)
@given(
    data=st.data(),
    columns=st.integers(1, 4),
    rows=st.integers(0, 3),
    rule=st.booleans(),
    pad=st.integers(0, 2),
    pad_edge=st.booleans(),
    footer=st.booleans(),
    width=st.integers(1, 40),
    title=CELLS,
    caption=CELLS,
)
def test_any_grid_is_what_rich_prints(
    data: st.DataObject,
    columns: int,
    rows: int,
    rule: bool,
    pad: int,
    pad_edge: bool,
    footer: bool,
    width: int,
    title: str,
    caption: str,
) -> None:
    grid = Grid(title, caption=caption, rule=rule, pad=pad, pad_edge=pad_edge, footer=footer)
    for _ in range(columns):
        grid.add_column(
            Column(
                data.draw(CELLS),
                data.draw(CELLS),
                justify=data.draw(st.sampled_from(["left", "right"])),
                style=data.draw(STYLES),
                header_style=data.draw(STYLES),
                min_width=data.draw(st.none() | st.integers(0, 5)),
            )
        )
    for _ in range(rows):
        grid.add_row(*(data.draw(CELLS | st.tuples(CELLS, STYLES)) for _ in range(columns)))
    assert _printed([grid], width, True) == _printed([grid], width, False)
