"""attntrace's count of one ``F.scaled_dot_product_attention`` call beside what
``torch.utils.flop_counter.FlopCounterMode`` reports for it on the CPU, measured in the same run.

    python benchmarks/bench_kernel.py

For each call: attntrace's FLOPs (the call opened, its replayed steps counted by
``engine/costs.py``'s rules: 2 per multiply-add of q @ k_t and weights @ v, 1 per element of the
scale and of the mask, 5 per element of the softmax), FlopCounterMode's with the kernel the CPU
picks by default, and FlopCounterMode's with the math kernel forced
(``sdpa_kernel(SDPBackend.MATH)``: it counts the two batched products and nothing else, the
hidden keys of a causal mask included). The counts do not depend on the machine: the table is
the one in docs/guides/inside-the-kernel.md.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))  # this checkout


@dataclass(frozen=True)
class Case:
    """One SDPA call: its sizes and arguments."""

    name: str
    B: int
    h: int
    g: int
    S: int
    N: int
    d: int
    causal: bool = False
    mask: bool = False


CASES = (
    Case("prefill", 1, 16, 16, 1024, 1024, 64),
    Case("prefill, is_causal", 1, 16, 16, 1024, 1024, 64, causal=True),
    Case("padding mask (bool)", 2, 12, 12, 512, 512, 64, mask=True),
    Case("decode, GQA 32/8", 1, 32, 8, 1, 2048, 128),
)


def call(case: Case) -> tuple[Any, ...]:
    """The call's tensors and keywords."""
    import torch

    g = torch.Generator().manual_seed(0)
    q = torch.randn(case.B, case.h, case.S, case.d, generator=g)  # (B, h, S, d)
    k = torch.randn(case.B, case.g, case.N, case.d, generator=g)  # (B, g, N, d)
    v = torch.randn(case.B, case.g, case.N, case.d, generator=g)  # (B, g, N, d)
    keep = torch.ones(case.B, 1, case.S, case.N, dtype=torch.bool) if case.mask else None
    kwargs = {"is_causal": case.causal, "attn_mask": keep, "enable_gqa": case.g != case.h}
    return q, k, v, kwargs


def attntrace_count(case: Case) -> int:
    """attntrace's FLOPs of the opened call."""
    import torch.nn.functional as F  # noqa: N812

    import attntrace

    q, k, v, kwargs = call(case)
    with attntrace.capture(keep_values=False) as t:
        F.scaled_dot_product_attention(q, k, v, **kwargs)  # (B, h, S, d)
    (opened,) = t.kernels()
    return int(opened.total_flops)


def torch_count(case: Case, math_kernel: bool) -> int:
    """FlopCounterMode's total for the call (the default CPU kernel, or the math one)."""
    import contextlib

    import torch.nn.functional as F  # noqa: N812
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.utils.flop_counter import FlopCounterMode

    q, k, v, kwargs = call(case)
    kernel = sdpa_kernel(SDPBackend.MATH) if math_kernel else contextlib.nullcontext()
    with kernel, FlopCounterMode(display=False) as counter:
        F.scaled_dot_product_attention(q, k, v, **kwargs)  # (B, h, S, d)
    return int(counter.get_total_flops())


def main() -> int:
    import torch

    head = ("call (B, h, g, S, N, d)", "attntrace", "FlopCounterMode", "FlopCounterMode (math)")
    rows = []
    for case in CASES:
        sizes = f"{case.name} ({case.B}, {case.h}, {case.g}, {case.S}, {case.N}, {case.d})"
        counts = (attntrace_count(case), torch_count(case, False), torch_count(case, True))
        rows.append((sizes, *(f"{n:,}" for n in counts)))
    widths = [max(len(r[i]) for r in (head, *rows)) for i in range(len(head))]
    print(
        f"torch {torch.__version__.split('+')[0]}, CPU: FLOPs of one scaled_dot_product_attention"
    )
    for row in (head, *rows):
        print(
            "  ".join(
                c.ljust(w) if i == 0 else c.rjust(w)
                for i, (c, w) in enumerate(zip(row, widths, strict=True))
            )
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
