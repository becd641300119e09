"""Every public parser does work linear in its input and refuses an over-long value before
reading it (issue 45): each is timed on values of 10⁶ characters of several hostile forms
(digits with a bad end, runs of spaces, brackets, separators), as a bound on the work of one
call, not as a speed goal. On the command line the same values are one line, exit 2, and the
line quotes at most a few dozen characters of the value. Bad option values that reach the
sandbox's child (``--timeout inf``) are refused before it starts."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from attntrace.capturing.axes import parse_axes
from attntrace.capturing.runner import parse_init, parse_target
from attntrace.cli.configure import parse_key_lengths, parse_past
from attntrace.config.attention_config import parse_scale
from attntrace.config.variants import parse_relative_bias, parse_rope_scaling
from attntrace.errors import AttntraceError
from attntrace.tools.check import parse_expectation, spec_lines
from attntrace.tools.demo import parse_matrix
from attntrace.tools.sweep import parse_algorithms, parse_list
from attntrace.units import parse_rate, parse_shape, parse_size
from hostile import invoke

N = 10**6
#: The most one call may take on a 10⁶-character value: generous (a shared 2-core machine),
#: far below what a quadratic parser takes (13 s at 10⁴ characters before).
CEILING = 2.0

PARSERS: dict[str, Callable[[str], Any]] = {
    "parse_size": parse_size,
    "parse_rate": lambda t: parse_rate(t, "--peak-flops", "989T"),
    "parse_shape": parse_shape,
    "parse_target": parse_target,
    "parse_init": lambda t: parse_init([f"a={t}"]),
    "parse_axes": parse_axes,
    "parse_scale": parse_scale,
    "parse_rope_scaling": parse_rope_scaling,
    "parse_relative_bias": parse_relative_bias,
    "parse_past": parse_past,
    "parse_key_lengths": parse_key_lengths,
    "parse_expectation": parse_expectation,
    "parse_matrix": lambda t: parse_matrix(t, "--query"),
    "parse_list": lambda t: parse_list(t, "--seq"),
    "parse_algorithms": parse_algorithms,
    "spec_lines": spec_lines,
}

FORMS: dict[str, str] = {
    "digits": "1" * N,
    "digits_then_bang": "1" * N + "!",
    "digits_then_unit": "1" * N + "x",
    "spaces": "1" + " " * N + "!",
    "decimal_points": "1." * (N // 2),
    "exponents": "1e" * (N // 2) + "!",
    "brackets": "[" * N,
    "brackets_and_spaces": "[ " * (N // 2),
    "commas": "1," * (N // 2),
    "pairs": "a=1," * (N // 4),
    "letters_then_bang": "a" * N + "!",
    "products": "a*" * (N // 2) + "!",
    "sums": "a + " * (N // 4) + "!",
    "by_x": "1x" * (N // 2) + "!",
}


@pytest.mark.parametrize("form", sorted(FORMS))
@pytest.mark.parametrize("name", sorted(PARSERS))
def test_each_parser_is_bounded_at_a_million_characters(name: str, form: str) -> None:
    start = time.perf_counter()
    message = ""
    try:
        PARSERS[name](FORMS[form])
    except AttntraceError as exc:
        message = str(exc)
    took = time.perf_counter() - start
    assert len(message) < 400, message[:400]  # the value is quoted cut short
    assert took < CEILING, f"{name} took {took:.1f} s on {form}"


def test_the_spec_indexer_is_linear_on_a_long_line_of_brackets() -> None:
    line = "[ " * 1500  # a 3 KB line: cubic before (it never finished)
    start = time.perf_counter()
    assert spec_lines(f'[config.a]\nnote = """\n{line}\n"""\n') == {
        "config.a": 1,
        "config.a.note": 2,
    }
    assert time.perf_counter() - start < CEILING


LONG = "1" * N + "x"

#: command line -> what its one line starts with
OPTIONS = {
    ("run", "--max-memory", LONG): "attntrace: error: the size '1111",
    ("run", "--peak-flops", LONG): "attntrace: error: --peak-flops '1111",
    ("run", "--bandwidth", LONG): "attntrace: error: --bandwidth '1111",
    ("run", "--memory", LONG): "attntrace: error: ",
    ("run", "--scale", LONG): "attntrace: error: --scale '1111",
    ("run", "--key-lengths", LONG): "attntrace: error: --key-lengths '1111",
    ("run", "--rope", "--rope-scaling", LONG): "attntrace: error: --rope-scaling '1111",
    ("check", "--expect", f"scores={LONG}"): "attntrace: error: --expect 'scores=1111",
    ("sweep", "--seq", LONG): "attntrace: error: --seq '1111",
    ("demo", "--query", LONG): "attntrace: error: --query '1111",
    ("compare", "--vs", f"--heads {LONG}"): "attntrace: error: --vs '--heads 1111",
}


@pytest.mark.parametrize("args", sorted(OPTIONS), ids=lambda a: " ".join(a)[:30])
def test_a_long_option_value_is_one_short_line_exit_2(args: tuple[str, ...]) -> None:
    start = time.perf_counter()
    out = invoke(*args)
    assert time.perf_counter() - start < 10 * CEILING
    out.assert_contained()
    assert out.code == 2, out.err[:300]
    assert out.err.startswith(OPTIONS[args]), out.err[:300]
    assert len(out.err) < 600, out.err[:600]


@pytest.mark.parametrize("value", ["inf", "nan", "1e400", "9" * 100_000, "31536001"])
@pytest.mark.parametrize("command", ["trace", "diff", "check"])
def test_a_timeout_that_is_no_time_limit_is_exit_2(
    tmp_path: Path, command: str, value: str
) -> None:
    script = tmp_path / "attn.py"
    script.write_text("import numpy as np\n\ndef attend(x, p):\n    return x\n")
    target = {"trace": [str(script)], "diff": [f"{script}:attend"]}
    args = target.get(command, ["--trace", str(script), "--expect", "x=3,8"])
    out = invoke(command, *args, "--timeout", value)
    out.assert_contained()
    assert out.code == 2, out.err
    assert out.err.startswith("attntrace: error: --timeout "), out.err
    assert "is not a time limit; give seconds from 0.1 to 31536000" in out.err


def test_a_target_path_longer_than_the_system_takes_is_exit_2() -> None:
    out = invoke("trace", "a" * 300 + ".py")
    out.assert_contained()
    assert out.code == 2
    assert out.err.startswith("attntrace: error: no such file: aaaa")
