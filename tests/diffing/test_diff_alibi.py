"""ALiBi in real code: transformers' Bloom and MPT attention copied at test time with one line
edited (the slopes reversed across the heads, the bias's sign, the bias on the query axis, the
scale left out), each DIFFERS at ``biased`` with the catalogue's bug and fix; the unedited
copies MATCH, Bloom's bias (slope·j) compared up to a constant per query row, with its note.
Each output equals a trace of ``--alibi`` with the module's weights (random init from config
objects, nothing downloaded)."""

from __future__ import annotations

import importlib.util
import inspect
import math
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from attntrace import AttentionConfig, trace_attention  # noqa: E402
from attntrace.diffing.align import SHIFT_NOTE  # noqa: E402
from attntrace.diffing.diff_report import diff  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.e2e]  # transformers classes diffed, ~1 s each

H, HEADS = 32, 4
CONFIG = AttentionConfig(batch=2, seq=5, hidden=H, heads=HEADS)


@dataclass(frozen=True)
class Edit:
    id: str
    old: str
    new: str
    bug: str


FAMILIES: dict[str, tuple[str, list[Edit]]] = {
    "bloom": (
        "BloomAttention",
        [
            Edit(
                "slopes-reversed", "return slopes", "return slopes.flip(0)", "alibi-slopes-reversed"
            ),
            Edit(
                "sign",
                "alibi = slopes[..., None] * arange_tensor",
                "alibi = -slopes[..., None] * arange_tensor",
                "alibi-sign",
            ),
            Edit(  # (B·h, S, 1): slope·i, constant along each query row: softmax ignores it
                "query-axis",
                "attention_scores = alibi.baddbmm(",
                "attention_scores = alibi.transpose(1, 2).expand(-1, -1, q_length).baddbmm(",
                "alibi-missing",
            ),
            Edit("unscaled", "alpha=self.inv_norm_factor,", "alpha=1.0,", "unscaled"),
        ],
    ),
    "mpt": (
        "MptAttention",
        [
            Edit(
                "slopes-reversed",
                "alibi = alibi * slopes",
                "alibi = alibi * slopes.flip(1)",
                "alibi-slopes-reversed",
            ),
            Edit(
                "transposed",
                "attention_scores = attention_scores + position_bias",
                "attention_scores = attention_scores + position_bias.transpose(-1, -2)",
                "alibi-missing",
            ),
            Edit(
                "sign",
                "attention_scores = attention_scores + position_bias",
                "attention_scores = attention_scores - position_bias",
                "alibi-sign",
            ),
        ],
    ),
}
CASES = [(f, e) for f, (_, edits) in FAMILIES.items() for e in edits]


def _copy(family: str, edit: Edit | None, tmp_path: Path) -> Any:
    """The family's attention class from a copy of its modeling file (one line edited, at its
    only occurrence), built as ``attntrace diff transformers:<Class>`` builds it."""
    from attntrace.capturing.library import build

    name = FAMILIES[family][0]
    source = importlib.import_module(f"transformers.models.{family}.modeling_{family}")
    lines = inspect.getsource(source).splitlines()
    if edit is not None:
        found = [i for i, line in enumerate(lines) if line.strip() == edit.old]
        assert len(found) == 1, (edit.old, len(found))
        lines[found[0]] = lines[found[0]].replace(edit.old, edit.new)
    tag = "correct" if edit is None else re.sub(r"\W", "_", edit.id)
    path = tmp_path / f"{family}_{tag}.py"
    path.write_text("\n".join(lines) + "\n")
    spec = importlib.util.spec_from_file_location(
        f"transformers.models.{family}._alibi_{family}_{tag}", path
    )
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its relative imports resolve in its family's package
    spec.loader.exec_module(module)
    torch.manual_seed(0)
    return build(getattr(module, name), {}, {"hidden": H, "heads": HEADS})


@pytest.mark.parametrize(("family", "edit"), CASES, ids=[f"{f}-{e.id}" for f, e in CASES])
def test_a_planted_alibi_bug_differs_at_biased_with_its_fix(
    family: str, edit: Edit, tmp_path: Path
) -> None:
    report = diff(_copy(family, edit, tmp_path), CONFIG)
    assert report.verdict == "differs", (report.verdict, report.diagnosis, report.undecided)
    assert report.first is not None
    assert report.first.step.name == "biased"
    d = report.diagnosis
    assert d is not None
    assert d.bug == edit.bug, (d.name, d.step, d.location)
    assert "slope_h * (j - i)" in d.fix or not edit.bug.startswith("alibi")


@pytest.mark.parametrize("family", list(FAMILIES))
def test_the_correct_copy_matches_with_the_bias_up_to_a_row_constant(
    family: str, tmp_path: Path
) -> None:
    report = diff(_copy(family, None, tmp_path), CONFIG)
    assert report.verdict == "match", (report.diagnosis, report.undecided)
    rows = {r.step.name: r for r in report.rows}
    assert rows["biased"].status == "match"
    assert rows["biased"].shifted  # Bloom's slope·j, MPT's slope·(j - N + 1)
    assert rows["weights"].status == "match"
    assert not rows["weights"].shifted
    assert SHIFT_NOTE.format(steps="biased") in report.notes
    assert any(str(r) == f"ALiBi: from {r.source} (True)" for r in report.read)


def _bloom_output(x: Any, heads: int) -> tuple[Any, dict[str, np.ndarray]]:
    """BloomAttention's output (causal) and its weights in attntrace's names."""
    from transformers import BloomConfig
    from transformers.models.bloom.modeling_bloom import BloomAttention, build_alibi_tensor

    B, S, _ = x.shape
    d = H // heads
    attn = BloomAttention(BloomConfig(hidden_size=H, n_head=heads), layer_idx=0).double().eval()
    w = attn.query_key_value.weight.detach().view(heads, 3, d, H)  # per head: q, k, v rows
    b = attn.query_key_value.bias.detach().view(heads, 3, d)
    params = {f"w_{c}": w[:, i].reshape(H, H).numpy() for i, c in enumerate("qkv")}
    params |= {f"b_{c}": b[:, i].reshape(H).numpy() for i, c in enumerate("qkv")}
    params |= {"w_o": attn.dense.weight.detach().numpy(), "b_o": attn.dense.bias.detach().numpy()}
    alibi = build_alibi_tensor(torch.ones(B, S), heads, torch.float64)  # (B·h, 1, S)
    mask = torch.full((S, S), -math.inf, dtype=torch.float64).triu(1)[None, None]
    with torch.no_grad():
        out, _ = attn(x, torch.zeros_like(x), alibi, mask)
    return out, params


@pytest.mark.parametrize("heads", [4, 8])  # 8: slopes of float32 (2^-1 … 2^-8) stay exact
def test_run_alibi_equals_bloom_attention(heads: int) -> None:
    x = torch.randn(2, 6, H, dtype=torch.float64)
    out, params = _bloom_output(x, heads)
    config = AttentionConfig(
        batch=2, seq=6, hidden=H, heads=heads, alibi=True, causal=True, dtype="float64"
    )
    trace = trace_attention(config, tensors={"x": x.numpy(), **params})
    # Bloom's softmax runs in float32 (dtype=torch.float32), whatever the module's dtype
    np.testing.assert_allclose(trace["output"].value, out.numpy(), rtol=1e-6, atol=1e-7)


def test_run_alibi_equals_mpt_attention() -> None:
    from transformers import MptConfig
    from transformers.models.mpt.modeling_mpt import MptAttention, build_mpt_alibi_tensor

    S = 6
    attn = MptAttention(MptConfig(d_model=H, n_heads=HEADS), layer_idx=0).double().eval()
    x = torch.randn(2, S, H, dtype=torch.float64)
    bias = build_mpt_alibi_tensor(HEADS, S).double()  # (h, 1, S)
    hidden = torch.ones(S, S, dtype=torch.bool).triu(1)[None, None]  # True: masked
    with torch.no_grad():
        out, weights = attn(x, bias, attention_mask=hidden)
    w_q, w_k, w_v = (w.detach().numpy() for w in attn.Wqkv.weight.chunk(3, 0))
    tensors = {"x": x.numpy(), "w_q": w_q, "w_k": w_k, "w_v": w_v}
    tensors |= {"w_o": attn.out_proj.weight.detach().numpy()}
    config = AttentionConfig(
        batch=2, seq=S, hidden=H, heads=HEADS, bias=False, alibi=True, causal=True, dtype="float64"
    )
    trace = trace_attention(config, tensors=tensors)
    # MPT's softmax runs in float32 (.float()), whatever the module's dtype
    np.testing.assert_allclose(trace["weights"].value, weights.numpy(), rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(trace["output"].value, out.numpy(), rtol=1e-6, atol=1e-7)


def test_falcon_adds_the_bias_before_the_scale_alibi_scaled() -> None:
    """FalconAttention(alibi=True) adds the alibi to q·kᵀ and scales the sum: the slopes are
    scaled too. attntrace's alibi_scaled equals it; plain --alibi does not."""
    from transformers import FalconConfig
    from transformers.models.falcon.modeling_falcon import FalconAttention, build_alibi_tensor

    S, d = 6, H // HEADS
    cfg = FalconConfig(
        hidden_size=H, num_attention_heads=HEADS, alibi=True, new_decoder_architecture=False,
        multi_query=False, bias=True,
    )  # fmt: skip
    cfg._attn_implementation = "eager"
    attn = FalconAttention(cfg, layer_idx=0).double().eval()
    x = torch.randn(2, S, H, dtype=torch.float64)
    w = attn.query_key_value.weight.detach().view(HEADS, 3, d, H)
    b = attn.query_key_value.bias.detach().view(HEADS, 3, d)
    tensors = {f"w_{c}": w[:, i].reshape(H, H).numpy() for i, c in enumerate("qkv")}
    tensors |= {f"b_{c}": b[:, i].reshape(H).numpy() for i, c in enumerate("qkv")}
    tensors |= {"w_o": attn.dense.weight.detach().numpy(), "b_o": attn.dense.bias.detach().numpy()}
    mask = torch.full((S, S), -math.inf, dtype=torch.float64).triu(1)[None, None]
    with torch.no_grad():
        out, _ = attn(x, build_alibi_tensor(torch.ones(2, S), HEADS, torch.float64), mask)
    fields = {"batch": 2, "seq": S, "hidden": H, "heads": HEADS, "causal": True}
    config = AttentionConfig(**fields, alibi=True, alibi_scaled=True, dtype="float64")
    got = trace_attention(config, tensors={"x": x.numpy(), **tensors})["output"].value
    np.testing.assert_allclose(got, out.numpy(), rtol=1e-10, atol=1e-12)
    plain = AttentionConfig(**fields, alibi=True, dtype="float64")
    other = trace_attention(plain, tensors={"x": x.numpy(), **tensors})["output"].value
    assert np.abs(other - out.numpy()).max() > 1e-4


def test_slopes_for_twelve_heads_are_transformers_build_alibi_tensor() -> None:
    from transformers.models.bloom.modeling_bloom import build_alibi_tensor
    from transformers.models.mpt.modeling_mpt import build_mpt_alibi_tensor

    from attntrace.engine.relative import alibi_slopes

    for heads in (12, 6, 20, 32):
        bloom = build_alibi_tensor(torch.ones(1, 2), heads, torch.float64)[:, 0, 1]  # (h,)
        mpt = build_mpt_alibi_tensor(heads, 2)[:, 0, 1] - build_mpt_alibi_tensor(heads, 2)[:, 0, 0]
        np.testing.assert_allclose(alibi_slopes(heads), bloom.numpy(), rtol=1e-6)  # float32 pow
        np.testing.assert_allclose(alibi_slopes(heads), mpt.double().numpy(), rtol=1e-6)
