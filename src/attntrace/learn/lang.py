"""The languages of the words attntrace prints, the default one, and the lookup of a message.

Step names, JSON keys and shapes are the same in every language (a contract); only the words
around them change.
"""

from __future__ import annotations

import functools
import re
import string
from collections.abc import Mapping, Sequence
from typing import Literal

from attntrace.errors import ConfigError
from attntrace.text import locale_is_chinese

Lang = Literal["en", "zh"]
#: The languages of the catalogues, the first the fallback.
LANGS: tuple[Lang, ...] = ("en", "zh")


def default_lang(environ: Mapping[str, str] | None = None) -> Lang:
    """``zh`` when the locale is Chinese (``zh_CN.UTF-8``, ``zh_TW``...), else ``en``: the
    first of LC_ALL, LC_MESSAGES, LANG that is set and not empty decides.

    >>> default_lang({"LANG": "zh_CN.UTF-8"}), default_lang({"LC_ALL": "C", "LANG": "zh_CN"})
    ('zh', 'en')
    >>> default_lang({})
    'en'
    """
    return "zh" if locale_is_chinese(environ) else "en"


def check_lang(lang: str | None) -> Lang:
    """``lang`` checked (None: :func:`default_lang`).

    >>> check_lang("zh")
    'zh'
    """
    if lang is None:
        return default_lang()
    for known in LANGS:
        if lang == known:
            return known
    raise ConfigError(f"--lang must be one of {', '.join(LANGS)}, got {lang!r}")


def requested_lang(args: Sequence[str], environ: Mapping[str, str] | None = None) -> Lang:
    """The language a command line asks for before its options are parsed (``--help`` and
    usage errors come first): ``--lang X`` or ``--lang=X`` when X is known, else the locale.

    >>> requested_lang(["run", "--lang", "zh", "--help"], {}), requested_lang(["--lang=en"], {})
    ('zh', 'en')
    >>> requested_lang(["run", "--help"], {"LANG": "zh_CN.UTF-8"})
    'zh'
    """
    for i, arg in enumerate(args):
        value = args[i + 1] if arg == "--lang" and i + 1 < len(args) else arg[7:]
        if (arg == "--lang" or arg.startswith("--lang=")) and value in LANGS:
            return "zh" if value == "zh" else "en"
    return default_lang(environ)


@functools.cache
def catalogue(lang: Lang) -> Mapping[str, str]:
    """The messages of ``lang`` (imported on first use): the steps' catalogue of that language
    and ``lang``'s side of the two-language catalogues of the interface
    (:mod:`catalogue_cli`: verdicts, errors; :mod:`catalogue_help`: every ``--help``)."""
    from attntrace.learn.catalogue_cli import MESSAGES as CLI
    from attntrace.learn.catalogue_help import MESSAGES as HELP

    if lang == "zh":
        from attntrace.learn.catalogue_zh import MESSAGES
    else:
        from attntrace.learn.catalogue_en import MESSAGES
    side = 1 if lang == "zh" else 0
    both = {key: pair[side] for key, pair in {**HELP, **CLI}.items()}
    return {**both, **MESSAGES}


class _Facts(dict[str, object]):
    """The figures a message is filled with; a placeholder without a figure stays as written."""

    def __missing__(self, key: str) -> str:
        return "{" + key + "}"


def message(key: str, lang: Lang = "en", /, **facts: object) -> str:
    """The message ``key`` of ``lang`` filled with ``facts`` (the English one, then the key
    itself, when ``lang`` has none).

    >>> message("ui.steps_title", "zh", dtype="float32")
    '步骤（所有张量均为 float32）'
    >>> message("ui.no_such_key")
    'ui.no_such_key'
    """
    text = catalogue(lang).get(key) or catalogue("en").get(key) or key
    return text.format_map(_Facts(facts))


def translate(text: str, lang: Lang, only: str = "") -> str:
    """``text``, an English sentence attntrace printed, in ``lang``: the catalogue's sentence
    whose English side it is, word for word (a help text) or with its figures (a template of
    ``{placeholders}``: an error, a rule, a verdict); clause by clause (``; ``) when only its
    parts are known; unchanged when none fits (English stays English, never a guess).

    Code keeps printing its English; the words change only here, at the edge, so a sentence
    is translated wherever it is shown (tests/learn/test_chinese_everywhere.py finds those
    that fit no template).

    >>> translate("--lang must be one of en, zh, got 'fr'", "zh")
    "--lang 只能是 en, zh 之一，而不是 'fr'"
    >>> translate("no such sentence", "zh")
    'no such sentence'
    """
    if lang == "en" or not text.strip():
        return text
    whole = _translate_whole(text, lang, only)
    if whole is not None:
        return whole
    parts = clauses(text)
    if len(parts) > 1:
        said = [_translate_whole(part, lang, only) for part in parts]
        if any(s is not None for s in said):
            return "；".join(s if s is not None else p for s, p in zip(said, parts, strict=True))
    return text


def clauses(text: str) -> list[str]:
    """``text`` cut at each ``"; "`` outside brackets.

    >>> clauses("a (b; c); d")
    ['a (b; c)', 'd']
    """
    parts, depth, start = [], 0, 0
    for i, c in enumerate(text):
        depth += (c in "([{") - (c in ")]}")
        if depth == 0 and text.startswith("; ", i):
            parts.append(text[start:i])
            start = i + 2
    return [*parts, text[start:]]


@functools.lru_cache(maxsize=4096)
def _translate_whole(text: str, lang: Lang, only: str = "") -> str | None:
    """``text`` in ``lang`` when one sentence of the catalogue fits all of it, else None
    (remembered: a table's cells say the same words many times)."""
    exact, templates = _index(lang, only)
    key = exact.get(" ".join(text.split()))
    if key is not None:
        return catalogue(lang)[key]
    for key, template, anchor, fixed in templates:
        if anchor not in text:
            continue  # its longest fixed words are not there: no need to match
        found = _pattern(template)[1].fullmatch(text)
        if found is None or not all(map(_balanced, found.groups())):
            continue
        figures = sum(len(v) for k, v in found.groupdict().items() if k not in _UNCOUNTED)
        if fixed < MIN_FIXED * (fixed + figures):
            continue  # mostly figures: a phrase that only happens to fit (" at ")
        facts = {name: _fact(value, lang) for name, value in found.groupdict().items()}
        return message(key, lang, **facts)
    return None


def _balanced(value: str) -> bool:
    """Whether a matched figure opens as many brackets as it closes: ``(12, 3, 64)`` is one,
    ``scores (12, 3`` is the wrong cut of a sentence.

    >>> _balanced("(3, (4))"), _balanced("scores (12, 3")
    (True, False)
    """
    depth = 0
    for c in value:
        depth += (c in "([{") - (c in ")]}")
        if depth < 0:
            return False
    return depth == 0


def _fact(value: str, lang: Lang) -> str:
    """A figure matched in a sentence: a sentence itself (a reason inside an error) is
    translated too; a name, number or shape comes back as it was."""
    return value if " " not in value else translate(value, lang)


@functools.cache
def _index(
    lang: Lang, only: str = ""
) -> tuple[dict[str, str], tuple[tuple[str, str, str, int], ...]]:
    """The English sentences of the catalogue (those of the keys starting with ``only``):
    those without placeholders by their words, the others as patterns, the most specific (the
    most fixed letters) first."""
    english, target = catalogue("en"), catalogue(lang)
    exact: dict[str, str] = {}
    templates: list[tuple[str, str, str, int]] = []
    for key, text in english.items():
        if key not in target or not key.startswith(only or _TRANSLATED):
            continue
        parsed = list(string.Formatter().parse(text))
        if all(f is None for _, f, _, _ in parsed):
            exact.setdefault(" ".join(text.replace("{{", "{").replace("}}", "}").split()), key)
            continue
        literals = [literal for literal, _, _, _ in parsed]
        templates.append((key, text, max(literals, key=len), sum(map(len, literals))))
    ordered = sorted(templates, key=lambda t: -t[3])
    return exact, tuple(ordered)


#: The keys whose English is matched against what attntrace prints (the steps' explanations
#: are made from the catalogue, never translated back).
_TRANSLATED = (
    "help.",
    "err.",
    "rule.",
    "fix.",
    "note.",
    "verdict.",
    "ui.",
    "bug.",
    "word.",
    "cell.",
)


#: The placeholders that stand for whole sentences (a rule, a fix, an error's message), which
#: may hold clauses of their own.
WHOLE_FIELDS = frozenset({"message", "rule", "fix", "note", "bug", "how", "reason", "why"})
#: Placeholders whose length says nothing of how well a template fits: sentences, and the
#: lists of choices an error names.
_UNCOUNTED = WHOLE_FIELDS | {"choices", "valid", "found", "steps", "options", "source"}
#: The least share of a sentence's own letters (its figures aside) a template must fix.
MIN_FIXED = 0.2
#: What a figure may be: any text but a clause's "; ", its brackets paired (two levels deep).
_PAIRED = r"\((?:[^()]|\([^()]*\))*\)|\[[^\[\]]*\]"
_FIELD = rf"(?:(?!; )(?:[^()\[\]]|{_PAIRED}))+?"
#: What a whole sentence may be: any text, its brackets paired.
_SENTENCE = rf"(?:[^()\[\]]|{_PAIRED})+?"


@functools.cache
def _pattern(template: str) -> tuple[int, re.Pattern[str]]:
    """A template as a regular expression (each ``{name}`` a lazy group that does not run
    over a clause's ``; ``; a name used twice must match the same text) and the number of its
    fixed letters."""
    parts, seen, fixed = [], set(), 0
    for literal, field, _, _ in string.Formatter().parse(template):
        parts.append(re.escape(literal))
        fixed += len(literal)
        if field is None:
            continue
        figure = _SENTENCE if field in WHOLE_FIELDS else _FIELD
        parts.append(f"(?P={field})" if field in seen else f"(?P<{field}>{figure})")
        seen.add(field)
    return fixed, re.compile("".join(parts), re.DOTALL)
