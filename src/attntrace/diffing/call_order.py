"""The check of weights taken in call order (no known names): the projections a module calls
in another order than q, k, v (k first, say) are assigned wrongly, and the diff would blame
correct code, or miss a bug that the wrong assignment hides. Each swap of two of q, k and v
that the assignment could hide is tried; a swap under which the module agrees differently
is reported in a note, naming it."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from attntrace.diffing.diff_report import DiffReport
    from attntrace.diffing.layer import Layer

#: The scheme name of weights taken in the order forward calls its nn.Linear layers.
CALL_ORDER = "nn.Linear call order"
#: The swaps tried: two projections exchanged.
SWAPS = (("q", "k"), ("q", "v"), ("k", "v"))


def swapped(tensors: Mapping[str, Any], a: str, b: str) -> dict[str, Any] | None:
    """``tensors`` with the weights (and biases) of projections ``a`` and ``b`` exchanged, or
    None when their shapes differ (the swap could not be hidden).

    >>> import numpy as np
    >>> t = {"w_q": np.zeros((2, 2)), "w_k": np.ones((2, 2)), "b_q": None, "b_k": None}
    >>> swapped(t, "q", "k")["w_q"][0, 0]
    np.float64(1.0)
    """
    out = dict(tensors)
    for kind in ("w", "b"):
        one, two = tensors.get(f"{kind}_{a}"), tensors.get(f"{kind}_{b}")
        if (one is None) != (two is None):
            return None
        if one is not None and getattr(one, "shape", None) != getattr(two, "shape", None):
            return None
        out[f"{kind}_{a}"], out[f"{kind}_{b}"] = two, one
    return out


def checked(
    report: DiffReport,
    layer: Layer,
    tensors: Mapping[str, Any],
    run: Callable[[dict[str, Any]], DiffReport],
) -> DiffReport:
    """``report`` with a note for each swap of two projections under which the module
    agrees differently (``run`` diffs it with other weights), when its weights were taken
    in call order; the verdict stays the one of the order forward calls them in."""
    if layer.weights is None or layer.weights.scheme != CALL_ORDER:
        return report
    notes = []
    for a, b in SWAPS:
        other = swapped(tensors, a, b)
        if other is None:
            continue
        again = run(other)
        if again.ok and report.ok:
            notes.append(
                f"the assignment by call order is ambiguous: {a} and {b} swapped also MATCH; "
                "name the projections (q_proj, k_proj, v_proj, o_proj) to tell them apart"
            )
        elif again.ok:
            notes.append(
                f"with {a} and {b} swapped the module MATCHes: forward may call {b}'s "
                f"projection before {a}'s, so the assignment by call order is not sure; "
                "name the projections (q_proj, k_proj, v_proj, o_proj) to tell"
            )
        elif report.ok:
            continue  # a swap that breaks the match: the assignment is the one used
    if not notes:
        return report
    return replace(report, notes=(*report.notes, *notes))
