"""The words of the interface in both languages, side by side: key → (English, Chinese).

Errors, verdicts, rules and fixes are printed by the code in English; the English side here
is each sentence's template (``{name}`` stands for a figure, a name or a shape), and
:func:`attntrace.learn.lang.translate` finds the template a printed sentence fits and fills
the Chinese side with the same figures. Every key has both languages (a test checks), and
the Chinese uses the study notes' words.
"""

from __future__ import annotations

MESSAGES: dict[str, tuple[str, str]] = {
    # --- the one error line -----------------------------------------------------------------
    "err.prefix": ("attntrace: error: {message}", "attntrace：错误：{message}"),
    "err.lang": (
        "--lang must be one of {choices}, got {got}",
        "--lang 只能是 {choices} 之一，而不是 {got}",
    ),
}
