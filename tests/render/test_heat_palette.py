"""The terminal heat map reads in 16, 256 and true colour: every cell's number contrasts with
its background in the colours the console really draws (Rich's downsampling), and the levels
stay apart. ``!attntrace run`` in Jupyter (FORCE_COLOR, 16 colours) once drew every cell
``37;100m``: the largest weight nearly invisible."""

from __future__ import annotations

import io

import pytest
from rich.color import ColorSystem
from rich.console import Console
from rich.style import Style
from rich.terminal_theme import DEFAULT_TERMINAL_THEME, MONOKAI

from attntrace import AttentionConfig, trace_attention
from attntrace.render.table import heat_style, render_trace

SYSTEMS = {"standard": ColorSystem.STANDARD, "256": ColorSystem.EIGHT_BIT}
SYSTEMS["truecolor"] = ColorSystem.TRUECOLOR
LEVELS = [i / 20 for i in range(21)]


def _luminance(rgb: tuple[int, int, int]) -> float:
    def channel(c: int) -> float:
        x = c / 255
        return x / 12.92 if x <= 0.03928 else ((x + 0.055) / 1.055) ** 2.4

    r, g, b = (channel(c) for c in rgb)
    return 0.2126 * r + 0.7152 * g + 0.0722 * b


def _drawn(style: str, system: str, theme_name: str) -> tuple[float, float]:
    """The luminance of the ink and of the background as a terminal of ``system`` with the
    theme ``theme_name`` (light or dark) draws them."""
    theme = DEFAULT_TERMINAL_THEME if theme_name == "light" else MONOKAI
    parsed = Style.parse(style)
    assert parsed.color is not None
    assert parsed.bgcolor is not None
    ink = parsed.color.downgrade(SYSTEMS[system]).get_truecolor(theme, foreground=True)
    paper = parsed.bgcolor.downgrade(SYSTEMS[system]).get_truecolor(theme, foreground=False)
    return _luminance(tuple(ink)), _luminance(tuple(paper))


@pytest.mark.parametrize("theme", ["light", "dark"])
@pytest.mark.parametrize("system", list(SYSTEMS))
def test_every_cell_is_legible_in_every_colour_system_and_theme(system: str, theme: str) -> None:
    for value in LEVELS:
        ink, paper = _drawn(heat_style(value, system), system, theme)
        ratio = (max(ink, paper) + 0.05) / (min(ink, paper) + 0.05)
        assert ratio >= 3.0, (system, theme, value, heat_style(value, system), ratio)


@pytest.mark.parametrize("system", list(SYSTEMS))
def test_the_levels_stay_apart_from_darkest_to_brightest(system: str) -> None:
    levels = (0.0, 0.3, 0.5, 0.7, 1.0)
    for theme in ("light", "dark"):
        papers = [_drawn(heat_style(v, system), system, theme)[1] for v in levels]
        assert papers[0] == min(papers)
        assert papers[-1] == max(papers)
        assert len(set(papers)) >= 4


def test_a_sixteen_colour_run_draws_distinct_cells() -> None:
    out = io.StringIO()
    console = Console(file=out, color_system="standard", force_terminal=True, width=100)
    trace = trace_attention(AttentionConfig(seq=4, hidden=8, heads=2, causal=True))
    render_trace(trace, console)
    text = out.getvalue()
    assert "\x1b[30;107m1.000" in text  # the largest weight: black on bright white
    assert "37;100m" not in text
