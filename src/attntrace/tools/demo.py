"""The worked example of the study notes (seeds/001): three tokens, Query, Key and Value given as
3×3 matrices, scores = Query @ Keyᵀ, softmax, output = weights @ Value. First exactly as the note
computes it (no scaling), then scaled by 1/√d (d = 3), as the Transformer paper does. The learner's
own matrices (``demo --query --key --value``: inline or .npy) take the notes' place.

Computed with the numpy backend's operations (its matmul, transpose, scale and its stable
softmax), the same ones ``attntrace run`` uses; nothing here is a second implementation.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from attntrace.backends import Source, get_backend
from attntrace.errors import ConfigError, InputFileError

if TYPE_CHECKING:
    import numpy as np

    from attntrace.files.declared import Declared
    from attntrace.learn import Lang

#: The note's matrices, row i belonging to token i.
QUERY = ((1, 0, 2), (2, 2, 2), (2, 1, 3))
KEY = ((0, 1, 1), (4, 4, 0), (2, 3, 1))
VALUE = ((1, 2, 3), (2, 8, 0), (2, 6, 3))
#: The most rows or columns a matrix of the walk-through has: every number is printed.
MAX_DEMO_SIZE = 32


@dataclass(frozen=True)
class Example:
    """Query (S, d), Key (N, d) and Value (N, dv) of one walk-through (the notes' by default).

    >>> Example().sizes
    {'S': 3, 'N': 3, 'd': 3, 'dv': 3}
    """

    query: tuple[tuple[float, ...], ...] = QUERY
    key: tuple[tuple[float, ...], ...] = KEY
    value: tuple[tuple[float, ...], ...] = VALUE

    @property
    def sizes(self) -> dict[str, int]:
        """S queries, N keys, d numbers per query and key, dv per value."""
        return {
            "S": len(self.query),
            "N": len(self.key),
            "d": len(self.query[0]),
            "dv": len(self.value[0]),
        }


def example_of(query: str | None, key: str | None, value: str | None) -> Example:
    """The example of ``demo --query --key --value`` (each inline, ``"1,0,2; 2,2,2"``, or a
    .npy file); a matrix not given is the notes'. The sizes must agree: Query (S, d), Key (N, d),
    Value (N, dv).

    >>> example_of("1,0; 0,1", "1,1; 0,2; 3,0", "1; 2; 3").sizes
    {'S': 2, 'N': 3, 'd': 2, 'dv': 1}
    >>> example_of("1,0; 0,1", None, None)
    Traceback (most recent call last):
    ...
    attntrace.errors.ConfigError: --query has 2 numbers per row and --key 3: a query and a key \
are multiplied number by number, so give them the same row length
    """
    given = {
        "query": QUERY if query is None else parse_matrix(query, "--query"),
        "key": KEY if key is None else parse_matrix(key, "--key"),
        "value": VALUE if value is None else parse_matrix(value, "--value"),
    }
    example = Example(**given)
    n = example.sizes
    if len(example.key[0]) != n["d"]:
        raise ConfigError(
            f"--query has {n['d']} numbers per row and --key {len(example.key[0])}: a query and "
            "a key are multiplied number by number, so give them the same row length"
        )
    if len(example.value) != n["N"]:
        raise ConfigError(
            f"--key has {n['N']} rows and --value {len(example.value)}: each key has its value, "
            "so give them the same number of rows"
        )
    return example


def parse_matrix(text: str, option: str) -> tuple[tuple[float, ...], ...]:
    """A matrix written inline (rows split by ``;``, numbers by ``,`` or spaces) or the path
    of a .npy file of one 2-D array.

    >>> parse_matrix("1,0,2; 2 2 2", "--query")
    ((1.0, 0.0, 2.0), (2.0, 2.0, 2.0))
    """
    from attntrace.units import bounded, quoted

    if bounded(text, option).strip().lower().endswith(".npy"):
        return _npy_matrix(text.strip(), option)
    rows = [row.replace(",", " ").split() for row in text.replace("\n", ";").split(";")]
    rows = [row for row in rows if row]
    try:
        matrix = tuple(tuple(float(x) for x in row) for row in rows)
    except ValueError:
        raise ConfigError(
            f"{option} {quoted(text)}: write numbers, rows split by ';' (e.g. '1,0,2; 2,2,2'), "
            "or the path of a .npy file"
        ) from None
    return _checked(matrix, option)


def _npy_matrix(path: str, option: str) -> tuple[tuple[float, ...], ...]:
    import numpy as np

    from attntrace.files.declared import check_npy

    try:
        declared = check_npy(Path(path))
    except InputFileError as exc:
        raise InputFileError(f"cannot read {option} {exc}") from None
    _fits_demo(declared, path, option)  # the header's shape, before a byte of the data
    try:
        loaded = np.load(path, allow_pickle=False)
    except InputFileError as exc:
        raise InputFileError(f"cannot read {option} {exc}") from None
    except (OSError, ValueError, EOFError) as exc:
        raise InputFileError(
            f"cannot read {option} {path}: {' '.join(str(exc).split())}; save it with numpy.save"
        ) from None
    if not isinstance(loaded, np.ndarray) or loaded.ndim != 2 or loaded.dtype.kind not in "iuf":
        raise InputFileError(f"{option} {path}: save one 2-D array of numbers with numpy.save")
    return _checked(tuple(tuple(float(x) for x in row) for row in loaded.tolist()), option)


def _fits_demo(declared: Declared, path: str, option: str) -> None:
    """Refuse a .npy whose header declares no 2-D array of numbers, or one larger than
    :data:`MAX_DEMO_SIZE` a side, before a byte of its data is read."""
    import numpy as np

    if len(declared.shape) != 2 or np.dtype(declared.dtype).kind not in "iuf":
        raise InputFileError(f"{option} {path}: save one 2-D array of numbers with numpy.save")
    if max(declared.shape) > MAX_DEMO_SIZE:
        raise ConfigError(
            f"{option} {path}: declares {declared.shape}; at most {MAX_DEMO_SIZE} rows and "
            "columns (every number is printed); attntrace run --values shows larger sizes"
        )


def _checked(matrix: tuple[tuple[float, ...], ...], option: str) -> tuple[tuple[float, ...], ...]:
    """``matrix`` if it is a finite, rectangular matrix of at most :data:`MAX_DEMO_SIZE` a side."""
    if not matrix or any(len(row) != len(matrix[0]) for row in matrix):
        lengths = sorted({len(row) for row in matrix})
        raise ConfigError(
            f"{option}: every row needs the same count of numbers (got {lengths or [0]})"
        )
    if max(len(matrix), len(matrix[0])) > MAX_DEMO_SIZE:
        raise ConfigError(
            f"{option}: at most {MAX_DEMO_SIZE} rows and columns (every number is printed); "
            "attntrace run --values shows larger sizes"
        )
    if not all(math.isfinite(x) for row in matrix for x in row):
        raise ConfigError(f"{option}: every number must be finite (no nan or inf)")
    return matrix


@dataclass(frozen=True)
class DemoStep:
    """One matrix of the worked example: its name, how it is computed, its values."""

    name: str
    op: str
    value: np.ndarray = field(repr=False)


def worked_example(
    scale: float | None = None, example: Example | None = None
) -> tuple[DemoStep, ...]:
    """Query, Key, Value, scores, (scaled,) weights and output of the note's example (or of
    ``example``).

    ``scale=None`` follows the note (no scaling); a number multiplies the scores first.

    >>> steps = {s.name: s.value for s in worked_example()}
    >>> steps["scores"].tolist()
    [[2.0, 4.0, 4.0], [4.0, 16.0, 12.0], [4.0, 12.0, 10.0]]
    >>> steps["output"].round(4).tolist()[1]
    [2.0, 7.964, 0.054]
    """
    be = get_backend("numpy")
    ex = example or Example()
    q, k, v = (be.tensor(_source(m)) for m in (ex.query, ex.key, ex.value))
    steps = [
        DemoStep("Query", "given", q),
        DemoStep("Key", "given", k),
        DemoStep("Value", "given", v),
    ]
    scores = be.matmul(q, be.transpose(k, -2, -1))
    steps.append(DemoStep("scores", "Query @ Key.T", scores))
    if scale is not None:
        scores = be.scale(scores, scale)
        steps.append(DemoStep("scaled", f"scores * {scale:.4g}", scores))
    weights = be.softmax(scores)
    steps.append(DemoStep("weights", f"softmax({steps[-1].name}, dim=-1)", weights))
    steps.append(DemoStep("output", "weights @ Value", be.matmul(weights, v)))
    return tuple(steps)


def sqrt_scale(example: Example | None = None) -> float:
    """1/√d for the example's d (3 in the notes')."""
    return 1.0 / math.sqrt((example or Example()).sizes["d"])


def scaling_effect(lang: Lang = "en", example: Example | None = None) -> list[str]:
    """What dividing by √d changed in the example, in sentences with its numbers.

    >>> print(scaling_effect()[0])
    Every score is divided by √d = √3 = 1.732; the order of the scores in a row stays the same.
    """
    from attntrace.learn import message

    ex = example or Example()
    plain = {s.name: s.value for s in worked_example(example=ex)}
    scaled = {s.name: s.value for s in worked_example(sqrt_scale(ex), ex)}
    d = ex.sizes["d"]
    top_plain, top_scaled = plain["weights"].max(axis=-1), scaled["weights"].max(axis=-1)
    changes = ", ".join(f"{a:.3f} → {b:.3f}" for a, b in zip(top_plain, top_scaled, strict=True))
    return [
        message("demo.divided", lang, d=d, sqrt_d=f"{math.sqrt(d):.3f}"),
        message("demo.peaked", lang, changes=changes),
        message("demo.why", lang),
    ]


def step_words(example: Example, lang: Lang = "en") -> dict[str, str]:
    """A sentence for each matrix of the walk-through, with the example's sizes.

    >>> print(step_words(Example())["scores"])
    Row i, column j: query i · key j, the similarity score: (3, 3) @ (3, 3) → (3, 3).
    """
    from attntrace.learn import message

    n = {**example.sizes, "factor": f"{sqrt_scale(example):.4f}"}
    names = ("Query", "Key", "Value", "scores", "scaled", "weights", "output")
    return {name: message(f"demo.{name}", lang, **n) for name in names}


def overflow_example(logit: float = 1000.0) -> tuple[np.ndarray, np.ndarray]:
    """Row [logit, logit]: the note's soft_max (exp overflows, inf / inf = nan) vs ours.

    >>> note, ours = overflow_example()
    >>> note.tolist(), ours.tolist()
    ([nan, nan], [0.5, 0.5])
    """
    import numpy as np

    z = np.array([logit, logit])
    with np.errstate(over="ignore", invalid="ignore"):
        t = np.exp(z)  # the note's soft_max, verbatim
        note: np.ndarray = np.exp(z) / np.expand_dims(np.sum(t, axis=-1), -1)
    ours: np.ndarray = get_backend("numpy").softmax(z)
    return note, ours


def _source(matrix: tuple[tuple[float, ...], ...]) -> Source:
    import numpy as np

    shape = (len(matrix), len(matrix[0]))
    return Source(shape, "float64", lambda: np.array(matrix, dtype=np.float64))
