"""The silent bugs that live in a fused kernel's arguments (``F.scaled_dot_product_attention``,
``flex_attention``) that :mod:`attntrace.diffing.bugs` replays on the reference: a 0/1 keep
mask passed as a float, which SDPA adds; the sliding window dropped for ``is_causal=True``. They
come as the fields of a :class:`~attntrace.diffing.bugs.Bug` (the catalogue builds them, as
:mod:`attntrace.diffing.decode` does). Dropout left on at evaluation and the fixes written in
the user's own call are :mod:`attntrace.diffing.kernel_args`.

"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy as np

    Done = Mapping[str, np.ndarray]  # the reference's steps so far, by name


def kernel_bugs(s: Any) -> Iterator[dict[str, Any]]:
    """The bugs only a kernel call makes, for the :class:`~attntrace.diffing.bugs.Setting`
    ``s``, as the fields of a :class:`~attntrace.diffing.bugs.Bug`."""
    yield from _float_keep_mask(s)
    yield from _window_dropped(s)
    yield from _swapped_axes(s)


def _float_keep_mask(s: Any) -> Iterator[dict[str, Any]]:
    """A 0/1 keep mask given as a float (nanoGPT's ``bias`` buffer, ``tril(ones)``): SDPA adds
    a float mask to the scores, so the kept keys get +1 and nothing is masked."""
    if not s.kernel or "mask" not in s.ref or s.ref["mask"].dtype != "bool":
        return  # in eager code the same weights come from a mask filled with -1, not -inf

    def added(done: Done, value: np.ndarray) -> np.ndarray:
        out: np.ndarray = done["scaled"] + done["mask"].astype(value.dtype)  # (B, h, S, N)
        return out.astype(value.dtype)

    yield {
        "key": "mask-float-keep",
        "name": "a 0/1 keep mask passed as a float attn_mask: SDPA adds a float mask to the "
        "scores (+1 where kept), so no key is masked",
        "fix": "pass the keep mask as booleans, attn_mask=mask.bool() (True = attend), "
        "or is_causal=True for a causal mask",
        "at": "masked",
        "replace": {"masked": added},
    }


def _window_dropped(s: Any) -> Iterator[dict[str, Any]]:
    """``is_causal=True`` in place of the sliding-window mask: query i sees every key ≤ i."""
    cfg = s.config
    if cfg.window is None or not cfg.causal:
        return
    yield {
        "key": "window-dropped",
        "name": f"the sliding window (W = {cfg.window}) dropped for a plain causal mask "
        "(is_causal=True): query i sees every key ≤ i, not the last W",
        "fix": f"keep the window: is_causal=False, attn_mask=torch.ones(S, S, dtype=torch.bool)"
        f".tril().triu(-{cfg.window - 1}) (query i sees keys i - W < j ≤ i)",
        "at": "mask",
        "config": {"window": None},
    }


def _swapped_axes(s: Any) -> Iterator[dict[str, Any]]:
    """A mask (or a score_mod's bias) read with the query and key indices swapped:
    ``mask[kv_idx][q_idx]``, ``kv_idx >= q_idx`` for ``q_idx >= kv_idx``: the keep mask (or the
    bias) transposed over (S, N), which only S = N allows."""
    import numpy as np

    cfg = s.config
    if cfg.seq != cfg.keys or cfg.past:
        return
    if "mask" in s.ref and s.ref["mask"].dtype == "bool":

        def transposed(done: Done, value: np.ndarray) -> np.ndarray:
            return np.swapaxes(value, -1, -2).copy()  # (…, N, S) as (…, S, N)

        yield {
            "key": "mask-axes-swapped",
            "name": "the mask read with the query and key indices swapped (mask[kv, q], "
            "kv_idx >= q_idx): query i sees the keys j ≥ i",
            "fix": "index the mask as [q_idx][kv_idx] (rows: queries, columns: keys); a causal "
            "mask keeps kv_idx <= q_idx",
            "at": "mask",
            "replace": {"mask": transposed},
        }
    if "position_bias" in s.ref:

        def bias_t(done: Done, value: np.ndarray) -> np.ndarray:
            return np.swapaxes(value, -1, -2).copy()  # (h, S, N)

        yield {
            "key": "bias-axes-swapped",
            "name": "the position bias read with the query and key indices swapped "
            "(bias[h, kv, q]: the distance i - j for j - i)",
            "fix": "index the bias as [h, q_idx, kv_idx]: the relative distance is kv_idx - q_idx",
            "at": "position_bias",
            "replace": {"position_bias": bias_t},
        }
