"""Which reference step each captured op plays (``q_proj``, ``scores``, ``weights`` …),
recognised from what the ops do to the axes, not from the user's variable names."""

from __future__ import annotations

from collections.abc import Sequence

from attntrace.capturing.axes import FUSED, FUSED_KVS, GROUP_HEADS, HEADS_FUSED
from attntrace.capturing.events import Event
from attntrace.capturing.kernel import LINEAGE, NO_ROLE

Axes = tuple[str, ...]

#: Axes of heads; torch's MultiheadAttention folds them into the batch: (B·h, S, d).
_HEADS = ("h", "g", "B·h", "B·g", *(f"{a}/{n}" for a in "hg" for n in range(2, 17)))
_FUSED_LAST = tuple((f,) for f in FUSED)  # the last axes of a fused projection


def roles(events: Sequence[Event], axes: Sequence[Axes]) -> list[str]:
    """The role of every event ("" when it plays none); each role is given once."""
    found = _Finder(events, axes)
    out = [found.role(e) for e in events]
    if (
        "x" in out
        and "scores" in out
        and events[out.index("scores")].inputs[:1] == (events[out.index("x")].index,)
    ):  # the notes' Query @ Key.T: a matrix given as the query itself, no input x projected
        out[out.index("x")] = ""
    from attntrace.capturing.roles_more import refine

    return refine(events, axes, out, found.line)


#: The reference rank view's name of a collective (sharding/rank.py, context.py), by the
#: lineage of what it moves and its kind.
_COLLECTIVE_ROLES = {
    ("output", "all_reduce"): "o_all_reduce",
    ("output", "reduce_scatter"): "o_reduce_scatter",
    ("x", "all_gather"): "x_all_gather",
    ("k", "all_gather"): "k_all_gather",
    ("v", "all_gather"): "v_all_gather",
    ("k", "send_recv"): "k_ring_recv",
    ("v", "send_recv"): "v_ring_recv",
    ("q", "all_to_all"): "q_all_to_all",
    ("k", "all_to_all"): "k_all_to_all",
    ("v", "all_to_all"): "v_all_to_all",
    ("context", "all_to_all"): "context_all_to_all",
    ("context", "all_gather"): "context_all_gather",
}


def collective_role(e: Event, lineage: str) -> str:
    """The reference rank view's name of collective ``e`` moving a tensor of ``lineage``
    ("" when none corresponds); a send is no step of the reference (its receive is).

    >>> from attntrace.capturing.source import Site
    >>> e = Event(index=3, name="out_all_reduce", kind="collective", func="all_reduce",
    ...           shape=(2, 4), dtype="float32", inputs=(2,), input_shapes=((2, 4),),
    ...           site=Site("a.py:9", "dist.all_reduce(out)"),
    ...           params={"collective": {"kind": "all_reduce"}})
    >>> collective_role(e, "output")
    'o_all_reduce'
    """
    if e.func in ("send", "isend"):
        return ""
    kind = str((e.params.get("collective") or {}).get("kind", ""))
    base = lineage.removesuffix("_proj").removesuffix("_heads").removesuffix("_t")
    base = "context" if base.startswith("context") or base == "merged" else base
    return _COLLECTIVE_ROLES.get((base, kind), "")


def _kernel_masks(events: Sequence[Event]) -> set[int]:
    """The tensors an opened kernel's mask step was made from, back through each op of one
    operand (a slice, a view, ``triu``) to where it began: its own mask step plays ``mask``."""
    found: set[int] = set()
    for e in events:
        if e.params.get("step") != "mask":
            continue
        at = e.inputs[0] if len(e.inputs) == 1 else None
        while at is not None and at not in found:
            found.add(at)
            made = events[at]
            at = made.inputs[0] if len(made.inputs) == 1 else None
    return found


def _cached(axes: Axes) -> bool:
    """(…, d, N+S): the keys of a --past step transposed."""
    return len(axes) >= 2 and axes[-2] == "d" and "+" in axes[-1]


class _Finder:
    def __init__(self, events: Sequence[Event], axes: Sequence[Axes]) -> None:
        self.events, self.axes = events, axes
        self.line: dict[int, str] = {}  # event -> lineage: x, x_kv, q, k, v, k_t, scores, …
        self.given: set[str] = set()
        from attntrace.capturing.analyse import mask_roots

        self.masks = mask_roots(events)  # a tril buffer is a mask, never x or x_kv
        #: the masks given to an opened kernel: its own mask step plays the role
        self.read = _kernel_masks(events)

    def role(self, e: Event) -> str:
        ins = [self.line.get(i, "") if i is not None else "" for i in e.inputs]
        lineage, role = self._classify(e, ins)
        step = e.params.get("step")
        if step:  # a step of an opened kernel (capturing/kernel.py): what it plays is known
            lineage, role = lineage or LINEAGE.get(step, step), "" if step in NO_ROLE else step
        if lineage:
            self.line[e.index] = lineage
        if role and role not in self.given:
            self.given.add(role)
            return role
        return ""

    def _classify(self, e: Event, ins: list[str]) -> tuple[str, str]:  # noqa: PLR0911
        axes = self.axes[e.index]
        if e.kind == "create" and e.index in self.masks:
            return "mask", "" if e.index in self.read else "mask"
        if e.kind == "create":
            return self._root(axes)
        if e.kind == "collective":  # what it moves keeps its lineage (q, k, the output …)
            return (ins[0] if ins else ""), collective_role(e, ins[0] if ins else "")
        flat = len(e.input_shapes) == 1 and len(e.input_shapes[0]) == 1
        if e.kind == "reshape" and flat and not ins[0] and axes[-2:] in (("S", "H"), ("N", "M")):
            return self._root(axes)  # np.frombuffer(b).reshape(S, H): the input
        cache = next((i for i in ins if i in ("k_cache", "v_cache")), "")
        if cache and len(ins) >= 2:  # --past: cat((k_cache, k), dim=-2), the cache after the step
            return cache[0], f"{cache[0]}_all"
        at = e.params.get("x", 0)  # addmm(bias, x, w): x is the second operand
        first = ins[at] if len(ins) > at else ins[0] if ins else ""
        weight = e.kind == "linear" or (e.kind == "matmul" and len(ins) == 2 and not ins[1])
        if weight and first in ("x", "x_kv"):
            return self._projection(first, axes)
        if weight and first in ("merged", "context_1h"):  # context_1h: one head, nothing to merge
            return "output", "output"
        if e.kind in ("matmul", "einsum") and len(ins) >= 2:
            einsum = e.kind == "einsum"
            return self._einsum(ins[0], ins[1], axes) if einsum else self._product(*ins[:2])
        if e.kind == "sdpa":
            return "context", "context"
        # where(mask, scores, -inf): the scores' lineage, whatever the operand order
        main = "scores" if "scores" in ins else next((i for i in ins if i), "")
        return self._shaped(e, axes, ins, main)

    def _root(self, axes: Axes) -> tuple[str, str]:
        if axes[-2:] == ("S", "H") or axes == ("S", "B", "H"):  # (S, B, H): sequence first
            return "x", "x"
        if axes[-2:] == ("N", "M"):
            return "x_kv", "x_kv"
        if axes[-2:] == ("N", "d"):  # --past: the KV cache read, k first (decode_step.py)
            name = "v_cache" if "k_cache" in self.given else "k_cache"
            return name, name
        return "", ""

    def _projection(self, source: str, axes: Axes) -> tuple[str, str]:
        packed_two = bool(axes[-1:]) and axes[-1] in FUSED_KVS
        if packed_two and (source == "x_kv" or "q_proj" in self.given):
            return "kv_proj", ""  # k and v at once, after q: the two parts of its split
        if source == "x" and axes[-1:] and axes[-1] in FUSED and not packed_two:
            return "qkv_proj", ""  # q, k and v at once: the parts of its split play them
        order = ("k", "v") if source == "x_kv" else ("q", "k", "v")
        name = next((p for p in order if f"{p}_proj" not in self.given), None)
        return ("", "") if name is None else (f"{name}_proj", f"{name}_proj")

    def _einsum(self, a: str, b: str, axes: Axes) -> tuple[str, str]:
        """``einsum("shd,thd->hst", q, k)`` and ``einsum("hst,thd->shd", w, v)``: the
        subscripts do the transposes, so q, k and v count from their projections on."""
        if (found := self._product(a, b)) != ("", ""):
            return found
        base_a, base_b = (n.removesuffix("_proj").removesuffix("_heads") for n in (a, b))
        if base_a == "q" and base_b in ("k", "k_t"):
            return "scores", "scores"
        if a == "weights" and base_b == "v":
            heads_first = len(axes) >= 3 and axes[-3] in _HEADS
            return "context", "context" if heads_first else "context_heads"
        return "", ""

    def _product(self, a: str, b: str) -> tuple[str, str]:
        if a in ("q", "x", "xq", "q_proj") and b in ("k_t", "xt"):
            return "scores", "scores"
        if a == "weights" and b in ("v", "x", "xq"):
            return "context", "context"
        if a == "weights" and b == "v_proj":  # one head: v was never split
            return "context_1h", "context"
        return "", ""

    def _shaped(  # noqa: PLR0911
        self, e: Event, axes: Axes, ins: list[str], first: str
    ) -> tuple[str, str]:
        base = first.removesuffix("_proj").removesuffix("_heads")
        if first in ("qkv_proj", "kv_proj"):
            return self._fused_part(e, axes, first)
        if e.kind == "reshape" and first.endswith("_grouped") and any(a in _HEADS for a in axes):
            return self._ungrouped(axes, first.removesuffix("_grouped"))
        if e.kind == "reshape" and first in ("x", "x_kv") and any(a in _HEADS for a in axes):
            return "xh", ""
        if e.kind == "reshape" and first.endswith("_proj") and any(a in _HEADS for a in axes):
            return f"{base}_heads", f"{base}_heads"
        if (e.kind == "reshape" and first == "context_heads") or (
            e.kind == "reshape" and first == "context"
        ):
            merged = "H" in axes or any(a.startswith("h/") and a.endswith("·d") for a in axes)
            return ("merged", "merged") if merged else ("context", "")  # h/N·d: a rank's heads
        if e.kind == "permute":
            return self._moved(axes, first, base)
        if first == "scores" and e.kind == "elementwise":
            return self._on_scores(e, ins)
        if first == "exp_scores" and e.func in ("divide", "true_divide", "div", "truediv"):
            return "weights", "weights"
        if (
            first in ("k", "v")
            and e.kind in ("repeat", "reshape")
            and "h" in axes
            and (e.kind == "repeat" or "g" in self.axes[e.inputs[0] or 0])
        ):  # repeat_interleave, or HF's repeat_kv: k[:, :, None].expand(…).reshape(B, h, S, d)
            return first, f"{first}_rep"
        added = e.kind == "elementwise" and e.func.removesuffix("_") == "add"
        if first in ("q", "k") and added and ins == [first, first]:  # q·cos + rotate_half(q)·sin
            return first, f"{first}_rot"
        return first, ""

    def _fused_part(self, e: Event, axes: Axes, fused: str = "qkv_proj") -> tuple[str, str]:
        """An op on the fused q/k/v projection: its reshapes and permutes stay fused; the
        parts of its split (``split``, ``chunk``, ``unbind``, ``qkv[0]``, ``qkv[1]``,
        ``qkv[2]`` along its axis of three, or the slices ``qkv[..., :H]`` … of its last
        axis) are q, k and v, in order, at the step their axes say: (B, S, H) projections,
        (B, S, h, d) heads or (B, h, S, d); of a packed ``kv_proj``, k and v."""
        names = ("k", "v") if fused == "kv_proj" else ("q", "k", "v")
        parts = e.params.get("parts")
        part = e.params.get("part") if parts == len(names) else self._picked(e)
        if part is None and (cut := self._cut(e)) is not None:
            part = self._between(*cut, e.input_shapes[0][-1], len(names))
        if part is None or not 0 <= part < len(names):
            return fused, ""
        name = names[part]
        if self._along(e) == GROUP_HEADS:
            return f"{name}_grouped", ""  # (B, S, g, h/g, d): its heads not yet one axis
        if len(axes) >= 3 and axes[-3] in _HEADS:
            step = name  # heads first: timm's qkv.reshape(B, N, 3, h, d).permute(…).unbind(0)
        elif any(a in _HEADS for a in axes):
            step = f"{name}_heads"
        else:
            step = f"{name}_proj"  # nanoGPT's q, k, v = c_attn(x).split(H, dim=2)
        return step, step

    @staticmethod
    def _between(start: int, stop: int, width: int, parts: int) -> int:
        """Which part a cut of ``width`` is: q first, v last, k between (h·d, g·d, g·d)."""
        return 0 if start == 0 else parts - 1 if stop == width else 1

    def _cut(self, e: Event) -> tuple[int, int] | None:
        """The (start, stop) a slice takes from the fused axis itself (not from d after a
        reshape to (…, 3, h, d))."""
        cut, source = e.params.get("last"), e.inputs[0] if e.inputs else None
        return cut if source is not None and self.axes[source][-1:] in _FUSED_LAST else None

    def _along(self, e: Event) -> str:
        """The letter of the operand's axis that ``e`` takes a range of ("" when none)."""
        along, source = e.params.get("along"), e.inputs[0] if e.inputs else None
        if e.func != "getitem" or along is None or source is None:
            return ""
        axes = self.axes[source]
        return axes[along[0]] if along[0] < len(axes) else ""

    def _picked(self, e: Event) -> int | None:
        """The part ``qkv[i]`` takes (i = 0, 1, 2) along its axis of the three (timm's leading
        one, Falcon's (B, S, h, 3, d)), or a slice of a fused axis of heads (Falcon's
        ``qkv[..., :-2, :]``, ``qkv[..., [-2], :]``, ``qkv[..., [-1], :]``)."""
        letter, along = self._along(e), e.params.get("along")
        if along is None:
            return None
        axis, start, stop = along
        if letter == "3" and len(e.shape) < len(e.input_shapes[0]):
            return int(start)  # a whole number: the axis goes
        if letter in HEADS_FUSED:
            return self._between(start, stop, e.input_shapes[0][axis], 3)
        return None

    def _ungrouped(self, axes: Axes, name: str) -> tuple[str, str]:
        """A part of Falcon's (B, S, g, h/g+2, d) with its heads made one axis: q's to
        q_heads; k's and v's, broadcast to the h/g query heads of their group first, to
        their heads repeated (their move of the heads first plays k_rep and v_rep)."""
        if name in ("k", "v") and "h" in axes:
            return f"{name}_rep_heads", ""
        return f"{name}_heads", f"{name}_heads"

    def _moved(self, axes: Axes, first: str, base: str) -> tuple[str, str]:
        heads_first = len(axes) >= 3 and axes[-3] in _HEADS
        if first.endswith("_heads") and heads_first:  # k_rep_heads: k_rep, then k
            return base.removesuffix("_rep"), base
        if first == "xh" and heads_first:
            return "xq", ""
        split = first == "k" and (
            axes[-2:] in (("d", "S"), ("d", "N"), ("d", "R·S")) or _cached(axes)
        )
        one_head = first == "k_proj" and axes[-2:] in (("H", "S"), ("H", "N"))  # never split
        if split or one_head:
            return "k_t", "k_t"
        if first in ("x", "xq") and axes[-1:] == ("S",) and axes[-2:-1] in (("d",), ("H",)):
            return "xt", ""
        if first == "context" and not heads_first:
            return "context_heads", "context_heads"
        return first, ""

    def _on_scores(self, e: Event, ins: list[str]) -> tuple[str, str]:
        if e.func in ("softmax", "_softmax"):
            return "weights", "weights"
        if e.func == "exp":
            return "exp_scores", ""
        if len(ins) == 1 and e.func.removesuffix("_") in (
            "div",
            "truediv",
            "true_divide",
            "divide",
            "mul",
            "multiply",
        ):
            return "scores", "scaled"
        if len(ins) >= 2 and all(i == "scores" for i in ins):
            return "scores", ""  # minus its own max: the softmax kept finite
        if len(ins) >= 2 or e.func.startswith(("masked_fill", "where", "add")):
            return "scores", "masked"
        return "scores", ""
