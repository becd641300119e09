"""AttentionConfig's variant fields (window, softcap, qk_norm, rotary_dims, rope_scaling): each
brings its steps, in order, on every backend; a bad value is a ConfigError that names the fix;
to_dict leaves out what is off."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from attntrace import AttentionConfig, trace_attention
from attntrace.engine.attention import step_names
from attntrace.errors import ConfigError

VARIANTS: dict[str, tuple[dict[str, Any], tuple[str, ...]]] = {
    "window": ({"window": 2, "causal": True}, ("scaled", "mask", "masked", "weights")),
    "softcap": ({"softcap": 0.5}, ("scaled", "capped", "weights")),
    "softcap-mask": (
        {"softcap": 0.5, "causal": True},
        ("scaled", "capped", "mask", "masked", "weights"),
    ),
    "qk-norm-head": ({"qk_norm": "head", "rope": True}, ("v", "q_norm", "k_norm", "rope_cos")),
    "qk-norm-full": ({"qk_norm": "full"}, ("v_proj", "q_norm", "k_norm", "q_heads")),
    "rotary-dims": (
        {"rope": True, "rotary_dims": 2},
        ("v", "rope_cos", "rope_sin", "q_rot", "k_rot"),
    ),
    "rope-scaling": (
        {"rope": True, "rope_scaling": "llama3:factor=8,original_max_position_embeddings=4"},
        ("v", "rope_cos", "rope_sin", "q_rot", "k_rot"),
    ),
}


@pytest.mark.parametrize("name", list(VARIANTS))
@pytest.mark.parametrize("backend", ["shape", "numpy", "torch"])
def test_variant_steps_in_order_on_every_backend(name: str, backend: str) -> None:
    if backend == "torch":
        pytest.importorskip("torch")
    fields, run = VARIANTS[name]
    config = AttentionConfig(batch=2, seq=5, hidden=16, heads=2, kv_heads=1, **fields)
    trace = trace_attention(config, backend)
    assert trace.names == step_names(config)
    at = trace.names.index(run[0])
    assert trace.names[at : at + len(run)] == run
    assert trace.shape("output") == (2, 5, 16)
    if "q_norm" in trace.names:
        assert trace["q_norm"].flops == 4 * int(np.prod(trace.shape("q_norm")))
        assert [p.name for p in trace.parameters][-2:] == ["n_q", "n_k"]


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"rope_scaling": "linear:factor=2"}, "change RoPE; add --rope"),
        ({"rope": True, "rope_scaling": "ntk"}, "unknown type 'ntk'"),
        ({"rope": True, "rope_scaling": "linear"}, "missing factor"),
        ({"rope": True, "rope_scaling": "linear:factor=2,beta=3"}, "unknown beta"),
        ({"rope": True, "rotary_dims": 3}, "--rotary-dims must be even"),
        ({"softcap": 0.0}, "--softcap must be a number > 0"),
        ({"qk_norm": "rms"}, "--qk-norm must be head or full"),
        ({"window": 0}, "--window must be a whole number >= 1"),
    ],
)
def test_bad_variants_name_the_fix(fields: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        AttentionConfig(hidden=8, heads=2, **fields)


def test_to_dict_leaves_out_variants_that_are_off() -> None:
    assert "window" not in AttentionConfig().to_dict()
    assert AttentionConfig(window=4).to_dict()["window"] == 4
