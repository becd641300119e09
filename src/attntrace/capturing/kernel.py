"""Opening a fused attention kernel: each ``scaled_dot_product_attention`` call the user's code
makes is replayed step by step from its own arguments, as the kernel computes it (torch's
reference implementation in the function's docstring), and each step is recorded as an
ordinary event at the line of the call, with the name and role the reference gives it:

``k_rep``/``v_rep`` (``enable_gqa``: ``repeat_interleave`` along the heads) → ``k_t`` →
``scores`` → ``scaled`` → ``mask`` (as the kernel reads it) → ``masked`` → ``weights`` →
(``dropout``) → ``context``.

The kernel runs first; its output is the ``context`` step's value (the rest of the trace
uses it), and the replay's context is checked against it within the dtype's tolerance: the
context row says whether they agree. Each step's FLOPs come from the rules of
:mod:`attntrace.engine.costs` (the replay runs on the torch backend behind a ``CostMeter``).

``is_causal=True`` is the TOP-LEFT aligned ``ones(S, N).tril(diagonal=0)``
(``torch.nn.attention.bias.CausalVariant.UPPER_LEFT``): when the queries are the last S of
N keys this hides keys they should see. A boolean ``attn_mask`` KEEPS where True (the
opposite of ``masked_fill``'s polarity); a float one is added to the scores.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from attntrace.capturing.ops import swap
from attntrace.capturing.source import Site

if TYPE_CHECKING:
    from attntrace.capturing.events import Event

Shape = tuple[int, ...]

#: Whether a capture keeps each fused kernel one row per call when ``capture(opaque=…)`` is
#: not given: set once by ``trace --opaque``'s sandboxed child (:func:`keep_opaque`).
_OPAQUE = [False]


def keep_opaque(on: bool) -> None:
    """From now on, captures keep each kernel call one row (``trace --opaque``) when ``on``."""
    _OPAQUE[0] = on


def opaque_default() -> bool:
    """Whether captures keep kernel calls one row unless told (see :func:`keep_opaque`).

    >>> opaque_default()
    False
    """
    return _OPAQUE[0]


#: The op names of the kernels opened.
SDPA = "scaled_dot_product_attention"
FLEX = "flex_attention"

#: The largest difference between the replay and the kernel's output that still agrees, per
#: unit of the output's largest magnitude (at least 1), by dtype.
TOLERANCE = {"float64": 1e-10, "float32": 1e-4, "float16": 1e-2, "bfloat16": 5e-2}

#: What the lineage of each replayed step is for the roles (``roles.py``'s names).
LINEAGE = {
    "k_rep": "k",
    "v_rep": "v",
    "k_t": "k_t",
    "scores": "scores",
    "scaled": "scores",
    "score_mod": "scores",
    "biased": "scores",
    "mask": "mask",
    "masked": "scores",
    "weights": "weights",
    "dropout": "weights",
    "context": "context",
}

#: The replayed steps that play no step of the reference (no role).
NO_ROLE = frozenset({"dropout", "score_mod"})


@dataclass(frozen=True, kw_only=True)
class KernelCall:
    """One opened kernel call: where, its arguments, the steps recorded, what each costs and
    whether the replay agrees with the kernel's own output.

    >>> call = KernelCall(index=0, op=SDPA, location="a.py:3", source="sdpa(q, k, v)",
    ...                   steps=("k_t", "scores"), flops=(0, 64), bytes=(32, 64))
    >>> call.total_flops, call.total_bytes, call.verdict
    (64, 96, "replayed; equals the kernel's output within 0")
    """

    index: int
    op: str
    location: str
    source: str  # the user's call, as written
    q: Shape = ()
    k: Shape = ()
    v: Shape = ()
    is_causal: bool = False
    scale: float | None = None  # as given (None: 1/sqrt(d))
    scale_used: float = 1.0
    dropout_p: float = 0.0
    enable_gqa: bool = False
    mask: dict[str, Any] | None = None  # see :func:`mask_record`
    steps: tuple[str, ...] = ()
    flops: tuple[int, ...] = ()
    bytes: tuple[int, ...] = ()
    max_abs: float = 0.0
    tol: float = 0.0
    agrees: bool = True
    score_mod: str = ""  # flex_attention: the score_mod's source line
    sparsity: float | None = None  # flex_attention: the fraction of blocks the block mask skips
    #: a call made by followed torch code (``nn.MultiheadAttention``): the user's line that
    #: called it (``self.attn(x, x, x, attn_mask=…)``) and that statement; "" otherwise
    caller: str = ""
    caller_source: str = ""
    #: flex_attention on the CPU with q, k or v requiring grad: run on them detached (torch
    #: has no backward for it there), so its output carries no gradient
    detached: bool = False

    @property
    def total_flops(self) -> int:
        """The FLOPs of the whole call (the sum of its steps')."""
        return sum(self.flops)

    @property
    def total_bytes(self) -> int:
        """The bytes of every step the replay makes (what the kernel never writes)."""
        return sum(self.bytes)

    @property
    def verdict(self) -> str:
        """What the context row says of the replay (see :func:`verdict`)."""
        return verdict(self.max_abs, self.tol)

    def to_dict(self) -> dict[str, Any]:
        """Every field as plain data (what the context event carries, through the sandbox)."""
        out = asdict(self)
        out |= {"total_flops": self.total_flops, "total_bytes": self.total_bytes}
        return out

    def document(self) -> dict[str, Any]:
        """The call in ``trace --format json``'s ``kernels`` (schema attntrace.capture/2): its
        arguments, each step with its FLOPs and bytes, the totals and the replay's check."""
        fields = ("index", "op", "location", "source", "q", "k", "v", "is_causal", "scale")
        more = ("scale_used", "dropout_p", "enable_gqa", "mask", "score_mod", "sparsity")
        out: dict[str, Any] = {name: getattr(self, name) for name in (*fields, *more)}
        for name in ("q", "k", "v"):
            out[name] = list(out[name])
        if self.mask is not None:
            out["mask"] = {k: list(v) if isinstance(v, tuple) else v for k, v in self.mask.items()}
        rows = zip(self.steps, self.flops, self.bytes, strict=False)
        out["steps"] = [{"name": n, "flops": f, "bytes": b} for n, f, b in rows]
        out |= {"total_flops": self.total_flops, "total_bytes": self.total_bytes}
        finite = math.isfinite(self.max_abs)
        replay = {"max_abs": self.max_abs if finite else None, "tol": self.tol}
        out["replay"] = {**replay, "agrees": self.agrees}
        return out

    @classmethod
    def from_params(cls, data: Mapping[str, Any], steps: Sequence[str]) -> KernelCall:
        """The call from the ``call`` params of its context event (tuples may come back as
        lists from the sandboxed child) and the names its steps were given."""
        known = {k: data[k] for k in cls.__dataclass_fields__ if k in data}
        for name in ("q", "k", "v", "flops", "bytes"):
            known[name] = tuple(known.get(name, ()))
        return cls(**{**known, "steps": tuple(steps)})


def kernel_calls(events: Sequence[Event]) -> tuple[KernelCall, ...]:
    """Every opened call among ``events``, in call order."""
    names: dict[int, list[str]] = {}
    for e in events:
        if "kernel" in e.params:
            names.setdefault(int(e.params["kernel"]), []).append(e.name)
    return tuple(
        KernelCall.from_params(e.params["call"], names.get(int(e.params["kernel"]), ()))
        for e in events
        if "call" in e.params
    )


def remarks(events: Sequence[Event]) -> tuple[str, ...]:
    """The notes of a capture that opened kernels: per op, where and how close its replays
    came to the kernel's output; each call whose replay disagrees on its own."""
    calls = kernel_calls(events)
    out: list[str] = []
    for op in dict.fromkeys(c.op for c in calls):
        mine = [c for c in calls if c.op == op]
        where = list(dict.fromkeys(c.location for c in mine))
        places = ", ".join(where[:3]) + (", …" if len(where) > 3 else "")
        agreeing = [c.max_abs for c in mine if c.agrees]
        if agreeing:
            out.append(OPENED_NOTE.format(op=op, locations=places, max_abs=f"{max(agreeing):.2g}"))
        out += [
            DIFFERS_NOTE.format(
                op=op, location=c.location, max_abs=f"{c.max_abs:.2g}", tol=f"{c.tol:.2g}"
            )
            for c in mine
            if not c.agrees
        ]
        detached = list(dict.fromkeys(c.location for c in mine if c.detached))
        if detached:
            out.append(DETACHED_NOTE.format(op=op, locations=", ".join(detached[:3])))
    return tuple(out)


#: What trace says of the kernels it opened (``learn/catalogue_cli.py``: ``note.kernel_*``).
OPENED_NOTE = (
    "{op} opened at {locations}: its steps are replayed from its arguments at the line of the "
    "call, the replay equal to the kernel's output within {max_abs} (--opaque keeps one row per "
    "call)"
)
DETACHED_NOTE = (
    "{op} at {locations} ran on q, k and v detached from autograd: torch has no backward for it "
    "on the CPU, so its output carries no gradient here"
)
DIFFERS_NOTE = (
    "the replay of {op} at {location} differs from the kernel's output by {max_abs} (tolerance "
    "{tol}): the steps after it use the kernel's output"
)


def rng_before(name: str, args: Sequence[Any], kwargs: Mapping[str, Any]) -> Any:
    """torch's random state before an SDPA call with dropout (its replay draws the same
    dropout from it), else None."""
    if name != SDPA or not float(_bound(args, kwargs).get("dropout_p", 0.0)):
        return None
    import torch

    return torch.get_rng_state()


_SDPA_ARGS = ("query", "key", "value", "attn_mask", "dropout_p", "is_causal", "scale")


def _bound(args: Sequence[Any], kwargs: Mapping[str, Any]) -> dict[str, Any]:
    """SDPA's arguments by name (its positional order, then the keywords)."""
    return {**dict(zip(_SDPA_ARGS, args, strict=False)), **kwargs}


@dataclass(frozen=True)
class _Made:
    """One replayed step, waiting to be recorded."""

    value: Any
    func: str
    kind: str
    site: Site
    operands: list[Any]
    params: dict[str, Any]


@dataclass
class Replay:
    """The replayed steps of one call: each at the call's line, with its formula as the code,
    its role as ``params["step"]`` and its FLOPs from the cost meter. They are recorded all at
    once by :meth:`flush`, once the whole replay ran (a call it cannot follow leaves nothing
    half-recorded: the hooks record it as one row)."""

    hooks: Any
    site: Site
    index: int
    meter: Any  # CostMeter over the torch backend
    names: list[str] = field(default_factory=list)
    flops: list[int] = field(default_factory=list)
    bytes: list[int] = field(default_factory=list)
    made: list[_Made] = field(default_factory=list)

    def step(
        self,
        name: str,
        value: Any,
        kind: str,
        func: str,
        operands: Sequence[Any],
        formula: str,
        params: Mapping[str, Any] | None = None,
        *,
        site: Site | None = None,
    ) -> Any:
        """``value`` as step ``name`` made by ``func`` from ``operands``, with its FLOPs."""
        from attntrace.engine.costs import Registry, resolve

        charges, _ = self.meter.take()
        flops, _ = resolve(charges, tuple(value.shape), (), Registry())
        self.flops.append(int(flops))
        self.bytes.append(int(value.numel() * value.element_size()))
        where = site or Site(self.site.location, formula, name)
        extra = {"step": name, "kernel": self.index, **(params or {})}
        self.made.append(_Made(value, func, kind, where, list(operands), extra))
        return value

    def flush(self, call: Mapping[str, Any]) -> None:
        """Record every step, the last with the call's record ``call``."""
        rec, adapter = self.hooks.recorder, self.hooks.adapter
        for k, m in enumerate(self.made):
            params = {**m.params, **({"call": dict(call)} if k == len(self.made) - 1 else {})}
            kept = m.value.detach() if rec.keep_values else m.value
            event = rec.record(
                kept, 0, m.func, m.kind, m.site, m.operands, adapter, params, key=m.value
            )
            self.names.append(event.name)
        self.made.clear()


def replay_sdpa(
    hooks: Any,
    args: Sequence[Any],
    kwargs: Mapping[str, Any],
    result: Any,
    site: Site,
    rng: Any = None,
) -> KernelCall:
    """Replay one SDPA call whose kernel gave ``result``, recording its steps; ``rng``: the
    random state before the kernel ran (dropout)."""
    import torch

    from attntrace.backends.torch_backend import TorchBackend
    from attntrace.engine.costs import CostMeter

    bound = _bound(args, kwargs)
    q, k, v = bound["query"], bound["key"], bound["value"]
    with torch._C.DisableTorchFunction(), torch.no_grad():
        replay = Replay(hooks, site, hooks.kernels, CostMeter(TorchBackend()))
        hooks.kernels += 1
        call = _arguments(bound, q, k, v)
        weights, v_used = _weights(replay, call, q, k, v, bound.get("attn_mask"), rng)
        v_name = "v_rep" if v_used is not v else "v"
        return finish(replay, {"op": SDPA, **call}, result, weights, v_used, v_name)


def finish(
    replay: Replay,
    fields: dict[str, Any],
    result: Any,
    weights: Any,
    v: Any,
    v_name: str = "v",
) -> KernelCall:
    """The replay's context ``weights @ v`` checked against the kernel's ``result``; the
    context step recorded (its value the kernel's), with the call's record."""
    context = replay.meter.matmul(weights, v)  # (B, h, S, d)
    max_abs = _max_abs(context, result)
    tol = TOLERANCE.get(_dtype(result), 1e-4) * max(1.0, _peak(result))
    site = replay.site
    fields = {
        **fields,
        "location": site.location,
        "source": site.source,
        **_followed_caller(),
        "max_abs": max_abs,
        "tol": tol,
        "agrees": max_abs <= tol,
    }
    said = verdict(max_abs, tol)
    ends = Site(site.location, f"weights @ {v_name}  ({said})", site.target, site.targets)

    ins = [weights, v]
    replay.step("context", result, "matmul", "matmul", ins, "", site=ends)
    counts: dict[str, Any] = {"index": replay.index, "flops": tuple(replay.flops)}
    counts["bytes"] = tuple(replay.bytes)
    replay.flush(KernelCall(**fields, **counts).to_dict())
    return kernel_calls(replay.hooks.recorder.events[-len(replay.names) :])[-1]


def _followed_caller() -> dict[str, str]:
    """The user's line that called the followed torch code making this kernel call
    (``self.attn(x, x, x, attn_mask=…)`` for ``nn.MultiheadAttention``), as ``caller`` and
    ``caller_source``; empty when the user's own code made the call."""
    import sys

    from attntrace.capturing.source import is_user_file, site_of
    from attntrace.capturing.torch_inside import is_followed_code

    frame = sys._getframe(1)
    followed = False
    while frame is not None:
        if is_followed_code(frame.f_code):
            followed = True
        elif is_user_file(frame.f_code.co_filename):
            if not followed:
                return {}
            site = site_of(frame)
            return {"caller": site.location, "caller_source": site.source}
        frame = frame.f_back  # type: ignore[assignment]
    return {}


def verdict(max_abs: float, tol: float) -> str:
    """What the context row says of a replay that is ``max_abs`` from the kernel's output.

    >>> verdict(2e-6, 1e-4)
    "replayed; equals the kernel's output within 2e-06"
    """
    if max_abs <= tol:
        return f"replayed; equals the kernel's output within {max_abs:.2g}"
    return (
        f"replayed; differs from the kernel's output by {max_abs:.2g} "
        f"(tolerance {tol:.2g}): the kernel's output is used"
    )


def _arguments(bound: Mapping[str, Any], q: Any, k: Any, v: Any) -> dict[str, Any]:
    """The call's arguments as a :class:`KernelCall` holds them."""
    scale = bound.get("scale")
    return {
        "q": tuple(q.shape),
        "k": tuple(k.shape),
        "v": tuple(v.shape),
        "is_causal": bool(bound.get("is_causal", False)),
        "scale": None if scale is None else float(scale),
        "scale_used": 1.0 / math.sqrt(q.shape[-1]) if scale is None else float(scale),
        "dropout_p": float(bound.get("dropout_p", 0.0)),
        "enable_gqa": bool(bound.get("enable_gqa", False)),
        "mask": None,
    }


def _weights(
    replay: Replay, call: dict[str, Any], q: Any, k: Any, v: Any, attn_mask: Any, rng: Any
) -> tuple[Any, Any]:
    """k_rep, v_rep, k_t, scores, scaled, mask, masked, weights (and dropout) recorded; the
    weights and the values the context multiplies them by."""
    be, step, key = replay.meter, replay.step, k
    if call["enable_gqa"] and q.dim() >= 3 and k.shape[-3] not in (0, q.shape[-3]):
        r = q.shape[-3] // k.shape[-3]
        k_rep = be.repeat_interleave(k, r, -3)  # (B, h, N, d)
        k = step("k_rep", k_rep, "repeat", "repeat_interleave", [k], _rep("k", r))
        v_rep = be.repeat_interleave(v, r, -3)  # (B, h, N, d)
        v = step("v_rep", v_rep, "repeat", "repeat_interleave", [v], _rep("v", r))
    order = {"order": swap(k.dim(), -2, -1)}
    k_t = be.transpose(k, -2, -1)  # (B, h, d, N)
    text = f"{'k_rep' if k is not key else 'k'}.transpose(-2, -1)"
    k_t = step("k_t", k_t, "permute", "transpose", [k], text, order)
    scores = step("scores", be.matmul(q, k_t), "matmul", "matmul", [q, k_t], "q @ k_t")
    s = call["scale_used"]
    scaled = be.scale(scores, s)  # (B, h, S, N)
    last = step("scaled", scaled, "elementwise", "mul", [scores], f"scores * {s:.6g}")
    found = kernel_mask(call["is_causal"], attn_mask, q, k)
    if found is not None:
        last = _masked(replay, last, found)
        call["mask"] = found.record
    weights = be.softmax(last)  # (B, h, S, N); a row with every key hidden: zeros, as SDPA
    shown = "masked" if found is not None else "scaled"
    weights = step(
        "weights", weights, "elementwise", "softmax", [last], f"softmax({shown}, dim=-1)"
    )
    if call["dropout_p"] > 0:
        weights = _dropout(replay, weights, call["dropout_p"], rng)
    return weights, v


def _masked(replay: Replay, scaled: Any, found: KernelMask) -> Any:
    """The mask step (as the kernel reads it) and the masked scores."""
    record, given = found.record, [] if found.given is None else [found.given]
    params = {"mask": record}
    mask = replay.step("mask", found.keep, "create", found.func, given, found.text, params)
    if record["kind"] == "additive":
        masked = replay.meter.add(scaled, mask)  # (B, h, S, N)
        text = "scaled + mask"
        return replay.step("masked", masked, "elementwise", "add", [scaled, mask], text)
    masked = replay.meter.where(mask, scaled, -math.inf)  # (B, h, S, N)
    text = "where(mask, scaled, -inf)"
    return replay.step("masked", masked, "elementwise", "where", [scaled, mask], text)


def _dropout(replay: Replay, weights: Any, p: float, rng: Any) -> Any:
    """The kernel's dropout drawn again from the random state it drew from."""
    import torch

    after = torch.get_rng_state()
    if rng is not None:
        torch.set_rng_state(rng)
    try:
        dropped = torch.dropout(weights, p, True)  # (B, h, S, N)
    finally:
        torch.set_rng_state(after)
    replay.meter.charge("binary", weights, weights, out=dropped)
    text = f"dropout(weights, p={p:g})"
    return replay.step("dropout", dropped, "elementwise", "dropout", [weights], text)


def _rep(name: str, r: int) -> str:
    return f"{name}.repeat_interleave({r}, dim=-3)"


@dataclass(frozen=True)
class KernelMask:
    """The mask as the kernel reads it: ``keep`` (bool, True attends) or additive; the op that
    shows it (``tril``, ``attn_mask``), the user's tensor it is (None: made by the kernel),
    its record (:func:`mask_record`) and its row's code."""

    keep: Any
    func: str
    given: Any
    record: dict[str, Any]
    text: str


def kernel_mask(is_causal: bool, attn_mask: Any, q: Any, k: Any) -> KernelMask | None:
    """The mask SDPA applies for ``is_causal`` or ``attn_mask`` (None when neither)."""
    import torch

    S, N = int(q.shape[-2]), int(k.shape[-2])
    broadcast = (*q.shape[:-1], N)
    variant = "UPPER_LEFT" if is_causal else _causal_variant(attn_mask)
    if variant is not None:  # is_causal, or a CausalBias: the tril the kernel uses
        diagonal = N - S if variant == "LOWER_RIGHT" else 0
        keep = torch.ones(S, N, dtype=torch.bool).tril(diagonal=diagonal)  # (S, N)
        align = "top-left" if diagonal == 0 else "bottom-right"
        record = mask_record("causal", (S, N), broadcast, align, diagonal)
        return KernelMask(keep, "tril", None, record, _mask_text(record))
    if attn_mask is None:
        return None
    kind = "bool" if attn_mask.dtype == torch.bool else "additive"
    record = mask_record(kind, tuple(attn_mask.shape), broadcast, "", 0)
    return KernelMask(attn_mask.detach(), "attn_mask", attn_mask, record, _mask_text(record))


def _causal_variant(mask: Any) -> str | None:
    """``UPPER_LEFT`` or ``LOWER_RIGHT`` for a ``torch.nn.attention.bias.CausalBias``."""
    variant = getattr(mask, "variant", None)
    name = getattr(variant, "name", None)
    return name if name in ("UPPER_LEFT", "LOWER_RIGHT") else None


def mask_record(
    kind: str,
    shape: Shape,
    broadcast: Shape,
    causal: str,
    diagonal: int,
) -> dict[str, Any]:
    """What the mask step is: ``kind`` bool (keep where True), additive (added to the scores)
    or causal (a tril keep mask, ``causal`` top-left or bottom-right, its ``diagonal``);
    its own ``shape`` and the ``broadcast`` (B, h, S, N) it stands for.

    >>> mask_record("causal", (3, 4), (1, 2, 3, 4), "top-left", 0)["broadcast"]
    (1, 2, 3, 4)
    """
    return {
        "kind": kind,
        "shape": tuple(int(n) for n in shape),
        "broadcast": tuple(int(n) for n in broadcast),
        "causal": causal,
        "diagonal": int(diagonal),
    }


def _mask_text(record: Mapping[str, Any]) -> str:
    """The mask row's code: what the kernel reads."""
    shape = "(" + ", ".join(str(n) for n in record["shape"]) + ")"
    if record["kind"] == "causal":
        return f"ones{shape}.tril({record['diagonal']}): is_causal, {record['causal']}"
    if record["kind"] == "bool":
        return f"attn_mask {shape}: bool, True attends"
    return f"attn_mask {shape}: added to the scores"


def _dtype(t: Any) -> str:
    return str(t.dtype).removeprefix("torch.")


def _peak(t: Any) -> float:
    """The largest finite magnitude of ``t`` (0 for an empty or all non-finite tensor)."""
    import torch

    if t.numel() == 0:
        return 0.0
    finite = t.detach().double().nan_to_num(nan=0.0, posinf=0.0, neginf=0.0)
    return float(torch.amax(finite.abs()))


def _max_abs(a: Any, b: Any) -> float:
    """The largest difference between two tensors of one shape (NaN or ±inf at the same place
    in both agree; anywhere else they are infinitely far)."""
    import torch

    if a.shape != b.shape:
        return math.inf
    if a.numel() == 0:
        return 0.0
    x, y = a.detach().double(), b.detach().double()
    same = (x == y) | (torch.isnan(x) & torch.isnan(y))
    gap = (x - y).abs().nan_to_num(nan=math.inf, posinf=math.inf)
    return float(torch.where(same, torch.zeros_like(gap), gap).amax())


#: The kernels opened, by the name torch's function mode sees: each replays one call from the
#: hooks, its args, kwargs, the kernel's output, the call's site and the random state before.
OPENED: dict[str, Callable[..., KernelCall]] = {SDPA: replay_sdpa}
