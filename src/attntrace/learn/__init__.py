"""Learning attention with attntrace: every step in words, in English and Chinese.

One catalogue of messages per language (:mod:`catalogue_en`, :mod:`catalogue_zh`), the same
keys in each; :mod:`words` fills a step's message with this run's numbers; :mod:`lang` picks
the language (``--lang``, else the locale).

>>> from attntrace import AttentionConfig, trace_attention
>>> from attntrace.learn import explain_step
>>> print(explain_step(trace_attention(AttentionConfig(), "shape"), "merged", "zh"))
拼接多头：把每个词的 12 个头（每个 64 维）拼接成一个 768 维的向量：(3, 12, 64) → (3, 768)。
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from attntrace.lazy import lazy_names
from attntrace.learn.lang import LANGS, Lang, check_lang, default_lang, message

if TYPE_CHECKING:
    from attntrace.learn.words import explain_step, explain_trace

# words.py (the steps' sentences, ~9 ms) only when a command explains: a plain run, whose
# words come through lang.py alone, does not pay for it
__getattr__, __dir__ = lazy_names(
    __name__, {"explain_step": "attntrace.learn.words", "explain_trace": "attntrace.learn.words"}
)

__all__ = [
    "LANGS",
    "Lang",
    "check_lang",
    "default_lang",
    "explain_step",
    "explain_trace",
    "message",
]
