"""The tiled (flash) algorithm equals eager, shows its tiles and never forms the (S, S) matrix."""

from __future__ import annotations

import math

import numpy as np
import pytest

from attntrace import AttentionConfig, ConfigError, trace_attention
from attntrace.flash import FLASH_STEPS, blocks


@pytest.mark.parametrize("block_size", [1, 5, 16, 37, 64, 128])
@pytest.mark.parametrize("batch", [None, 2])
def test_flash_equals_eager(compute_backend: str, block_size: int, batch: int | None) -> None:
    eager = AttentionConfig(batch=batch, seq=37, hidden=32, heads=4, dtype="float64")
    flash = AttentionConfig(batch=batch, seq=37, hidden=32, heads=4, dtype="float64", algorithm="flash", block_size=block_size)
    want = trace_attention(eager, compute_backend)
    got = trace_attention(flash, compute_backend, keep_values={"context", "output"})
    for name in ("context", "output"):
        assert got[name].value is not None
        np.testing.assert_allclose(got[name].value, want[name].value, rtol=1e-10, atol=1e-12, err_msg=name)


def test_flash_equals_eager_in_float32_with_buffers_reused(compute_backend: str) -> None:
    cfg = AttentionConfig(seq=300, hidden=64, heads=4)
    want = trace_attention(cfg, compute_backend, keep_values={"output"})
    got = trace_attention(AttentionConfig(seq=300, hidden=64, heads=4, algorithm="flash", block_size=128),
                          compute_backend, keep_values={"output"})
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


@pytest.mark.parametrize(("field", "value", "message"), [
    ("algorithm", "tiled", "unknown algorithm"), ("block_size", 0, "--block-size"), ("block_size", True, "--block-size"),
])
def test_config_checks_the_algorithm(field: str, value: object, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        AttentionConfig(**{field: value})  # type: ignore[arg-type]


def test_run_command_traces_flash_and_refuses_eager_beyond_the_budget() -> None:
    from typer.testing import CliRunner

    from attntrace.cli import app

    runner = CliRunner()
    flash = runner.invoke(app, ["run", "--seq", "300", "--hidden", "64", "--heads", "4", "--algorithm", "flash",
                                "--block-size", "128", "--count", "macs"], env={"COLUMNS": "80"})
    assert flash.exit_code == 0, flash.output
    assert "s_tile" in flash.stdout
    assert "never formed whole" in flash.stdout
    assert "MACs" in flash.stdout
    eager = runner.invoke(app, ["run", "--seq", "100000", "--max-memory", "1GiB"])
    assert eager.exit_code == 2
    assert "--algorithm flash" in eager.stderr
    assert "--backend shape" in eager.stderr
