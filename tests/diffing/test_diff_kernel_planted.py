"""Issue 42's planted-bug corpus: one line edited in a fused kernel call of real code nobody here
wrote (nanoGPT's ``CausalSelfAttention`` flash path, copied verbatim in tests/data/real_code;
transformers' ``sdpa_attention_forward`` and x-transformers' ``Attend.flash_attn``, copied from
the installed packages at test time). Each edit is DIFFERS, named by its catalogue key at the
kernel call's line, with a fix written in the call's own words; the unedited code is MATCH."""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import re
import sys
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")

from attntrace import AttentionConfig  # noqa: E402
from attntrace.diffing.diff_report import diff  # noqa: E402
from paths import DATA  # noqa: E402


@dataclass(frozen=True)
class Planted:
    """One line of a real file edited: the bug diff must name, and words its fix must hold."""

    id: str
    old: str  # the line as written (stripped)
    new: str
    bug: str
    fix: str  # words the fix holds: the user's own expression, put right
    blamed: str = ""  # the line named, when neither the edited one nor the kernel call


def _line(lines: list[str], text: str) -> int:
    found = [i for i, line in enumerate(lines) if line.strip() == text]
    assert len(found) == 1, f"{text!r} occurs {len(found)} times"
    return found[0]


def _edited(lines: list[str], p: Planted | None, path: Path) -> tuple[Path, list[str], int]:
    """``lines`` with ``p`` applied, written to ``path``; the edited line's number (from 1)."""
    lines = list(lines)
    at = -1
    if p is not None:
        at = _line(lines, p.old)
        lines[at] = lines[at].replace(p.old, p.new)
    path.write_text("\n".join(lines) + "\n")
    return path, lines, at + 1


def _load(path: Path, name: str) -> Any:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # relative imports resolve in the package named
    spec.loader.exec_module(module)
    return module


def _kernel_lines(lines: list[str]) -> set[int]:
    """The lines (from 1) of the file's ``scaled_dot_product_attention(...)`` call."""
    start = next(i for i, s in enumerate(lines) if "scaled_dot_product_attention(" in s)
    depth, end = 0, start
    for end in range(start, len(lines)):
        depth += lines[end].count("(") - lines[end].count(")")
        if depth <= 0:
            break
    return set(range(start + 1, end + 2))


def _assert_named(report: Any, p: Planted, path: Path, lines: list[str], line: int) -> None:
    assert report.verdict == "differs", (report.verdict, report.diagnosis, report.undecided)
    d = report.diagnosis
    assert d is not None
    assert d.bug == p.bug, (d.bug, d.name, d.location)
    file, _, at = d.location.rpartition(":")
    assert file == path.name, d.location
    blamed = {_line(lines, p.blamed) + 1} if p.blamed else {line} | _kernel_lines(lines)
    assert int(at) in blamed, (d.location, d.source, line)
    assert p.fix in d.fix, d.fix


# ---------------------------------------------------------------------------------------------
# nanoGPT's flash path: F.scaled_dot_product_attention(q, k, v, attn_mask=None, ...)

NANO = AttentionConfig(batch=2, seq=6, hidden=32, heads=4, causal=True)
SDPA = (
    "y = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=None, "
    "dropout_p=self.dropout if self.training else 0, is_causal=True)"
)
BOOL = "dtype=torch.bool, device=x.device"
NANO_EDITS = [
    Planted(
        "nano-dropout-at-eval",
        SDPA,
        SDPA.replace("self.dropout if self.training else 0", "self.dropout"),
        "dropout-at-eval",
        "dropout_p=self.dropout if self.training else 0.0",
    ),
    Planted(
        "nano-mask-masked-fill-polarity",
        SDPA,
        SDPA.replace("attn_mask=None", f"attn_mask=torch.ones(T, T, {BOOL}).triu(1)").replace(
            "is_causal=True", "is_causal=False"
        ),
        "mask-inverted",
        f"attn_mask=~torch.ones(T, T, {BOOL}).triu(1)",
    ),
    Planted(
        "nano-float-keep-mask",
        SDPA,
        SDPA.replace(
            "attn_mask=None", "attn_mask=torch.ones(T, T, device=x.device).tril()"
        ).replace("is_causal=True", "is_causal=False"),
        "mask-float-keep",
        "attn_mask=torch.ones(T, T, device=x.device).tril().bool()",
    ),
    Planted(
        "nano-not-causal",
        SDPA,
        SDPA.replace("is_causal=True", "is_causal=False"),
        "mask-missing",
        "is_causal=True",
    ),
    Planted(
        "nano-scale-sqrt-d",
        SDPA,
        SDPA.replace("is_causal=True)", "is_causal=True, scale=math.sqrt(k.size(-1)))"),
        "scaled-sqrt(d)",
        "scale=1 / math.sqrt(k.size(-1))",
    ),
]


def _nano(p: Planted | None, tmp_path: Path) -> tuple[Any, Path, list[str], int]:
    source = (DATA / "real_code" / "nanogpt_attention.py").read_text().splitlines()
    tag = "correct" if p is None else re.sub(r"\W", "_", p.id)
    path, lines, line = _edited(source, p, tmp_path / f"{tag}.py")
    module = _load(path, f"_kernel_planted_{tag}")
    torch.manual_seed(0)
    config = module.GPTConfig(block_size=16, n_head=4, n_embd=32, dropout=0.1)
    return diff(module.CausalSelfAttention(config), NANO), path, lines, line


@pytest.mark.slow
@pytest.mark.parametrize("p", NANO_EDITS, ids=[p.id for p in NANO_EDITS])
def test_a_bug_planted_in_nanogpts_sdpa_call_is_named_at_the_call(
    p: Planted, tmp_path: Path
) -> None:
    report, path, lines, line = _nano(p, tmp_path)
    _assert_named(report, p, path, lines, line)


# ---------------------------------------------------------------------------------------------
# transformers' sdpa_attention_forward, copied from the installed package, registered as "sdpa"

SDPA_HF = "transformers.integrations.sdpa_attention"
EXPAND = (
    "hidden_states = hidden_states[:, :, None, :, :].expand(batch, num_key_value_heads, n_rep, "
    "slen, head_dim)"
)
IS_CAUSAL = "is_causal = q_length > 1 and attention_mask is None and is_causal"
HF_EDITS = [
    Planted(
        "hf-scale-squared", "scale=scaling,", "scale=scaling**2,", "scaled-1/d", "scale=scaling,"
    ),
    Planted(
        "hf-scale-inverted",
        "scale=scaling,",
        "scale=1 / scaling,",
        "scaled-sqrt(d)",
        "scale=scaling,",
    ),
    Planted(
        "hf-dropout-at-eval",
        "dropout_p=dropout,",
        "dropout_p=module.attention_dropout,",
        "dropout-at-eval",
        "dropout_p=module.attention_dropout if module.training else 0.0",
    ),
    Planted(
        "hf-gqa-tiled",
        EXPAND,
        "hidden_states = hidden_states[:, None, :, :, :].expand(batch, n_rep, "
        "num_key_value_heads, slen, head_dim)",
        "gqa-tile-k-v",
        "repeat_interleave(2, dim=1); or hand scaled_dot_product_attention the kv heads as they "
        "are, with enable_gqa=True",
        "return hidden_states.reshape(batch, num_key_value_heads * n_rep, slen, head_dim)",
    ),
    Planted("hf-mask-dropped", "attn_mask=attention_mask,", "attn_mask=None,", "mask-missing", ""),
    Planted(
        "hf-mask-polarity",
        "attn_mask=attention_mask,",
        "attn_mask=attention_mask != 0,",
        "mask-inverted",
        "attn_mask=attention_mask == 0",
    ),
    Planted(
        "mistral-window-dropped-for-is-causal",
        IS_CAUSAL,
        "is_causal, attention_mask = q_length > 1 and is_causal, None",
        "window-dropped",
        "is_causal=False, attn_mask=",
    ),
]
HF_SIZES = {"hidden": 32, "heads": 4, "kv_heads": 2}


def _hf(
    p: Planted | None, family: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> tuple[Any, Path, list[str], int]:
    """transformers' ``<family>Attention`` with ``attn_implementation="sdpa"`` running a copy of
    ``sdpa_attention_forward`` (``p`` applied), diffed as ``transformers:<Class>`` is."""
    pytest.importorskip("transformers")
    from transformers.modeling_utils import AttentionInterface

    from attntrace.capturing.library import build, find_class

    source = inspect.getsource(importlib.import_module(SDPA_HF)).splitlines()
    tag = "correct" if p is None else re.sub(r"\W", "_", p.id)
    path, lines, line = _edited(source, p, tmp_path / f"sdpa_{family}_{tag}.py")
    copy = _load(path, f"transformers.integrations._planted_sdpa_{family}_{tag}")
    monkeypatch.setitem(AttentionInterface._global_mapping, "sdpa", copy.sdpa_attention_forward)
    window = {"sliding_window": 3} if family == "mistral" else {}
    init = {"attn_implementation": "sdpa", "attention_dropout": 0.1, **window}
    torch.manual_seed(0)
    layer = build(find_class("transformers", f"{family.title()}Attention"), init, HF_SIZES)
    config = AttentionConfig(
        batch=2, seq=5, hidden=32, heads=4, kv_heads=2, causal=True,
        window=3 if family == "mistral" else None,
    )  # fmt: skip
    return diff(layer, config), path, lines, line


HF_CASES = [("mistral" if p.bug == "window-dropped" else "llama", p) for p in HF_EDITS]


@pytest.mark.slow
@pytest.mark.e2e  # transformers classes
@pytest.mark.parametrize(("family", "p"), HF_CASES, ids=[p.id for _, p in HF_CASES])
def test_a_bug_planted_in_transformers_sdpa_attention_is_named_at_the_call(
    family: str, p: Planted, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    report, path, lines, line = _hf(p, family, tmp_path, monkeypatch)
    _assert_named(report, p, path, lines, line)


@pytest.mark.slow
@pytest.mark.e2e
@pytest.mark.parametrize("family", ["llama", "mistral"])
def test_transformers_sdpa_attention_unedited_is_match(
    family: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    report, _, _, _ = _hf(None, family, tmp_path, monkeypatch)
    assert report.verdict == "match", (report.diagnosis, report.undecided)


# ---------------------------------------------------------------------------------------------
# x-transformers' Attend.flash_attn (flash=True: F.scaled_dot_product_attention)

XT_EDITS = [
    Planted(
        "xt-dropout-at-eval",
        "dropout_p = self.dropout if self.training else 0.,",
        "dropout_p = self.dropout,",
        "dropout-at-eval",
        "dropout_p=self.dropout if self.training else 0.0",
    ),
    Planted("xt-not-causal", "is_causal = causal", "is_causal = False", "mask-missing", ""),
]


def _xt(
    p: Planted | None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> tuple[Any, Path, list[str], int]:
    xt = pytest.importorskip("x_transformers")
    import x_transformers.x_transformers as layers

    source = inspect.getsource(importlib.import_module("x_transformers.attend")).splitlines()
    tag = "correct" if p is None else re.sub(r"\W", "_", p.id)
    path, lines, line = _edited(source, p, tmp_path / f"attend_{tag}.py")
    copy = _load(path, f"x_transformers._planted_attend_{tag}")
    monkeypatch.setattr(layers, "Attend", copy.Attend)
    torch.manual_seed(0)
    attn = xt.Attention(dim=32, heads=4, dim_head=8, causal=True, flash=True, dropout=0.1)
    return diff(attn, AttentionConfig(batch=2, seq=5, hidden=32, heads=4, causal=True)), *(
        path,
        lines,
        line,
    )


@pytest.mark.slow
@pytest.mark.e2e  # x-transformers' import alone takes seconds
@pytest.mark.parametrize("p", XT_EDITS, ids=[p.id for p in XT_EDITS])
def test_a_bug_planted_in_x_transformers_flash_attn_is_named_at_the_call(
    p: Planted, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    report, path, lines, line = _xt(p, tmp_path, monkeypatch)
    _assert_named(report, p, path, lines, line)


@pytest.mark.slow
@pytest.mark.e2e
def test_x_transformers_flash_attn_unedited_is_match(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    report, _, _, _ = _xt(None, tmp_path, monkeypatch)
    assert report.verdict == "match", (report.diagnosis, report.undecided)


def test_the_kernel_corpus_holds_at_least_ten_one_line_edits() -> None:
    ids = [p.id for p in (*NANO_EDITS, *HF_EDITS, *XT_EDITS)]  # real code, verbatim
    assert len(ids) >= 10
    assert len(set(ids)) == len(ids)


# ---------------------------------------------------------------------------------------------
# transformers:<Class> with attn_implementation="sdpa": the same rows as with "eager"

SDPA_FAMILIES = {  # class -> (sizes, --init beyond the implementation, the reference's config)
    "LlamaAttention": (HF_SIZES, {}, {"kv_heads": 2, "causal": True}),
    "MistralAttention": (HF_SIZES, {"sliding_window": 3}, {"kv_heads": 2, "causal": True,
                                                           "window": 3}),
    "Qwen2Attention": (HF_SIZES, {}, {"kv_heads": 2, "causal": True}),
    "GemmaAttention": (HF_SIZES, {}, {"kv_heads": 2, "causal": True}),
    "BertSelfAttention": ({"hidden": 32, "heads": 4}, {}, {}),
}  # fmt: skip


def _rows(name: str, implementation: str) -> tuple[str, list[tuple[str, str]], int]:
    from attntrace.capturing.library import build, find_class

    sizes, init, config = SDPA_FAMILIES[name]
    torch.manual_seed(0)
    layer = build(
        find_class("transformers", name), {"attn_implementation": implementation, **init}, sizes
    )
    report = diff(layer, AttentionConfig(batch=2, seq=5, hidden=32, heads=4, **config))
    seen = sum(r.user is not None for r in report.rows)
    return report.verdict, [(r.step.name, r.status) for r in report.rows], seen


@pytest.mark.slow
@pytest.mark.e2e  # transformers classes
@pytest.mark.parametrize("name", list(SDPA_FAMILIES))
def test_transformers_sdpa_gives_the_rows_and_verdict_of_eager(name: str) -> None:
    """The SDPA call opened step by step: every step eager shows is shown, matched, again."""
    pytest.importorskip("transformers")
    eager, sdpa = _rows(name, "eager"), _rows(name, "sdpa")
    assert sdpa == eager
    assert eager[0] == "match"
    steps = {step for step, status in eager[1] if status == "match"}
    assert {"scores", "scaled", "weights", "context", "output"} <= steps


@pytest.mark.slow
@pytest.mark.e2e
def test_an_implementation_attntrace_cannot_open_is_refused_with_the_choices() -> None:
    pytest.importorskip("transformers")
    from typer.testing import CliRunner

    from attntrace.cli import app

    args = [
        "diff",
        "transformers:LlamaAttention",
        "--init",
        "attn_implementation=flash_attention_2",
    ]
    result = CliRunner().invoke(app, [*args, "--seq", "4"])
    assert result.exit_code == 2, result.output
    assert "attntrace runs eager or sdpa" in result.output
    assert "Traceback" not in result.output


# ---------------------------------------------------------------------------------------------
# a chunked prefill through SDPA: is_causal=True is top-left when the keys outnumber the queries

CACHED = '''import torch
import torch.nn as nn
from torch.nn import functional as F
from torch.nn.attention.bias import causal_lower_right


class CachedAttention(nn.Module):
    """nanoGPT's flash path with GPT-2's layer_past: the new tokens attend the cache too."""

    def __init__(self, n_embd=32, n_head=4):
        super().__init__()
        self.c_attn = nn.Linear(n_embd, 3 * n_embd)
        self.c_proj = nn.Linear(n_embd, n_embd)
        self.n_head, self.n_embd = n_head, n_embd

    def forward(self, x, layer_past=None):
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(self.n_embd, dim=2)
        k = k.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        q = q.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        v = v.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        if layer_past is not None:
            k = torch.cat((layer_past[0], k), dim=-2)
            v = torch.cat((layer_past[1], v), dim=-2)
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=causal_lower_right(T, k.size(-2)))
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        return self.c_proj(y), (k, v)
'''
CAUSAL_CALL = (
    "y = F.scaled_dot_product_attention(q, k, v, attn_mask=causal_lower_right(T, k.size(-2)))"
)


@pytest.mark.slow
@pytest.mark.e2e  # causal_lower_right's CausalBias imports torch._dynamo: seconds in a worker
@pytest.mark.parametrize("planted", [False, True], ids=["bottom-right", "is-causal-top-left"])
def test_is_causal_in_a_chunked_prefill_is_named_top_left(planted: bool, tmp_path: Path) -> None:
    p = Planted(
        "top-left",
        CAUSAL_CALL,
        "y = F.scaled_dot_product_attention(q, k, v, is_causal=True)",
        "decode-mask-top-left",
        "attn_mask=torch.nn.attention.bias.causal_lower_right(S, N)",
    )
    path, lines, line = _edited(CACHED.splitlines(), p if planted else None, tmp_path / "c.py")
    module = _load(path, f"_kernel_cached_{planted}")
    torch.manual_seed(0)
    config = AttentionConfig(batch=2, seq=3, hidden=32, heads=4, causal=True, past=4)
    report = diff(module.CachedAttention(), config)
    if not planted:
        assert report.verdict == "match", (report.diagnosis, report.undecided)
        return
    _assert_named(report, p, path, lines, line)


# ---------------------------------------------------------------------------------------------
# flex_attention: a mask_mod with q_idx and kv_idx swapped, or the diagonal dropped

FLEX = '''import torch
import torch.nn as nn
from torch.nn.attention.flex_attention import create_block_mask, flex_attention


def causal(b, h, q_idx, kv_idx):
    return q_idx >= kv_idx


class FlexAttention(nn.Module):
    """A block-masked causal attention, as torch's flex_attention tutorial writes it."""

    def __init__(self, dim=32, heads=4, seq=5):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.block_mask = create_block_mask(causal, None, None, seq, seq, device="cpu")

    def forward(self, x):
        B, S, C = x.shape
        q, k, v = self.qkv(x).view(B, S, 3, self.heads, C // self.heads).permute(2, 0, 3, 1, 4)
        y = flex_attention(q, k, v, block_mask=self.block_mask)
        return self.proj(y.transpose(1, 2).reshape(B, S, C))
'''
MASK_MOD = "return q_idx >= kv_idx"
FLEX_EDITS = [
    Planted("flex-mask-mod-swapped", MASK_MOD, "return kv_idx >= q_idx", "mask-axes-swapped",
            "a causal mask_mod returns q_idx >= kv_idx"),
    Planted("flex-mask-mod-diagonal", MASK_MOD, "return q_idx > kv_idx", "causal-offset-1",
            "a mask_mod returning q_idx >= kv_idx"),
]  # fmt: skip


@pytest.mark.slow
@pytest.mark.e2e  # flex_attention's first call warms dynamo up (~10 s)
@pytest.mark.parametrize("p", [None, *FLEX_EDITS], ids=["correct", *(p.id for p in FLEX_EDITS)])
def test_a_bug_planted_in_a_flex_mask_mod_is_named_at_the_call(
    p: Planted | None, tmp_path: Path
) -> None:
    path, lines, line = _edited(FLEX.splitlines(), p, tmp_path / "flex_attn.py")
    module = _load(path, f"_kernel_flex_{'correct' if p is None else p.id.replace('-', '_')}")
    torch.manual_seed(0)
    report = diff(module.FlexAttention(), AttentionConfig(batch=2, seq=5, hidden=32, heads=4,
                                                           causal=True))  # fmt: skip
    if p is None:
        assert report.verdict == "match", (report.diagnosis, report.undecided)
        return
    call = "y = flex_attention(q, k, v, block_mask=self.block_mask)"
    _assert_named(report, replace(p, blamed=call), path, lines, line)


# ---------------------------------------------------------------------------------------------
# torch's nn.MultiheadAttention, need_weights=False: its SDPA call opened, its mask convention

MHA_BLOCK = """import torch
import torch.nn as nn


class Block(nn.Module):
    def __init__(self, dim=32, heads=4):
        super().__init__()
        self.attn = nn.MultiheadAttention(dim, heads, batch_first=True)

    def forward(self, x):
        keep = torch.ones(x.shape[1], x.shape[1], dtype=torch.bool).tril()
        y, _ = self.attn(x, x, x, attn_mask=~keep, need_weights=False)
        return y
"""


@pytest.mark.slow
@pytest.mark.parametrize("planted", [False, True], ids=["masked-true", "sdpa-polarity"])
def test_an_sdpa_polarity_mask_given_to_torch_mha_is_named_in_mhas_words(
    planted: bool, tmp_path: Path
) -> None:
    """nn.MultiheadAttention hides the keys where a boolean mask is True, the opposite of
    SDPA, which it calls: the fix speaks of the module's argument, not of torch's call."""
    old = "y, _ = self.attn(x, x, x, attn_mask=~keep, need_weights=False)"
    p = Planted("mha-polarity", old, old.replace("~keep", "keep"), "mask-inverted", "")
    path, _, line = _edited(MHA_BLOCK.splitlines(), p if planted else None, tmp_path / "mha.py")
    module = _load(path, f"_kernel_mha_{planted}")
    torch.manual_seed(0)
    report = diff(module.Block(), AttentionConfig(batch=2, seq=5, hidden=32, heads=4, causal=True))
    if not planted:
        assert report.verdict == "match", (report.diagnosis, report.undecided)
        return
    d = report.diagnosis
    assert report.verdict == "differs"
    assert d is not None
    assert d.bug == "mask-inverted", d
    assert d.fix.startswith("nn.MultiheadAttention's boolean attn_mask is True where a key is")
    assert "attn_mask=~keep" in d.fix
    assert d.location == f"mha.py:{line}"  # the user's call of the module, not torch's line
    assert d.source == p.new.removeprefix("y, _ = ")
