"""A configuration in words, for a page a learner reads (the report's config table): each
setting named with its axis letter, its value with what it means — ``head_dim (d)``: ``64
(H / h)`` — never a bare ``None`` or ``True``. The JSON documents keep the raw fields.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from attntrace.learn.lang import message

if TYPE_CHECKING:
    from attntrace.config.attention_config import AttentionConfig
    from attntrace.learn import Lang

#: The settings shown, in order, each with its axis letter (if any).
LETTERS = {
    "batch": "B",
    "seq": "S",
    "hidden": "H",
    "heads": "h",
    "head_dim": "d",
    "kv_heads": "g",
    "kv_seq": "N",
    "kv_hidden": "M",
    "past": "",
    "window": "W",
    "rotary_dims": "R",
    "softcap": "C",
}


def config_rows(cfg: AttentionConfig, lang: Lang = "en") -> list[tuple[str, str]]:
    """(setting, value in words) for every field of ``cfg.to_dict()`` (the optional variants
    only when on, as the JSON has them).

    >>> from attntrace import AttentionConfig
    >>> rows = dict(config_rows(AttentionConfig()))
    >>> rows["head_dim (d)"], rows["batch (B)"], rows["bias"], rows["scale"]
    ('64 (H / h)', 'none: x is (S, H), unbatched', 'yes', '1/√d = 0.125')
    >>> dict(config_rows(AttentionConfig(), "zh"))["causal"]
    '否'
    """
    fields = cfg.to_dict()
    rows = []
    for key, value in fields.items():
        if key == "head_dim_override":
            continue  # said with head_dim
        letter = LETTERS.get(key, "")
        name = f"{key} ({letter})" if letter else key
        said = _SAY.get(key, _plain)(cfg, value, lang)
        if said is not None:
            rows.append((name, said))
    return rows


def _yes_no(value: object, lang: Lang) -> str:
    return message("report.yes" if value else "report.no", lang)


def _plain(cfg: AttentionConfig, value: object, lang: Lang) -> str | None:
    """Any other setting: yes or no, none, a list, or the value."""
    if isinstance(value, bool):
        return _yes_no(value, lang)
    if value is None:
        return message("report.cfg.none", lang)
    if isinstance(value, list | tuple):
        return ", ".join(map(str, value))
    return f"{value:g}" if isinstance(value, float) else str(value)


def _batch(cfg: AttentionConfig, value: object, lang: Lang) -> str:
    return message("report.cfg.unbatched", lang) if value is None else str(value)


def _head_dim(cfg: AttentionConfig, value: object, lang: Lang) -> str:
    key = "report.cfg.head_dim" if cfg.head_dim_override is None else "report.cfg.head_dim_set"
    return message(key, lang, d=value)


def _kv_heads(cfg: AttentionConfig, value: object, lang: Lang) -> str:
    if value is None or value == cfg.heads:
        return message("report.cfg.kv_heads_all", lang, h=cfg.heads)
    return message("report.cfg.kv_heads", lang, g=value, r=cfg.heads // cfg.groups)


def _kv_seq(cfg: AttentionConfig, value: object, lang: Lang) -> str:
    return message("report.cfg.self_keys", lang) if value is None else str(value)


def _kv_hidden(cfg: AttentionConfig, value: object, lang: Lang) -> str:
    return message("report.cfg.self_width", lang) if value is None else str(value)


def _key_lengths(cfg: AttentionConfig, value: object, lang: Lang) -> str:
    if value is None:
        return message("report.cfg.every_key", lang)
    return ", ".join(map(str, value)) if isinstance(value, list | tuple) else str(value)


def _rope_base(cfg: AttentionConfig, value: object, lang: Lang) -> str | None:
    return f"{value:g}" if cfg.rope and isinstance(value, float | int) else None


def _block_size(cfg: AttentionConfig, value: object, lang: Lang) -> str | None:
    if cfg.algorithm != "flash":
        return None
    return message("report.cfg.auto", lang) if value is None else str(value)


def _scale(cfg: AttentionConfig, value: object, lang: Lang) -> str:
    if value is None:
        return f"1/√d = {1 / cfg.head_dim**0.5:.4g}"
    if value == 1.0:
        return message("report.cfg.unscaled", lang)
    return f"{value:g}" if isinstance(value, float) else str(value)


_SAY: dict[str, Callable[[AttentionConfig, object, Lang], str | None]] = {
    "batch": _batch,
    "head_dim": _head_dim,
    "kv_heads": _kv_heads,
    "kv_seq": _kv_seq,
    "kv_hidden": _kv_hidden,
    "key_lengths": _key_lengths,
    "rope_base": _rope_base,
    "block_size": _block_size,
    "scale": _scale,
}
