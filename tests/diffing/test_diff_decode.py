"""attntrace diff --past N: the user's decode step called with the reference's KV cache
(a (k, v) tuple argument, or a transformers class with a DynamicCache), compared step by step;
the bugs of a decode step planted one line at a time in verbatim copies of real decode code
(tests/data/decode) and named with their line."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest
from typer.testing import CliRunner

from attntrace import AttentionConfig
from attntrace.cli import app
from attntrace.diffing.diff_report import diff
from attntrace.diffing.target import diff_target
from attntrace.errors import ConfigError
from attntrace.schemas import diff_schema

pytest.importorskip("torch")

DATA = Path(__file__).parent.parent / "data" / "decode"
GPT2 = (DATA / "gpt2_kv_cache.py", "CausalSelfAttention", {})
LLAMA = (DATA / "llama_kv_cache.py", "LlamaAttention", {"rope": True})


def _diff(path: Path, name: str, extra: dict[str, object], **sizes: int) -> object:
    given = {"batch": 2, "seq": 2, "past": 3} | sizes
    cfg = AttentionConfig(hidden=32, heads=4, causal=True, **given, **extra)  # type: ignore[arg-type]
    return diff_target(f"{path}:{name}", [], cfg, {"causal", *given, *extra}, None)


@pytest.mark.parametrize("base", [GPT2, LLAMA], ids=["gpt2", "llama"])
@pytest.mark.parametrize(("seq", "past"), [(1, 5), (2, 3), (3, 1)])
def test_correct_decode_step_matches_with_the_cache_shapes(
    base: tuple[Path, str, dict[str, object]], seq: int, past: int
) -> None:
    report = _diff(*base, seq=seq, past=past)
    assert report.ok, report.diagnosis  # type: ignore[attr-defined]
    rows = {r.step.name: r for r in report.rows}  # type: ignore[attr-defined]
    g = 2 if base is LLAMA else 4
    assert rows["k_cache"].step.shape == (2, g, past, 8)
    assert rows["k_all"].step.shape == rows["k_all"].user.shape == (2, g, past + seq, 8)
    assert rows["v_all"].user.shape == (2, g, past + seq, 8)
    assert rows["scores"].user.shape == (2, 4, seq, past + seq)
    assert rows["k_all"].user.location.startswith(base[0].name)
    assert any("(k_cache, v_cache) of" in n for n in report.notes)  # type: ignore[attr-defined]


G, L = "gpt2_kv_cache", "llama_kv_cache"
#: (id, file, planted line, its replacement, the bug, the line blamed: "@" the planted one)
PLANTED = [
    (
        "mask-top-left",
        G,
        "causal_mask = self.bias[:, :, key_length - query_length : key_length, :key_length]",
        "causal_mask = self.bias[:, :, :query_length, :key_length]",
        "decode-mask-top-left",
        "att = att.masked_fill(causal_mask == 0, float('-inf'))",
    ),
    (
        "k-prepended",
        G,
        "k = torch.cat((past_key, k), dim=-2)",
        "k = torch.cat((k, past_key), dim=-2)",
        "decode-k-prepended",
        "@",
    ),
    (
        "kv-swapped",
        G,
        "past_key, past_value = layer_past",
        "past_value, past_key = layer_past",
        "decode-kv-swapped",
        "k = torch.cat((past_key, k), dim=-2)",
    ),
    (
        "rope-from-0",
        L,
        "position_ids = torch.arange(past_key_values_length, q_len + past_key_values_length)"
        ".unsqueeze(0)",
        "position_ids = torch.arange(0, q_len).unsqueeze(0)",
        "decode-rope-from-0",
        "cos = cos[position_ids].unsqueeze(1)  # [bs, 1, seq_len, dim]",
    ),
    (
        "rope-minus-1",
        L,
        "position_ids = torch.arange(past_key_values_length, q_len + past_key_values_length)"
        ".unsqueeze(0)",
        "position_ids = torch.arange(past_key_values_length - 1, q_len + past_key_values_length"
        " - 1).unsqueeze(0)",
        "decode-rope-minus-1",
        "cos = cos[position_ids].unsqueeze(1)  # [bs, 1, seq_len, dim]",
    ),
    (
        "v-from-k-cache",
        L,
        "value_states = torch.cat([past_key_value[1], value_states], dim=2)",
        "value_states = torch.cat([past_key_value[0], value_states], dim=2)",
        "decode-v-from-k-cache",
        "@",
    ),
]


def _line(lines: list[str], text: str) -> int:
    found = [i + 1 for i, line in enumerate(lines) if line.strip() == text]
    assert len(found) == 1, f"{text!r} occurs {len(found)} times"
    return found[0]


@pytest.mark.parametrize(
    ("key", "base", "old", "new", "bug", "blamed"), PLANTED, ids=[p[0] for p in PLANTED]
)
def test_planted_decode_bug_is_named_at_its_line(
    key: str, base: str, old: str, new: str, bug: str, blamed: str, tmp_path: Path
) -> None:
    lines = (DATA / f"{base}.py").read_text().splitlines()
    at = _line(lines, old)
    lines[at - 1] = lines[at - 1].replace(old, new)
    path = tmp_path / f"{key.replace('-', '_')}.py"
    path.write_text("\n".join(lines) + "\n")
    name, extra = (GPT2 if base == G else LLAMA)[1:]
    report = _diff(path, name, extra)
    assert not report.ok  # type: ignore[attr-defined]
    d = report.diagnosis  # type: ignore[attr-defined]
    assert d is not None
    assert d.bug == bug, (d.name, d.step, d.location)
    line = at if blamed == "@" else _line(lines, blamed)
    assert d.location == f"{path.name}:{line}", (d.location, d.source)


def test_a_module_without_a_cache_argument_or_a_function_is_refused() -> None:
    import torch

    cfg = AttentionConfig(batch=2, seq=1, hidden=32, heads=4, causal=True, past=3)
    mha = torch.nn.MultiheadAttention(32, 4, batch_first=True)
    with pytest.raises(ConfigError, match=r"--past 3: MultiheadAttention.forward takes no cache"):
        diff(mha, cfg)

    def attend(x: object, params: object) -> object:
        return x

    with pytest.raises(ConfigError, match=r"attend\(\) is a function; give an nn.Module"):
        diff(attend, cfg)


@pytest.mark.slow
def test_cli_diff_past_exit_codes_and_json(tmp_path: Path) -> None:
    runner = CliRunner()
    args = ["diff", f"{DATA / 'llama_kv_cache.py'}:LlamaAttention", "--rope", "--causal"]
    args += ["--batch", "2", "--seq", "1", "--past", "6", "--hidden", "32", "--heads", "4"]
    good = runner.invoke(app, [*args, "-f", "json"])
    assert good.exit_code == 0, good.output
    doc = json.loads(good.output)
    assert doc["ok"] is True
    assert doc["config"]["past"] == 6
    rows = {r["step"]: r for r in doc["rows"]}
    assert rows["scores"]["user_shape"] == [2, 4, 1, 7]
    assert rows["k_all"]["shape"] == [2, 2, 7, 8]
    bad = tmp_path / "bad.py"
    text = (DATA / "llama_kv_cache.py").read_text()
    bad.write_text(text.replace(PLANTED[3][2], PLANTED[3][3]))
    out = runner.invoke(app, ["diff", f"{bad}:LlamaAttention", *args[2:], "-f", "json"])
    assert out.exit_code == 1, out.output
    bad_doc = json.loads(out.output)
    assert bad_doc["diagnosis"]["bug"] == "decode-rope-from-0"
    for document in (doc, bad_doc):
        jsonschema.Draft202012Validator(diff_schema()).validate(document)


@pytest.mark.parametrize("name", ["LlamaAttention", "MistralAttention", "Qwen2Attention"])
@pytest.mark.parametrize(("seq", "past"), [(1, 4), (2, 3)])
def test_transformers_class_with_a_dynamic_cache_matches(name: str, seq: int, past: int) -> None:
    pytest.importorskip("transformers")
    cfg = AttentionConfig(
        batch=2, seq=seq, hidden=32, heads=4, kv_heads=2, causal=True, rope=True, past=past
    )
    typed = {"batch", "seq", "hidden", "heads", "kv_heads", "causal", "rope", "past"}
    report = diff_target(f"transformers:{name}", [], cfg, typed, None)
    assert report.ok, report.diagnosis
    rows = {r.step.name: r for r in report.rows}
    assert rows["k_cache"].user.shape == (2, 2, past, 8)
    assert rows["k_all"].user.shape == (2, 2, past + seq, 8)
    assert rows["k_all"].user.location.startswith("cache_utils.py:")  # DynamicCache.update
    assert rows["scores"].user.shape == (2, 4, seq, past + seq)
    assert f"called with a DynamicCache of {past} earlier tokens" in report.notes


@pytest.mark.parametrize(("seq", "past"), [(1, 6), (2, 7), (3, 3)])
def test_mistral_with_a_sliding_window_cache_matches(seq: int, past: int) -> None:
    """The reference's cache keeps the last W-1 keys; the DynamicCache holds those, the mask
    the window of the positions past..past+S-1 (a divergence here once crashed two bugs'
    replays: GQA tiling and heads split read the new keys, not the cache's)."""
    pytest.importorskip("transformers")
    cfg = AttentionConfig(
        batch=2, seq=seq, hidden=32, heads=4, kv_heads=2, causal=True, rope=True, past=past,
        window=4,
    )  # fmt: skip
    typed = {"batch", "seq", "hidden", "heads", "kv_heads", "causal", "rope", "past", "window"}
    report = diff_target("transformers:MistralAttention", ["sliding_window=4"], cfg, typed, None)
    assert report.ok, report.diagnosis
    rows = {r.step.name: r for r in report.rows}
    assert rows["k_cache"].user.shape == (2, 2, min(past, 3), 8)
    assert rows["scores"].user.shape == (2, 4, seq, min(past, 3) + seq)


def test_a_gqa_decode_divergence_is_diagnosed_without_crashing(tmp_path: Path) -> None:
    bad = tmp_path / "tiled.py"
    text = (DATA / "llama_kv_cache.py").read_text()
    old = "hidden_states = hidden_states[:, :, None, :, :].expand(batch, num_key_value_heads, n_rep"
    assert old in text
    bad.write_text(
        text.replace(
            old,
            old.replace("[:, :, None, :, :]", "[:, None, :, :, :]").replace(
                "num_key_value_heads, n_rep", "n_rep, num_key_value_heads"
            ),
        )
    )
    report = _diff(bad, "LlamaAttention", {"rope": True})
    assert not report.ok  # type: ignore[attr-defined]
    assert report.diagnosis.bug == "gqa-tile-k-v"  # type: ignore[attr-defined]


def test_every_decode_bug_changes_its_step_and_keeps_the_shapes() -> None:
    import numpy as np

    from attntrace import trace_attention
    from attntrace.diffing.bugs import Setting, catalogue
    from attntrace.engine.inputs import random_sources

    cfg = AttentionConfig(
        batch=2, seq=2, past=5, hidden=32, heads=4, kv_heads=2, causal=True, rope=True
    )
    tensors = {name: s.make() for name, s in random_sources(cfg).items()}
    ref = trace_attention(cfg, "numpy", tensors=tensors)
    bugs = [b for b in catalogue(Setting(cfg, ref, tensors)) if b.key.startswith("decode-")]
    assert {b.key for b in bugs} == {
        "decode-rope-from-0",
        "decode-rope-minus-1",
        "decode-rope-plus-1",
        "decode-mask-top-left",
        "decode-prepended",
        "decode-kv-swapped",
        "decode-k-from-v-cache",
        "decode-v-from-k-cache",
        "decode-k-prepended",
        "decode-rope-after-cache",
        "decode-cache-unread",
    }
    for bug in bugs:
        wrong = trace_attention(cfg, "numpy", tensors=tensors, replace=bug.replace)
        assert [s.shape for s in wrong.steps] == [s.shape for s in ref.steps], bug.key
        assert not np.allclose(wrong[bug.at].value, ref[bug.at].value), bug.key
        assert not np.allclose(wrong["output"].value, ref["output"].value), bug.key
    plain = AttentionConfig(batch=2, seq=2, hidden=32, heads=4, causal=True)
    plain_ref = trace_attention(plain, "numpy")
    assert not [b for b in catalogue(Setting(plain, plain_ref, {})) if b.key.startswith("decode-")]


def test_the_wrong_axis_replay_exists_only_when_the_shapes_allow_it() -> None:
    """decode-wrong-axis (the cache and the new keys joined on the head dim, read back as the
    sequence) keeps the shapes only with N = S; with N != S the code raises and the raise names
    it (tests/diffing/test_diff_decode_cache.py)."""
    import numpy as np

    from attntrace import trace_attention
    from attntrace.diffing.bugs import Setting, catalogue
    from attntrace.engine.inputs import random_sources

    for past, seq, present in ((3, 3, True), (5, 2, False)):
        cfg = AttentionConfig(batch=2, seq=seq, past=past, hidden=32, heads=4, causal=True)
        tensors = {name: s.make() for name, s in random_sources(cfg).items()}
        ref = trace_attention(cfg, "numpy", tensors=tensors)
        bugs = {b.key: b for b in catalogue(Setting(cfg, ref, tensors))}
        assert ("decode-wrong-axis" in bugs) is present
        if present:
            bug = bugs["decode-wrong-axis"]
            wrong = trace_attention(cfg, "numpy", tensors=tensors, replace=bug.replace)
            assert wrong["k_all"].shape == ref["k_all"].shape == (2, 4, 6, 8)
            side = np.concatenate((ref["k_cache"].value, ref["k"].value), axis=-1)  # (B, g, N, 2d)
            np.testing.assert_allclose(wrong["k_all"].value, side.reshape(2, 4, 6, 8), rtol=1e-6)
