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
    why = _causal(report, tensors, explicit) or _rope(report, tensors, explicit)
    why = why or _padding(report)
    return report if why is None else dataclasses.replace(report, undecided=why)


def _causal(
    report: DiffReport, tensors: Mapping[str, Any], explicit: Collection[str]
) -> Undecided | None:
    """A causal mask reproduces the code's output where no flag said causal (torch's
    ``baddbmm(mask, q, kᵀ)`` adds it with the scores, before any step the catalogue tries)."""
    from attntrace.diffing.verdict import _unstated

    cfg = report.config
    if cfg.causal or "causal" in explicit:
        return None
    if not _reproduces(report, dataclasses.replace(cfg, causal=True), tensors):
        return None
    return _unstated("causal", "--causal", "applies a causal mask", report.read)


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
    """Whether the reference of ``config`` makes the output the code returned (or, its output
    not lined up, the weights one of the code's tensors holds)."""
    import warnings

    import numpy as np

    from attntrace.diffing.match import agree
    from attntrace.engine.attention import trace_attention

    given = {k: v for k, v in tensors.items() if not k.startswith("rope_")}
    try:
        with warnings.catch_warnings(), np.errstate(all="ignore"):
            warnings.simplefilter("ignore")
            other = trace_attention(config, "numpy", tensors=given)
    except Exception:  # a variant the engine refuses explains nothing
        return False
    row = next((r for r in report.rows if r.step.name == "output"), None)
    differing = [r.user for r in report.rows if r.user is not None and r.status == "differs"]
    checks = [([row.user], other["output"])] if row is not None and row.user is not None else []
    checks.append((differing, other["weights"]))  # the output in a layout not lined up
    for held, step in checks:
        if step.value is None:
            continue
        for user in held:
            found = agree(user.value, step.value, step.axes, report.tolerance)
            if found is not None and found.ok:
                return True
    return False


def _padding(report: DiffReport) -> Undecided | None:
    """The code hides whole keys of a batch item from every query (a padding mask it makes
    itself: masked scores, weights of 0) where the reference, given no mask, has none; the
    remedy is ``--key-lengths`` with the keys each item keeps, which masks the reference's."""
    from attntrace.diffing.verdict import Undecided

    cfg = report.config
    if cfg.key_lengths is not None or cfg.window is not None:
        return None
    steps = ("scores", "scaled", "masked", "weights")
    gone = next(
        (g for r in report.rows if r.step.name in steps and (g := _keys_gone(r)) is not None),
        None,
    )
    if gone is None:
        return None
    import numpy as np

    kept = (~gone).sum(axis=1)  # (B,)
    lengths = ",".join(str(int(n)) for n in kept)
    said = f"a padding mask it makes itself: keys kept per batch item {lengths}"
    if not np.array_equal(gone, np.arange(gone.shape[1]) >= kept[:, None]):  # (B, N)
        return Undecided(  # --key-lengths hides the last keys of an item, never others
            f"the code masks whole keys ({said}, not the last keys of each item), which the "
            "reference, called on x alone, is not given",
            "",
        )
    return Undecided(
        f"the code masks whole keys ({said}), which the reference, called on x alone, is not given",
        f"pass --key-lengths {lengths} if those are the keys the model pads",
    )


def _keys_gone(row: Any) -> Any:
    """(B, N): the keys no query of a batch item sees in the user's tensor of ``row`` (scores
    masked, or weights of 0), when some but not all keys of an item are gone; else None."""
    import numpy as np

    from attntrace.diffing.match import MASKED_BELOW

    if row.user is None or row.step.value is None or len(row.step.shape) != 4:
        return None
    held = row.user.value  # (B, h, S, N), or torch's (B·h, S, N)
    if held.size != row.step.value.size:
        return None
    held = held.reshape(row.step.shape)  # (B, h, S, N)
    with np.errstate(invalid="ignore"):
        hidden = (held == 0) | (held <= MASKED_BELOW)  # a weight of 0 or a masked score
    gone = np.all(hidden, axis=(1, 2))  # (B, N)
    return gone if gone.any() and not gone.all(axis=1).any() else None
