"""JSON Schemas shipped with attntrace (package data, read with importlib.resources)."""

from __future__ import annotations

import json
from functools import cache
from importlib.resources import files
from typing import Any

#: The file name of the schema of ``attntrace run --format json`` / ``Trace.to_dict()``.
TRACE_SCHEMA_FILE = "trace-1.schema.json"


def trace_schema() -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) of the trace document ``attntrace.trace/1``.

    >>> trace_schema()["properties"]["schema"]["const"]
    'attntrace.trace/1'
    """
    return _schema(TRACE_SCHEMA_FILE)


#: The file name of the schema of ``attntrace run --backward --format json`` (version 2).
TRACE_SCHEMA_2_FILE = "trace-2.schema.json"


def trace_schema_2() -> dict[str, Any]:
    """The JSON Schema of the trace document with the backward, ``attntrace.trace/2``.

    >>> trace_schema_2()["properties"]["schema"]["const"]
    'attntrace.trace/2'
    """
    return _schema(TRACE_SCHEMA_2_FILE)


#: The file name of the schema of a rank's trace (``--tp``, ``--cp``; version 3).
TRACE_SCHEMA_3_FILE = "trace-3.schema.json"


def trace_schema_3() -> dict[str, Any]:
    """The JSON Schema of one rank's trace across devices, ``attntrace.trace/3``.

    >>> trace_schema_3()["properties"]["schema"]["const"]
    'attntrace.trace/3'
    """
    return _schema(TRACE_SCHEMA_3_FILE)


#: The file name of the schema of ``attntrace diff --format json`` / ``DiffReport.to_dict()``.
DIFF_SCHEMA_FILE = "diff-2.schema.json"


def diff_schema() -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) of the diff document ``attntrace.diff/2`` (``/1``, its
    keys all kept, is ``diff-1.schema.json`` beside it).

    >>> diff_schema()["properties"]["schema"]["const"]
    'attntrace.diff/2'
    """
    return _schema(DIFF_SCHEMA_FILE)


#: The file name of the schema of ``attntrace trace --format json`` / ``Capture.to_dict()``.
CAPTURE_SCHEMA_FILE = "capture-2.schema.json"


def capture_schema() -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) of the capture document ``attntrace.capture/2`` (``/1``,
    without ``kernels``, is ``capture-1.schema.json`` beside it).

    >>> capture_schema()["properties"]["schema"]["const"]
    'attntrace.capture/2'
    """
    return _schema(CAPTURE_SCHEMA_FILE)


#: The file name of the schema of ``attntrace trace --nproc N --format json``: every rank.
RANKS_SCHEMA_FILE = "ranks-1.schema.json"


def ranks_schema() -> dict[str, Any]:
    """The JSON Schema of the document of every rank, ``attntrace.ranks/1``.

    >>> ranks_schema()["properties"]["schema"]["const"]
    'attntrace.ranks/1'
    """
    return _schema(RANKS_SCHEMA_FILE)


@cache
def _schema(name: str) -> dict[str, Any]:
    """The shipped schema file ``name``, read once."""
    schema: dict[str, Any] = json.loads(files(__name__).joinpath(name).read_text(encoding="utf-8"))
    return schema


#: The file name of the schema of ``attntrace diff --nproc N --format json``.
RANK_DIFF_SCHEMA_FILE = "rank-diff-1.schema.json"


def rank_diff_schema() -> dict[str, Any]:
    """The JSON Schema of every rank's diff, ``attntrace.rank-diff/1``.

    >>> rank_diff_schema()["properties"]["schema"]["const"]
    'attntrace.rank-diff/1'
    """
    return _schema(RANK_DIFF_SCHEMA_FILE)
