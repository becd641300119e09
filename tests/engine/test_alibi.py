"""--alibi (Press et al. 2021; Bloom, MPT, Falcon with alibi): head h adds slope_h * (j - i) to the
scaled scores. Checked against references written here, not by the engine: Press's recursive
slopes, torch's scaled_dot_product_attention with the bias as an explicit float mask; flash
tiles equal eager; a --past step equals the last rows of its prefill; costs; refusals."""

from __future__ import annotations

import dataclasses
import math
import warnings
from typing import Any

import numpy as np
import pytest
from numpy.testing import assert_allclose

from attntrace import AttentionConfig, trace_attention
from attntrace.engine.masks import MaskWarning
from attntrace.engine.relative import alibi_slopes
from attntrace.errors import ConfigError
from attntrace.trace import Trace


def press_slopes(n: int) -> list[float]:
    """``get_slopes`` of Press et al.'s repository (attention_with_linear_biases), recursive."""

    def power_of_two(n: int) -> list[float]:
        start = 2 ** (-(2 ** -(math.log2(n) - 3)))
        return [start * start**i for i in range(n)]

    if math.log2(n).is_integer():
        return power_of_two(n)
    closest = 2 ** math.floor(math.log2(n))
    return power_of_two(closest) + press_slopes(2 * closest)[0::2][: n - closest]


@pytest.mark.parametrize("heads", [1, 2, 3, 4, 5, 6, 7, 8, 12, 16, 20, 24, 32, 40, 64, 71, 112])
def test_slopes_are_press_et_al(heads: int) -> None:
    assert_allclose(alibi_slopes(heads), press_slopes(heads), rtol=1e-13)


def sdpa_reference(trace: Trace, config: AttentionConfig) -> tuple[np.ndarray, np.ndarray]:
    """(output, weights) of torch's SDPA with the bias slope * (j - i) (and the causal or window
    mask, at -inf) built here as one float mask, from the trace's x and weights."""
    torch = pytest.importorskip("torch")
    F = torch.nn.functional
    p = {n: torch.from_numpy(np.asarray(v)) for n, v in trace.params.items()}
    x = torch.from_numpy(np.asarray(trace["x"].value))  # (B, S, H)
    B, S = x.shape[0], x.shape[1]
    h, g, d = config.heads, config.groups, config.head_dim

    def heads(c: str, n: int) -> Any:  # (B, S, n·d) -> (B, n, S, d)
        return F.linear(x, p[f"w_{c}"], p.get(f"b_{c}")).view(B, S, n, d).transpose(1, 2)

    q, k, v = heads("q", h), heads("k", g), heads("v", g)
    pos = torch.arange(S, dtype=torch.float64)
    bias = torch.tensor(press_slopes(h), dtype=torch.float64)[:, None, None] * (
        pos[None, :] - pos[:, None]
    )  # (h, S, S)
    hide = torch.zeros(S, S, dtype=torch.bool)
    if config.causal:
        hide |= pos[None, :] > pos[:, None]
    if config.window is not None:
        hide |= pos[None, :] <= pos[:, None] - config.window
    mask = bias.masked_fill(hide, -math.inf).to(q.dtype)  # (h, S, S)
    sdpa = {"attn_mask": mask, "enable_gqa": g != h}
    context = F.scaled_dot_product_attention(q, k, v, **sdpa)  # (B, h, S, d)
    eye = torch.eye(S, dtype=q.dtype).expand(B, g, S, S)
    weights = F.scaled_dot_product_attention(q, k, eye, **sdpa)  # (B, h, S, S)
    merged = context.transpose(1, 2).reshape(B, S, h * d)
    output = F.linear(merged, p["w_o"], p.get("b_o"))  # (B, S, H)
    return output.numpy(), weights.numpy()


VARIANTS: dict[str, dict[str, Any]] = {
    "plain": {},
    "causal": {"causal": True},
    "causal gqa": {"causal": True, "kv_heads": 2},
    "window": {"causal": True, "window": 3},
    "twelve heads": {"heads": 12, "hidden": 48, "causal": True},
}


@pytest.mark.parametrize("case", list(VARIANTS))
def test_run_alibi_equals_sdpa_with_an_explicit_bias(compute_backend: str, case: str) -> None:
    fields = {"batch": 2, "seq": 7, "hidden": 24, "heads": 6, "dtype": "float64"}
    config = AttentionConfig(**{**fields, **VARIANTS[case]}, alibi=True)
    trace = trace_attention(config, compute_backend)
    output, weights = sdpa_reference(trace, config)
    assert_allclose(trace["weights"].value, weights, rtol=1e-10, atol=1e-12)
    assert_allclose(trace["output"].value, output, rtol=1e-10, atol=1e-12)
    bias = np.asarray(trace["position_bias"].value)  # (h, S, S)
    assert trace["position_bias"].shape == (config.heads, 7, 7)
    assert_allclose(bias[:, 3, 1], -2 * np.array(press_slopes(config.heads)), rtol=1e-15)


def test_without_alibi_the_weights_differ() -> None:
    """The reference above can fail: the same weights without the bias do not match it."""
    config = AttentionConfig(batch=2, seq=7, hidden=24, heads=6, dtype="float64", alibi=True)
    plain = trace_attention(dataclasses.replace(config, alibi=False))
    _, weights = sdpa_reference(plain, config)
    assert np.abs(np.asarray(plain["weights"].value) - weights).max() > 1e-3


@pytest.mark.parametrize("block", [1, 4])
@pytest.mark.parametrize("case", ["plain", "causal gqa", "window"])
def test_flash_tiles_equal_eager(compute_backend: str, case: str, block: int) -> None:
    fields = {"batch": 2, "seq": 11, "hidden": 24, "heads": 6, "dtype": "float64", "alibi": True}
    eager = AttentionConfig(**{**fields, **VARIANTS[case]})
    flash = dataclasses.replace(eager, algorithm="flash", block_size=block)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", MaskWarning)
        want, got = trace_attention(eager, compute_backend), trace_attention(flash, compute_backend)
    assert_allclose(got["output"].value, want["output"].value, rtol=1e-12, atol=1e-12)
    names = got.names
    assert names[names.index("s_tile") + 1 : names.index("s_tile") + 3] == ("bias_tile", "s_biased")
    assert "position_bias" not in names  # nothing (S, N) wide
    assert got["bias_tile"].shape == (6, block, block)
    assert got["bias_tile"].op == "alibi_slopes * (j - i)"


@pytest.mark.parametrize(
    "variant",
    [
        {"causal": True},
        {"causal": True, "kv_heads": 2},
        {"causal": True, "window": 3},
        {"causal": True, "kv_heads": 1, "algorithm": "flash", "block_size": 2},
    ],
    ids=repr,
)
def test_a_decode_step_is_the_tail_of_its_prefill(variant: dict[str, Any]) -> None:
    config = AttentionConfig(
        hidden=16, heads=4, dtype="float64", seq=2, past=5, alibi=True, **variant
    )
    n = config.past
    full = dataclasses.replace(config, seq=n + config.seq, past=0)
    prefill = trace_attention(full)
    first = n - config.cached  # a sliding cache keeps the last W-1 keys
    tensors: dict[str, Any] = {
        **prefill.params,
        "k_cache": prefill["k"].value[..., first:n, :],  # (g, N, d)
        "v_cache": prefill["v"].value[..., first:n, :],
        "x": prefill["x"].value[..., n:, :],  # (S, H)
    }
    step = trace_attention(config, tensors=tensors)
    assert_allclose(step["output"].value, prefill["output"].value[..., n:, :], rtol=1e-10)
    if config.algorithm == "eager":  # query i of the step is position n + i: its distances
        bias = np.asarray(step["position_bias"].value)  # (h, S, cached + S)
        assert_allclose(bias[0, 1], alibi_slopes(4)[0] * (np.arange(config.keys) - n - 1 + first))


def test_costs_are_the_same_on_every_backend_and_count_one_multiply_per_entry() -> None:
    config = AttentionConfig(batch=2, seq=5, hidden=24, heads=6, alibi=True, causal=True)
    shapes = trace_attention(config, "shape")
    values = trace_attention(config)
    assert [(s.name, s.shape, s.flops) for s in shapes] == [
        (s.name, s.shape, s.flops) for s in values
    ]
    assert shapes["position_bias"].flops == 6 * 5 * 5  # slopes (h, 1, 1) * distances (S, N)
    assert shapes["biased"].flops == 2 * 6 * 5 * 5
    assert shapes["weights"].op == "softmax(masked, dim=-1)"
    assert shapes["masked"].op == "where(mask, biased, -inf)"  # what the mask reads


@pytest.mark.parametrize(
    ("fields", "words"),
    [
        ({"rope": True}, "--alibi and --rope both encode positions"),
        ({"relative_bias": "32,128"}, "--alibi and --relative-bias both encode positions"),
        ({"kv_seq": 5}, "drop --alibi or --kv-seq"),
        ({"alibi": "yes"}, "alibi must be True or False"),
    ],
)
def test_combinations_without_a_model_are_refused(fields: dict[str, Any], words: str) -> None:
    with pytest.raises(ConfigError, match=words):
        AttentionConfig(**{"alibi": True, **fields})
