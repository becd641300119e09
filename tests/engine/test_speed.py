"""The speed-ups keep every value: flash on any number of threads, eager's recipes for the
scores it overwrites in place. (Timings live in benchmarks/bench.py, never here.)"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from typer.testing import CliRunner

from attntrace import AttentionConfig, trace_attention
from attntrace.backends.numpy_backend import NumpyBackend
from attntrace.cli import app


@pytest.mark.parametrize("causal", [False, True])
def test_flash_gives_the_same_bits_and_costs_on_any_number_of_threads(causal: bool) -> None:
    cfg = AttentionConfig(
        batch=2, seq=70, hidden=32, heads=4, causal=causal, algorithm="flash", block_size=16
    )
    one = trace_attention(cfg, keep_values={"context", "output"}, threads=1)
    for threads in (2, 3):
        many = trace_attention(cfg, keep_values={"context", "output"}, threads=threads)
        np.testing.assert_array_equal(many["output"].value, one["output"].value)
        assert [(s.name, s.flops, s.repeat) for s in many] == [
            (s.name, s.flops, s.repeat) for s in one
        ]


def test_eager_keeps_scores_and_scaled_exactly_without_their_buffers() -> None:
    cfg = AttentionConfig(batch=2, seq=40, hidden=64, heads=4)
    t = trace_attention(cfg)
    scores = np.matmul(t["q"].value, np.swapaxes(t["k"].value, -2, -1))  # (B, h, S, S)
    np.testing.assert_array_equal(t["scores"].value, scores)
    scaled = scores * np.float32(cfg.score_scale)
    np.testing.assert_array_equal(t["scaled"].value, scaled)
    np.testing.assert_array_equal(t["weights"].value, NumpyBackend().softmax(scaled))
    shapes_only = trace_attention(cfg, keep_values=False)
    assert [(s.flops, s.inputs) for s in t] == [(s.flops, s.inputs) for s in shapes_only]


def test_threads_option_runs_flash_and_refuses_zero() -> None:
    runner = CliRunner()
    ok = runner.invoke(
        app,
        [
            "run",
            "--seq",
            "40",
            "--hidden",
            "16",
            "--heads",
            "2",
            "--algorithm",
            "flash",
            "--block-size",
            "8",
            "--threads",
            "2",
            "--format",
            "json",
        ],
    )
    assert ok.exit_code == 0, ok.output
    bad = runner.invoke(app, ["run", "--algorithm", "flash", "--threads", "0"])
    assert bad.exit_code == 2
    assert "--threads 0" in bad.stderr


def test_flash_makes_each_mask_tile_from_the_rules_never_the_whole_mask() -> None:
    import tracemalloc

    S = 2048
    # tiles of 128 x 128: (B, h, Br, Bc) = 256 KiB each (the default tiles would be 2 MiB)
    cfg = AttentionConfig(
        batch=2,
        seq=S,
        hidden=16,
        heads=2,
        causal=True,
        key_lengths=(S, 5),
        algorithm="flash",
        block_size=128,
    )
    trace_attention(cfg, keep_values=False)  # warm-up: imports, pools
    tracemalloc.start()
    t = trace_attention(cfg, keep_values=False)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert peak < S * S  # the whole (B, 1, S, S) bool mask alone is 2·S·S bytes
    assert t["mask"].view


def test_flash_mask_value_is_the_whole_mask_when_read() -> None:
    user = np.ones((9, 9), dtype=bool)
    user[7] = False  # query 7 attends no key
    cfg = AttentionConfig(
        batch=2, seq=9, hidden=8, heads=2, causal=True, key_lengths=(9, 4), block_size=4
    )
    with pytest.warns(UserWarning, match="4 query row"):  # row 7 of both heads of both batch items
        eager = trace_attention(cfg, mask=user)
    with pytest.warns(UserWarning, match="4 query row"):
        flash = trace_attention(
            AttentionConfig(**{**cfg.__dict__, "algorithm": "flash"}), mask=user
        )
    np.testing.assert_array_equal(flash["mask"].value, eager["mask"].value)
    np.testing.assert_allclose(flash["output"].value, eager["output"].value, rtol=1e-5, atol=1e-6)


def test_numpy_matmul_of_a_large_stack_splits_heads_with_the_same_bits_as_one_thread() -> None:
    from threadpoolctl import threadpool_limits

    rng = np.random.default_rng(0)
    q = rng.standard_normal((2, 4, 512, 16), dtype=np.float32)  # (B, h, S, d)
    k_t = np.swapaxes(
        rng.standard_normal((2, 4, 512, 16), dtype=np.float32), -2, -1
    )  # (B, h, d, S)
    got = NumpyBackend().matmul(q, k_t)  # (B, h, S, S): 2M elements, over the pool
    with threadpool_limits(1, user_api="blas"):
        np.testing.assert_array_equal(got, np.matmul(q, k_t))


@pytest.mark.slow
@pytest.mark.parametrize("shape", [(1, 2048, 1024), (3, 1001, 512), (1, 700, 768)])
def test_numpy_linear_split_over_the_pool_gives_the_bits_of_one_blas_call_per_block(
    shape: tuple[int, ...],
) -> None:
    """Each block of rows is one single-threaded BLAS call, on whatever thread: the same bits
    as those calls made in turn on one thread, and run after run. Against one call on the
    whole x (another call: BLAS may sum the same K products in another order, as OpenBLAS's
    AVX2 and Sandybridge kernels do), within the rounding that order may change: each sum lies
    within gamma_K·sum|x_i·w_i| of the exact one, gamma_K ~ K·u = K·eps / 2 (Higham, eq. 3.5),
    so two differ by at most K·eps·(|x| @ |w|.T); twice that, plus one rounding of the bias."""
    from threadpoolctl import threadpool_limits

    from attntrace.engine.parallel import cores

    rng = np.random.default_rng(0)
    x = rng.standard_normal(shape, dtype=np.float32)  # (B, S, in): 2M, 1.5M, 0.5M outputs, pooled
    w = rng.standard_normal((768, shape[-1]), dtype=np.float32)  # (out, in)
    b = rng.standard_normal(768, dtype=np.float32)
    got = NumpyBackend().linear(x, w, b)  # (B, S, out)
    assert got.shape == (*shape[:-1], 768)
    np.testing.assert_array_equal(NumpyBackend().linear(x, w, b), got)  # run after run
    rows, n = x.reshape(-1, shape[-1]), cores()  # (B·S, in)
    bounds = [rows.shape[0] * i // n for i in range(n + 1)]
    with threadpool_limits(1, user_api="blas"):
        blocks = [rows[i:j] @ w.T + b for i, j in itertools.pairwise(bounds)]
    np.testing.assert_array_equal(got.reshape(rows.shape[0], 768), np.concatenate(blocks))
    want = x @ w.T
    want += b
    K, eps = shape[-1], float(np.finfo(np.float32).eps)
    allowed = 2 * K * eps * (np.abs(x).astype(np.float64) @ np.abs(w.T)) + eps * np.abs(want)
    assert (np.abs(got - want) <= allowed).all()


def test_spread_runs_every_item_once_on_the_workers_and_stops_at_the_first_error() -> None:
    import threading

    from attntrace.engine.parallel import POOL_PREFIX, spread

    seen: list[tuple[int, str]] = []
    lock = threading.Lock()

    def note(item: int) -> None:
        with lock:
            seen.append((item, threading.current_thread().name))

    spread(note, list(range(100)), 2)
    assert sorted(item for item, _ in seen) == list(range(100))
    assert all(name.startswith(POOL_PREFIX) for _, name in seen)

    done: list[int] = []

    def boom(item: int) -> None:
        if item == 3:
            raise ValueError("block 3")
        done.append(item)

    with pytest.raises(ValueError, match="block 3"):
        spread(boom, list(range(10_000)), 2)
    assert len(done) < 10_000 - 1  # the others stopped taking items
    spread(note, [], 2)  # nothing to do: no worker started, no error


def test_only_drawn_sources_count_as_work_for_the_pool() -> None:
    from attntrace.engine.inputs import random_sources, with_tensors

    cfg = AttentionConfig(seq=4, hidden=8, heads=2)
    seeded = random_sources(cfg)
    assert all(
        source.drawn for source in seeded.values()
    )  # x (normal) and the parameters (uniform)
    given = with_tensors(cfg, seeded, {"x": np.ones((4, 8), dtype=np.float32)})
    assert given["x"] is not None
    assert not given["x"].drawn
    assert given["w_q"] is not None
    assert given["w_q"].drawn


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_a_large_x_is_drawn_block_by_block_on_any_number_of_threads_with_the_same_values(
    dtype: str,
) -> None:
    from attntrace.engine.attention import POOL_MIN_SOURCE_NUMEL, _make_tensors
    from attntrace.engine.inputs import DRAW_ROWS, _rng, random_sources

    cfg = AttentionConfig(batch=2, seq=1100, hidden=512, heads=8, dtype=dtype)  # 2200 rows of x
    sources = random_sources(cfg)
    parts = sources["x"].parts
    assert parts is not None
    assert len(parts.blocks) == 9
    assert POOL_MIN_SOURCE_NUMEL <= 2 * 1100 * 512  # pooled with threads > 1
    be = NumpyBackend()
    alone = _make_tensors(be, sources, threads=1)
    for threads in (2, 3):
        pooled = _make_tensors(be, sources, threads=threads)
        assert list(pooled) == list(alone)
        for name, values in alone.items():
            assert pooled[name].dtype == values.dtype == np.dtype(dtype)
            np.testing.assert_array_equal(pooled[name], values)
    rows = alone["x"].reshape(-1, 512)  # (B·S, H): the first block is one generator's, as before
    first = _rng("x", 0).standard_normal((DRAW_ROWS, 512), dtype=dtype)
    np.testing.assert_array_equal(rows[:DRAW_ROWS], first)
    second = _rng("x", 0, 1).standard_normal((DRAW_ROWS, 512), dtype=dtype)
    np.testing.assert_array_equal(rows[DRAW_ROWS : 2 * DRAW_ROWS], second)
    assert not np.array_equal(rows[DRAW_ROWS : 2 * DRAW_ROWS], rows[:DRAW_ROWS])


def test_a_small_x_is_one_generators_draw() -> None:
    from attntrace.engine.inputs import _rng, random_sources

    cfg = AttentionConfig(batch=2, seq=3, hidden=8, heads=2)
    x = random_sources(cfg)["x"]
    assert x.parts is None
    want = _rng("x", 0).standard_normal((2, 3, 8), dtype="float32")
    np.testing.assert_array_equal(trace_attention(cfg)["x"].value, want)


@pytest.mark.parametrize("cores", [1, 2, 3])
def test_map_parts_holds_each_element_once_and_keeps_the_axes_it_is_told(
    cores: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    from attntrace.engine import parallel

    monkeypatch.setattr(parallel, "cores", lambda: cores)
    a = np.arange(3 * 64 * 8192, dtype=np.float64).reshape(3, 64, 8192)
    parts = parallel.map_parts(lambda p: p, a, keep=(-1,))
    assert len(parts) == cores
    assert all(p.shape[0] == 3 and p.shape[2] == 8192 for p in parts)  # split along the 64 alone
    assert np.array_equal(np.concatenate(parts, axis=1), a)  # every element once, in order
    out = np.empty_like(a)
    parallel.map_parts(np.copyto, out, a[:, :, ::-1])  # the same part of each array
    assert np.array_equal(out, a[:, :, ::-1])
    assert parallel.map_parts(np.sum, a[:1, :1, :10]) == [np.sum(a[:1, :1, :10])]  # small: whole


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_pooled_checks_find_a_bad_value_in_the_last_part(
    bad: float, monkeypatch: pytest.MonkeyPatch
) -> None:
    from attntrace.engine import eager, parallel

    monkeypatch.setattr(parallel, "cores", lambda: 2)
    x = np.ones((4, 1024, 512), dtype=np.float32)
    x[-1, -1, -1] = bad
    found = eager._largest(x)
    assert np.isnan(found) if np.isnan(bad) else found == np.inf
    norm = eager._largest_norm(x, "...i,...i->...", -1)
    assert np.isnan(norm) if np.isnan(bad) else norm == np.inf
    x = np.ones((1, 2048, 512), dtype=np.float32)  # 2^20 elements: checked in two parts
    x[0, -1, -1] = bad
    t = trace_attention(AttentionConfig(batch=1, seq=2048, hidden=512, heads=4), tensors={"x": x})
    assert t["x"].nonfinite == 1
    assert t["q_proj"].nonfinite == 512  # the projections of the bad row, in the second part


@pytest.mark.parametrize(
    "shape", [(4, 300), (2, 3, 64, 2047), (1, 16, 128, 256), (8, 8192), (5, 7)]
)
def test_rows_divided_by_their_column_with_a_row_long_buffer_keep_numpys_bits(
    shape: tuple[int, ...],
) -> None:
    from attntrace.backends.numpy_backend import by_rows

    rng = np.random.default_rng(0)
    x = rng.standard_normal(shape).astype(np.float32)
    col = rng.random((*shape[:-1], 1)).astype(np.float32) + 0.5
    before = np.getbufsize()
    for ufunc in (np.divide, np.subtract, np.multiply):
        assert np.array_equal(by_rows(ufunc, x, col, None), ufunc(x, col))
        out = np.empty_like(x)
        by_rows(ufunc, x, col, out)
        assert np.array_equal(out, ufunc(x, col))
    assert np.getbufsize() == before  # given back
    with pytest.raises(ValueError, match="non-broadcastable output"):
        by_rows(np.divide, x, col, np.empty((1, 1), np.float32))  # a wrong out: numpy's error
    assert np.getbufsize() == before  # given back after an error too


@pytest.mark.parametrize("shape", [(3, 5, 4), (2, 16, 2048, 64), (16, 1024, 96)])
def test_numpy_transposed_copy_of_heads_is_the_row_major_transpose(shape: tuple[int, ...]) -> None:
    from attntrace.backends.numpy_backend import TRANSPOSE_POOL_MIN_NUMEL

    *lead, h, n, d = shape
    proj = np.random.default_rng(0).standard_normal((*lead, n, h * d), dtype=np.float32)
    k = np.swapaxes(proj.reshape(*lead, n, h, d), -3, -2)  # (B, h, N, d), a view
    got = NumpyBackend().transposed_copy(k)  # (B, h, d, N)
    assert got.flags.c_contiguous
    assert not np.shares_memory(got, proj)
    np.testing.assert_array_equal(got, np.swapaxes(k, -2, -1))
    assert (k.size >= TRANSPOSE_POOL_MIN_NUMEL) == (shape != (3, 5, 4))  # both paths are taken
