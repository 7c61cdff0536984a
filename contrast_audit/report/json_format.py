"""JSON report: stable key order and formatting, so the same inputs give the same bytes.

The three row lists (findings, mislabelled negatives, overlaps) are written ``ROWS_PER_SLICE`` rows
at a time from their frames, so memory does not hold a Python object per finding; the text is
byte for byte ``json.dumps(result.report(), indent=2, ensure_ascii=False)`` (tested).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator

import polars as pl

from contrast_audit.api import AuditResult

ROWS_PER_SLICE = 10_000


def render(result: AuditResult, **_: object) -> str:
    return "".join(chunks(result))


def chunks(result: AuditResult) -> Iterator[str]:
    """The report's text in pieces: the head with each row list written slice by slice."""
    frames = result.report_rows()
    tag = uuid.uuid4().hex
    marks = {name: f"\x00{tag}:{name}\x00" for name in frames}
    text = json.dumps(result.report(rows=marks), indent=2, ensure_ascii=False) + "\n"
    order = sorted(frames, key=lambda name: text.index(json.dumps(marks[name])))
    for name in order:
        before, text = text.split(json.dumps(marks[name]), 1)
        yield before
        yield from _rows(frames[name])
    yield text


def _rows(frame: pl.DataFrame) -> Iterator[str]:
    """A list of row objects at depth 1 of the report, as ``json.dumps(..., indent=2)`` nests it."""
    if frame.height == 0:
        yield "[]"
        return
    yield "[\n"
    for lo in range(0, frame.height, ROWS_PER_SLICE):
        rows = frame.slice(lo, ROWS_PER_SLICE).to_dicts()
        text = ",\n".join(
            "    " + json.dumps(row, indent=2, ensure_ascii=False).replace("\n", "\n    ") for row in rows
        )
        yield text if lo == 0 else ",\n" + text
    yield "\n  ]"
