"""A transformers attention class held by the user's own block, beyond the first corpus: a
decode step (``--past``) whose cache the block passes on to the class it holds (a
``DynamicCache``, the class's own kind), the choices read from that class named as its own
(``LlamaAttention.is_causal``), and a CANNOT TELL that ran nothing printing no weights line."""

from __future__ import annotations

from typing import Any

import pytest

from attntrace import AttentionConfig
from attntrace.diffing.diff_report import diff

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

H, HEADS = 64, 4


class NeoXBlock(torch.nn.Module):  # type: ignore[misc]
    """GPT-NeoX's attention under the user's name, its cache argument ``layer_past`` passed on,
    the rotary positions counted from the cache's length, as a decode loop does."""

    def __init__(self) -> None:
        super().__init__()
        from transformers import GPTNeoXConfig
        from transformers.models.gpt_neox.modeling_gpt_neox import (
            GPTNeoXAttention,
            GPTNeoXRotaryEmbedding,
        )

        cfg = GPTNeoXConfig(
            hidden_size=H, num_attention_heads=HEADS, num_hidden_layers=1, intermediate_size=128
        )
        cfg._attn_implementation = "eager"
        self.ln = torch.nn.LayerNorm(H)
        self.attn = GPTNeoXAttention(cfg, layer_idx=0)
        self.rope = GPTNeoXRotaryEmbedding(cfg)

    def forward(self, x: torch.Tensor, layer_past: Any = None) -> torch.Tensor:
        S = x.shape[1]
        N = 0 if layer_past is None else layer_past.get_seq_length()
        tables = self.rope(x, torch.arange(N, N + S)[None])  # (1, S, d) each
        out, _ = self.attn(self.ln(x), None, position_embeddings=tables, layer_past=layer_past)
        return x + out  # type: ignore[no-any-return]


class LlamaBlock(torch.nn.Module):  # type: ignore[misc]
    """LlamaAttention held as ``self.mixer``, its cache ``past_key_values`` and
    ``cache_position`` passed on; no mask (a decode step of one token needs none)."""

    def __init__(self) -> None:
        super().__init__()
        from transformers import LlamaConfig
        from transformers.models.llama.modeling_llama import LlamaAttention, LlamaRotaryEmbedding

        cfg = LlamaConfig(
            hidden_size=H, num_attention_heads=HEADS, num_key_value_heads=2, num_hidden_layers=1
        )
        cfg._attn_implementation = "eager"
        self.norm = torch.nn.RMSNorm(H)
        self.mixer = LlamaAttention(cfg, layer_idx=0)
        self.rope = LlamaRotaryEmbedding(cfg)

    def forward(
        self, x: torch.Tensor, past_key_values: Any = None, cache_position: Any = None
    ) -> torch.Tensor:
        S = x.shape[1]
        positions = torch.arange(S) if cache_position is None else cache_position  # (S,)
        out, _ = self.mixer(
            self.norm(x),
            position_embeddings=self.rope(x, positions[None]),
            attention_mask=None,
            past_key_values=past_key_values,
            cache_position=positions,
        )
        return x + out  # type: ignore[no-any-return]


@pytest.mark.slow
@pytest.mark.e2e  # GPT-NeoX's modeling module imported: several seconds on its own
@pytest.mark.parametrize("block", [NeoXBlock, LlamaBlock])
def test_a_decode_step_hands_the_held_class_its_own_cache(block: type) -> None:
    torch.manual_seed(0)
    report = diff(block(), AttentionConfig(batch=1, seq=1, hidden=H, heads=HEADS, past=3))
    assert report.ok, (report.diagnosis, report.undecided)
    assert any("DynamicCache of 3 earlier tokens" in n for n in report.notes), report.notes
    seen = {r.step.name for r in report.rows if r.status == "match" and r.user is not None}
    assert {"k_all", "v_all", "weights", "context"} <= seen, sorted(seen)


@pytest.mark.slow  # Llama's modeling module (already loaded by the corpus in a full run)
def test_a_choice_read_from_the_held_class_is_named_as_its_own() -> None:
    from attntrace.diffing.layer import as_layer
    from attntrace.diffing.verdict import split_hints

    torch.manual_seed(0)
    layer = as_layer(LlamaBlock(), seq=5, batch=2)
    _, reads = split_hints(layer, set())
    sources = {r.field: r.source for r in reads}
    assert sources["causal"] == "LlamaAttention.is_causal"
    assert sources["rope_base"] == "LlamaConfig.rope_theta"


@pytest.mark.slow
def test_no_mask_passed_to_a_causal_class_held_is_cannot_tell_and_its_remedy_matches() -> None:
    import dataclasses

    from attntrace.diffing.diff_report import diff_layer
    from attntrace.diffing.layer import as_layer

    torch.manual_seed(0)
    config = AttentionConfig(batch=2, seq=5, hidden=H, heads=HEADS, kv_heads=2)
    report = diff(LlamaBlock(), config)
    assert report.verdict == "cannot tell"
    assert report.undecided is not None
    assert "LlamaAttention.is_causal gives True" in report.undecided.missing
    assert report.undecided.remedy.startswith("pass --no-causal")
    options = dataclasses.asdict(config)  # --no-causal typed: the remedy, applied
    layer = as_layer(LlamaBlock(), seq=5, batch=2)
    applied = diff_layer(layer, options, {"causal", "batch", "seq", "hidden", "heads"}, None)
    assert applied.verdict == "match", (applied.diagnosis, applied.undecided)


def test_a_cannot_tell_that_ran_nothing_prints_no_weights_line() -> None:
    from rich.console import Console

    from attntrace.diffing.diff_report import cannot_tell_report
    from attntrace.errors import CannotTellError
    from attntrace.render.diff_view import render_diff

    report = cannot_tell_report(
        AttentionConfig(batch=2, seq=5, hidden=H, heads=HEADS),
        "BloomAttention (nn.Module)",
        CannotTellError("ALiBi has no reference step", ""),
    )
    console = Console(width=100, record=True, color_system=None)
    render_diff(report, console)
    text = console.export_text()
    assert "(from )" not in text
    assert "weights" not in text.splitlines()[1]
    assert "CANNOT TELL: ALiBi has no reference step" in text


class HeldMHA(torch.nn.Module):  # type: ignore[misc]
    """torch's attention after the user's norm: sequence-first with a boolean causal mask, or
    batch-first with a key padding mask (the last two keys of the second sequence)."""

    def __init__(self, kind: str) -> None:
        super().__init__()
        self.kind, self.norm = kind, torch.nn.LayerNorm(H)
        self.attention = torch.nn.MultiheadAttention(H, HEADS, batch_first=kind == "padding")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, S, _ = x.shape
        h = self.norm(x)
        if self.kind == "padding":
            padding = torch.zeros(B, S, dtype=torch.bool)
            padding[-1, -2:] = True  # (B, S): True = a padded key
            return x + self.attention(h, h, h, key_padding_mask=padding)[0]  # type: ignore[no-any-return]
        causal = torch.ones(S, S, dtype=torch.bool).triu(1)  # (S, S): True = hidden
        t = h.transpose(0, 1)  # (S, B, H)
        return x + self.attention(t, t, t, attn_mask=causal)[0].transpose(0, 1)  # type: ignore[no-any-return]


@pytest.mark.slow
def test_an_unstated_causal_mask_fused_with_the_scores_is_cannot_tell_then_match() -> None:
    """torch adds a boolean mask with the scores in one ``baddbmm``: the scores step already
    differs, before the step where the catalogue's causal mask starts."""
    import dataclasses

    from attntrace.diffing.diff_report import diff_layer
    from attntrace.diffing.layer import as_layer

    torch.manual_seed(0)
    config = AttentionConfig(batch=2, seq=5, hidden=H, heads=HEADS)
    report = diff(HeldMHA("causal"), config)
    assert report.verdict == "cannot tell", report.diagnosis
    assert report.undecided is not None
    assert report.undecided.remedy.startswith("pass --causal")
    layer = as_layer(HeldMHA("causal"), seq=5, batch=2)
    options = {**dataclasses.asdict(config), "causal": True}
    applied = diff_layer(layer, options, {"causal", "batch", "seq", "hidden", "heads"}, None)
    assert applied.verdict == "match", (applied.diagnosis, applied.undecided)


@pytest.mark.slow
def test_a_key_padding_mask_the_code_makes_is_cannot_tell_with_the_lengths() -> None:
    torch.manual_seed(0)
    report = diff(HeldMHA("padding"), AttentionConfig(batch=2, seq=5, hidden=H, heads=HEADS))
    assert report.verdict == "cannot tell", report.diagnosis
    assert report.undecided is not None
    assert "keys kept per batch item 5,3" in report.undecided.missing
    assert report.undecided.remedy.startswith("pass --key-lengths 5,3 ")
    assert _applied(HeldMHA("padding"), (5, 3)).verdict == "match"


def _applied(module: Any, lengths: tuple[int, ...]) -> Any:
    """The diff of ``module`` (2, 5, H) with ``--key-lengths`` typed: a remedy applied."""
    import dataclasses

    from attntrace.diffing.diff_report import diff_layer
    from attntrace.diffing.layer import as_layer

    torch.manual_seed(0)
    config = AttentionConfig(batch=2, seq=5, hidden=H, heads=HEADS, key_lengths=lengths)
    typed = {"key_lengths", "batch", "seq", "hidden", "heads"}
    return diff_layer(as_layer(module, seq=5, batch=2), dataclasses.asdict(config), typed, None)


class PaddedAttention(torch.nn.Module):  # type: ignore[misc]
    """The user's own attention hiding the keys past each sequence's length (5 and 3), as
    padded batches are written; planted: the mask put on the queries, or one key too many
    hidden (``>= length - 1``), or the first keys hidden (left padding, which --key-lengths
    cannot say)."""

    def __init__(self, kind: str = "keys") -> None:
        super().__init__()
        self.kind = kind
        self.q, self.k, self.v = (torch.nn.Linear(H, H) for _ in range(3))
        self.o = torch.nn.Linear(H, H)

    def heads(self, t: torch.Tensor) -> torch.Tensor:
        B, S, _ = t.shape
        return t.view(B, S, HEADS, H // HEADS).transpose(1, 2)  # (B, h, S, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, S, _ = x.shape
        q, k, v = self.heads(self.q(x)), self.heads(self.k(x)), self.heads(self.v(x))
        scores = q @ k.transpose(-2, -1) / (H // HEADS) ** 0.5  # (B, h, S, S)
        lengths = torch.tensor([S, S - 2])  # (B,)
        cut = lengths[:, None] - int(self.kind == "off_by_one")  # (B, 1)
        pad = torch.arange(S)[None] >= cut  # (B, S): True = a padded key
        if self.kind == "left":
            pad = pad.flip(-1)  # (B, S): the first keys padded
        where = pad[:, None, :, None] if self.kind == "queries" else pad[:, None, None, :]
        scores = scores.masked_fill(where, torch.finfo(scores.dtype).min)  # (B, h, S, S)
        context = scores.softmax(dim=-1) @ v  # (B, h, S, d)
        return self.o(context.transpose(1, 2).reshape(B, S, H))  # type: ignore[no-any-return]


def test_the_padding_remedy_names_the_lengths_and_applied_matches() -> None:
    torch.manual_seed(0)
    report = diff(PaddedAttention(), AttentionConfig(batch=2, seq=5, hidden=H, heads=HEADS))
    assert report.verdict == "cannot tell", report.diagnosis
    assert report.undecided is not None
    assert report.undecided.remedy.startswith("pass --key-lengths 5,3 ")
    applied = _applied(PaddedAttention(), (5, 3))
    assert applied.verdict == "match", (applied.diagnosis, applied.undecided)
    assert applied.weights == "q/k/v/o"  # a user's names with biases: not T5's scheme


@pytest.mark.parametrize("kind", ["keys", "left"])
def test_the_padding_cannot_tell_reads_in_chinese(kind: str) -> None:
    from rich.console import Console

    from attntrace.render.diff_view import render_diff
    from attntrace.render.speaking import in_words
    from chinese import english_runs

    torch.manual_seed(0)
    report = diff(PaddedAttention(kind), AttentionConfig(batch=2, seq=5, hidden=H, heads=HEADS))
    console = Console(width=400, record=True, color_system=None)
    render_diff(report, in_words(console, "zh"))
    verdict = console.export_text().split("无法判断（CANNOT TELL）：")[1]
    assert english_runs(verdict) == [], verdict
    assert ("--key-lengths 5,3" in verdict) == (kind == "keys"), verdict


@pytest.mark.parametrize("planted", ["queries", "off_by_one"])
def test_a_padding_mask_planted_wrong_differs_from_the_lengths_given(planted: str) -> None:
    report = _applied(PaddedAttention(planted), (5, 3))
    assert report.verdict == "differs", (report.diagnosis, report.undecided)
    assert report.diagnosis is not None
    assert report.diagnosis.step in {"mask", "masked", "weights"}, report.diagnosis
    if planted == "queries":  # the mask's rows are the queries: its two axes swapped
        assert report.diagnosis.bug == "mask-axes-swapped", report.diagnosis


def test_left_padding_is_cannot_tell_offering_no_flag_that_would_be_wrong() -> None:
    torch.manual_seed(0)
    report = diff(PaddedAttention("left"), AttentionConfig(batch=2, seq=5, hidden=H, heads=HEADS))
    assert report.verdict == "cannot tell", report.diagnosis
    assert report.undecided is not None
    assert "not the last keys of each item" in report.undecided.missing
    assert report.undecided.remedy == ""


class PackedBlock(torch.nn.Module):  # type: ignore[misc]
    """A user's block with one packed projection ``self.qkv`` and the output under ``out`` (the
    user's name) or ``proj`` (timm's)."""

    def __init__(self, out: str) -> None:
        super().__init__()
        self.qkv = torch.nn.Linear(H, 3 * H)
        setattr(self, out, torch.nn.Linear(H, H))
        self.out_name = out

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, S, _ = x.shape
        qkv = self.qkv(x).view(B, S, 3, HEADS, H // HEADS)  # (B, S, 3, h, d)
        q, k, v = qkv.permute(2, 0, 3, 1, 4)  # (B, h, S, d) each
        weights = (q @ k.transpose(-2, -1) / (H // HEADS) ** 0.5).softmax(dim=-1)  # (B, h, S, S)
        merged = (weights @ v).transpose(1, 2).reshape(B, S, H)  # (B, S, H)
        return getattr(self, self.out_name)(merged)  # type: ignore[no-any-return]


@pytest.mark.parametrize(("out", "shown"), [("out", "qkv/out"), ("proj", "qkv/proj (timm)")])
def test_the_weights_line_names_the_names_read(out: str, shown: str) -> None:
    from rich.console import Console

    from attntrace.render.diff_view import render_diff

    torch.manual_seed(0)
    report = diff(PackedBlock(out), AttentionConfig(batch=2, seq=5, hidden=H, heads=HEADS))
    assert report.verdict == "match", (report.diagnosis, report.undecided)
    assert report.weights == shown
    console = Console(width=120, record=True, color_system=None)
    render_diff(report, console)
    assert f"same input and weights (from {shown}) on both sides" in console.export_text()


@pytest.mark.slow  # Llama, BERT, GPT-2 modeling (already loaded by test_diff_transformers)
@pytest.mark.parametrize("name", ["LlamaAttention", "BertSelfAttention", "GPT2Attention"])
def test_a_class_named_directly_is_handed_the_padding_of_key_lengths(name: str) -> None:
    """``diff transformers:<Class> --key-lengths``: attntrace calls the class, so it hands it
    the padding mask its model would (the keys past each length hidden), and the class that
    masks them as told matches the reference that does."""
    from attntrace.capturing.library import build, find_class

    cls = find_class("transformers", name)
    torch.manual_seed(0)
    module = build(cls, {}, {"hidden": H, "heads": HEADS})
    config = AttentionConfig(batch=2, seq=5, hidden=H, heads=HEADS, key_lengths=(5, 3))
    report = diff(module, config)
    assert report.verdict == "match", (report.diagnosis, report.undecided)
    assert any(r.step.name == "masked" and r.status == "match" for r in report.rows)
