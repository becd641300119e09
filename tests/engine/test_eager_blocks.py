"""Eager attention made block by block (attntrace.engine.eager): the same values as torch's own
attention for every mask kind, the same bits whatever is kept and on any number of threads,
and recipes that give back exactly what the softmax read. Small blocks make every test cross
block edges (a block is a few query rows here, 256 at S = N = 2048 in float32).

Bits are compared only where the same BLAS calls are repeated (threads, what is kept, a recipe
run again). A product of some rows or columns alone is another call: BLAS may add the same d
products in another order (OpenBLAS's AVX2 and Sandybridge kernels do; its AVX-512 kernels
happen not to), so those comparisons allow the rounding that order may change, derived below
from float32's eps and the length of the sum (:func:`_dot_error`)."""

from __future__ import annotations

import numpy as np
import pytest

from attntrace import AttentionConfig, trace_attention
from attntrace.backends.numpy_backend import NumpyBackend

torch = pytest.importorskip("torch")
F = torch.nn.functional

EPS = float(np.finfo(np.float32).eps)  # 2^-23: twice the unit roundoff u of float32


def _dot_error(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """How far apart two float32 sums of the same K products ``a @ b`` (..., M, K) @ (..., K, N)
    may lie when they are added in different orders: each is within gamma_K·sum|a_i·b_i| of the
    exact sum, gamma_K = K·u / (1 - K·u) with u = eps / 2 (Higham, Accuracy and Stability of
    Numerical Algorithms, 2nd ed., eq. 3.5), so they differ by at most ~K·eps·(|a| @ |b|); twice
    that here, for the bias of the second-order terms and the product's own rounding."""
    K = a.shape[-1]
    return 2 * K * EPS * (np.abs(a).astype(np.float64) @ np.abs(b).astype(np.float64))


def _assert_softmax_close(got: np.ndarray, want: np.ndarray, score_error: float) -> None:
    """Weights of scores that differ by at most ``score_error`` (absolute): to first order
    dw_j / w_j = ds_j - sum_k w_k ds_k, at most 2·score_error relative; the exp, the sum of
    N terms and the division each round too, (N + 4)·eps relative at most."""
    rtol = 2 * score_error + (got.shape[-1] + 4) * EPS
    np.testing.assert_array_equal(got == 0, want == 0)  # masked keys: exactly 0 in both
    np.testing.assert_allclose(got, want, rtol=rtol, atol=0)


@pytest.fixture(autouse=True)
def small_blocks(monkeypatch: pytest.MonkeyPatch) -> None:
    from attntrace.engine import eager

    monkeypatch.setattr(eager, "BLOCK_BYTES", 512)  # 3 to 16 query rows a block here
    monkeypatch.setattr(eager, "POOL_MIN_NUMEL", 0)  # the thread pool, even for these sizes


USER = np.tril(np.ones((40, 40), dtype=bool), 3)  # (S, N), every row keeps a key
MASKS = {
    "none": ({}, None),
    "causal": ({"causal": True}, None),
    "window": ({"causal": True, "window": 7}, None),
    "key padding": ({"key_lengths": (40, 23)}, None),
    "user bool": ({}, USER),
    "user float": ({}, np.where(USER, np.linspace(-1, 1, 40, dtype=np.float32), -np.inf)),
}


def _keep(cfg: AttentionConfig, mask: np.ndarray | None) -> np.ndarray | None:
    """The combined mask as SDPA takes it: (B, 1, S, N) booleans (True = attend) or floats."""
    S = N = cfg.seq
    i, j = np.arange(S)[:, None], np.arange(N)[None, :]
    keep = np.ones((cfg.batch or 1, 1, S, N), dtype=bool)
    if cfg.causal:
        keep &= j <= i
    if cfg.window is not None:
        keep &= j > i - cfg.window
    if cfg.key_lengths is not None:
        keep &= j < np.asarray(cfg.key_lengths)[:, None, None, None]
    if mask is not None and mask.dtype == bool:
        keep &= mask
    if mask is not None and mask.dtype != bool:
        return np.where(keep, 0.0, -np.inf).astype(np.float32) + mask
    return keep if (cfg.causal or cfg.window or cfg.key_lengths or mask is not None) else None


@pytest.mark.parametrize("kind", list(MASKS))
def test_every_mask_kind_equals_torch_sdpa(kind: str) -> None:
    options, mask = MASKS[kind]
    cfg = AttentionConfig(batch=2, seq=40, hidden=32, heads=4, kv_heads=2, **options)
    t = trace_attention(cfg, mask=mask)
    q, k, v = (torch.from_numpy(t[n].value) for n in ("q", "k_rep", "v_rep"))  # (B, h, S, d)
    keep = _keep(cfg, mask)
    ref = F.scaled_dot_product_attention(
        q, k, v, attn_mask=None if keep is None else torch.from_numpy(keep)
    )
    np.testing.assert_allclose(t["context"].value, ref.numpy(), rtol=1e-5, atol=1e-6)
    probs = torch.softmax(
        q @ k.transpose(-2, -1) / np.sqrt(cfg.head_dim)
        + (
            0
            if keep is None
            else torch.from_numpy(np.where(keep, 0.0, -np.inf) if keep.dtype == bool else keep)
        ),
        -1,
    )
    np.testing.assert_allclose(t["weights"].value, probs.numpy(), rtol=1e-5, atol=1e-6)


def test_float64_equals_multihead_attention_to_the_last_digits() -> None:
    cfg = AttentionConfig(batch=2, seq=40, hidden=16, heads=2, dtype="float64")
    t = trace_attention(cfg)
    p = {name: torch.from_numpy(v) for name, v in t.params.items()}
    mha = torch.nn.MultiheadAttention(16, 2, batch_first=True, dtype=torch.float64).eval()
    with torch.no_grad():
        mha.in_proj_weight.copy_(torch.cat([p["w_q"], p["w_k"], p["w_v"]]))
        mha.in_proj_bias.copy_(torch.cat([p["b_q"], p["b_k"], p["b_v"]]))
        mha.out_proj.weight.copy_(p["w_o"])
        mha.out_proj.bias.copy_(p["b_o"])
        x = torch.from_numpy(t["x"].value)
        out, weights = mha(x, x, x, need_weights=True, average_attn_weights=False)
    np.testing.assert_allclose(t["output"].value, out.numpy(), rtol=1e-12, atol=1e-13)
    np.testing.assert_allclose(t["weights"].value, weights.numpy(), rtol=1e-12, atol=1e-13)


@pytest.mark.parametrize("backend", ["numpy", "torch"])
@pytest.mark.parametrize("kind", ["none", "causal", "user float"])
def test_the_same_bits_whatever_is_kept_and_on_any_number_of_threads(
    backend: str, kind: str
) -> None:
    options, mask = MASKS[kind]
    cfg = AttentionConfig(batch=2, seq=40, hidden=32, heads=4, softcap=20.0, **options)
    every = trace_attention(cfg, backend, mask=mask)
    for keep, threads in ((False, 1), ({"output"}, 2), (True, 3)):
        other = trace_attention(cfg, backend, mask=mask, keep_values=keep, threads=threads)
        got = other["output"].value if keep else None
        if got is not None:
            np.testing.assert_array_equal(got, every["output"].value)
        assert [(s.name, s.flops, s.inputs, s.nonfinite) for s in other] == [
            (s.name, s.flops, s.inputs, s.nonfinite) for s in every
        ]
    only = trace_attention(cfg, backend, mask=mask, keep_values={"output"}, threads=1)
    np.testing.assert_array_equal(only["output"].value, every["output"].value)


@pytest.mark.parametrize("backend", ["numpy", "torch"])
def test_recipes_give_back_exactly_what_the_softmax_read(backend: str) -> None:
    options, mask = MASKS["user bool"]
    cfg = AttentionConfig(batch=2, seq=40, hidden=32, heads=4, softcap=20.0, scale=0.3, **options)
    t = trace_attention(cfg, backend, mask=mask)
    scores, scaled, capped, masked = (t[n].value for n in ("scores", "scaled", "capped", "masked"))
    np.testing.assert_array_equal(scaled, scores * np.float32(0.3))
    if backend == "numpy":
        np.testing.assert_array_equal(
            capped, np.tanh(scaled * np.float32(1 / 20.0)) * np.float32(20.0)
        )
    else:
        np.testing.assert_array_equal(
            capped, (torch.tanh(torch.from_numpy(scaled) * (1 / 20.0)) * 20.0).numpy()
        )
    np.testing.assert_array_equal(masked, np.where(mask, capped, -np.inf))
    softmax = (
        NumpyBackend().softmax(masked)
        if backend == "numpy"
        else torch.softmax(torch.from_numpy(masked), -1).numpy()
    )
    np.testing.assert_array_equal(t["weights"].value, softmax)
    q, k_t = t["q"].value, np.swapaxes(t["k"].value, -2, -1)
    np.testing.assert_allclose(scores, np.matmul(q, k_t), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("backend", ["numpy", "torch"])
def test_rows_without_any_key_get_zero_weights(backend: str) -> None:
    user = np.ones((40, 40), dtype=bool)
    user[5] = False  # query 5 sees no key
    cfg = AttentionConfig(batch=2, seq=40, hidden=16, heads=2)
    with pytest.warns(UserWarning, match="4 query row"):
        t = trace_attention(cfg, backend, mask=user)
    assert not t["weights"].value[:, :, 5].any()
    assert not t["context"].value[:, :, 5].any()
    assert t.first_nonfinite is None


def test_non_finite_values_are_counted_step_by_step() -> None:
    cfg = AttentionConfig(seq=40, hidden=16, heads=2)
    x = np.random.default_rng(0).standard_normal((40, 16)).astype(np.float32)
    x[3, 0] = np.inf  # query and key 3: inf in q and k, then NaN in their scores
    t = trace_attention(cfg, tensors={"x": x})
    for name in ("scores", "scaled", "weights"):
        value = t[name].value
        assert t[name].nonfinite == value.size - np.count_nonzero(np.isfinite(value)) > 0
    assert t.first_nonfinite is not None
    assert t.first_nonfinite.name == "x"
    assert t["context"].nonfinite > 0
    assert t["output"].nonfinite > 0


def test_the_records_are_those_of_the_shape_backend() -> None:
    cfg = AttentionConfig(
        batch=2,
        seq=40,
        hidden=32,
        heads=4,
        kv_heads=2,
        causal=True,
        softcap=30.0,
        rope=True,
        qk_norm="head",
    )
    computed, shapes = trace_attention(cfg), trace_attention(cfg, "shape")
    fields = [(s.name, s.shape, s.op, s.axes, s.view, s.flops, s.terms, s.inputs) for s in shapes]
    assert [
        (s.name, s.shape, s.op, s.axes, s.view, s.flops, s.terms, s.inputs) for s in computed
    ] == fields
    assert computed.peak_bytes == shapes.peak_bytes


def test_a_dropped_trace_frees_its_weights_at_once_without_the_garbage_collector() -> None:
    import gc
    import weakref

    cfg = AttentionConfig(batch=2, seq=40, hidden=16, heads=2, causal=True)
    t = trace_attention(cfg)
    weights = weakref.ref(t["weights"].value)
    gc.disable()  # no cycle may hold the (B, h, S, N) buffers until the next collection
    try:
        del t
        assert weights() is None
    finally:
        gc.enable()


@pytest.mark.parametrize("backend", ["numpy", "torch"])
def test_the_next_trace_reuses_freed_weights_memory_never_memory_still_in_use(
    backend: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from attntrace.backends import spare, torch_backend

    monkeypatch.setattr(spare, "SPARE_MIN_BYTES", 1)  # every buffer recycled
    monkeypatch.setattr(torch_backend, "HUGE_PAGES_NUMEL", 1)  # torch's too
    cfg = AttentionConfig(batch=2, seq=40, hidden=16, heads=2, causal=True)
    spare.release()
    first = trace_attention(cfg, backend)
    held = first["weights"].value[1]  # a view the caller keeps
    kept = held.copy()
    expected = trace_attention(cfg, backend, keep_values={"weights"})["weights"].value.copy()
    del first
    for seed in (1, 0):  # a new trace (other values) may not write into the view still held
        t = trace_attention(AttentionConfig(**{**cfg.__dict__, "seed": seed}), backend)
        np.testing.assert_array_equal(held, kept)
    np.testing.assert_array_equal(t["weights"].value, expected)
    where = t["weights"].value.__array_interface__["data"][0]
    del t  # nothing holds its weights now: the next trace writes into their memory
    again = trace_attention(cfg, backend)
    assert again["weights"].value.__array_interface__["data"][0] == where
    np.testing.assert_array_equal(again["weights"].value, expected)
    spare.release()


@pytest.mark.parametrize("kind", ["none", "causal", "key padding", "user bool"])
def test_torch_context_is_torchs_own_sdpa_and_weights_a_recipe_of_the_same_bits(kind: str) -> None:
    from attntrace.trace import Lazy

    options, mask = MASKS[kind]
    cfg = AttentionConfig(batch=2, seq=40, hidden=32, heads=4, kv_heads=2, **options)
    t = trace_attention(cfg, "torch", mask=mask)
    assert isinstance(t["weights"].__dict__["value"], Lazy)  # not formed until read
    q, k, v = (torch.from_numpy(t[n].value) for n in ("q", "k_rep", "v_rep"))  # (B, h, S, d)
    from attntrace.tools.reference import reference_mask

    keep, is_causal = reference_mask(
        cfg, mask
    )  # what a torch user passes: is_causal for causal alone
    ref = F.scaled_dot_product_attention(q, k, v, attn_mask=keep, is_causal=is_causal)
    np.testing.assert_array_equal(t["context"].value, ref.numpy())  # the very kernel, the very call
    head = t["weights"].part((1, 3))  # (S, N) of one batch item and head, made alone
    assert isinstance(t["weights"].__dict__["value"], Lazy)
    weights = t["weights"].value  # (B, h, S, N)
    np.testing.assert_array_equal(head, weights[1, 3])
    softmax = torch.softmax(
        torch.from_numpy(t["masked" if "masked" in t else "scaled"].value), -1
    ).numpy()
    np.testing.assert_array_equal(weights, softmax)
    np.testing.assert_allclose(weights @ t["v_rep"].value, t["context"].value, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("backend", ["numpy", "torch"])
def test_one_head_of_a_recipe_is_made_alone_with_the_bits_of_the_whole(backend: str) -> None:
    options, mask = MASKS["user float"]
    cfg = AttentionConfig(batch=2, seq=40, hidden=32, heads=4, softcap=20.0, **options)
    t = trace_attention(cfg, backend, mask=mask)
    parts = {
        name: t[name].part((1, 2)) for name in ("scores", "scaled", "capped", "masked", "weights")
    }
    for name, part in parts.items():
        assert part.shape == (40, 40)
        np.testing.assert_array_equal(part, t[name].value[1, 2])


def test_torch_with_a_soft_cap_runs_the_blocks_and_keeps_its_weights() -> None:
    cfg = AttentionConfig(batch=2, seq=40, hidden=32, heads=4, softcap=20.0)
    t = trace_attention(cfg, "torch")
    assert isinstance(t["weights"].__dict__["value"], np.ndarray)  # formed by the blocks
    np.testing.assert_allclose(
        t["weights"].value @ t["v"].value, t["context"].value, rtol=1e-6, atol=1e-7
    )


@pytest.mark.parametrize("backend", ["numpy", "torch"])
@pytest.mark.parametrize(
    "options", [{"causal": True}, {"causal": True, "window": 7}, {"window": 5}]
)
def test_keys_the_rules_hide_are_left_out_within_the_rounding_of_the_whole_mask(
    backend: str, options: dict[str, object]
) -> None:
    from attntrace.backends import get_backend
    from attntrace.engine import eager

    cfg = AttentionConfig(batch=2, seq=40, hidden=32, heads=4, softcap=20.0, **options)  # blocks
    by_rule = trace_attention(cfg, backend)
    be = get_backend(backend)
    rows = eager.Rows(
        be=be,
        q=None,
        k_t=None,
        v=None,
        factor=1.0,
        mask=1,
        causal=bool(options.get("causal")),
        window=options.get("window"),  # type: ignore[arg-type]  # int or None
        finite=True,
    )
    assert rows.skips() == (backend == "numpy")  # torch's MKL: kernels by size, no skipping
    plain = AttentionConfig(batch=2, seq=40, hidden=32, heads=4, softcap=20.0)
    as_file = trace_attention(plain, backend, mask=by_rule["mask"].value)  # the same mask, no rule
    masked, whole = by_rule["masked"].value, as_file["masked"].value  # (B, h, S, N)
    np.testing.assert_array_equal(np.isneginf(masked), np.isneginf(whole))  # the same keys hidden
    seen = np.isfinite(whole)
    q, k_t = by_rule["q"].value, np.swapaxes(by_rule["k"].value, -2, -1)
    # fewer columns of k_t: the same d products per score, maybe summed in another order; the
    # scale and C·tanh(s / C) shrink a difference, and round once more each (8 eps, relative)
    allowed = cfg.score_scale * _dot_error(q, k_t) + 8 * EPS * np.abs(whole)
    apart = np.abs(masked[seen] - whole[seen])  # the scores of the keys some query sees
    assert (apart <= allowed[seen]).all()
    score_error = float(apart.max())
    _assert_softmax_close(by_rule["weights"].value, as_file["weights"].value, score_error)
    np.testing.assert_allclose(
        by_rule["output"].value, as_file["output"].value, rtol=1e-5, atol=1e-6
    )


@pytest.mark.parametrize("backend", ["numpy", "torch"])
@pytest.mark.parametrize("kind", ["none", "window", "key padding", "user float"])
def test_remade_weights_hold_no_buffer_and_give_the_bits_of_held_ones(
    backend: str, kind: str
) -> None:
    from attntrace.trace import Lazy

    options, mask = MASKS[kind]
    cfg = AttentionConfig(batch=2, seq=40, hidden=32, heads=4, softcap=20.0, **options)  # blocks
    held = trace_attention(cfg, backend, mask=mask)
    every = {step.name for step in held.steps}
    remade = trace_attention(cfg, backend, mask=mask, keep_values=every, remake={"weights"})
    assert isinstance(held["weights"].__dict__["value"], np.ndarray)
    assert isinstance(remade["weights"].__dict__["value"], Lazy)
    np.testing.assert_array_equal(remade["context"].value, held["context"].value)  # scratch or not
    np.testing.assert_array_equal(remade["output"].value, held["output"].value)
    head = remade["weights"].part((1, 3))  # (S, N): this head alone
    assert isinstance(remade["weights"].__dict__["value"], Lazy)  # still not made whole
    np.testing.assert_array_equal(head, held["weights"].value[1, 3])
    np.testing.assert_array_equal(remade["weights"].value, held["weights"].value)
    assert remade["weights"].flops == held["weights"].flops
    assert remade["weights"].nonfinite == held["weights"].nonfinite


@pytest.mark.parametrize("backend", ["numpy", "torch"])
@pytest.mark.parametrize("kind", ["none", "causal", "key padding", "user float"])
@pytest.mark.parametrize("softcap", [20.0, None])  # torch without a soft-cap: its fused kernel
def test_the_held_head_of_remade_weights_is_read_as_the_blocks_wrote_it(
    monkeypatch: pytest.MonkeyPatch, backend: str, kind: str, softcap: float | None
) -> None:
    from attntrace.trace import Lazy

    options, mask = MASKS[kind]
    cfg = AttentionConfig(batch=2, seq=40, hidden=32, heads=4, softcap=softcap, **options)
    whole = trace_attention(cfg, backend, mask=mask)["weights"].value  # (B, h, S, N), kept
    remade = trace_attention(
        cfg, backend, mask=mask, keep_values={"weights"}, remake={"weights"}, hold=(1, 2)
    )
    assert isinstance(remade["weights"].__dict__["value"], Lazy)  # no (B, h, S, N) buffer
    made = _spy_on_makes(monkeypatch)
    np.testing.assert_array_equal(remade["weights"].part((1, 2)), whole[1, 2])
    fused = backend == "torch" and softcap is None and kind != "user float"
    assert made == ([(1, 2)] if fused else [])  # held as the blocks wrote it: not made again
    np.testing.assert_array_equal(remade["weights"].part((0, 3)), whole[0, 3])  # made alone
    assert made[-1] == (0, 3)
    np.testing.assert_array_equal(remade["weights"].value, whole)


def _spy_on_makes(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, ...] | None]:
    """The lead index of every :meth:`Rows.make` from now on (None: the whole step)."""
    from attntrace.engine import eager

    made: list[tuple[int, ...] | None] = []
    original = eager.Rows.make

    def spy(self: eager.Rows[object], upto: str, at: tuple[int, ...] | None = None) -> object:
        made.append(at)
        return original(self, upto, at)

    monkeypatch.setattr(eager.Rows, "make", spy)
    return made


@pytest.mark.parametrize("hold", [(4,), (0, 0), (-1,), (0.0,)])
def test_a_held_head_outside_the_sizes_is_refused(hold: tuple[int, ...]) -> None:
    from attntrace.errors import ConfigError

    cfg = AttentionConfig(seq=40, hidden=32, heads=4)
    with pytest.raises(
        ConfigError, match=r"is not a head of these sizes; give \(head,\) with head in 0..3"
    ):
        trace_attention(cfg, keep_values={"weights"}, remake={"weights"}, hold=hold)


def test_run_view_holds_the_head_it_shows_and_makes_no_other(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``attntrace run`` (table view) keeps the weights of the head it shows only, as the
    trace computes them: nothing is made again."""
    from typer.testing import CliRunner

    from attntrace.cli import app

    made = _spy_on_makes(monkeypatch)
    done = CliRunner().invoke(
        app, ["run", "--seq", "40", "--hidden", "32", "--heads", "4", "--head", "2"]
    )
    assert done.exit_code == 0, done.output
    assert "attention weights, head 2" in done.output
    assert made == []  # the head shown held by the trace; no (h, S, N) buffer, no remake
    shown = trace_attention(AttentionConfig(seq=40, hidden=32, heads=4))["weights"].value[2]
    assert f"largest weight {shown.max():.4f}" in done.output


def test_context_and_merged_are_counted_unless_the_bounds_prove_them_finite() -> None:
    cfg = AttentionConfig(seq=40, hidden=32, heads=4)
    plain = trace_attention(cfg)
    assert plain["context"].nonfinite == plain["merged"].nonfinite == 0
    v = np.full((32, 32), 3e38, dtype=np.float32)  # v overflows: context holds inf, nothing proven
    big = trace_attention(cfg, tensors={"w_v": v})
    context, merged = big["context"].value, big["merged"].value
    assert big["context"].nonfinite == int(np.count_nonzero(~np.isfinite(context))) > 0
    assert (
        big["merged"].nonfinite
        == int(np.count_nonzero(~np.isfinite(merged)))
        == big["context"].nonfinite
    )


@pytest.mark.parametrize("spread", [1.0, 40.0])  # scores of a few units / of ±hundreds
def test_the_row_max_is_left_out_only_where_the_bounds_prove_it_changes_nothing(
    spread: float,
) -> None:
    from attntrace.engine import eager

    be, rng = NumpyBackend(), np.random.default_rng(3)
    q, k, v = (rng.standard_normal((2, 30, 8)).astype(np.float32) for _ in range(3))  # (h, S, d)
    k_t = np.swapaxes(k, -2, -1)  # (h, d, N)
    rows = eager.bounded(eager.Rows(be=be, q=q * spread, k_t=k_t, v=v, factor=8**-0.5, threads=2))
    assert rows.finite
    assert rows.in_range == (spread == 1.0)
    weights, context = np.empty((2, 30, 30), np.float32), np.empty((2, 30, 8), np.float32)
    rows.run(weights, context)
    # the scores the blocks read: made again by the same block calls (a recipe)
    scaled = rows.make("scaled")  # (h, S, N)
    whole = np.matmul(q * spread, k_t) * np.float32(8**-0.5)  # one call: maybe other roundings
    allowed = 8**-0.5 * _dot_error(q * spread, k_t) + EPS * np.abs(whole)
    assert (np.abs(scaled - whole) <= allowed).all()
    np.testing.assert_array_equal(weights, be.softmax(scaled))  # the bits of the whole softmax
    from attntrace.backends.numpy_backend import _exp_range

    lo, hi = _exp_range(np.dtype(np.float32), 30)
    top = scaled.max(-1, keepdims=True)  # (h, S, 1)
    exact = np.exp(np.where((top >= lo) & (top <= hi), scaled, scaled - top))  # row by row
    assert ((top < lo) | (top > hi)).any() != rows.in_range  # some rows shifted at spread 40
    np.testing.assert_array_equal(weights, exact / np.einsum("...i->...", exact)[..., None])
    want = torch.softmax(torch.from_numpy(scaled).double(), -1).numpy()
    np.testing.assert_allclose(weights, want, rtol=2e-6, atol=1e-30)


def test_the_softmax_shifts_exactly_the_rows_whose_max_leaves_the_range() -> None:
    from attntrace.backends.numpy_backend import _exp_range, _row_shift

    lo, hi = _exp_range(np.dtype(np.float32), 4)
    x = np.array(
        [
            [1.0, 2.0, -3.0, 0.5],
            [hi + 1, 0.0, 0.0, 0.0],
            [lo - 1, lo - 2, -np.inf, lo - 9],
            [-np.inf] * 4,
            [np.nan, 0.0, 1.0, 2.0],
        ],
        dtype=np.float32,
    )
    shift = _row_shift(x)[:, 0]
    np.testing.assert_array_equal(shift, [0, np.float32(hi + 1), np.float32(lo - 1), 0, np.nan])
    w = NumpyBackend().softmax(x)
    assert np.isfinite(w[:4]).all()  # huge, tiny, masked rows: no NaN
    assert (w[3] == 0).all()
    np.testing.assert_allclose(w[:3].sum(-1), 1.0, rtol=1e-6)
    np.testing.assert_array_equal(w[2][[1, 3]] > 0, [True, True])  # tiny scores: not underflowed
