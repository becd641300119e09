"""run --past N --page-size P: the paged cache as steps (block_table, k_pool, v_pool, k_paged,
v_paged): shapes by hand, the gather equal to the unpaged step's k_all and v_all, per-sequence
lengths with --key-lengths, the shape backend, the JSON document."""

from __future__ import annotations

import json

import jsonschema
import numpy as np
import pytest
from typer.testing import CliRunner

from attntrace import AttentionConfig, trace_attention
from attntrace.cli import app
from attntrace.engine.paged import PAGED_STEPS, with_paged_steps
from attntrace.errors import ConfigError
from attntrace.schemas import trace_schema


@pytest.mark.parametrize(
    ("extra", "page"),
    [
        ({"batch": 2, "kv_heads": 2}, 4),
        ({"batch": 3}, 5),
        ({"batch": None}, 3),
        ({"batch": 2, "kv_heads": 1, "window": 6}, 2),
        ({"batch": 1, "rope": True}, 16),
    ],
)
def test_gather_rebuilds_the_unpaged_keys_and_values(extra: dict[str, object], page: int) -> None:
    cfg = AttentionConfig(seq=2, past=11, hidden=32, heads=4, causal=True, **extra)  # type: ignore[arg-type]
    t = with_paged_steps(trace_attention(cfg), page)
    assert [s.name for s in t.steps[-5:]] == list(PAGED_STEPS)
    keys = cfg.keys  # N+S, or W-1+S with a window
    blocks = -(-keys // page)
    batch = cfg.batch or 1
    lead = (cfg.batch,) if cfg.batch else ()
    assert t["block_table"].shape == (*lead, blocks)
    assert t["k_pool"].shape == (batch * blocks, page, cfg.groups, cfg.head_dim)
    assert t["k_paged"].shape == t["k_all"].shape == (*lead, cfg.groups, keys, cfg.head_dim)
    np.testing.assert_array_equal(
        t["block_table"].value.reshape(batch, blocks), np.arange(batch * blocks).reshape(batch, -1)
    )
    np.testing.assert_allclose(t["k_paged"].value, t["k_all"].value, rtol=0, atol=0)
    np.testing.assert_allclose(t["v_paged"].value, t["v_all"].value, rtol=0, atol=0)
    assert t["block_table"].nbytes == batch * blocks * 4


def test_key_lengths_keep_each_sequence_its_own_blocks() -> None:
    cfg = AttentionConfig(
        batch=2, seq=1, past=9, hidden=16, heads=2, causal=True, key_lengths=(10, 3)
    )
    t = with_paged_steps(trace_attention(cfg), 4)
    assert t["block_table"].value.tolist() == [[0, 1, 2], [3, -1, -1]]
    assert t["k_pool"].shape == (4, 4, 2, 8)
    paged, full = t["k_paged"].value, t["k_all"].value
    np.testing.assert_allclose(paged[0], full[0], rtol=0, atol=0)
    np.testing.assert_allclose(paged[1, :, :3], full[1, :, :3], rtol=0, atol=0)
    assert not paged[1, :, 3:].any()
    assert not t["k_pool"].value[3, 3:].any()  # the empty slots of the last block


def test_shape_backend_has_the_shapes_without_values_and_past_is_needed() -> None:
    cfg = AttentionConfig(batch=2, seq=1, past=4095, hidden=4096, heads=32, kv_heads=8)
    t = with_paged_steps(trace_attention(cfg, "shape"), 16)
    assert t["block_table"].shape == (2, 256)
    assert t["k_pool"].shape == (512, 16, 8, 128)
    assert t["k_paged"].value is None
    with pytest.raises(ConfigError, match="--page-size pages the KV cache of a --past step"):
        with_paged_steps(trace_attention(AttentionConfig(seq=2)), 4)


def test_run_json_carries_the_paged_steps() -> None:
    args = ["run", "--batch", "2", "--seq", "1", "--past", "9", "--hidden", "16", "--heads", "2"]
    out = CliRunner().invoke(app, [*args, "--causal", "--page-size", "4", "-f", "json"])
    assert out.exit_code == 0, out.output
    doc = json.loads(out.output)
    jsonschema.Draft202012Validator(trace_schema()).validate(doc)
    steps = {s["name"]: s for s in doc["steps"]}
    assert steps["block_table"]["shape"] == [2, 3]
    assert steps["block_table"]["dtype"] == "int32"
    assert steps["k_pool"]["axes"] == ["num_blocks", "P", "h", "d"]
    assert steps["v_paged"]["shape"] == steps["v_all"]["shape"] == [2, 2, 10, 8]
    plain = CliRunner().invoke(app, [*args, "--causal", "-f", "json"])
    assert "block_table" not in {s["name"] for s in json.loads(plain.output)["steps"]}
