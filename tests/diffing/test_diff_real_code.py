"""attntrace diff on attention code people run, built from the installed packages: torch's own
modules, in train mode and eval mode, batched and unbatched; code that stays random is refused;
the user's own exceptions are reported as theirs (message and file:line)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from attntrace import AttentionConfig
from attntrace.diffing.diff_report import diff
from attntrace.diffing.user_side import UserCodeError
from attntrace.errors import ConfigError

torch = pytest.importorskip("torch")


@pytest.mark.parametrize("batch_first", [True, False])
@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("batch", [2, None])
def test_multihead_attention_with_dropout_in_train_mode_matches(
    batch_first: bool, bias: bool, batch: int | None
) -> None:
    torch.manual_seed(0)
    mha = torch.nn.MultiheadAttention(32, 4, dropout=0.1, bias=bias, batch_first=batch_first)
    assert mha.training
    report = diff(mha, AttentionConfig(batch=batch, seq=5, hidden=32, heads=4))
    assert report.ok, report.diagnosis
    assert report.weights == "nn.MultiheadAttention"
    assert report.notes == ("run in eval mode (dropout off); it was in train mode",)
    assert report.to_dict()["notes"] == list(report.notes)
    out = next(r for r in report.rows if r.step.name == "output")
    assert out.user is not None
    assert out.user.shape == ((batch, 5, 32) if batch else (5, 32))


def test_multihead_attention_with_kdim_is_refused_as_cross_attention() -> None:
    mha = torch.nn.MultiheadAttention(32, 4, kdim=16, vdim=16)
    with pytest.raises(ConfigError, match=r"\(kdim/vdim\): cross-attention; diff runs self-"):
        diff(mha, AttentionConfig(batch=2, seq=5, hidden=32, heads=4))


def test_transformer_encoder_layer_self_attention_in_train_mode_matches() -> None:
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(d_model=32, nhead=4, dropout=0.1, batch_first=True)
    report = diff(layer.self_attn, AttentionConfig(batch=2, seq=6, hidden=32, heads=4))
    assert report.ok
    layer.eval()
    again = diff(layer.self_attn, AttentionConfig(batch=2, seq=6, hidden=32, heads=4))
    assert again.ok
    assert again.notes == ()


class Noisy(torch.nn.Module):
    """Dropout that ignores eval mode (F.dropout with training=True)."""

    def __init__(self) -> None:
        super().__init__()
        self.q_proj, self.k_proj = torch.nn.Linear(8, 8), torch.nn.Linear(8, 8)
        self.v_proj, self.o_proj = torch.nn.Linear(8, 8), torch.nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q, k, v = self.q_proj(x), self.k_proj(x), self.v_proj(x)
        w = torch.softmax(q @ k.transpose(-2, -1) / 8**0.5, dim=-1)
        w = torch.nn.functional.dropout(w, 0.5, training=True)
        return self.o_proj(w @ v)


def test_code_still_random_in_eval_mode_is_refused_with_that_reason() -> None:
    with pytest.raises(ConfigError, match=r"Noisy \(nn.Module\) is not deterministic: two calls"):
        diff(Noisy(), AttentionConfig(batch=2, seq=4, hidden=8, heads=1))


def test_the_users_exception_in_forward_names_their_line(tmp_path: Path) -> None:
    class Broken(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.qkv, self.proj = torch.nn.Linear(8, 24), torch.nn.Linear(8, 8)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            raise ValueError("my own message")

    with pytest.raises(UserCodeError, match=r"ValueError: my own message at test_diff_real_code"):
        diff(Broken(), AttentionConfig(batch=2, seq=4, hidden=8, heads=2))


class Wrapped(torch.nn.Module):
    """torch's own attention inside the user's module: followed, as when it is named."""

    def __init__(self, roll: bool = False) -> None:
        super().__init__()
        self.mha = torch.nn.MultiheadAttention(32, 4, batch_first=True)
        self.roll = roll

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        key = x.roll(1, dims=1) if self.roll else x
        out, _ = self.mha(x, key, x, need_weights=False)
        return out


def test_torch_attention_held_by_the_user_is_followed() -> None:
    torch.manual_seed(0)
    config = AttentionConfig(batch=2, seq=5, hidden=32, heads=4)
    from attntrace.diffing.layer import as_layer

    assert as_layer(Wrapped()).hints == {"heads": 4}  # the attention submodule's own
    report = diff(Wrapped(), config)
    assert report.ok
    seen = {r.step.name for r in report.rows if r.status == "match" and r.user is not None}
    assert {"q_proj", "k_proj", "v_proj", "q", "context", "output"} <= seen
    report = diff(Wrapped(roll=True), config)  # keys of the shifted tokens: k differs first
    assert not report.ok
    first = report.first
    assert first is not None
    assert first.step.name == "k_proj"
    assert first.user is not None
    assert first.user.location.startswith("functional.py:")
    assert first.user.role == "k_proj"  # the user's k, not the v that holds the same numbers
    d = report.diagnosis
    assert d is not None
    assert d.bug is None, d.name  # no swap of k and v: the keys come from other tokens
    assert d.name.startswith("no known bug reproduces it"), d.name


CORPUS = Path(__file__).parents[1] / "data" / "real_code"
NANOGPT = CORPUS / "nanogpt_attention.py"


def _nanogpt(path: Path, flash: bool) -> Any:
    import importlib.util
    import sys

    spec = importlib.util.spec_from_file_location(f"_nanogpt_{path.stem}", path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    torch.manual_seed(0)
    config = module.GPTConfig(block_size=16, n_head=4, n_embd=32, dropout=0.1)
    attn = module.CausalSelfAttention(config)
    if not flash:  # the manual path, as nanoGPT takes it on a torch without SDPA
        attn.flash = False
        attn.register_buffer("bias", torch.tril(torch.ones(16, 16)).view(1, 1, 16, 16))
    return attn


NANO_CONFIG = AttentionConfig(batch=2, seq=6, hidden=32, heads=4, causal=True)


@pytest.mark.parametrize("flash", [True, False])
def test_nanogpt_both_paths_match_in_train_mode(flash: bool) -> None:
    report = diff(_nanogpt(NANOGPT, flash), NANO_CONFIG)
    assert report.ok, report.diagnosis
    assert report.weights == "c_attn/c_proj (GPT-2 Conv1D, nanoGPT)"
    matched = {r.step.name for r in report.rows if r.status == "match" and r.user is not None}
    inside = {"q", "k", "v", "context", "merged", "output"}
    assert inside | ({"scaled", "masked", "weights"} if not flash else set()) <= matched


MERGE_COMMENT = " # re-assemble all head outputs side by side"

#: nanoGPT's lines, one edited each: (line as written, edit, bug, path).
NANO_BUGS = [
    (
        "att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))",
        "att = (q @ k.transpose(-2, -1)) * (1.0 / k.size(-1))",
        "scaled-1/d",
        False,
    ),
    ("att = F.softmax(att, dim=-1)", "att = F.softmax(att, dim=-2)", "softmax-axis-2", False),
    (
        "q, k, v  = self.c_attn(x).split(self.n_embd, dim=2)",
        "k, q, v  = self.c_attn(x).split(self.n_embd, dim=2)",
        "swapped-qk",
        True,
    ),
    (
        "y = y.transpose(1, 2).contiguous().view(B, T, C)" + MERGE_COMMENT,
        "y = y.contiguous().view(B, T, C)" + MERGE_COMMENT,
        "merge-no-transpose",
        True,
    ),
    (
        "att = att.masked_fill(self.bias[:,:,:T,:T] == 0, float('-inf'))",
        "att = att.masked_fill(self.bias[:,:,:T,:T] == 1, float('-inf'))",
        "mask-inverted",
        False,
    ),
    (
        "k = k.view(B, T, self.n_head, C // self.n_head).transpose(1, 2) # (B, nh, T, hs)",
        "k = k.reshape(B, self.n_head, T, C // self.n_head) # (B, nh, T, hs)",
        "split-no-transpose-k",
        False,
    ),
]


NANO_BUGS.append(
    (
        "y = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=None, "
        "dropout_p=self.dropout if self.training else 0, is_causal=True)",
        "y = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=None, "
        "dropout_p=self.dropout if self.training else 0, is_causal=False)",
        "mask-missing",
        True,
    )
)


@pytest.mark.slow
@pytest.mark.parametrize(("old", "new", "bug", "flash"), NANO_BUGS, ids=[b[2] for b in NANO_BUGS])
def test_a_bug_planted_in_nanogpt_is_named_at_its_line(
    tmp_path: Path, old: str, new: str, bug: str, flash: bool
) -> None:
    lines = NANOGPT.read_text().splitlines()
    found = [i for i, line in enumerate(lines) if line.strip() == old]
    assert len(found) == 1, old
    lines[found[0]] = lines[found[0]].replace(old, new)
    path = tmp_path / f"nanogpt_{bug.replace('-', '_').replace('/', '_')}.py"
    path.write_text("\n".join(lines) + "\n")
    report = diff(_nanogpt(path, flash), NANO_CONFIG)
    d = report.diagnosis
    assert d is not None
    assert d.bug == bug, (d.name, d.step, d.location)
    assert d.location == f"{path.name}:{found[0] + 1}", (d.location, d.source)


@pytest.mark.slow
@pytest.mark.parametrize("kv_heads", [None, 2])
def test_x_transformers_attention_matches_with_its_steps_seen(kv_heads: int | None) -> None:
    pytest.importorskip("x_transformers")
    from x_transformers import Attention

    torch.manual_seed(0)
    attn = Attention(dim=32, heads=4, kv_heads=kv_heads, dim_head=8, causal=True, dropout=0.1)
    report = diff(attn, AttentionConfig(batch=2, seq=5, hidden=32, heads=4, causal=True))
    assert report.ok, report.diagnosis
    assert report.weights == "to_q/to_kv/to_out (x-transformers)"
    seen = {r.step.name for r in report.rows if r.status == "match" and r.user is not None}
    assert {"q", "k", "v", "scores", "masked", "weights", "context", "output"} <= seen
    tiled = [n for n in report.notes if n.startswith("compared with its own layout: x-transf")]
    assert len(tiled) == (1 if kv_heads else 0)


VIT = CORPUS / "vit_pytorch_attention.py"

#: vit-pytorch's lines, one edited each: (line as written, edit, bug, the line it is named at).
VIT_BUGS = [
    (
        "dots = torch.matmul(q, k.transpose(-1, -2)) * self.scale",
        "dots = torch.matmul(q, k.transpose(-1, -2))",
        "unscaled",
        "dots = torch.matmul(q, k.transpose(-1, -2))",
    ),
    (
        "self.attend = nn.Softmax(dim = -1)",
        "self.attend = nn.Softmax(dim = -2)",
        "softmax-axis-2",
        "attn = self.attend(dots)",
    ),
]


def _vit(path: Path) -> Any:
    import importlib.util
    import sys

    spec = importlib.util.spec_from_file_location(f"_vit_{path.stem}", path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    torch.manual_seed(0)
    return module.Attention(dim=32, heads=4, dim_head=8, dropout=0.1)


def test_vit_pytorch_attention_matches_after_its_own_norm() -> None:
    pytest.importorskip("einops")
    report = diff(_vit(VIT), AttentionConfig(batch=2, seq=5, hidden=32, heads=4))
    assert report.ok, report.diagnosis
    assert "the reference starts after the module's own norm (x = self.norm(x))" in report.notes
    assert report.rows[0].user is not None
    assert report.rows[0].user.location == "(normed)"


@pytest.mark.parametrize(("old", "new", "bug", "blamed"), VIT_BUGS, ids=[b[2] for b in VIT_BUGS])
def test_a_bug_planted_in_vit_pytorch_is_named_at_its_line(
    tmp_path: Path, old: str, new: str, bug: str, blamed: str
) -> None:
    pytest.importorskip("einops")
    lines = VIT.read_text().splitlines()
    found = [i for i, line in enumerate(lines) if line.strip() == old]
    assert len(found) == 1, old
    lines[found[0]] = lines[found[0]].replace(old, new)
    path = tmp_path / f"vit_{bug.replace('-', '_')}.py"
    path.write_text("\n".join(lines) + "\n")
    report = diff(_vit(path), AttentionConfig(batch=2, seq=5, hidden=32, heads=4))
    d = report.diagnosis
    assert d is not None
    assert d.bug == bug, (d.name, d.step, d.location)
    at = [i + 1 for i, line in enumerate(lines) if line.strip() == blamed]
    assert d.location == f"{path.name}:{at[0]}", (d.location, d.source)
