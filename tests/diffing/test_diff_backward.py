"""attntrace diff --backward: correct modules match for gradients too (nn.MultiheadAttention,
plain torch, a hand-written autograd.Function, transformers' Llama); the planted backward bugs
of tests/data/diff_corpus/autograd_torch.py are each named; the JSON section and the CLI."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from typing import Any

import jsonschema
import numpy as np
import pytest

torch = pytest.importorskip("torch")

from attntrace import AttentionConfig, trace_attention  # noqa: E402
from attntrace.diffing.backward_diff import backward_catalogue  # noqa: E402
from attntrace.diffing.diff_report import diff  # noqa: E402
from attntrace.schemas import diff_schema  # noqa: E402
from paths import DATA  # noqa: E402

CORPUS = DATA / "diff_corpus"
BASE = CORPUS / "autograd_torch.py"
MHA = AttentionConfig(batch=2, seq=5, hidden=32, heads=4)
GQA = AttentionConfig(batch=2, seq=5, hidden=32, heads=4, kv_heads=2)

#: id -> ({line of the base: the mistaken line}, the bug's key, the first gradient that
#: differs, the config). One line edited each.
BUGS: dict[str, tuple[dict[str, str], str, str, AttentionConfig]] = {
    "no-rowsum": (
        {
            "d_scaled = weights * (d_weights - (d_weights * weights).sum(-1, keepdim=True))": (
                "d_scaled = weights * d_weights"
            )
        },
        "softmax-backward-no-rowsum",
        "d_w_q",
        MHA,
    ),
    "rowsum-queries": (
        {"(d_weights * weights).sum(-1, keepdim=True)": "(d_weights * weights).sum(-2, True)"},
        "softmax-backward-rowsum-queries",
        "d_w_q",
        MHA,
    ),
    "d_v-untransposed": (
        {"d_v_rep = weights.transpose(-2, -1) @ d_context": "d_v_rep = weights @ d_context"},
        "d_v-weights-not-transposed",
        "d_w_v",
        MHA,
    ),
    "d_k-untransposed": (
        {"d_k_rep = d_scores.transpose(-2, -1) @ q": "d_k_rep = d_scores @ q"},
        "d_k-scores-not-transposed",
        "d_w_k",
        MHA,
    ),
    "scale-missing": (
        {"d_scores = d_scaled * ctx.scale": "d_scores = d_scaled"},
        "backward-scale-missing",
        "d_w_q",
        MHA,
    ),
    "gqa-not-summed": (
        {
            "d_k, d_v = (t.view(B, h // r, r, N, d).sum(2) for t in (d_k_rep, d_v_rep))": (
                "d_k, d_v = (t[:, ::r] for t in (d_k_rep, d_v_rep))"
            )
        },
        "gqa-grad-not-summed",
        "d_w_k",
        GQA,
    ),
    "gqa-mean": (
        {".sum(2) for t in (d_k_rep, d_v_rep))": ".mean(2) for t in (d_k_rep, d_v_rep))"},
        "gqa-grad-mean",
        "d_w_k",
        GQA,
    ),
    "weight-transposed": (
        {"d_w = rows_y.transpose(0, 1) @ rows_x": "d_w = rows_x.transpose(0, 1) @ rows_y"},
        "weight-grad-transposed",
        "d_w_o",
        MHA,
    ),
}


def _load(path: Path, name: str) -> Any:
    spec = importlib.util.spec_from_file_location(f"_diff_backward_{path.stem}", path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return getattr(module, name)


def _hand(path: Path, config: AttentionConfig) -> Any:
    torch.manual_seed(0)
    return _load(path, "HandAttention")(config.hidden, config.heads, config.kv_heads)


def _planted(tmp_path: Path, key: str) -> Path:
    edits = BUGS[key][0]
    text = BASE.read_text()
    for line, wrong in edits.items():
        assert text.count(line) == 1, line  # one line edited, and it is there
        text = text.replace(line, wrong)
    path = tmp_path / f"hand_{key.replace('-', '_')}.py"
    path.write_text(text)
    return path


@pytest.mark.parametrize("config", [MHA, GQA], ids=["mha", "gqa"])
def test_the_hand_written_backward_matches(config: AttentionConfig) -> None:
    report = diff(_hand(BASE, config), config, backward=True)
    assert report.ok
    section = report.backward
    assert section is not None
    assert section.skipped is None
    names = [r.name for r in section.rows]
    assert names == ["d_w_o", "d_b_o", "d_w_q", "d_b_q", "d_w_k", "d_b_k", "d_w_v", "d_b_v", "d_x"]
    assert all(r.status == "match" for r in section.rows)


@pytest.mark.parametrize("key", list(BUGS))
def test_each_planted_backward_bug_is_named(tmp_path: Path, key: str) -> None:
    _, bug, first, config = BUGS[key]
    report = diff(_hand(_planted(tmp_path, key), config), config, backward=True)
    assert all(r.ok for r in report.rows)  # the forward is right: the bug is the backward's
    assert not report.ok
    section = report.backward
    assert section is not None
    assert section.first == first
    assert section.bug is not None
    assert section.bug.key == bug
    differing = {r.name for r in section.rows if not r.ok}
    assert first in differing
    assert "d_b_o" not in differing  # nothing before the output's linear is touched


@pytest.mark.slow
def test_correct_modules_match_for_gradients() -> None:
    torch.manual_seed(0)
    mha = torch.nn.MultiheadAttention(32, 4, batch_first=True)
    report = diff(mha, MHA, backward=True)
    assert report.ok
    assert report.backward is not None
    assert {"d_w_q", "d_b_v", "d_w_o", "d_x"} <= {r.name for r in report.backward.rows}
    torch.manual_seed(0)
    notes = _load(CORPUS / "notes_torch.py", "NotesAttention")(feature_dim=64)
    plain = diff(notes, AttentionConfig(batch=2, seq=5, hidden=64, heads=4), backward=True)
    assert plain.ok
    assert plain.backward is not None
    assert len(plain.backward.rows) == 9


def test_llama_from_transformers_matches_for_gradients() -> None:
    pytest.importorskip("transformers")
    from attntrace.capturing.library import build, find_class

    cls = find_class("transformers", "LlamaAttention")
    torch.manual_seed(0)
    module = build(cls, {"num_key_value_heads": 2}, {"hidden": 64, "heads": 4})
    report = diff(module, AttentionConfig(batch=2, seq=5, hidden=64, heads=4), backward=True)
    assert report.ok, report.backward
    assert report.backward is not None
    names = {r.name for r in report.backward.rows}
    assert {"d_w_q", "d_w_k", "d_w_v", "d_w_o", "d_x"} <= names
    assert report.config.rope


def test_a_torch_function_and_numpy_code() -> None:
    config = AttentionConfig(seq=4, hidden=8, heads=2)

    def attend(x: Any, p: Any) -> Any:
        q, k, v = (x @ p[f"w_{c}"].T + p[f"b_{c}"] for c in "qkv")
        q, k, v = (t.view(4, 2, 4).transpose(0, 1) for t in (q, k, v))
        w = torch.softmax(q @ k.transpose(-2, -1) / 2.0, dim=-1)
        return (w @ v).transpose(0, 1).reshape(4, 8) @ p["w_o"].T + p["b_o"]

    attend.__module__ = __name__  # torch is in this module: the function takes torch tensors
    report = diff(attend, config, backward=True)
    assert report.ok
    assert report.backward is not None
    assert len(report.backward.rows) == 9

    def numpy_attend(x: Any, p: Any) -> Any:
        return np.zeros_like(x)

    numpy_attend.__module__ = "numpy"
    skipped = diff(numpy_attend, config, backward=True).backward
    assert skipped is not None
    assert skipped.skipped is not None
    assert "numpy" in skipped.skipped or "forward" in skipped.skipped


def test_a_forward_bug_skips_the_backward(tmp_path: Path) -> None:
    wrong = tmp_path / "wrong_axis.py"
    wrong.write_text(BASE.read_text().replace("* scale, dim=-1)", "* scale, dim=-2)"))
    report = diff(_hand(wrong, MHA), MHA, backward=True)
    assert not report.ok
    assert report.backward is not None
    assert report.backward.skipped is not None
    assert "forward differs" in report.backward.skipped


def test_the_replayed_mistake_changes_the_reference_backward() -> None:
    # float64: the replayed run and the plain one are two computations (other BLAS kernels
    # differ in float32's last bits), compared to 1e-10 rather than bit for bit
    config = AttentionConfig(seq=3, hidden=8, heads=2, dtype="float64")
    bug = next(b for b in backward_catalogue(config) if b.key == "softmax-backward-no-rowsum")
    right = trace_attention(config, backward=True)
    wrong = trace_attention(config, backward=True, replace=bug.replace)
    expected = right["weights"].value * right["d_weights"].value  # (h, S, N)
    np.testing.assert_allclose(wrong["d_scaled"].value, expected, rtol=1e-10, atol=1e-12)
    assert not np.allclose(wrong["d_x"].value, right["d_x"].value)
    np.testing.assert_allclose(wrong["d_w_o"].value, right["d_w_o"].value, rtol=1e-10, atol=1e-12)


def _cli(*args: str) -> Any:
    from typer.testing import CliRunner

    from attntrace.cli import app

    return CliRunner().invoke(app, ["diff", *args])


@pytest.mark.slow
def test_cli_backward_json_and_exit_codes(tmp_path: Path) -> None:
    sizes = ("--batch", "2", "--seq", "5", "--hidden", "32", "--heads", "4")
    good = _cli(f"{BASE}:HandAttention", *sizes, "--backward", "-f", "json")
    assert good.exit_code == 0, good.output
    doc = json.loads(good.output)
    jsonschema.Draft202012Validator(diff_schema()).validate(doc)
    assert doc["backward"]["ok"] is True
    assert doc["backward"]["rows"][0]["gradient"] == "d_w_o"
    forward_only = json.loads(_cli(f"{BASE}:HandAttention", *sizes, "-f", "json").output)
    assert "backward" not in forward_only
    bad = _cli(f"{_planted(tmp_path, 'scale-missing')}:HandAttention", *sizes, "--backward")
    assert bad.exit_code == 1, bad.output
    assert "DIFFERS from gradient d_w_q" in bad.output
    assert "the backward leaves out the scale" in bad.output


def test_a_weight_diff_filled_in_is_not_compared() -> None:
    """BERT's self-attention has no output projection: diff fills w_o in, so d_w_o is named in
    the notes instead of compared; the rest match."""
    pytest.importorskip("transformers")
    from attntrace.capturing.library import build, find_class

    torch.manual_seed(0)
    module = build(find_class("transformers", "BertSelfAttention"), {}, {"hidden": 64, "heads": 4})
    report = diff(module, AttentionConfig(batch=2, seq=5, hidden=64, heads=4), backward=True)
    assert report.ok
    assert report.backward is not None
    assert any(n.startswith("d_w_o not compared") for n in report.backward.notes)
    assert "d_w_o" not in {r.name for r in report.backward.rows}
    assert {"d_w_q", "d_x"} <= {r.name for r in report.backward.rows}
