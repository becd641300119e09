"""The training view of a trace with ``--backward``: what the forward keeps for the backward
(eager, flash, activation recomputation), the Megatron formula beside it, the backward's peak
and FLOPs. Reads :class:`~attntrace.trace.Training`; computes nothing."""

from __future__ import annotations

from typing import TYPE_CHECKING

from attntrace.units import format_bytes, format_count

if TYPE_CHECKING:
    from attntrace.trace import Trace


def training_rows(trace: Trace) -> list[tuple[str, str, str]]:
    """(what, how much, what it is) rows of the training figures; none without --backward.

    >>> from attntrace import AttentionConfig, trace_attention
    >>> t = trace_attention(AttentionConfig(seq=4, hidden=8, heads=2), "shape", backward=True)
    >>> training_rows(t)[0]
    ('saved for the backward (eager)', '768 B', 'x, q_proj, k_proj, v_proj, weights, merged')
    """
    f = trace.training
    if f is None:
        return []
    saved = ", ".join(s.name for s in trace.steps if s.saved)
    terms = "; ".join(
        f"{name} {'−' if b < 0 else ''}{format_bytes(abs(b))}" for name, b in f.megatron_terms if b
    )
    mode = "--recompute" if f.recompute else trace.config.algorithm
    return [
        (f"saved for the backward ({mode})", format_bytes(f.saved_bytes), saved),
        ("eager keeps", format_bytes(f.eager_saved_bytes), "the (B, h, S, N) weights among them"),
        (
            "flash keeps",
            format_bytes(f.flash_saved_bytes),
            f"x, q, k, v, output, merged, log-sum-exp {format_bytes(f.flash_lse_bytes)}",
        ),
        (
            "flash recomputes",
            f"{f.flash_tiles:,} tiles",
            f"{format_count(f.flash_recompute_flops)} FLOPs of scores and exp (FA-2 order)",
        ),
        (
            "--recompute keeps",
            format_bytes(f.recompute_saved_bytes),
            f"x alone; the forward again: {format_count(f.forward_flops)} FLOPs",
        ),
        (
            "Megatron (16-bit)",
            format_bytes(f.megatron_bytes),
            f"11·s·b·h + 5·a·s²·b; ours at 16-bit {format_bytes(f.ours_16bit_bytes)}",
        ),
        ("  it counts beside ours", "", terms),
        ("backward peak", format_bytes(f.peak_bytes), "saved + live gradients + weight grads"),
        (
            "FLOPs forward / backward",
            f"{format_count(f.forward_flops)} / {format_count(f.backward_flops)}",
            f"backward = {f.backward_flops / max(f.forward_flops, 1):.2f} x forward",
        ),
    ]
