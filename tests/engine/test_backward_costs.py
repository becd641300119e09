"""What the backward costs: FLOPs of each step by hand, what eager, flash and recomputation keep,
the Megatron formula term by term, the shape backend at any size without torch, refusals."""

from __future__ import annotations

import subprocess
import sys

import pytest

from attntrace import AttentionConfig, trace_attention
from attntrace.errors import ConfigError
from paths import SRC


def test_flops_of_each_backward_step_by_hand() -> None:
    B, S, H, h = 2, 6, 16, 4
    d = H // h
    t = trace_attention(AttentionConfig(batch=B, seq=S, hidden=H, heads=h), "shape", backward=True)
    by_hand = {
        "d_w_o": 2 * H * H * B * S,  # d_outputᵀ @ merged
        "d_b_o": H * B * S,  # a sum over the rows
        "d_merged": 2 * B * S * H * H,  # d_output @ w_o
        "d_weights": 2 * B * h * S * S * d,  # d_context @ vᵀ
        "d_v": 2 * B * h * S * S * d,  # weightsᵀ @ d_context
        "d_scaled": 4 * B * h * S * S,  # mul, row sum, sub, mul
        "d_scores": B * h * S * S,  # the scale
        "d_q": 2 * B * h * S * S * d,
        "d_k_t": 2 * B * h * S * S * d,
        "d_q_proj": 0,  # un-transpose, un-split: a copy
        "d_w_q": 2 * H * H * B * S,
        "d_x": 3 * 2 * B * S * H * H + 2 * B * S * H,  # three products and two adds
    }
    for name, flops in by_hand.items():
        assert t[name].flops == flops, name
        assert t[name].phase == "backward"
    assert t["d_scaled"].formula == "4·B·h·S·S"
    assert t["d_weights"].op == "d_context @ vᵀ"
    assert t["d_scores"].axes == ("B", "h", "S", "S")
    assert t.training is not None
    assert t.training.backward_flops == sum(s.flops for s in t.steps if s.phase == "backward")


def test_gqa_sums_the_repeated_heads_rope_rotates_back() -> None:
    t = trace_attention(
        AttentionConfig(seq=5, hidden=16, heads=4, kv_heads=2, rope=True), "shape", backward=True
    )
    assert t["d_k_rep"].shape == (4, 5, 4)
    assert t["d_k_rot"].shape == (2, 5, 4)
    assert t["d_k_rot"].flops == 4 * 5 * 4  # one add per summed element: h·N·d
    assert t["d_q"].op == "d_q_rot * cos − rotate_half(d_q_rot * sin)"
    assert t["d_w_k"].shape == (8, 16)


def test_saved_eager_flash_recompute_at_a_long_sequence() -> None:
    B, S, H, h = 1, 8192, 1024, 16
    config = AttentionConfig(batch=B, seq=S, hidden=H, heads=h, causal=True)
    f = trace_attention(config, "shape", backward=True).training
    assert f is not None
    weights, mask = 4 * B * h * S * S, S * S  # float32 weights, a bool (S, N) mask
    assert f.eager_saved_bytes == 4 * B * S * H * 5 + weights + mask
    lse = 4 * B * h * S
    assert f.flash_saved_bytes == 4 * B * S * H * 6 + lse  # x, q, k, v, output, merged
    assert f.recompute_saved_bytes == 4 * B * S * H
    assert f.flash_tiles > 0
    assert f.flash_recompute_flops > 2 * B * h * S * S * (H // h) // 2
    r = trace_attention(config, "shape", backward=True, recompute=True)
    assert r.training is not None
    assert r.training.saved_bytes == 4 * B * S * H
    assert [s.name for s in r.steps if s.saved] == ["x"]
    assert r.training.backward_flops == f.backward_flops + f.forward_flops


def test_megatron_formula_term_by_term() -> None:
    s, b, hid, a = 64, 2, 32, 4
    f = trace_attention(
        AttentionConfig(batch=b, seq=s, hidden=hid, heads=a), "shape", backward=True
    )
    t = f.training
    assert t is not None
    assert t.megatron_bytes == 11 * s * b * hid + 5 * a * s * s * b
    # ours, at 2 bytes: x, q, k, v, merged (10·s·b·h) and the softmax output (2·a·s²·b)
    assert t.ours_16bit_bytes == 10 * s * b * hid + 2 * a * s * s * b
    terms = dict(t.megatron_terms)
    assert terms["softmax dropout mask (a·s²·b)"] == a * s * s * b
    assert terms["attention dropout output (2·a·s²·b)"] == 2 * a * s * s * b
    assert terms["output dropout mask (s·b·h)"] == s * b * hid
    assert terms["layout of x, q, k, v, merged (10·s·b·h)"] == 0
    assert sum(terms.values()) == t.megatron_bytes - t.ours_16bit_bytes


def test_megatron_terms_name_a_grouped_layout() -> None:
    config = AttentionConfig(seq=16, hidden=32, heads=4, kv_heads=1, causal=True)
    t = trace_attention(config, "shape", backward=True).training
    assert t is not None
    terms = dict(t.megatron_terms)
    assert terms["kept by our variants"] == -16 * 16  # the boolean causal mask, 1 byte each
    assert sum(terms.values()) == t.megatron_bytes - t.ours_16bit_bytes


def test_shape_backend_answers_a_long_backward_without_torch() -> None:
    code = (
        "import sys\n"
        "from attntrace import trace_attention\n"
        "from attntrace.config.presets import resolve_config\n"
        "config = resolve_config(preset='llama-3-70b', seq=131072)\n"
        "t = trace_attention(config, 'shape', backward=True)\n"
        "print(t['d_scores'].shape, t.training.saved_bytes > 0, 'torch' in sys.modules)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env={"PYTHONPATH": str(SRC)},
        check=False,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["(64,", "131072,", "131072)", "True", "False"]


@pytest.mark.parametrize(
    ("fields", "named"),
    [
        ({"algorithm": "flash", "window": 2}, "flash with --window"),
        ({"algorithm": "flash", "key_lengths": (3,), "batch": 1}, "--key-lengths"),
    ],
)
def test_backward_refuses_what_it_does_not_cover(fields: dict[str, object], named: str) -> None:
    with pytest.raises(ConfigError, match=named):
        trace_attention(AttentionConfig(seq=4, hidden=8, heads=2, **fields), backward=True)


def test_grad_output_of_another_shape_is_refused() -> None:
    import numpy as np

    with pytest.raises(ConfigError, match="--grad-output has shape"):
        trace_attention(
            AttentionConfig(seq=4, hidden=8, heads=2), backward=True, grad_output=np.ones((3, 8))
        )


def test_t5_table_gradient_and_its_one_hot_in_the_saved_bytes() -> None:
    config = AttentionConfig(batch=2, seq=6, hidden=8, heads=2, relative_bias="8,16")
    t = trace_attention(config, "shape", backward=True)
    assert t["d_rel_bias"].shape == (8, 2)
    assert t["d_rel_bias"].flops == 2 * 8 * 2 * 6 * 6  # onehotᵀ (buckets, S·N) @ (S·N, h)
    assert t["d_position_bias"].flops == 2 * 2 * 6 * 6  # the sum over B
    f = t.training
    assert f is not None
    assert dict(f.saved_extra) == {"rel_onehot": 6 * 6 * 8 * 4}
    assert f.saved_bytes == sum(s.nbytes for s in t.steps if s.saved) + 6 * 6 * 8 * 4
    assert sum(dict(f.megatron_terms).values()) == f.megatron_bytes - f.ours_16bit_bytes
