"""attntrace diff: the planted-bug corpus (tests/data/diff_corpus), the correct bases in several
configurations, the CLI's exit codes and JSON."""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import sys
from pathlib import Path
from typing import Any

import jsonschema
import numpy as np
import pytest

torch = pytest.importorskip("torch")

from attntrace import AttentionConfig  # noqa: E402
from attntrace.diffing.diff_report import diff  # noqa: E402
from attntrace.schemas import diff_schema  # noqa: E402
from paths import DATA  # noqa: E402

CORPUS = DATA / "diff_corpus"

#: base file -> (the object to diff, its constructor arguments, the config)
NOTES = AttentionConfig(batch=2, seq=5, hidden=64, heads=4)
NUMPY = AttentionConfig(seq=5, hidden=64, heads=4)
LLAMA = AttentionConfig(
    batch=2, seq=6, hidden=32, heads=4, kv_heads=2, rope=True, causal=True, bias=False
)
LLAMA_MHA = AttentionConfig(batch=2, seq=6, hidden=32, heads=4, rope=True, causal=True, bias=False)
BASES: dict[str, tuple[str, dict[str, Any], AttentionConfig]] = {
    "notes_torch": ("NotesAttention", {"feature_dim": 64}, NOTES),
    "notes_numpy": ("attention", {}, NUMPY),
    "llama_torch": ("LlamaAttention", {}, LLAMA),
}

#: (id, base, {line to change: new line}, expected bug key, the line blamed (an index into
#: the changed lines, or a line of the base that the blame lands on), config override)
Variant = tuple[str, str, dict[str, str], str, str, AttentionConfig | None]
VARIANTS: list[Variant] = [
    # heads split / merged
    (
        "notes-split",
        "notes_torch",
        {
            (
                "output = tensor.view(batch_size, seq_len, self.num_heads, "
                "head_dim).transpose(1, 2)"
            ): "output = tensor.view(batch_size, self.num_heads, seq_len, head_dim)"
        },
        "split-no-transpose-qkv",
        "@0",
        None,
    ),
    (
        "llama-split-k",
        "llama_torch",
        {
            (
                "k = self.k_proj(x).view(bsz, q_len, self.num_key_value_heads, "
                "self.head_dim).transpose(1, 2)"
            ): "k = self.k_proj(x).view(bsz, self.num_key_value_heads, q_len, self.head_dim)"
        },
        "split-no-transpose-k",
        "@0",
        None,
    ),
    (
        "numpy-split-q",
        "notes_numpy",
        {
            (
                "Query = np.reshape(Query, [values_length, num_attention_heads, "
                "attention_head_size])"
            ): (
                "Query = np.reshape(Query, [num_attention_heads, values_length, "
                "attention_head_size])"
            ),
            "Query = np.transpose(Query, [1, 0, 2])": "Query = np.transpose(Query, [0, 1, 2])",
        },
        "split-no-transpose-q",
        "@0",
        None,
    ),
    (
        "notes-merge",
        "notes_torch",
        {
            (
                "output = tensor.transpose(1, 2).contiguous().view(batch_size, seq_len, "
                "num_heads * head_dim)"
            ): "output = tensor.contiguous().view(batch_size, seq_len, num_heads * head_dim)"
        },
        "merge-no-transpose",
        "@0",
        None,
    ),
    (
        "numpy-merge",
        "notes_numpy",
        {"out = np.transpose(out, [1, 0, 2])": "out = out * 1.0"},
        "merge-no-transpose",
        "out = np.reshape(out, [values_length, hidden])",
        None,
    ),
    (
        "llama-merge",
        "llama_torch",
        {
            (
                "context = context.transpose(1, 2).reshape(bsz, q_len, self.num_heads * "
                "self.head_dim)"
            ): "context = context.reshape(bsz, q_len, self.num_heads * self.head_dim)"
        },
        "merge-no-transpose",
        "@0",
        None,
    ),
    # softmax axis
    (
        "notes-softmax-2",
        "notes_torch",
        {
            "attn_weights = F.softmax(scaled_weights, dim=-1)": (
                "attn_weights = F.softmax(scaled_weights, dim=-2)"
            )
        },
        "softmax-axis-2",
        "@0",
        None,
    ),
    (
        "notes-softmax-heads",
        "notes_torch",
        {
            "attn_weights = F.softmax(scaled_weights, dim=-1)": (
                "attn_weights = F.softmax(scaled_weights, dim=1)"
            )
        },
        "softmax-axis-1",
        "@0",
        None,
    ),
    (
        "numpy-softmax-0",
        "notes_numpy",
        {
            "t = np.exp(z - np.max(z, axis=-1, keepdims=True))": (
                "t = np.exp(z - np.max(z, axis=1, keepdims=True))"
            ),
            "a = t / np.expand_dims(np.sum(t, axis=-1), -1)": (
                "a = t / np.expand_dims(np.sum(t, axis=1), 1)"
            ),
        },
        "softmax-axis-1",
        "@1",
        None,
    ),
    (
        "numpy-softmax-sum-only",
        "notes_numpy",
        {
            "a = t / np.expand_dims(np.sum(t, axis=-1), -1)": (
                "a = t / np.expand_dims(np.sum(t, axis=1), 1)"
            )
        },
        "softmax-sum-axis-1",
        "@0",
        None,
    ),
    (
        "llama-softmax",
        "llama_torch",
        {"weights = torch.softmax(scores, dim=-1)": "weights = torch.softmax(scores, dim=2)"},
        "softmax-axis-2",
        "@0",
        None,
    ),
    # scaling
    (
        "notes-unscaled",
        "notes_torch",
        {
            "attn_weights = F.softmax(scaled_weights, dim=-1)": (
                "attn_weights = F.softmax(raw_weights, dim=-1)"
            )
        },
        "unscaled",
        "@0",
        None,
    ),
    (
        "notes-scale-d",
        "notes_torch",
        {"scale_factor = K.size(-1) ** 0.5": "scale_factor = K.size(-1)"},
        "scaled-1/d",
        "scaled_weights = raw_weights / scale_factor",
        None,
    ),
    (
        "notes-scale-twice",
        "notes_torch",
        {
            "attn_weights = F.softmax(scaled_weights, dim=-1)": (
                "attn_weights = F.softmax(scaled_weights / scale_factor, dim=-1)"
            )
        },
        "scaled-twice",
        "@0",
        None,
    ),
    (
        "numpy-scale-H",
        "notes_numpy",
        {"scores = scores / np.sqrt(attention_head_size)": "scores = scores / np.sqrt(hidden)"},
        "scaled-1/sqrt(H)",
        "@0",
        None,
    ),
    (
        "llama-scale-mul",
        "llama_torch",
        {
            "scores = scores / math.sqrt(self.head_dim)": (
                "scores = scores * math.sqrt(self.head_dim)"
            )
        },
        "scaled-sqrt(d)",
        "@0",
        None,
    ),
    # K transposed wrongly
    (
        "notes-k-reshape",
        "notes_torch",
        {
            "raw_weights = torch.matmul(Q, K.transpose(-2, -1))": (
                "raw_weights = torch.matmul(Q, K.reshape(K.shape[0], K.shape[1], K.shape[3], "
                "K.shape[2]))"
            )
        },
        "k-reshape",
        "@0",
        None,
    ),
    (
        "numpy-k-T",
        "notes_numpy",
        {"Key_t = np.transpose(Key, [0, 2, 1])": "Key_t = Key.T"},
        "k-permute(2, 1, 0)",
        "@0",
        AttentionConfig(seq=4, hidden=16, heads=4),
    ),
    # x @ W
    (
        "numpy-xW-q",
        "notes_numpy",
        {
            'Query = x @ params["w_q"].T + params["b_q"]': (
                'Query = x @ params["w_q"] + params["b_q"]'
            )
        },
        "untransposed-w_q",
        "@0",
        None,
    ),
    (
        "numpy-xW-o",
        "notes_numpy",
        {
            'return out @ params["w_o"].T + params["b_o"]': (
                'return out @ params["w_o"] + params["b_o"]'
            )
        },
        "untransposed-w_o",
        "@0",
        None,
    ),
    # swapped projections
    (
        "numpy-swap-qv",
        "notes_numpy",
        {
            'Query = x @ params["w_q"].T + params["b_q"]': (
                'Query = x @ params["w_v"].T + params["b_v"]'
            ),
            'Value = x @ params["w_v"].T + params["b_v"]': (
                'Value = x @ params["w_q"].T + params["b_q"]'
            ),
        },
        "swapped-qv",
        "@0",
        None,
    ),
    (
        "llama-swap-kv",
        "llama_torch",
        {
            (
                "k = self.k_proj(x).view(bsz, q_len, self.num_key_value_heads, "
                "self.head_dim).transpose(1, 2)"
            ): (
                "k = self.v_proj(x).view(bsz, q_len, self.num_key_value_heads, "
                "self.head_dim).transpose(1, 2)"
            ),
            (
                "v = self.v_proj(x).view(bsz, q_len, self.num_key_value_heads, "
                "self.head_dim).transpose(1, 2)"
            ): (
                "v = self.k_proj(x).view(bsz, q_len, self.num_key_value_heads, "
                "self.head_dim).transpose(1, 2)"
            ),
        },
        "swapped-kv",
        "@0",
        None,
    ),
    (
        "llama-swap-qk",
        "llama_torch",
        {
            (
                "q = self.q_proj(x).view(bsz, q_len, self.num_heads, self.head_dim).transpose(1, 2)"
            ): (
                "q = self.k_proj(x).view(bsz, q_len, self.num_heads, self.head_dim).transpose(1, 2)"
            ),
            (
                "k = self.k_proj(x).view(bsz, q_len, self.num_key_value_heads, "
                "self.head_dim).transpose(1, 2)"
            ): (
                "k = self.q_proj(x).view(bsz, q_len, self.num_key_value_heads, "
                "self.head_dim).transpose(1, 2)"
            ),
        },
        "swapped-qk",
        "@0",
        LLAMA_MHA,
    ),
    # masks
    (
        "llama-mask-inverted",
        "llama_torch",
        {
            'scores = scores.masked_fill(future, float("-inf"))': (
                'scores = scores.masked_fill(~future, float("-inf"))'
            )
        },
        "mask-inverted",
        "@0",
        None,
    ),
    (
        "llama-causal-diagonal",
        "llama_torch",
        {
            "future = torch.triu(torch.ones(q_len, q_len, dtype=torch.bool), diagonal=1)": (
                "future = torch.triu(torch.ones(q_len, q_len, dtype=torch.bool), diagonal=0)"
            )
        },
        "causal-offset-1",
        "@0",
        None,
    ),
    (
        "llama-causal-future",
        "llama_torch",
        {
            "future = torch.triu(torch.ones(q_len, q_len, dtype=torch.bool), diagonal=1)": (
                "future = torch.triu(torch.ones(q_len, q_len, dtype=torch.bool), diagonal=2)"
            )
        },
        "causal-offset+1",
        "@0",
        None,
    ),
    (
        "llama-mask-after-softmax",
        "llama_torch",
        {
            'scores = scores.masked_fill(future, float("-inf"))': (
                "weights = torch.softmax(scores, dim=-1)"
            ),
            "weights = torch.softmax(scores, dim=-1)": "weights = weights.masked_fill(future, 0.0)",
        },
        "mask-after-softmax-zeros",
        "@1",
        None,
    ),
    (
        "llama-mask-missing",
        "llama_torch",
        {'scores = scores.masked_fill(future, float("-inf"))': "scores = scores * 1.0"},
        "mask-missing",
        "@0",
        None,
    ),
    # GQA
    (
        "llama-gqa-tile",
        "llama_torch",
        {
            "k_rep = k_rot.repeat_interleave(groups, dim=1)": (
                "k_rep = k_rot.repeat(1, groups, 1, 1)"
            ),
            "v_rep = v.repeat_interleave(groups, dim=1)": "v_rep = v.repeat(1, groups, 1, 1)",
        },
        "gqa-tile-k-v",
        "@0",
        None,
    ),
    (
        "llama-gqa-tile-v",
        "llama_torch",
        {"v_rep = v.repeat_interleave(groups, dim=1)": "v_rep = v.repeat(1, groups, 1, 1)"},
        "gqa-tile-v",
        "@0",
        None,
    ),
    # RoPE
    (
        "llama-rope-pairs",
        "llama_torch",
        {
            "return torch.cat((-x[..., half:], x[..., :half]), dim=-1)": (
                "return torch.stack((-x[..., 1::2], x[..., 0::2]), dim=-1).flatten(-2)"
            ),
            "emb = torch.cat((freqs, freqs), dim=-1)": "emb = freqs.repeat_interleave(2, dim=-1)",
        },
        "rope-interleaved",
        "q_rot = q * cos + rotate_half(q) * sin",
        None,
    ),
    (
        "llama-rope-theta",
        "llama_torch",
        {
            (
                "inv_freq = 1.0 / (self.rope_theta ** (torch.arange(0, self.head_dim, 2, "
                "dtype=torch.float64) / self.head_dim))"
            ): (
                "inv_freq = 1.0 / (500000.0 ** (torch.arange(0, self.head_dim, 2, "
                "dtype=torch.float64) / self.head_dim))"
            )
        },
        "rope-theta-500000",
        "return emb.cos().to(dtype), emb.sin().to(dtype)",
        None,
    ),
]


def _load(path: Path, name: str) -> Any:
    spec = importlib.util.spec_from_file_location(f"_diff_corpus_{path.stem}", path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return getattr(module, name)


def _target(path: Path, name: str, init: dict[str, Any]) -> Any:
    obj = _load(path, name)
    if isinstance(obj, type):
        torch.manual_seed(0)
        return obj(**init)
    return obj


def _line(lines: list[str], text: str) -> int:
    found = [i + 1 for i, line in enumerate(lines) if line.strip() == text]
    assert len(found) == 1, f"{text!r} occurs {len(found)} times"
    return found[0]


@pytest.mark.slow
@pytest.mark.parametrize("variant", VARIANTS, ids=[v[0] for v in VARIANTS])
def test_planted_bug_is_named_at_its_line(variant: Variant, tmp_path: Path) -> None:
    key, base, changes, bug, blamed, config = variant
    name, init, default = BASES[base]
    lines = (CORPUS / f"{base}.py").read_text().splitlines()
    planted = [_line(lines, old) for old in changes]
    for at, (old, new) in zip(planted, changes.items(), strict=True):
        lines[at - 1] = lines[at - 1].replace(old, new)
    path = tmp_path / f"{key.replace('-', '_')}.py"
    path.write_text("\n".join(lines) + "\n")
    cfg = config or default
    report = diff(_target(path, name, init if cfg is default else _init_for(base, cfg)), cfg)
    assert not report.ok
    d = report.diagnosis
    assert d is not None
    assert d.bug == bug, (d.name, d.step, d.location)
    line = planted[int(blamed[1:])] if blamed.startswith("@") else _line(lines, blamed)
    assert d.location == f"{path.name}:{line}", (d.location, d.source)
    assert d.explained_abs <= d.max_abs or np.isnan(d.max_abs)


def _init_for(base: str, cfg: AttentionConfig) -> dict[str, Any]:
    if base == "llama_torch":
        return {
            "hidden_size": cfg.hidden,
            "num_heads": cfg.heads,
            "num_key_value_heads": cfg.groups,
        }
    if base == "notes_torch":
        return {"feature_dim": cfg.hidden, "num_heads": cfg.heads}
    return {}


def test_rope_positions_offset_leaves_attention_unchanged(tmp_path: Path) -> None:
    """RoPE is relative: positions 1..S rotate q and k differently from 0..S-1 but every score
    q·k depends on the difference of positions only, so diff finds no divergence (the q_rot and
    k_rot rows are fused); with a KV cache the offset would matter."""
    lines = (
        (CORPUS / "llama_torch.py")
        .read_text()
        .replace(
            "positions = torch.arange(seq_len, dtype=torch.float64)",
            "positions = torch.arange(1, seq_len + 1, dtype=torch.float64)",
        )
    )
    path = tmp_path / "rope_offset.py"
    path.write_text(lines)
    report = diff(_target(path, "LlamaAttention", {}), LLAMA)
    assert report.ok
    assert {r.step.name: r.status for r in report.rows}["q_rot"] == "fused"


_PAIRS = {
    "return torch.cat((-x[..., half:], x[..., :half]), dim=-1)": (
        "return torch.stack((-x[..., 1::2], x[..., 0::2]), dim=-1).flatten(-2)"
    ),
    "emb = torch.cat((freqs, freqs), dim=-1)": "emb = freqs.repeat_interleave(2, dim=-1)",
}


def test_rope_pairing_follows_rope_style(tmp_path: Path) -> None:
    """An interleaved model is right under --rope-style interleaved; a half model under it is
    the bug ``rope-half``, and its fix names the option that fits the model."""
    lines = (CORPUS / "llama_torch.py").read_text()
    for old, new in _PAIRS.items():
        lines = lines.replace(old, new)
    path = tmp_path / "interleaved.py"
    path.write_text(lines)
    pairs = dataclasses.replace(LLAMA, rope_style="interleaved")
    assert diff(_target(path, "LlamaAttention", {}), pairs).ok
    report = diff(_target(CORPUS / "llama_torch.py", "LlamaAttention", {}), pairs)
    assert report.diagnosis is not None
    assert report.diagnosis.bug == "rope-half"
    assert "--rope-style half" in report.diagnosis.fix


def test_corpus_covers_every_bug_family() -> None:
    keys = {v[3].split("-")[0] for v in VARIANTS}
    assert len(VARIANTS) >= 25
    assert {
        "split",
        "merge",
        "softmax",
        "unscaled",
        "scaled",
        "k",
        "untransposed",
        "swapped",
        "mask",
        "causal",
        "gqa",
        "rope",
    } <= keys


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize(("batch", "seq"), [(None, 3), (None, 6), (2, 5)])
def test_correct_numpy_base_matches(batch: int | None, seq: int, dtype: str) -> None:
    target = _load(CORPUS / "notes_numpy.py", "attention" if batch is None else "attention_batched")
    report = diff(target, AttentionConfig(batch=batch, seq=seq, hidden=32, heads=4, dtype=dtype))
    assert report.ok, report.diagnosis
    assert report.diagnosis is None


@pytest.mark.slow
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize(
    ("base", "config"),
    [
        ("notes_torch", AttentionConfig(batch=2, seq=5, hidden=64, heads=4)),
        ("notes_torch", AttentionConfig(batch=1, seq=7, hidden=24, heads=3)),
        ("llama_torch", LLAMA),
        (
            "llama_torch",
            AttentionConfig(
                batch=1, seq=9, hidden=64, heads=8, kv_heads=2, rope=True, causal=True, bias=False
            ),
        ),
    ],
)
def test_correct_torch_bases_match(base: str, config: AttentionConfig, dtype: str) -> None:
    from dataclasses import replace

    name = BASES[base][0]
    report = diff(
        _target(CORPUS / f"{base}.py", name, _init_for(base, config)), replace(config, dtype=dtype)
    )
    assert report.ok, report.diagnosis
    statuses = {r.step.name: r.status for r in report.rows}
    assert statuses["output"] == statuses["weights"] == "match"
    assert report.config.dtype == dtype


def test_sdpa_and_multihead_attention_modules() -> None:
    """SDPA's scores, mask and weights, replayed from the call (capturing/kernel.py), match
    the reference's at the call's line; a causal mask the options leave out is named."""
    config = AttentionConfig(batch=2, seq=5, hidden=32, heads=4)
    sdpa = _target(CORPUS / "sdpa_torch.py", "SDPA", {})
    causal = diff(sdpa, AttentionConfig(batch=2, seq=5, hidden=32, heads=4, causal=True))
    assert causal.ok
    statuses = {r.step.name: r.status for r in causal.rows}
    assert statuses["scores"] == statuses["mask"] == statuses["weights"] == "match"
    assert statuses["context"] == "match"
    located = {r.step.name: r.user.location for r in causal.rows if r.user is not None}
    assert located["weights"] == located["context"] == "sdpa_torch.py:23"
    missing = diff(sdpa, config)
    assert missing.diagnosis is not None
    assert missing.diagnosis.bug == "causal-unexpected"
    assert missing.diagnosis.location == "sdpa_torch.py:23"
    wrapped = diff(_target(CORPUS / "sdpa_torch.py", "Wrapped", {}), config)
    assert wrapped.ok
    assert wrapped.weights == "nn.MultiheadAttention"


def test_module_sizes_must_agree_with_the_options() -> None:
    from attntrace.errors import ConfigError

    module = _target(CORPUS / "llama_torch.py", "LlamaAttention", {})
    with pytest.raises(ConfigError, match="heads"):
        diff(
            module,
            AttentionConfig(batch=2, seq=6, hidden=32, heads=8, rope=True, causal=True, bias=False),
        )


def test_unexplained_divergence_says_so_with_numbers(tmp_path: Path) -> None:
    text = (
        (CORPUS / "notes_numpy.py")
        .read_text()
        .replace(
            "scores = scores / np.sqrt(attention_head_size)",
            "scores = scores / np.sqrt(attention_head_size) + 0.5 * scores ** 2",
        )
    )
    path = tmp_path / "odd.py"
    path.write_text(text)
    report = diff(_load(path, "attention"), NUMPY)
    d = report.diagnosis
    assert d is not None
    assert d.bug is None
    assert d.step == "weights"
    assert d.location == "odd.py:29"
    assert "no known bug reproduces it" in d.name
    assert d.max_abs > 0.01


def _cli(*args: str) -> Any:
    from typer.testing import CliRunner

    from attntrace.cli import app

    return CliRunner().invoke(app, ["diff", *args])


@pytest.mark.slow
def test_cli_exit_codes_and_json(tmp_path: Path) -> None:
    good = _cli(f"{CORPUS / 'llama_torch.py'}:LlamaAttention", "--batch", "2", "--seq", "6")
    assert good.exit_code == 0, good.output
    good_json = _cli(
        f"{CORPUS / 'llama_torch.py'}:LlamaAttention", "--batch", "2", "--seq", "6", "-f", "json"
    )
    assert "MATCH" in good.output
    assert "q_rot" in good.output
    bad_file = tmp_path / "wrong_axis.py"
    bad_file.write_text((CORPUS / "notes_torch.py").read_text().replace("dim=-1)", "dim=-2)"))
    bad = _cli(
        f"{bad_file}:NotesAttention",
        "--init",
        "feature_dim=32",
        "--batch",
        "2",
        "--seq",
        "4",
        "--heads",
        "4",
        "--format",
        "json",
    )
    assert bad.exit_code == 1, bad.output
    doc = json.loads(bad.output)
    jsonschema.Draft202012Validator(diff_schema()).validate(doc)
    jsonschema.Draft202012Validator(diff_schema()).validate(json.loads(good_json.output))
    assert doc["schema"] == "attntrace.diff/2"
    assert doc["verdict"] == "differs"
    assert doc["cannot_tell"] is None
    assert doc["ok"] is False
    assert doc["diagnosis"]["bug"] == "softmax-axis-2"
    assert doc["diagnosis"]["location"] == "wrong_axis.py:38"
    assert [r["status"] for r in doc["rows"] if r["step"] == "weights"] == ["differs"]
    usage = _cli(f"{CORPUS / 'llama_torch.py'}:NoSuchThing")
    assert usage.exit_code == 2
    conflict = _cli(f"{CORPUS / 'llama_torch.py'}:LlamaAttention", "--heads", "8")
    assert conflict.exit_code == 2
    cross = _cli(
        f"{CORPUS / 'notes_numpy.py'}:attention", "--hidden", "64", "--heads", "4", "--kv-seq", "4"
    )
    assert cross.exit_code == 2
    assert "self-attention" in cross.output


@pytest.mark.slow
def test_cli_input_file_and_code_that_raises(tmp_path: Path) -> None:
    x = np.random.default_rng(1).standard_normal((2, 6, 32)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    target = f"{CORPUS / 'llama_torch.py'}:LlamaAttention"
    given = _cli(target, "--input", str(tmp_path / "x.npy"), "-f", "json")
    assert given.exit_code == 0, given.output
    assert json.loads(given.output)["config"]["seq"] == 6
    broken = tmp_path / "broken.py"
    broken.write_text(
        (CORPUS / "notes_torch.py")
        .read_text()
        .replace(
            "raw_weights = torch.matmul(Q, K.transpose(-2, -1))", "raw_weights = torch.matmul(Q, K)"
        )
    )
    raised = _cli(
        f"{broken}:NotesAttention", "--init", "feature_dim=32", "--batch", "2", "--seq", "5"
    )
    assert raised.exit_code == 1
    assert "raised RuntimeError" in raised.output
    assert "attntrace trace" in raised.output


@pytest.mark.slow
@pytest.mark.parametrize("width", [80, 120])
def test_table_keeps_every_column_whole_at_80_and_wider(width: int) -> None:
    from rich.console import Console

    from attntrace.render.diff_view import render_diff

    report = diff(
        _load(CORPUS / "notes_torch.py", "NotesAttention")(feature_dim=32, num_heads=4),
        AttentionConfig(batch=2, seq=4, hidden=32, heads=4),
    )
    console = Console(width=width, record=True, no_color=True)
    render_diff(report, console)
    lines = console.export_text().splitlines()
    header = next(line for line in lines if line.lstrip().startswith("# "))
    assert header.split()[-1] == "ok"
    assert max(map(len, lines)) <= width
    rows = [line for line in lines if line[:3].strip().isdigit()]
    assert len(rows) == len(report.rows)
    assert all(row.rstrip()[-1] in "✓✗–" for row in rows), rows
    assert ("line" in header.split()) == (width < 100)
