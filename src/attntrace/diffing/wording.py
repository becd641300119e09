"""A diagnosis in the user's own terms: the fix written in their framework (numpy's
``np.swapaxes`` and ``axis=``, torch's ``.transpose`` and ``dim=``, an einops pattern for
einops code), with their batch or no batch, and an axis named as it is in their layout.

>>> from attntrace.diffing.diagnose import Diagnosis
>>> d = Diagnosis("merged", "merge-no-transpose", "heads merged without transposing back",
...               "...", "a.py:9", "merged = context.reshape(S, H)", 1.0, 1.0)
>>> print(in_users_terms(d, "numpy", batched=False).fix)
transpose back first: np.swapaxes(context, 0, 1).reshape(S, H)
"""

from __future__ import annotations

import re
from dataclasses import replace
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from attntrace.diffing.diagnose import Diagnosis


def framework(flavour: str, source: str) -> str:
    """``"einops"`` when the blamed line uses einops, else the layer's flavour.

    >>> framework("torch", 'q = rearrange(x, "b s (h d) -> b h s d", h=4)')
    'einops'
    """
    return "einops" if re.search(r"\b(rearrange|einops)\b", source) else flavour


def in_users_terms(d: Diagnosis, flavour: str, *, batched: bool) -> Diagnosis:
    """``d`` with its fix (and, for a softmax axis, its name) in the user's terms."""
    kind = framework(flavour, d.source)
    key = d.bug or ""
    if key == "merge-no-transpose":
        return replace(d, fix=f"transpose back first: {_merge(kind, batched)}")
    if key.startswith("split-no-transpose"):
        bare = "reshape(h, S, d)" if kind == "numpy" else "view(B, h, S, d)"
        return replace(
            d,
            fix=f"split the heads, then move them before S: {_split(kind, batched)}; a bare "
            f"{bare} mixes tokens into heads",
        )
    if key.startswith(("softmax-axis-", "softmax-sum-axis-")):
        return _softmax(d, kind)
    if kind == "numpy":
        return replace(d, fix=in_numpy(d.fix, batched=batched))
    return d


#: torch's words in a fix and numpy's for the same thing.
_NUMPY_WORDS = (
    (" (or use nn.Linear / F.linear)", ""),
    ("k.transpose(-2, -1)", "np.swapaxes(k, -2, -1)"),
    ("masked_fill(~keep, -inf)", "np.where(keep, scores, -np.inf)"),
    ("torch.tril(ones(S, S))", "np.tril(np.ones((S, S), dtype=bool))"),
    ("torch.triu(ones, diagonal=1)", "np.triu(np.ones((S, S), dtype=bool), 1)"),
    ("torch.arange(S)", "np.arange(S)"),
)


def in_numpy(fix: str, *, batched: bool) -> str:
    """A fix written with torch's names, in numpy's (``np.swapaxes``, ``np.where``, …).

    >>> in_numpy("swap only the last two axes of k: k.transpose(-2, -1)", batched=False)
    'swap only the last two axes of k: np.swapaxes(k, -2, -1)'
    >>> in_numpy("each kv head serves 2 consecutive query heads: k.repeat_interleave(2, dim=1)",
    ...          batched=False)
    'each kv head serves 2 consecutive query heads: np.repeat(k, 2, axis=0)'
    """
    for torch_words, numpy_words in _NUMPY_WORDS:
        fix = fix.replace(torch_words, numpy_words)
    axis = 1 if batched else 0  # the heads axis of (B, g, N, d) or (g, N, d)
    return re.sub(r"k\.repeat_interleave\((\d+), dim=1\)", rf"np.repeat(k, \1, axis={axis})", fix)


def _merge(kind: str, batched: bool) -> str:
    lead, shape = ("b ", "B, ") if batched else ("", "")
    if kind == "einops":
        return f'rearrange(context, "{lead}h s d -> {lead}s (h d)")'
    a, b = (1, 2) if batched else (0, 1)
    if kind == "numpy":
        return f"np.swapaxes(context, {a}, {b}).reshape({shape}S, H)"
    return f"context.transpose({a}, {b}).reshape({shape}S, H)"


def _split(kind: str, batched: bool) -> str:
    lead, shape = ("b ", "B, ") if batched else ("", "")
    if kind == "einops":
        return f'rearrange(q, "{lead}s (h d) -> {lead}h s d", h=h)'
    a, b = (1, 2) if batched else (0, 1)
    if kind == "numpy":
        return f"np.swapaxes(q.reshape({shape}S, h, d), {a}, {b})"
    return f"q.view({shape}S, h, d).transpose({a}, {b})"


def _softmax(d: Diagnosis, kind: str) -> Diagnosis:
    """The wrong axis and the right one as the user's layout numbers them (the reference's
    (…, h, S, N) may be their (S, h, N): its S is their axis 0)."""
    found = re.search(r"\((?:dim|axis)=(\d+), (\w+)", d.name)
    if found is None:
        return d
    order = _order(d.layout)
    wrong = int(found.group(1))
    theirs = order[wrong] if order and wrong < len(order) else wrong
    keys = order[-1] if order else -1
    right = -1 if not order or keys == len(order) - 1 else keys
    word = "axis" if kind == "numpy" else "dim"
    name = d.name.replace(found.group(0), f"({word}={theirs}, {found.group(2)}")
    sum_only = (d.bug or "").startswith("softmax-sum-axis-")
    if kind == "numpy":
        fix = (
            f"divide by the sum over the keys: e / e.sum(axis={right}, keepdims=True)"
            if sum_only
            else f"normalise over the keys, axis={right}: e / e.sum(axis={right}, keepdims=True) "
            f"with e = np.exp(s - s.max(axis={right}, keepdims=True))"
        )
    else:
        fix = f"take the softmax over the keys: softmax(scores, dim={right})"
    return replace(d, name=name, fix=fix)


def _order(layout: str) -> tuple[int, ...]:
    """The axes of a ``permute(…)`` layout; () for the reference's own.

    >>> _order("permute(1, 0, 2)"), _order("")
    ((1, 0, 2), ())
    """
    found = re.fullmatch(r"~?permute\(([\d, ]+)\)", layout)
    return tuple(int(n) for n in found.group(1).split(",")) if found else ()
