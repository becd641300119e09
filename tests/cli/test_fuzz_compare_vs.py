"""Fuzz ``compare --vs 'OPTIONS'`` (issue 45): the options inside the string are drawn with
the same strategies as the options of every command (:mod:`test_fuzz_cli`: each option's
hostile values by its kind, paths of the hostile corpus), joined as a shell would quote them
or not; whatever B's options, compare ends in a result or in one line, exit 2, never exit 3
(before, a path or a choice given in --vs reached the engine as a string: exit 3)."""

from __future__ import annotations

import shlex
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_fuzz_cli import COMMANDS, WORDS, _values, corpus  # noqa: F401 (corpus: a fixture)

from hostile import invoke

#: compare's own options, each drawn inside --vs (the configuration's and the others: those
#: --vs refuses must be refused in one line too).
OPTIONS: list[Any] = [
    p
    for p in COMMANDS["compare"].params
    if p.param_type_name == "option" and p.name not in ("help", "vs")
]


@st.composite
def vs_strings(draw: st.DrawFn) -> str:
    chosen = draw(st.lists(st.sampled_from(OPTIONS), min_size=1, max_size=4))
    args = [a for option in chosen for a in draw(_values(option))]
    how = draw(st.sampled_from(["quoted", "raw", "broken"]))
    if how == "quoted":
        return shlex.join(args)
    text = " ".join(args)
    return text + " '" if how == "broken" else text  # an unbalanced quote


@pytest.mark.slow
@pytest.mark.e2e  # a hypothesis fuzz of --vs strings: the e2e tier (.ci/run)
@settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=list(HealthCheck),
    derandomize=True,
    database=None,
)
@given(vs=vs_strings(), shape=st.booleans())
def test_any_vs_string_is_contained(vs: str, shape: bool) -> None:
    outcome = invoke("compare", *(["--backend", "shape"] if shape else []), "--vs", vs)
    outcome.assert_contained()
    assert outcome.code in (0, 2), outcome.err


#: --vs values that reached the engine with click's types, not Typer's (exit 3 before).
TYPED = [
    "--model /nonexistent",
    "--weights /nonexistent.npz",
    "--cache /nonexistent.npz",
    "--input /nonexistent.npy",
    "--backend numpy --seq 100000",
    "--dtype float16 --backend numpy",
    "--algorithm flash --backend numpy",
    *WORDS[:4],
]


@pytest.mark.parametrize("vs", TYPED)
def test_a_typed_option_in_vs_is_read_as_its_type(vs: str) -> None:
    outcome = invoke("compare", "--vs", vs)
    outcome.assert_contained()
    assert outcome.code in (0, 2), outcome.err
