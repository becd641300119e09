"""The tiled (flash) algorithm equals eager, shows its tiles and never forms the (S, S) matrix."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from attntrace import AttentionConfig, ConfigError, trace_attention
from attntrace.engine.flash import (
    FLASH_MASK_STEPS,
    FLASH_STEPS,
    FLASH_VARIANT_STEPS,
    blocks,
    skipped_tiles,
    tiles,
)
from attntrace.engine.masks import MaskWarning


@pytest.mark.parametrize("block_size", [1, 5, 16, 37, 64, 128])
@pytest.mark.parametrize("batch", [None, 2])
def test_flash_equals_eager(compute_backend: str, block_size: int, batch: int | None) -> None:
    eager = AttentionConfig(batch=batch, seq=37, hidden=32, heads=4, dtype="float64")
    flash = AttentionConfig(
        batch=batch,
        seq=37,
        hidden=32,
        heads=4,
        dtype="float64",
        algorithm="flash",
        block_size=block_size,
    )
    want = trace_attention(eager, compute_backend)
    got = trace_attention(flash, compute_backend, keep_values={"context", "output"})
    for name in ("context", "output"):
        assert got[name].value is not None
        np.testing.assert_allclose(
            got[name].value, want[name].value, rtol=1e-10, atol=1e-12, err_msg=name
        )


def test_flash_equals_eager_in_float32_with_buffers_reused(compute_backend: str) -> None:
    cfg = AttentionConfig(seq=300, hidden=64, heads=4)
    want = trace_attention(cfg, compute_backend, keep_values={"output"})
    got = trace_attention(
        AttentionConfig(seq=300, hidden=64, heads=4, algorithm="flash", block_size=128),
        compute_backend,
        keep_values={"output"},
    )
    np.testing.assert_allclose(got["output"].value, want["output"].value, rtol=1e-4, atol=1e-6)


def test_the_trace_shows_tiles() -> None:
    cfg = AttentionConfig(batch=2, seq=300, hidden=64, heads=4, algorithm="flash", block_size=128)
    trace = trace_attention(cfg, "shape")
    assert "scores" not in trace
    assert "weights" not in trace
    assert [n for n in trace.names if n in FLASH_STEPS] == list(FLASH_STEPS)
    assert trace["q_block"].shape == (2, 4, 128, 16)
    assert trace["k_block"].shape == trace["v_block"].shape == (2, 4, 128, 16)
    assert trace["s_tile"].shape == (2, 4, 128, 128)
    assert trace["s_tile"].axes == ("B", "h", "Br", "Bc")
    assert trace["m"].shape == trace["l"].shape == (2, 4, 128)
    tiles = math.ceil(300 / 128) ** 2
    assert trace["s_tile"].repeat == tiles
    assert trace["q_block"].repeat == 3
    assert trace["s_tile"].flops == 2 * 2 * 4 * 300 * 300 * 16  # every tile, the last ones smaller
    assert trace["context"].shape == (2, 4, 300, 16)


def test_flash_peak_does_not_hold_the_score_matrix() -> None:
    cfg = AttentionConfig(seq=131072, hidden=8192, heads=64, algorithm="flash", block_size=128)
    trace = trace_attention(cfg, "shape")
    assert trace.score_bytes == 64 * 128 * 128 * 4
    assert trace.peak_bytes < 20 * 2**30  # x-sized tensors only; eager would need 8 TiB
    assert trace["s_tile"].repeat == 1024 * 1024


def test_blocks_cover_the_axis() -> None:
    for n in (1, 7, 128, 300):
        for size in (1, 3, 128):
            every = list(blocks(n, size))
            assert sum(stop - start for start, stop, _ in every) == n
            grouped = list(blocks(n, size, every=False))
            assert sum((stop - start) * times for start, stop, times in grouped) == n
            assert sum(times for *_, times in grouped) == len(every)


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("algorithm", "tiled", "unknown algorithm"),
        ("block_size", 0, "--block-size"),
        ("block_size", True, "--block-size"),
    ],
)
def test_config_checks_the_algorithm(field: str, value: object, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        AttentionConfig(**{field: value})  # type: ignore[arg-type]


def test_run_command_traces_flash_and_refuses_eager_beyond_the_budget() -> None:
    from typer.testing import CliRunner

    from attntrace.cli import app

    runner = CliRunner()
    flash = runner.invoke(
        app,
        [
            "run",
            "--seq",
            "300",
            "--hidden",
            "64",
            "--heads",
            "4",
            "--algorithm",
            "flash",
            "--block-size",
            "128",
            "--count",
            "macs",
        ],
        env={"COLUMNS": "80"},
    )
    assert flash.exit_code == 0, flash.output
    assert "s_tile" in flash.stdout
    assert "never formed whole" in flash.stdout
    assert "MACs" in flash.stdout
    eager = runner.invoke(app, ["run", "--seq", "100000", "--max-memory", "1GiB"])
    assert eager.exit_code == 2
    assert "--algorithm flash" in eager.stderr
    assert "--backend shape" in eager.stderr


# --- masks inside the tiles -------------------------------------------------------------------

MASKED: dict[str, dict[str, object]] = {  # name: config fields
    "causal": {"batch": 2, "seq": 7, "causal": True},
    "padding": {"batch": 3, "seq": 7, "key_lengths": (7, 3, 1)},
    "causal+padding": {"batch": 2, "seq": 7, "causal": True, "key_lengths": (2, 7)},
    "cross causal": {"seq": 5, "kv_seq": 9, "kv_hidden": 6, "causal": True},
    "cross short causal": {"seq": 9, "kv_seq": 4, "causal": True},
    "gqa causal": {"batch": 2, "seq": 7, "heads": 4, "kv_heads": 2, "causal": True, "rope": True},
    "mqa padding": {"batch": 2, "seq": 7, "heads": 4, "kv_heads": 1, "key_lengths": (4, 6)},
    "window": {"batch": 2, "seq": 9, "window": 3},
    "causal window": {"seq": 9, "causal": True, "window": 2, "key_lengths": None},
    "causal window+padding": {
        "batch": 2,
        "seq": 9,
        "causal": True,
        "window": 4,
        "key_lengths": (9, 5),
    },
    "cross window": {"seq": 6, "kv_seq": 9, "window": 2},
}


def _user_masks(rng: np.random.Generator) -> dict[str, np.ndarray]:
    keep = rng.random((2, 1, 7, 7)) < 0.6
    keep[1, 0, 3] = False  # a query row without any key
    keep[0, 0, :, :2] = False  # two keys nobody sees: the first tiles of some rows are all masked
    additive = np.where(rng.random((7, 7)) < 0.7, rng.standard_normal((7, 7)), -np.inf)
    additive[5] = -np.inf
    return {
        "bool (B, 1, S, N)": keep,
        "additive (S, N)": additive,
        "bool (N,)": rng.random(7) < 0.5,
    }


def _flash_vs_eager(
    fields: dict[str, object],
    mask: np.ndarray | None,
    backend: str,
    block_size: int,
    dtype: str = "float64",
) -> None:
    sizes: dict[str, object] = {"hidden": 16, "heads": 2, "dtype": dtype, **fields}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", MaskWarning)
        want = trace_attention(AttentionConfig(**sizes), backend, mask=mask)  # type: ignore[arg-type]
        got = trace_attention(
            AttentionConfig(**sizes, algorithm="flash", block_size=block_size), backend, mask=mask
        )  # type: ignore[arg-type]
    assert got.notes == want.notes
    tol = {"float64": 1e-10, "float32": 1e-5}[dtype]
    for name in ("context", "output"):
        assert not np.isnan(got[name].value).any()
        np.testing.assert_allclose(
            got[name].value, want[name].value, rtol=tol, atol=tol, err_msg=name
        )


@pytest.mark.parametrize("block_size", [1, 2, 3, 7, 64])
@pytest.mark.parametrize("case", sorted(MASKED))
def test_flash_with_a_builtin_mask_equals_eager(
    compute_backend: str, case: str, block_size: int
) -> None:
    _flash_vs_eager(MASKED[case], None, compute_backend, block_size)


@pytest.mark.parametrize("block_size", [1, 3, 4, 7])
@pytest.mark.parametrize("kind", ["bool (B, 1, S, N)", "additive (S, N)", "bool (N,)"])
def test_flash_with_a_mask_file_equals_eager(
    compute_backend: str, kind: str, block_size: int
) -> None:
    mask = _user_masks(np.random.default_rng(0))[kind]
    _flash_vs_eager(
        {"batch": 2, "seq": 7, "causal": kind.startswith("bool (B")},
        mask,
        compute_backend,
        block_size,
    )


def test_flash_rows_without_any_key_are_zeros_with_the_note(compute_backend: str) -> None:
    keep = np.ones((2, 1, 5, 5), dtype=bool)
    keep[1, 0, 2] = False
    cfg = AttentionConfig(batch=2, seq=5, hidden=8, heads=2, algorithm="flash", block_size=2)
    with pytest.warns(MaskWarning, match="2 query row"):
        t = trace_attention(cfg, compute_backend, mask=keep)
    assert np.all(t["context"].value[1, :, 2] == 0.0)
    assert np.isfinite(t["output"].value).all()


def test_flash_float32_with_masks_stays_close(compute_backend: str) -> None:
    _flash_vs_eager(
        {"batch": 2, "seq": 7, "causal": True, "key_lengths": (3, 7)},
        None,
        compute_backend,
        3,
        "float32",
    )


def test_the_trace_shows_the_tile_mask_and_skipped_causal_tiles() -> None:
    cfg = AttentionConfig(
        batch=2,
        seq=300,
        hidden=64,
        heads=4,
        causal=True,
        key_lengths=(300, 10),
        algorithm="flash",
        block_size=128,
    )
    trace = trace_attention(cfg, "shape")
    names = trace.names
    assert names[names.index("mask") + 1] == "context"
    assert names[names.index("s_tile") : names.index("m")] == ("s_tile", *FLASH_MASK_STEPS)
    assert trace["mask"].shape == (2, 1, 300, 300)
    assert trace["mask_tile"].shape == (2, 1, 128, 128)
    assert trace["mask_tile"].axes == ("B", "1", "Br", "Bc")
    assert not trace["mask_tile"].view  # each tile's mask is made from the rules, ...
    assert trace["mask"].view  # ... the whole mask never exists
    assert trace["mask_tile"].flops == 0
    assert trace["s_masked"].op == "where(mask_tile, s_tile, -inf)"
    assert (
        trace["s_tile"].repeat == trace["s_masked"].repeat == 6
    )  # 3 of the 9 tiles lie above the diagonal
    assert skipped_tiles(cfg) == 3
    assert "3 tiles above the diagonal skipped" in trace["s_tile"].op
    assert trace["s_masked"].flops == 2 * 4 * sum(
        (i1 - i0) * (j1 - j0)
        for (i0, i1, _), kv in tiles(300, 300, 128, causal=True)
        for j0, j1, _ in kv
    )


@pytest.mark.parametrize("block_size", [1, 2, 3, 5])
def test_shape_backend_gives_the_flash_mask_costs_of_numpy(block_size: int) -> None:
    cfg = AttentionConfig(
        batch=2,
        seq=7,
        kv_seq=5,
        hidden=8,
        heads=2,
        causal=True,
        key_lengths=(5, 2),
        algorithm="flash",
        block_size=block_size,
    )
    computed, traced = trace_attention(cfg, "numpy"), trace_attention(cfg, "shape")
    assert [(s.name, s.shape, s.repeat, s.flops) for s in computed] == [
        (s.name, s.shape, s.repeat, s.flops) for s in traced
    ]


def test_flash_with_masks_at_huge_sizes_allocates_nothing() -> None:
    cfg = AttentionConfig(
        batch=2,
        seq=131072,
        hidden=8192,
        heads=64,
        kv_heads=8,
        causal=True,
        key_lengths=(131072, 5000),
        algorithm="flash",
        block_size=128,
    )
    trace = trace_attention(cfg, "shape")
    assert trace["mask"].shape == (2, 1, 131072, 131072)
    assert trace["s_tile"].repeat == 1024 * 1025 // 2  # the tiles on and below the diagonal
    assert trace["s_masked"].flops == 2 * 64 * 128 * 128 * trace["s_masked"].repeat


@pytest.mark.slow
@settings(max_examples=40, deadline=None)
@given(
    seq=st.integers(1, 9),
    kv_seq=st.none() | st.integers(1, 9),
    block=st.integers(1, 10),
    causal=st.booleans(),
    batch=st.integers(1, 3),
    data=st.data(),
)
def test_flash_equals_eager_with_random_masks(
    seq: int, kv_seq: int | None, block: int, causal: bool, batch: int, data: st.DataObject
) -> None:
    keys = kv_seq or seq
    lengths = tuple(data.draw(st.lists(st.integers(1, keys), min_size=batch, max_size=batch)))
    seed = data.draw(st.integers(0, 2**16))
    user = (
        np.random.default_rng(seed).random((batch, 1, seq, keys)) < 0.7
        if data.draw(st.booleans())
        else None
    )
    fields = {
        "batch": batch,
        "seq": seq,
        "kv_seq": kv_seq,
        "causal": causal,
        "key_lengths": lengths,
        "seed": seed,
    }
    _flash_vs_eager(fields, user, "numpy", block)


@pytest.mark.slow
def test_run_command_traces_flash_with_a_mask_file(tmp_path: object) -> None:
    from pathlib import Path

    from typer.testing import CliRunner

    from attntrace.cli import app

    path = Path(str(tmp_path)) / "mask.npy"
    np.save(path, np.tri(6, dtype=bool))
    result = CliRunner().invoke(
        app,
        [
            "run",
            "--seq",
            "6",
            "--hidden",
            "8",
            "--heads",
            "2",
            "--algorithm",
            "flash",
            "--block-size",
            "4",
            "--causal",
            "--mask",
            str(path),
            "--format",
            "json",
        ],
    )
    assert result.exit_code == 0, result.output
    assert '"mask_tile"' in result.stdout
    assert '"s_masked"' in result.stdout


# --- default tiles and --window ------------------------------------------------------------------


def test_default_tiles_fill_two_mib_and_equal_eager(compute_backend: str) -> None:
    fields = {"batch": 2, "seq": 300, "hidden": 64, "heads": 2, "dtype": "float64", "causal": True}
    flash = AttentionConfig(**fields, algorithm="flash")  # type: ignore[arg-type]
    assert flash.tile_sizes() == {
        "Br": 128,
        "Bc": 300,
    }  # (B, h, Br, N): 2 * 2 * 128 * 300 * 8 bytes < 2 MiB
    # 2 * 2 * 128 * 512 * 8 bytes = 2 MiB
    assert AttentionConfig(**{**fields, "seq": 4096}, algorithm="flash").tile_sizes() == {
        "Br": 128,
        "Bc": 512,
    }  # type: ignore[arg-type]
    assert AttentionConfig(**fields, algorithm="flash", block_size=7).tile_sizes() == {
        "Br": 7,
        "Bc": 7,
    }  # type: ignore[arg-type]
    want = trace_attention(AttentionConfig(**fields), compute_backend)  # type: ignore[arg-type]
    got = trace_attention(flash, compute_backend)
    assert got["s_tile"].shape == (2, 2, 128, 300)
    assert got["s_tile"].repeat == 3
    np.testing.assert_allclose(got["output"].value, want["output"].value, rtol=1e-12, atol=1e-12)


def _band_tiles(seq: int, keys: int, rows: int, cols: int, window: int, causal: bool) -> int:
    """Tiles holding a (query, key) pair inside the band, by brute force over every pair."""
    from attntrace.engine.masks import window_band

    band = window_band(seq, keys, window) & (np.tri(seq, keys, dtype=bool) if causal else True)
    return sum(
        bool(band[i : i + rows, j : j + cols].any())
        for i in range(0, seq, rows)
        for j in range(0, keys, cols)
    )


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize(("window", "block"), [(1, 3), (3, 2), (5, 4), (40, 4)])
def test_window_skips_the_tiles_outside_the_band_and_equals_eager(
    compute_backend: str, window: int, block: int, causal: bool
) -> None:
    fields = {
        "batch": 2,
        "seq": 23,
        "hidden": 16,
        "heads": 2,
        "dtype": "float64",
        "window": window,
        "causal": causal,
    }
    flash = AttentionConfig(**fields, algorithm="flash", block_size=block)  # type: ignore[arg-type]
    got = trace_attention(flash, compute_backend)
    want = trace_attention(AttentionConfig(**fields), compute_backend)  # type: ignore[arg-type]
    np.testing.assert_allclose(got["output"].value, want["output"].value, rtol=1e-12, atol=1e-12)
    visited = _band_tiles(23, 23, block, block, window, causal)
    total = math.ceil(23 / block) ** 2
    assert got["s_tile"].repeat == got["s_masked"].repeat == visited
    assert skipped_tiles(flash) == total - visited
    if window < 23 - block:  # some tiles lie wholly outside the band
        assert f"{total - visited} tiles" in got["s_tile"].op
        assert (
            "outside the window" if not causal else "above the diagonal or outside the window"
        ) in got["s_tile"].op
    shapes = trace_attention(flash, "shape")
    assert [(s.name, s.repeat, s.flops) for s in shapes] == [
        (s.name, s.repeat, s.flops) for s in got
    ]


def test_window_counts_tiles_in_closed_form_at_huge_sizes() -> None:
    cfg = AttentionConfig(
        seq=131072,
        hidden=4096,
        heads=32,
        causal=True,
        window=4096,
        algorithm="flash",
        block_size=128,
    )
    trace = trace_attention(cfg, "shape")
    blocks_ = 131072 // 128
    # each query block sees the 4096 / 128 = 32 key blocks before it (fewer at the start) and
    # its own
    assert trace["s_tile"].repeat == sum(min(b, 32) + 1 for b in range(blocks_))
    assert skipped_tiles(cfg) == blocks_ * blocks_ - trace["s_tile"].repeat


def test_tiles_run_quietly_still_count_non_finite_values(compute_backend: str) -> None:
    """A NaN token: q, k and v rows of NaN, so every tile touching it holds NaN scores; the
    tiles after the first are not recorded but still counted."""
    cfg = AttentionConfig(seq=10, hidden=8, heads=2, dtype="float64")
    x = np.random.default_rng(0).standard_normal((10, 8))
    x[4] = np.nan
    eager = trace_attention(cfg, compute_backend, tensors={"x": x})
    flash = trace_attention(
        AttentionConfig(**{**cfg.__dict__, "algorithm": "flash", "block_size": 3}),
        compute_backend,
        tensors={"x": x},
    )
    assert flash["s_tile"].nonfinite == eager["scores"].nonfinite == 2 * (10 + 10 - 1)
    assert flash.notes[0].startswith("non-finite values (NaN or inf) first appear at step 'x'")


def test_finite_inputs_are_proven_finite_by_the_bound() -> None:
    from attntrace.backends import get_backend
    from attntrace.engine.flash import _surely_finite

    be, ones = get_backend("numpy"), np.ones((1, 2, 4, 8), dtype=np.float16)
    cfg = AttentionConfig(seq=4, hidden=16, heads=2, dtype="float16")
    assert _surely_finite(cfg, be, (ones, ones, ones, None), None)
    big = ones * 200  # |s| may reach 8 * 200 * 200 / sqrt(8) = 113137 > 65504
    assert not _surely_finite(cfg, be, (big, big, ones, None), None)
    nan = ones.copy()
    nan[0, 0, 0, 0] = np.nan
    assert not _surely_finite(cfg, be, (ones, ones, nan, None), None)
    assert not _surely_finite(
        cfg, be, (ones, ones, ones, ones * 60000), None
    )  # T5's table adds to s


# --- --softcap and --relative-bias in the tiles ---------------------------------------------------

TILE_VARIANTS: dict[str, dict[str, object]] = {
    "softcap": {"softcap": 0.7},
    "softcap causal window": {"softcap": 2.0, "causal": True, "window": 4},
    "relative": {"relative_bias": "8,16", "scale": 1.0, "bias": False},
    "relative causal padding": {
        "relative_bias": "8,5,causal",
        "causal": True,
        "key_lengths": (11, 6),
    },
    "both": {"softcap": 1.5, "relative_bias": "16,32", "window": 5},
}


@pytest.mark.parametrize("block", [None, 1, 3, 4])
@pytest.mark.parametrize("case", list(TILE_VARIANTS))
def test_softcap_and_relative_bias_tiles_equal_eager(
    compute_backend: str, case: str, block: int | None
) -> None:
    fields = {
        "batch": 2,
        "seq": 11,
        "hidden": 16,
        "heads": 4,
        "dtype": "float64",
        **TILE_VARIANTS[case],
    }
    flash = AttentionConfig(**fields, algorithm="flash", block_size=block)  # type: ignore[arg-type]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", MaskWarning)
        want = trace_attention(AttentionConfig(**fields), compute_backend)  # type: ignore[arg-type]
        got = trace_attention(flash, compute_backend)
        shapes = trace_attention(flash, "shape")
    np.testing.assert_allclose(got["output"].value, want["output"].value, rtol=1e-12, atol=1e-12)
    assert got.notes == want.notes
    on = [
        n
        for n, field in zip(
            FLASH_VARIANT_STEPS, ("softcap", "relative_bias", "relative_bias"), strict=True
        )
        if field in fields
    ]
    names = got.names
    assert names[names.index("s_tile") + 1 : names.index("s_tile") + 1 + len(on)] == tuple(on)
    assert "position_bias" not in names  # nothing (S, N) wide
    assert "rel_onehot" not in names
    if "bias_tile" in names:
        Br, Bc = flash.blocks
        assert got["bias_tile"].shape == (4, Br, Bc)
        assert got["bias_tile"].inputs == ("rel_bias",)
        assert (
            got["s_biased"].op == f"{'s_capped' if 'softcap' in fields else 's_tile'} + bias_tile"
        )
    if "s_capped" in names:
        assert got["s_capped"].op.startswith(f"{fields['softcap']:g} * tanh(s_tile")
    if "s_masked" in names:  # applied to what came before the mask tile
        assert names[names.index("mask_tile") - 1] in got["s_masked"].op
    fields_of = ("name", "shape", "axes", "repeat", "flops", "inputs", "op")
    assert [[getattr(s, f) for f in fields_of] for s in shapes] == [
        [getattr(s, f) for f in fields_of] for s in got
    ]


def test_relative_bias_tile_costs_a_pick_per_bucket() -> None:
    cfg = AttentionConfig(
        seq=8, hidden=16, heads=4, relative_bias="8,16", algorithm="flash", block_size=4
    )
    trace = trace_attention(cfg, "shape")
    assert trace["bias_tile"].repeat == 4
    assert (
        trace["bias_tile"].flops == 2 * 8 * 8 * 8 * 4
    )  # onehot (Br, Bc, 8) @ table (8, h), every tile
    assert trace["s_biased"].flops == 4 * 8 * 8


def test_kept_tile_values_are_the_first_tiles_untouched_by_the_quiet_ones(
    compute_backend: str,
) -> None:
    cfg = AttentionConfig(
        batch=2, seq=10, hidden=8, heads=2, dtype="float64", algorithm="flash", block_size=4
    )
    t = trace_attention(cfg, compute_backend)
    q, k, v = (t[n].value for n in ("q", "k", "v"))
    s = (
        q[..., :4, :] * cfg.score_scale @ np.swapaxes(k[..., :4, :], -1, -2)
    )  # (B, h, Br, Bc): tile (0, 0)
    m = s.max(-1)
    p = np.exp(s - m[..., None])
    np.testing.assert_allclose(t["s_tile"].value, s, rtol=1e-13)
    np.testing.assert_allclose(t["m"].value, m, rtol=1e-13)
    np.testing.assert_allclose(t["p_tile"].value, p, rtol=1e-13)
    np.testing.assert_allclose(t["l"].value, p.sum(-1), rtol=1e-13)  # the phantom's 1 weighs 0 now
    np.testing.assert_allclose(t["o_acc"].value, p @ v[..., :4, :], rtol=1e-13)
    assert t["s_tile"].repeat == 9
