"""The flow picture draws no line across an arrow it does not feed, read from the SVG itself:
every line's corners from its ``d`` attribute, every crossing of a horizontal run with another
line's vertical run (the RoPE tables' line over v → v_rep read as RoPE feeding v)."""

from __future__ import annotations

import re
from itertools import combinations, pairwise

import pytest

from attntrace import AttentionConfig, trace_attention
from attntrace.render.flow import render_flow_svg

Point = tuple[float, float]
Line = tuple[str, str, list[Point]]

CONFIGS = {
    "readme: gqa rope causal": AttentionConfig(
        seq=5, hidden=32, heads=4, kv_heads=2, rope=True, causal=True
    ),
    "rope": AttentionConfig(seq=4, hidden=16, heads=2, rope=True),
    "causal": AttentionConfig(seq=4, hidden=16, heads=2, causal=True),
    "mqa window": AttentionConfig(seq=6, hidden=16, heads=4, kv_heads=1, causal=True, window=2),
    "everything": AttentionConfig(
        batch=2,
        seq=5,
        hidden=16,
        heads=4,
        kv_heads=2,
        causal=True,
        key_lengths=(5, 4),
        rope=True,
        softcap=50.0,
        qk_norm="head",
        relative_bias="8,16",
    ),
    "decode": AttentionConfig(
        seq=1, past=5, hidden=16, heads=4, kv_heads=2, causal=True, rope=True
    ),
}


def lines_of(svg: str) -> list[Line]:
    """Every arrow of the picture: where it comes from, where it goes, its corners."""
    found = []
    for m in re.finditer(r'data-from="([^"]+)" data-to="([^"]+)" d="([^"]+)"', svg):
        tokens = m.group(3).split()
        x, y = float(tokens[1]), float(tokens[2])
        corners = [(x, y)]
        for op, value in zip(tokens[3::2], tokens[4::2], strict=True):
            x, y = (float(value), y) if op == "H" else (x, float(value))
            assert op in ("H", "V"), m.group(3)
            corners.append((x, y))
        found.append((m.group(1), m.group(2), corners))
    return found


def crosses(p: list[Point], q: list[Point]) -> bool:
    """A horizontal run of one line through the inside of a vertical run of the other."""
    for a, b in pairwise(p):
        for c, d in pairwise(q):
            for h, v in (((a, b), (c, d)), ((c, d), (a, b))):
                (hx1, hy1), (hx2, hy2) = h
                (vx1, vy1), (vx2, vy2) = v
                if hy1 == hy2 and vx1 == vx2 and hx1 != hx2 and vy1 != vy2:
                    inside_x = min(hx1, hx2) < vx1 < max(hx1, hx2)
                    inside_y = min(vy1, vy2) < hy1 < max(vy1, vy2)
                    if inside_x and inside_y:
                        return True
    return False


def wrong_crossings(svg: str) -> list[tuple[str, str, str, str]]:
    """Pairs of crossing lines where neither line's source feeds the other's arrow target."""
    lines = lines_of(svg)
    feeds: dict[str, set[str]] = {}
    for src, dst, _ in lines:
        feeds.setdefault(src, set()).add(dst)
    return [
        (a, b, c, d)
        for (a, b, p), (c, d, q) in combinations(lines, 2)
        if not ({a, b} & {c, d} or d in feeds[a] or b in feeds[c]) and crosses(p, q)
    ]


@pytest.mark.parametrize("name", list(CONFIGS))
def test_no_line_crosses_an_arrow_it_does_not_feed(name: str) -> None:
    svg = render_flow_svg(trace_attention(CONFIGS[name], "shape"))
    assert len(lines_of(svg)) > 15  # the picture's arrows were read
    assert wrong_crossings(svg) == []


def test_the_rope_tables_line_stays_off_the_v_path() -> None:
    svg = render_flow_svg(trace_attention(CONFIGS["readme: gqa rope causal"], "shape"))
    lines = lines_of(svg)
    rope = [p for src, _, p in lines if src.startswith("rope_")]
    v_path = [p for src, dst, p in lines if src in ("v", "v_rep") or dst == "v_rep"]
    assert rope
    assert v_path
    assert not any(crosses(r, v) for r in rope for v in v_path)


def test_the_check_finds_a_crossing_when_there_is_one() -> None:
    across = '<path class="edge" data-from="a" data-to="b" d="M 0 0 V 10 H 100 V 20"/>'
    down = '<path class="edge" data-from="c" data-to="d" d="M 50 0 V 30"/>'
    assert wrong_crossings(across + down) == [("a", "b", "c", "d")]
    into_same = '<path class="edge" data-from="c" data-to="b" d="M 50 0 V 30"/>'
    assert wrong_crossings(across + into_same) == []
