"""The attention inside the user's module: a library attention class (or any submodule holding
the projections) kept under an attribute, in an ``nn.Sequential`` or an ``nn.ModuleList``,
called with the user's own layers before it (a norm), after it (an output ``nn.Linear``, a
residual) or from a plain function. The diff compares that *region*: the user's module runs as
written, but the attention submodule is handed the reference's x in place of what it was
given, and the run stops at the region's end, so the layers around it neither shift x nor
change the output. The same steps, roles and verdict as the class named directly.

The region ends at the attention submodule's own output, or, when the submodule has no output
projection (BERT's ``BertSelfAttention``: query, key, value only), at the user's ``nn.Linear``
called after it that maps h·d back to H, picked by a familiar name (``dense``, ``o_proj``,
``out_proj`` …) and else by call order; the header names it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NoReturn

from attntrace.errors import ConfigError

if TYPE_CHECKING:
    from attntrace.files.schemes import LoadedWeights

#: Names of an output projection, most familiar first: a Linear of one of these names called
#: after the attention decides before call order does.
OUTPUT_NAMES = (
    "o_proj",
    "out_proj",
    "dense",
    "output_proj",
    "c_proj",
    "to_out",
    "wo",
    "proj",
    "out_lin",
    "o",
    "out",
    "output",
)

#: The weight schemes of attention modules without an output projection of their own.
NO_OUTPUT = frozenset({"BertSelfAttention", "query_proj/key_proj/value_proj (DeBERTa)"})


@dataclass(frozen=True)
class Region:
    """Where the attention is inside the user's module: submodule paths (``"attn"``,
    ``"0.1"``, ``"layer.self_attn"``), and the module whose output is the attention's."""

    core: str  # the attention submodule, handed x
    end: str  # its path again, or the output nn.Linear's called after it
    words: str  # for the header: "LlamaAttention at .attn"


class _Done(BaseException):
    """Raised by the end's forward hook to stop the user's forward there, with its output."""

    def __init__(self, output: Any) -> None:
        super().__init__()
        self.output = output


def cannot_tell(missing: str, remedy: str = "") -> NoReturn:
    """Stop a diff with the verdict "cannot tell": ``missing`` says what attntrace cannot
    express or decide, ``remedy`` the one flag or file that would let it ("" when none).
    Raises the project's ``CannotTellError`` where it exists, else a one-line ConfigError.

    >>> cannot_tell("disentangled attention has no reference step")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    attntrace.errors...: ...disentangled attention has no reference step...
    """
    from attntrace import errors

    kind = getattr(errors, "CannotTellError", None)
    if kind is not None:
        raise kind(missing, remedy)
    raise ConfigError(f"cannot tell: {missing}" + (f"; {remedy}" if remedy else ""))


def find_region(module: Any, weights: LoadedWeights, seq: int, batch: int | None) -> Region | None:
    """The region of the submodule under ``weights.prefix`` (None when the weights are the
    module's own, or the submodule is never called with a tensor), its end found by a probe
    call when the submodule has no output projection."""
    if not weights.prefix:
        return None
    core = weights.prefix.rstrip(".")
    sub = module.get_submodule(core)
    words = f"{type(sub).__name__} at .{core}"
    if weights.scheme not in NO_OUTPUT:
        return Region(core, core, words)
    w_q = weights.params["w_q"]
    assert w_q is not None
    found = _output_after(module, core, tuple(w_q.shape[::-1]), seq, batch)
    if found is None:
        return Region(core, core, words)
    name, how = found
    return Region(core, name, f"{words}, output {name} ({how})")


def _output_after(
    module: Any, core: str, shape: tuple[int, ...], seq: int, batch: int | None
) -> tuple[str, str] | None:
    """The path of the nn.Linear (out, in) = ``shape`` that the forward calls after ``core``
    returns, by a familiar name first, else the first called; and how it was chosen."""
    import torch

    names = {id(m): n for n, m in module.named_modules()}
    inside = {id(m) for m in module.get_submodule(core).modules()}
    after: list[str] = []
    state = {"done": False}

    def ended(*_: Any) -> None:
        state["done"] = True

    def called(m: Any, *_: Any) -> None:
        if state["done"] and id(m) not in inside and tuple(m.weight.shape) == shape:
            after.append(names[id(m)])

    linears = [m for m in module.modules() if isinstance(m, torch.nn.Linear)]
    hooks = [module.get_submodule(core).register_forward_hook(ended)]
    hooks += [m.register_forward_hook(called) for m in linears]
    try:
        _probe_call(module, (*((batch,) if batch else ()), min(seq, 4), shape[1]))
    finally:
        for hook in hooks:
            hook.remove()
    if not after:
        return None
    named = [n for n in after if _leaf(n) in OUTPUT_NAMES]
    return (named[0], "by its name") if named else (after[0], "the nn.Linear called after it")


def _leaf(path: str) -> str:
    """``to_out.0`` → ``to_out``; ``block.dense`` → ``dense``."""
    parts = [p for p in path.split(".") if not p.isdigit()]
    return parts[-1] if parts else path


def _probe_call(module: Any, shape: tuple[int, ...]) -> None:
    import torch

    from attntrace.capturing.runner import attention_call

    dtype = next((p.dtype for p in module.parameters() if p.is_floating_point()), torch.float32)
    try:
        with torch.no_grad():
            attention_call(module, dict)(torch.zeros(shape, dtype=dtype))
    except (Exception, SystemExit):
        pass  # the diff's own call reports the user's error with its line


def region_module(module: Any, region: Region) -> Any:
    """A module whose forward(x) runs ``module`` as written with the region's submodule handed
    x, and returns the output of the region's end (the run stops there)."""
    import torch

    class Inside(torch.nn.Module):
        attntrace_transparent = True  # its forward is attntrace's: the user's ops are recorded

        def __init__(self) -> None:
            super().__init__()
            self.inner = module
            self.attntrace_region = region  # --past: the held class decides the cache's kind

        def forward(self, x: Any, **kwargs: Any) -> Any:  # kwargs: a decode step's cache
            return run_region(self.inner, region, x, **kwargs)

    Inside.__name__ = Inside.__qualname__ = type(module).__name__
    return Inside()


def run_region(module: Any, region: Region, x: Any, **kwargs: Any) -> Any:
    """``module`` called on x, its submodule ``region.core`` handed x as its hidden states,
    stopped at ``region.end``'s output (which is returned); the whole forward's output when
    the submodule is never called."""
    from attntrace.capturing.runner import attention_call

    core, end = module.get_submodule(region.core), module.get_submodule(region.end)

    def handed(called: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        _self_attention(called, args, kwargs, region)
        return _with_x(args, kwargs, x)

    def reached(_: Any, __: Any, output: Any) -> None:
        raise _Done(output)

    hooks = [
        core.register_forward_pre_hook(handed, with_kwargs=True),
        end.register_forward_hook(reached),
    ]
    try:
        if kwargs:  # --past: the cache, by the name the user's forward takes it
            return module(x, **kwargs)
        return attention_call(module, dict)(x)  # as diff calls a module (layer.module_forward)
    except _Done as done:
        return done.output
    finally:
        for hook in hooks:
            hook.remove()


#: Keyword names of the keys and values (or what they are made from) of a cross-attention.
_OTHER_INPUT = ("key", "value", "encoder_hidden_states", "key_value_states", "memory", "context")


def _self_attention(
    core: Any, args: tuple[Any, ...], kwargs: dict[str, Any], region: Region
) -> None:
    """CANNOT TELL when the region's attention ``core`` is called with keys or values (an
    argument its forward names ``key``, ``value``, ``encoder_hidden_states`` …) of another
    length than its queries (``decoder.multihead_attn(x, memory, memory)``): cross-attention,
    which the self-attention reference cannot be set beside. Other tensors (Bloom's alibi, a
    mask) are not looked at."""
    import inspect

    import torch

    first = next((a for a in args if isinstance(a, torch.Tensor)), None)
    if first is None:
        return
    try:
        names = list(inspect.signature(core.forward).parameters)
    except (TypeError, ValueError):
        return
    given = {**dict(zip(names, args, strict=False)), **kwargs}
    for other in (given.get(k) for k in _OTHER_INPUT):
        if (
            isinstance(other, torch.Tensor)
            and other.ndim == first.ndim >= 2
            and tuple(other.shape[:-1]) != tuple(first.shape[:-1])
        ):
            cannot_tell(
                f"{region.words} is cross-attention: its keys and values come from another "
                f"input {tuple(other.shape)} than its queries {tuple(first.shape)}, and diff "
                "runs self-attention on x alone",
            )


#: Keyword names of the hidden states an attention module is called with.
_HIDDEN = ("hidden_states", "x", "query", "key", "value", "hidden", "input", "inputs")


def _with_x(
    args: tuple[Any, ...], kwargs: dict[str, Any], x: Any
) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """``args`` and ``kwargs`` with the hidden states (the first tensor argument, and every
    other argument that is that same tensor: ``mha(h, h, h)``) replaced by x."""
    import torch

    first = next((a for a in args if isinstance(a, torch.Tensor)), None)
    if first is None:
        first = next((kwargs[k] for k in _HIDDEN if isinstance(kwargs.get(k), torch.Tensor)), None)
    if first is None:
        raise ConfigError("the attention submodule was called without a tensor")
    if tuple(first.shape) != tuple(x.shape):
        if not _sequence_first(first, x):
            return args, kwargs  # another input (a cross-attention's memory): as written
        x = x.transpose(0, 1)  # (S, B, H): as a sequence-first module takes it
    new_args = tuple(x if a is first else a for a in args)
    new_kwargs = {k: x if v is first else v for k, v in kwargs.items()}
    return new_args, new_kwargs


def _sequence_first(given: Any, x: Any) -> bool:
    """Whether ``given`` is x's shape with batch and sequence swapped: (S, B, H) for
    ``nn.MultiheadAttention(batch_first=False)``."""
    return (
        x.ndim == 3
        and x.shape[0] != x.shape[1]
        and tuple(given.shape)
        == (
            x.shape[1],
            x.shape[0],
            x.shape[2],
        )
    )


def wrapped_forward(fn: Callable[..., Any]) -> Any | None:
    """A one-argument function of x that reaches modules, as a module
    (:func:`attntrace.capturing.held.function_module`), or None."""
    from attntrace.capturing.held import function_module

    return function_module(fn)


def called_layer(module: Any, seq: int, batch: int | None) -> str | None:
    """The prefix of the one attention layer ``module`` holds that its forward calls (of
    several: a ``TransformerDecoderLayer``'s ``self_attn`` and ``multihead_attn``), or None
    when it calls none or more than one."""
    import torch

    from attntrace.diffing.names import _schemes
    from attntrace.files.schemes import layer_candidates

    state = {k: v for k, v in module.state_dict().items() if v.is_floating_point()}
    prefixes = [p for p, _ in layer_candidates(state, _schemes()) if p]
    width = next((m.in_features for m in module.modules() if isinstance(m, torch.nn.Linear)), 0)
    width = width or next(
        (m.embed_dim for m in module.modules() if isinstance(m, torch.nn.MultiheadAttention)), 0
    )
    if not prefixes or not width:
        return None
    called: list[str] = []
    hooks = [
        module.get_submodule(p.rstrip(".")).register_forward_hook(lambda *_, p=p: called.append(p))
        for p in prefixes
    ]
    try:
        _probe_call(module, (*((batch,) if batch else ()), min(seq, 4), width))
    finally:
        for hook in hooks:
            hook.remove()
    return called[0] if len(set(called)) == 1 else None
