"""The verdict of a diff — MATCH, DIFFERS or CANNOT TELL — and what attntrace read from the
module instead of the command line.

A flag the user types for a semantic choice (``--causal``, ``--rope-style``, ``--rope-base``,
``--scale``, ``--window`` …) wins over what the module states; only sizes (heads, kv heads,
head_dim, hidden, bias) are checked against the weights. A choice read from the module is a
:class:`Read`, printed beside the header ("causal: from LlamaAttention.is_causal (True)").

DIFFERS is said only at a step of the user's code, against a reference whose configuration the
user gave or the code confirmed. Where the only explanation is a choice nobody stated (a causal
mask when no flag said causal or not), where no step of the code was seen, or where the
code cannot be expressed (:class:`~attntrace.errors.CannotTellError`), the verdict is CANNOT
TELL with what is missing and the one flag that would decide it.

>>> Read("causal", True, "LlamaAttention.is_causal")
Read(field='causal', value=True, source='LlamaAttention.is_causal')
>>> str(Read("causal", True, "LlamaAttention.is_causal"))
'causal: from LlamaAttention.is_causal (True)'
"""

from __future__ import annotations

import re
from collections.abc import Collection
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from attntrace.config.attention_config import AttentionConfig
    from attntrace.diffing.layer import Layer

#: The three verdicts, in the words the JSON uses (``verdict``).
MATCH, DIFFERS, CANNOT_TELL = "match", "differs", "cannot tell"

#: What a module may state that is a size: the weights' shapes check it, a flag must agree.
SIZES = frozenset({"hidden", "heads", "kv_heads", "head_dim_override", "bias", "dtype"})

#: How each semantic choice is named in a note, and its option.
LABELS = {
    "causal": ("causal", "--causal"),
    "rope": ("RoPE", "--rope"),
    "rope_base": ("θ", "--rope-base"),
    "kv_heads": ("kv heads", "--kv-heads"),
    "rope_style": ("RoPE style", "--rope-style"),
    "window": ("window", "--window"),
    "scale": ("scale", "--scale"),
    "softcap": ("softcap", "--softcap"),
    "qk_norm": ("qk norm", "--qk-norm"),
    "rotary_dims": ("rotary dims", "--rotary-dims"),
    "rope_scaling": ("RoPE scaling", "--rope-scaling"),
    "relative_bias": ("relative bias", "--relative-bias"),
    "alibi": ("ALiBi", "--alibi"),
    "alibi_scaled": ("ALiBi added before the scale", ""),
    "qk_norm_eps": ("qk norm eps", ""),
}


@dataclass(frozen=True)
class Read:
    """A semantic choice read from the module (no flag gave it): field, value, where from."""

    field: str  # the AttentionConfig field, e.g. "causal"
    value: Any
    source: str  # "LlamaAttention.is_causal", "OPTConfig"

    def __str__(self) -> str:
        label = LABELS.get(self.field, (self.field, ""))[0]
        return f"{label}: from {self.source} ({_shown(self.value)})"

    @property
    def choice(self) -> bool:
        """A semantic choice, which a flag overrides (a size must agree with the weights)."""
        return self.field not in SIZES

    @property
    def overridable(self) -> bool:
        """A choice some flag sets (not ``alibi_scaled``, ``qk_norm_eps``: read only)."""
        return self.choice and LABELS.get(self.field, ("", "a flag"))[1] != ""

    def to_dict(self) -> dict[str, Any]:
        return {"field": self.field, "value": self.value, "source": self.source}


@dataclass(frozen=True)
class Undecided:
    """Why diff cannot tell: what is missing, and the one flag or file that would decide."""

    missing: str
    remedy: str

    def __str__(self) -> str:
        return f"{self.missing}; {self.remedy}" if self.remedy else self.missing


def _shown(value: Any) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


def split_hints(layer: Layer, explicit: Collection[str]) -> tuple[dict[str, Any], tuple[Read, ...]]:
    """The module's hints that stand (sizes, and choices no flag gave: a typed flag wins) and
    the :class:`Read` of each choice taken from the module.

    >>> from attntrace.diffing.layer import Layer
    >>> layer = Layer("A (nn.Module)", "torch", None, hints={"heads": 4, "causal": True})
    >>> split_hints(layer, {"causal"})
    ({'heads': 4}, ())
    """
    sources = hint_sources(layer)
    kept, reads = {}, []
    for name, value in layer.hints.items():
        option = "head_dim" if name == "head_dim_override" else name
        if name not in SIZES and option in explicit:
            continue  # the user's flag wins over what the module states
        kept[name] = value
        if option in explicit:
            continue  # a size the user gave too (the weights check that the two agree)
        if name not in sources or name in SIZES - {"kv_heads"}:
            continue
        rotating = name == "rope_base" and layer.hints.get("rope")
        if name == "causal" or rotating or value not in (None, False, _default(name)):
            reads.append(Read(name, value, sources[name]))
    return kept, tuple(r for r in reads if r.field != "rope" or "rope_base" not in sources)


def _default(name: str) -> Any:
    from attntrace.config.attention_config import AttentionConfig

    return getattr(AttentionConfig(), name, None)


#: Where a transformers config states each choice (its key), for the notes.
_CONFIG_KEYS = {
    "rope_base": "rope_theta",
    "window": "sliding_window",
    "softcap": "attn_logit_softcapping",
    "scale": "query_pre_attn_scalar",
    "rotary_dims": "partial_rotary_factor",
}


def hint_sources(layer: Layer) -> dict[str, str]:
    """Where each of the layer's hints came from: ``Class.attribute`` of the module (or of its
    attention submodule), else the config class of a transformers layer."""
    from attntrace.diffing.layer import HINTS, _hint

    module = layer.module
    if module is None:
        return {}
    region = getattr(module, "attntrace_region", None)  # the user's module holding the class
    if region is not None:
        module = module.inner
    library = region is None and getattr(type(module), "attntrace_transparent", False)
    held = [getattr(module, "attn", module)] if library else [module, *_children(module)]
    config = getattr(module, "config", None) if library else None
    if region is not None:
        config = getattr(module.get_submodule(region.core), "config", None)
    found: dict[str, str] = {}
    for name in layer.hints:
        key = "rope_base" if name == "rope" else name
        for m in held:
            attr = next(
                (a for a in HINTS.get(key, ()) if _hint(key, getattr(m, a, None)) is not None),
                None,
            )
            if attr is not None:
                found[name] = f"{type(m).__name__}.{attr}"
                break
        else:
            if config is not None:
                where = _CONFIG_KEYS.get(key)
                found[name] = type(config).__name__ + (f".{where}" if where else "")
    return found


def _children(module: Any) -> list[Any]:
    return [m for _, m in module.named_modules() if m is not module]


# ---------------------------------------------------------------------------------------------
# the verdict


#: A known bug that is a choice of the model, not a mistake, when nobody stated the choice:
#: key pattern -> (option field, the flag that makes the reference do what the code does,
#: what the code does).
_CHOICES: tuple[tuple[str, str, str, str], ...] = (
    (r"causal-unexpected", "causal", "--causal", "applies a causal mask"),
    (r"mask-missing", "causal", "--no-causal", "applies no causal mask"),
    (r"rope-(half|interleaved)", "rope_style", "--rope-style {0}", "pairs RoPE's dims as {0}"),
    (r"rope-theta-(.+)", "rope_base", "--rope-base {0}", "rotates with θ = {0}"),
)


def choice_of(key: str | None, config: AttentionConfig) -> tuple[str, str, str] | None:
    """(field, flag, what the code does) when the bug ``key`` is a model's choice.

    >>> from attntrace import AttentionConfig
    >>> choice_of("rope-interleaved", AttentionConfig(rope=True))
    ('rope_style', '--rope-style interleaved', "pairs RoPE's dims as interleaved")
    >>> choice_of("softmax-axis-1", AttentionConfig()) is None
    True
    """
    for pattern, field, flag, does in _CHOICES:
        found = re.fullmatch(pattern, key or "")
        if found is None:
            continue
        if key == "mask-missing" and not (config.causal and config.key_lengths is None):
            return None  # a padding mask left out is a mistake, not a choice
        return field, flag.format(*found.groups()), does.format(*found.groups())
    return None


def undecided(report: Any, explicit: Collection[str], reads: tuple[Read, ...]) -> Undecided | None:
    """Why the divergence of ``report`` is no finding: a choice nobody stated explains it,
    no step of the code was seen where it goes wrong, or no step at all matched."""
    d = report.diagnosis
    assert d is not None
    choice = choice_of(d.bug, report.config)
    if choice is not None:
        field, flag, does = choice
        option = "head_dim" if field == "head_dim_override" else field
        if option not in explicit:
            return _unstated(field, flag, does, reads)
    if d.bug is not None:
        return None
    if not d.location:
        return Undecided(
            f"the code has no tensor that plays {d.step}, the first step that differs, so "
            "where it goes wrong was not seen",
            "run attntrace trace on it to see its ops",
        )
    unconfirmed = _unconfirmed(report, explicit, reads)
    if unconfirmed is not None:
        return unconfirmed
    if not _any_inner_match(report):
        return Undecided(
            f"no step of the code between x and its output matches the reference (the output "
            f"differs by {_shown(d.max_abs)}), so the reference's configuration is not "
            "confirmed by the code and no known bug reproduces it",
            "give the model's choices as flags (--causal, --rope-style, --scale …) or its "
            "config.json with --hf-config",
        )
    return None


#: The first reference step each choice acts on, for the choices attntrace may have guessed
#: (a mask the builder or the caller makes from them); RoPE's tables, the scale and the norms
#: come from the module's own config, which its code uses: confirmed by construction.
ACTS_AT = {"causal": "masked", "window": "masked"}


def _unconfirmed(
    report: Any, explicit: Collection[str], reads: tuple[Read, ...]
) -> Undecided | None:
    """An unexplained divergence at or after a step that a choice read from the module (no
    flag gave it) acts on, that step not matched: the reference may be what is wrong."""
    from attntrace.diffing.align import MATCH as ROW_MATCH

    d = report.diagnosis
    order = {r.step.name: i for i, r in enumerate(report.rows)}
    status = {r.step.name: r.status for r in report.rows}
    at = order.get(d.step, len(order))
    for read in sorted(reads, key=lambda r: r.field != "window"):  # the narrower choice first
        step = ACTS_AT.get(read.field)
        if not read.choice or read.field in explicit or step not in order:
            continue
        if read.field == "causal" and "window" in explicit:
            continue  # --window W stated the mask's band: the code is judged by it
        if order[step] <= at and status[step] != ROW_MATCH:
            label, option = LABELS.get(read.field, (read.field, ""))
            say = (
                "say whether the model is causal: --causal or --no-causal"
                if read.field == "causal"
                else f"say which {label} the model has: {option} (or its config.json with "
                "--hf-config)"
            )
            return Undecided(
                f"the code differs from step {d.step} and no known bug reproduces it, but the "
                f"reference's {label} there was read from {read.source} "
                f"({_shown(read.value)}), not given, and the code does not confirm it",
                say,
            )
    return None


def _any_inner_match(report: Any) -> bool:
    from attntrace.diffing.align import MATCH as ROW_MATCH

    return any(
        r.status == ROW_MATCH and r.user is not None and r.user.name not in ("x", "returned")
        for r in report.rows[1:]
    )


#: What a flag would have said, for the choices a known bug can stand in for.
_QUESTIONS = {
    "causal": "whether the model is causal",
    "rope_style": "how the model pairs RoPE's dimensions",
    "rope_base": "the model's RoPE θ",
}


def _unstated(field: str, flag: str, does: str, reads: tuple[Read, ...]) -> Undecided:
    """CANNOT TELL for a known bug that is also a model's choice no flag stated.

    >>> print(_unstated("causal", "--causal", "applies a causal mask", ()).missing)
    ... # doctest: +NORMALIZE_WHITESPACE
    the code applies a causal mask, and no flag said whether the model is causal
    (attntrace's default: False): the model's choice or a bug
    """
    read = next((r for r in reads if r.field == field), None)
    stated = (
        f"{read.source} gives {_shown(read.value)}"
        if read
        else f"attntrace's default: {_shown(_default(field))}"
    )
    question = _QUESTIONS.get(field, f"the model's {LABELS.get(field, (field, ''))[0]}")
    other = "--causal" if flag == "--no-causal" else "--no-causal" if flag == "--causal" else ""
    contrary = f"; {other} makes it a finding" if other else ""
    return Undecided(
        f"the code {does}, and no flag said {question} ({stated}): the model's choice or a bug",
        f"pass {flag} if that is the model's choice{contrary}",
    )
