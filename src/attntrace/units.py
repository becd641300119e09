"""Every formatter and parser of sizes, counts, bytes, shapes and axes, in one place.

Renderers, commands and error messages write a figure the same way because they all call
these. Nothing here imports more than the standard library and :mod:`attntrace.errors`.

>>> format_bytes(432), format_count(1234567), format_shape((12, 3, 64)), format_axes(("h",))
('432 B', '1.23 M', '(12, 3, 64)', '(h,)')
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from attntrace.errors import ConfigError

#: A formula as terms ``(coefficient, "h·S·S·d")`` in axis letters (a step's FLOPs).
Terms = tuple[tuple[int, str], ...]
#: One size of a written shape: a number, or an axis letter (or product) the config resolves.
Dim = int | str

# --- the length of a value ---------------------------------------------------------------------

#: The longest number, size or rate an option takes (characters): 2**60 bytes has 19 digits.
MAX_NUMBER_CHARS = 64
#: The longest value of any other option (a shape, a list, a matrix, a target, --vs):
#: every parser refuses a longer one before it reads it.
MAX_VALUE_CHARS = 64 * 1024


def bounded(text: str, what: str, limit: int = MAX_VALUE_CHARS) -> str:
    """``text`` when it has at most ``limit`` characters; else one ConfigError naming
    ``what`` and the length, before any parsing (no parser's work grows past the limit).

    >>> bounded("512MiB", "--max-memory", MAX_NUMBER_CHARS)
    '512MiB'
    >>> bounded("9" * 100, "--max-memory", MAX_NUMBER_CHARS)
    Traceback (most recent call last):
    ...
    attntrace.errors.ConfigError: --max-memory '99999...' is 100 characters long; the most ...
    """
    if len(text) > limit:
        raise ConfigError(
            f"{what} {quoted(text)} is {len(text):,} characters long; the most it takes is "
            f"{limit:,}"
        )
    return text


def quoted(text: str, limit: int = 40) -> str:
    """``text`` quoted for an error message, cut after ``limit`` characters.

    >>> quoted("h,S,S"), quoted("1" * 50, 4)
    ("'h,S,S'", "'1111…'")
    """
    return repr(text) if len(text) <= limit else repr(text[:limit])[:-1] + "…'"


# --- bytes -------------------------------------------------------------------------------------

#: The largest size --max-memory takes (1 EiB): every byte count stays an exact integer.
MAX_BYTES = 2**60

#: The units :func:`parse_size` reads (lower case), in bytes.
_SIZE_UNITS = {
    "": 1,
    "b": 1,
    "k": 1000,
    "kb": 1000,
    "m": 1000**2,
    "mb": 1000**2,
    "g": 1000**3,
    "gb": 1000**3,
    "t": 1000**4,
    "tb": 1000**4,
    "kib": 1024,
    "mib": 1024**2,
    "gib": 1024**3,
    "tib": 1024**4,
    "pib": 1024**5,
}


def format_bytes(n: int | float) -> str:
    """Bytes in binary units.

    >>> format_bytes(4398046511104)
    '4.00 TiB'
    >>> format_bytes(432), format_bytes(1280000000000)
    ('432 B', '1.16 TiB')
    """
    if n < 1024:
        return f"{int(n)} B"
    value = float(n)
    for unit in ("KiB", "MiB", "GiB", "TiB", "PiB", "EiB"):
        value /= 1024
        if value < 1024 or unit == "EiB":
            break
    return f"{value:.2f} {unit}"


def parse_size(text: str) -> int:
    """A size like ``512MiB``, ``2G`` or ``1000000`` in bytes.

    >>> parse_size("1.5GiB"), parse_size("2k")
    (1610612736, 2000)
    """
    bounded(text, "the size", MAX_NUMBER_CHARS)
    match = re.fullmatch(r"\s*+(\d++(?:\.\d++)?|\.\d++)\s*+([a-zA-Z]*+)\s*+", text)
    unit = match.group(2).lower() if match else ""
    if not match or unit not in _SIZE_UNITS:
        raise ConfigError(
            f"cannot read the size {text[:40]!r}; write it like 512MiB, 8GiB or 2000000000"
        )
    size = float(match.group(1)) * _SIZE_UNITS[unit]
    if not size < MAX_BYTES:
        raise ConfigError(
            f"the size {text[:40]!r} is too large; the most is {format_bytes(MAX_BYTES)}"
        )
    return int(size)


#: SI prefixes of a rate (--peak-flops 989T, --bandwidth 3.35TB/s).
_RATE_PREFIXES = {"": 1.0, "k": 1e3, "m": 1e6, "g": 1e9, "t": 1e12, "p": 1e15}


def parse_rate(text: str, what: str, example: str) -> float:
    """A rate per second such as ``989e12``, ``989T``, ``989 TFLOP/s`` or ``3.35TB/s`` (SI
    prefixes, decimal); ``what`` names the option in the error, ``example`` shows one.

    >>> parse_rate("989T", "--peak-flops", "989T"), parse_rate("3.35 TB/s", "--bandwidth", "")
    (989000000000000.0, 3350000000000.0)
    >>> parse_rate("1.2e15", "--peak-flops", "989T")
    1200000000000000.0
    """
    bounded(text, what, MAX_NUMBER_CHARS)
    match = re.fullmatch(
        r"\s*+((?>\d++(?:\.\d++)?|\.\d++)(?>[eE][+-]?\d++)?)\s*+([kKmMgGtTpP]?)"
        r"(?:FLOPS?|B)?(?:/s)?\s*+",
        text,
        flags=re.IGNORECASE,
    )
    value = float(match.group(1)) * _RATE_PREFIXES[match.group(2).lower()] if match else 0.0
    if not match or not 0 < value < float("inf"):
        raise ConfigError(f"cannot read {what} {text[:40]!r}; write a rate like {example}")
    return value


def format_rate(value: float, unit: str) -> str:
    """A rate with an SI prefix: ``989 TFLOP/s``, ``3.35 TB/s``.

    >>> format_rate(989e12, "FLOP/s"), format_rate(3.35e12, "B/s"), format_rate(12.0, "B/s")
    ('989 TFLOP/s', '3.35 TB/s', '12 B/s')
    """
    for prefix, size in (("P", 1e15), ("T", 1e12), ("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if value >= size:
            return f"{value / size:.3g} {prefix}{unit}"
    return f"{value:.3g} {unit}"


# --- counts (FLOPs, MACs, parameters) ----------------------------------------------------------


def in_unit(flops: int | float, unit: str = "flops") -> float:
    """FLOPs in the unit the user asked for (``macs``: one multiply-add, half the FLOPs).

    >>> in_unit(10, "macs"), in_unit(10)
    (5.0, 10.0)
    """
    return flops / 2 if unit == "macs" else float(flops)


def exact_count(flops: int, unit: str = "flops") -> int | float:
    """FLOPs in ``unit`` without rounding, for documents: a whole number unless ``macs`` of an odd
    count (a lone add, e.g. a bias, is half a MAC).

    >>> exact_count(2**61 + 2, "macs"), exact_count(5, "macs"), exact_count(5)
    (1152921504606846977, 2.5, 5)
    """
    if unit != "macs":
        return flops
    return flops // 2 if flops % 2 == 0 else flops / 2


def format_count(n: float) -> str:
    """A count in SI units, short enough for a table: ``1.2 G``.

    >>> format_count(1234567), format_count(0), format_count(5.5e15)
    ('1.23 M', '0', '5.50 P')
    """
    if n < 1000:
        return f"{n:g}"
    for unit in ("k", "M", "G", "T", "P", "E"):
        n /= 1000
        if n < 1000 or unit == "E":
            break
    return f"{n:.2f} {unit}"


def format_terms(terms: Terms, count: str = "flops") -> str:
    """A formula from its terms; ``count="macs"`` halves every coefficient.

    >>> format_terms(((2, "h·S·S·d"),))
    '2·h·S·S·d'
    >>> format_terms(((2, "S·H·H"), (1, "S·H")), "macs")
    'S·H·H + 0.5·S·H'
    >>> format_terms(())
    '0'
    """
    parts = []
    for coef, letters in terms:
        c = coef / 2 if count == "macs" else coef
        text = f"{c:g}" if c != int(c) else str(int(c))
        parts.append(letters if text == "1" else f"{text}·{letters}" if letters else text)
    return " + ".join(parts) or "0"


# --- shapes and axes ---------------------------------------------------------------------------


def format_shape(shape: Sequence[int]) -> str:
    """A shape as a Python tuple.

    >>> format_shape((12, 3, 64)), format_shape((768,)), format_shape(())
    ('(12, 3, 64)', '(768,)', '()')
    """
    return str(tuple(shape))


def format_shape_x(shape: tuple[int, ...]) -> str:
    """A shape as ``12x3x3`` (CSV cells).

    >>> format_shape_x((12, 3, 3)), format_shape_x((768,))
    ('12x3x3', '768')
    """
    return "x".join(str(n) for n in shape)


def format_axes(axes: tuple[str, ...]) -> str:
    """Axis letters as a tuple.

    >>> format_axes(("h", "S", "d")), format_axes(("H",))
    ('(h, S, d)', '(H,)')
    """
    return "(" + ", ".join(axes) + ("," if len(axes) == 1 else "") + ")"


#: One size of a shape: a number, an axis letter, a product of them (``g·d``, ``g*d``, ``2·d``),
#: or a sum or difference of those (``N+1``, ``N+S``, ``W-1+S``: the keys of a --past step).
_FACTOR = r"(?>\d++|[A-Za-z]\w*+)"
#: A rank's share of an axis (--tp, --cp): ``h/T``, ``S/C``, ``S/2C``, ``S/CT``.
_SHARE = r"(?>[A-Za-z]\w*+/\d*+[A-Za-z]++)"
_ATOM = rf"(?>{_SHARE}|{_FACTOR})"
_PRODUCT = rf"{_ATOM}(?>\s*+[·*]\s*+{_ATOM})*+"
_DIM = re.compile(rf"{_PRODUCT}(?>\s*+[+-]\s*+{_PRODUCT})*+")


def parse_shape(text: str) -> tuple[Dim, ...]:
    """A shape written as ``12,3,3``, ``(12, 3, 3)``, ``[12, 3, 3]``, ``12x3x3`` or ``h,S,S``;
    a product of axes is written ``g·d`` or ``g*d``.

    >>> parse_shape("(12, 3, 64)"), parse_shape("12x3x3"), parse_shape("B, h, S, 3")
    ((12, 3, 64), (12, 3, 3), ('B', 'h', 'S', 3))
    >>> parse_shape("(768,)"), parse_shape("()"), parse_shape("S, g*d"), parse_shape("S,h·d")
    ((768,), (), ('S', 'g·d'), ('S', 'h·d'))
    >>> parse_shape("B,h,1,N + 1"), parse_shape("h/T, S/2C, d")
    (('B', 'h', 1, 'N+1'), ('h/T', 'S/2C', 'd'))
    """
    bounded(text, "the shape")
    body = text.strip().removeprefix("(").removesuffix(")")
    body = body.removeprefix("[").removesuffix("]").strip()
    by_x = "," not in body and re.fullmatch(r"\d++(?:x\d++)*+", body)
    dims = [p.strip() for p in body.split("x" if by_x else ",")]
    if dims and not dims[-1]:
        dims.pop()  # "(768,)"
    if any(not _DIM.fullmatch(d) for d in dims):
        raise ConfigError(
            f"cannot read the shape {quoted(text)}; write it like 12,3,3 or 12x3x3 or h,S,S or "
            "S,g*d"
        )
    if any(d.isdigit() and len(d.lstrip("0")) > 19 for d in dims):
        raise ConfigError(
            f"the shape {quoted(text)} has a size of more than 19 digits, larger than any tensor"
        )
    return tuple(
        int(d) if d.isdigit() else re.sub(r"\s*([+-])\s*", r"\1", re.sub(r"\s*[·*]\s*", "·", d))
        for d in dims
    )
