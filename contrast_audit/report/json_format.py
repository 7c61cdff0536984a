"""JSON report: stable key order and formatting, so the same inputs give the same bytes.

The four row lists (findings, mislabelled negatives, overlaps, the rows' content hashes) are written
``ROWS_PER_SLICE`` rows at a time from their frames (``report.stream``), so memory does not hold a Python object per
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
    lists = {name: _slices(frame, plain=name == "row_hashes") for name, frame in frames.items()}
    return spliced(result.report(rows=marks), marks, lists)


def _slices(frame: pl.DataFrame, *, plain: bool = False):
    """A frame's rows a slice at a time: objects, or (``plain``, one column) bare values."""

    def part(lo: int) -> list:
        piece = frame.slice(lo, ROWS_PER_SLICE)
        return piece.to_series().to_list() if plain else piece.to_dicts()

    return lambda: (part(lo) for lo in range(0, frame.height, ROWS_PER_SLICE))
