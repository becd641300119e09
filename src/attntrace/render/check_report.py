"""Check results for CI: a JSON document, JUnit XML, and GitHub Actions annotations.

One JUnit testcase per check (``expect scores=h,S,S``, ``step x`` of a golden …), grouped in
one testsuite per config; a config that could not be checked is one testcase with an <error>.
"""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from attntrace.text import plain
from attntrace.tools.check import CaseResult, Mismatch

REPORT_SCHEMA = "attntrace.check/1"


@dataclass(frozen=True)
class Outcome:
    """One check of one config, as a CI report lists it."""

    config: str
    check: str
    status: str  # passed, failed or error
    message: str = ""
    line: int = 0
    step: str = ""  # check --trace: the variable of your code the check read
    location: str = ""  # and its file:line


def outcomes(results: Sequence[CaseResult]) -> list[Outcome]:
    """Every check of every config in order; an errored config is one outcome named ``config``.

    >>> [o.status for o in outcomes([CaseResult("a", 1, (), checks=("expect x=3,768",))])]
    ['passed']
    """
    out = []
    for r in results:
        if r.error:
            out.append(Outcome(r.name, "config", "error", r.error, r.lines.get("", 0)))
            continue
        failed: dict[str, list[Mismatch]] = {}
        for m in r.mismatches:
            failed.setdefault(m.subject or m.what, []).append(m)
        for check in [*r.checks, *(f for f in failed if f not in r.checks)]:
            line = r.lines.get(check, r.lines.get("", 0))
            text = "; ".join(
                f"{m.what}: expected {m.expected}, got {m.actual}" for m in failed.get(check, [])
            )
            step, location = r.targets.get(check, ("", ""))
            status = "failed" if check in failed else "passed"
            if location and status == "failed":
                text += f" (checked {step} at {location})"
            out.append(Outcome(r.name, check, status, text, line, step, location))
    return out


def render_json_report(results: Sequence[CaseResult], spec: Path | None = None) -> str:
    """The results as one JSON document (schema ``attntrace.check/1``), ending in a newline.

    >>> doc = json.loads(render_json_report([CaseResult("a", 1, (), checks=("expect x=3,768",))]))
    >>> doc["summary"], doc["checks"][0]["status"]
    ({'configs': 1, 'passed': 1, 'failed': 0, 'errors': 0, 'checks': 1}, 'passed')
    """
    items = outcomes(results)
    doc = {
        "schema": REPORT_SCHEMA,
        "spec": str(spec) if spec is not None else None,
        "summary": {
            "configs": len(results),
            "passed": sum(r.ok for r in results),
            "failed": sum(not r.ok and not r.error for r in results),
            "errors": sum(bool(r.error) for r in results),
            "checks": len(items),
        },
        "configs": [
            {
                "name": r.name,
                "status": _status(r),
                "checks": r.checked,
                "error": r.error or None,
                "notes": list(r.notes),
                "line": r.lines.get("") or None,
            }
            for r in results
        ],
        "checks": [
            {
                "config": o.config,
                "check": o.check,
                "status": o.status,
                "message": o.message or None,
                "line": o.line or None,
                "step": o.step or None,
                "location": o.location or None,
            }
            for o in items
        ],
    }
    return json.dumps(doc, indent=2) + "\n"


def _status(r: CaseResult) -> str:
    return "error" if r.error else "passed" if r.ok else "failed"


def render_junit(results: Sequence[CaseResult], spec: Path | None = None) -> str:
    """The results as JUnit XML: <testsuites> of one <testsuite> per config, one <testcase> per
    check, <failure> or <error> with the message (the format CI systems read).

    >>> xml = render_junit([CaseResult("a", 1, (), checks=("expect x=3,768",))])
    >>> ET.fromstring(xml).find("testsuite/testcase").get("name")
    'expect x=3,768'
    """
    items = outcomes(results)
    root = ET.Element(
        "testsuites",
        name="attntrace check",
        tests=str(len(items)),
        failures=str(sum(o.status == "failed" for o in items)),
        errors=str(sum(o.status == "error" for o in items)),
        time="0",
    )
    for r in results:
        mine = [o for o in items if o.config == r.name]
        suite = ET.SubElement(
            root,
            "testsuite",
            name=_xml(r.name),
            tests=str(len(mine)),
            failures=str(sum(o.status == "failed" for o in mine)),
            errors=str(sum(o.status == "error" for o in mine)),
            skipped="0",
            time="0",
        )
        if spec is not None:
            suite.set("file", _xml(str(spec)))
        for o in mine:
            _testcase(suite, o, spec)
    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"


def _testcase(suite: ET.Element, o: Outcome, spec: Path | None) -> None:
    """One check; a failure or error says where in the spec (``shapes.toml:7``): the readers of
    JUnit XML take no file or line on a testcase."""
    case = ET.SubElement(
        suite,
        "testcase",
        name=_xml(o.check),
        classname=_xml(f"attntrace.tools.check.{o.config}"),
        time="0",
    )
    if o.status != "passed":
        tag, kind = ("failure", "ShapeMismatch") if o.status == "failed" else ("error", "SpecError")
        where = f"{spec}:{o.line}: " if spec is not None and o.line else ""
        ET.SubElement(case, tag, message=_xml(o.message), type=kind).text = _xml(where + o.message)


def _xml(text: str) -> str:
    """Text XML 1.0 can hold: control characters escaped as Python writes them."""
    return plain(text)


def github_annotations(results: Sequence[CaseResult], spec: Path | None = None) -> list[str]:
    """``::error file=…,line=…,title=…::message`` workflow commands for every failed or
    errored check, pointing at the spec line (GitHub shows them on the file and in the run summary).

    >>> r = CaseResult("a", 1, (Mismatch("scores", "(1,)", "(2,)", "expect scores=1"),),
    ...                checks=("expect scores=1",), lines={"": 1, "expect scores=1": 3})
    >>> github_annotations([r], Path("shapes.toml"))
    ... # doctest: +NORMALIZE_WHITESPACE
    ['::error file=shapes.toml,line=3,title=attntrace check a::expect scores=1:
      scores: expected (1,), got (2,)']
    """
    out = []
    for o in outcomes(results):
        if o.status == "passed":
            continue
        where = (
            f"file={_property(str(spec))}" + (f",line={o.line}" if o.line else "") + ","
            if spec is not None
            else ""
        )
        out.append(
            f"::error {where}title={_property(f'attntrace check {o.config}')}"
            f"::{_data(f'{o.check}: {o.message}')}"
        )
    return out


def _data(text: str) -> str:
    """A workflow command's message, escaped as the runner reads it (%, CR, LF)."""
    return plain(text).replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _property(text: str) -> str:
    """A workflow command's property (file, title): also : and , escaped."""
    return _data(text).replace(":", "%3A").replace(",", "%2C")
