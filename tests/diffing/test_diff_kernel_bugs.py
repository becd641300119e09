"""The bugs of a kernel's arguments (diffing/kernel_bugs.py), in this process: each replayed on
the reference gives what torch's own ``F.scaled_dot_product_attention`` gives with that mistake
in its arguments; their fixes are written in the user's call; every sentence has its Chinese."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from attntrace import AttentionConfig
from attntrace.diffing.bugs import Setting, catalogue
from attntrace.diffing.diagnose import Diagnosis, _run
from attntrace.diffing.kernel_args import KERNEL_FIXES, fix_in_call, in_kernel_terms
from attntrace.engine.attention import trace_attention
from attntrace.learn.lang import translate
from chinese import english_runs

CFG = AttentionConfig(batch=2, seq=5, hidden=16, heads=2, causal=True, dtype="float64")


def _setting(config: AttentionConfig, kernel: bool = True) -> tuple[Setting, dict[str, Any]]:
    ref = trace_attention(config, "numpy")
    tensors = dict(ref.params)
    tensors["x"] = ref["x"].value
    return Setting(config, ref, tensors, kernel), tensors


def _bug(s: Setting, key: str) -> Any:
    return next(b for b in catalogue(s) if b.key == key)


def _sdpa(ref: Any, **kwargs: Any) -> np.ndarray:
    """torch's kernel on the reference's own q, k, v with ``kwargs``: the context."""
    torch = pytest.importorskip("torch")
    q, k, v = (torch.from_numpy(np.ascontiguousarray(ref[n].value)) for n in "qkv")
    with torch.no_grad():
        out = torch.nn.functional.scaled_dot_product_attention(q, k, v, **kwargs)
    return np.asarray(out.numpy())


def test_a_float_keep_mask_replayed_is_what_sdpa_does_with_one() -> None:
    torch = pytest.importorskip("torch")
    s, tensors = _setting(CFG)
    mistaken = _run(_bug(s, "mask-float-keep"), s, tensors)
    keep = torch.ones(5, 5, dtype=torch.float64).tril()  # (S, N): 1 kept, 0 "masked"
    np.testing.assert_allclose(mistaken["context"].value, _sdpa(s.ref, attn_mask=keep), atol=1e-12)
    assert not np.allclose(mistaken["context"].value, s.ref["context"].value)


def test_an_inverted_bool_mask_replayed_is_what_sdpa_does_with_the_masked_fill_mask() -> None:
    torch = pytest.importorskip("torch")
    s, tensors = _setting(CFG)
    mistaken = _run(_bug(s, "mask-inverted"), s, tensors)
    masked_fill_style = torch.ones(5, 5, dtype=torch.bool).triu(1)  # True = hide: SDPA keeps it
    want = _sdpa(s.ref, attn_mask=masked_fill_style)  # the last query keeps no key: NaN
    np.testing.assert_allclose(mistaken["context"].value, want, atol=1e-12, equal_nan=True)


def test_a_window_dropped_for_is_causal_replayed_is_sdpas_plain_causal() -> None:
    s, tensors = _setting(AttentionConfig(**{**CFG.__dict__, "window": 2}))
    mistaken = _run(_bug(s, "window-dropped"), s, tensors)
    np.testing.assert_allclose(mistaken["context"].value, _sdpa(s.ref, is_causal=True), atol=1e-12)
    assert not np.allclose(s.ref["context"].value, _sdpa(s.ref, is_causal=True))


def test_a_mask_read_with_its_indices_swapped_is_what_sdpa_does_with_the_mask_transposed() -> None:
    torch = pytest.importorskip("torch")
    s, tensors = _setting(CFG)
    mistaken = _run(_bug(s, "mask-axes-swapped"), s, tensors)
    swapped = torch.ones(5, 5, dtype=torch.bool).tril().T  # kv_idx >= q_idx
    np.testing.assert_allclose(
        mistaken["context"].value, _sdpa(s.ref, attn_mask=swapped), atol=1e-12
    )


def test_the_kernel_bugs_are_offered_only_where_they_can_happen() -> None:
    plain, _ = _setting(AttentionConfig(batch=2, seq=5, hidden=16, heads=2))
    keys = {b.key for b in catalogue(plain)}
    assert "mask-float-keep" not in keys  # no mask to pass as a float
    assert "window-dropped" not in keys
    causal, _ = _setting(CFG)
    assert {"mask-float-keep"} <= {b.key for b in catalogue(causal)}
    eager, _ = _setting(CFG, kernel=False)  # the same weights as a mask filled with -1
    assert "mask-float-keep" not in {b.key for b in catalogue(eager)}


CALL = "y = F.scaled_dot_product_attention(query, k, v, attn_mask={m}, dropout_p={p}{rest})"


@pytest.mark.parametrize(
    ("key", "call", "words"),
    [
        ("mask-inverted", CALL.format(m="pad == 0", p="0.0", rest=""), "attn_mask=pad != 0"),
        ("mask-inverted", CALL.format(m="hide", p="0.0", rest=""), "attn_mask=~hide"),
        ("mask-inverted", CALL.format(m="~keep", p="0.0", rest=""), "attn_mask=keep"),
        ("mask-float-keep", CALL.format(m="self.bias[:, :, :T, :T]", p="0.0", rest=""),
         "attn_mask=self.bias[:, :, :T, :T].bool()"),
        ("scaled-sqrt(d)", CALL.format(m="None", p="0.0", rest=", scale=self.head_dim ** 0.5"),
         "scale=1 / math.sqrt(self.head_dim)"),
        ("unscaled", CALL.format(m="None", p="0.0", rest=", scale=1.0"),
         "scale=1 / math.sqrt(query.size(-1))"),
        ("mask-missing", CALL.format(m="None", p="0.0", rest=", is_causal=False"),
         "is_causal=True"),
        ("decode-mask-top-left", CALL.format(m="None", p="0.0", rest=", is_causal=True"),
         "causal_lower_right(S, N)"),
        ("mask-axes-swapped", "y = flex_attention(q, k, v, block_mask=self.block_mask)",
         "a causal mask_mod returns q_idx >= kv_idx"),
        ("causal-offset-1", "y = flex_attention(q, k, v, block_mask=bm)",
         "a mask_mod returning q_idx >= kv_idx"),
    ],
)  # fmt: skip
def test_a_fix_is_written_in_the_users_own_call(key: str, call: str, words: str) -> None:
    d = Diagnosis("masked", key, "…", "the generic fix", "m.py:7", call, 1.0, 1.0)
    fixed = in_kernel_terms(d)
    assert words in fixed.fix, fixed.fix
    assert translate(fixed.fix, "zh") != fixed.fix  # its Chinese is in the catalogue
    assert english_runs(translate(fixed.fix, "zh")) == []


@pytest.mark.parametrize(
    ("called", "words"),
    [
        ("y, _ = self.attn(x, x, x, attn_mask=allowed)", "attn_mask=~allowed"),
        ("y, _ = self.attn(x, x, x, None, False, tril == 0)", "attn_mask=tril != 0"),
        ("y, _ = self.attn(x, x, x)", "attn_mask=~keep"),
    ],
)
def test_a_bug_in_torch_mhas_sdpa_call_is_named_at_the_users_call_of_the_module(
    called: str, words: str
) -> None:
    from attntrace.diffing.user_side import UserStep

    torch_call = "scaled_dot_product_attention( q, k, v, attn_mask, dropout_p, is_causal )"
    d = Diagnosis("masked", "mask-inverted", "…", "flip it", "functional.py:7077", torch_call,
                  1.0, 1.0)  # fmt: skip
    other = UserStep(0, "scores", np.zeros(1), "functional.py:7000", "q @ k")
    step = UserStep(1, "masked", np.zeros(1), "functional.py:7077", torch_call, "masked",
                    "block.py:12", called)  # fmt: skip
    fixed = in_kernel_terms(d, True, [other, step])
    assert (fixed.location, fixed.source) == ("block.py:12", called)
    assert f"pass {words}, or" in fixed.fix, fixed.fix
    assert english_runs(translate(fixed.fix, "zh")) == []
    alone = in_kernel_terms(d, True, [other])  # no caller known: torch's line, the usual name
    assert alone.location == "functional.py:7077"
    assert "attn_mask=~keep" in alone.fix


def test_a_fix_for_a_line_that_is_no_kernel_call_is_left_as_it_is() -> None:
    d = Diagnosis("masked", "mask-inverted", "…", "flip it", "m.py:7", "s = q @ k", 1.0, 1.0)
    assert in_kernel_terms(d) is d
    assert fix_in_call("attn_mask={mask}", "no call here") == "attn_mask={mask}"


def test_a_call_over_several_lines_with_text_around_it_is_read() -> None:
    source = "out = torch.nn.functional.scaled_dot_product_attention(\n  q, k, v,\n" \
        "  attn_mask=m == 0,\n)  # trailing"  # fmt: skip
    assert fix_in_call(KERNEL_FIXES["mask-inverted"], source).endswith("attn_mask=m != 0")


def test_every_kernel_sentence_has_its_chinese() -> None:
    s, _ = _setting(AttentionConfig(**{**CFG.__dict__, "window": 2}))
    kernel = ("mask-float-keep", "window-dropped", "mask-axes-swapped")
    bugs = [b for b in catalogue(s) if b.key in kernel]
    assert len(bugs) == len(kernel)
    dropout_name, dropout_fix = KERNEL_FIXES["dropout-at-eval"].split(" || ")
    said = [
        *(b.name for b in bugs),
        *(b.fix for b in bugs),
        dropout_name.format(p=0.1),
        dropout_fix.format(dropout="self.dropout", owner="self"),
    ]
    for text in said:
        zh = translate(text, "zh")
        assert zh != text, text
        assert english_runs(zh) == [], (text, zh)


def test_a_t5_bias_read_with_its_indices_swapped_is_the_bias_of_the_opposite_distance() -> None:
    s, tensors = _setting(AttentionConfig(batch=1, seq=4, hidden=16, heads=2, bias=False,
                                          relative_bias="8,16", dtype="float64"))  # fmt: skip
    bug = _bug(s, "bias-axes-swapped")
    mistaken = _run(bug, s, tensors)
    bias = s.ref["position_bias"].value  # (h, S, N): bucket(j - i)
    np.testing.assert_array_equal(mistaken["position_bias"].value, np.swapaxes(bias, -1, -2))
    assert not np.allclose(mistaken["output"].value, s.ref["output"].value)
    assert english_runs(translate(f"{bug.name}; {bug.fix}", "zh")) == []


def test_kv_heads_tiled_before_a_kernel_call_may_go_in_whole_with_enable_gqa() -> None:
    fix = "each kv head serves 2 consecutive query heads: k.repeat_interleave(2, dim=1)"
    d = Diagnosis("k_rep", "gqa-tile-k-v", "…", fix, "m.py:7", "k = k.repeat(1, 2, 1, 1)", 1, 1)
    fixed = in_kernel_terms(d, kernel=True)
    tail = "; or hand scaled_dot_product_attention the kv heads as they are, with enable_gqa=True"
    assert fixed.fix == fix + tail
    assert in_kernel_terms(d) is d  # eager code: no kernel to hand them to
    assert english_runs(translate(fixed.fix, "zh")) == []
