"""The collectives of torch.distributed recorded as steps, in this process: torch's ``fake``
process group gives a rank of 4 whose collectives move nothing but have the shapes and the
group of real ones (``trace --nproc N`` runs real ranks: tests/capturing/test_trace_nproc.py)."""

from __future__ import annotations

import importlib.util
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import attntrace
from paths import REPO

torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")

DATA = REPO / "tests" / "data" / "distributed"
WORLD, RANK = 4, 1


@pytest.fixture(scope="module")
def group() -> Iterator[None]:
    """This process as rank 1 of 4 on torch's fake backend (no peers, no communication)."""
    from torch.testing._internal.distributed.fake_pg import FakeStore

    if dist.is_initialized():
        pytest.skip("a process group is already set up in this process")
    dist.init_process_group("fake", rank=RANK, world_size=WORLD, store=FakeStore())
    yield
    dist.destroy_process_group()


def _load(name: str) -> Any:
    spec = importlib.util.spec_from_file_location(f"_dist_{name}", DATA / f"{name}.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _moved(t: Any, name: str) -> dict[str, Any]:
    event = next(e for e in t._recorder.events if e.name == name)
    collective: dict[str, Any] = event.params["collective"]
    return collective


def test_megatron_rank_has_every_role_and_the_all_reduce_with_its_bytes(group: None) -> None:
    attn = _load("tp_megatron").ParallelSelfAttention(64, 8, rank=RANK, world_size=WORLD)
    x = torch.randn(2, 8, 64)
    with attntrace.capture(keep_values=False) as t:
        t.parts = WORLD
        attn(x)
    roles = {s.role: s for s in t.steps if s.role}
    assert roles["q_proj"].shape == (2, 8, 16)  # H/T = 64/4
    assert roles["q_proj"].axes == ("B", "S", "h/4·d")
    assert roles["q"].axes == ("B", "h/4", "S", "d")
    assert roles["scores"].shape == (2, 2, 8, 8)  # h/T = 8/4 heads
    reduced = roles["o_all_reduce"]
    assert (reduced.op, reduced.shape, reduced.axes) == ("all_reduce", (2, 8, 64), ("B", "S", "H"))
    assert reduced.name == "partial_all_reduce"
    assert reduced.inputs == (roles["output"].name,)
    moved = _moved(t, reduced.name)
    assert moved["kind"] == "all_reduce"
    assert moved["ranks"] == WORLD
    assert moved["bytes_sent"] == 2 * 3 * 2 * 8 * 64 * 4 // 4  # 2·(n-1)/n of 4 KiB


def test_a_list_all_gather_is_one_step_and_its_parts_read_from_it(group: None) -> None:
    def gather(k: Any) -> Any:
        parts = [torch.empty_like(k) for _ in range(WORLD)]
        dist.all_gather(parts, k)
        return torch.cat(parts, dim=1)  # (B, N·S, d)

    k = torch.randn(2, 3, 16)
    with attntrace.capture(keep_values=False) as t:
        k = k * 1.0
        gather(k)
    gathered = next(s for s in t.steps if s.op == "all_gather")
    assert gathered.shape == (WORLD, 2, 3, 16)
    assert gathered.input_shapes == ((2, 3, 16),)
    assert t.steps[-1].op == "cat"
    assert t.steps[-1].inputs[0] == gathered.name
    assert t.steps[-1].shape == (2, 12, 16)
    assert _moved(t, gathered.name)["bytes_sent"] == 3 * 2 * 3 * 16 * 4  # (n-1) · the part


@pytest.mark.filterwarnings("ignore:`torch.distributed.*` is deprecated:FutureWarning")
def test_tensor_collectives_have_the_shapes_they_move(group: None) -> None:
    x = torch.randn(8, 6)
    with attntrace.capture(keep_values=False) as t:
        y = x * 2.0
        whole = torch.empty(8 * WORLD, 6)
        dist.all_gather_into_tensor(whole, y)
        part = torch.empty(2, 6)
        dist.reduce_scatter_tensor(part, y)
        swapped = torch.empty_like(y)
        dist.all_to_all_single(swapped, y)
    got = {s.op: s for s in t.steps if _is_collective(t, s.name)}
    assert got["all_gather_single"].shape == (32, 6)  # torch 2.13 runs the newer name
    assert got["reduce_scatter_single"].shape == (2, 6)
    assert got["all_to_all_single"].shape == (8, 6)
    assert {s.input_shapes for s in got.values()} == {((8, 6),)}
    assert all(s.name.startswith("y_") for s in got.values())  # named after what they read


def test_send_and_recv_keep_the_lineage_of_what_they_move(group: None) -> None:
    k = torch.randn(2, 4)
    with attntrace.capture(keep_values=False) as t:
        k = k + 0.0
        got = torch.empty_like(k)
        requests = dist.batch_isend_irecv(
            [dist.P2POp(dist.isend, k, 2), dist.P2POp(dist.irecv, got, 0)]
        )
        for r in requests:
            r.wait()
        total = k + got
    sent, received = (next(s for s in t.steps if s.op == op) for op in ("isend", "irecv"))
    assert (sent.shape, received.shape) == ((2, 4), (2, 4))
    assert _moved(t, sent.name)["peer"] == 2
    assert _moved(t, received.name)["peer"] == 0
    assert _moved(t, sent.name)["bytes_received"] == 0
    assert _moved(t, received.name)["bytes_received"] == 32
    add = t.steps[-1]
    assert add.inputs == (t.steps[1].name, received.name)  # k is still k after it was sent
    assert total.shape == (2, 4)


def _is_collective(t: Any, name: str) -> bool:
    return any(e.name == name and e.kind == "collective" for e in t._recorder.events)


def test_the_convention_fills_what_the_code_names(tmp_path: Path) -> None:
    from attntrace.capturing.rank_setup import Rank, filled

    def build(embed_dim: int, rank: int, world_size: int, group: Any = None) -> None: ...

    got = filled(build, {"embed_dim": 8, "rank": 3}, Rank(1, 4, group="G"))
    assert got == {"world_size": 4, "group": "G"}  # --init's rank kept


def test_a_sequence_that_does_not_split_is_one_line() -> None:
    import numpy as np

    from attntrace.capturing.rank_setup import Rank, shard_x
    from attntrace.errors import ConfigError

    with pytest.raises(ConfigError, match="--seq 9 is not a multiple of 2; give --seq 8"):
        shard_x(np.zeros((1, 9, 4)), Rank(0, 2, "seq"))
    x = np.arange(24).reshape(1, 6, 4)
    assert (shard_x(x, Rank(2, 3, "seq")) == x[:, 4:6]).all()


def test_kept_values_of_collectives_are_what_the_rank_held_then(group: None) -> None:
    """diff --nproc keeps values: an all_reduce's step keeps the tensor as it left the
    collective, though the code changes it in place afterwards; a gathered list its stack."""
    x = torch.arange(6.0).reshape(2, 3)
    with attntrace.capture(keep_values=True) as t:
        y = x * 1.0
        dist.all_reduce(y)  # the fake group: the sum is this rank's own tensor
        parts = [torch.empty_like(y) for _ in range(WORLD)]
        dist.all_gather(parts, y)
        y.mul_(10.0)
    reduced = next(s for s in t.steps if s.op == "all_reduce")
    gathered = next(s for s in t.steps if s.op == "all_gather")
    assert reduced.value is not None
    assert (reduced.value == x.numpy()).all()  # before the mul_
    assert gathered.value is not None
    assert gathered.value.shape == (WORLD, 2, 3)
