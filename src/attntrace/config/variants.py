"""The settings of model variants that AttentionConfig validates and the engine computes with:
``--rope-scaling`` and T5's ``--relative-bias``, each read here into a small record
(:mod:`attntrace.engine.rope` and :mod:`attntrace.engine.relative` use them).
"""

from __future__ import annotations

import math
from typing import NamedTuple

from attntrace.errors import ConfigError

#: RoPE scaling types (transformers' ROPE_INIT_FUNCTIONS) and their parameters; None: required.
ROPE_SCALINGS: dict[str, dict[str, float | None]] = {
    "linear": {"factor": None},
    "dynamic": {"factor": None, "max_position_embeddings": None},
    "yarn": {
        "factor": None,
        "original_max_position_embeddings": None,
        "attention_factor": 0.0,
        "beta_fast": 32.0,
        "beta_slow": 1.0,
        "mscale": 0.0,
        "mscale_all_dim": 0.0,
        "truncate": 1.0,
    },
    "llama3": {
        "factor": 8.0,
        "low_freq_factor": 1.0,
        "high_freq_factor": 4.0,
        "original_max_position_embeddings": 8192.0,
    },
}


class RopeScaling(NamedTuple):
    """A ``--rope-scaling`` as read: its type and every parameter (defaults filled in)."""

    kind: str  # one of ROPE_SCALINGS
    params: dict[str, float]


def parse_rope_scaling(text: str) -> RopeScaling:
    """``TYPE`` or ``TYPE:key=value,...`` -> the type and every parameter (defaults filled in).

    >>> parse_rope_scaling("linear:factor=4")
    RopeScaling(kind='linear', params={'factor': 4.0})
    >>> parse_rope_scaling("llama3")[1]["original_max_position_embeddings"]
    8192.0
    """
    from attntrace.units import bounded

    kind, _, rest = bounded(text, "--rope-scaling", 4096).partition(":")
    if kind not in ROPE_SCALINGS:
        raise ConfigError(
            f"--rope-scaling {text!r}: unknown type {kind!r}; use one of {', '.join(ROPE_SCALINGS)}"
        )
    known = ROPE_SCALINGS[kind]
    given: dict[str, float] = {}
    for item in filter(None, rest.split(",")):
        key, _, value = item.partition("=")
        try:
            number = float(value)
        except ValueError:
            raise ConfigError(f"--rope-scaling {text!r}: {item!r} is not key=number") from None
        if not math.isfinite(number):  # "inf", "nan", or 400 digits
            raise ConfigError(
                f"--rope-scaling {key.strip()!r}: {value[:40]!r} is not a finite number"
            )
        given[key.strip()] = number
    unknown = set(given) - set(known)
    missing = [k for k, v in known.items() if v is None and k not in given]
    if unknown or missing:
        names = sorted(unknown) or missing
        what = ("unknown " if unknown else "missing ") + ", ".join(names)
        raise ConfigError(f"--rope-scaling {text!r}: {what}; {kind} takes {', '.join(known)}")
    params = {k: given[k] if k in given else float(v or 0.0) for k, v in known.items()}
    for name, amount in params.items():
        floor = name in _ZERO_IS_DEFAULT or name == "truncate"
        if not (amount >= 0 if floor else amount > 0):
            raise ConfigError(
                f"--rope-scaling {kind}: {name} must be {'>= 0' if floor else '> 0'}, "
                f"got {amount:g}"
            )
    if kind == "llama3" and not params["high_freq_factor"] > params["low_freq_factor"]:
        raise ConfigError(
            "--rope-scaling llama3: high_freq_factor must be larger than low_freq_factor "
            f"(the ramp between them divides by the difference), got {params['high_freq_factor']:g}"
            f" and {params['low_freq_factor']:g}"
        )
    return RopeScaling(kind, params)


#: yarn's parameters where 0 stands for "derive it" (transformers' defaults).
_ZERO_IS_DEFAULT = frozenset({"attention_factor", "mscale", "mscale_all_dim"})


class RelativeBias(NamedTuple):
    """A ``--relative-bias`` as read: T5's bucket count, largest distance and direction."""

    buckets: int
    max_distance: int
    bidirectional: bool


def parse_relative_bias(text: str) -> RelativeBias:
    """``BUCKETS,MAX_DISTANCE`` (an encoder: both directions) or ``...,causal`` (a decoder).

    >>> parse_relative_bias("32,128")
    RelativeBias(buckets=32, max_distance=128, bidirectional=True)
    """
    from attntrace.units import bounded

    parts = [p.strip() for p in bounded(text, "--relative-bias", 256).split(",")]
    try:
        buckets, distance = int(parts[0]), int(parts[1])
    except (ValueError, IndexError):
        raise ConfigError(
            f"--relative-bias takes BUCKETS,MAX_DISTANCE[,causal], e.g. 32,128; got {text!r}"
        ) from None
    if buckets < 4 or buckets % 2 or distance < 2 or parts[2:] not in ([], ["causal"]):
        raise ConfigError(
            f"--relative-bias {text!r}: an even bucket count >= 4, a distance >= 2, "
            "optionally causal"
        )
    return RelativeBias(buckets, distance, not parts[2:])
