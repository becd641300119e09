"""The catalogues of words: every step of every variant explained in every language, with this
run's numbers, and a plain sentence for a step no catalogue knows."""

from __future__ import annotations

import dataclasses
import re
import string
import warnings

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from attntrace import AttentionConfig, trace_attention
from attntrace.errors import ConfigError
from attntrace.learn import LANGS, default_lang, explain_step, explain_trace
from attntrace.learn.lang import catalogue, check_lang
from attntrace.learn.words import message_keys, step_facts
from attntrace.trace import Step, Trace
from attntrace.units import format_shape

#: One config per variant the engine has, eager and flash (--algorithm flash tiles).
VARIANTS: dict[str, AttentionConfig] = {
    "plain": AttentionConfig(seq=3, hidden=8, heads=2),
    "decode": AttentionConfig(seq=2, past=5, hidden=8, heads=2, causal=True),
    "decode_window_gqa": AttentionConfig(
        seq=1, past=6, hidden=16, heads=4, kv_heads=2, causal=True, window=3, rope=True
    ),
    "batched": AttentionConfig(batch=2, seq=3, hidden=8, heads=2),
    "causal": AttentionConfig(seq=4, hidden=8, heads=2, causal=True),
    "window": AttentionConfig(seq=5, hidden=8, heads=2, causal=True, window=2),
    "padding": AttentionConfig(batch=2, seq=3, hidden=8, heads=2, key_lengths=(3, 2)),
    "gqa": AttentionConfig(seq=3, hidden=16, heads=4, kv_heads=2),
    "mqa": AttentionConfig(seq=3, hidden=16, heads=4, kv_heads=1),
    "rope": AttentionConfig(seq=4, hidden=16, heads=2, rope=True),
    "rope_partial": AttentionConfig(
        seq=4, hidden=16, heads=2, rope=True, rotary_dims=4, rope_style="interleaved"
    ),
    "softcap": AttentionConfig(seq=3, hidden=8, heads=2, softcap=30.0),
    "qk_norm": AttentionConfig(seq=3, hidden=8, heads=2, qk_norm="head"),
    "qk_norm_full": AttentionConfig(seq=3, hidden=8, heads=2, qk_norm="full"),
    "t5_bias": AttentionConfig(seq=3, hidden=8, heads=2, relative_bias="8,16", bias=False),
    "alibi": AttentionConfig(seq=3, hidden=24, heads=3, alibi=True, causal=True),
    "alibi_flash": AttentionConfig(
        seq=5, hidden=8, heads=2, alibi=True, algorithm="flash", block_size=2
    ),
    "cross": AttentionConfig(seq=3, hidden=8, heads=2, kv_seq=5, kv_hidden=6),
    "unscaled": AttentionConfig(seq=3, hidden=8, heads=2, scale=1.0),
    "scale": AttentionConfig(seq=3, hidden=8, heads=2, scale=0.3),
    "head_dim": AttentionConfig(seq=3, hidden=8, heads=2, head_dim_override=8),
    "flash": AttentionConfig(seq=5, hidden=8, heads=2, algorithm="flash", block_size=2),
    "flash_all": AttentionConfig(
        batch=2,
        seq=5,
        hidden=8,
        heads=2,
        kv_heads=1,
        causal=True,
        key_lengths=(5, 3),
        softcap=20.0,
        relative_bias="8,16",
        rope=True,
        algorithm="flash",
        block_size=2,
    ),
    "everything": AttentionConfig(
        batch=2,
        seq=5,
        hidden=16,
        heads=4,
        kv_heads=2,
        causal=True,
        window=3,
        key_lengths=(5, 4),
        rope=True,
        softcap=50.0,
        qk_norm="head",
        relative_bias="8,16",
    ),
}


def _trace(config: AttentionConfig) -> Trace:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # fully masked rows of the padding configs
        return trace_attention(config, "shape")


def _placeholders(text: str) -> set[str]:
    return {field for _, field, _, _ in string.Formatter().parse(text) if field}


def test_every_message_exists_in_every_language_with_the_same_placeholders() -> None:
    english = catalogue("en")
    for lang in LANGS:
        words = catalogue(lang)
        assert set(words) == set(english), f"{lang}: {set(words) ^ set(english)}"
        for key, text in words.items():
            assert _placeholders(text) == _placeholders(english[key]), (lang, key)
            assert text.strip(), (lang, key)


def test_the_chinese_catalogue_speaks_the_notes_vocabulary() -> None:
    zh = "".join(catalogue("zh").values())
    for word in ("相似度分数", "缩放", "归一化", "加权求和", "拼接", "多头", "分割成"):
        assert word in zh


@pytest.mark.parametrize("variant", sorted(VARIANTS))
@pytest.mark.parametrize("lang", LANGS)
def test_every_step_of_every_variant_has_its_own_sentence_with_its_shape(
    variant: str, lang: str
) -> None:
    trace = _trace(VARIANTS[variant])
    words = explain_trace(trace, check_lang(lang))
    assert list(words) == list(trace.names)
    for step in trace.steps:
        for key in message_keys(trace.config, step):  # never the plain fallback
            for other in LANGS:
                assert key in catalogue(other), (variant, step.name, key, other)
        text = words[step.name]
        assert format_shape(step.shape) in text, text
        assert "{" not in text, text  # every placeholder filled


@pytest.mark.parametrize("lang", LANGS)
def test_every_gradient_step_has_its_sentence_naming_what_it_is_the_gradient_of(
    lang: str,
) -> None:
    trace = trace_attention(AttentionConfig(seq=3, hidden=8, heads=2), "shape", backward=True)
    words = explain_trace(trace, check_lang(lang))
    gradients = [s for s in trace.steps if s.phase == "backward"]
    assert len(gradients) > 10
    for step in gradients:
        assert message_keys(trace.config, step) == ("backward",)
        text = words[step.name]
        assert step.name.removeprefix("d_") in text, text
        assert format_shape(step.shape) in text, text


def test_a_decode_step_says_what_the_cache_holds() -> None:
    t = _trace(VARIANTS["decode"])
    assert "the keys of the 5 earlier tokens" in explain_step(t, "k_cache")
    assert "之前 5 个词的 K 向量" in explain_step(t, "k_cache", "zh")
    assert "→ (2, 7, 4)" in explain_step(t, "k_all")


def test_a_variant_adds_its_own_sentences() -> None:
    t = _trace(VARIANTS["everything"])
    keys = {s.name: message_keys(t.config, s) for s in t.steps}
    assert keys["mask"] == ("mask", "extra.causal", "extra.window", "extra.padding")
    assert keys["k_proj"] == ("k_proj", "extra.grouped")
    assert keys["weights"] == ("weights", "extra.weights_masked")
    unscaled, scaled = _trace(VARIANTS["unscaled"]), _trace(VARIANTS["scale"])
    assert message_keys(unscaled.config, unscaled["scaled"]) == ("scaled.none",)
    assert message_keys(scaled.config, scaled["scaled"]) == ("scaled.custom",)
    flash = _trace(VARIANTS["flash"])
    assert message_keys(flash.config, flash["context"]) == ("context.flash",)
    assert message_keys(flash.config, flash["p_tile"]) == ("p_tile", "extra.tiles")


def test_the_english_sentences_of_the_issue() -> None:
    t = _trace(AttentionConfig(seq=3, hidden=768, heads=12))
    assert explain_step(t, "q_heads").startswith(
        "Splits the 768 features of each of the 3 tokens into 12 heads of 64"
    )
    assert "(3, 768) → (3, 12, 64)" in explain_step(t, "q_heads")
    assert "√64 = 8" in explain_step(t, "scaled")
    assert "every row sums to 1" in explain_step(t, "weights")
    assert "Row i: how much token i attends" in explain_step(t, "weights")


def test_a_step_no_catalogue_knows_gets_a_plain_sentence() -> None:
    t = _trace(VARIANTS["plain"])
    grad = Step("grad_q", (2, 3, 4), "float32", index=99, op="d(loss)/dq", axes=("h", "S", "d"))
    t = dataclasses.replace(t, steps=(*t.steps, grad))
    assert explain_step(t, "grad_q") == "grad_q = d(loss)/dq: (2, 3, 4), axes (h, S, d)."
    assert explain_step(t, "grad_q", "zh") == "grad_q = d(loss)/dq：(2, 3, 4)，维度 (h, S, d)。"


@pytest.mark.parametrize(
    ("env", "lang"),
    [
        ({"LANG": "zh_CN.UTF-8"}, "zh"),
        ({"LANG": "zh_TW"}, "zh"),
        ({"LC_ALL": "en_US.UTF-8", "LANG": "zh_CN.UTF-8"}, "en"),
        ({"LC_ALL": "", "LC_MESSAGES": "zh_CN", "LANG": "C"}, "zh"),
        ({"LANG": "C.UTF-8"}, "en"),
        ({}, "en"),
    ],
)
def test_the_default_language_follows_the_locale(env: dict[str, str], lang: str) -> None:
    assert default_lang(env) == lang


def test_an_unknown_language_is_refused_naming_the_choices() -> None:
    with pytest.raises(ConfigError, match="--lang must be one of en, zh, got 'fr'"):
        check_lang("fr")


def _numbers(text: str) -> set[str]:
    return set(re.findall(r"\d+(?:\.\d+)?", text))


@st.composite
def _configs(draw: st.DrawFn) -> AttentionConfig:
    groups = draw(st.sampled_from([1, 2, 3]))
    heads = groups * draw(st.integers(1, 4))
    d = draw(st.sampled_from([2, 3, 4, 6, 8, 9, 16]))
    return AttentionConfig(
        batch=draw(st.none() | st.integers(1, 3)),
        seq=draw(st.integers(1, 40)),
        hidden=heads * d,
        heads=heads,
        kv_heads=groups if groups != heads else None,
        causal=draw(st.booleans()),
        rope=draw(st.booleans()) and d % 2 == 0,
        softcap=draw(st.none() | st.sampled_from([15.0, 30.0, 50.0])),
    )


@pytest.mark.slow
@settings(max_examples=40, deadline=None)
@given(_configs(), st.sampled_from(LANGS))
def test_the_numbers_in_a_sentence_are_this_runs(config: AttentionConfig, lang: str) -> None:
    trace = _trace(config)
    words = explain_trace(trace, check_lang(lang))
    h, d, S = config.heads, config.head_dim, config.seq
    assert {str(config.hidden), str(h), str(d), str(S)} <= _numbers(words["q_heads"])
    assert f"√{d} = " in words["scaled"]
    assert f"{d}" in _numbers(words["scores"])
    for step in trace.steps:
        facts = step_facts(trace, step)
        run = {str(v) for v in facts.values()} | {str(n) for s in trace.steps for n in s.shape}
        run |= {n for v in facts.values() for n in _numbers(str(v))}
        written = {"0", "1", "2"}  # the catalogues' own: "sums to 1", "weight 0", "2i + 1"
        stray = _numbers(words[step.name]) - run - written
        assert not stray, (step.name, words[step.name], stray)


@pytest.mark.parametrize("lang", LANGS)
def test_a_users_mask_file_has_its_sentences_bool_and_additive(lang: str) -> None:
    import numpy as np

    config = AttentionConfig(seq=3, hidden=8, heads=2, causal=True)
    for mask, masked in ((np.ones((3, 3), bool), "masked"), (np.zeros((3, 3)), "masked.additive")):
        trace = trace_attention(config, "shape", mask=mask)
        assert message_keys(config, trace["mask"]) == ("mask", "extra.causal", "extra.mask_file")
        assert message_keys(config, trace["masked"]) == (masked,)
        words = explain_trace(trace, check_lang(lang))
        assert format_shape(trace["mask"].shape) in words["mask"]
