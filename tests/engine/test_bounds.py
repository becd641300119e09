"""Bounds that keep every command quick and small whatever the values: exit code 3 for bugs,
sizes and lists capped, closed-form flash counts, --save under signals and the umask."""

from __future__ import annotations

import itertools
import os
import signal
from pathlib import Path

import numpy as np
import pytest

from attntrace import AttentionConfig, trace_attention
from attntrace.engine.flash import _clamped_floor_sum, skipped_tiles, tiles
from attntrace.errors import MemoryBudgetError
from hostile import invoke


def test_unexpected_errors_are_one_line_exit_3(monkeypatch: pytest.MonkeyPatch) -> None:
    import attntrace.engine.attention

    def broken(*args: object, **kwargs: object) -> None:
        raise ZeroDivisionError("division by zero")

    monkeypatch.setattr(attntrace.engine.attention, "trace_attention", broken)
    outcome = invoke("run")
    assert outcome.code == 3
    assert outcome.err.startswith(
        "attntrace: error: internal error (ZeroDivisionError: division by zero); "
        "this is a bug in attntrace"
    )
    assert len(outcome.err.splitlines()) == 1
    assert "Traceback" not in outcome.err


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["run", "--batch", "2147483648"],
            "--batch 2147483648 is too large; the most is 2147483647",
        ),
        (
            ["run", "--hidden", "99999999999999999999999999999999999", "--heads", "7"],
            "is too large",
        ),
        (["run", "--batch", "3000000000", "--key-lengths", "3"], "is too large"),
        (
            ["run", "--batch", "200000", "--key-lengths", "3", "--backend", "shape"],
            "e.g. --key-lengths 3,3,3,3,...",
        ),
        (["run", "--max-memory", "1e400GiB"], "cannot read the size"),
        (["run", "--max-memory", "9" * 400], "is 400 characters long; the most it takes is 64"),
        (["run", "--rope", "--rope-base", "inf"], "--rope-base must be a number > 0 and finite"),
        (
            ["run", "--seed", "18446744073709551616"],
            "--seed must be a whole number from 0 to 2**64 - 1",
        ),
        (
            ["run", "--hidden", "2147483629", "--heads", "7", "--backend", "shape"],
            "valid head counts",
        ),
        (["sweep", "--seq", ",".join(["8"] * 65)], "--seq lists 65 values; the most is 64"),
        (
            ["sweep", "--seq", ",".join(["8"] * 64), "--heads", "1,2,4,8,16"],
            "the sweep has 640 configurations",
        ),
        (
            ["run", "--algorithm", "flash", "--block-size", "1", "--seq", "1000"],
            "visits 1,000,000 tiles",
        ),
    ],
)
def test_huge_and_exploding_values_are_one_line(args: list[str], message: str) -> None:
    outcome = invoke(*args)
    outcome.assert_contained()
    assert outcome.code == 2
    assert message in outcome.err


def test_clamped_floor_sum_is_the_sum() -> None:
    for n, a, c, m, top in itertools.product(
        range(7), range(1, 5), range(-9, 9), range(1, 5), range(5)
    ):
        want = sum(min(top, max(0, (a * i + c) // m)) for i in range(n))
        assert _clamped_floor_sum(n, a, c, m, top) == want, (n, a, c, m, top)


@pytest.mark.parametrize("window", [None, 1, 3])
@pytest.mark.parametrize("causal", [False, True])
def test_grouped_tiles_count_what_every_tile_counts(causal: bool, window: int | None) -> None:
    for seq, keys, size, key_size in itertools.product(
        range(1, 13), range(1, 13), range(1, 6), (None, 2, 5)
    ):
        kw = {"causal": causal, "window": window, "key_size": key_size}
        every = sum(n for _, kv in tiles(seq, keys, size, **kw) for *_, n in kv)  # type: ignore[arg-type]
        grouped = sum(n for _, kv in tiles(seq, keys, size, every=False, **kw) for *_, n in kv)  # type: ignore[arg-type]
        assert every == grouped


def test_shape_backend_flash_is_independent_of_the_tile_count() -> None:
    """2**31 - 1 tokens in blocks of 1 (4.6e18 tiles) are counted, not visited."""
    config = AttentionConfig(seq=2**31 - 1, causal=True, algorithm="flash", block_size=1)
    trace = trace_attention(config, "shape")
    n = 2**31 - 1
    assert trace["s_tile"].repeat == n * (n + 1) // 2
    assert skipped_tiles(config) == n * (n - 1) // 2


def test_verify_counts_its_references_in_the_memory_estimate() -> None:
    pytest.importorskip("torch")
    from attntrace.engine.attention import estimate_bytes
    from attntrace.tools.verify import verify_attention

    config = AttentionConfig(seq=512, hidden=64, heads=8)
    needed, _ = estimate_bytes(config)
    with pytest.raises(MemoryBudgetError, match="two traces and the torch references"):
        verify_attention(config, max_memory=needed * 2)  # one trace fits, verify does not


def test_sigterm_while_saving_leaves_no_temporary_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from attntrace.files import save_trace

    trace = trace_attention(AttentionConfig(seq=2, hidden=4, heads=2))

    def killed(*args: object, **kwargs: object) -> None:
        os.kill(os.getpid(), signal.SIGTERM)

    monkeypatch.setattr(np, "savez", killed)
    with pytest.raises(SystemExit) as info:
        save_trace(trace, tmp_path / "t.npz")
    assert info.value.code == 128 + signal.SIGTERM
    assert list(tmp_path.iterdir()) == []
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL


@pytest.mark.parametrize("umask", [0o022, 0o077, 0o002])
def test_saved_files_follow_the_umask(tmp_path: Path, umask: int) -> None:
    from attntrace.files import save_trace

    previous = os.umask(umask)
    try:
        save_trace(trace_attention(AttentionConfig(seq=2, hidden=4, heads=2)), tmp_path / "t.npz")
    finally:
        os.umask(previous)
    assert (tmp_path / "t.npz").stat().st_mode & 0o777 == 0o666 & ~umask


def test_max_memory_also_bounds_what_input_files_declare(tmp_path: Path) -> None:
    from safetensors.numpy import save_file

    x = tmp_path / "x.npy"
    np.save(x, np.zeros((1, 64, 768), np.float32))  # 192 KiB
    weights = tmp_path / "w.safetensors"
    save_file({"q_proj.weight": np.zeros((768, 768), np.float32)}, str(weights))  # 2.25 MiB
    for args in (["--input", str(x)], ["--weights", str(weights)]):
        small = invoke("run", "--heads", "12", *args, "--max-memory", "100KiB")
        small.assert_contained()
        assert small.code == 2
        assert "declares" in small.err
        assert "(--max-memory)" in small.err
        assert "raise --max-memory" in small.err
    assert invoke("run", "--heads", "12", "--input", str(x), "--max-memory", "1GiB").code == 0
    # the budget ends with the command: the next one in this process has the default again
    from attntrace.engine.memory import file_budget

    assert file_budget()[1] == "50% of available memory"


@pytest.mark.parametrize("umask", [0o022, 0o077])
def test_every_written_file_follows_the_umask_and_sigterm_leaves_none(
    tmp_path: Path,
    umask: int,
) -> None:
    """Pictures and reports go through the same writer as --save."""
    from attntrace.files.output import write_output

    previous = os.umask(umask)
    try:
        write_output(tmp_path / "page.html", b"<html/>")
    finally:
        os.umask(previous)
    assert (tmp_path / "page.html").stat().st_mode & 0o777 == 0o666 & ~umask

    def killed(f: object) -> None:
        os.kill(os.getpid(), signal.SIGTERM)

    with pytest.raises(SystemExit):
        write_output(tmp_path / "flow.svg", killed)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["page.html"]
