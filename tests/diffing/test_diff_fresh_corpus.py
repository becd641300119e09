"""A second real-code corpus, held as users hold it: library attention classes nobody here
wrote (transformers classes absent from the first corpus, x-transformers, torch's decoder
layer, a blog's einops attention) inside the user's own block, under the user's attribute
names, with their norm, output ``nn.Linear`` and residual around them, called with the masks
and positions their parent model passes. Correct code is MATCH, or CANNOT TELL with the
reason (attention sinks, clamped q/k/v, cross-attention); a one-line bug planted in a copy of
the class's own file (or the blog's) is DIFFERS, named at the edited line.

Every case builds a transformers class: the whole file is in the e2e tier."""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from attntrace import AttentionConfig
from attntrace.diffing.diff_report import diff

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

pytestmark = [pytest.mark.slow, pytest.mark.e2e]

H, HEADS = 64, 4


def _family(name: str) -> Any:
    return importlib.import_module(f"transformers.models.{name}.modeling_{name}")


def _config(family: str, cls: str, **fields: Any) -> Any:
    module = importlib.import_module(f"transformers.models.{family}.configuration_{family}")
    config = getattr(module, cls)(**fields)
    config._attn_implementation = "eager"
    return config


class RopeBlock(torch.nn.Module):  # type: ignore[misc]
    """A decoder block as the user writes it: their LayerNorm, the class under the name
    ``token_mixer`` called with the rotary (cos, sin) and an additive causal mask, their
    residual."""

    def __init__(self, modeling: Any, prefix: str, config: Any) -> None:
        super().__init__()
        self.pre_norm = torch.nn.LayerNorm(H)
        self.token_mixer = getattr(modeling, f"{prefix}Attention")(config, layer_idx=0)
        self.rotary = getattr(modeling, f"{prefix}RotaryEmbedding")(config)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, S, _ = x.shape
        tables = self.rotary(x, torch.arange(S)[None].expand(B, S))  # (B, S, d) each
        low = torch.finfo(x.dtype).min
        mask = torch.full((S, S), low).triu(1)[None, None].expand(B, 1, S, S)  # (B, 1, S, S)
        out = self.token_mixer(self.pre_norm(x), position_embeddings=tables, attention_mask=mask)
        return x + out[0]  # type: ignore[no-any-return]


class EncoderBlock(torch.nn.Module):  # type: ignore[misc]
    """An encoder (or vision) block: the user's norm, the class as ``self_attention`` called
    on the hidden states alone, the user's output ``nn.Linear`` named ``wo`` when the class
    has none, a residual."""

    def __init__(self, attention: Any, out: bool = False) -> None:
        super().__init__()
        self.ln_1 = torch.nn.LayerNorm(H)
        self.self_attention = attention
        self.wo = torch.nn.Linear(H, H) if out else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.self_attention(self.ln_1(x))
        y = y[0] if isinstance(y, tuple) else y
        return x + (y if self.wo is None else self.wo(y))  # type: ignore[no-any-return]


DECODER = {  # family -> (class prefix, config class, config fields)
    "olmo": ("Olmo", "OlmoConfig", {}),
    "helium": ("Helium", "HeliumConfig", {"num_key_value_heads": 2, "head_dim": 16}),
    "ernie4_5": ("Ernie4_5", "Ernie4_5Config", {"head_dim": 16}),
    "apertus": ("Apertus", "ApertusConfig", {}),
    "seed_oss": ("SeedOss", "SeedOssConfig", {"head_dim": 16, "num_key_value_heads": 2}),
    "exaone4": ("Exaone4", "Exaone4Config", {"num_key_value_heads": 2}),
    "cohere2": ("Cohere2", "Cohere2Config", {}),
}


def _decoder(family: str, modeling: Any = None, **more: Any) -> Any:
    prefix, config_class, fields = DECODER[family]
    config = _config(
        family,
        config_class,
        hidden_size=H,
        num_attention_heads=HEADS,
        num_hidden_layers=1,
        **{**fields, **more},
    )
    return RopeBlock(modeling or _family(family), prefix, config)


def _encoder(family: str, modeling: Any = None) -> Any:
    sizes = {"num_hidden_layers": 1, "intermediate_size": 128, "hidden_size": H}
    modeling = modeling or _family(family)
    if family == "big_bird":
        config = _config(
            family, "BigBirdConfig", num_attention_heads=HEADS, attention_type="original_full",
            **sizes,
        )  # fmt: skip
        return EncoderBlock(modeling.BigBirdSelfAttention(config), out=True)
    if family == "yolos":
        config = _config(family, "YolosConfig", num_attention_heads=HEADS, **sizes)
        return EncoderBlock(modeling.YolosSelfAttention(config), out=True)
    if family == "mllama":
        config = _config(
            family, "MllamaVisionConfig", hidden_size=H, attention_heads=HEADS, num_hidden_layers=1
        )
        return EncoderBlock(modeling.MllamaVisionAttention(config))
    if family == "umt5":
        config = _config(family, "UMT5Config", d_model=H, num_heads=HEADS, d_kv=16, d_ff=128)
        return EncoderBlock(modeling.UMT5Attention(config, has_relative_attention_bias=True))
    vision = {"siglip2": "Siglip2VisionConfig", "idefics2": "Idefics2VisionConfig"}[family]
    config = _config(family, vision, num_attention_heads=HEADS, **sizes)
    attention = {"siglip2": "Siglip2Attention", "idefics2": "Idefics2VisionAttention"}[family]
    return EncoderBlock(getattr(modeling, attention)(config))


EINOPS_BLOG = """
import torch
from torch import nn
from einops import rearrange


class MultiHeadSelfAttention(nn.Module):
    def __init__(self, dim, heads=8):
        super().__init__()
        self.heads = heads
        self.scale = (dim // heads) ** -0.5
        self.to_qkv = nn.Linear(dim, dim * 3, bias=False)
        self.to_out = nn.Linear(dim, dim)

    def forward(self, x):
        qkv = self.to_qkv(x)
        q, k, v = rearrange(qkv, "b n (three h d) -> three b h n d", three=3, h=self.heads)
        dots = torch.einsum("bhid,bhjd->bhij", q, k) * self.scale
        attn = dots.softmax(dim=-1)
        out = torch.einsum("bhij,bhjd->bhid", attn, v)
        out = rearrange(out, "b h n d -> b n (h d)")
        return self.to_out(out)


class Block(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.norm = nn.LayerNorm(dim)
        self.attn = MultiHeadSelfAttention(dim, heads)

    def forward(self, x):
        return x + self.attn(self.norm(x))
"""


def _load(path: Path, name: str) -> Any:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # a transformers copy's relative imports resolve in its package
    spec.loader.exec_module(module)
    return module


def _einops(tmp_path: Path, source: str = EINOPS_BLOG) -> Any:
    pytest.importorskip("einops")
    path = tmp_path / "blog_attention.py"
    path.write_text(source)
    return _load(path, f"_blog_{abs(hash(source))}").Block(H, HEADS)


def _x_transformers() -> Any:
    xt = pytest.importorskip("x_transformers")

    class Block(torch.nn.Module):  # type: ignore[misc]
        def __init__(self) -> None:
            super().__init__()
            self.norm1 = torch.nn.LayerNorm(H)
            self.mixing = xt.Attention(dim=H, heads=HEADS, dim_head=16, causal=True)
            self.proj_after = torch.nn.Linear(H, H)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x + self.proj_after(self.mixing(self.norm1(x)))  # type: ignore[no-any-return]

    return Block()


class DecoderSelf(torch.nn.Module):  # type: ignore[misc]
    """torch's decoder layer held whole; its causal self-attention called alone."""

    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.TransformerDecoderLayer(H, HEADS, batch_first=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        mask = torch.nn.Transformer.generate_square_subsequent_mask(x.shape[1])  # (S, S)
        return self.layer.self_attn(x, x, x, attn_mask=mask, need_weights=False)[0]  # type: ignore[no-any-return]


class DecoderCross(torch.nn.Module):  # type: ignore[misc]
    """torch's decoder layer's cross-attention, its keys and values from a memory of 7."""

    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.TransformerDecoderLayer(H, HEADS, batch_first=True)
        self.memory = torch.nn.Parameter(torch.randn(1, 7, H))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        memory = self.memory.expand(x.shape[0], -1, -1)  # (B, 7, H)
        return self.layer.multihead_attn(x, memory, memory, need_weights=False)[0]  # type: ignore[no-any-return]


def _gpt_oss_config() -> Any:
    sizes = {"hidden_size": H, "num_attention_heads": HEADS, "num_hidden_layers": 1}
    return _config("gpt_oss", "GptOssConfig", num_key_value_heads=2, head_dim=16, **sizes)


class EsmBlock(torch.nn.Module):  # type: ignore[misc]
    """ESM's rotary self-attention: the user makes the (cos, sin) with ESM's own rotary
    module and hands them in; an output Linear ``wo`` after it."""

    def __init__(self) -> None:
        super().__init__()
        esm = _family("esm")
        config = _config(
            "esm", "EsmConfig", vocab_size=33, hidden_size=H, num_attention_heads=HEADS,
            num_hidden_layers=1, intermediate_size=128, position_embedding_type="rotary",
        )  # fmt: skip
        self.ln = torch.nn.LayerNorm(H)
        self.att = esm.EsmSelfAttention(config)
        self.rot = esm.EsmRotaryEmbedding(config=config)
        self.wo = torch.nn.Linear(H, H)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        tables = self.rot(x, torch.arange(x.shape[1])[None])  # (1, S, d) each
        return x + self.wo(self.att(self.ln(x), position_embeddings=tables)[0])  # type: ignore[no-any-return]


class PixtralBlock(torch.nn.Module):  # type: ignore[misc]
    """Pixtral's vision attention with its 2-D (axial) rotary tables of the patches."""

    def __init__(self) -> None:
        super().__init__()
        pixtral = _family("pixtral")
        config = _config(
            "pixtral", "PixtralVisionConfig", hidden_size=H, num_attention_heads=HEADS,
            num_hidden_layers=1, intermediate_size=128, image_size=64, patch_size=16,
        )  # fmt: skip
        self.norm = torch.nn.RMSNorm(H)
        self.attention = pixtral.PixtralAttention(config)
        self.rope = pixtral.PixtralVisionRotaryEmbedding(config)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        tables = self.rope(x, torch.arange(x.shape[1]))  # the patches' ids in its grid
        return x + self.attention(self.norm(x), position_embeddings=tables)[0]  # type: ignore[no-any-return]


class Dinov2Block(torch.nn.Module):  # type: ignore[misc]
    """DINOv2's attention (with its output dense) between the user's norm and layer scale."""

    def __init__(self) -> None:
        super().__init__()
        config = _config(
            "dinov2", "Dinov2Config", hidden_size=H, num_attention_heads=HEADS,
            num_hidden_layers=1, mlp_ratio=2,
        )  # fmt: skip
        self.norm1 = torch.nn.LayerNorm(H)
        self.attention = _family("dinov2").Dinov2Attention(config)
        self.layer_scale1 = torch.nn.Parameter(torch.full((H,), 0.5))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.attention(self.norm1(x))
        return x + self.layer_scale1 * (out[0] if isinstance(out, tuple) else out)  # type: ignore[no-any-return]


class Stack(torch.nn.Module):  # type: ignore[misc]
    """The user's model: an nn.ModuleList of their blocks, a final norm."""

    def __init__(self) -> None:
        super().__init__()
        self.layers = torch.nn.ModuleList([_decoder("olmo")])
        self.final_norm = torch.nn.LayerNorm(H)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = layer(x)
        return self.final_norm(x)  # type: ignore[no-any-return]


def _gemma2() -> Any:
    config = _config(
        "gemma2", "Gemma2Config", hidden_size=H, num_attention_heads=HEADS, num_hidden_layers=1,
        num_key_value_heads=2, head_dim=16, query_pre_attn_scalar=16,
    )  # fmt: skip
    return RopeBlock(_family("gemma2"), "Gemma2", config)


def _t5() -> Any:
    config = _config("t5", "T5Config", d_model=H, num_heads=HEADS, d_kv=16, d_ff=128)
    return EncoderBlock(_family("t5").T5Attention(config, has_relative_attention_bias=True))


def _mixtral_window() -> Any:
    config = _config(
        "mixtral", "MixtralConfig", hidden_size=H, num_attention_heads=HEADS,
        num_hidden_layers=1, num_key_value_heads=2, sliding_window=3,
    )  # fmt: skip
    return RopeBlock(_family("mixtral"), "Mixtral", config)  # the user's mask: causal only


class RotaryXT(torch.nn.Module):  # type: ignore[misc]
    """x-transformers' Attention given the rotary tables of its own RotaryEmbedding by the
    user's block (``rotary_pos_emb=``), as its Decoder does."""

    def __init__(self) -> None:
        super().__init__()
        xt = pytest.importorskip("x_transformers")
        from x_transformers.x_transformers import RotaryEmbedding

        self.attn = xt.Attention(dim=H, heads=HEADS, dim_head=16, causal=True)
        self.rotary = RotaryEmbedding(16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        tables = self.rotary.forward_from_seq_len(x.shape[1])
        return self.attn(x, rotary_pos_emb=tables)  # type: ignore[no-any-return]


class PaddedBigBird(torch.nn.Module):  # type: ignore[misc]
    """BigBird's full attention given a padding mask the user's block makes: the last two
    keys of the second sequence are padding."""

    def __init__(self) -> None:
        super().__init__()
        self.attn = _encoder("big_bird").self_attention
        self.dense = torch.nn.Linear(H, H)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, S, _ = x.shape
        keep = torch.ones(B, S)
        keep[-1, -2:] = 0
        mask = (1.0 - keep)[:, None, None, :] * torch.finfo(x.dtype).min  # (B, 1, 1, S)
        return self.dense(self.attn(x, attention_mask=mask)[0])  # type: ignore[no-any-return]


class OwnEinops(torch.nn.Module):  # type: ignore[misc]
    """A user's einops attention with their names ``qkv`` and ``out`` and a boolean causal
    mask of their own."""

    def __init__(self) -> None:
        super().__init__()
        self.qkv, self.out = torch.nn.Linear(H, 3 * H), torch.nn.Linear(H, H)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        from einops import rearrange

        q, k, v = rearrange(self.qkv(x), "b n (three h d) -> three b h n d", three=3, h=HEADS)
        s = torch.einsum("bhid,bhjd->bhij", q, k) / 4.0  # (B, h, S, S)
        n = x.shape[1]
        s = s.masked_fill(torch.ones(n, n, dtype=torch.bool).triu(1), float("-inf"))
        return self.out(rearrange(s.softmax(-1) @ v, "b h n d -> b n (h d)"))  # type: ignore[no-any-return]


CAUSAL = AttentionConfig(batch=2, seq=5, hidden=H, heads=HEADS, causal=True)
PLAIN = AttentionConfig(batch=2, seq=5, hidden=H, heads=HEADS)

#: id -> (the user's module, config, verdict, the words of its reason or note).
CASES: dict[str, tuple[Callable[[Path], Any], AttentionConfig, str, str]] = {
    **{f: (lambda _, f=f: _decoder(f), CAUSAL, "match", "RopeBlock: ") for f in DECODER},
    **{
        f: (lambda _, f=f: _encoder(f), PLAIN, "match", "EncoderBlock: ")
        for f in ("big_bird", "yolos", "mllama", "umt5", "siglip2", "idefics2")
    },
    "olmo-clip_qkv": (lambda _: _decoder("olmo", clip_qkv=0.5), CAUSAL, "cannot tell", "clip_qkv"),
    "gpt_oss-sinks": (
        lambda _: RopeBlock(_family("gpt_oss"), "GptOss", _gpt_oss_config()),
        CAUSAL,
        "cannot tell",
        "attention sinks",
    ),
    "x_transformers-held": (lambda _: _x_transformers(), CAUSAL, "match", "Block: "),
    "einops-blog": (_einops, PLAIN, "match", "Block: MultiHeadSelfAttention at .attn"),
    "torch-decoder-self": (lambda _: DecoderSelf(), CAUSAL, "match", "layer.self_attn"),
    "torch-decoder-cross": (lambda _: DecoderCross(), PLAIN, "cannot tell", "cross-attention"),
    "esm-rotary": (lambda _: EsmBlock(), PLAIN, "cannot tell", "1/√d before its rotation"),
    "pixtral-axial": (lambda _: PixtralBlock(), PLAIN, "cannot tell", "'axial' is not modelled"),
    "dinov2": (lambda _: Dinov2Block(), PLAIN, "match", "Dinov2Attention at .attention"),
    "gemma2-softcap": (lambda _: _gemma2(), CAUSAL, "match", "Gemma2Attention at .token_mixer"),
    "t5-relative-bias": (lambda _: _t5(), PLAIN, "match", "T5Attention at .self_attention"),
    "modulelist-stack": (lambda _: Stack(), CAUSAL, "match", "at .layers.0.token_mixer"),
    "mixtral-window": (lambda _: _mixtral_window(), PLAIN, "differs", "window-dropped"),
    "x_transformers-rotary": (
        lambda _: RotaryXT(),
        CAUSAL,
        "cannot tell",
        "pass --rope --rope-style interleaved",
    ),
    "big_bird-padding": (
        lambda _: PaddedBigBird(),
        PLAIN,
        "cannot tell",
        "kept per batch item 5,3",
    ),
    "einops-qkv-out": (lambda _: OwnEinops(), CAUSAL, "match", ""),
}


@pytest.mark.parametrize("case", list(CASES))
def test_correct_code_held_by_the_user_is_match_or_cannot_tell_with_its_reason(
    case: str, tmp_path: Path
) -> None:
    make, config, verdict, words = CASES[case]
    torch.manual_seed(0)
    report = diff(make(tmp_path), config)
    assert report.verdict == verdict, (report.diagnosis, report.undecided)
    said = {
        "cannot tell": str(report.undecided),
        "differs": str(report.diagnosis and report.diagnosis.bug),
    }.get(verdict, " ".join(report.notes))
    assert words in said, said


# ---- one line planted in a copy of the class's own file -----------------------------------

SOFTMAX = "attn_weights = nn.functional.softmax(attn_weights, dim=-1, dtype=torch.float32)"
SCALED = "attn_weights = torch.matmul(query, key_states.transpose(2, 3)) * scaling"
MASKED = "attn_weights = attn_weights + attention_mask"

#: id -> (family, line as written, edit, bug).
PLANTED: dict[str, tuple[str, str, str, str]] = {
    "olmo-softmax": ("olmo", SOFTMAX, SOFTMAX.replace("-1", "-2"), "softmax-axis-2"),
    "ernie4_5-unscaled": ("ernie4_5", SCALED, SCALED.replace(" * scaling", ""), "unscaled"),
    "apertus-mask-dropped": ("apertus", MASKED, "attn_weights = attn_weights + 0", "mask-missing"),
    "cohere2-softmax": ("cohere2", SOFTMAX, SOFTMAX.replace("-1", "-2"), "softmax-axis-2"),
    "mllama-unscaled": ("mllama", SCALED, SCALED.replace(" * scaling", ""), "unscaled"),
    "siglip2-softmax": ("siglip2", SOFTMAX, SOFTMAX.replace("-1", "-2"), "softmax-axis-2"),
    "big_bird-unscaled": (
        "big_bird",
        "attention_scores = attention_scores / math.sqrt(self.attention_head_size)",
        "attention_scores = attention_scores / self.attention_head_size",
        "scaled-1/d",
    ),
}


def _planted_copy(family: str, old: str, new: str, tmp_path: Path) -> tuple[Any, Path, int]:
    """A copy of the family's modeling file with ``old`` edited to ``new`` (one line), loaded in
    the family's package; and the edited line's number."""
    lines = inspect.getsource(_family(family)).splitlines()
    found = [i for i, line in enumerate(lines) if line.strip().startswith(old)]
    assert len(found) == 1, (family, old, found)
    lines[found[0]] = lines[found[0]].replace(old, new)
    tag = re.sub(r"\W", "_", new)[:24]
    path = tmp_path / f"{family}_planted.py"
    path.write_text("\n".join(lines) + "\n")
    name = f"transformers.models.{family}._planted_{family}_{tag}"
    return _load(path, name), path, found[0] + 1


@pytest.mark.parametrize("case", list(PLANTED))
def test_a_bug_planted_in_the_held_class_is_differs_at_its_line(case: str, tmp_path: Path) -> None:
    family, old, new, bug = PLANTED[case]
    modeling, path, line = _planted_copy(family, old, new, tmp_path)
    torch.manual_seed(0)
    held = _decoder(family, modeling) if family in DECODER else _encoder(family, modeling)
    report = diff(held, CAUSAL if family in DECODER else PLAIN)
    assert report.verdict == "differs", (report.diagnosis, report.undecided)
    d = report.diagnosis
    assert d is not None
    assert d.bug == bug, (d.name, d.step, d.location)
    assert d.location == f"{path.name}:{line}", (d.location, d.source)


BLOG_BUGS = {  # the blog's lines, one edited each: (line, edit, bug or None for any finding)
    "einops-softmax": (
        "attn = dots.softmax(dim=-1)",
        "attn = dots.softmax(dim=-2)",
        "softmax-axis-2",
    ),
    "einops-unscaled": (
        'dots = torch.einsum("bhid,bhjd->bhij", q, k) * self.scale',
        'dots = torch.einsum("bhid,bhjd->bhij", q, k)',
        "unscaled",
    ),
    "einops-split-dh": (
        '"b n (three h d) -> three b h n d"',
        '"b n (three d h) -> three b h n d"',
        None,
    ),
}


@pytest.mark.parametrize("case", list(BLOG_BUGS))
def test_a_bug_planted_in_the_blogs_einops_attention_is_differs_at_its_line(
    case: str, tmp_path: Path
) -> None:
    old, new, bug = BLOG_BUGS[case]
    assert EINOPS_BLOG.count(old) == 1
    source = EINOPS_BLOG.replace(old, new)
    line = next(i for i, s in enumerate(source.splitlines(), 1) if new in s)
    torch.manual_seed(0)
    report = diff(_einops(tmp_path, source), PLAIN)
    assert report.verdict == "differs", (report.diagnosis, report.undecided)
    d = report.diagnosis
    assert d is not None
    if bug is not None:
        assert d.bug == bug, (d.name, d.step, d.location)
    else:
        assert "only the output is visible" not in d.name, d.name  # every op was visible
    assert d.location == f"blog_attention.py:{line}", (d.location, d.source)


@pytest.mark.parametrize(("window", "verdict"), [(5, "match"), (3, "differs")])
def test_the_window_remedy_applied_decides(window: int, verdict: str) -> None:
    """Mixtral's sliding window read from its config, the user's mask causal only: DIFFERS,
    the window dropped; typed, --window decides (a window as long as S: MATCH; the config's
    3: the user's mask lacks the band, DIFFERS at the masked scores)."""
    import dataclasses

    from attntrace.diffing.diff_report import diff_layer
    from attntrace.diffing.layer import as_layer

    torch.manual_seed(0)
    layer = as_layer(_mixtral_window(), seq=5, batch=2)
    options = {**dataclasses.asdict(PLAIN), "window": window}
    report = diff_layer(layer, options, {"window", "batch", "seq", "hidden", "heads"}, None)
    assert report.verdict == verdict, (report.diagnosis, report.undecided)
    if verdict == "differs":
        assert report.diagnosis is not None
        assert report.diagnosis.step == "masked"


def test_a_copy_of_a_matched_tensor_is_no_evidence_of_a_swap(monkeypatch: Any) -> None:
    """ESM's rotary with its CANNOT TELL check off: q_rot differs (q scaled before its
    rotation) and no known bug is named; ``k_embed.to(dtype)``, a copy of the k_rot matched,
    once stood as the evidence of q and k swapped."""
    from attntrace.diffing import library_read

    monkeypatch.setattr(library_read, "_prescaled", lambda attn: None)
    torch.manual_seed(0)
    report = diff(EsmBlock(), PLAIN)
    assert report.verdict == "differs"
    assert report.diagnosis is not None
    assert report.diagnosis.bug is None, report.diagnosis.name
    assert report.diagnosis.step == "q_rot"


def test_the_rope_remedy_applied_matches() -> None:
    """x-transformers' rotary: CANNOT TELL says --rope --rope-style interleaved; given, MATCH."""
    import dataclasses

    from attntrace.diffing.diff_report import diff_layer
    from attntrace.diffing.layer import as_layer

    torch.manual_seed(0)
    layer = as_layer(RotaryXT(), seq=5, batch=2)
    options = {**dataclasses.asdict(CAUSAL), "rope": True, "rope_style": "interleaved"}
    typed = {"rope", "rope_style", "causal", "batch", "seq", "hidden", "heads"}
    report = diff_layer(layer, options, typed, None)
    assert report.verdict == "match", (report.diagnosis, report.undecided)


CROSS_FILE = """
import torch


class Dec(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.layer = torch.nn.TransformerDecoderLayer(64, 4, batch_first=True)
        self.memory = torch.nn.Parameter(torch.randn(1, 7, 64))

    def forward(self, x):
        memory = self.memory.expand(x.shape[0], -1, -1)
        return self.layer.multihead_attn(x, memory, memory, need_weights=False)[0]
"""


@pytest.mark.parametrize("case", ["blog", "blog-split-dh", "cross"])
def test_the_cli_gives_the_verdict_of_a_users_file(case: str, tmp_path: Path) -> None:
    """Through the CLI and its child process: the blog's attention MATCHes, its ``(three d h)``
    copy is DIFFERS (exit 1) at its line, the decoder's cross-attention CANNOT TELL (exit 4)
    with no weights line (nothing ran)."""
    from typer.testing import CliRunner

    from attntrace.cli import app
    from attntrace.errors import EXIT_CANNOT_TELL

    pytest.importorskip("einops")
    source = {
        "blog": EINOPS_BLOG,
        "blog-split-dh": EINOPS_BLOG.replace("(three h d) ->", "(three d h) ->"),
        "cross": CROSS_FILE,
    }[case]
    path = tmp_path / "attention.py"
    path.write_text(source)
    target = f"{path}:{'Dec' if case == 'cross' else 'Block'}"
    sizes = ["--hidden", "64", "--heads", "4"] if case == "cross" else ["--init", "dim=64"]
    args = ["diff", target, "--batch", "2", "--seq", "5", *sizes]
    result = CliRunner().invoke(app, [*args, *([] if case == "cross" else ["--init", "heads=4"])])
    expected = {"blog": 0, "blog-split-dh": 1, "cross": EXIT_CANNOT_TELL}[case]
    assert result.exit_code == expected, result.output
    if case == "blog-split-dh":
        line = next(i for i, s in enumerate(source.splitlines(), 1) if "(three d h)" in s)
        assert f"attention.py:{line}" in result.output
        assert "(d h) instead of (h d)" in " ".join(result.output.split())
    if case == "cross":
        assert "cross-attention" in result.output
        assert "(from )" not in result.output
