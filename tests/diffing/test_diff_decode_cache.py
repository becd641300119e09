"""attntrace diff --past N beyond the output: the cache the decode step returns against the
reference's k_all, v_all (the cache not updated, named at the line that made the stale value),
and the cache joined on the wrong axis (named at the cat's line, whether the cat raises with
N != S or the next matmul with N == S). Planted one line at a time in the verbatim copies of
tests/data/decode."""

from __future__ import annotations

import json
import math
from pathlib import Path

import jsonschema
import pytest
from typer.testing import CliRunner

from attntrace import AttentionConfig
from attntrace.cli import app
from attntrace.diffing.target import diff_target
from attntrace.diffing.user_side import UserCodeError
from attntrace.schemas import diff_schema

pytest.importorskip("torch")

DATA = Path(__file__).parent.parent / "data" / "decode"
G, L = "gpt2_kv_cache", "llama_kv_cache"
CLASS = {G: ("CausalSelfAttention", {}), L: ("LlamaAttention", {"rope": True})}
NOT_UPDATED = (
    "the cache not updated: the step returns the cache it was given, without the new tokens"
)


def _planted(base: str, old: str, new: str, tmp_path: Path, key: str) -> tuple[Path, list[str]]:
    lines = (DATA / f"{base}.py").read_text().splitlines()
    at = _line(lines, old)
    lines[at - 1] = lines[at - 1].replace(old, new)
    path = tmp_path / f"{key}.py"
    path.write_text("\n".join(lines) + "\n")
    return path, lines


def _line(lines: list[str], text: str) -> int:
    found = [i + 1 for i, line in enumerate(lines) if line.strip() == text]
    assert len(found) == 1, f"{text!r} occurs {len(found)} times"
    return found[0]


def _diff(path: Path, base: str, **sizes: int) -> object:
    name, extra = CLASS[base]
    given = {"batch": 2, "seq": 2, "past": 3} | sizes
    cfg = AttentionConfig(hidden=32, heads=4, causal=True, **given, **extra)  # type: ignore[arg-type]
    return diff_target(f"{path}:{name}", [], cfg, {"causal", *given, *extra}, None)


#: (id, file, planted line, its replacement, the bug, the reference step, line blamed: "@" it)
STALE = [
    (
        "present-is-layer-past",
        G,
        "present = (k, v)",
        "present = layer_past",
        "decode-cache-not-updated",
        "k_all",
        "@",
    ),
    (
        "return-layer-past",
        G,
        "return y, present",
        "return y, layer_past",
        "decode-cache-not-updated",
        "k_all",
        "@",
    ),
    (
        "present-before-cat",
        G,
        "present = (k, v)",
        "present = (past_key, past_value)",
        "decode-cache-not-updated",
        "k_all",
        "@",
    ),
    (
        "llama-returns-the-given",
        L,
        "past_key_value = (key_states, value_states) if use_cache else None",
        "past_key_value = past_key_value if use_cache else None",
        "decode-cache-not-updated",
        "k_all",
        "@",
    ),
    (
        "v-not-updated",
        G,
        "present = (k, v)",
        "present = (k, past_value)",
        "decode-v-cache-not-updated",
        "v_all",
        "@",
    ),
    (
        "k-not-updated",
        L,
        "past_key_value = (key_states, value_states) if use_cache else None",
        "past_key_value = (past_key_value[0], value_states) if use_cache else None",
        "decode-k-cache-not-updated",
        "k_all",
        "@",
    ),
]


@pytest.mark.parametrize(
    ("key", "base", "old", "new", "bug", "step", "blamed"), STALE, ids=[s[0] for s in STALE]
)
def test_a_stale_cache_is_named_at_the_line_that_made_it(
    key: str, base: str, old: str, new: str, bug: str, step: str, blamed: str, tmp_path: Path
) -> None:
    path, lines = _planted(base, old, new, tmp_path, key.replace("-", "_"))
    report = _diff(path, base)
    assert not report.ok  # type: ignore[attr-defined]
    d = report.diagnosis  # type: ignore[attr-defined]
    assert d is not None
    assert (d.bug, d.step) == (bug, step), (d.name, d.location)
    assert d.location == f"{path.name}:{_line(lines, new if blamed == '@' else blamed)}"
    assert d.source == new
    assert d.explained_abs == 0.0  # it returns exactly the cache it was given
    rows = {r.step.name: r for r in report.rows}  # type: ignore[attr-defined]
    g = 4 if base == G else 2
    assert rows[step].status == "differs"
    assert rows[step].user.shape == (2, g, 3, 8)  # N, not N+S
    assert rows[step].user.location == d.location
    assert rows["output"].ok  # the step itself attends right: only its cache is wrong
    if bug == "decode-cache-not-updated":
        assert d.name == NOT_UPDATED
        assert not rows["v_all"].ok


@pytest.mark.parametrize(("seq", "past"), [(1, 3), (2, 3)])
def test_a_cache_made_before_the_append_holds_only_the_new_tokens(
    seq: int, past: int, tmp_path: Path
) -> None:
    lines = (DATA / f"{G}.py").read_text().splitlines()
    lines.remove("        present = (k, v)")  # moved above the append
    at = lines.index("        if layer_past is not None:")
    lines.insert(at, "        present = (k, v)")
    path = tmp_path / "early.py"
    path.write_text("\n".join(lines) + "\n")
    report = _diff(path, G, seq=seq, past=past)
    d = report.diagnosis  # type: ignore[attr-defined]
    assert d is not None
    assert (d.bug, d.step) == ("decode-cache-new-only", "k_all")
    assert d.location == f"early.py:{at + 1}"
    assert d.explained_abs < 1e-5  # the new keys, computed on both sides
    rows = {r.step.name: r for r in report.rows}  # type: ignore[attr-defined]
    assert rows["k_all"].user.shape == rows["v_all"].user.shape == (2, 4, seq, 8)
    assert rows["output"].ok


def test_a_cache_returned_but_not_read_is_named(tmp_path: Path) -> None:
    """The step appends into new names and returns them, but attends with the new keys alone:
    the cache it returns is right, the output is attention over S keys, not N+S."""
    text = (DATA / f"{G}.py").read_text()
    bad = (
        text.replace(
            "k = torch.cat((past_key, k), dim=-2)", "k_all = torch.cat((past_key, k), dim=-2)"
        )
        .replace(
            "v = torch.cat((past_value, v), dim=-2)", "v_all = torch.cat((past_value, v), dim=-2)"
        )
        .replace("present = (k, v)", "present = (k_all, v_all)")
    )
    path = tmp_path / "unread.py"
    path.write_text(bad)
    report = _diff(path, G, seq=2, past=3)
    d = report.diagnosis  # type: ignore[attr-defined]
    assert d is not None
    assert d.bug == "decode-cache-unread", (d.name, d.location)
    made = "y = att @ v # (B, nh, T, T) x (B, nh, T, hs) -> (B, nh, T, hs)"  # the first to show it
    assert d.location == f"unread.py:{_line(bad.splitlines(), made)}"
    assert d.explained_abs < 1e-5
    assert not any(n.startswith("the cache it returns") for n in report.notes)  # type: ignore[attr-defined]


def test_a_step_that_returns_no_cache_is_a_note_not_a_failure(tmp_path: Path) -> None:
    path, _ = _planted(G, "return y, present", "return y", tmp_path, "no_cache")
    report = _diff(path, G)
    assert report.ok, report.diagnosis  # type: ignore[attr-defined]
    assert "it returns no (k, v) cache: the cache after the step is not compared" in (
        report.notes  # type: ignore[attr-defined]
    )


def test_a_stale_cache_beside_a_wrong_output_is_a_note(tmp_path: Path) -> None:
    text = (DATA / f"{G}.py").read_text()
    bad = text.replace("present = (k, v)", "present = layer_past").replace(
        "(1.0 / math.sqrt(k.size(-1)))", "(1.0 / k.size(-1))"
    )
    path = tmp_path / "two_bugs.py"
    path.write_text(bad)
    report = _diff(path, G)
    d = report.diagnosis  # type: ignore[attr-defined]
    assert d is not None
    assert d.bug != "decode-cache-not-updated"  # the output's bug comes first
    line = _line(bad.splitlines(), "present = layer_past")
    note = f"the cache it returns: {NOT_UPDATED} at two_bugs.py:{line}"
    assert note in report.notes  # type: ignore[attr-defined]


#: (id, file, planted line, its replacement, what is named)
WRONG_AXIS = [
    (
        "gpt2-k-dim-minus-1",
        G,
        "k = torch.cat((past_key, k), dim=-2)",
        "k = torch.cat((past_key, k), dim=-1)",
        "new keys appended on the wrong axis (dim=-1, the head dim, not -2, the sequence)",
    ),
    (
        "gpt2-v-dim-1",
        G,
        "v = torch.cat((past_value, v), dim=-2)",
        "v = torch.cat((past_value, v), dim=1)",
        "new values appended on the wrong axis (dim=1, the heads, not -2, the sequence)",
    ),
    (
        "llama-k-dim-3",
        L,
        "key_states = torch.cat([past_key_value[0], key_states], dim=2)",
        "key_states = torch.cat([past_key_value[0], key_states], dim=3)",
        "new keys appended on the wrong axis (dim=3, the head dim, not -2, the sequence)",
    ),
]


@pytest.mark.parametrize(("seq", "past"), [(1, 3), (2, 2)], ids=["cat-raises", "matmul-raises"])
@pytest.mark.parametrize(
    ("key", "base", "old", "new", "name"), WRONG_AXIS, ids=[w[0] for w in WRONG_AXIS]
)
def test_the_cache_joined_on_the_wrong_axis_is_named_at_the_cat(
    key: str, base: str, old: str, new: str, name: str, seq: int, past: int, tmp_path: Path
) -> None:
    path, lines = _planted(base, old, new, tmp_path, key.replace("-", "_"))
    report = _diff(path, base, seq=seq, past=past)
    assert not report.ok  # type: ignore[attr-defined]
    d = report.diagnosis  # type: ignore[attr-defined]
    assert d is not None
    assert (d.bug, d.name) == ("decode-wrong-axis", name)
    assert d.location == f"{path.name}:{_line(lines, new)}"
    assert d.source == new
    assert math.isnan(d.max_abs)
    rows = {r.step.name: r for r in report.rows}  # type: ignore[attr-defined]
    assert rows[d.step].status == "differs"
    assert rows[d.step].user is None
    assert rows["q"].ok  # the steps before the failure are compared
    raised = [n for n in report.notes if n.startswith("the code raised")]  # type: ignore[attr-defined]
    assert len(raised) == 1


WRONG_BOTH = (
    "new keys and values appended on the wrong axis (dim=-1, the head dim, not -2, the sequence)"
)


def rows_ok(report: object) -> bool:
    return {r.step.name: r for r in report.rows}["output"].ok  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("seq", "output_ok", "blamed"),
    [(2, True, "present = (k, v)"), (3, False, "@")],
    ids=["the-cache-shows-it", "the-replay-names-it"],
)
def test_a_wrong_axis_read_back_as_the_sequence_is_named(
    seq: int, output_ok: bool, blamed: str, tmp_path: Path
) -> None:
    """With N = S, cat on dim=-1 then a view back to (B, h, N+S, d) raises nowhere: the keys
    interleave (c0, n0, c1, n1 ...). With S = 2 each query still sees the same keys, so only the
    cache it returns shows it; with S = 3 the output differs and the catalogue's replay names
    it."""
    text = (DATA / f"{G}.py").read_text()
    bad = text
    for c, past in (("k", "past_key"), ("v", "past_value")):
        old = f"{c} = torch.cat(({past}, {c}), dim=-2)"
        assert old in bad
        bad = bad.replace(
            old,
            f"{c} = torch.cat(({past}, {c}), dim=-1).view(B, self.n_head, -1, C // self.n_head)",
        )
    path = tmp_path / "viewed.py"
    path.write_text(bad)
    report = _diff(path, G, seq=seq, past=seq)
    d = report.diagnosis  # type: ignore[attr-defined]
    assert d is not None
    assert d.bug == "decode-wrong-axis", (d.name, d.location)
    assert d.name == WRONG_BOTH
    assert rows_ok(report) == output_ok
    viewed = "k = torch.cat((past_key, k), dim=-1).view(B, self.n_head, -1, C // self.n_head)"
    line = _line(bad.splitlines(), viewed if blamed == "@" else blamed)
    assert d.location == f"viewed.py:{line}"
    assert d.explained_abs < 1e-5


def test_another_error_of_the_code_stays_the_users(tmp_path: Path) -> None:
    path, _ = _planted(
        G,
        "att = F.softmax(att, dim=-1)",
        "att = F.softmax(att, dim=-1)[..., :2] @ v",
        tmp_path,
        "own",
    )
    with pytest.raises(UserCodeError, match=r"raised RuntimeError.* at own\.py:\d+"):
        _diff(path, G, seq=1, past=3)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("old", "new", "bug"),
    [
        ("present = (k, v)", "present = layer_past", "decode-cache-not-updated"),
        (WRONG_AXIS[0][2], WRONG_AXIS[0][3], "decode-wrong-axis"),
    ],
    ids=["stale", "wrong-axis"],
)
def test_cli_exit_1_and_json_of_the_named_decode_bugs(
    old: str, new: str, bug: str, tmp_path: Path
) -> None:
    path, lines = _planted(G, old, new, tmp_path, "bad")
    args = ["diff", f"{path}:CausalSelfAttention", "--causal", "--batch", "2", "--seq", "1"]
    args += ["--past", "3", "--hidden", "32", "--heads", "4"]
    runner = CliRunner()
    table = runner.invoke(app, args)
    assert table.exit_code == 1, table.output
    assert f"DIFFERS from step k_all at bad.py:{_line(lines, new)}" in table.output
    out = runner.invoke(app, [*args, "-f", "json"])
    assert out.exit_code == 1, out.output
    doc = json.loads(out.output)
    jsonschema.Draft202012Validator(diff_schema()).validate(doc)
    assert doc["ok"] is False
    assert doc["diagnosis"]["bug"] == bug
    assert doc["diagnosis"]["location"] == f"bad.py:{_line(lines, new)}"
    assert {r["step"]: r["status"] for r in doc["rows"]}["k_all"] == "differs"


def test_a_float32_module_diffed_in_float64_is_called_with_its_cache(tmp_path: Path) -> None:
    """--dtype float64 casts a copy of the module: the copy, too, takes the cache (it was once
    called without it), and a stale cache is still named."""
    name, _ = CLASS[G]
    cfg = AttentionConfig(batch=2, seq=1, past=3, hidden=32, heads=4, causal=True, dtype="float64")
    typed = {"batch", "seq", "past", "hidden", "heads", "causal", "dtype"}
    report = diff_target(f"{DATA / (G + '.py')}:{name}", [], cfg, typed, None)
    assert report.ok, report.diagnosis
    rows = {r.step.name: r for r in report.rows}
    assert rows["output"].agreement.max_abs < 1e-12
    path, _ = _planted(G, "present = (k, v)", "present = layer_past", tmp_path, "stale64")
    stale = diff_target(f"{path}:{name}", [], cfg, typed, None)
    assert stale.diagnosis is not None
    assert stale.diagnosis.bug == "decode-cache-not-updated"
