"""Named axes by propagation: the input is (B, S, H) or (S, H); every captured op carries the
letters of its operands to its output by the rule of its kind (a reshape that splits H gives
(h, d), a transpose swaps letters, a matmul keeps the outer axes …). Where no rule decides, a
size known to belong to exactly one letter names the axis, else it prints ``?``.

>>> sizes = Sizes({"S": 3, "H": 768})
>>> split(("S", "H"), (3, 768), (3, 12, 64), sizes), sizes.known["h"], sizes.known["d"]
(('S', 'h', 'd'), 12, 64)
>>> split(("S", "h", "d"), (3, 12, 64), (3, 768), sizes)
('S', 'H')
>>> split(("S", "3·H"), (3, 2304), (3, 3, 12, 64), sizes)  # q, k, v of a fused projection
('S', '3', 'h', 'd')
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from attntrace.capturing.events import Event, Shape

Axes = tuple[str, ...]
UNKNOWN = "?"
#: The last axis of a projection that makes q, k and v at once: (…, 3·H).
FUSED_QKV = "3·H"
#: The same with fewer key/value heads (Phi-3's qkv_proj): h·d + 2·g·d wide, cut in three.
FUSED_GQA = "(h+2g)·d"
#: k and v in one projection, cut in two (x-transformers' ``to_kv(x).chunk(2, dim=-1)``).
FUSED_KV = "2·H"
#: The same with fewer key/value heads: 2·g·d wide.
FUSED_KV_GQA = "2·g·d"
FUSED_KVS = (FUSED_KV, FUSED_KV_GQA)
FUSED = (FUSED_QKV, FUSED_GQA, *FUSED_KVS)
#: A fused (h+2g)·d viewed to (h+2g, d): the heads of q, then of k, then of v (Falcon's MQA).
FUSED_HEADS = "h+2g"
#: A fused (h+2g)·d viewed to (g, h/g+2, d): per key/value head, its h/g query heads, then its
#: k and its v (Falcon's new decoder architecture).
GROUP_HEADS = "h/g+2"
#: The query heads of one key/value head.
GROUP = "h/g"
#: The axes of a fused projection viewed to heads that slices then cut into q, k and v.
HEADS_FUSED = (FUSED_HEADS, GROUP_HEADS)


@dataclass
class Sizes:
    """The size of each axis letter found so far (``--axes h=12,d=64`` starts it)."""

    known: dict[str, int] = field(default_factory=dict)
    roots: int = 0  # inputs seen (x, then x_kv for cross-attention)
    last_root: tuple[Shape, Axes] | None = None
    #: the sums a concatenation made (a KV cache and the new keys: ``N+S``), by their size
    sums: dict[str, int] = field(default_factory=dict)
    #: the ranks a layer is split over (``trace --nproc N``): a projection H/N wide holds h/N
    #: heads of d, ``h/N·d``
    parts: int = 1

    def letter(self, size: int) -> str:
        """The one letter of this size, ``1`` for size 1, else the one sum a concatenation
        made of it (``N+S``: the cache length a causal mask is sliced to), else ``?``.

        >>> Sizes({"S": 3, "d": 64}).letter(64), Sizes({"S": 3, "H": 3}).letter(3)
        ('d', '?')
        >>> Sizes({"N": 5, "S": 1}, sums={"N+S": 6}).letter(6)
        'N+S'
        """
        if size == 1:
            return "1"
        names = [k for k, n in self.known.items() if n == size and "·" not in k]
        if not names:
            names = [k for k, n in self.sums.items() if n == size]
        return names[0] if len(names) == 1 else UNKNOWN

    def size(self, letter: str) -> int | None:
        """The size of a letter or of a product such as ``g·d`` (None when unknown)."""
        parts = [self.known.get(p) for p in letter.split("·")]
        return (
            None if any(p is None for p in parts) else math.prod(p for p in parts if p is not None)
        )

    def bind(self, axes: Axes, shape: Shape) -> None:
        for a, n in zip(axes, shape, strict=True):
            if a not in (UNKNOWN, "1") and not set(a) & set("·+/()"):  # letters, not products
                self.known[a] = n


#: The axis letters that propagation names, and what each stands for (``--axes`` takes these).
LETTERS = {
    "B": "batch",
    "S": "queries",
    "H": "width of x",
    "h": "heads",
    "d": "head size",
    "g": "key/value heads",
    "N": "keys of a second input",
    "M": "width of a second input",
}


def parse_axes(text: str) -> dict[str, int]:
    """``h=12,d=64`` as given to ``--axes``.

    >>> parse_axes("h=12, d=64")
    {'h': 12, 'd': 64}
    """
    from attntrace.errors import ConfigError
    from attntrace.units import bounded, quoted

    out: dict[str, int] = {}
    for part in filter(None, (p.strip() for p in bounded(text, "--axes").split(","))):
        name, _, size = part.partition("=")
        size = size.strip()
        if not re.fullmatch(r"[A-Za-z]\w*+", name.strip()) or not size.isdigit() or len(size) > 19:
            raise ConfigError(
                f"cannot read --axes {quoted(text)}; write LETTER=SIZE pairs, e.g. h=12,d=64"
            )
        out[name.strip()] = int(size)
    return check_letters(out, "--axes ")


def check_letters(given: Mapping[str, int], where: str = "axes=") -> dict[str, int]:
    """``given`` when every key is a letter of :data:`LETTERS` and every size is positive;
    else a ConfigError naming the letters (a letter no rule uses would be silently ignored).

    >>> check_letters({"x": 4}, "--axes ")
    Traceback (most recent call last):
    ...
    attntrace.errors.ConfigError: --axes x=4: x is not an axis letter; the letters are B ...
    """
    from attntrace.errors import ConfigError

    for letter, size in given.items():
        if letter not in LETTERS:
            near = next((k for k in LETTERS if k.lower() == str(letter).lower()), None)
            hint = f" (did you mean {near}: {LETTERS[near]}?)" if near else ""
            names = ", ".join(f"{k} ({v})" for k, v in LETTERS.items())
            raise ConfigError(
                f"{where}{letter}={size}: {letter} is not an axis letter{hint}; the letters "
                f"are {names}"
            )
        if isinstance(size, bool) or not isinstance(size, int) or size < 1:
            raise ConfigError(f"{where}{letter}={size}: a size is a whole number of at least 1")
    return dict(given)


def broadcast(shape: Shape, operands: Sequence[tuple[Axes, Shape]], sizes: Sizes) -> Axes:
    """Elementwise ops align axes from the right; each output axis takes the letter of an
    operand axis of the same size."""
    out = []
    for j in range(1, len(shape) + 1):
        n = shape[-j]
        letters = [a[-j] for a, s in operands if len(s) >= j and s[-j] == n and a[-j] != UNKNOWN]
        out.append(letters[0] if letters else sizes.letter(n))
    return tuple(reversed(out))


def matmul(shape: Shape, a: tuple[Axes, Shape], b: tuple[Axes, Shape], sizes: Sizes) -> Axes:
    """(…, m, k) @ (…, k, n) -> (…, m, n); 1-D operands lose their axis."""
    (ax, sa), (bx, sb) = a, b
    rows = ax[-2:-1] if len(sa) >= 2 else ()
    cols = bx[-1:] if len(sb) >= 2 else ()
    batch = shape[: len(shape) - len(rows) - len(cols)]
    lead = broadcast(batch, [(ax[:-2], sa[:-2]), (bx[:-2], sb[:-2])], sizes)
    return (*lead, *rows, *cols)


def linear(shape: Shape, x: tuple[Axes, Shape], sizes: Sizes) -> Axes:
    """x (…, in) -> (…, out): ``H`` stays ``H``; ``3·H`` when q, k and v come out together;
    ``g·d`` when the size says kv-heads.

    >>> linear((2, 5, 192), (("B", "S", "H"), (2, 5, 64)), Sizes({"H": 64, "d": 16}))
    ('B', 'S', '3·H')
    """
    ax, sx = x
    out = shape[-1]
    if sx and out == sx[-1] and ax[-1] != UNKNOWN:
        last = ax[-1]
    elif sizes.known.get("H") == out:
        last = "H"
    elif sizes.known.get("H") is not None and out == 3 * sizes.known["H"]:
        last = FUSED_QKV  # q, k and v in one projection (nanoGPT's c_attn), split afterwards
    elif sizes.parts > 1 and out * sizes.parts == sizes.known.get("H"):
        last = f"h/{sizes.parts}·d"  # a column-parallel projection: the rank's heads
    elif "d" in sizes.known and out % sizes.known["d"] == 0 and sizes.letter(out) in (UNKNOWN, "d"):
        groups = out // sizes.known["d"]  # 1: one key/value head (multi-query attention)
        sizes.known.setdefault("g", groups)
        last = "g·d" if sizes.known["g"] == groups else UNKNOWN
    else:
        last = sizes.letter(out)
    lead = broadcast(shape[:-1], [(ax[:-1], sx[:-1])], sizes)
    return (*lead, last)


def picked(x: tuple[Axes, Shape], shape: Shape, picks: Sequence[int | None], sizes: Sizes) -> Axes:
    """``t[key]`` by basic indexing: each axis keeps the letter of the operand axis it comes
    from (``picks``, None for a new axis), unless a slice changed its size.

    >>> picked((("B", "g", "S", "d"), (2, 2, 5, 8)), (2, 2, 1, 5, 8), (0, 1, None, 2, 3), Sizes())
    ('B', 'g', '1', 'S', 'd')
    """
    axes, before = x
    return tuple(
        "1"
        if n == 1 and (k is None or before[k] != 1)
        else axes[k]
        if k is not None and before[k] == n
        else sizes.letter(n)
        for k, n in zip(picks, shape, strict=True)
    )


def fused_projection(shape: Shape, x: tuple[Axes, Shape], sizes: Sizes, parts: int = 3) -> Axes:
    """x (…, H) -> (…, 3·H), or (…, (h+2g)·d) with fewer key/value heads: a projection that
    later ops cut in three (q, k and v at once); cut in two (``parts=2``), k and v: (…, 2·H)
    or (…, 2·g·d).

    >>> fused_projection((2, 5, 96), (("B", "S", "H"), (2, 5, 64)), Sizes({"H": 64}))
    ('B', 'S', '(h+2g)·d')
    >>> fused_projection((2, 5, 128), (("B", "S", "H"), (2, 5, 64)), Sizes({"H": 64}), 2)
    ('B', 'S', '2·H')
    """
    ax, sx = x
    width = sizes.known.get("H", -1)
    if parts == 2:
        last = FUSED_KV if shape[-1] == 2 * width else FUSED_KV_GQA
    else:
        last = FUSED_QKV if shape[-1] == 3 * width else FUSED_GQA
    return (*broadcast(shape[:-1], [(ax[:-1], sx[:-1])], sizes), last)


def fused_part(shape: Shape, fused: tuple[Axes, Shape], first: bool, sizes: Sizes) -> Axes:
    """A part cut from the last axis of a fused projection (split, chunk, ``qkv[..., :H]``),
    named as a projection's output: ``H``, else ``h·d`` for q (the ``first``) and ``g·d``.

    >>> sizes = Sizes({"H": 64, "d": 16})
    >>> fused = (("B", "S", FUSED_GQA), (2, 5, 128))
    >>> fused_part((2, 5, 64), fused, True, sizes), fused_part((2, 5, 32), fused, False, sizes)
    (('B', 'S', 'H'), ('B', 'S', 'g·d'))
    >>> sizes.known["g"]
    2
    """
    axes, width = fused[0], shape[-1]
    q_first = axes[-1] not in FUSED_KVS  # a packed kv starts with k: named as k_proj is
    if q_first and first and width != sizes.known.get("H") and "d" in sizes.known:
        return (*axes[:-1], "h·d" if width % sizes.known["d"] == 0 else sizes.letter(width))
    part = linear(shape, ((*axes[:-1], UNKNOWN), fused[1]), sizes)
    if part[-1] == "g·d" and sizes.known.get("g") == 1 and "1" in part[:-1]:
        return one_kv_head(part)
    return part


def one_kv_head(axes: Axes) -> Axes:
    """The k or v of one head cut from a fused projection that was given an axis of 1 first
    (GPTBigCode's ``c_attn(x).unsqueeze(1).split(…)``): that axis is its one kv head g.

    >>> one_kv_head(("B", "1", "S", "g·d"))
    ('B', 'g', 'S', 'd')
    """
    k = axes.index("1")
    return (*axes[:k], "g", *axes[k + 1 : -1], "d")


def repeat(axes: Axes, before: Shape, after: Shape, sizes: Sizes) -> Axes:
    """repeat_interleave, expand, tile: an axis that grows from the kv-heads g to h is ``h``.

    >>> repeat(("g", "S", "d"), (2, 5, 8), (4, 5, 8), Sizes({"h": 4, "g": 2, "S": 5, "d": 8}))
    ('h', 'S', 'd')
    """
    out = []
    for j in range(1, len(after) + 1):
        n = after[-j]
        a = axes[-j] if j <= len(axes) else sizes.letter(n)
        same = j <= len(before) and before[-j] == n
        grown = a == "g" and sizes.known.get("h") == n
        out.append(a if same else "h" if grown else _group_of(axes, j, n, sizes))
    return tuple(reversed(out))


def _group_of(axes: Axes, j: int, n: int, sizes: Sizes) -> str:
    """Axis ``-j`` of ``axes`` repeated to ``n``: ``h/g`` when it is a ``1`` after the
    key/value heads and ``n`` is h / g (HF's repeat_kv, Falcon's ``broadcast_to``), else
    the letter of its size."""
    h, g = sizes.known.get("h"), sizes.known.get("g")
    after_g = j < len(axes) and axes[-j] == "1" and axes[-j - 1] == "g"
    return GROUP if after_g and h is not None and g is not None and n * g == h else sizes.letter(n)


def permute(axes: Axes, order: Sequence[int]) -> Axes:
    """The letters in the new order (``order[j]`` is the input axis of output axis j).

    >>> permute(("S", "h", "d"), (1, 0, 2))
    ('h', 'S', 'd')
    """
    return tuple(axes[i] for i in order)


@dataclass(frozen=True)
class Mixing:
    """A reshape whose groups of axes cut across each other: (S, H) -> (h, S, d) reads S's
    values as heads; the axes it found and the order they had to be in to be regrouped."""

    axes: Axes  # the operand's axes of the group, H spelled h, d when they are known
    sizes: Shape
    after: Shape  # the sizes the group was reshaped to
    needed: Axes | None  # the order the axes would have to be in; None when none fits


def split(
    axes: Axes, before: Shape, after: Shape, sizes: Sizes, mixed: list[Mixing] | None = None
) -> Axes:
    """A reshape: axes are grouped by equal products; one axis split in two gives its parts
    (H -> h, d), two merged give their product (h, d -> H), size-1 axes come and go. A group
    whose parts do not line up (the heads split across S) is ``?``, and told in ``mixed``.

    >>> mixed = []
    >>> split(("S", "H"), (5, 64), (4, 5, 16), Sizes({"S": 5, "h": 4, "d": 16}), mixed)
    ('?', '?', '?')
    >>> mixed[0].needed
    ('h', 'S', 'd')
    """
    out: list[str] = [UNKNOWN] * len(after)
    axes = tuple(axes)
    i = j = 0
    while i < len(before) and j < len(after):
        if before[i] == 1 or after[j] == 1:
            if before[i] == 1 and after[j] == 1:
                out[j] = axes[i]
                i, j = i + 1, j + 1
            elif after[j] == 1 and axes[i].startswith("g·") and sizes.known.get("g") == 1:
                out[j], j = "g", j + 1  # g·d -> (1, d): the one key/value head
                axes = (*axes[:i], axes[i].removeprefix("g·"), *axes[i + 1 :])
            elif after[j] == 1:
                out[j], j = "1", j + 1
            else:
                i += 1
            continue
        gi, gj = _group(before, after, i, j)
        if gi is None or gj is None:
            break
        out[j:gj] = _regroup(axes[i:gi], before[i:gi], after[j:gj], sizes, mixed)
        i, j = gi, gj
    for k in range(j, len(after)):
        out[k] = "1" if after[k] == 1 else UNKNOWN
    return tuple(out)


def _group(a: Shape, b: Shape, i: int, j: int) -> tuple[int | None, int | None]:
    pa, pb, i, j = a[i], b[j], i + 1, j + 1
    while pa != pb:
        if pa < pb and i < len(a):
            pa, i = pa * a[i], i + 1
        elif pb < pa and j < len(b):
            pb, j = pb * b[j], j + 1
        else:
            return None, None
    return i, j


def _regroup(
    axes: Axes, before: Shape, after: Shape, sizes: Sizes, mixed: list[Mixing] | None
) -> list[str]:
    if len(before) == 1 and len(after) == 1:
        return [axes[0]]
    if len(before) == 1:
        return _split_one(axes[0], after, sizes)
    if len(after) == 1:
        joined = "·".join(axes)
        if axes == ("g", GROUP):  # (g, h/g) -> h: the query heads of each key/value head
            sizes.known.setdefault("h", after[0])
        if axes[0] == "g" and sizes.known.get("h") == after[0]:
            return ["h"]  # (g, h / g) -> h: the kv-heads repeated (HF's repeat_kv)
        if axes[0] == RANKS and axes[1:] in ((f"h/{before[0]}",), (f"g/{before[0]}",)):
            joined = axes[1][0]  # (N, h/N) -> h: every rank's heads (Ulysses, back)
        if UNKNOWN in axes:
            return [sizes.letter(after[0])]
        return ["H" if joined == "h·d" and sizes.known.get("H") == after[0] else joined]
    return _regroup_many(axes, before, after, sizes, mixed)


def _regroup_many(
    axes: Axes, before: Shape, after: Shape, sizes: Sizes, mixed: list[Mixing] | None
) -> list[str]:
    """Several axes to several: named when ``after`` regroups their parts in order, else
    ``?`` (and told in ``mixed``)."""
    atoms = _atoms(axes, before, sizes)
    grouped = _grouped(atoms, after, sizes)
    if grouped is not None:
        return grouped
    if (heads := _heads_into_batch(atoms, after, sizes)) is not None:
        return heads
    if mixed is not None and UNKNOWN not in (a for a, _ in atoms):
        mixed.append(
            Mixing(
                tuple(a for a, _ in atoms),
                tuple(n for _, n in atoms),
                after,
                _needed(atoms, after, sizes),
            )
        )
    return [UNKNOWN] * len(after)


def _heads_into_batch(
    atoms: Sequence[tuple[str, int]], after: Shape, sizes: Sizes
) -> list[str] | None:
    """(S, B, H) viewed to (S, B·h, d) while h and d are not known yet (torch's
    ``F.multi_head_attention_forward`` folds the heads into the batch): H split in the one
    way that regroups in order, h and d then known.

    >>> sizes = Sizes({"S": 3, "B": 2, "H": 64})
    >>> _heads_into_batch([("S", 3), ("B", 2), ("H", 64)], (3, 8, 16), sizes), sizes.known["h"]
    (['S', 'B·h', 'd'], 4)
    """
    names = [a for a, _ in atoms]
    if names.count("H") != 1 or "h" in sizes.known or "d" in sizes.known:
        return None
    k = names.index("H")
    width = atoms[k][1]
    found = []
    for h in range(2, width):
        if width % h == 0:
            tried = [*atoms[:k], ("h", h), ("d", width // h), *atoms[k + 1 :]]
            grouped = _grouped(tried, after, Sizes({**sizes.known, "h": h, "d": width // h}))
            if grouped is not None and "h" in "·".join(grouped).split("·"):
                found.append((h, grouped))
    if len(found) != 1:
        return None
    h, grouped = found[0]
    sizes.bind(("h", "d"), (h, width // h))
    return grouped


def _atoms(axes: Axes, before: Shape, sizes: Sizes) -> list[tuple[str, int]]:
    """The axes as their smallest known parts: H as (h, d), g·d as (g, d) when known."""
    out: list[tuple[str, int]] = []
    for a, n in zip(axes, before, strict=True):
        pieces = ["h", "d"] if a == "H" else a.split("·")
        known = [sizes.known.get(p) for p in pieces]
        if len(pieces) > 1 and None not in known and math.prod(k or 0 for k in known) == n:
            out += [(p, k or 0) for p, k in zip(pieces, known, strict=True)]
        else:
            out.append((a, n))
    return out


def _grouped(atoms: Sequence[tuple[str, int]], after: Shape, sizes: Sizes) -> list[str] | None:
    """The names of ``after`` when its sizes are products of runs of ``atoms`` in order."""
    out, k = [], 0
    for n in after:
        group, size = [], 1
        while size < n and k < len(atoms):
            group.append(atoms[k][0])
            size, k = size * atoms[k][1], k + 1
        if size != n:
            return None
        joined = "·".join(group)
        out.append(
            sizes.letter(n)
            if UNKNOWN in group
            else "H"
            if joined == "h·d" and sizes.known.get("H") == n
            else joined
        )
    return out if k == len(atoms) else None


def _needed(atoms: Sequence[tuple[str, int]], after: Shape, sizes: Sizes) -> Axes | None:
    """An order of ``atoms`` that the reshape to ``after`` would regroup (few axes: tried all)."""
    from itertools import permutations

    for order in permutations(atoms):
        if _grouped(order, after, sizes) is not None:
            return tuple(a for a, _ in order)
    return None


def _split_one(letter: str, parts: Shape, sizes: Sizes) -> list[str]:
    if letter in FUSED and (fused := _split_fused(letter, parts, sizes)) is not None:
        return fused
    if (by_rank := _split_by_rank(letter, parts, sizes)) is not None:
        return by_rank
    pieces = letter.split("·")
    if len(pieces) == len(parts) and all(
        sizes.known.get(p, n) == n for p, n in zip(pieces, parts, strict=True)
    ):
        sizes.bind(tuple(pieces), parts)
        return pieces
    if letter in ("H", "M") and len(parts) == 2:
        h, d = sizes.known.get("h"), sizes.known.get("d")
        first = "h" if letter == "H" else "g"
        if (h is None and d is None) or (
            parts[0] == (h or parts[0]) and parts[1] == (d or parts[1])
        ):
            sizes.bind((first, "d"), parts) if first == "h" else sizes.bind(("d",), parts[1:])
            return [first, "d"]
        if parts[0] == d and parts[1] == h:
            return ["d", first]
    return [sizes.letter(n) for n in parts]


#: The axis of the ranks (``trace --nproc N``): a tensor cut in N parts, one for each rank,
#: as Ulysses cuts its heads before an all_to_all.
RANKS = "R"


def _split_by_rank(letter: str, parts: Shape, sizes: Sizes) -> list[str] | None:
    """``h`` viewed to (N, h/N) on a rank of ``trace --nproc N``: one part of the heads for
    each rank (Ulysses' all_to_all), ``R h/N``; None for any other split.

    >>> _split_by_rank("h", (2, 4), Sizes({"h": 8}, parts=2))
    ['R', 'h/2']
    """
    n = sizes.parts
    if n < 2 or len(parts) != 2 or parts[0] != n or letter not in ("h", "g"):
        return None
    if sizes.known.get(letter) != n * parts[1]:
        return None
    sizes.known.setdefault(RANKS, n)
    return [RANKS, f"{letter}/{n}"]


def _split_fused(letter: str, parts: Shape, sizes: Sizes) -> list[str] | None:
    """A fused projection's axis split: its axis of parts first, (3, h, d) (timm) or
    (2, g, d) (k and v), or viewed to heads (see :func:`fused_heads`)."""
    if letter == FUSED_QKV and parts[0] == 3 and len(parts) in (2, 3):  # timm: (…, 3, h, d)
        return ["3", *_split_one("H", parts[1:], sizes)]
    if letter in FUSED_KVS and parts[0] == 2 and len(parts) == 3:  # k, v: (…, 2, g, d)
        return ["2", *_split_one("H" if letter == FUSED_KV else "g·d", parts[1:], sizes)]
    return fused_heads(letter, parts, sizes)


def fused_heads(letter: str, parts: Shape, sizes: Sizes) -> list[str] | None:
    """A fused q, k, v axis viewed to heads whose parts slices take later (Falcon): 3·H as
    (h, 3, d), q, k and v of each head side by side; (h+2g)·d as (h+2g, d), all heads of q,
    then of k, then of v; or as (g, h/g+2, d), each key/value head after its query heads.
    None for any other view.

    >>> fused_heads(FUSED_QKV, (4, 3, 16), Sizes({"H": 64}))
    ['h', '3', 'd']
    >>> fused_heads(FUSED_GQA, (6, 16), Sizes()), fused_heads(FUSED_GQA, (2, 4, 16), Sizes())
    (['h+2g', 'd'], ['g', 'h/g+2', 'd'])
    """
    known = sizes.known
    d = known.get("d", parts[-1])
    if letter == FUSED_QKV and len(parts) == 3 and parts[1] == 3 and parts[2] == d:
        heads = _split_one("H", (parts[0], parts[2]), sizes)
        return [heads[0], "3", heads[1]] if heads == ["h", "d"] else None
    if letter != FUSED_GQA or parts[-1] != d or len(parts) not in (2, 3):
        return None
    h, g = known.get("h"), known.get("g", parts[0] if len(parts) == 3 else None)
    if len(parts) == 2 and (h is None or g is None or parts[0] == h + 2 * g):
        sizes.bind(("d",), parts[1:])
        return [FUSED_HEADS, "d"]
    if len(parts) == 3 and g == parts[0] and (h is None or g * (parts[1] - 2) == h):
        sizes.bind(("g", "d"), (parts[0], parts[2]))
        return ["g", GROUP_HEADS, "d"]
    return None


def heads_part(axes: Axes, axis: int, start: int, stop: int, sizes: Sizes) -> Axes:
    """A slice of a :data:`HEADS_FUSED` axis (``qkv[..., :-2, :]``, ``qkv[..., [-2], :]``):
    the first part, q's, is ``h`` (``h/g`` per key/value head), the others, k's and v's, ``g``
    (``1`` per key/value head).

    >>> sizes = Sizes({"d": 16})
    >>> heads_part(("B", "S", FUSED_HEADS, "d"), 2, 0, 4, sizes), sizes.known["h"]
    (('B', 'S', 'h', 'd'), 4)
    >>> heads_part(("B", "S", "g", GROUP_HEADS, "d"), 3, 2, 3, Sizes())
    ('B', 'S', 'g', '1', 'd')
    """
    n = stop - start
    if axes[axis] == GROUP_HEADS:  # per key/value head: its one k or v, or h/g of q
        h, g = sizes.known.get("h"), sizes.known.get("g")
        fits = n == 1 if start else h is None or g is None or n * g == h
        name = ("1" if start else GROUP) if fits else UNKNOWN
    else:
        name = "g" if start else "h"
        name = name if sizes.known.setdefault(name, n) == n else UNKNOWN
    return (*axes[:axis], name, *axes[axis + 1 :])


def reduce(
    axes: Axes, before: Shape, after: Shape, dims: Sequence[int] | None, sizes: Sizes
) -> Axes:
    """A sum, max or mean: reduced axes vanish, or become ``1`` with keepdim."""
    if len(after) == len(before):
        return tuple(a if n == m else "1" for a, n, m in zip(axes, before, after, strict=True))
    if dims is None:
        return tuple(sizes.letter(n) for n in after)
    gone = {d % len(before) for d in dims} if before else set()
    kept = tuple(a for k, a in enumerate(axes) if k not in gone)
    return kept if len(kept) == len(after) else tuple(sizes.letter(n) for n in after)


def einsum(
    equation: str, shape: Shape, operands: Sequence[tuple[Axes, Shape]], sizes: Sizes
) -> Axes:
    """Each output subscript takes the letter its subscript has in the first operand with it."""
    spec = equation.replace(" ", "")
    if "..." in spec or "->" not in spec:
        return tuple(sizes.letter(n) for n in shape)
    ins, out = spec.split("->")
    found: dict[str, str] = {}
    for subs, (axes, _) in zip(ins.split(","), operands, strict=False):
        for s, a in zip(subs, axes, strict=False):
            if a != UNKNOWN:
                found.setdefault(s, a)
    return tuple(found.get(s, sizes.letter(n)) for s, n in zip(out, shape, strict=False))


def root(event: Event, sizes: Sizes) -> Axes:
    """A tensor the user's code creates: the input x (B, S, H) / (S, H) when its sizes are new,
    a second input (B, N, M) for cross-attention, else letters by size (a mask (S, S) …)."""
    given = event.params.get("axes")
    shape = event.shape
    if given:
        sizes.bind(given, shape)
        sizes.roots += 1
        sizes.last_root = (shape, tuple(given))
        return tuple(given)
    if sizes.last_root is not None and sizes.last_root[0] == shape:
        return sizes.last_root[1]  # Key and Value made like Query
    if (weight := _weight_axes(shape, sizes)) is not None:
        return weight
    guessed = tuple(sizes.letter(n) for n in shape)
    if (mask := _mask_axes(shape, sizes)) is not None:
        return mask
    taken = set(sizes.known.values())
    if len(shape) not in (2, 3) or (sizes.roots and shape[-1] in taken):
        return guessed
    cross = sizes.roots > 0 and sizes.known.get("S") not in (None, shape[-2])
    letters = (("B",) if len(shape) == 3 else ()) + (("N", "M") if cross else ("S", "H"))
    if not cross and sizes.known.get("H") not in (None, shape[-1]):
        for k in ("h", "d", "g"):
            sizes.known.pop(k, None)  # a new model size: earlier heads say nothing about it
    sizes.bind(letters, shape)
    sizes.roots += 1
    sizes.last_root = (shape, letters)
    return letters


def _mask_axes(shape: Shape, sizes: Sizes) -> Axes | None:
    """The axes of a mask given to the code after x: (B, 1, S, S), (1, 1, S, S), a padding
    mask (B, 1, 1, S), (B, 1, S, N) beside a second input; its 1s stay 1.

    >>> _mask_axes((2, 1, 5, 5), Sizes({"B": 2, "S": 5, "H": 64}, roots=1))
    ('B', '1', 'S', 'S')
    >>> _mask_axes((1, 1, 1, 5), Sizes({"B": 2, "S": 5, "H": 64}, roots=1))
    ('1', '1', '1', 'S')
    """
    known = sizes.known
    if len(shape) != 4 or shape[1] != 1 or not sizes.roots:
        return None
    keys = "N" if known.get("N") == shape[-1] and shape[-1] != known.get("S") else "S"
    if known.get(keys) != shape[-1] or shape[-2] not in (1, known.get("S")):
        return None
    first = "B" if shape[0] == known.get("B") and shape[0] != 1 else "1"
    if first == "1" and shape[0] != 1:
        return None
    return first, "1", "S" if shape[-2] != 1 else "1", keys


def _weight_axes(shape: Shape, sizes: Sizes) -> Axes | None:
    """The axes of a matrix the code makes after x that has H rows (in, out) or H columns
    (out, in): a projection's weights (``np.random.randn(H, 3 * H)``), not a second input;
    its other axis is named as :func:`linear` names a projection's output (H, 3·H, g·d).

    >>> _weight_axes((64, 192), Sizes({"S": 5, "H": 64}, roots=1))
    ('H', '3·H')
    >>> [_weight_axes(s, Sizes({"S": 5, "H": 64}, roots=1)) for s in ((5, 7), (5, 64))]
    [None, None]
    """
    width = sizes.known.get("H")
    if len(shape) != 2 or not sizes.roots or width is None or width not in shape:
        return None
    if shape[0] == sizes.known.get("S"):  # S rows: an input (S, H') of a model of another size
        return None
    if shape[0] == width:  # (in, out), used as x @ w
        return "H", linear((shape[1],), (("H",), (width,)), sizes)[-1]
    return linear((shape[0],), (("H",), (width,)), sizes)[-1], "H"  # (out, in): x @ w.T
