"""The flow diagram of a trace with --backward: the gradient steps below the forward's, each in
the lane of what it is the gradient of, data flowing down the page, no box over another."""

from __future__ import annotations

import xml.etree.ElementTree as ET

import pytest

from attntrace import AttentionConfig, trace_attention
from attntrace.render.flow import BOX_H, BOX_W, inputs, layout, render_flow_svg

SVG = "{http://www.w3.org/2000/svg}"

CONFIGS = [
    AttentionConfig(seq=4, hidden=8, heads=2),
    AttentionConfig(batch=2, seq=4, hidden=8, heads=2, kv_heads=1, rope=True, causal=True),
    AttentionConfig(seq=4, hidden=8, heads=2, kv_seq=6, kv_hidden=12),
]


@pytest.mark.parametrize("config", CONFIGS, ids=["mha", "gqa-rope-causal", "cross"])
def test_the_backward_path_is_drawn_below_the_forward(config: AttentionConfig) -> None:
    trace = trace_attention(config, "shape", backward=True)
    root = ET.fromstring(render_flow_svg(trace))
    names = [g.get("data-name") for g in root.findall(f"{SVG}g[@class='step']")]
    assert names == list(trace.names)
    boxes = {b.step.name: b for b in layout(trace)}
    last_forward = max(b.row for b in boxes.values() if b.step.phase == "forward")
    backward = [b for b in boxes.values() if b.step.phase == "backward"]
    assert min(b.row for b in backward) == last_forward + 1 == boxes["d_output"].row
    for b in boxes.values():
        for name in inputs(trace, b.step):  # data flows down the page
            assert name not in boxes or boxes[name].row < b.row, (name, b.step.name)
    placed = list(boxes.values())
    for i, a in enumerate(placed):
        for b in placed[i + 1 :]:
            assert abs(a.x - b.x) >= BOX_W or abs(a.y - b.y) >= BOX_H, (a.step.name, b.step.name)
    # every bias gradient is drawn from the gradient its weight's is made from
    assert inputs(trace, trace["d_b_q"]) == ("d_q_proj",)
    assert inputs(trace, trace["d_b_o"]) == ("d_output",)
    # the gradients of the q path sit in the q lane, as q does
    assert boxes["d_q_heads"].lane == boxes["d_q_proj"].lane == boxes["q"].lane == 0
    assert boxes["d_w_q"].lane == 0


def test_saved_tensors_reach_the_backward_by_dashed_arrows() -> None:
    trace = trace_attention(AttentionConfig(seq=4, hidden=8, heads=2), "shape", backward=True)
    root = ET.fromstring(render_flow_svg(trace))
    edges = {
        (p.get("data-from"), p.get("data-to")): p for p in root.findall(f"{SVG}path[@class='edge']")
    }
    assert edges[("weights", "d_scaled")].get("stroke-dasharray") == "4 3"
    assert edges[("d_weights", "d_scaled")].get("stroke-dasharray") is None
    assert edges[("scores", "scaled")].get("stroke-dasharray") is None
    fills = {
        g.get("data-name"): g.find(f"{SVG}rect").get("fill")  # type: ignore[union-attr]
        for g in root.findall(f"{SVG}g[@class='step']")
    }
    assert fills["d_scaled"] != fills["scaled"]
