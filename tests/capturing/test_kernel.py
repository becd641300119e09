"""Every ``F.scaled_dot_product_attention`` call opened (capturing/kernel.py): the replayed
steps' values against softmax(q·kᵀ·scale + mask) computed here, independently, in float64;
the context against the kernel's own output; roles, axes and the call's line."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

import attntrace

torch = pytest.importorskip("torch")
F = torch.nn.functional

#: How close the replayed weights must be to the float64 computation here, by dtype.
TOL = {torch.float64: 1e-12, torch.float32: 2e-6, torch.bfloat16: 6e-2}
B, h, S, N, d = 2, 4, 5, 7, 8


def _qkv(dtype: Any, heads_kv: int = h, s: int = S, n: int = N) -> tuple[Any, Any, Any]:
    g = torch.Generator().manual_seed(0)
    q = torch.randn(B, h, s, d, generator=g, dtype=torch.float64).to(dtype)  # (B, h, S, d)
    k = torch.randn(B, heads_kv, n, d, generator=g, dtype=torch.float64).to(dtype)  # (B, g, N, d)
    v = torch.randn(B, heads_kv, n, d, generator=g, dtype=torch.float64).to(dtype)  # (B, g, N, d)
    return q, k, v


def _bool_mask(shape: tuple[int, ...]) -> Any:
    g = torch.Generator().manual_seed(1)
    keep = torch.rand(shape, generator=g) > 0.4  # (…, S, N)
    keep[..., 0] = True  # every query sees a key: no row of only -inf
    return keep


def _expected(q: Any, k: Any, v: Any, scale: float, bias: Any) -> tuple[Any, Any]:
    """softmax(q·kᵀ·scale + bias) and its context, in float64, written out here."""
    q64, k64, v64 = (t.double() for t in (q, k, v))
    if k64.shape[1] != q64.shape[1]:  # GQA: each kv head serves h/g consecutive query heads
        r = q64.shape[1] // k64.shape[1]
        k64, v64 = (
            torch.cat([t[:, i : i + 1].expand(-1, r, -1, -1) for i in range(t.shape[1])], 1)
            for t in (k64, v64)
        )
    logits = torch.einsum("bhsd,bhnd->bhsn", q64, k64) * scale + bias  # (B, h, S, N)
    weights = torch.exp(logits - logits.amax(-1, keepdim=True))
    weights = weights / weights.sum(-1, keepdim=True)  # (B, h, S, N)
    return weights, torch.einsum("bhsn,bhnd->bhsd", weights, v64)


def _additive(keep: Any) -> Any:
    return torch.where(keep, 0.0, -math.inf).double()


def _run(q: Any, k: Any, v: Any, **kwargs: Any) -> tuple[Any, Any]:
    sizes = {"B": B, "h": q.shape[1], "S": q.shape[2], "N": k.shape[2], "d": d}
    with attntrace.capture(axes=sizes if q.shape[2] != k.shape[2] else {}) as t:
        out = F.scaled_dot_product_attention(q, k, v, **kwargs)  # (B, h, S, d)
    return t, out


def _check(t: Any, out: Any, weights: Any, dtype: Any) -> None:
    np.testing.assert_allclose(t["weights"].value, weights.numpy(), atol=TOL[dtype], rtol=0)
    (call,) = t.kernels()
    assert call.agrees, call.verdict
    assert call.max_abs <= call.tol
    np.testing.assert_allclose(t["context"].value, out.double().numpy(), atol=0, rtol=0)


MASKS = {
    "none": None,
    "bool (S, N)": (S, N),
    "bool (B, 1, S, N)": (B, 1, S, N),
    "bool (B, h, S, N)": (B, h, S, N),
    "additive (S, N)": (S, N),
    "additive (B, 1, S, N)": (B, 1, S, N),
    "additive (B, h, S, N)": (B, h, S, N),
}


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
@pytest.mark.parametrize("mask", list(MASKS))
def test_replayed_weights_and_context(mask: str, dtype: Any) -> None:
    q, k, v = _qkv(dtype)
    shape = MASKS[mask]
    keep = None if shape is None else _bool_mask(shape)
    bias = torch.zeros(()) if keep is None else _additive(keep)
    given = keep if mask.startswith("bool") else None if keep is None else bias.to(dtype)
    t, out = _run(q, k, v, attn_mask=given)
    weights, context = _expected(q, k, v, 1 / math.sqrt(d), bias)
    _check(t, out, weights, dtype)
    np.testing.assert_allclose(out.double(), context, atol=TOL[dtype] * 4)  # the kernel's
    roles = [s.role for s in t.steps if s.location.endswith(f":{_line()}") and s.op != "input"]
    masked = ["mask", "masked"] if keep is not None else []
    assert roles == ["k_t", "scores", "scaled", *masked, "weights", "context"]
    assert t["scores"].axes == ("B", "h", "S", "N")
    assert t["k_t"].axes == ("B", "h", "d", "N")
    if keep is not None:
        (call,) = t.kernels()
        assert call.mask is not None
        assert call.mask["shape"] == shape
        assert call.mask["kind"] == mask.split(maxsplit=1)[0]
        assert call.mask["broadcast"] == (
            B,
            h,
            S,
            N,
        )
        assert t["mask"].shape == shape
        assert t["mask"].dtype == ("bool" if keep is given else str(dtype).split(".")[1])


def _line() -> int:
    """The line of the call in :func:`_run`."""
    import inspect

    lines, start = inspect.getsourcelines(_run)
    return start + next(i for i, s in enumerate(lines) if "scaled_dot_product_attention" in s)


@pytest.mark.parametrize(("s", "n"), [(5, 5), (3, 7)])
def test_is_causal_is_the_top_left_tril(s: int, n: int) -> None:
    """S < N: the kernel's causal mask is tril(S, N) aligned top-left (query i sees keys ≤ i),
    not the last S of N keys."""
    q, k, v = _qkv(torch.float64, s=s, n=n)
    t, out = _run(q, k, v, is_causal=True)
    keep = torch.from_numpy(np.tril(np.ones((s, n), dtype=bool)))  # (S, N)
    weights, _ = _expected(q, k, v, 1 / math.sqrt(d), _additive(keep))
    _check(t, out, weights, torch.float64)
    np.testing.assert_array_equal(t["mask"].value, keep.numpy())
    (call,) = t.kernels()
    assert call.mask is not None
    assert (call.mask["causal"], call.mask["diagonal"]) == ("top-left", 0)
    assert t["mask"].source == f"ones({s}, {n}).tril(0): is_causal, top-left"


@pytest.mark.slow
@pytest.mark.e2e  # importing torch.nn.attention.bias loads torch's dynamo: ~4 s
def test_causal_lower_right_bias_is_materialised() -> None:
    """torch.nn.attention.bias.causal_lower_right: the tril whose diagonal is N - S."""
    from torch.nn.attention.bias import causal_lower_right

    q, k, v = _qkv(torch.float64, s=3, n=7)
    t, out = _run(q, k, v, attn_mask=causal_lower_right(3, 7))
    keep = torch.from_numpy(np.tril(np.ones((3, 7), dtype=bool), k=4))  # (S, N)
    weights, _ = _expected(q, k, v, 1 / math.sqrt(d), _additive(keep))
    _check(t, out, weights, torch.float64)
    (call,) = t.kernels()
    assert call.mask is not None
    assert call.mask["causal"] == "bottom-right"


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
def test_scale_and_enable_gqa(dtype: Any) -> None:
    q, k, v = _qkv(dtype, heads_kv=2)
    t, out = _run(q, k, v, scale=0.3, enable_gqa=True)
    weights, _ = _expected(q, k, v, 0.3, torch.zeros(()))
    _check(t, out, weights, dtype)
    assert t["k_rep"].shape == (B, h, N, d)
    assert t["v_rep"].axes == ("B", "h", "N", "d")
    assert t["k_rep"].source == "k.repeat_interleave(2, dim=-3)"
    assert t["scaled"].source == "scores * 0.3"
    r = h // 2  # repeat_interleave: query head i reads kv head i // r
    np.testing.assert_array_equal(t["k_rep"].value[:, 3], k[:, 3 // r].double().numpy())
    (call,) = t.kernels()
    assert (call.scale, call.enable_gqa) == (0.3, True)


def test_dropout_is_drawn_again_from_the_kernel_s_random_state() -> None:
    q, k, v = _qkv(torch.float64)
    torch.manual_seed(3)
    t, _out = _run(q, k, v, dropout_p=0.5)
    (call,) = t.kernels()
    assert call.agrees, call.verdict
    assert "dropout" in [s.op for s in t.steps]
    kept = t.steps[[s.op for s in t.steps].index("dropout")].value  # (B, h, S, N)
    zeros = kept == 0
    assert zeros.any()
    assert (~zeros).any()


def test_counts_per_step_and_the_call_s_total() -> None:
    """FLOPs by engine/costs.py's rules: 2·S·N·d per head for each product, 5 per weight."""
    q, k, v = _qkv(torch.float32)
    with attntrace.capture() as t:
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)  # (B, h, S, d)
    del y
    (call,) = t.kernels()
    flops = dict(zip(call.steps, call.flops, strict=True))
    assert flops["scores"] == flops["y"] == 2 * B * h * S * N * d  # q @ k_t, weights @ v
    assert flops["scaled"] == flops["masked"] == B * h * S * N
    assert flops["weights"] == 5 * B * h * S * N
    assert flops["k_t"] == flops["mask"] == 0
    assert call.total_flops == sum(call.flops)
    assert dict(zip(call.steps, call.bytes, strict=True))["mask"] == S * N  # bool


def test_the_context_row_says_the_replay_agrees() -> None:
    """torch._C._nn's SDPA is the same builtin as F's: opened the same way."""
    q, k, v = _qkv(torch.float32)
    with attntrace.capture() as t:
        torch._C._nn.scaled_dot_product_attention(q, k, v)  # (B, h, S, d)
    assert t["weights"].shape == (B, h, S, N)
    assert "(replayed; equals the kernel's output within" in t["context"].source
    assert t["context"].location == t["weights"].location


def test_opaque_keeps_one_row() -> None:
    q, k, v = _qkv(torch.float32)
    with attntrace.capture(opaque=True) as t:
        F.scaled_dot_product_attention(q, k, v)  # (B, h, S, d)
    assert [(s.op, s.role) for s in t.steps][-1] == ("scaled_dot_product_attention", "context")
    assert not t.kernels()
    assert "scores" not in t


def test_the_document_has_the_kernel_s_steps_and_total() -> None:
    """``trace --format json``'s ``kernels`` (schema attntrace.capture/2)."""
    import jsonschema

    from attntrace.schemas import capture_schema

    q, k, v = _qkv(torch.float32, heads_kv=2)
    t, _ = _run(q, k, v, attn_mask=_bool_mask((S, N)), enable_gqa=True)
    doc = t.to_dict()
    jsonschema.validate(doc, capture_schema())
    (kernel,) = doc["kernels"]
    names = [s["name"] for s in kernel["steps"]]
    assert names[:-1] == ["k_rep", "v_rep", "k_t", "scores", "scaled", "mask", "masked", "weights"]
    assert kernel["total_flops"] == sum(s["flops"] for s in kernel["steps"])
    assert kernel["mask"] == {
        "kind": "bool",
        "shape": [S, N],
        "broadcast": [B, h, S, N],
        "causal": "",
        "diagonal": 0,
    }
    assert kernel["replay"]["agrees"] is True
    assert kernel["location"].endswith(f":{_line()}")
    assert any("scaled_dot_product_attention opened at" in n for n in doc["notes"])


def test_a_call_the_replay_cannot_follow_stays_one_row(monkeypatch: pytest.MonkeyPatch) -> None:
    """The replay raising leaves nothing half-recorded: the call is one row, as --opaque."""
    from attntrace.capturing import kernel

    def broken(*args: Any) -> Any:
        raise TypeError("an argument the replay does not read")

    monkeypatch.setattr(kernel, "_weights", broken)
    q, k, v = _qkv(torch.float32)
    t, out = _run(q, k, v, is_causal=True)
    assert [s.op for s in t.steps] == ["scaled_dot_product_attention"]
    assert not t.kernels()
    np.testing.assert_array_equal(t["context"].value, out.numpy())


@pytest.mark.parametrize("lead", [(), (3,)])
def test_without_batch_or_heads_axes(lead: tuple[int, ...]) -> None:
    """q (S, d) or (h, S, d): the kernel broadcasts; so does the replay."""
    g = torch.Generator().manual_seed(2)
    q, k, v = (torch.randn(*lead, n, d, generator=g, dtype=torch.float64) for n in (S, N, N))
    with attntrace.capture() as t:
        F.scaled_dot_product_attention(q, k, v, attn_mask=_bool_mask((S, N)))  # (…, S, d)
    weights, _ = _expected(
        *(x.reshape(1, -1, x.shape[-2], d) for x in (q, k, v)),
        1 / math.sqrt(d),
        _additive(_bool_mask((S, N))),
    )
    np.testing.assert_allclose(t["weights"].value, weights.reshape(*lead, S, N), atol=1e-12)
    assert t.kernels()[0].agrees


def test_a_replay_that_disagrees_says_so_and_the_kernel_s_output_is_used(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from attntrace.capturing import kernel

    monkeypatch.setitem(kernel.TOLERANCE, "float32", 0.0)  # no float32 replay is bit-exact here
    q, k, v = _qkv(torch.float32, s=64, n=64)
    with attntrace.capture() as t:
        y = F.scaled_dot_product_attention(q, k, v, scale=1.7)  # (B, h, S, d)
        z = y * 2  # (B, h, S, d)
    (call,) = t.kernels()
    assert not call.agrees
    assert "differs from the kernel's output by" in t["context"].source
    assert t.remarks == (
        f"the replay of scaled_dot_product_attention at {call.location} differs from the "
        f"kernel's output by {call.max_abs:.2g} (tolerance 0): the steps after it use the "
        "kernel's output",
    )
    np.testing.assert_array_equal(t["context"].value, y.numpy())
    assert t["z"].inputs == (t["context"].name,)
    np.testing.assert_array_equal(t["z"].value, z.numpy())


@pytest.mark.parametrize("note", ["OPENED_NOTE", "DIFFERS_NOTE", "DETACHED_NOTE"])
def test_every_note_of_an_opened_kernel_has_its_chinese(note: str) -> None:
    from attntrace.capturing import kernel as kernel_module
    from attntrace.learn.lang import translate
    from chinese import english_runs

    text = getattr(kernel_module, note).format(
        op="flex_attention", locations="a.py:3", location="a.py:3", max_abs="0.1", tol="1e-05"
    )
    zh = translate(text, "zh")
    assert zh != text
    assert english_runs(zh) == [], zh
