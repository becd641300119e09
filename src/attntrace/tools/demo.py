"""The worked example of the study notes (seeds/001): three tokens, Query, Key and Value given as
3×3 matrices, scores = Query @ Keyᵀ, softmax, output = weights @ Value. First exactly as the note
computes it (no scaling), then scaled by 1/√d (d = 3), as the Transformer paper does.

Computed with the numpy backend's operations (its matmul, transpose, scale and its stable
softmax), the same ones ``attntrace run`` uses; nothing here is a second implementation.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from attntrace.backends import Source, get_backend

if TYPE_CHECKING:
    import numpy as np

#: The note's matrices, row i belonging to token i.
QUERY = ((1, 0, 2), (2, 2, 2), (2, 1, 3))
KEY = ((0, 1, 1), (4, 4, 0), (2, 3, 1))
VALUE = ((1, 2, 3), (2, 8, 0), (2, 6, 3))


@dataclass(frozen=True)
class DemoStep:
    """One matrix of the worked example: its name, how it is computed, its values."""

    name: str
    op: str
    value: np.ndarray = field(repr=False)


def worked_example(scale: float | None = None) -> tuple[DemoStep, ...]:
    """Query, Key, Value, scores, (scaled,) weights and output of the note's example.

    ``scale=None`` follows the note (no scaling); a number multiplies the scores first.

    >>> steps = {s.name: s.value for s in worked_example()}
    >>> steps["scores"].tolist()
    [[2.0, 4.0, 4.0], [4.0, 16.0, 12.0], [4.0, 12.0, 10.0]]
    >>> steps["output"].round(4).tolist()[1]
    [2.0, 7.964, 0.054]
    """
    be = get_backend("numpy")
    q, k, v = (be.tensor(_source(m)) for m in (QUERY, KEY, VALUE))
    steps = [
        DemoStep("Query", "given", q),
        DemoStep("Key", "given", k),
        DemoStep("Value", "given", v),
    ]
    scores = be.matmul(q, be.transpose(k, -2, -1))
    steps.append(DemoStep("scores", "Query @ Key.T", scores))
    if scale is not None:
        scores = be.scale(scores, scale)
        steps.append(DemoStep("scaled", f"scores * {scale:.4g}", scores))
    weights = be.softmax(scores)
    steps.append(DemoStep("weights", f"softmax({steps[-1].name}, dim=-1)", weights))
    steps.append(DemoStep("output", "weights @ Value", be.matmul(weights, v)))
    return tuple(steps)


def sqrt_scale() -> float:
    """1/√d for the example's d = 3."""
    return 1.0 / math.sqrt(len(QUERY[0]))


def scaling_effect() -> list[str]:
    """What dividing by √d changed in the example, in sentences with its numbers."""
    plain = {s.name: s.value for s in worked_example()}
    scaled = {s.name: s.value for s in worked_example(sqrt_scale())}
    d = len(QUERY[0])
    top_plain, top_scaled = plain["weights"].max(axis=-1), scaled["weights"].max(axis=-1)
    return [
        f"Every score is divided by √d = √{d} = {math.sqrt(d):.3f}; the order of the scores in a "
        "row stays the same.",
        "The softmax becomes less peaked: the largest weight of each row goes from "
        + ", ".join(f"{a:.3f} to {b:.3f}" for a, b in zip(top_plain, top_scaled, strict=True))
        + ", so each output mixes more of the other Value rows.",
        "Why it exists: with query and key entries of variance 1, a dot product of d of them has "
        "variance d. "
        "For d = 64 the scores spread about ±8, softmax saturates to nearly one-hot and its "
        "gradients vanish. "
        "Dividing by √d brings the variance back to 1 whatever d is.",
    ]


def overflow_example(logit: float = 1000.0) -> tuple[np.ndarray, np.ndarray]:
    """Row [logit, logit]: the note's soft_max (exp overflows, inf / inf = nan) vs ours.

    >>> note, ours = overflow_example()
    >>> note.tolist(), ours.tolist()
    ([nan, nan], [0.5, 0.5])
    """
    import numpy as np

    z = np.array([logit, logit])
    with np.errstate(over="ignore", invalid="ignore"):
        t = np.exp(z)  # the note's soft_max, verbatim
        note: np.ndarray = np.exp(z) / np.expand_dims(np.sum(t, axis=-1), -1)
    ours: np.ndarray = get_backend("numpy").softmax(z)
    return note, ours


def _source(matrix: tuple[tuple[int, ...], ...]) -> Source:
    import numpy as np

    shape = (len(matrix), len(matrix[0]))
    return Source(shape, "float64", lambda: np.array(matrix, dtype=np.float64))
