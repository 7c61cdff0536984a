"""JSON report: stable key order and formatting, so the same inputs give the same bytes.

The three row lists (findings, mislabelled negatives, overlaps) are written ``ROWS_PER_SLICE`` rows
at a time from their frames (``report.stream``), so memory does not hold a Python object per
finding; the text is byte for byte ``json.dumps(result.report(), indent=2, ensure_ascii=False)``
(tested).
"""

from __future__ import annotations

from collections.abc import Iterator

import polars as pl

from contrast_audit.api import AuditResult
from contrast_audit.report.stream import placeholders, spliced

ROWS_PER_SLICE = 10_000


def render(result: AuditResult, **_: object) -> str:
    return "".join(chunks(result))


def chunks(result: AuditResult, **_: object) -> Iterator[str]:
    """The report's text in pieces: the head with each row list written slice by slice."""
    frames = result.report_rows()
    marks = placeholders(frames)
    return spliced(result.report(rows=marks), marks, {name: _slices(frame) for name, frame in frames.items()})


def _slices(frame: pl.DataFrame):
    return lambda: (frame.slice(lo, ROWS_PER_SLICE).to_dicts() for lo in range(0, frame.height, ROWS_PER_SLICE))
