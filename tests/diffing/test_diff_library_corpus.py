"""The real-code corpus: attention classes of transformers that nobody on this project wrote,
built at test time from config objects (random init, nothing downloaded), each

- traced: its steps get their roles (scores or scaled, weights, context, output);
- diffed as named: MATCH (ALiBi's Bloom, MPT and Falcon too), or CANNOT TELL with the reason
  for what the reference cannot express (DeBERTa's disentangled scores, latent attention,
  attention experts);
- diffed wrapped three ways, as users hold it: an attribute of their module with their own
  norm, output ``nn.Linear`` named ``dense`` and residual around it; the second layer of an
  ``nn.Sequential`` after a LayerNorm; a plain function of x that calls it. Each gives the
  verdict of the class named directly.

Each class is built once per worker (:func:`_built`); the cases are parametrized one per class
and wrapping, so pytest-xdist spreads them."""

from __future__ import annotations

import ast
import functools
from collections.abc import Callable
from typing import Any

import pytest

from attntrace import AttentionConfig
from attntrace.diffing.diff_report import diff

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from attntrace.capturing.library import build, call, find_class  # noqa: E402

H, HEADS = 64, 4
CONFIG = AttentionConfig(batch=2, seq=5, hidden=H, heads=HEADS)
DEBERTA = "transformers.models.deberta_v2.modeling_deberta_v2:DisentangledSelfAttention"

#: Classes the corpus of test_diff_transformers.py does not hold, whose diff is MATCH:
#: (target, --init).
MATCHING: list[tuple[str, dict[str, Any]]] = [
    ("GPTNeoXAttention", {}),
    (
        "GPTNeoXAttention",
        {"rope_parameters": {"rope_type": "default", "partial_rotary_factor": 0.5}},
    ),
    ("GPTJAttention", {}),
    ("OPTAttention", {}),
    ("CLIPAttention", {}),
    ("SiglipAttention", {}),
    ("WhisperAttention", {}),
    ("DistilBertSelfAttention", {}),
    ("RobertaSelfAttention", {}),
    ("BertAttention", {}),
    ("ElectraAttention", {}),
    ("DebertaV2Attention", {}),
    ("XLMRobertaSelfAttention", {}),
    ("ElectraSelfAttention", {}),
    ("CamembertSelfAttention", {}),
    ("MixtralAttention", {"num_key_value_heads": 2}),
    ("Qwen2MoeAttention", {}),
    ("Qwen3MoeAttention", {}),
    ("CohereAttention", {}),
    ("StableLmAttention", {}),
    ("PhiAttention", {}),
    ("Olmo2Attention", {}),
    ("OlmoeAttention", {}),
    ("Starcoder2Attention", {}),
    ("GraniteAttention", {}),
    ("BartAttention", {}),
    ("MarianAttention", {}),
    ("M2M100Attention", {}),
    ("BioGptAttention", {}),
    ("Gemma3Attention", {}),
    ("GlmAttention", {}),
    ("NemotronAttention", {}),
    ("SmolLM3Attention", {}),
    ("GPTBigCodeAttention", {}),
    ("ViTAttention", {}),
    ("Wav2Vec2Attention", {}),
    ("TrOCRAttention", {}),
    (DEBERTA, {}),
    ("BloomAttention", {}),  # ALiBi, Bloom's form slope·j: biased up to a constant per row
    ("MptAttention", {}),  # ALiBi, MPT's form slope·(j - N + 1)
    ("FalconAttention", {"alibi": True, "new_decoder_architecture": True}),  # before the scale
    ("FalconAttention", {"alibi": True}),
]

#: Classes whose attention the reference cannot express: (target, --init, the reason's words).
UNEXPRESSIBLE: list[tuple[str, dict[str, Any], str]] = [
    (DEBERTA, {"relative_attention": True, "pos_att_type": ["p2c", "c2p"]}, "disentangled"),
    ("DeepseekV3Attention", {}, "latent attention"),
    ("JetMoeAttention", {}, "experts"),
    ("PersimmonAttention", {}, "LayerNorm"),
    ("MiniMaxLightningAttention", {}, "no softmax"),
]


#: Classes whose trace does not name its roles yet (the diff matches them by value).
ROLES_UNNAMED = {
    "FalconAttention-alibi+new_decoder_architecture": "q, k and v of each kv group cut from "
    "one fused view (B, S, g, h/g + 2, d), which capture's role pass does not follow (with "
    "RoPE as with ALiBi)",
}


def _class(target: str) -> Any:
    if ":" in target:
        import importlib

        module, name = target.split(":")
        return getattr(importlib.import_module(module), name)
    found = find_class("transformers", target)
    assert found is not None, target
    return found


@functools.cache
def _built_cached(target: str, init: str) -> Any:
    torch.manual_seed(0)
    return build(_class(target), ast.literal_eval(init), {"hidden": H, "heads": HEADS})


def _built(target: str, init: dict[str, Any]) -> Any:
    """attntrace's caller of the class (``.attn``, ``.rotary``, ``.config``), once per worker."""
    return _built_cached(target, repr(init))


def _verdict(target: Any) -> tuple[str, str]:
    """("match" | "differs" | "cannot tell", the reason or the first differing step)."""
    from attntrace.errors import AttntraceError

    try:
        report = diff(target, CONFIG)
    except AttntraceError as exc:
        if str(exc).startswith("cannot tell") or type(exc).__name__ == "CannotTellError":
            return "cannot tell", str(exc)
        raise
    verdict = getattr(report, "verdict", None) or ("match" if report.ok else "differs")
    if verdict == "cannot tell":
        return verdict, str(getattr(report, "undecided", "") or report.notes)
    first = report.first
    return verdict, "" if first is None else first.step.name


# ---- three ways users hold a library attention (their code, their names) ---------------


class Held(torch.nn.Module):  # type: ignore[misc]
    """An attribute under the user's own name, with their norm, output Linear and residual."""

    def __init__(self, built: Any) -> None:
        super().__init__()
        self.norm = torch.nn.LayerNorm(H)
        self.mixer = built.attn
        self.rope = built.rotary
        self.settings = built.config
        self.dense = torch.nn.Linear(H, H)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = call(torch, self.mixer, self.rope, self.settings, self.norm(x))  # (B, S, H)
        return x + self.dense(h)  # (B, S, H)


class Adapter(torch.nn.Module):  # type: ignore[misc]
    """What a user writes to put the class in an nn.Sequential: x in, the output out."""

    def __init__(self, built: Any) -> None:
        super().__init__()
        self.inner, self.rotary, self.settings = built.attn, built.rotary, built.config

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return call(torch, self.inner, self.rotary, self.settings, x)  # type: ignore[no-any-return]


def _sequential(built: Any) -> Any:
    return torch.nn.Sequential(torch.nn.LayerNorm(H), Adapter(built))


def _function(built: Any) -> Callable[[Any], Any]:
    attn, rope, settings = built.attn, built.rotary, built.config

    def attend(x: torch.Tensor) -> torch.Tensor:
        return call(torch, attn, rope, settings, x)  # type: ignore[no-any-return]

    return attend


WRAPS: dict[str, Callable[[Any], Any]] = {
    "attribute+dense": Held,
    "sequential": _sequential,
    "function": _function,
}


def _ids(cases: list[Any]) -> list[str]:
    """``Class`` or ``Class-field+field`` (the --init fields it is built with)."""
    return ["-".join([c[0].rsplit(":", 1)[-1], *(["+".join(c[1])] if c[1] else [])]) for c in cases]


#: Classes added with ALiBi (issue 41): their diffs run in .ci/run's e2e tier, the README's
#: tier being at its time budget (about 12 s of diffs together).
E2E_CLASSES = frozenset({"BloomAttention", "MptAttention", "FalconAttention"})


def _cases(cases: list[Any], ids: list[str]) -> list[Any]:
    """``cases`` as pytest params, those of :data:`E2E_CLASSES` marked slow and e2e."""
    e2e = (pytest.mark.slow, pytest.mark.e2e)
    return [
        pytest.param(*c, id=i, marks=e2e if c[0] in E2E_CLASSES else ())
        for c, i in zip(cases, ids, strict=True)
    ]


@pytest.mark.parametrize(("target", "init"), _cases(MATCHING, _ids(MATCHING)))
def test_named_directly_matches_and_trace_names_its_roles(
    target: str, init: dict[str, Any]
) -> None:
    built = _built(target, init)
    verdict, where = _verdict(built)
    assert verdict == "match", where
    unnamed = ROLES_UNNAMED.get(target) or ROLES_UNNAMED.get(_ids([(target, init)])[0])
    if unnamed:
        pytest.xfail(unnamed)
    for module in (built, Held(built)):  # named, and held by the user's module
        roles = _roles(module)
        assert {"weights", "context"} <= roles, sorted(roles)
        assert roles & {"scores", "scaled", "biased"}, sorted(roles)  # biased: Bloom's baddbmm


def _roles(module: Any) -> set[str]:
    """The roles trace gives the steps of ``module`` on x, following the packages it holds
    (``--axes h=4,d=16``: GPT-NeoX's rotary part of d is as long as h)."""
    from attntrace.capturing.held import held_into
    from attntrace.capturing.session import capture

    into = held_into(module) or ("transformers",)
    with capture(into=into, axes={"h": HEADS, "d": H // HEADS}) as t:
        module(torch.randn(2, 5, H))
    return {s.role for s in t.steps if getattr(s, "role", "")}


MATCH_WRAPPED = [(t, i, w) for t, i in MATCHING for w in WRAPS]


@pytest.mark.parametrize(
    ("target", "init", "wrap"),
    _cases(
        MATCH_WRAPPED,
        [f"{i}-{w}" for i, (_, _, w) in zip(_ids(MATCH_WRAPPED), MATCH_WRAPPED, strict=True)],
    ),
)
def test_wrapped_three_ways_still_matches(target: str, init: dict[str, Any], wrap: str) -> None:
    built = _built(target, init)
    verdict, where = _verdict(WRAPS[wrap](built))
    assert verdict == "match", where


@pytest.mark.parametrize(("target", "init", "words"), UNEXPRESSIBLE, ids=_ids(UNEXPRESSIBLE))
def test_what_the_reference_cannot_express_is_cannot_tell(
    target: str, init: dict[str, Any], words: str
) -> None:
    built = _built(target, init)
    verdict, why = _verdict(built)
    assert verdict == "cannot tell"
    assert words in why, why
    for wrap in WRAPS.values():  # wrapped, the same: never the user's code blamed
        assert _verdict(wrap(built))[0] == "cannot tell"


# ---- the cases, written as a user writes them --------------------------------------


class LlamaBlock(torch.nn.Module):  # type: ignore[misc]
    """LlamaAttention held under the user's name, called with the rotary tables and the
    causal mask, with a pre-norm and the user's own residual."""

    def __init__(self) -> None:
        super().__init__()
        from transformers import LlamaConfig
        from transformers.models.llama.modeling_llama import LlamaAttention, LlamaRotaryEmbedding

        cfg = LlamaConfig(
            hidden_size=H, num_attention_heads=HEADS, num_key_value_heads=2, num_hidden_layers=1
        )
        cfg._attn_implementation = "eager"
        self.norm = torch.nn.RMSNorm(H)
        self.attn = LlamaAttention(cfg, layer_idx=0)
        self.rope = LlamaRotaryEmbedding(cfg)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        S = x.shape[1]
        mask = torch.full((S, S), float("-inf")).triu(1)[None, None]  # (1, 1, S, S)
        tables = self.rope(x, torch.arange(S)[None])  # (1, S, d) each
        out, _ = self.attn(self.norm(x), position_embeddings=tables, attention_mask=mask)
        return x + out  # (B, S, H)


def test_llama_in_a_user_module_has_the_steps_and_verdict_of_the_class() -> None:
    torch.manual_seed(0)
    wrapped = diff(LlamaBlock(), CONFIG)
    direct = diff(_built("LlamaAttention", {"num_key_value_heads": 2}), CONFIG)
    assert wrapped.ok, wrapped.diagnosis
    assert direct.ok, direct.diagnosis
    seen = {r.step.name for r in wrapped.rows if r.status == "match" and r.user is not None}
    assert {r.step.name for r in direct.rows if r.status == "match" and r.user} <= seen
    assert any("LlamaAttention at .attn" in n for n in wrapped.notes), wrapped.notes


class EncoderLayerAttention(torch.nn.Module):  # type: ignore[misc]
    """torch's own attention reached through a TransformerEncoderLayer the user holds."""

    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.TransformerEncoderLayer(H, HEADS, batch_first=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layer.self_attn(x, x, x, need_weights=True)[0]  # type: ignore[no-any-return]


def test_torch_attention_reached_through_an_encoder_layer_shows_every_step() -> None:
    torch.manual_seed(0)
    report = diff(EncoderLayerAttention(), CONFIG)
    assert report.ok, report.diagnosis
    seen = {r.step.name for r in report.rows if r.status == "match" and r.user is not None}
    assert {"q_proj", "k_proj", "v_proj", "scaled", "weights", "context", "output"} <= seen
    direct = diff(torch.nn.MultiheadAttention(H, HEADS, batch_first=True), CONFIG)
    named = {r.step.name for r in direct.rows if r.status == "match" and r.user is not None}
    assert named <= seen | {"x"}


@pytest.mark.parametrize("family", ["BertSelfAttention", "RobertaSelfAttention"])
def test_self_attention_then_the_users_dense_is_its_output_projection(family: str) -> None:
    built = _built(family, {})

    class Block(torch.nn.Module):  # type: ignore[misc]
        def __init__(self) -> None:
            super().__init__()
            self.self_attention = built.attn
            self.dense = torch.nn.Linear(H, H)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.dense(self.self_attention(x)[0])  # type: ignore[no-any-return]

    block = Block()
    report = diff(block, CONFIG)
    assert report.ok, report.diagnosis
    assert report.weights.endswith("+ dense")
    output = next(r for r in report.rows if r.step.name == "output")
    assert output.status == "match"
    assert output.user is not None
    assert output.user.location.startswith("test_diff_library_corpus.py:")  # the user's dense


class SequenceFirst(torch.nn.Module):  # type: ignore[misc]
    """torch's attention in its default (S, B, H) layout after the user's own norm."""

    def __init__(self) -> None:
        super().__init__()
        self.norm = torch.nn.LayerNorm(H)
        self.attention = torch.nn.MultiheadAttention(H, HEADS)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.norm(x).transpose(0, 1)  # (S, B, H)
        return x + self.attention(h, h, h)[0].transpose(0, 1)  # type: ignore[no-any-return]


def test_a_sequence_first_attention_after_a_norm_is_handed_x_in_its_layout() -> None:
    torch.manual_seed(0)
    report = diff(SequenceFirst(), CONFIG)
    assert report.ok, report.diagnosis
    seen = {r.step.name for r in report.rows if r.status == "match" and r.user is not None}
    assert {"q_proj", "k_proj", "v_proj", "context", "output"} <= seen


class OwnAttention(torch.nn.Module):  # type: ignore[misc]
    """A user's attention with an output named ``output_proj``; ``bug``: softmax over the
    queries."""

    def __init__(self, bug: bool = False) -> None:
        super().__init__()
        self.n_heads, self.bug = HEADS, bug
        self.q_proj, self.k_proj, self.v_proj = (torch.nn.Linear(H, H) for _ in range(3))
        self.output_proj = torch.nn.Linear(H, H)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, S, _ = x.shape
        q, k, v = (
            p(x).view(B, S, HEADS, H // HEADS).transpose(1, 2)  # (B, h, S, d)
            for p in (self.q_proj, self.k_proj, self.v_proj)
        )
        scores = q @ k.transpose(-1, -2) / (H // HEADS) ** 0.5  # (B, h, S, S)
        weights = scores.softmax(dim=-2 if self.bug else -1)  # (B, h, S, S)
        merged = (weights @ v).transpose(1, 2).reshape(B, S, H)  # (B, S, H)
        return self.output_proj(merged)  # type: ignore[no-any-return]


def test_an_output_projection_named_output_proj_is_read_by_its_name() -> None:
    torch.manual_seed(0)
    report = diff(OwnAttention(), CONFIG)
    assert report.ok, report.diagnosis
    assert report.weights == "q_proj/k_proj/v_proj/o_proj"
    assert not any("call order" in n for n in report.notes)


class PerHeadFused(torch.nn.Module):  # type: ignore[misc]
    """GPT-NeoX's fused qkv (per head: [q | k | v]) in the user's code, no head count held."""

    def __init__(self) -> None:
        super().__init__()
        self.query_key_value = torch.nn.Linear(H, 3 * H)
        self.dense = torch.nn.Linear(H, H)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, S, _ = x.shape
        qkv = self.query_key_value(x).view(B, S, 4, 3 * (H // 4))  # (B, S, h, 3·d)
        q, k, v = qkv.permute(0, 2, 1, 3).chunk(3, dim=-1)  # (B, h, S, d) each
        weights = (q @ k.transpose(-1, -2) / (H // 4) ** 0.5).softmax(-1)  # (B, h, S, S)
        return self.dense((weights @ v).transpose(1, 2).reshape(B, S, H))  # type: ignore[no-any-return]


def test_a_per_head_fused_qkv_takes_the_typed_heads() -> None:
    torch.manual_seed(0)
    report = diff(PerHeadFused(), CONFIG)  # --heads 4 given: no "pass --heads"
    assert report.ok, report.diagnosis


class CachedAttention(OwnAttention):
    """A decode step whose cache argument has Hugging Face's name, ``past_key_values``."""

    def forward(  # type: ignore[override]
        self, x: torch.Tensor, past_key_values: Any = None
    ) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
        B, S, _ = x.shape
        q, k, v = (
            p(x).view(B, S, HEADS, H // HEADS).transpose(1, 2)  # (B, h, S, d)
            for p in (self.q_proj, self.k_proj, self.v_proj)
        )
        if past_key_values is not None:
            k = torch.cat([past_key_values[0], k], dim=2)  # (B, h, N + S, d)
            v = torch.cat([past_key_values[1], v], dim=2)  # (B, h, N + S, d)
        weights = (q @ k.transpose(-1, -2) / (H // HEADS) ** 0.5).softmax(-1)  # (B, h, S, N+S)
        merged = (weights @ v).transpose(1, 2).reshape(B, S, H)  # (B, S, H)
        return self.output_proj(merged), (k, v)


@pytest.mark.parametrize("target", ["own", "GPTNeoXAttention"])
def test_a_decode_step_takes_the_cache_by_its_hugging_face_names(target: str) -> None:
    torch.manual_seed(0)
    module = CachedAttention() if target == "own" else _built(target, {})
    config = AttentionConfig(batch=1, seq=1, hidden=H, heads=HEADS, past=3)
    report = diff(module, config)  # GPT-NeoX: layer_past; the user's: past_key_values
    assert report.ok, report.diagnosis


# ---- wrapping never changes a verdict (hypothesis) ----------------------------------------


def _compose(inner: Any, name: str, pre: str, post: str, container: str) -> Any:
    """``inner`` (x -> output) held as users hold it: under ``name``, after ``pre`` (a norm or
    a Linear), before ``post`` (an extra Linear or a residual), in ``container``."""
    if container == "function":

        def attend(x: torch.Tensor) -> torch.Tensor:
            return inner(x)  # type: ignore[no-any-return]

        return attend
    layers: list[Any] = {"norm": [torch.nn.LayerNorm(H)], "linear": [torch.nn.Linear(H, H)]}.get(
        pre, []
    )
    if container == "sequential":
        return torch.nn.Sequential(*layers, inner)

    class Outer(torch.nn.Module):  # type: ignore[misc]
        def __init__(self) -> None:
            super().__init__()
            self.before = torch.nn.ModuleList(layers)
            if container == "modulelist":
                self.blocks = torch.nn.ModuleList([inner])
            else:
                self.add_module(name, inner)
            self.extra = torch.nn.Linear(H, H)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            h = x
            for layer in self.before:
                h = layer(h)
            for block in self.blocks if container == "modulelist" else [getattr(self, name)]:
                h = block(h)
            return {"linear": self.extra(h), "residual": x + h}.get(post, h)

    return Outer()


def _inner(kind: str) -> Any:
    if kind in ("own", "own-bug"):
        torch.manual_seed(0)
        return OwnAttention(bug=kind == "own-bug")
    return Adapter(_built(kind, {}))


@pytest.mark.slow
def test_wrapping_never_changes_a_verdict() -> None:
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    direct: dict[str, tuple[str, str]] = {}

    @settings(max_examples=12, deadline=None, suppress_health_check=list(HealthCheck))
    @given(
        kind=st.sampled_from(["own", "own-bug", "LlamaAttention", "OPTAttention"]),
        name=st.sampled_from(["attn", "self_attn", "mixer", "attention", "block"]),
        pre=st.sampled_from(["none", "norm", "linear"]),
        post=st.sampled_from(["none", "linear", "residual"]),
        container=st.sampled_from(["attribute", "sequential", "modulelist", "function"]),
    )
    def check(kind: str, name: str, pre: str, post: str, container: str) -> None:
        if kind not in direct:
            direct[kind] = _verdict(_inner(kind))
        assert _verdict(_compose(_inner(kind), name, pre, post, container)) == direct[kind]

    check()
    assert direct.get("own-bug", ("differs", "weights"))[0] == "differs"


# ---- end to end: the CLI, its child process, a user's file ---------------------------------

BLOCK = """
import torch
from transformers import LlamaConfig
from transformers.models.llama.modeling_llama import LlamaAttention, LlamaRotaryEmbedding


class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        cfg = LlamaConfig(hidden_size=64, num_attention_heads=4, num_hidden_layers=1)
        cfg._attn_implementation = "eager"
        self.attn = LlamaAttention(cfg, layer_idx=0)
        self.rope = LlamaRotaryEmbedding(cfg)
        self.dense = torch.nn.Linear(64, 64)

    def forward(self, x):
        S = x.shape[1]
        mask = torch.full((S, S), float("-inf")).triu(1)[None, None]
        out, _ = self.attn(x, position_embeddings=self.rope(x, torch.arange(S)[None]),
                           attention_mask=mask)
        return self.dense(out)


class Fused(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.query_key_value = torch.nn.Linear(64, 192)
        self.dense = torch.nn.Linear(64, 64)

    def forward(self, x):
        B, S, H = x.shape
        q, k, v = self.query_key_value(x).view(B, S, 4, 48).transpose(1, 2).chunk(3, dim=-1)
        w = (q @ k.transpose(-1, -2) / 4.0).softmax(-1)
        return self.dense((w @ v).transpose(1, 2).reshape(B, S, H))
"""


@pytest.mark.slow
@pytest.mark.e2e  # the sandbox child builds transformers classes
@pytest.mark.parametrize(("name", "args"), [("Block", ()), ("Fused", ("--heads", "4"))])
def test_the_cli_diffs_a_users_file_that_holds_the_attention(
    tmp_path: Any, name: str, args: tuple[str, ...]
) -> None:
    import json

    from typer.testing import CliRunner

    from attntrace.cli import app

    path = tmp_path / "block.py"
    path.write_text(BLOCK)
    result = CliRunner().invoke(
        app, ["diff", f"{path}:{name}", "--batch", "2", "--seq", "5", *args, "--format", "json"]
    )
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert doc["ok"]
    if name == "Block":
        assert "compared inside Block: LlamaAttention at .attn" in doc["notes"]
        places = {r["location"].split(":")[0] for r in doc["rows"] if r["location"]}
        assert "modeling_llama.py" in places


# ---- other libraries: torch's own attention, x-transformers ---------------------------------


class Call(torch.nn.Module):  # type: ignore[misc]
    """A user's adapter: x in, the attention output out (torch's takes query, key, value)."""

    def __init__(self, inner: Any) -> None:
        super().__init__()
        self.inner = inner

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if isinstance(self.inner, torch.nn.MultiheadAttention):
            return self.inner(x, x, x)[0]  # type: ignore[no-any-return]
        return self.inner(x)  # type: ignore[no-any-return]


def _other(kind: str) -> tuple[Any, AttentionConfig]:
    torch.manual_seed(0)
    if kind == "MultiheadAttention":
        return torch.nn.MultiheadAttention(H, HEADS, batch_first=True), CONFIG
    xt = pytest.importorskip("x_transformers")
    causal = AttentionConfig(batch=2, seq=5, hidden=H, heads=HEADS, causal=True)
    return xt.Attention(dim=H, heads=HEADS, dim_head=H // HEADS, causal=True), causal


@pytest.mark.parametrize("kind", ["MultiheadAttention", "x_transformers.Attention"])
@pytest.mark.parametrize("wrap", ["attribute", "sequential", "function"])
def test_other_libraries_wrapped_match_as_named(kind: str, wrap: str) -> None:
    attention, config = _other(kind)
    assert diff(Call(attention), config).ok
    wrapped = _compose(Call(attention), "attn", "norm", "residual", wrap)
    report = diff(wrapped, config)
    assert report.ok, report.diagnosis
    seen = {r.step.name for r in report.rows if r.status == "match" and r.user is not None}
    assert {"q_proj", "k_proj", "v_proj", "output"} <= seen, sorted(seen)


class CachedBlock(torch.nn.Module):  # type: ignore[misc]
    """The user's block passes its cache on to the attention it holds, after a norm."""

    def __init__(self) -> None:
        super().__init__()
        self.norm = torch.nn.LayerNorm(H)
        self.attn = CachedAttention()

    def forward(self, x: torch.Tensor, past_key_values: Any = None) -> Any:
        out, present = self.attn(self.norm(x), past_key_values=past_key_values)
        return x + out, present


def test_a_block_that_passes_its_cache_on_is_a_decode_step_of_its_attention() -> None:
    torch.manual_seed(0)
    config = AttentionConfig(batch=1, seq=1, hidden=H, heads=HEADS, past=3)
    report = diff(CachedBlock(), config)
    assert report.ok, report.diagnosis
    assert any("compared inside CachedBlock" in n for n in report.notes), report.notes
