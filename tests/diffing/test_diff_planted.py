"""The planted-bug corpus of issue 41 on real code copied verbatim (tests/data/real_code:
nanoGPT, vit-pytorch): one line edited each, named with that line. A planted bug is never
MATCH (and is named where the catalogue has it); the correct code is never DIFFERS. Every
hint diff prints for correct code ("pass --causal", "--rope-style interleaved") is accepted
when applied, and leads to MATCH."""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from attntrace import AttentionConfig  # noqa: E402
from attntrace.diffing.diff_report import diff  # noqa: E402
from paths import DATA  # noqa: E402

REAL = DATA / "real_code"
NANO = AttentionConfig(batch=2, seq=6, hidden=32, heads=4, causal=True)
VIT = AttentionConfig(batch=2, seq=5, hidden=32, heads=4)

#: nanoGPT on its manual path: the harness turns SDPA off before the buffer is registered,
#: so the file's own causal ``tril`` is used (not a planted bug: how nanoGPT runs without SDPA).
MANUAL = {
    "self.flash = hasattr(torch.nn.functional, 'scaled_dot_product_attention')": (
        "self.flash = False"
    ),
    'print("WARNING: using slow attention. Flash Attention requires PyTorch >= 2.0")': "pass",
}


@dataclass(frozen=True)
class Planted:
    """One line of a real file edited: the bug diff must name (None: any DIFFERS), and the
    line it is named at (None: the edited line)."""

    id: str
    file: str  # in tests/data/real_code
    old: str  # the line as written (stripped)
    new: str
    bug: str | None
    blamed: str | None = None
    manual: bool = False  # nanoGPT's manual path


SCALE = "att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))"
SOFTMAX = "att = F.softmax(att, dim=-1)"
SPLIT = "q, k, v  = self.c_attn(x).split(self.n_embd, dim=2)"
MASK = "att = att.masked_fill(self.bias[:,:,:T,:T] == 0, float('-inf'))"
TRIL = 'self.register_buffer("bias", torch.tril(torch.ones(config.block_size, config.block_size))'
SDPA = (
    "y = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=None, "
    "dropout_p=self.dropout if self.training else 0, is_causal=True)"
)
HEADS = "(B, nh, T, hs)"
NANO_FILE = "nanogpt_attention.py"
VIT_FILE = "vit_pytorch_attention.py"
VIT_SPLIT = "q, k, v = map(lambda t: rearrange(t, 'b n (h d) -> b h n d', h = self.heads), qkv)"

RETURNED = "(return value)"  # blamed on what the code returns: the edited return line

PLANTED = [
    Planted(
        "nano-unscaled", NANO_FILE, SCALE, "att = (q @ k.transpose(-2, -1))", "unscaled", None, True
    ),
    Planted(
        "nano-times-sqrt-d",
        NANO_FILE,
        SCALE,
        "att = (q @ k.transpose(-2, -1)) * math.sqrt(k.size(-1))",
        "scaled-sqrt(d)",
        None,
        True,
    ),
    Planted(
        "nano-sqrt-H",
        NANO_FILE,
        SCALE,
        "att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(C))",
        "scaled-1/sqrt(H)",
        None,
        True,
    ),
    Planted(
        "nano-softmax-1",
        NANO_FILE,
        SOFTMAX,
        "att = F.softmax(att, dim=1)",
        "softmax-axis-1",
        None,
        True,
    ),
    Planted(
        "nano-softmax-0",
        NANO_FILE,
        SOFTMAX,
        "att = F.softmax(att, dim=0)",
        "softmax-axis-0",
        None,
        True,
    ),
    Planted(
        "nano-swap-kv",
        NANO_FILE,
        SPLIT,
        "q, v, k  = self.c_attn(x).split(self.n_embd, dim=2)",
        "swapped-kv",
        None,
        True,
    ),
    Planted(
        "nano-swap-qv",
        NANO_FILE,
        SPLIT,
        "v, k, q  = self.c_attn(x).split(self.n_embd, dim=2)",
        "swapped-qv",
        None,
        True,
    ),
    Planted(
        "nano-mask-unused",
        NANO_FILE,
        MASK,
        "att = att.masked_fill(self.bias[:,:,:T,:T] == 2, float('-inf'))",
        "mask-missing",
        None,
        True,
    ),
    Planted(
        "nano-mask-zero-fill",
        NANO_FILE,
        MASK,
        "att = att.masked_fill(self.bias[:,:,:T,:T] == 0, 0.0)",
        None,
        None,
        True,
    ),
    Planted(
        "nano-split-q",
        NANO_FILE,
        f"q = q.view(B, T, self.n_head, C // self.n_head).transpose(1, 2) # {HEADS}",
        f"q = q.reshape(B, self.n_head, T, C // self.n_head) # {HEADS}",
        "split-no-transpose-q",
        None,
        True,
    ),
    Planted(
        "nano-split-v",
        NANO_FILE,
        f"v = v.view(B, T, self.n_head, C // self.n_head).transpose(1, 2) # {HEADS}",
        f"v = v.reshape(B, self.n_head, T, C // self.n_head) # {HEADS}",
        "split-no-transpose-v",
        None,
        True,
    ),
    Planted(
        "nano-weights-transposed",
        NANO_FILE,
        "y = att @ v # (B, nh, T, T) x (B, nh, T, hs) -> (B, nh, T, hs)",
        "y = att.transpose(-2, -1) @ v # (B, nh, T, T) x (B, nh, T, hs) -> (B, nh, T, hs)",
        None,
        None,
        True,
    ),
    Planted(
        "nano-no-out-proj",
        NANO_FILE,
        "y = self.resid_dropout(self.c_proj(y))",
        "y = self.resid_dropout(y)",
        "output-missing",
        None,
        True,
    ),
    Planted(
        "nano-tril-below-diagonal",
        NANO_FILE,
        TRIL,
        TRIL.replace("block_size))", "block_size), diagonal=-1)"),
        "causal-offset-1",
        MASK,
        True,
    ),
    Planted(
        "nano-tril-above-diagonal",
        NANO_FILE,
        TRIL,
        TRIL.replace("block_size))", "block_size), diagonal=1)"),
        "causal-offset+1",
        MASK,
        True,
    ),
    # inside SDPA nothing is visible: the first tensor holding the mistaken numbers is blamed
    Planted(
        "nano-sdpa-qk", NANO_FILE, SDPA, SDPA.replace("(q, k, v,", "(k, q, v,"), "swapped-qk", SPLIT
    ),
    Planted(
        "nano-sdpa-v-from-k",
        NANO_FILE,
        SDPA,
        SDPA.replace("(q, k, v,", "(q, k, k,"),
        "v-from-k",
        SPLIT,
    ),
    Planted(
        "nano-sdpa-unscaled",
        NANO_FILE,
        SDPA,
        SDPA.replace("is_causal=True)", "is_causal=True, scale=1.0)"),
        "unscaled",
    ),
    Planted(
        "nano-sdpa-1/d",
        NANO_FILE,
        SDPA,
        SDPA.replace("is_causal=True)", "is_causal=True, scale=1 / k.size(-1))"),
        "scaled-1/d",
    ),
    Planted(
        "vit-split-d-h",
        VIT_FILE,
        VIT_SPLIT,
        VIT_SPLIT.replace("(h d)", "(d h)"),
        "split-d-h-qkv",
    ),
    Planted(
        "vit-swap-qk",
        VIT_FILE,
        VIT_SPLIT,
        VIT_SPLIT.replace("q, k, v", "k, q, v"),
        "swapped-qk",
        "qkv = self.to_qkv(x).chunk(3, dim = -1)",
    ),
    Planted(
        "vit-merge-d-h",
        VIT_FILE,
        "out = rearrange(out, 'b h n d -> b n (h d)')",
        "out = rearrange(out, 'b h n d -> b n (d h)')",
        None,
    ),
    Planted(
        "vit-scale-1/d",
        VIT_FILE,
        "self.scale = dim_head ** -0.5",
        "self.scale = dim_head ** -1",
        "scaled-1/d",
        "dots = torch.matmul(q, k.transpose(-1, -2)) * self.scale",
    ),
    Planted(
        "vit-softmax-1",
        VIT_FILE,
        "self.attend = nn.Softmax(dim = -1)",
        "self.attend = nn.Softmax(dim = 1)",
        "softmax-axis-1",
        "attn = self.attend(dots)",
    ),
    Planted(
        "vit-v-from-q",
        VIT_FILE,
        "out = torch.matmul(attn, v)",
        "out = torch.matmul(attn, q)",
        "v-from-q",
        "qkv = self.to_qkv(x).chunk(3, dim = -1)",
    ),
    Planted(
        "vit-chunks-reversed",
        VIT_FILE,
        "qkv = self.to_qkv(x).chunk(3, dim = -1)",
        "qkv = self.to_qkv(x).chunk(3, dim = -1)[::-1]",
        "swapped-qv",
    ),
    Planted(
        "vit-no-out-proj",
        VIT_FILE,
        "return self.to_out(out)",
        "return out",
        "output-missing",
        RETURNED,
    ),
    Planted(
        "vit-k-not-transposed",
        VIT_FILE,
        "dots = torch.matmul(q, k.transpose(-1, -2)) * self.scale",
        "dots = torch.matmul(q, k.reshape(*k.shape[:-2], k.shape[-1], k.shape[-2])) * self.scale",
        "k-reshape",
    ),
]


def _line(lines: list[str], text: str) -> int:
    found = [i for i, line in enumerate(lines) if line.strip() == text]
    assert len(found) == 1, f"{text!r} occurs {len(found)} times"
    return found[0]


def _edited(path: Path, changes: dict[str, str], into: Path) -> tuple[Path, list[str]]:
    lines = path.read_text().splitlines()
    for old, new in changes.items():
        at = _line(lines, old)
        lines[at] = lines[at].replace(old, new)
    into.write_text("\n".join(lines) + "\n")
    return into, lines


def _module(path: Path) -> Any:
    spec = importlib.util.spec_from_file_location(f"_planted_{path.stem}", path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def _build(path: Path, file: str) -> Any:
    module = _module(path)
    torch.manual_seed(0)
    if file == NANO_FILE:
        return module.CausalSelfAttention(
            module.GPTConfig(block_size=16, n_head=4, n_embd=32, dropout=0.1)
        )
    return module.Attention(dim=32, heads=4, dim_head=8, dropout=0.1)


def _diff(p: Planted, tmp_path: Path, planted: bool = True) -> tuple[Any, Path, list[str]]:
    if p.file == VIT_FILE:
        pytest.importorskip("einops")
    changes = dict(MANUAL) if p.manual else {}
    if planted:
        changes[p.old] = p.new
    name = re.sub(r"\W", "_", p.id) + ("" if planted else "_correct")
    path, lines = _edited(REAL / p.file, changes, tmp_path / f"{name}.py")
    report = diff(_build(path, p.file), NANO if p.file == NANO_FILE else VIT)
    return report, path, lines


@pytest.mark.parametrize("p", PLANTED, ids=[p.id for p in PLANTED])
def test_a_planted_bug_is_never_match_and_is_named_at_its_line(p: Planted, tmp_path: Path) -> None:
    report, path, lines = _diff(p, tmp_path)
    assert report.verdict == "differs", (report.verdict, report.diagnosis, report.undecided)
    d = report.diagnosis
    assert d is not None
    if p.bug is None:  # not in the catalogue: named as unexplained, at a line of the code
        assert d.bug is None
        assert d.location.startswith(path.name), d.location
        assert "closest known bug" not in d.name
        return
    assert d.bug == p.bug, (d.name, d.step, d.location)
    if p.blamed == RETURNED:
        assert d.location == RETURNED
        return
    line = _line(lines, p.blamed or p.new) + 1
    assert d.location == f"{path.name}:{line}", (d.location, d.source)


@pytest.mark.parametrize(
    ("file", "manual"), [(NANO_FILE, True), (NANO_FILE, False), (VIT_FILE, False)]
)
def test_the_correct_real_code_is_never_differs(file: str, manual: bool, tmp_path: Path) -> None:
    p = Planted("base", file, "", "", None, manual=manual)
    report, _, _ = _diff(p, tmp_path, planted=False)
    assert report.verdict == "match", (report.diagnosis, report.undecided)


def test_the_corpus_has_forty_one_line_edits_across_families() -> None:
    """This corpus (nanoGPT, vit-pytorch, transformers' Llama, Mistral, Qwen2 and GPT-2) and the
    two beside it (tests/diffing/test_diff.py's study-notes and Llama
    variants, test_diff_real_code.py's nanoGPT and vit-pytorch lines) hold at least 40."""
    here = Path(__file__).parent
    others = sum(
        len(getattr(_module(here / f), name))
        for f, name in (
            ("test_diff.py", "VARIANTS"),
            ("test_diff_real_code.py", "NANO_BUGS"),
            ("test_diff_real_code.py", "VIT_BUGS"),
        )
    )
    assert len(PLANTED) + len(HF_CASES) >= 40  # this file's alone
    assert len(PLANTED) + len(HF_CASES) + others >= 90
    assert len({p.id for p in PLANTED}) == len(PLANTED)


def test_a_nan_row_is_shown_as_nan_in_rows_json_and_verdict(tmp_path: Path) -> None:
    """A causal mask off by one leaves the first query with no key: a row of NaN. The rows
    and the JSON read NaN (counted), never 0.0; the verdict says where it starts and why."""
    p = next(p for p in PLANTED if p.id == "nano-tril-below-diagonal")
    report, _, _ = _diff(p, tmp_path)
    weights = next(r for r in report.rows if r.step.name == "weights")
    assert weights.agreement is not None
    assert np.isnan(weights.agreement.max_abs)
    assert weights.agreement.nan == 2 * 4 * 6  # query 0 of each (batch, head): every key
    doc = json.loads(json.dumps(report.to_dict()))
    row = next(r for r in doc["rows"] if r["step"] == "weights")
    assert (row["max_abs"], row["nan"]) == (None, 48)
    assert doc["nonfinite"].startswith("the code's att_3 holds 48 NaN from step weights")
    assert "every key masked in 8 row(s)" in doc["nonfinite"]


# ---------------------------------------------------------------------------------------------
# every hint is accepted


#: A flag named by a hint or a CANNOT TELL remedy: "pass --causal", "--rope-style interleaved".
HINT = re.compile(r"(?:pass|diff it with) (--[a-z-]+(?: (?!if\b)[\w.,]+)?)")


def hints(doc: dict[str, Any]) -> list[str]:
    """The flags the diff document suggests (its CANNOT TELL remedy, then its fix).

    >>> hints({"cannot_tell": {"remedy": "pass --rope-style interleaved if that is"},
    ...        "diagnosis": {"fix": "..., diff it with --causal"}})
    ['--rope-style interleaved', '--causal']
    >>> hints({"cannot_tell": {"remedy": "pass --key-lengths 6,4 if those are the keys"}})
    ['--key-lengths 6,4']
    """
    why, d = doc.get("cannot_tell") or {}, doc.get("diagnosis") or {}
    return HINT.findall(why.get("remedy", "")) + HINT.findall(d.get("fix", ""))


def _cli(*args: str) -> Any:
    from typer.testing import CliRunner

    from attntrace.cli import app

    return CliRunner().invoke(app, ["diff", *args, "--format", "json"])


SIZES = ("--batch", "2", "--seq", "6", "--hidden", "64", "--heads", "4")


LLAMA_CORPUS = f"{DATA / 'diff_corpus' / 'llama_torch.py'}:LlamaAttention"


@pytest.mark.slow
@pytest.mark.e2e  # each case runs the CLI several times on a transformers class: .ci/run's tier
@pytest.mark.parametrize(
    ("target", "given"),
    [
        ("transformers:OPTAttention", []),
        ("transformers:StableLmAttention", []),
        ("transformers:Qwen3MoeAttention", []),
        ("transformers:CohereAttention", []),
        ("transformers:LlamaAttention", []),
        (f"{DATA / 'diff_corpus' / 'notes_numpy.py'}:attention", []),
        ("causal.py:attention", []),
        ("padded.py:Padded", []),
        # a choice the user typed wrongly: DIFFERS, and its fix names the flag that fits
        (LLAMA_CORPUS, ["--batch", "2", "--seq", "6", "--rope-style", "interleaved", "--causal"]),
    ],
    ids=[
        *("opt", "stablelm", "qwen3-moe", "cohere", "llama", "notes-numpy", "causal-numpy"),
        *("padded-torch", "typed"),
    ],
)
def test_every_hint_is_accepted_and_correct_code_reaches_match(
    target: str, given: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """diff of correct code, then each flag it suggests added in turn: never refused (exit 2),
    never DIFFERS unless the user typed the choice that is wrong, and MATCH once the hints are
    applied (a later flag wins over an earlier one, as Typer reads them)."""
    pytest.importorskip("transformers")
    monkeypatch.chdir(tmp_path)
    (tmp_path / "causal.py").write_text(CAUSAL_NUMPY)
    (tmp_path / "padded.py").write_text(PADDED_TORCH)
    flags: list[str] = list(given)
    unbatched = "numpy" in target or "causal.py" in target
    for _ in range(4):
        sizes = () if given else SIZES[2 if unbatched else 0 :]  # the typed case gives its own
        result = _cli(target, *sizes, *flags)
        assert result.exit_code in ((0, 1, 4) if given else (0, 4)), (flags, result.output)
        doc = json.loads(result.output)
        if doc["verdict"] == "match":
            return
        new = [h for h in hints(doc) if h not in " ".join(flags)]
        assert new, (flags, doc["cannot_tell"], doc["diagnosis"])
        flags += new[0].split()
    raise AssertionError(f"no MATCH after {flags}")


#: Correct numpy attention with a causal mask: without --causal, diff cannot tell.
CAUSAL_NUMPY = """import numpy as np


def attention(x, params):
    S, H = x.shape
    h, d = 4, H // 4
    q = (x @ params["w_q"].T + params["b_q"]).reshape(S, h, d).transpose(1, 0, 2)
    k = (x @ params["w_k"].T + params["b_k"]).reshape(S, h, d).transpose(1, 0, 2)
    v = (x @ params["w_v"].T + params["b_v"]).reshape(S, h, d).transpose(1, 0, 2)
    scores = q @ k.transpose(0, 2, 1) / np.sqrt(d)
    scores = np.where(np.tril(np.ones((S, S), dtype=bool)), scores, -np.inf)
    e = np.exp(scores - scores.max(axis=-1, keepdims=True))
    weights = e / e.sum(axis=-1, keepdims=True)
    merged = (weights @ v).transpose(1, 0, 2).reshape(S, H)
    return merged @ params["w_o"].T + params["b_o"]
"""

#: Correct torch attention masking the keys past each sequence's length (S and S - 2): without
#: --key-lengths, diff cannot tell.
PADDED_TORCH = """import torch


class Padded(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.qkv, self.out = torch.nn.Linear(64, 192), torch.nn.Linear(64, 64)

    def forward(self, x):
        B, S, H = x.shape
        q, k, v = self.qkv(x).view(B, S, 3, 4, H // 4).permute(2, 0, 3, 1, 4)
        scores = q @ k.transpose(-2, -1) / (H // 4) ** 0.5
        pad = torch.arange(S)[None] >= torch.tensor([S, S - 2])[:, None]
        scores = scores.masked_fill(pad[:, None, None, :], float("-inf"))
        return self.out((scores.softmax(-1) @ v).transpose(1, 2).reshape(B, S, H))
"""


# ---------------------------------------------------------------------------------------------
# transformers' own modeling files, copied verbatim from the installed package at test time


@dataclass(frozen=True)
class Edit:
    """One line of a transformers modeling file edited (the file copied at test time)."""

    id: str
    old: str
    new: str
    bug: str | None  # None: not in the catalogue, any DIFFERS
    blamed: str | None = None  # the line blamed, when not the edited one


SOFTMAX_HF = (
    "attn_weights = nn.functional.softmax(attn_weights, dim=-1, dtype=torch.float32)"
    ".to(query.dtype)"
)
REPEAT = (
    "hidden_states = hidden_states[:, :, None, :, :].expand(batch, num_key_value_heads, n_rep, "
    "slen, head_dim)"
)
MERGE_HF = "attn_output = attn_output.reshape(*input_shape, -1).contiguous()"
LLAMA_EDITS = [
    Edit("softmax-2", SOFTMAX_HF, SOFTMAX_HF.replace("dim=-1", "dim=-2"), "softmax-axis-2"),
    Edit(
        "unscaled",
        "attn_weights = torch.matmul(query, key_states.transpose(2, 3)) * scaling",
        "attn_weights = torch.matmul(query, key_states.transpose(2, 3))",
        "unscaled",
    ),
    Edit(
        "q-from-k",
        "query_states = self.q_proj(hidden_states).view(hidden_shape).transpose(1, 2)",
        "query_states = self.k_proj(hidden_states).repeat(1, 1, 2).view(hidden_shape)"
        ".transpose(1, 2)",
        None,
    ),
    Edit(
        "rotate-sign",
        "return torch.cat((-x2, x1), dim=-1)",
        "return torch.cat((x2, -x1), dim=-1)",
        None,
    ),
    Edit(
        "gqa-tiled",
        REPEAT,
        "hidden_states = hidden_states[:, None, :, :, :].expand(batch, n_rep, "
        "num_key_value_heads, slen, head_dim)",
        "gqa-tile-k-v",
        "return hidden_states.reshape(batch, num_key_value_heads * n_rep, slen, head_dim)",
    ),
    Edit(
        "mask-dropped",
        "attn_weights = attn_weights + attention_mask",
        "attn_weights = attn_weights + 0",
        "mask-missing",
    ),
    Edit(
        "merge-no-transpose",
        "attn_output = attn_output.transpose(1, 2).contiguous()",
        "attn_output = attn_output.contiguous()",
        "merge-no-transpose",
        MERGE_HF,
    ),
    Edit(
        "no-o-proj",
        "attn_output = self.o_proj(attn_output)",
        "attn_output = attn_output",
        "output-missing",
        MERGE_HF,  # the last tensor the code makes holds the merged heads: blamed there
    ),
]
GPT2_SPLIT = (
    "query_states, key_states, value_states = self.c_attn(hidden_states).split(self.split_size, "
    "dim=2)"
)
GPT2_EDITS = [
    Edit(
        "unscaled",
        "attn_weights = torch.matmul(query, key.transpose(-1, -2)) * scaling",
        "attn_weights = torch.matmul(query, key.transpose(-1, -2))",
        "unscaled",
    ),
    Edit(
        "swap-kv",
        GPT2_SPLIT,
        GPT2_SPLIT.replace("states, key_states, value_states", "states, value_states, key_states"),
        "swapped-kv",
    ),
    Edit(
        "split-q",
        "query_states = query_states.view(shape_q).transpose(1, 2)",
        "query_states = query_states.reshape(shape_q[0], -1, shape_q[1], self.head_dim)",
        "split-no-transpose-q",
    ),
    Edit(
        "no-c-proj",
        "attn_output = self.c_proj(attn_output)",
        "attn_output = attn_output",
        "output-missing",
        "attn_output = attn_output.reshape(*attn_output.shape[:-2], -1).contiguous()",
    ),
]
FAMILIES = {  # family -> (module, class, its edits, sizes)
    "llama": ("llama", "LlamaAttention", LLAMA_EDITS, {"hidden": 32, "heads": 4, "kv_heads": 2}),
    "mistral": (
        "mistral",
        "MistralAttention",
        LLAMA_EDITS,
        {"hidden": 32, "heads": 4, "kv_heads": 2},
    ),
    "qwen2": ("qwen2", "Qwen2Attention", LLAMA_EDITS, {"hidden": 32, "heads": 4, "kv_heads": 2}),
    "gpt2": ("gpt2", "GPT2Attention", GPT2_EDITS, {"hidden": 32, "heads": 4}),
}
HF_CASES = [(f, e) for f, (_, _, edits, _) in FAMILIES.items() for e in edits]


def _hf_layer(family: str, edit: Edit | None, tmp_path: Path) -> tuple[Any, Path, list[str]]:
    """The family's attention class from a copy of its modeling file (one line edited), built
    as ``attntrace diff transformers:<Class>`` builds it."""
    pytest.importorskip("transformers")
    import inspect

    from attntrace.capturing.library import build

    package, name, _, sizes = FAMILIES[family]
    source = importlib.import_module(f"transformers.models.{package}.modeling_{package}")
    lines = inspect.getsource(source).splitlines()
    if edit is not None:
        at = _line(lines, edit.old)
        lines[at] = lines[at].replace(edit.old, edit.new)
    tag = "correct" if edit is None else re.sub(r"\W", "_", edit.id)
    path = tmp_path / f"{family}_{tag}.py"
    path.write_text("\n".join(lines) + "\n")
    spec = importlib.util.spec_from_file_location(
        f"transformers.models.{package}._planted_{family}_{tag}", path
    )
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its relative imports resolve in its family's package
    spec.loader.exec_module(module)
    torch.manual_seed(0)
    return build(getattr(module, name), {}, sizes), path, lines


def _hf_config(family: str) -> AttentionConfig:
    sizes = FAMILIES[family][3]
    return AttentionConfig(
        batch=2, seq=5, hidden=sizes["hidden"], heads=sizes["heads"], causal=True,
        kv_heads=sizes.get("kv_heads"),
    )  # fmt: skip


@pytest.mark.parametrize(("family", "edit"), HF_CASES, ids=[f"{f}-{e.id}" for f, e in HF_CASES])
def test_a_bug_planted_in_transformers_code_is_never_match(
    family: str, edit: Edit, tmp_path: Path
) -> None:
    layer, path, lines = _hf_layer(family, edit, tmp_path)
    report = diff(layer, _hf_config(family))
    assert report.verdict == "differs", (report.verdict, report.diagnosis, report.undecided)
    d = report.diagnosis
    assert d is not None
    if edit.bug is None:
        assert d.bug is None
        assert d.location.startswith(path.name), d.location
        return
    assert d.bug == edit.bug, (d.name, d.step, d.location)
    if edit.blamed == RETURNED:
        assert d.location == RETURNED
        return
    line = _line(lines, edit.blamed or edit.new) + 1
    assert d.location == f"{path.name}:{line}", (d.location, d.source)


@pytest.mark.parametrize("family", list(FAMILIES))
def test_the_correct_transformers_code_is_match(family: str, tmp_path: Path) -> None:
    layer, _, _ = _hf_layer(family, None, tmp_path)
    report = diff(layer, _hf_config(family))
    assert report.verdict == "match", (report.diagnosis, report.undecided)


def test_a_divergence_no_bug_explains_after_a_choice_read_from_the_module_cannot_tell(
    tmp_path: Path,
) -> None:
    """Llama reads causal from LlamaAttention.is_causal: a masked step that differs in a way
    no known bug reproduces (the mask filled with -1 instead of -inf) is not a finding while
    no flag said causal; with --causal given it is DIFFERS."""
    edit = Edit(
        "mask-minus-one",
        "attn_weights = attn_weights + attention_mask",
        "attn_weights = attn_weights + attention_mask.clamp(min=-1.0)",
        None,
    )
    layer, _, _ = _hf_layer("llama", edit, tmp_path)
    unstated = dataclasses.replace(_hf_config("llama"), causal=False)
    from attntrace.diffing.diff_report import diff_layer
    from attntrace.diffing.layer import as_layer

    options = dataclasses.asdict(unstated)
    report = diff_layer(
        as_layer(layer, seq=5, batch=2),
        options,
        {"batch", "seq", "hidden", "heads", "kv_heads"},
        None,
    )
    assert report.verdict == "cannot tell", (report.diagnosis, report.undecided)
    assert report.undecided is not None
    assert "causal there was read from LlamaAttention.is_causal (True)" in report.undecided.missing
    assert report.undecided.remedy == "say whether the model is causal: --causal or --no-causal"
    assert hints(report.to_dict()) == []  # a question, not a flag to apply blindly
    assert diff(layer, _hf_config("llama")).verdict == "differs"  # causal given


def test_cannot_tell_from_a_class_attntrace_cannot_express_is_a_report_and_exit_4(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A CannotTellError raised while the layer is built (DeBERTa's disentangled attention)
    is the verdict CANNOT TELL: no rows, what is missing and what would decide, a valid
    attntrace.diff/2 document."""
    import jsonschema

    import attntrace.diffing.layer as layer_module
    from attntrace.errors import EXIT_CANNOT_TELL, CannotTellError
    from attntrace.schemas import diff_schema

    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise CannotTellError("DebertaV2Attention adds disentangled position scores", "")

    monkeypatch.setattr(layer_module, "as_layer", refuse)
    report = diff(lambda x, params: x, AttentionConfig(seq=4, hidden=8, heads=2))
    assert (report.verdict, report.ok, report.rows) == ("cannot tell", False, ())
    doc = report.to_dict()
    jsonschema.Draft202012Validator(diff_schema()).validate(doc)
    assert doc["cannot_tell"] == {
        "missing": "DebertaV2Attention adds disentangled position scores",
        "remedy": "",
    }
    assert CannotTellError("a", "b").exit_code == EXIT_CANNOT_TELL == 4
    from rich.console import Console

    from attntrace.render.diff_view import render_diff

    console = Console(width=100, record=True)
    render_diff(report, console)
    text = console.export_text()
    assert "CANNOT TELL: DebertaV2Attention adds disentangled position scores" in text
    assert "to decide: nothing attntrace takes" in text


def test_the_nan_document_is_valid_and_reads_nan_as_counted_nulls(tmp_path: Path) -> None:
    import jsonschema

    from attntrace.schemas import diff_schema

    p = next(p for p in PLANTED if p.id == "nano-tril-below-diagonal")
    report, _, _ = _diff(p, tmp_path)
    jsonschema.Draft202012Validator(diff_schema()).validate(report.to_dict())
    from rich.console import Console

    from attntrace.render.diff_view import render_diff

    console = Console(width=120, record=True)
    render_diff(report, console)
    rows = console.export_text().splitlines()
    weights = next(line for line in rows if line.split()[1:2] == ["weights"])
    assert weights.split()[-3:] == ["nan", "nan", "✗"]


class _Stated(torch.nn.Module):
    """A module that states its choices in attributes (as OPT's is_causal = False does)."""

    is_causal = False
    rope_theta = 500000.0
    num_heads = 4

    def __init__(self) -> None:
        super().__init__()
        self.q_proj, self.k_proj = torch.nn.Linear(16, 16), torch.nn.Linear(16, 16)
        self.v_proj, self.o_proj = torch.nn.Linear(16, 16), torch.nn.Linear(16, 16)

    def forward(self, x: Any) -> Any:
        return self.o_proj(self.v_proj(x))


@pytest.mark.parametrize(
    ("typed", "expect"),
    [
        ({}, {"causal": False, "rope_base": 500000.0}),
        ({"causal": True}, {"causal": True, "rope_base": 500000.0}),
        ({"rope_base": 10000.0}, {"causal": False, "rope_base": 10000.0}),
        (
            {"causal": True, "rope_style": "interleaved"},
            {"causal": True, "rope_style": "interleaved"},
        ),
    ],
)
def test_a_flag_for_a_choice_wins_over_what_the_module_states(
    typed: dict[str, Any], expect: dict[str, Any]
) -> None:
    """Only sizes are checked against the module; a typed choice replaces what it states, and
    what it states untyped is a Read named by its attribute."""
    from attntrace.diffing.diff_report import resolve_read
    from attntrace.diffing.layer import as_layer

    options = {**dataclasses.asdict(AttentionConfig(batch=2, seq=4, hidden=16, heads=4)), **typed}
    layer = as_layer(_Stated(), seq=4, batch=2)
    config, _, reads = resolve_read(layer, options, {"batch", "seq", "hidden", *typed}, None)
    assert {k: getattr(config, k) for k in expect} == expect
    read = {r.field: (r.value, r.source) for r in reads}
    assert ("causal" in read) is ("causal" not in typed)
    if "causal" not in typed:
        assert read["causal"] == (False, "_Stated.is_causal")
    if "rope_base" not in typed:
        assert read["rope_base"] == (500000.0, "_Stated.rope_theta")
    with pytest.raises(Exception, match=r"--heads 2 conflicts with the weights file"):
        resolve_read(layer, {**options, "heads": 2}, {"batch", "seq", "hidden", "heads"}, None)


NUMPY_NOTES = """import numpy as np


def attention(x, params):
    S, H = x.shape
    h, d = 4, H // 4
    q = (x @ params["w_q"].T + params["b_q"]).reshape(S, h, d).transpose(1, 0, 2)
    k = (x @ params["w_k"].T + params["b_k"]).reshape(S, h, d).transpose(1, 0, 2)
    v = (x @ params["w_v"].T + params["b_v"]).reshape(S, h, d).transpose(1, 0, 2)
    scores = q @ k.transpose(0, 2, 1) / np.sqrt(d)
    e = np.exp(scores - scores.max(axis=-1, keepdims=True))
    weights = e / e.sum(axis=-1, keepdims=True)
    merged = (weights @ v).transpose(1, 0, 2).reshape(S, H)
    return merged @ params["w_o"].T + params["b_o"]


def by_einsum(x, params):
    S, H = x.shape
    h, d = 4, H // 4
    q = (x @ params["w_q"].T + params["b_q"]).reshape(S, h, d)
    k = (x @ params["w_k"].T + params["b_k"]).reshape(S, h, d)
    v = (x @ params["w_v"].T + params["b_v"]).reshape(S, h, d)
    scores = np.einsum("shd,thd->sht", q, k) / np.sqrt(d)
    e = np.exp(scores - scores.max(axis=-1, keepdims=True))
    attn = e / e.sum(axis=-1, keepdims=True)
    context = np.einsum("sht,thd->shd", attn, v)
    return context.reshape(S, H) @ params["w_o"].T + params["b_o"]
"""

#: (function, line as written, edit, bug, words the fix or name must hold)
NUMPY_WORDING = [
    (
        "attention",
        "merged = (weights @ v).transpose(1, 0, 2).reshape(S, H)",
        "merged = (weights @ v).reshape(S, H)",
        "merge-no-transpose",
        "np.swapaxes(context, 0, 1).reshape(S, H)",
    ),
    (
        "attention",
        "scores = q @ k.transpose(0, 2, 1) / np.sqrt(d)",
        "scores = q @ k.reshape(h, d, S) / np.sqrt(d)",
        "k-reshape",
        "np.swapaxes(k, -2, -1)",
    ),
    (
        "by_einsum",
        "attn = e / e.sum(axis=-1, keepdims=True)",
        "attn = e / e.sum(axis=0, keepdims=True)",
        "softmax-sum-axis-1",
        "(axis=0, S",  # their layout (S, h, N): the queries are axis 0, not the reference's 1
    ),
]


@pytest.mark.parametrize(
    ("fn", "old", "new", "bug", "words"), NUMPY_WORDING, ids=[w[3] for w in NUMPY_WORDING]
)
def test_a_fix_for_numpy_code_is_written_in_numpy_and_its_layout(
    fn: str, old: str, new: str, bug: str, words: str, tmp_path: Path
) -> None:
    path = tmp_path / ("numpy_" + re.sub(r"\W", "_", bug) + ".py")
    lines = NUMPY_NOTES.splitlines()
    lines[_line(lines, old)] = lines[_line(lines, old)].replace(old, new)
    path.write_text("\n".join(lines) + "\n")
    report = diff(getattr(_module(path), fn), AttentionConfig(seq=5, hidden=32, heads=4))
    d = report.diagnosis
    assert d is not None
    assert d.bug == bug, (d.name, d.fix)
    assert words in f"{d.name} {d.fix}", (d.name, d.fix)
    assert "torch" not in d.fix
    assert "dim=" not in f"{d.name} {d.fix}"
