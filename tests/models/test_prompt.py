"""run --model DIR --prompt TEXT: tiny random-init models (Llama, GPT-2, BERT) saved from config
objects with a tokenizer built here by the ``tokenizers`` library. The traced layer's input is
the hidden state transformers computes for the prompt's tokens (hooked on the test's own model,
not through attntrace), its output and weights are the module's, and the labels are the words."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from html import unescape
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from typer.testing import CliRunner

from attntrace.cli import app
from hf_models import build, capture

# tiny transformers models saved to folders and run: seconds per module
pytestmark = pytest.mark.slow

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
tokenizers = pytest.importorskip("tokenizers")

WORDS = ("[UNK]", "[CLS]", "[SEP]", "<s>", "the", "cat", "sat", "on", "mat", "a", "dog", "[b]")
PROMPT = "the cat sat on the mat"
LLAMA = {
    "vocab_size": 32,
    "hidden_size": 16,
    "intermediate_size": 32,
    "num_hidden_layers": 3,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "max_position_embeddings": 64,
}
GPT2 = {"vocab_size": 32, "n_embd": 16, "n_head": 4, "n_layer": 3, "n_positions": 64}
BERT = {
    "vocab_size": 32,
    "hidden_size": 16,
    "num_attention_heads": 4,
    "num_hidden_layers": 3,
    "intermediate_size": 32,
}


@dataclass
class Family:
    """A saved model folder, the model object, its attention layers and the tokens it adds."""

    folder: Path
    model: Any
    attention: Callable[[Any, int], Any]
    special: tuple[str, str | None]  # (before, after): the template's special tokens


def save_tokenizer(folder: Path, before: str | None, after: str | None) -> None:
    """A word-level tokenizer over :data:`WORDS`, adding ``before`` / ``after`` as the model's
    own tokenizer would ([CLS] … [SEP] for BERT, <s> … for Llama)."""
    from tokenizers import Tokenizer, models, pre_tokenizers, processors

    vocab = {w: i for i, w in enumerate(WORDS)}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    if before is not None:
        single = f"{before} $A" + (f" {after}" if after else "")
        specials = [(t, vocab[t]) for t in (before, after) if t]
        tok.post_processor = processors.TemplateProcessing(single=single, special_tokens=specials)
    tok.save(str(folder / "tokenizer.json"))


@pytest.fixture(scope="module")
def families(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Family]:
    out = {}
    for name, kind, sizes, attention, special in (
        ("llama", "Llama", LLAMA, lambda m, i: m.model.layers[i].self_attn, ("<s>", None)),
        ("gpt2", "GPT2", GPT2, lambda m, i: m.transformer.h[i].attn, (None, None)),
        ("bert", "Bert", BERT, lambda m, i: m.encoder.layer[i].attention, ("[CLS]", "[SEP]")),
    ):
        folder = tmp_path_factory.mktemp(name)
        model = build(kind, folder, **sizes)
        save_tokenizer(folder, *special)
        out[name] = Family(folder, model, attention, special)
    return out


def invoke(*args: object) -> Any:
    return CliRunner().invoke(app, [str(a) for a in args])


def expected_words(family: Family) -> list[str]:
    before, after = family.special
    return [w for w in (before, *PROMPT.split(), after) if w]


@pytest.mark.parametrize("name", ["llama", "gpt2", "bert"])
def test_the_traced_layer_sees_the_hidden_state_transformers_computes(
    name: str, families: dict[str, Family], tmp_path: Path
) -> None:
    family = families[name]
    words = expected_words(family)
    ids = np.array([[WORDS.index(w) for w in words]])  # (1, S): the tokenizer's, known here
    got = capture(family.model, family.attention(family.model, 2), ids)
    result = invoke(
        "run",
        "--model",
        family.folder,
        "--layer",
        2,
        "--prompt",
        PROMPT,
        "--save",
        tmp_path / "o.npz",
    )
    assert result.exit_code == 0, result.output
    with np.load(tmp_path / "o.npz") as npz:
        assert npz["x"].shape == (len(words), 16)
        np.testing.assert_allclose(npz["x"], got.x[0], atol=1e-5)
        np.testing.assert_allclose(npz["weights"], got.weights[0], atol=1e-5)
        if name != "bert":  # BertAttention's output adds its residual and norm (the block's)
            np.testing.assert_allclose(npz["output"], got.output[0], atol=1e-5)
    assert f"--prompt: {len(words)} tokens (tokenizer.json)" in " ".join(result.output.split())


@pytest.mark.parametrize("name", ["llama", "bert"])
def test_the_heat_map_labels_are_the_tokens(
    name: str, families: dict[str, Family], tmp_path: Path
) -> None:
    family = families[name]
    page = tmp_path / "r.html"
    result = invoke(
        "report", "--model", family.folder, "--prompt", PROMPT, "--token", 2, "--out", page
    )
    assert result.exit_code == 0, result.output
    html = page.read_text()
    words = expected_words(family)
    first = html[html.index("<figure>") : html.index("</figure>")]  # head 0's map
    rows = re.findall(r'text-anchor="end" fill="#445">([^<]*)</text>', first)
    cols = re.findall(r'text-anchor="middle" fill="#445">([^<]*)</text>', first)
    assert [unescape(r) for r in rows[: len(words)]] == words
    assert [unescape(c) for c in cols[: len(words)]] == words
    assert ">q1</text>" not in html
    assert f"query 2 ({words[2]}): its attention row in every head" in html
    heads = 4
    assert html.count("<th>head ") == heads


def test_the_table_shows_the_words_and_a_token_row(families: dict[str, Family]) -> None:
    family = families["gpt2"]
    result = invoke("run", "--model", family.folder, "--prompt", PROMPT, "--token", 2)
    assert result.exit_code == 0, result.output
    out = result.output
    grid = out[out.index("attention weights, head 0") :]
    assert re.search(r"^\s*the\s+cat\s+sat\s+on\s+the\s+mat\s+sum$", grid, re.M)
    rows = out[out.index("query 2 (sat): its attention row in every head") :]
    assert len(re.findall(r"^\s+[0-3] (\s*(\.\d\d|·)){6}$", rows, re.M)) == 4


def test_a_token_whose_text_looks_like_markup_is_shown_as_text(
    families: dict[str, Family],
) -> None:
    result = invoke("run", "--model", families["gpt2"].folder, "--prompt", "[b] cat")
    assert result.exit_code == 0, result.output
    assert re.search(r"^\s*\[b\]\s+cat\s+sum$", result.output, re.M)


def test_without_a_model_the_prompt_is_split_into_bytes() -> None:
    result = invoke("run", "--prompt", "héllo", "--hidden", 8, "--heads", 2, "--token", 0)
    assert result.exit_code == 0, result.output
    out = " ".join(result.output.split())
    assert "S=6" in out  # é is two bytes
    assert "a plain byte-level split (6 bytes, one token each) and a seeded x" in out
    assert "query 0 (h): its attention row in every head" in out


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--prompt", "  "], "--prompt is empty; give it some text"),
        (["--prompt", "the cat", "--layer", 7], "has no attention layer 7; it has 3"),
        (["--prompt", "the cat", "--seq", 4], "--prompt sets S (one position per token)"),
        (["--prompt", "the cat", "--token", 9], "--token 9 does not exist; use 0 to 1"),
        (["--prompt", "the cat", "--token", 1, "--format", "json"], "--token shows its rows"),
        (["--prompt", "the cat", "--token", 1, "--backend", "shape"], "the shape backend does not"),
        (["--prompt", "the cat", "--token", 1, "--algorithm", "flash"], "never forms whole"),
        (["--prompt", "the cat", "--input", "x.npy"], "--prompt gives x"),
        (["--prompt", "the cat", "--batch", 2], "--prompt is one sequence"),
    ],
)
def test_bad_prompt_input_is_one_line_exit_2(
    args: list[object], message: str, families: dict[str, Family]
) -> None:
    result = invoke("run", "--model", families["gpt2"].folder, *args)
    assert result.exit_code == 2, result.output
    assert message in result.output
    assert len(result.output.strip().splitlines()) == 1
    assert "Traceback" not in result.output


def test_a_folder_without_a_tokenizer_is_one_line_exit_2(tmp_path: Path) -> None:
    build("GPT2", tmp_path, **GPT2)
    result = invoke("run", "--model", tmp_path, "--prompt", PROMPT)
    assert result.exit_code == 2, result.output
    assert "has no tokenizer (tokenizer.json" in result.output
    assert len(result.output.strip().splitlines()) == 1


@pytest.mark.parametrize("name", ["llama", "bert"])
def test_explore_rows_are_every_layers_weights_as_transformers_computes_them(
    name: str, families: dict[str, Family]
) -> None:
    from attntrace.explore.prompt_rows import prompt_rows

    family = families[name]
    words = expected_words(family)
    ids = np.array([[WORDS.index(w) for w in words]])  # (1, S)
    rows = prompt_rows(PROMPT, family.folder)
    assert rows.tokens == tuple(words)
    assert len(rows.weights) == 3
    for n in range(3):
        got = capture(family.model, family.attention(family.model, n), ids)
        np.testing.assert_allclose(rows.weights[n], got.weights[0], atol=1e-5)
    row = rows.rows(2)
    assert row["query"] == words[2]
    assert len(row["layers"]) == 3
    causal = name == "llama"
    assert (row["layers"][0]["heads"][0][3] is None) == causal  # a later key: masked if causal


def test_the_notebook_labels_the_maps_with_the_tokens(families: dict[str, Family]) -> None:
    import dataclasses

    from attntrace import AttentionConfig, trace_attention

    trace = trace_attention(AttentionConfig(seq=3, hidden=8, heads=2), keep_values=True)
    html = dataclasses.replace(trace, tokens=("the", "cat", "<b>"))._repr_html_()
    assert ">cat</text>" in html
    assert "&lt;b&gt;</text>" in html
    assert "<b></text>" not in html
    assert ">q1</text>" not in html


def test_the_plot_ticks_are_the_tokens(families: dict[str, Family], tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    plot = tmp_path / "p.svg"
    result = invoke("run", "--model", families["gpt2"].folder, "--prompt", PROMPT, "--plot", plot)
    assert result.exit_code == 0, result.output
    svg = plot.read_text()
    heads = 4
    assert svg.count("<!-- sat -->") == 2 * heads  # a tick down and across in every panel
    assert "<!-- q1 -->" not in svg


def test_the_json_document_carries_the_tokens_and_meets_its_schema(
    families: dict[str, Family],
) -> None:
    import json

    import jsonschema

    from attntrace.schemas import trace_schema

    result = invoke(
        "run", "--model", families["bert"].folder, "--prompt", PROMPT, "--format", "json"
    )
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert doc["tokens"] == expected_words(families["bert"])
    assert doc["config"]["seq"] == len(doc["tokens"])
    jsonschema.Draft202012Validator(trace_schema()).validate(doc)


def test_without_transformers_the_model_prompt_is_one_line_exit_2(
    families: dict[str, Family], monkeypatch: pytest.MonkeyPatch
) -> None:
    import sys

    monkeypatch.setitem(sys.modules, "transformers", None)  # import transformers: ImportError
    result = invoke("run", "--model", families["gpt2"].folder, "--prompt", PROMPT)
    assert result.exit_code == 2, result.output
    assert "runs the model through transformers, which is not installed" in result.output
    assert len(result.output.strip().splitlines()) == 1
