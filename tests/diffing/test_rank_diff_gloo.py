"""``diff --nproc N`` on real torch.distributed (gloo) processes: the four user codes of
tests/data/distributed/ (Megatron-style TP by hand, DTensor TP with parallelize_module, ring
attention with batch_isend_irecv, Ulysses with all_to_all_single) MATCH at N = 2 and 4, and
each planted bug of examples/distributed/ is named with its rank and the line that shows it."""

from __future__ import annotations

import json
import sys
from typing import Any

import pytest
from typer.testing import CliRunner

from attntrace import AttentionConfig
from attntrace.config.parallel_layout import ParallelLayout
from attntrace.diffing.rank_child import diff_nproc
from paths import DATA, REPO

pytest.importorskip("torch")
pytestmark = [pytest.mark.slow, pytest.mark.e2e]

sys.path.insert(0, str(DATA / "distributed"))
from planted import PLANTED, Planted, planted_line, planted_text  # noqa: E402

SIZES = {"batch": 1, "seq": 16, "hidden": 32, "heads": 4}
CORRECT = {
    "megatron_tp.py:ParallelSelfAttention": ("tp", {"causal": True, "rope": True}),
    "dtensor_tp.py:TPAttention": ("tp", {"causal": True}),
    "ring.py:RingAttention": ("ring", {"causal": True, "rope": True}),
    "ulysses.py:UlyssesAttention": ("ulysses", {"causal": True, "rope": True}),
}


def _config(layout: str, n: int, flags: dict[str, Any]) -> AttentionConfig:
    parallel = None if layout == "tp" else ParallelLayout(cp=n, cp_kind=layout)
    return AttentionConfig(**SIZES, parallel=parallel, **flags)


def _init(extra: dict[str, Any]) -> list[str]:
    return [f"{k}={v!r}" for k, v in {"hidden": 32, "heads": 4, **extra}.items()]


@pytest.mark.parametrize("n", [2, 4])
@pytest.mark.parametrize("target", sorted(CORRECT))
def test_correct_code_matches(target: str, n: int) -> None:
    layout, flags = CORRECT[target]
    init = {k: v for k, v in flags.items() if layout == "tp"}  # CP classes default to both
    path = f"{DATA / 'distributed'}/{target}"
    report = diff_nproc(path, _init(init), _config(layout, n, flags), n, timeout=120)
    assert report.verdict == "match", report.finding
    assert len(report.rows) == n
    assert max(report.outputs) < 1e-5
    for rows in report.rows:  # the collectives and the attention matched, not only the output
        matched = {r.step.name for r in rows if r.status == "match"}
        assert {"q_proj", "weights", "output"} <= matched
        if layout == "tp" and "dtensor" not in target:
            assert "o_all_reduce" in matched  # dist.all_reduce's result, as a step
        if layout == "ring":  # every round's, not the first alone
            assert {"k_ring_recv", "context_merged"} <= matched
            assert {f"k_ring_recv@{i}" for i in range(2, n)} <= matched
    if layout == "ring":  # the last rank sees every block: each round's merge compared
        last = {r.step.name for r in report.rows[-1] if r.status == "match"}
        assert {f"context_merged@{i}" for i in range(2, n)} <= last


@pytest.mark.parametrize("p", PLANTED, ids=lambda p: p.key)
def test_planted_bug_is_named_with_rank_and_line(p: Planted) -> None:
    path = REPO / "examples" / "distributed" / f"{p.key}.py"
    text = path.read_text()
    assert text == planted_text(p, (DATA / "distributed" / p.source).read_text())  # in sync
    config = _config(p.layout, p.nproc, p.config)
    report = diff_nproc(f"{path}:{p.name}", _init(p.init), config, p.nproc, timeout=120)
    f = report.finding
    assert report.verdict == "differs"
    assert f is not None
    assert f.bug == p.key.removesuffix("-ulysses"), f
    assert f.rank == p.rank, f
    file, line = f.location.rsplit(":", 1)
    assert file.endswith(f"{p.key}.py")
    assert p.shows in text.splitlines()[int(line) - 1], (f, planted_line(p, text))
    named = planted_line(p, text) + p.named  # the planted line where it can be
    callers = f.called.split(", called at ")[-1].split(", ") if f.called else []
    assert any(_covers(site, f"{p.key}.py", named) for site in (f.location, *callers)), f


def _covers(site: str, file: str, line: int) -> bool:
    """Whether ``site`` ("file:N" or, a call over several lines, "file:N-M") names ``line``."""
    name, _, lines = site.rpartition(":")
    first, _, last = lines.partition("-")
    return name == file and int(first) <= line <= int(last or first)


def test_cli_exit_codes_table_and_json(tmp_path: Any) -> None:
    from attntrace.cli import app

    runner = CliRunner()
    sizes = ["--batch", "1", "--seq", "16", "--hidden", "32", "--heads", "4", "--causal"]
    init = ["--init", "hidden=32", "--init", "heads=4", "--init", "causal=True"]
    bug = f"{REPO / 'examples' / 'distributed' / 'tp-no-all-reduce.py'}:ParallelSelfAttention"
    got = runner.invoke(app, ["diff", bug, *init, *sizes, "--nproc", "2"])
    assert got.exit_code == 1, got.output
    assert "note: tp: from the world size, --nproc 2" in got.output
    assert "DIFFERS at rank 0, step o_all_reduce" in got.output
    assert "tp-no-all-reduce.py:80 (in RowParallelLinear.forward, called at" in got.output
    assert "tp-no-all-reduce.py:121; rank" in got.output
    good = f"{DATA / 'distributed' / 'megatron_tp.py'}:ParallelSelfAttention"
    got = runner.invoke(app, ["diff", good, *init, *sizes, "--nproc", "2", "--format", "json"])
    assert got.exit_code == 0, got.output
    doc = json.loads(got.output)
    assert (doc["verdict"], doc["ranks"], doc["layout"]["tp"]) == ("match", 2, 2)
    got = runner.invoke(app, ["diff", good, *sizes, "--tp", "2"])
    assert got.exit_code == 2
    assert "add --nproc N" in got.output


def test_a_rank_that_raises_is_one_line(tmp_path: Any) -> None:
    from attntrace.cli import app

    code = (DATA / "distributed" / "megatron_tp.py").read_text()
    code = code.replace(
        "        B, S, _ = x.shape\n",
        "        B, S, _ = x.shape\n        if dist.get_rank() == 1:\n"
        "            raise ValueError('rank 1 is broken')\n",
        1,
    )
    (tmp_path / "broken.py").write_text(code)
    sizes = ["--batch", "1", "--seq", "8", "--hidden", "32", "--heads", "4"]
    init = ["--init", "hidden=32", "--init", "heads=4", "--timeout", "60"]
    target = f"{tmp_path / 'broken.py'}:ParallelSelfAttention"
    got = CliRunner().invoke(app, ["diff", target, "--nproc", "2", *sizes, *init])
    assert got.exit_code == 1, got.output
    assert "rank 1: the code under test raised ValueError: rank 1 is broken" in got.output
    assert len(got.output.strip().splitlines()) == 1
    psutil = pytest.importorskip("psutil")
    assert psutil.Process().children(recursive=True) == []  # every rank stopped and reaped


NO_HEADS_ARGUMENT = '''
import torch.distributed as dist
from torch import nn


class Attn(nn.Module):
    """Four heads, fixed in the code: no argument says how many."""

    def __init__(self):
        super().__init__()
        world, rank = dist.get_world_size(), dist.get_rank()
        full = nn.Linear(32, 96)
        self.qkv = nn.Linear(32, 96 // world)
        rows = full.weight.view(3, 32, 32)[:, rank * 32 // world : (rank + 1) * 32 // world]
        self.qkv.weight.data = rows.reshape(-1, 32).clone()
        self.qkv.bias.data = full.bias.view(3, 32)[:, rank * 16 : (rank + 1) * 16].reshape(-1)
        o = nn.Linear(32, 32, bias=False)
        self.o_proj = nn.Linear(32 // world, 32, bias=False)
        self.o_proj.weight.data = o.weight[:, rank * 32 // world : (rank + 1) * 32 // world]
        self.local = 4 // world

    def forward(self, x):
        B, S, _ = x.shape
        q, k, v = self.qkv(x).view(B, S, 3, self.local, 8).permute(2, 0, 3, 1, 4)
        w = (q @ k.transpose(-2, -1) / 8**0.5).softmax(-1)
        out = self.o_proj((w @ v).transpose(1, 2).reshape(B, S, -1))
        dist.all_reduce(out)
        return out
'''


def test_sizes_come_from_the_class_arguments_and_unread_heads_are_cannot_tell(
    tmp_path: Any,
) -> None:
    """No --hidden/--heads: the class's own arguments (defaults included) give them, each in a
    note; a class that names no heads is CANNOT TELL whose remedy, applied, is accepted."""
    from attntrace.cli import app

    runner = CliRunner()
    good = f"{DATA / 'distributed' / 'megatron_tp.py'}:ParallelSelfAttention"
    got = runner.invoke(app, ["diff", good, "--nproc", "2", "--batch", "1", "--seq", "8"])
    assert got.exit_code == 0, got.output
    assert "H=64 h=8" in got.output
    assert "heads: from ParallelSelfAttention() (8)" in got.output
    (tmp_path / "fixed.py").write_text(NO_HEADS_ARGUMENT)
    target = [f"{tmp_path / 'fixed.py'}:Attn", "--nproc", "2", "--batch", "1", "--seq", "8"]
    got = runner.invoke(app, ["diff", *target, "--format", "json"])
    assert got.exit_code == 4, got.output
    doc = json.loads(got.output)
    assert doc["verdict"] == "cannot tell"
    assert "--heads" in json.dumps(doc)
    got = runner.invoke(app, ["diff", *target, "--heads", "4"])
    assert got.exit_code == 0, got.output
    assert "H=32 h=4" in got.output
