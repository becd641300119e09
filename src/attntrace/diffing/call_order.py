"""The check of weights taken in call order (no known names): the projections a module calls
in another order than q, k, v (k first, say) are assigned wrongly, and the diff would blame
correct code, or miss a bug that the wrong assignment hides. Each swap of two of q, k and v
that the assignment could hide is tried; a swap under which the module agrees differently
is reported in a note, naming it."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
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
        if one is None:  # no biases (MPT): nothing to exchange, no key to add
            continue
        out[f"{kind}_{a}"], out[f"{kind}_{b}"] = two, one
    return out


def swap_notes(
    ok: bool,
    layer: Layer,
    tensors: Mapping[str, Any],
    agrees: Callable[[dict[str, Any]], bool],
) -> tuple[str, ...]:
    """The notes for each swap of two projections under which the module agrees differently
    from the diff whose verdict is ``ok`` (``agrees`` diffs it with other weights), when its
    weights were taken in call order; that verdict stays."""
    if layer.weights is None or layer.weights.scheme != CALL_ORDER:
        return ()
    notes = []
    for a, b in SWAPS:
        other = swapped(tensors, a, b)
        if other is None or not agrees(other):
            continue  # a swap that does not agree: the order used is the one that fits
        if ok:
            notes.append(
                f"the assignment by call order is ambiguous: {a} and {b} swapped also MATCH; "
                "name the projections (q_proj, k_proj, v_proj, o_proj) to tell them apart"
            )
        else:
            notes.append(
                f"with {a} and {b} swapped the module MATCHes: forward may call {b}'s "
                f"projection before {a}'s, so the assignment by call order is not sure; "
                "name the projections (q_proj, k_proj, v_proj, o_proj) to tell"
            )
    return tuple(notes)
