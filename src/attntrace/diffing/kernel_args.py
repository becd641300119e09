"""A fused kernel call's arguments (``F.scaled_dot_product_attention``, ``flex_attention``):
dropout left on at evaluation, read from the call (torch's dropout draws cannot be replayed on
the reference), and a diagnosis's fix written in the user's own call (``attn_mask=~mask``,
``is_causal=False, attn_mask=…``, ``scale=1 / math.sqrt(d)``), in their names.

torch 2.13.0 on the CPU: ``is_causal=True`` with an ``attn_mask`` does not raise in the default
kernel (it keeps the keys both allow) but raises under ``SDPBackend.MATH``; ``is_causal`` with
fewer queries than keys keeps query i's keys ≤ i (top-left), not ≤ N - S + i.

>>> fix_in_call("attn_mask={not mask}", "F.scaled_dot_product_attention(q, k, v, attn_mask=m == 0)")
'attn_mask=m != 0'
"""

from __future__ import annotations

import ast
import os
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from attntrace.diffing.diagnose import Diagnosis

#: The names of the calls whose arguments a fix is written in.
KERNELS = ("scaled_dot_product_attention", "flex_attention")


# ---------------------------------------------------------------------------------------------
# dropout left on at evaluation: read from the call, not replayed


@dataclass(frozen=True)
class KernelCall:
    """One kernel call that drew dropout: where, its text and the probability it used."""

    location: str  # file:line of the call
    source: str  # the call's text
    dropout_p: float


def dropout_calls(call: Callable[[], Any]) -> tuple[KernelCall, ...]:
    """The SDPA calls made by ``call()`` with ``dropout_p > 0`` (torch's functional mode sees
    them however the code names the function)."""
    import torch
    from torch.overrides import TorchFunctionMode

    found: list[KernelCall] = []

    class _Watch(TorchFunctionMode):
        def __torch_function__(
            self, func: Any, types: Any, args: Any = (), kwargs: Any = None
        ) -> Any:
            kwargs = kwargs or {}
            if getattr(func, "__name__", "") == "scaled_dot_product_attention":
                p = kwargs.get("dropout_p", args[4] if len(args) > 4 else 0.0)
                if isinstance(p, int | float) and p > 0:
                    found.append(_called_at(float(p)))
            return func(*args, **kwargs)

    try:
        with torch.no_grad(), _Watch():
            call()
    except (Exception, SystemExit):
        return ()  # the traced call reports the user's error, with its line
    return tuple(found)


def _called_at(p: float) -> KernelCall:
    """The call's place: the innermost frame outside torch and attntrace."""
    import sys

    import torch

    from attntrace.capturing.source import site_of

    skip = (os.path.dirname(torch.__file__), os.path.dirname(os.path.dirname(__file__)))
    frame = sys._getframe(2)
    while frame.f_back is not None and _real(frame.f_code.co_filename).startswith(skip):
        frame = frame.f_back
    site = site_of(frame)
    return KernelCall(site.location, site.source, p)


def _real(filename: str) -> str:
    return os.path.realpath(filename)


def dropout_diagnosis(found: KernelCall, returned: Any) -> Diagnosis:
    """Dropout at evaluation, named at the kernel call (``returned``: the output row's
    :class:`~attntrace.diffing.match.Agreement`, or None)."""
    import math

    from attntrace.diffing.diagnose import Diagnosis

    name, fix = KERNEL_FIXES["dropout-at-eval"].split(" || ")
    return Diagnosis(
        step="weights",
        bug="dropout-at-eval",
        name=name.format(p=found.dropout_p),
        fix=fix_in_call(fix, found.source),
        location=found.location,
        source=found.source,
        max_abs=returned.max_abs if returned is not None else math.nan,
        max_rel=returned.max_rel if returned is not None else math.nan,
    )


# ---------------------------------------------------------------------------------------------
# a fix in the user's own call

#: The fixes of bugs made in a kernel call's arguments, in the call's words. ``{mask}``, ``{not
#: mask}``, ``{scale}``, ``{dropout}``, ``{owner}`` and ``{q}`` are the user's own expressions.
KERNEL_FIXES = {
    "mask-inverted": "SDPA keeps the keys where a boolean mask is True (masked_fill masks "
    "where True): attn_mask={not mask}",
    "mask-float-keep": "SDPA adds a float mask to the scores: pass the keep mask as booleans, "
    "attn_mask={mask}.bool() (True = attend), or is_causal=True for a causal mask",
    "mask-missing": "the call masks nothing: pass is_causal=True for a causal model (or "
    "attn_mask=<boolean keep mask>)",
    "causal-unexpected": "the model is not causal: is_causal=False, attn_mask=None (or pass "
    "--causal when it is a decoder)",
    "decode-mask-top-left": "is_causal=True aligns the causal mask top-left when keys outnumber "
    "queries: pass is_causal=False, attn_mask=torch.nn.attention.bias.causal_lower_right(S, N) "
    "(or torch.ones(S, N, dtype=torch.bool).tril(diagonal=N - S))",
    "mask-axes-swapped": "the mask reads q_idx and kv_idx swapped: a causal mask_mod returns "
    "q_idx >= kv_idx, and a mask or bias is indexed [q_idx][kv_idx]",
    "causal-offset-1": "a query attends keys up to and including itself: is_causal=True, or a "
    "mask_mod returning q_idx >= kv_idx (attn_mask=torch.ones(S, S, dtype=torch.bool).tril())",
    "causal-offset+1": "a query attends keys up to and including itself: is_causal=True, or a "
    "mask_mod returning q_idx >= kv_idx (attn_mask=torch.ones(S, S, dtype=torch.bool).tril())",
    "scale": "SDPA's scale multiplies the scores: {scale}, or leave scale out (its default is "
    "1/√d)",
    "dropout-at-eval": "dropout left on at evaluation (dropout_p={p:g} while the module is in "
    "eval mode): the kernel drops weights at random || "
    "dropout only while training: dropout_p={dropout} if {owner}.training else 0.0",
}

_SCALES = ("unscaled", "scaled-1/d", "scaled-sqrt(d)", "scaled-1/sqrt(H)")


#: What a fix adds when the code hands the heads to a kernel after the mistake (``kernel``).
ENABLE_GQA = "or hand scaled_dot_product_attention the kv heads as they are, with enable_gqa=True"


def in_kernel_terms(d: Diagnosis, kernel: bool = False, callers: Iterable[Any] = ()) -> Diagnosis:
    """``d`` with its fix written in the user's kernel call, when the line blamed is one
    (``F.scaled_dot_product_attention(…)``, ``flex_attention(…)``); else ``d`` itself (with
    ``kernel``, the code calls one later: kv heads tiled for it may go in whole, enable_gqa).
    The SDPA call torch's ``nn.MultiheadAttention`` makes is blamed at the user's line that
    called the module, found among ``callers`` (the user's steps: ``caller``, ``caller_source``).

    >>> from attntrace.diffing.diagnose import Diagnosis
    >>> d = Diagnosis("scaled", "scaled-sqrt(d)", "…", "…", "m.py:9",
    ...               "y = F.scaled_dot_product_attention(q, k, v, scale=math.sqrt(q.size(-1)))",
    ...               1.0, 1.0)
    >>> in_kernel_terms(d).fix.split(": ")[1]
    'scale=1 / math.sqrt(q.size(-1)), or leave scale out (its default is 1/√d)'
    """
    key = d.bug or ""
    if kernel and key.startswith("gqa-tile") and kernel_call(d.source) is None:
        return replace(d, fix=f"{d.fix}; {ENABLE_GQA}")  # the repeat line, before the call
    if _in_torch_mha(d):  # torch's own call, made by nn.MultiheadAttention: its convention
        return at_the_callers_line(d, callers)
    words = KERNEL_FIXES.get("scale" if key in _SCALES else key)
    if not words or "||" in words or kernel_call(d.source) is None:
        return d
    return replace(d, fix=fix_in_call(words, d.source, key))


#: Fixes for a bug seen in the SDPA call of ``F.multi_head_attention_forward`` (torch's
#: ``nn.MultiheadAttention``, followed): written for the module's arguments, not the call's
#: (``{mask}``: the opposite of the user's ``attn_mask=`` expression).
MHA_FIXES = {
    "mask-inverted": "nn.MultiheadAttention's boolean attn_mask is True where a key is *hidden* "
    "(the opposite of scaled_dot_product_attention's): pass attn_mask={mask}, or a causal "
    "attn_mask=nn.Transformer.generate_square_subsequent_mask(S)",
}

#: ``nn.MultiheadAttention.forward``'s place for ``attn_mask`` among its positional arguments
#: (query, key, value, key_padding_mask, need_weights, attn_mask).
_MHA_MASK_AT = 5


def at_the_callers_line(d: Diagnosis, callers: Iterable[Any] = ()) -> Diagnosis:
    """``d``, blamed at the SDPA call inside torch's ``F.multi_head_attention_forward``, moved
    to the user's line that called the module (the first of ``callers`` replayed at that call
    with a ``caller``), its fix in the module's convention with the user's mask expression.

    >>> from attntrace.diffing.diagnose import Diagnosis
    >>> from attntrace.diffing.user_side import UserStep
    >>> d = Diagnosis("masked", "mask-inverted", "…", "…", "functional.py:7077",
    ...               "scaled_dot_product_attention( q, k, v, attn_mask, dropout_p, is_causal )",
    ...               1.0, 1.0)
    >>> step = UserStep(3, "masked", None, "functional.py:7077", d.source, "masked",
    ...                 "m.py:12", "y, _ = self.attn(x, x, x, attn_mask=allowed)")
    >>> moved = at_the_callers_line(d, [step])
    >>> moved.location, moved.fix.split(": ")[1].split(",")[0]
    ('m.py:12', 'pass attn_mask=~allowed')
    """
    step = next((s for s in callers if s.location == d.location and s.caller), None)
    mask = _mha_mask(step.caller_source) if step is not None else None
    fix = MHA_FIXES.get(d.bug or "")
    if fix is not None:
        d = replace(d, fix=fix.replace("{mask}", _negated(mask) if mask is not None else "~keep"))
    if step is None:
        return d
    return replace(d, location=step.caller, source=step.caller_source)


def _mha_mask(source: str) -> ast.expr | None:
    """The ``attn_mask`` the user handed ``nn.MultiheadAttention`` in ``source`` (their call
    of the module: by keyword, or sixth positional argument).

    >>> ast.unparse(_mha_mask("y, _ = self.attn(x, x, x, attn_mask=m == 0, need_weights=False)"))
    'm == 0'
    """
    tree = _parsed(source)
    calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call)] if tree is not None else []
    for call in calls:
        given = {k.arg: k.value for k in call.keywords if k.arg}
        if "attn_mask" in given:
            return given["attn_mask"]
        if len(call.args) > _MHA_MASK_AT:
            return call.args[_MHA_MASK_AT]
    return None


def _in_torch_mha(d: Diagnosis) -> bool:
    """Whether the line blamed is the SDPA call inside torch's ``F.multi_head_attention_forward``
    (followed for ``nn.MultiheadAttention``): torch's functional.py, its positional call."""
    call = kernel_call(d.source)
    names = [ast.unparse(a) for a in call.args] if call is not None else []
    torch_call = names == ["q", "k", "v", "attn_mask", "dropout_p", "is_causal"]
    return d.location.startswith("functional.py:") and torch_call


def calls_kernel(sources: Iterable[str]) -> bool:
    """Whether any of ``sources`` (the code's lines) calls SDPA or flex_attention.

    >>> calls_kernel(["s = q @ k", "y = F.scaled_dot_product_attention(q, k, v)"])
    True
    """
    return any(name + "(" in text for text in sources for name in KERNELS)


def kernel_call(source: str) -> ast.Call | None:
    """The first SDPA or flex_attention call in ``source`` (a line or a whole statement).

    >>> kernel_call("y = F.scaled_dot_product_attention(q, k, v)").args[0].id
    'q'
    >>> kernel_call("y = q @ k") is None
    True
    """
    found = re.search(rf"[\w.]*\b(?:{'|'.join(KERNELS)})\s*\(", source)
    tree = _parsed(_closed(source[found.start() :])) if found else None
    if tree is None:
        return None
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and _called(node) in KERNELS:
            return node
    return None


def fix_in_call(words: str, source: str, bug: str = "") -> str:
    """``words`` with the user's own expressions of the call ``source`` put in (``bug``: the
    catalogue key, which says what a wrong ``scale=`` expression holds)."""
    call = kernel_call(source)
    if call is None:
        return words
    given = {k.arg: k.value for k in call.keywords if k.arg}
    mask = given.get("attn_mask", call.args[3] if len(call.args) > 3 else None)
    first = call.args[0] if call.args else given.get("query")
    q = ast.unparse(first) if first is not None else "q"
    dropout = given.get("dropout_p", call.args[4] if len(call.args) > 4 else None)
    fills = {
        "{not mask}": _negated(mask) if mask is not None else "~mask",
        "{mask}": _bare(ast.unparse(mask)) if mask is not None else "mask",
        "{scale}": _scale(bug, given.get("scale"), q),
        "{dropout}": _dropout(dropout),
        "{owner}": _owner(dropout),
        "{q}": q,
    }
    for hole, text in fills.items():
        words = words.replace(hole, text)
    return words


def _closed(text: str) -> str:
    """``text`` up to the bracket that closes its first one (all of it when none does).

    >>> _closed("f(a, g(b)) * 2  # c")
    'f(a, g(b))'
    """
    depth = 0
    for i, ch in enumerate(text):
        depth += (ch in "([{") - (ch in ")]}")
        if ch in ")]}" and depth == 0:
            return text[: i + 1]
    return text


def _parsed(source: str) -> ast.AST | None:
    text = source.strip()
    for attempt in (text, text.rstrip(",") + ")", f"({text})"):
        try:
            return ast.parse(attempt)
        except SyntaxError:
            continue
    return None


def _called(node: ast.Call) -> str:
    func = node.func
    return func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")


def _negated(mask: ast.expr) -> str:
    """The mask's opposite: ``a == 0`` → ``a != 0``, ``~m`` → ``m``, else ``~m``.

    >>> _negated(ast.parse("bias[:, :, :T, :T] == 0", mode="eval").body)
    'bias[:, :, :T, :T] != 0'
    >>> _negated(ast.parse("~keep", mode="eval").body), _negated(ast.parse("m", mode="eval").body)
    ('keep', '~m')
    """
    flips: dict[type, ast.cmpop] = {
        ast.Eq: ast.NotEq(), ast.NotEq: ast.Eq(), ast.Lt: ast.GtE(),
        ast.GtE: ast.Lt(), ast.Gt: ast.LtE(), ast.LtE: ast.Gt(),
    }  # fmt: skip
    if isinstance(mask, ast.Compare) and len(mask.ops) == 1 and type(mask.ops[0]) in flips:
        return ast.unparse(ast.Compare(mask.left, [flips[type(mask.ops[0])]], mask.comparators))
    if isinstance(mask, ast.UnaryOp) and isinstance(mask.op, ast.Invert):
        return ast.unparse(mask.operand)
    return "~" + _bare(ast.unparse(mask))


def _bare(text: str) -> str:
    """``text`` in brackets unless it is a name, an attribute, a call or a subscript."""
    return text if re.fullmatch(r"[\w.]+(\[.*\]|\(.*\))?", text) else f"({text})"


def _scale(bug: str, scale: ast.expr | None, q: str) -> str:
    """The right ``scale=`` in the user's terms, read from their wrong one: ``math.sqrt(X)`` or
    ``X ** 0.5`` (√d) and ``1 / X`` or ``X ** -1`` (1/d) hold d; ``X ** 2`` (1/d) and
    ``1 / X`` (√d) hold the right scale itself; else d is ``q.size(-1)``.

    >>> _scale("scaled-1/d", ast.parse("1 / k.size(-1)", mode="eval").body, "q")
    'scale=1 / math.sqrt(k.size(-1))'
    >>> _scale("scaled-1/d", ast.parse("scaling ** 2", mode="eval").body, "q")
    'scale=scaling'
    >>> _scale("scaled-sqrt(d)", ast.parse("1 / scaling", mode="eval").body, "q")
    'scale=scaling'
    >>> _scale("unscaled", None, "query")
    'scale=1 / math.sqrt(query.size(-1))'
    """
    d = f"{q}.size(-1)"
    if isinstance(scale, ast.Call) and _called(scale) == "sqrt" and scale.args:
        d = ast.unparse(scale.args[0])
    elif isinstance(scale, ast.BinOp) and isinstance(scale.right, ast.Constant):
        power = scale.right.value if isinstance(scale.op, ast.Pow) else None
        if power == 2 and bug == "scaled-1/d":
            return f"scale={ast.unparse(scale.left)}"
        if power in (0.5, -1):
            d = ast.unparse(scale.left)
    elif isinstance(scale, ast.BinOp) and isinstance(scale.op, ast.Div):
        if bug == "scaled-sqrt(d)":
            return f"scale={ast.unparse(scale.right)}"
        d = ast.unparse(scale.right)
    return f"scale=1 / math.sqrt({d})"


def _owner(dropout: ast.expr | None) -> str:
    """The object whose ``training`` decides: the root of ``module.attention_dropout``.

    >>> _owner(ast.parse("module.attention_dropout", mode="eval").body), _owner(None)
    ('module', 'self')
    """
    node = dropout.body if isinstance(dropout, ast.IfExp) else dropout
    while isinstance(node, ast.Attribute):
        node = node.value
    return node.id if isinstance(node, ast.Name) and node is not dropout else "self"


def _dropout(dropout: ast.expr | None) -> str:
    """The dropout probability as the call names it, without a ``if self.training`` already
    there."""
    if dropout is None:
        return "p"
    if isinstance(dropout, ast.IfExp):
        return ast.unparse(dropout.body)
    return ast.unparse(dropout)


def random_kernel(check: Callable[[], None], call: Callable[[], Any]) -> KernelCall | None:
    """Run ``check`` (diff's determinism check); when it refuses the code, the kernel call
    that drew dropout in eval mode, if that is why (else the refusal stands)."""
    import sys

    from attntrace.errors import ConfigError

    try:
        check()
    except ConfigError:
        found = dropout_calls(call) if "torch" in sys.modules else ()
        if not found:
            raise
        return found[0]
    return None
