"""Records of a traced attention: one :class:`Step` per intermediate tensor, one
:class:`Param` per weight, gathered in a :class:`Trace`. Renderers read these; nothing here
computes attention.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, cast

from attntrace.config.attention_config import ELEMENT_BYTES, MAX_SIZE, AttentionConfig
from attntrace.errors import AttntraceError, ConfigError
from attntrace.units import exact_count, format_terms

if TYPE_CHECKING:
    import numpy as np

Shape = tuple[int, ...]

#: The ``schema`` value of :meth:`Trace.to_dict`; bumped only when a documented key changes.
SCHEMA_ID = "attntrace.trace/1"
#: The ``schema`` of a trace with backward steps (``--backward``): version 1 plus each step's
#: ``pass`` and ``saved``, and the ``backward`` section (``trace-2.schema.json``).
SCHEMA_ID_2 = "attntrace.trace/2"
#: The ``schema`` of a rank's trace (``--tp``, ``--cp``): version 1 plus the ``parallel``
#: section (the layout, the rank's cost, its collectives; ``trace-3.schema.json``).
SCHEMA_ID_3 = "attntrace.trace/3"


@dataclass(frozen=True)
class Lazy:
    """Values made when first read: a step whose buffer the algorithm reused in place (eager's
    scores and scaled scores) is kept as the recipe that makes it again, bit for bit.
    ``part(index)``, when given, makes ``make()[index]`` alone for a leading index (one batch
    item and head): a view of one head need not make all of them.

    >>> Lazy(lambda: 42).make()
    42
    """

    make: Callable[[], Any]
    part: Callable[[tuple[int, ...]], Any] | None = None


class _Value:
    """The ``value`` field of :class:`Tensor`: an array, None, or a :class:`Lazy` made into its
    array on first read (and then kept)."""

    def __get__(self, obj: object, objtype: type | None = None) -> np.ndarray | None:
        if obj is None:
            return None  # the dataclass default
        value = obj.__dict__.get("value")
        if isinstance(value, Lazy):
            value = obj.__dict__["value"] = value.make()
        return cast("np.ndarray | None", value)

    def __set__(self, obj: object, value: object) -> None:
        obj.__dict__["value"] = value


@dataclass(frozen=True)
class Tensor:
    """What every recorded tensor has: a name, a shape, a dtype, and maybe its values
    (made on first read when recorded as a :class:`Lazy`)."""

    name: str
    shape: Shape
    dtype: str
    value: np.ndarray | None = field(default=None, repr=False, compare=False)

    @property
    def numel(self) -> int:
        """Number of elements."""
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        """Bytes the tensor takes in its dtype."""
        return self.numel * ELEMENT_BYTES[self.dtype]

    @property
    def has_values(self) -> bool:
        """Whether values are kept (made or still a recipe), without making them."""
        return self.__dict__.get("value") is not None

    def part(self, index: tuple[int, ...]) -> np.ndarray | None:
        """``value[index]``; for the index of every axis but the last two (batch item, head) of
        a step kept as a recipe not yet read whole, that (S, N) part is made alone (and not
        kept).

        >>> import numpy as np
        >>> recipe = Lazy(lambda: np.zeros((2, 2, 3)), lambda at: np.ones((2, 3)))
        >>> t = Tensor("w", (2, 2, 3), "float32", recipe)
        >>> t.part((1,)).tolist(), t.part((1, 0)).tolist()  # one part alone; else from the whole
        ([[1.0, 1.0, 1.0], [1.0, 1.0, 1.0]], [0.0, 0.0, 0.0])
        """
        held = self.__dict__.get("value")
        if isinstance(held, Lazy) and held.part is not None and len(index) == len(self.shape) - 2:
            return cast("np.ndarray", held.part(index))
        whole = self.value
        return None if whole is None else whole[index]


Tensor.value = _Value()  # type: ignore[assignment]  # the dataclass default stays None


@dataclass(frozen=True)
class Step(Tensor):
    """One named intermediate tensor of the algorithm.

    >>> s = Step("scores", (12, 3, 3), "float32", index=7, op="q @ k_t", axes=("h", "S", "S"))
    >>> s.nbytes
    432
    """

    index: int = 0  # position in the trace, from 0
    op: str = ""  # the operation as a short code expression, e.g. "q @ k_t"
    axes: tuple[str, ...] = ()  # axis letters, one per dimension, e.g. ("h", "S", "S")
    view: bool = False  # True when the step is a view of an earlier tensor (no new memory)
    flops: int = 0  # floating-point operations of this step, summed over every repeat
    terms: tuple[tuple[int, str], ...] = ()  # the FLOP formula: (coefficient, "h·S·S·d") terms
    inputs: tuple[str, ...] = ()  # names of the recorded tensors this step reads
    repeat: int = (
        1  # how many times the step runs (tiles of --algorithm flash); shape is one tile's
    )
    # NaN and ±inf values it produced, over every repeat (-inf of masking not counted)
    nonfinite: int = 0
    phase: str = "forward"  # "backward" for a gradient step (d_...) of a trace with --backward
    saved: bool = False  # kept by the forward for the backward (traces with --backward)

    @property
    def formula(self) -> str:
        """The FLOP formula in axis letters, e.g. ``2·h·S·S·d`` (per tile when ``repeat > 1``)."""
        return format_terms(self.terms)


class Records(Protocol):
    """What checks and the step renderers read: the steps, a step by name, the size of each
    axis letter, the parameters. A :class:`Trace` is one; so is a capture of the user's code
    (``attntrace.capture()``)."""

    @property
    def steps(self) -> Sequence[Step]: ...

    @property
    def parameters(self) -> Sequence[Param]: ...

    @property
    def names(self) -> tuple[str, ...]: ...

    def __getitem__(self, name: str) -> Step: ...

    def axis_sizes(self) -> dict[str, int]: ...


class Document(Protocol):
    """Figures a trace may carry that its JSON document includes (engine/serving.py's)."""

    def to_dict(self) -> dict[str, Any]: ...


@dataclass(frozen=True)
class Param(Tensor):
    """One weight or bias of the attention layer (torch convention: weight is (out, in))."""

    axes: tuple[str, ...] = ()


@dataclass(frozen=True)
class Trace:
    """The ordered steps and the parameters of one traced attention.

    >>> from attntrace import AttentionConfig, trace_attention
    >>> t = trace_attention(AttentionConfig(seq=3, hidden=768, heads=12))
    >>> t["scores"].shape
    (12, 3, 3)
    >>> [s.name for s in t.steps][:3]
    ['x', 'q_proj', 'k_proj']
    """

    config: AttentionConfig
    backend: str
    steps: tuple[Step, ...]
    parameters: tuple[Param, ...]
    notes: tuple[str, ...] = ()  # warnings about the result, e.g. fully masked query rows
    peak_bytes: int = (
        0  # the most activation bytes alive at once (every non-view step a new buffer)
    )
    origin: str = ""  # where the settings come from: --model DIR (layer N), typed overrides
    whole_model: ModelFigures | None = None  # L layers like this one (run --layers, --model)
    training: Training | None = None  # the backward's figures (--backward), else None
    serving: Document | None = None  # run --past: the roofline and KV cache figures (serving.py)
    parallel: Document | None = None  # --tp/--cp: one rank's steps; the layout's figures
    tokens: tuple[str, ...] | None = None  # --prompt: the label of each position (S)

    def __getitem__(self, name: str) -> Step:
        for step in self.steps:
            if step.name == name:
                return step
        raise UnknownStepError(name, self.names)

    def __repr__(self) -> str:
        sizes = " ".join(f"{axis}={n}" for axis, n in self.axis_sizes().items())
        return f"<Trace {sizes}: {len(self.steps)} steps, {self.backend} {self.config.dtype}>"

    def _repr_html_(self) -> str:
        """Jupyter's view: the steps, the heat maps, the flow (:mod:`attntrace.display`)."""
        from attntrace.display import html

        return html(self)

    def __iter__(self) -> Iterator[Step]:
        return iter(self.steps)

    def __len__(self) -> int:
        return len(self.steps)

    def __contains__(self, name: object) -> bool:
        return any(step.name == name for step in self.steps)

    @property
    def names(self) -> tuple[str, ...]:
        """Step names in order."""
        return tuple(step.name for step in self.steps)

    def axis_sizes(self) -> dict[str, int]:
        """The size of every axis letter: the config's, and the tiles' with flash."""
        return {**self.config.axis_sizes(), **self.config.tile_sizes()}

    def shape(self, name: str) -> Shape:
        """Shape of the step called ``name`` (an unknown name raises, listing the valid ones).

        >>> from attntrace import AttentionConfig, trace_attention
        >>> t = trace_attention(AttentionConfig(batch=2, seq=3, hidden=768, heads=12), "shape")
        >>> t.shape("scores")
        (2, 12, 3, 3)
        """
        return self[name].shape

    @property
    def params(self) -> Mapping[str, np.ndarray]:
        """Parameter values by name (empty for backends that keep no values)."""
        return {p.name: p.value for p in self.parameters if p.value is not None}

    def param(self, name: str) -> Param:
        """The parameter record called ``name``."""
        for p in self.parameters:
            if p.name == name:
                return p
        raise AttntraceError(
            f"no parameter {name!r}; parameters: {', '.join(p.name for p in self.parameters)}"
        )

    @property
    def param_count(self) -> int:
        """Total number of parameter elements."""
        return sum(p.numel for p in self.parameters)

    @property
    def param_bytes(self) -> int:
        """Total bytes of all parameters."""
        return sum(p.nbytes for p in self.parameters)

    @property
    def total_flops(self) -> int:
        """FLOPs of the whole trace: the sum of the steps' FLOPs (1 multiply-add = 2 FLOPs)."""
        return sum(step.flops for step in self.steps)

    @property
    def total_macs(self) -> float:
        """Multiply-accumulates: ``total_flops / 2``."""
        return self.total_flops / 2

    @property
    def kv_cache_bytes_per_token(self) -> int:
        """Bytes a KV cache stores per token and batch item: the K and V of every (kv-)head
        (:meth:`AttentionConfig.kv_cache_bytes`); a rank's trace (--tp): the kv-heads it holds."""
        cfg = self.config
        if cfg.parallel is not None:
            return 2 * cfg.parallel.kv_heads(cfg) * cfg.head_dim * cfg.itemsize
        return cfg.kv_cache_bytes_per_token

    @property
    def score_bytes(self) -> int:
        """Bytes of the attention scores held at once: (h, S, N) eager, one (h, Br, Bc) tile
        with flash."""
        if "scores" not in self and "s_tile" not in self:  # a rank that attends elsewhere
            return max((s.nbytes for s in self.steps if s.name.startswith("scores")), default=0)
        return (self["scores"] if "scores" in self else self["s_tile"]).nbytes

    @property
    def first_nonfinite(self) -> Step | None:
        """The first step whose values hold NaN or ±inf (as torch's anomaly mode names the op),
        or None; the -inf that masking puts into the scores does not count."""
        return next((s for s in self.steps if s.nonfinite), None)

    @property
    def step_bytes(self) -> int:
        """Bytes of the steps that own their memory (views are not counted)."""
        return sum(s.nbytes for s in self.steps if not s.view)

    def to_dict(self) -> dict[str, Any]:
        """The trace as plain JSON-ready data: the document of ``attntrace run --format json``.

        Shapes are lists of ints; the layout is the JSON Schema ``attntrace.trace/1``
        (``attntrace/schemas/trace-1.schema.json``). Values are never included. Costs are in
        FLOPs (1 MAC = 2 FLOPs; ``macs`` is given beside ``flops``); a step's ``flops`` is summed
        over its ``repeat`` tiles, its ``formula`` is one full tile's.

        >>> from attntrace import AttentionConfig, trace_attention
        >>> doc = trace_attention(AttentionConfig(seq=3, hidden=768, heads=12), "shape").to_dict()
        >>> doc["schema"], doc["config"]["heads"], doc["config"]["backend"]
        ('attntrace.trace/1', 12, 'shape')
        >>> scores = doc["steps"][11]
        >>> scores["name"], scores["shape"], scores["axes"], scores["bytes"]
        ('scores', [12, 3, 3], ['h', 'S', 'S'], 432)
        >>> scores["flops"], scores["macs"], scores["formula"], doc["totals"]["score_bytes"]
        (13824, 6912, '2·h·S·S·d', 432)
        """
        axis_sizes = {**self.config.axis_sizes(), **self.config.tile_sizes()}
        two = self.training is not None
        return {
            "schema": SCHEMA_ID_3 if self.parallel else SCHEMA_ID_2 if two else SCHEMA_ID,
            "config": {**self.config.to_dict(), "backend": self.backend, "axis_sizes": axis_sizes},
            "steps": [_step_dict(s, two) for s in self.steps],
            "params": [_param_dict(p) for p in self.parameters],
            "totals": self._totals_dict(),
            "notes": list(self.notes),
            **({"origin": self.origin} if self.origin else {}),
            **({"tokens": list(self.tokens)} if self.tokens is not None else {}),
            **({"whole_model": self.whole_model.to_dict()} if self.whole_model else {}),
            **({"backward": self.training.to_dict()} if self.training else {}),
            **({"serving": self.serving.to_dict()} if self.serving else {}),
            **({"parallel": self.parallel.to_dict()} if self.parallel else {}),
        }

    def _totals_dict(self) -> dict[str, Any]:
        return {
            "steps": len(self.steps),
            "step_bytes": self.step_bytes,
            "param_count": self.param_count,
            "param_bytes": self.param_bytes,
            "flops": self.total_flops,
            "macs": exact_count(self.total_flops, "macs"),
            "peak_bytes": self.peak_bytes,
            "kv_cache_bytes_per_token": self.kv_cache_bytes_per_token,
            "score_bytes": self.score_bytes,
        }


@dataclass(frozen=True, kw_only=True)
class Training:
    """What one layer's backward costs and what its forward keeps for it, for the algorithm
    traced and its alternatives (``backward`` of ``--format json``, schema version 2).

    ``saved_bytes`` are the bytes of the steps marked ``saved`` (eager attention's, as autograd
    keeps them; x alone with ``recompute``); ``peak_bytes`` the most bytes alive in the
    backward: the saved steps, the live gradients and the parameters' gradients."""

    d_output: str  # "seeded" (drawn from the seed) or "given" (--grad-output)
    recompute: bool  # --recompute: the forward keeps x alone and runs again in the backward
    saved_bytes: int
    peak_bytes: int
    forward_flops: int
    backward_flops: int  # the gradient steps' (and the forward's again with --recompute)
    eager_saved_bytes: int  # what eager attention keeps (the weights among them)
    flash_saved_bytes: int  # flash: x, q, k, v, the output and the log-sum-exp (B, h, S)
    flash_lse_bytes: int
    flash_tiles: int  # (S, N) tiles flash's backward makes again (FlashAttention-2's order)
    flash_recompute_flops: int  # their scores and exponentials
    recompute_saved_bytes: int  # --recompute: the layer's input(s) alone
    megatron_bytes: int  # 11·s·b·h + 5·a·s²·b (16-bit, dropout included)
    ours_16bit_bytes: int  # eager_saved_bytes at 2 bytes an element
    megatron_terms: tuple[tuple[str, int], ...]  # megatron - ours, term by term (bytes)
    #: kept for the backward but no step (T5's one-hot of the buckets): (name, bytes)
    saved_extra: tuple[tuple[str, int], ...] = ()

    def to_dict(self) -> dict[str, Any]:
        """The figures as plain JSON-ready values."""
        out = {k: v for k, v in self.__dict__.items() if k not in ("megatron_terms", "saved_extra")}
        return {
            **out,
            "megatron_terms": dict(self.megatron_terms),
            "saved_extra": dict(self.saved_extra),
        }


#: Parameters one layer holds for every layer: T5's relative bias table lives in block 0 only.
SHARED_PARAMS = frozenset({"rel_bias"})


@dataclass(frozen=True, kw_only=True)
class ModelFigures:
    """The attention of a whole model of ``layers`` layers like the traced one: every layer's
    parameters, the KV cache of every layer, and the FLOPs of one forward."""

    layers: int  # L
    batch: int  # B (1 for the unbatched layout)
    keys: int  # N: tokens the cache holds (S for self-attention)
    dtype: str  # the dtype of the cache and the parameters
    params: int  # elements of all layers' attention parameters (a shared table counted once)
    kv_cache_bytes: int  # L * B * N * 2 (k, v) * g * d * itemsize
    flops: int  # L * the trace's FLOPs: one forward of every layer's attention
    saved_bytes: int | None = None  # --backward: L * what one layer keeps for the backward
    backward_flops: int | None = None  # --backward: L * one layer's backward
    train_flops_per_token: float | None = None  # (forward + backward) / (B·S)

    def to_dict(self) -> dict[str, Any]:
        """The figures as plain JSON-ready values (``whole_model`` of ``--format json``).

        >>> figures = ModelFigures(
        ...     layers=2, batch=1, keys=4, dtype="float32", params=10, kv_cache_bytes=64, flops=7
        ... )
        >>> figures.to_dict()["macs"]
        3.5
        """
        return {
            "layers": self.layers,
            "batch": self.batch,
            "keys": self.keys,
            "dtype": self.dtype,
            "params": self.params,
            "kv_cache_bytes": self.kv_cache_bytes,
            "flops": self.flops,
            "macs": exact_count(self.flops, "macs"),
            **{
                key: value
                for key in ("saved_bytes", "backward_flops", "train_flops_per_token")
                if (value := getattr(self, key)) is not None
            },
        }


def model_figures(trace: Trace, layers: int) -> ModelFigures:
    """Whole-model figures of ``layers`` layers like ``trace``'s: its FLOPs and parameters times
    L (T5's shared bias table once), and the KV cache of every key of every layer.

    >>> from attntrace import AttentionConfig, trace_attention
    >>> config = AttentionConfig(batch=2, seq=8, hidden=64, heads=4, kv_heads=2)
    >>> t = trace_attention(config, "shape")
    >>> f = model_figures(t, 12)
    >>> f.params == 12 * t.param_count, f.flops == 12 * t.total_flops
    (True, True)
    >>> f.kv_cache_bytes  # 12 layers * 2 items * 8 tokens * 2 (k, v) * 2 kv-heads * 16 * 4 B
    49152
    """
    if isinstance(layers, bool) or not isinstance(layers, int) or not 1 <= layers <= MAX_SIZE:
        raise ConfigError(f"--layers must be a whole number >= 1, got {layers!r}")
    cfg = trace.config
    shared = sum(p.numel for p in trace.parameters if p.name in SHARED_PARAMS)
    batch = cfg.batch or 1
    return ModelFigures(
        layers=layers,
        batch=batch,
        keys=cfg.keys,
        dtype=cfg.dtype,
        params=layers * (trace.param_count - shared) + shared,
        kv_cache_bytes=layers * cfg.kv_cache_bytes(tokens=batch * cfg.keys),
        flops=layers * forward_flops(trace),
        **_training_figures(trace, layers, batch * cfg.seq),
    )


def forward_flops(trace: Trace) -> int:
    """The FLOPs of the forward steps alone (a trace with --backward holds both passes)."""
    return sum(s.flops for s in trace.steps if s.phase == "forward")


def _training_figures(trace: Trace, layers: int, tokens: int) -> dict[str, Any]:
    """--backward: what L layers keep for the backward, their backward FLOPs, and the FLOPs of
    one training step per token (forward and backward of every layer)."""
    t = trace.training
    if t is None:
        return {}
    per_token = layers * (t.forward_flops + t.backward_flops) / tokens
    return {
        "saved_bytes": layers * t.saved_bytes,
        "backward_flops": layers * t.backward_flops,
        "train_flops_per_token": per_token,
    }


class UnknownStepError(AttntraceError, KeyError):
    """A step name that the trace does not have."""

    def __init__(self, name: str, valid: tuple[str, ...], detail: str = "") -> None:
        import difflib

        near = difflib.get_close_matches(name, valid, n=1)
        hint = f" (did you mean {near[0]}?)" if near else ""
        super().__init__(detail or f"unknown step {name!r}{hint}; valid steps: {', '.join(valid)}")

    def __str__(self) -> str:  # KeyError would quote the whole message
        return str(self.args[0])


def _step_dict(step: Step, two: bool = False) -> dict[str, Any]:
    extra = {"pass": step.phase, "saved": step.saved} if two else {}
    return {
        "index": step.index,
        "name": step.name,
        "op": step.op,
        "shape": list(step.shape),
        "axes": list(step.axes),
        "dtype": step.dtype,
        "bytes": step.nbytes,
        "view": step.view,
        "flops": step.flops,
        "macs": exact_count(step.flops, "macs"),
        "formula": step.formula,
        "repeat": step.repeat,
        "nonfinite": step.nonfinite,
        **extra,
    }


def _param_dict(param: Param) -> dict[str, Any]:
    return {
        "name": param.name,
        "shape": list(param.shape),
        "axes": list(param.axes),
        "dtype": param.dtype,
        "count": param.numel,
        "bytes": param.nbytes,
    }
