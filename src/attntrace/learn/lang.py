"""The languages of the words attntrace prints, the default one, and the lookup of a message.

Step names, JSON keys and shapes are the same in every language (a contract); only the words
around them change.
"""

from __future__ import annotations

from collections.abc import Mapping
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


def catalogue(lang: Lang) -> Mapping[str, str]:
    """The messages of ``lang`` (imported on first use)."""
    if lang == "zh":
        from attntrace.learn.catalogue_zh import MESSAGES
    else:
        from attntrace.learn.catalogue_en import MESSAGES
    return MESSAGES


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
