"""attntrace trace and diff on Hugging Face attention classes named ``transformers:NAME`` with
no wrapper file, built at test time from config objects (random init, no download): the correct
class of each family matches in train mode (eval is what diff runs) with its steps seen inside
transformers; and bugs planted in verbatim copies of the modeling files (one line edited each)
are named at that line. BERT with q and k swapped must not give MATCH."""

from __future__ import annotations

import importlib
import importlib.util
import json
import sys
from pathlib import Path
from typing import Any

import pytest

from attntrace import AttentionConfig
from attntrace.diffing.diff_report import diff

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from attntrace.capturing.library import build, find_class  # noqa: E402

SIZES = {"hidden": 64, "heads": 4}
CONFIG = AttentionConfig(batch=2, seq=5, hidden=64, heads=4)

#: name, --init, the steps its code makes that must be seen and match.
FAMILIES: list[tuple[str, dict[str, Any], set[str]]] = [
    ("LlamaAttention", {"num_key_value_heads": 2}, {"q_rot", "k_rep", "masked", "weights"}),
    ("MistralAttention", {"num_key_value_heads": 2}, {"q_rot", "k_rep", "masked"}),
    ("Qwen2Attention", {}, {"q_proj", "q_rot", "masked", "weights"}),
    ("Qwen3Attention", {}, {"q_rot", "masked", "weights"}),
    ("GemmaAttention", {}, {"q_rot", "masked", "weights"}),
    ("Gemma2Attention", {}, {"q_rot", "masked", "weights"}),
    ("Phi3Attention", {}, {"q_rot", "masked", "weights"}),
    ("BertSelfAttention", {}, {"q_proj", "scores", "weights", "context"}),
    ("GPT2Attention", {}, {"q_proj", "scores", "masked", "weights"}),
    ("T5Attention", {}, {"q_proj", "scores", "weights", "context"}),
    ("T5Attention", {"is_decoder": True, "is_causal": True}, {"scores", "weights"}),
    ("FalconAttention", {}, {"q_rot", "weights"}),
    ("FalconAttention", {"multi_query": False}, {"q_rot", "weights"}),
    ("FalconAttention", {"new_decoder_architecture": True, "num_kv_heads": 2}, {"weights"}),
]


def _built(cls: Any, init: dict[str, Any]) -> Any:
    torch.manual_seed(0)
    return build(cls, init, SIZES)


@pytest.mark.parametrize(
    ("name", "init", "seen"), FAMILIES, ids=[f"{n}-{i}" for n, i, _ in FAMILIES]
)
def test_the_correct_class_matches_in_train_mode(
    name: str, init: dict[str, Any], seen: set[str]
) -> None:
    cls = find_class("transformers", name)
    assert cls is not None
    module = _built(cls, init)
    assert module.training
    report = diff(module, CONFIG)
    assert report.ok, report.diagnosis
    assert "run in eval mode (dropout off); it was in train mode" in report.notes
    matched = {r.step.name for r in report.rows if r.status == "match" and r.user is not None}
    assert seen <= matched, sorted(seen - matched)
    assert {"x", "output"} <= matched
    places = {r.user.location.split(":")[0] for r in report.rows if r.user and r.user.location}
    assert any(p.startswith("modeling_") for p in places), places


def test_unbatched_input_matches() -> None:
    module = _built(find_class("transformers", "LlamaAttention"), {})
    assert diff(module, AttentionConfig(seq=5, hidden=64, heads=4)).ok


#: A mask add removed: no tensor at that line, the softmax that reads the scores shows it.
MASK_MISSING = (
    "mask-missing@attn_weights = nn.functional.softmax(attn_weights, dim=-1, dtype=torch.float32)"
)
EXPAND = "hidden_states = hidden_states[{}].expand(batch, {}, slen, head_dim)"
SPLIT = "{} = self.c_attn(hidden_states).split(self.split_size, dim=2)"

#: family, the line as transformers writes it (its first occurrence), the planted edit, the bug
#: diff must name (and, after "@", the line it is named at when the edit removes the op: the
#: first line whose tensor shows the mistake), the --init.
PLANTED: list[tuple[str, str, str, str, dict[str, Any]]] = [
    (
        "llama",
        "attn_weights = torch.matmul(query, key_states.transpose(2, 3)) * scaling",
        "attn_weights = torch.matmul(query, key_states.transpose(2, 3))",
        "unscaled",
        {},
    ),
    (
        "llama",
        "attn_weights = nn.functional.softmax(attn_weights, dim=-1, dtype=torch.float32)",
        "attn_weights = nn.functional.softmax(attn_weights, dim=-2, dtype=torch.float32)",
        "softmax-axis-2",
        {},
    ),
    (
        "llama",
        "attn_weights = attn_weights + attention_mask",
        "attn_weights = attn_weights",
        MASK_MISSING,
        {},
    ),
    (
        "llama",
        "query_states = self.q_proj(hidden_states).view(hidden_shape).transpose(1, 2)",
        "query_states = self.k_proj(hidden_states).view(hidden_shape).transpose(1, 2)",
        "q-from-k",  # q from the k projection, named at its line
        {},
    ),
    (
        "llama",
        EXPAND.format(":, :, None, :, :", "num_key_value_heads, n_rep"),
        EXPAND.format(":, None, :, :, :", "n_rep, num_key_value_heads"),
        "gqa-tile-k-v@"
        "return hidden_states.reshape(batch, num_key_value_heads * n_rep, slen, head_dim)",
        {"num_key_value_heads": 2},
    ),
    (
        "llama",
        "attn_output = self.o_proj(attn_output)",
        "attn_output = attn_output",
        "output-missing@attn_output = attn_output.reshape(*input_shape, -1).contiguous()",
        {},
    ),
    (
        "bert",
        "query_layer = self.query(hidden_states).view(*hidden_shape).transpose(1, 2)",
        "query_layer = self.key(hidden_states).view(*hidden_shape).transpose(1, 2)",
        "q-from-k",
        {},
    ),
    (
        "bert",
        "attn_weights = nn.functional.softmax(attn_weights, dim=-1)",
        "attn_weights = nn.functional.softmax(attn_weights, dim=-2)",
        "softmax-axis-2",
        {},
    ),
    (
        "gpt2",
        SPLIT.format("query_states, key_states, value_states"),
        SPLIT.format("key_states, query_states, value_states"),
        "swapped-qk",
        {},
    ),
    (
        "gpt2",
        "attn_weights = nn.functional.softmax(attn_weights, dim=-1)",
        "attn_weights = nn.functional.softmax(attn_weights, dim=-2)",
        "softmax-axis-2",
        {},
    ),
    (
        "t5",
        "attn_weights = nn.functional.softmax(attn_weights, dim=-1)",
        "attn_weights = nn.functional.softmax(attn_weights, dim=-2)",
        "softmax-axis-2",
        {},
    ),
    (
        "qwen2",
        "attn_weights = torch.matmul(query, key_states.transpose(2, 3)) * scaling",
        "attn_weights = torch.matmul(query, key_states.transpose(2, 3)) * scaling * scaling",
        "scaled-twice",
        {},
    ),
    (
        "mistral",
        "attn_weights = attn_weights + attention_mask",
        "attn_weights = attn_weights",
        MASK_MISSING,
        {},
    ),
    (
        "phi3",
        "attn_weights = nn.functional.softmax(attn_weights, dim=-1",
        "attn_weights = nn.functional.softmax(attn_weights, dim=-2",
        "softmax-axis-2",
        {},
    ),
    (
        "qwen3",
        "attn_weights = torch.matmul(query, key_states.transpose(2, 3)) * scaling",
        "attn_weights = torch.matmul(query, key_states.transpose(2, 3))",
        "unscaled",
        {},
    ),
    (
        "gemma",
        "attn_weights = nn.functional.softmax(attn_weights, dim=-1",
        "attn_weights = nn.functional.softmax(attn_weights, dim=-2",
        "softmax-axis-2",
        {},
    ),
    (
        "gpt2",
        "attn_weights = torch.matmul(query, key.transpose(-1, -2)) * scaling",
        "attn_weights = torch.matmul(query, key.transpose(-1, -2))",
        "unscaled",
        {},
    ),
    (
        "bert",
        "attn_weights = torch.matmul(query, key.transpose(2, 3)) * scaling",
        "attn_weights = torch.matmul(query, key.transpose(2, 3)) * scaling**2",
        "scaled-1/d",
        {},
    ),
    (
        "llama",
        "attn_output = attn_output.transpose(1, 2).contiguous()",
        "attn_output = attn_output.contiguous()",
        "merge-no-transpose@attn_output = attn_output.reshape(*input_shape, -1).contiguous()",
        {},
    ),
    (
        "falcon",
        "attention_scores = F.softmax(attention_scores + attention_mask, dim=-1",
        "attention_scores = F.softmax(attention_scores + attention_mask, dim=-2",
        "softmax-axis-2",
        {"multi_query": False},
    ),
    (
        "falcon",
        "attention_scores /= math.sqrt(self.head_dim)",
        "attention_scores /= self.head_dim",
        "scaled-1/d",
        {"multi_query": False},
    ),
]

CLASSES = {
    "llama": "LlamaAttention",
    "bert": "BertSelfAttention",
    "gpt2": "GPT2Attention",
    "t5": "T5Attention",
    "qwen2": "Qwen2Attention",
    "mistral": "MistralAttention",
    "phi3": "Phi3Attention",
    "qwen3": "Qwen3Attention",
    "gemma": "GemmaAttention",
    "falcon": "FalconAttention",
}


def _planted(tmp_path: Path, family: str, old: str, new: str) -> tuple[Any, str, int]:
    """The attention class of a verbatim copy of the family's modeling file with ``old``
    replaced by ``new`` on its one line; the copy's file name and that line."""
    original = importlib.import_module(f"transformers.models.{family}.modeling_{family}")
    lines = Path(str(original.__file__)).read_text().splitlines()
    found = [i for i, line in enumerate(lines) if line.strip().startswith(old)]
    assert found, f"{old!r} is on no line"
    lines[found[0]] = lines[found[0]].replace(old, new)
    name = f"_planted_{family}_{abs(hash(new)) % 10**8}"
    path = tmp_path / f"{name}.py"
    path.write_text("\n".join(lines) + "\n")
    spec = importlib.util.spec_from_file_location(f"transformers.models.{family}.{name}", path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return getattr(module, CLASSES[family]), path.name, found[0] + 1


@pytest.mark.slow
@pytest.mark.parametrize(
    ("family", "old", "new", "bug", "init"),
    PLANTED,
    ids=[f"{p[0]}-{p[3].split('@')[0] or 'x'}" for p in PLANTED],
)
def test_a_bug_planted_in_a_verbatim_copy_is_named_at_its_line(
    tmp_path: Path, family: str, old: str, new: str, bug: str, init: dict[str, Any]
) -> None:
    cls, file, line = _planted(tmp_path, family, old, new)
    report = diff(_built(cls, init), CONFIG)
    assert not report.ok
    d = report.diagnosis
    assert d is not None
    key, _, blamed = bug.partition("@")
    if key:
        assert d.bug == key, (d.name, d.step, d.location)
        if blamed:
            assert d.source.strip() in blamed, (d.location, d.source)
        else:
            assert d.location == f"{file}:{line}", (d.location, d.source)


@pytest.mark.slow
@pytest.mark.e2e  # the sandbox child builds transformers classes
def test_trace_and_diff_cli_without_a_wrapper_file() -> None:
    from typer.testing import CliRunner

    from attntrace.cli import app

    args = ["transformers:LlamaAttention", "--batch", "2", "--seq", "5"]
    traced = CliRunner().invoke(
        app, ["trace", *args, "--init", "num_key_value_heads=2", "-f", "json"]
    )
    assert traced.exit_code == 0, traced.output
    roles = {s["role"]: s for s in json.loads(traced.stdout)["steps"] if s["role"]}
    assert tuple(roles["k_rep"]["shape"]) == (2, 4, 5, 16)
    assert (roles["q_rot"]["axes"], roles["k_rot"]["axes"]) == (
        ["B", "h", "S", "d"],
        ["B", "g", "S", "d"],
    )
    assert tuple(roles["weights"]["axes"]) == ("B", "h", "S", "S")
    assert roles["masked"]["location"].startswith("modeling_llama.py:")
    alone = CliRunner().invoke(app, ["trace", *args, "--no-into", "-f", "json"])
    assert alone.exit_code == 0, alone.output
    assert not any("modeling" in s["location"] for s in json.loads(alone.stdout)["steps"])
    diffed = CliRunner().invoke(
        app, ["diff", *args, "--hidden", "64", "--heads", "4", "-f", "json"]
    )
    assert diffed.exit_code == 0, diffed.output
    assert json.loads(diffed.stdout)["ok"]
    missing = CliRunner().invoke(app, ["diff", "transformers:NoSuchAttention"])
    assert missing.exit_code == 2
    assert "has no 'NoSuchAttention'" in missing.stderr
