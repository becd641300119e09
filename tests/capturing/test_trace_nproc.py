"""``attntrace trace FILE:NAME --nproc N``: parallel attention written as people write it
(Megatron-style column/row-parallel projections with dist.all_reduce, DTensor's
parallelize_module, ring attention with batch_isend_irecv and a log-sum-exp merge, Ulysses with
all_to_all_single), run on N gloo processes: every rank's roles and collectives with their exact
shapes; and a rank that raises, hangs, is killed, runs out of memory or skips a collective: one
line, exit 1, no process left. Each test starts N sandbox children: the e2e tier."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from typer.testing import CliRunner

from attntrace.cli import app
from attntrace.schemas import ranks_schema
from leftovers import marked, no_leftovers  # noqa: F401 (a fixture)
from paths import REPO

pytest.importorskip("torch")
pytestmark = [pytest.mark.slow, pytest.mark.e2e, pytest.mark.usefixtures("no_leftovers")]

DATA = REPO / "tests" / "data" / "distributed"
runner = CliRunner()
B, S, H, HEADS = 2, 8, 64, 8  # d = 8


def _trace(target: str, n: int, *args: str) -> tuple[dict[str, Any], Any]:
    result = runner.invoke(
        app,
        [
            *("trace", f"{DATA}/{target}", "--nproc", str(n), "--batch", str(B), "--seq", str(S)),
            *("--init", f"num_heads={HEADS}", "--format", "json", "--timeout", "60", *args),
        ],
    )
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    jsonschema.Draft202012Validator(ranks_schema()).validate(doc)
    assert doc["schema"] == "attntrace.ranks/1"
    assert doc["world"] == n
    assert [r["rank"] for r in doc["ranks"]] == list(range(n))
    assert doc["failure"] is None
    return doc, result


def _roles(rank: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {s["role"]: s for s in rank["steps"] if s["role"]}


def _collectives(rank: dict[str, Any]) -> list[dict[str, Any]]:
    return [s for s in rank["steps"] if s["collective"]]


@pytest.mark.parametrize("n", [2, 4])
def test_megatron_every_rank_holds_its_heads_and_all_reduces_the_output(n: int) -> None:
    doc, _ = _trace("tp_megatron.py:ParallelSelfAttention", n, "--init", f"embed_dim={H}")
    for rank in doc["ranks"]:
        roles = _roles(rank)
        assert roles["q_proj"]["shape"] == [B, S, H // n]
        assert roles["q_proj"]["axes"] == ["B", "S", f"h/{n}·d"]
        assert roles["q"]["shape"] == [B, HEADS // n, S, H // HEADS]
        assert roles["scores"]["shape"] == [B, HEADS // n, S, S]
        assert roles["output"]["shape"] == [B, S, H]  # a partial sum
        (reduce,) = _collectives(rank)
        assert reduce["role"] == "o_all_reduce"
        assert (reduce["op"], reduce["shape"], reduce["location"]) == (
            "all_reduce",
            [B, S, H],
            "tp_megatron.py:38",
        )
        moved = reduce["collective"]
        assert (moved["kind"], moved["ranks"]) == ("all_reduce", n)
        assert moved["bytes_sent"] == 2 * (n - 1) * B * S * H * 4 // n


@pytest.mark.parametrize("n", [2, 4])
def test_dtensor_parallelize_module_shows_the_rowwise_all_reduce(n: int) -> None:
    doc, _ = _trace("tp_dtensor.py:TPAttention", n)
    for rank in doc["ranks"]:
        roles = _roles(rank)
        assert roles["k_proj"]["shape"] == [B, S, H // n]  # ColwiseParallel: the rank's rows
        assert roles["context"]["shape"] == [B, HEADS // n, S, H // HEADS]
        (reduce,) = _collectives(rank)
        assert (reduce["op"], reduce["role"]) == ("redistribute", "o_all_reduce")
        assert reduce["shape"] == [B, S, H]
        assert reduce["collective"]["kind"] == "all_reduce"
        assert reduce["collective"]["placements"] == "P(sum) -> R"  # RowwiseParallel's output


@pytest.mark.parametrize("n", [2, 4])
def test_dtensor_sequence_parallel_gathers_the_tokens_and_scatters_them_back(n: int) -> None:
    doc, _ = _trace("tp_dtensor_sp.py:SPBlock", n, "--shard-x", "seq")
    for rank in doc["ranks"]:
        moved = _collectives(rank)
        assert [s["op"] for s in moved] == ["redistribute"] * 4  # q, k, v's input, the output
        kinds = [(s["collective"]["kind"], s["collective"]["placements"]) for s in moved]
        assert kinds == [("all_gather", "S(1) -> R")] * 3 + [("reduce_scatter", "P(sum) -> S(1)")]
        gather, scatter = moved[0], moved[-1]
        assert (gather["role"], gather["shape"], gather["axes"]) == (
            "x_all_gather",
            [B, S, H],
            ["B", f"S·{n}", "H"],
        )
        assert gather["input_shapes"] == [[B, S // n, H]]
        assert (scatter["role"], scatter["shape"]) == ("o_reduce_scatter", [B, S // n, H])
        assert scatter["axes"] == ["B", "S", "H"]  # S·N scattered back: the rank's tokens
        q_proj = _roles(rank)["q_proj"]  # computed from the gathered tokens, the rank's heads
        assert (q_proj["inputs"], q_proj["input_shapes"]) == ([gather["name"]], [[B, S, H]])
        assert q_proj["axes"] == ["B", f"S·{n}", f"h/{n}·d"]
        assert gather["collective"]["bytes_sent"] == (n - 1) * B * (S // n) * H * 4


@pytest.mark.parametrize("n", [2, 4])
def test_ring_passes_keys_and_values_to_the_next_rank(n: int) -> None:
    doc, _ = _trace("ring_trace.py:RingAttention", n, "--shard-x", "seq")
    for rank in doc["ranks"]:
        r = rank["rank"]
        assert rank["steps"][0]["shape"] == [B, S // n, H]  # x: the rank's tokens
        moved = _collectives(rank)
        assert [s["op"] for s in moved] == ["isend", "irecv"] * 2 * (n - 1)  # k, v each round
        assert {tuple(s["shape"]) for s in moved} == {(B, HEADS, S // n, H // HEADS)}
        assert {s["collective"]["peer"] for s in moved if s["op"] == "isend"} == {(r + 1) % n}
        assert {s["collective"]["peer"] for s in moved if s["op"] == "irecv"} == {(r - 1) % n}
        roles = _roles(rank)
        assert roles["k_ring_recv"]["op"] == "irecv"
        assert roles["v_ring_recv"]["op"] == "irecv"
        assert roles["scores"]["shape"] == [B, HEADS, S // n, S // n]  # one block at a time


@pytest.mark.parametrize("n", [2, 4])
def test_ulysses_trades_tokens_for_heads_and_back(n: int) -> None:
    doc, _ = _trace("ulysses_trace.py:UlyssesAttention", n, "--shard-x", "seq")
    for rank in doc["ranks"]:
        moved = _collectives(rank)
        assert [s["op"] for s in moved] == ["all_to_all_single"] * 4  # q, k, v, then back
        assert {tuple(s["shape"]) for s in moved} == {(n, B, S // n, HEADS // n, H // HEADS)}
        roles = _roles(rank)
        assert [roles[f"{p}_all_to_all"]["index"] for p in "qkv"] == [s["index"] for s in moved[:3]]
        assert roles["context"]["shape"] == [B, HEADS // n, S, H // HEADS]  # h/N heads, all S
        assert roles["context"]["axes"] == ["B", f"h/{n}", "R·S", "d"]  # R: the ranks' tokens
        assert roles["scores"]["shape"] == [B, HEADS // n, S, S]
        assert roles["context_all_to_all"]["index"] == moved[3]["index"]
        assert roles["output"]["shape"] == [B, S // n, H]


def test_the_table_shows_one_row_where_the_ranks_agree() -> None:
    target = f"{DATA}/ring_trace.py:RingAttention"
    result = runner.invoke(
        app,
        ["trace", target, "--nproc", "2", "--shard-x", "seq", "--seq", "4", "--batch", "1"],
        env={"COLUMNS": "140"},
    )
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[0].split()[:5] == ["attntrace", "trace", target, "2", "ranks"]
    sends = [line for line in lines if "_isend" in line]
    assert sends
    assert all(line.split()[1] == "all" for line in sends)  # the peers differ, the rest not
    assert lines[-1].startswith("collectives: rank 0: 4, ")


def test_a_function_gets_its_rank_and_one_rank_is_shown_alone() -> None:
    target = f"{DATA}/tp_function.py:attention"
    result = runner.invoke(
        app,
        [
            *("trace", target, "--nproc", "2", "--rank", "1", "--seq", "4", "--batch", "1"),
            "--hidden",
            "32",
        ],
        env={"COLUMNS": "120"},
    )
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert "[rank 0] rank 0 of 2: x (1, 4, 32)" in lines  # the prints, each rank's marked
    assert "[rank 1] rank 1 of 2: x (1, 4, 32)" in lines
    head = next(line for line in lines if line.startswith("attntrace trace"))
    assert head.split()[2:6] == [target, "rank", "1", "of"]
    assert lines[-1] == "collectives: rank 1: 1, ↑512 B ↓512 B"  # 2·(2-1)/2 of (1, 4, 32) float32
    row = next(line for line in lines if "out_all_reduce" in line).split()
    assert row[1] == "all"  # one rank shown: no ranks to tell apart
    assert "(1, 4, 32)" in " ".join(row)


def test_torch_s_own_attention_in_my_block_is_traced_up_to_what_dtensor_cannot_do() -> None:
    """torch's DTensor test model (verbatim) held in a block of mine, parallelized as torch's
    tests do (DTensor outputs kept): every rank's roles, then DTensor has no sharding rule for
    the CPU's scaled_dot_product_attention in torch 2.13, named with the rank and the line."""
    target = f"{DATA}/torch_test_attention.py:MyBlock"
    result = runner.invoke(
        app, ["trace", target, "--nproc", "2", "--batch", "2", "--seq", "8", "--format", "json"]
    )
    assert result.exit_code == 1
    doc = json.loads(result.stdout)
    for rank in doc["ranks"]:
        roles = _roles(rank)
        assert roles["q"]["shape"] == [2, 2, 8, 16]  # local: 2 of the 4 heads
        assert roles["q"]["axes"] == ["B", "h/2", "S", "d"]
        assert rank["failure"]["location"] == "torch_test_attention.py:53"
    line = _line(result)
    assert line.startswith(f"attntrace: rank {doc['failure']['rank']} raised NotImplementedError")
    assert line.endswith("at torch_test_attention.py:53; all 2 ranks were stopped")


FAILING = f"{DATA}/failing.py:RowParallel"


def _failing(mode: str, *args: str) -> tuple[Any, float]:
    start = time.monotonic()
    result = runner.invoke(
        app, ["trace", FAILING, "--init", f"mode={mode}", "--nproc", "2", "--seq", "4", *args]
    )
    return result, time.monotonic() - start


def _line(result: Any) -> str:
    said = [line for line in result.stderr.splitlines() if line.startswith("attntrace: ")]
    assert len(said) == 1, result.stderr
    return said[0]


def test_a_rank_that_raises_is_named_with_its_line() -> None:
    result, _ = _failing("raise", "--format", "json")
    assert result.exit_code == 1
    line = _line(result)  # rank 0 may be named too, where it waited (gloo told it late)
    assert line.startswith(
        "attntrace: rank 1 raised ValueError: rank 1 cannot split 32 evenly at failing.py:34; "
    )
    assert line.endswith("; all 2 ranks were stopped")
    doc = json.loads(result.stdout)
    assert doc["failure"] == {"rank": 1, "line": line.removeprefix("attntrace: ")}
    assert doc["ranks"][1]["failure"]["location"] == "failing.py:34"
    assert doc["ranks"][1]["failure"]["error"]["type"] == "ValueError"


def test_a_rank_that_hangs_is_stopped_at_the_time_limit_with_both_lines() -> None:
    result, took = _failing("hang", "--timeout", "3")
    assert result.exit_code == 1
    assert _line(result) == (
        "attntrace: rank 1 ran past 3 s at failing.py:36; rank 0 was waiting at failing.py:29; "
        "all 2 ranks were stopped"
    )
    assert took < 3 + 30  # the ranks' start, then 3 s, not gloo's own timeout


def test_a_rank_killed_by_sigkill_is_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # where the ranks meet
    result, _ = _failing("kill")
    assert result.exit_code == 1
    assert _line(result).startswith("attntrace: rank 1 was killed by SIGKILL at failing.py:24")
    assert list(tmp_path.iterdir()) == []  # the rendezvous' folder removed


def test_a_rank_past_its_memory_limit_is_named() -> None:
    result, _ = _failing("memory", "--max-memory", "1GiB")
    assert result.exit_code == 1
    line = _line(result)
    assert line.startswith("attntrace: rank 1 raised ")
    assert "at failing.py:40; all 2 ranks were stopped" in line


def test_a_rank_that_skips_a_collective_leaves_its_peer_waiting() -> None:
    result, _ = _failing("skip")
    assert result.exit_code == 1
    line = _line(result)
    assert line.startswith("attntrace: rank 0 raised RuntimeError: ")
    assert "by peer" in line  # gloo's words vary: "Connection closed by peer", "… reset by peer"
    assert line.endswith(
        "in all_reduce at failing.py:29 (rank 1 had returned after 0 collectives; rank 0 "
        "called 1); all 2 ranks were stopped"
    )


def test_a_rank_whose_init_raises_is_named_not_the_rank_waiting_for_it() -> None:
    result = runner.invoke(app, ["trace", f"{DATA}/failing.py:BadInit", "--nproc", "2"])
    assert result.exit_code == 2
    assert result.stderr.strip() == (
        "attntrace: error: rank 1: cannot build BadInit(rank=1, world_size=2): ValueError: 3 "
        "heads do not split over 2 ranks at failing.py:49"
    )


def test_ctrl_c_stops_every_rank(no_leftovers: str) -> None:  # noqa: F811 (the fixture)
    command = [sys.executable, "-m", "attntrace", "trace", FAILING, "--init", "mode=hang"]
    command += ["--nproc", "2", "--seq", "4", "--timeout", "120"]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    deadline = time.monotonic() + 60
    while len(marked(no_leftovers)) < 3 and time.monotonic() < deadline:  # attntrace, 2 ranks
        time.sleep(0.2)
    time.sleep(3)  # the ranks joined and run the code
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 128 + signal.SIGINT
    assert err.decode().splitlines()[-1] == (
        "attntrace: stopped by SIGINT; the code under test and every process it started were ended"
    )
