"""Prose wraps by display width: between Chinese characters, at spaces, never inside a tuple,
never a closing mark at a line's start, no line wider than the width unless one unit is."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from rich.cells import cell_len
from rich.console import Console
from rich.text import Text

from attntrace.render.prose import NO_START, TUPLE, Prose, break_offsets, units_of

PIECES = st.sampled_from(
    [
        "注意力",
        "权重",
        "，",
        "。",
        "（查询）",
        "softmax",
        "q @ k_t",
        "(3, 12, 64)",
        "(B, h, S, d)",
        "→",
        " ",
        "维度转换",
        "：",
    ]
)


@settings(max_examples=200, deadline=None)
@given(st.lists(PIECES, min_size=1, max_size=30), st.integers(12, 60))
def test_lines_fit_keep_tuples_whole_and_start_with_no_closing_mark(
    pieces: list[str], width: int
) -> None:
    text = "".join(pieces)
    lines = [str(line) for line in Text(text).divide(break_offsets(text, width))]
    assert "".join(lines) == text  # nothing lost or added
    widest_unit = max(cell_len(u.rstrip()) for u in units_of(text))
    assert all(cell_len(line.rstrip()) <= max(width, widest_unit) for line in lines)
    if widest_unit > width:
        return  # a unit wider than the line (softmax(3, 12, 64) in 12 cells) is folded
    for m in TUPLE.finditer(text):
        assert any(m.group() in line for line in lines), (m.group(), lines)
    assert not any(line[:1] in NO_START for line in lines[1:])


def test_a_table_gives_prose_a_column_wide_enough_for_a_tuple() -> None:
    console = Console(width=30, no_color=True)
    with console.capture() as cap:
        console.print(Prose("形状从 (3, 768) 变为 (3, 12, 64)，只是 view 维度转换"))
    lines = cap.get().splitlines()
    assert any("(3, 12, 64)" in line for line in lines)
    assert all(cell_len(line.rstrip()) <= 30 for line in lines)
