"""A decode step of llama-3-70b at N = 1,048,575 on the shape backend, serving figures and all:
as quick as a plain shape run of the same preset (at most 1.5x its time, best of three each)
and under 80 MiB, measured in a child process as tests/engine/test_shape_bounds.py does."""

from __future__ import annotations

import pytest
from test_shape_bounds import _measure

pytestmark = pytest.mark.slow  # real processes or seconds per test

PRESET = ("run", "--backend", "shape", "--preset", "llama-3-70b")


def _best(*args: str) -> dict[str, float]:
    runs = [_measure(*args) for _ in range(3)]
    assert all(r["code"] == 0 for r in runs), runs
    return min(runs, key=lambda r: r["seconds"])


def test_a_decode_step_at_a_million_tokens_is_instant() -> None:
    plain = _best(*PRESET, "--seq", "1")
    decode = _best(*PRESET, "--seq", "1", "--past", "1048575", "--memory", "80GiB")
    assert decode["seconds"] <= 1.5 * plain["seconds"] + 0.05, (decode, plain)
    assert decode["peak"] < 80 * 2**20, decode


def test_a_json_decode_step_at_the_largest_past_is_bounded() -> None:
    decode = _best(*PRESET, "--seq", "1", "--past", str(2**31 - 2), "-f", "json")
    assert decode["seconds"] < 1.0, decode
    assert decode["peak"] < 80 * 2**20, decode
