"""attntrace.text: every string from a file or the command line is made inert."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from rich.console import Console

from attntrace.text import inert, plain

HOSTILE = [
    "\x1b[31mred\x1b[0m",
    "\x1b]8;;https://evil.example\x07link\x1b]8;;\x07",
    "a\rb",
    "bell\x07",
    "del\x7f",
    "c1\x9b31m",
    "rtl\u202eevil",
    "iso\u2066x\u2069",
    "nul\x00",
    "line\u2028sep",
    "surrogate\udcff",
    "tab\tnew\nline",
    "\U000e0041tag",
]


@pytest.mark.parametrize("text", HOSTILE)
def test_plain_leaves_no_unprintable_character(text: str) -> None:
    out = plain(text)
    assert out.isprintable()
    assert "\x1b" not in out
    assert "\\" in out


def test_plain_shows_escapes_as_python_does() -> None:
    assert plain("\x1b[2J") == "\\x1b[2J"
    assert plain("a\u202eb") == "a\\u202eb"
    assert plain("\U000e0041") == "\\U000e0041"
    assert plain("\r\n\t") == "\\r\\n\\t"
    assert plain(12) == "12"


def test_printable_text_is_unchanged() -> None:
    for text in ["w_q", "model.layers.0.self_attn.q_proj.weight", "注意力 ünïcödé", "a b", "C:\\x"]:
        assert plain(text) == text


def _rendered(text: str) -> str:
    console = Console(width=200, no_color=True, force_terminal=False)
    with console.capture() as cap:
        console.print(text)
    return cap.get().rstrip("\n")


@pytest.mark.parametrize(
    "markup",
    [
        "[bold]x[/bold]",
        "[link=https://evil.example]click[/link]",
        "[red]",
        "x\\",
        "\\[bold]",
        "[/]",
        "[@click=app.quit]q[/]",
    ],
)
def test_inert_markup_is_printed_literally(markup: str) -> None:
    # inside the markup of a message, as tables and reports use it
    assert _rendered(f"[dim]{inert(markup)}[/dim]") == markup


@pytest.mark.slow
@settings(max_examples=300, deadline=None)
@given(st.text())
def test_inert_output_renders_as_plain_text(text: str) -> None:
    shown = _rendered(inert(text))
    assert "\x1b" not in shown
    assert shown == _rendered(inert(plain(text)))  # idempotent: plain() of inert text is a no-op
    assert plain(plain(text)) == plain(text)
