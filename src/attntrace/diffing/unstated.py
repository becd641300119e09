"""A divergence no known bug reproduces that a choice of the model nobody stated explains: the
code rotates q and k (RoPE, its tables made by the code or handed to it, x-transformers'
``rotary_pos_emb``) while no flag said the model has RoPE; or it masks keys (a padding mask
the code makes itself) that the reference, called on x alone, cannot be given. CANNOT TELL,
with the flag that decides where there is one, never a "no known bug" finding."""

from __future__ import annotations

import dataclasses
from collections.abc import Collection, Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from attntrace.diffing.verdict import Undecided

DiffReport = Any  # diffing.diff_report's (it calls :func:`explain`: no import back)


def explain(
    report: DiffReport, tensors: Mapping[str, Any], explicit: Collection[str]
) -> DiffReport:
    """``report`` with its CANNOT TELL when an unstated RoPE or a padding mask the code makes
    explains a divergence no known bug reproduces; else ``report`` as it is."""
    d = report.diagnosis
    if report.undecided is not None or d is None or d.bug is not None or report.config.past:
        return report
    why = _rope(report, tensors, explicit) or _padding(report)
    return report if why is None else dataclasses.replace(report, undecided=why)


def _rope(
    report: DiffReport, tensors: Mapping[str, Any], explicit: Collection[str]
) -> Undecided | None:
    """RoPE, in either pairing, reproduces the code's output where no flag gave RoPE."""
    from attntrace.diffing.verdict import Undecided

    cfg = report.config
    if cfg.rope or "rope" in explicit:
        return None
    for style in ("half", "interleaved"):
        if _reproduces(report, dataclasses.replace(cfg, rope=True, rope_style=style), tensors):
            pairs = " --rope-style interleaved" if style == "interleaved" else ""
            return Undecided(
                f"the code rotates q and k (RoPE{', neighbours paired' if pairs else ''}), and "
                "no flag said the model has RoPE (attntrace's default: none): the model's "
                "choice or a bug",
                f"pass --rope{pairs} if that is the model's choice",
            )
    return None


def _reproduces(report: DiffReport, config: Any, tensors: Mapping[str, Any]) -> bool:
    """Whether the reference of ``config`` makes the output the code made."""
    import warnings

    import numpy as np

    from attntrace.diffing.match import agree
    from attntrace.engine.attention import trace_attention

    row = next((r for r in report.rows if r.step.name == "output"), None)
    if row is None or row.user is None:
        return False
    given = {k: v for k, v in tensors.items() if not k.startswith("rope_")}
    try:
        with warnings.catch_warnings(), np.errstate(all="ignore"):
            warnings.simplefilter("ignore")
            other = trace_attention(config, "numpy", tensors=given)["output"]
    except Exception:
        return False
    if other.value is None:
        return False
    found = agree(row.user.value, other.value, other.axes, report.tolerance)
    return found is not None and found.ok


def _padding(report: DiffReport) -> Undecided | None:
    """The code's weights are 0 for whole keys of a batch item (a padding mask it makes
    itself) where the reference, given no mask, has none."""
    import numpy as np

    from attntrace.diffing.match import MASKED_BELOW
    from attntrace.diffing.verdict import Undecided

    cfg = report.config
    row = next((r for r in report.rows if r.step.name == "weights"), None)
    if cfg.masked or row is None or row.user is None or row.user.shape != row.step.shape:
        return None
    held = row.user.value  # (B, h, S, N): the weights, or the masked scores before them
    if held.ndim != 4:
        return None
    with np.errstate(invalid="ignore"):
        hidden = (held == 0) | (held <= MASKED_BELOW)  # a weight of 0 or a masked score
    gone = np.all(hidden, axis=(1, 2))  # (B, N): keys no query of the item sees
    if not gone.any() or gone.all(axis=1).any():
        return None
    lengths = ",".join(str(int(n)) for n in (~gone).sum(axis=1))
    return Undecided(
        f"the code masks whole keys (a padding mask it makes itself: keys kept per batch item "
        f"{lengths}), which the reference, called on x alone, is not given",
        "",
    )
