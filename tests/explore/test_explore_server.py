"""explore's server in-process: it binds 127.0.0.1 only, refuses a request without its token
(403), answers a bad parameter with one line (400), and its /api/trace is the engine's trace of
the controls' config (checked against trace_attention and the head-count rule h·d = H)."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

from attntrace import AttentionConfig, trace_attention
from attntrace.explore.server import ExploreServer, ExploreState, start


@pytest.fixture(scope="module")
def server() -> Iterator[ExploreServer]:
    from attntrace.explore.prompt_rows import prompt_rows

    state = ExploreState(token="secret-token", prompt=prompt_rows("abc", None))
    served, thread = start(state)
    yield served
    served.shutdown()
    served.server_close()
    thread.join(5)


def get(server: ExploreServer, path: str, token: str | None = "secret-token") -> tuple[int, str]:
    host, port = server.server_address[:2]
    sep = "&" if "?" in path else "?"
    url = f"http://{host!s}:{port}{path}" + (f"{sep}token={token}" if token is not None else "")
    try:
        with urllib.request.urlopen(url, timeout=30) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


def trace_doc(server: ExploreServer, query: str) -> dict[str, Any]:
    status, body = get(server, f"/api/trace?{query}")
    assert status == 200, body
    return json.loads(body)  # type: ignore[no-any-return]


def test_it_binds_127_0_0_1_only(server: ExploreServer) -> None:
    assert server.server_address[0] == "127.0.0.1"
    assert server.server_address[1] > 0
    assert server.url.startswith(f"http://127.0.0.1:{server.server_address[1]}/?token=")


@pytest.mark.parametrize("path", ["/", "/api/trace?S=4", "/api/prompt", "/nowhere"])
@pytest.mark.parametrize("token", [None, "", "wrong", "secret-tokenX"])
def test_a_request_without_the_token_is_refused(
    server: ExploreServer, path: str, token: str | None
) -> None:
    status, body = get(server, path, token)
    assert status == 403
    assert "token" in body
    assert "{" not in body


def test_the_page_is_served_whole_with_nothing_from_elsewhere(server: ExploreServer) -> None:
    status, page = get(server, "/")
    assert status == 200
    assert page.startswith("<!DOCTYPE html>")
    assert "<script>" in page
    assert "<style>" in page
    assert "src=" not in page
    assert "href=" not in page
    assert "http" not in page
    for control in ("B", "S", "H", "h", "g", "rope", "causal", "window", "past", "algorithm"):
        assert f'name="{control}"' in page


@pytest.mark.parametrize(
    ("query", "message"),
    [
        ("h=twelve", "h must be a whole number, got 'twelve'"),
        ("h=7", "H 768 is not divisible by h 7"),
        ("S=0", "S must be from 1 to 1048576, got 0"),
        ("causal=maybe", "causal must be 0 or 1, got 'maybe'"),
        ("algorithm=magic", "algorithm must be one of eager, flash, got 'magic'"),
        ("heads=8", "unknown parameter 'heads'"),
        ("h=8&g=3", "g"),
    ],
)
def test_a_bad_parameter_is_one_line_400(server: ExploreServer, query: str, message: str) -> None:
    status, body = get(server, f"/api/trace?{query}")
    assert status == 400
    assert message in body
    assert body.count("\n") == 1
    assert body.endswith("\n")


def test_the_steps_are_the_engines_trace_of_the_controls(server: ExploreServer) -> None:
    doc = trace_doc(server, "S=5&H=64&h=8&g=2&rope=1&causal=1&window=3&past=0&B=2")
    config = AttentionConfig(
        batch=2, seq=5, hidden=64, heads=8, kv_heads=2, rope=True, causal=True, window=3
    )
    expected = trace_attention(config, "shape")
    assert [(s["name"], tuple(s["shape"])) for s in doc["steps"]] == [
        (s.name, s.shape) for s in expected.steps
    ]
    assert doc["sizes"] == {"B": 2, "S": 5, "H": 64, "h": 8, "g": 2, "d": 8}
    assert doc["config"]["window"] == 3
    assert doc["totals"]["flops"] == expected.total_flops


def test_turning_h_from_12_to_8_changes_the_head_shapes(server: ExploreServer) -> None:
    before = {s["name"]: s["shape"] for s in trace_doc(server, "h=12")["steps"]}
    after = {s["name"]: s["shape"] for s in trace_doc(server, "h=8")["steps"]}
    assert before["q_heads"] == [3, 12, 64]
    assert after["q_heads"] == [3, 8, 96]
    assert before["scores"] == [12, 3, 3]
    assert after["scores"] == [8, 3, 3]
    assert before["x"] == after["x"] == [3, 768]
    assert before["merged"] == after["merged"] == [3, 768]  # h·d = H either way


def test_a_step_has_its_words_in_both_languages_its_cost_and_its_numbers(
    server: ExploreServer,
) -> None:
    doc = trace_doc(server, "S=3&H=4&h=2&causal=1")
    step = {s["name"]: s for s in doc["steps"]}
    weights = step["weights"]
    assert weights["explanation"]["en"].startswith("Softmax")
    assert (
        "softmax" in weights["explanation"]["zh"].lower() or "归一" in weights["explanation"]["zh"]
    )
    assert weights["flops"] == 5 * 2 * 3 * 3
    assert weights["formula"] == "5·h·S·S"
    values = np.array(weights["values"])  # (h, S, S)
    np.testing.assert_allclose(values.sum(axis=-1), 1.0, atol=1e-3)
    assert values[0, 0, 1] == 0.0  # causal: the first query sees only itself
    masked = step["masked"]["values"]
    assert masked[0][0][1] is None  # -inf, which JSON cannot hold, is null
    config = AttentionConfig(seq=3, hidden=4, heads=2, causal=True)
    reference = trace_attention(config, "numpy", keep_values=True)["weights"].value
    np.testing.assert_allclose(values, reference, atol=1e-4)


def test_large_sizes_give_shapes_without_numbers(server: ExploreServer) -> None:
    doc = trace_doc(server, "S=4096&H=4096&h=32")
    assert doc["numbers"] is False
    assert doc["backend"] == "shape"
    assert all(s["values"] is None for s in doc["steps"])
    assert {s["name"]: s["shape"] for s in doc["steps"]}["scores"] == [32, 4096, 4096]


def test_a_token_row_in_every_head(server: ExploreServer) -> None:
    status, body = get(server, "/api/prompt")
    assert status == 200
    assert json.loads(body)["tokens"] == ["a", "b", "c"]
    status, body = get(server, "/api/token?index=1")
    rows = json.loads(body)
    assert rows["query"] == "b"
    assert rows["keys"] == ["a", "b", "c"]
    heads = np.array(rows["layers"][0]["heads"])  # (h, N)
    assert heads.shape == (12, 3)
    np.testing.assert_allclose(heads.sum(axis=-1), 1.0, atol=1e-3)
    status, body = get(server, "/api/token?index=3")
    assert status == 400
    assert "index must be a token's position, 0 to 2" in body
