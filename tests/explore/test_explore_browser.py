"""explore in a real browser (Debian's chromium driven by Playwright, no browser download), the
network blocked but for the page's own server: the page draws the engine's steps, follows h
12 -> 8 in every affected shape, explains a clicked step in English and Chinese, and shows a
clicked token's row in every head."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest

from attntrace import AttentionConfig, trace_attention
from attntrace.explore.prompt_rows import prompt_rows
from attntrace.explore.server import ExploreServer, ExploreState, start
from attntrace.learn import explain_step
from browser import chromium

pytestmark = pytest.mark.slow
sync_api = pytest.importorskip("playwright.sync_api")


@pytest.fixture(scope="module")
def server() -> Iterator[ExploreServer]:
    served, thread = start(ExploreState(prompt=prompt_rows("cat", None)))
    yield served
    served.shutdown()
    served.server_close()
    thread.join(5)


@pytest.fixture(scope="module")
def page(server: ExploreServer) -> Iterator[tuple[Any, list[str]]]:
    """The explore page in headless chromium; every request that is not to the page's own
    server is blocked and listed."""
    blocked: list[str] = []
    origin = server.url.split("/?")[0]

    def gate(route: Any) -> None:
        if route.request.url.startswith(origin):
            route.continue_()
        else:
            blocked.append(route.request.url)
            route.abort()

    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(
            executable_path=chromium(), args=["--no-sandbox", "--disable-gpu"]
        )
        tab = browser.new_page()
        tab.route("**/*", gate)
        tab.goto(server.url)
        yield tab, blocked
        browser.close()


def shapes(tab: Any) -> dict[str, str]:
    cards = tab.locator("#steps .step")
    names = cards.evaluate_all(
        "cs => cs.map(c => [c.dataset.step, c.querySelector('.shape').textContent])"
    )
    return dict(names)


def shape_of(tab: Any, step: str, shape: str) -> None:
    """Wait until the page shows ``shape`` for ``step`` (the server answers a change)."""
    card = tab.locator(f'#steps .step[data-step="{step}"] .shape')
    sync_api.expect(card).to_have_text(shape)


def expected(heads: int) -> dict[str, str]:
    trace = trace_attention(AttentionConfig(heads=heads), "shape")
    return {s.name: "(" + ", ".join(map(str, s.shape)) + ")" for s in trace.steps}


def test_turning_h_from_12_to_8_redraws_every_affected_shape(page: tuple[Any, list[str]]) -> None:
    tab, blocked = page
    tab.wait_for_selector('#steps .step[data-step="q_heads"]')
    assert shapes(tab) == expected(12)
    tab.fill('#controls input[name="h"]', "8")
    shape_of(tab, "q_heads", "(3, 8, 96)")
    now, before = shapes(tab), expected(12)
    assert now == expected(8)
    changed = set(
        tab.locator("#steps .step.changed").evaluate_all("cs => cs.map(c => c.dataset.step)")
    )
    assert changed == {name for name in now if now[name] != before[name]}
    assert {"q_heads", "scores", "weights", "context"} <= changed
    assert "x" not in changed
    assert "merged" not in changed
    assert blocked == []


def test_a_bad_value_is_one_line_on_the_page(page: tuple[Any, list[str]]) -> None:
    tab, _ = page
    tab.fill('#controls input[name="h"]', "7")
    sync_api.expect(tab.locator("#error")).to_contain_text("H 768 is not divisible by h 7")
    tab.fill('#controls input[name="h"]', "8")
    sync_api.expect(tab.locator("#error")).to_have_text("")


def test_a_clicked_step_is_explained_in_english_and_chinese(page: tuple[Any, list[str]]) -> None:
    tab, _ = page
    tab.fill('#controls input[name="h"]', "8")
    shape_of(tab, "q_heads", "(3, 8, 96)")
    trace = trace_attention(AttentionConfig(heads=8), "shape")
    tab.click('#steps .step[data-step="q_heads"]')
    assert tab.text_content("#detail .explanation") == explain_step(trace, "q_heads", "en")
    assert "(3, 8, 96)" in tab.text_content("#detail")
    tab.click("#lang-zh")
    chinese = tab.text_content("#detail .explanation")
    assert chinese == explain_step(trace, "q_heads", "zh")
    assert re.search(r"[\u4e00-\u9fff]", chinese)
    tab.click("#lang-en")
    assert tab.text_content("#detail .explanation") == explain_step(trace, "q_heads", "en")


def test_a_clicked_step_shows_its_numbers_and_cost_at_small_sizes(
    page: tuple[Any, list[str]],
) -> None:
    tab, _ = page
    for name, value in (("S", "2"), ("H", "4"), ("h", "2")):
        tab.fill(f'#controls input[name="{name}"]', value)
    shape_of(tab, "scores", "(2, 2, 2)")
    tab.click('#steps .step[data-step="weights"]')
    cells = tab.locator("#detail .numbers td").all_text_contents()
    assert len(cells) == 2 * 2 * 2
    weights = trace_attention(AttentionConfig(seq=2, hidden=4, heads=2), "numpy")["weights"].value
    assert [float(c) for c in cells] == pytest.approx(weights.ravel().tolist(), abs=1e-4)
    assert "FLOPs = 5·h·S·S" in tab.text_content("#detail .cost")


def test_a_clicked_token_shows_its_row_in_every_head(page: tuple[Any, list[str]]) -> None:
    tab, blocked = page
    tab.click('#tokens button[data-index="1"]')
    tab.wait_for_selector('#token-rows table[data-layer="0"]')
    rows = tab.locator('#token-rows table[data-layer="0"] tr')
    assert rows.count() == 1 + 12  # the keys, then a row per head
    assert rows.nth(0).locator("th").all_text_contents()[1:] == ["c", "a", "t"]
    first = [float(v) for v in rows.nth(1).locator("td").all_text_contents()]
    assert sum(first) == pytest.approx(1.0, abs=0.02)
    assert blocked == []
