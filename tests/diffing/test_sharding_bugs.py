"""The sharding-bug catalogue in process: each bug replayed on the rank view and handed back as
the ranks of a user's code must be named, at its rank and first step, and no other; the
correct rank view is MATCH; a rank written by hand in numpy (not the rank view) is judged the
same; the weights joined from the ranks, and the copies that are not copies."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from attntrace import AttentionConfig
from attntrace.config.parallel_layout import ParallelLayout
from attntrace.diffing.rank_diff import RankCapture, diff_ranks
from attntrace.diffing.rank_weights import join, role_of, roles
from attntrace.diffing.sharding_bugs import ShardingBug, catalogue, replay
from attntrace.diffing.user_side import UserStep
from attntrace.engine.inputs import random_sources
from attntrace.errors import CannotTellError

NAMES = {f"{w}_{c}": f"{c}_proj.{'weight' if w == 'w' else 'bias'}" for w in "wb" for c in "qkvo"}

LAYOUTS = {
    "tp2": (ParallelLayout(tp=2), {}),
    "tp4-gqa": (ParallelLayout(tp=4), {"kv_heads": 2}),
    "ring2": (ParallelLayout(cp=2, balance=False), {"rope": True}),
    "ring4": (ParallelLayout(cp=4, balance=False), {"rope": True}),
    "allgather2": (ParallelLayout(cp=2, cp_kind="allgather", balance=False), {}),
    "ulysses2": (ParallelLayout(cp=2, cp_kind="ulysses", balance=False), {"rope": True}),
}

#: The first rank each bug shows on (2 ranks; tp4-gqa: 4).
FIRST_RANK = {"cp-rope-restart": 1, "ring-merge-mean": 1, "ring-merge-sum": 1}
FIRST_RANK |= {"ring-local-keys-only": 1, "cp-causal-local": 1}


def config_of(name: str) -> AttentionConfig:
    layout, extra = LAYOUTS[name]
    return AttentionConfig(
        batch=1, seq=8, hidden=16, heads=4, causal=True, parallel=layout, **extra
    )


def captures(config: AttentionConfig, bug: ShardingBug | None = None) -> list[RankCapture]:
    """The ranks of a 'user' whose code is the rank view with ``bug``: every step a tensor of
    theirs (views left out, as code that never materialises them), at line = step index."""
    single = dataclasses.replace(config, parallel=None)
    tensors = {n: s.make() for n, s in random_sources(single).items()}
    out = []
    for rank, run in enumerate(replay(config, tensors, bug)):
        steps = [s for s in run.rec.finish() if s.value is not None and not s.view]
        user = tuple(
            UserStep(i, s.name, np.asarray(s.value), f"user.py:{i}", s.op)
            for i, s in enumerate(steps)
        )
        params = {NAMES[k]: np.asarray(v) for k, v in run.params.items() if k in NAMES}
        out.append(RankCapture(rank, user[0].value, np.asarray(run.output), params, user))
    return out


@pytest.fixture(
    scope="module",
    params=[
        pytest.param(n, marks=[pytest.mark.slow] if n == "ring4" else []) for n in sorted(LAYOUTS)
    ],
)
def setting(request: pytest.FixtureRequest) -> AttentionConfig:
    return config_of(request.param)


def test_the_rank_view_itself_matches(setting: AttentionConfig) -> None:
    report = diff_ranks(setting, captures(setting))
    assert report.verdict == "match", report.finding
    assert report.exit_code == 0
    assert max(report.outputs) == 0.0


def test_each_bug_is_named_at_its_rank_and_first_step(setting: AttentionConfig) -> None:
    bugs = catalogue(setting)
    assert bugs, "every layout here has sharding bugs"
    for bug in bugs:  # --causal typed: a mask the code leaves out is a finding too
        report = diff_ranks(setting, captures(setting, bug), explicit={"causal"})
        f = report.finding
        assert report.verdict == "differs", bug.key
        assert f is not None, bug.key
        assert f.bug == bug.key, (bug.key, f)
        assert f.rank == FIRST_RANK.get(bug.key, 0), (bug.key, f.rank)
        assert f.location.startswith("user.py:"), f
        assert report.exit_code == 1


def test_the_catalogue_follows_the_layout() -> None:
    keys = {name: {b.key for b in catalogue(config_of(name))} for name in LAYOUTS}
    assert "tp-no-all-reduce" in keys["tp2"]
    assert "ring-merge-mean" not in keys["tp2"]
    assert "tp-global-heads-view" not in keys["tp4-gqa"]  # GQA: a local view cannot hold it
    assert {"ring-merge-mean", "cp-causal-local", "cp-rope-restart"} <= keys["ring2"]
    assert {"ulysses-heads-order", "ulysses-seq-order"} <= keys["ulysses2"]
    assert "ring-merge-mean" not in keys["ulysses2"]


def test_a_hand_written_tp_rank_without_its_all_reduce() -> None:
    """Ranks computed here in numpy, not by the rank view: each returns its partial sum."""
    cfg = AttentionConfig(batch=1, seq=4, hidden=8, heads=2, parallel=ParallelLayout(tp=2))
    rng = np.random.default_rng(0)
    x = rng.standard_normal((1, 4, 8))
    w = {c: rng.standard_normal((8, 8)) / 3 for c in "qkvo"}
    b_o = rng.standard_normal(8)
    ranks = []
    for t in range(2):
        rows = slice(4 * t, 4 * t + 4)  # one head of d = 4 a rank
        q, k, v = (x @ w[c][rows].T for c in "qkv")  # (1, 4, 4)
        s = q @ k.transpose(0, 2, 1) / 2.0  # (1, 4, 4)
        p = np.exp(s - s.max(-1, keepdims=True))
        p /= p.sum(-1, keepdims=True)
        partial = (p @ v) @ w["o"][:, rows].T  # (1, 4, 8): no all-reduce
        out = partial + b_o
        params = {f"{c}_proj.weight": w[c][rows] for c in "qkv"} | {
            "o_proj.weight": w["o"][:, rows],
            "o_proj.bias": b_o,
        }
        steps = (UserStep(0, "x", x), UserStep(1, "partial", partial, "tp.py:9", "x @ w"))
        ranks.append(RankCapture(t, x, out, params, steps))
    cfg = dataclasses.replace(cfg, dtype="float64")
    report = diff_ranks(cfg, ranks)
    assert report.verdict == "differs"
    assert report.finding is not None
    assert (report.finding.bug, report.finding.rank) == ("tp-no-all-reduce", 0)
    assert report.finding.location == "tp.py:9"
    noise = rng.standard_normal((1, 4, 8))  # an output no known sharding bug gives
    unknown = [dataclasses.replace(r, output=noise, steps=r.steps[:1]) for r in ranks]
    found = diff_ranks(cfg, unknown).finding
    assert found is not None
    assert (found.bug, found.rank) == (None, 0)


def test_joined_weights_are_megatrons_layout() -> None:
    cfg = AttentionConfig(seq=4, hidden=8, heads=4, kv_heads=2)
    layout = ParallelLayout(tp=4)
    w_k = np.arange(32.0).reshape(4, 8)  # 2 kv heads of d = 2
    ranks = []
    for t in range(4):
        kv = t * 2 // 4  # rank t keeps kv head t·g/T
        ranks.append(
            {
                "q_proj.weight": np.full((2, 8), t),
                "k_proj.weight": w_k[2 * kv : 2 * kv + 2],
                "v_proj.weight": w_k[2 * kv : 2 * kv + 2],
                "o_proj.weight": np.full((8, 2), t),
            }
        )
    joined = join(cfg, layout, ranks)
    assert joined.mismatch is None
    np.testing.assert_array_equal(joined.tensors["w_k"], w_k)
    assert joined.tensors["w_q"][:, 0].tolist() == [0, 0, 1, 1, 2, 2, 3, 3]
    assert joined.tensors["w_o"][0].tolist() == [0, 0, 1, 1, 2, 2, 3, 3]
    ranks[1]["k_proj.weight"] = w_k[2:4]  # rank 1 keeps kv head 1: not rank 0's copy
    m = join(cfg, layout, ranks).mismatch
    assert m is not None
    assert (m.param, m.kind, m.rank, m.like) == ("w_k", "kv", 1, 0)


def test_cp_ranks_must_hold_the_same_weights() -> None:
    cfg = AttentionConfig(seq=4, hidden=8, heads=2)
    one = {f"{c}_proj.weight": np.ones((8, 8)) for c in "qkvo"}
    other = {**one, "v_proj.weight": np.zeros((8, 8))}
    m = join(cfg, ParallelLayout(cp=2), [one, other]).mismatch
    assert m is not None
    assert (m.kind, m.param, m.rank, m.like) == ("cp", "w_v", 1, 0)


def test_roles_read_from_the_names_people_give() -> None:
    assert role_of("attn.wq.weight") == "w_q"
    assert role_of("self_attn.dense.bias") == "b_o"
    assert role_of("mlp.fc1.weight") is None
    with pytest.raises(CannotTellError, match="no parameter of the module plays w_o"):
        roles({f"{c}_proj.weight": np.ones(1) for c in "qkv"})
    with pytest.raises(CannotTellError, match="two parameters play w_q"):
        roles({"q.weight": np.ones(1), "query.weight": np.ones(1)})


def test_a_fused_qkv_is_read_as_each_ranks_q_k_v_rows() -> None:
    cfg = AttentionConfig(seq=4, hidden=8, heads=4)
    ranks = [
        {"attn.qkv.weight": np.arange(48.0).reshape(12, 4) + t, "attn.out.weight": np.ones((8, 4))}
        for t in range(2)
    ]
    joined = join(cfg, ParallelLayout(tp=2), ranks)
    assert joined.tensors["w_q"][:, 0].tolist() == [0, 4, 8, 12, 1, 5, 9, 13]  # 4 rows a rank
    assert joined.tensors["w_v"][:, 0].tolist() == [32, 36, 40, 44, 33, 37, 41, 45]
    assert joined.sources["w_k"] == "attn.k_proj.weight"
    with pytest.raises(CannotTellError, match="fused qkv"):
        join(cfg, ParallelLayout(tp=4), ranks)


def test_a_causal_mask_nobody_asked_for_is_cannot_tell() -> None:
    causal = dataclasses.replace(config_of("tp2"), causal=True)
    plain = dataclasses.replace(causal, causal=False)
    masked = captures(causal)  # the code masks; the reference was not told
    report = diff_ranks(plain, masked)
    assert report.verdict == "cannot tell"
    assert report.exit_code == 4
    assert "pass --causal if that is the model's choice" in report.cannot_tell
    told = diff_ranks(plain, masked, explicit={"causal"})  # --no-causal typed: a finding
    assert told.verdict == "differs"
    assert told.finding is not None
    assert told.finding.bug == "causal-unexpected"


def test_the_json_document_validates() -> None:
    import json

    import jsonschema

    from attntrace.render.rank_diff_view import rank_diff_json
    from attntrace.schemas import rank_diff_schema

    cfg = config_of("tp2")
    bug = next(b for b in catalogue(cfg) if b.key == "tp-no-all-reduce")
    for report in (diff_ranks(cfg, captures(cfg)), diff_ranks(cfg, captures(cfg, bug))):
        doc = json.loads(rank_diff_json(report))
        jsonschema.Draft202012Validator(rank_diff_schema()).validate(doc)
        assert doc["ranks"] == 2
    assert doc["finding"]["bug"] == "tp-no-all-reduce"
    assert doc["steps"][0][0] == {"step": "x", "status": "match", "line": "user.py:0"}


def test_every_ring_round_is_its_own_step_and_compared() -> None:
    """C=3: the second ring round's received keys and merge are steps of their own (NAME@2),
    with their values, and each is matched on the last rank (it sees every block)."""
    config = dataclasses.replace(
        config_of("ring2"), seq=6, parallel=ParallelLayout(cp=3, balance=False)
    )
    caps = captures(config)
    last = {s.name: s.value for s in caps[2].steps}
    assert {"k_ring_recv", "k_ring_recv@2", "context_merged", "context_merged@2"} <= set(last)
    assert not np.allclose(last["k_ring_recv"], last["k_ring_recv@2"])  # rank 1's keys, rank 0's
    report = diff_ranks(config, caps)
    assert report.verdict == "match"
    matched = {r.step.name for r in report.rows[2] if r.status == "match"}
    assert {"k_ring_recv@2", "context_merged@2", "lse_merged@2"} <= matched
