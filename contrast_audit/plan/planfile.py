"""Plan files: JSON Lines, one batch per line, ``{"rows": [id, ...]}``.

Lines without ``rows`` are headers and are skipped, so a manifest is a plan too. Every batch
belongs to epoch 0 unless the line carries an ``epoch``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from contrast_audit.errors import InputError
from contrast_audit.plan.batches import Plan


def json_records(path: str, *, what: str, fix: str) -> Iterator[tuple[int, Any]]:
    """Each non-blank line of a UTF-8 JSON Lines file as (line number, parsed value); a missing file, bad
    encoding or bad JSON is an ``InputError`` located at its line. ``what`` names the file in messages."""
    file = Path(path)
    if not file.is_file():
        raise InputError(path, f"{what} not found", fix=f"check the path of the {what}")
    try:
        text = file.read_text(encoding="utf-8-sig")
    except UnicodeDecodeError as exc:
        raise InputError(path, "is not UTF-8 text", fix=fix) from exc
    # Split on \n only: str.splitlines also breaks at U+2028, U+0085 and others that JSON
    # strings may hold unescaped.
    for number, line in enumerate(text.split("\n"), start=1):
        if not line.strip():
            continue
        try:
            yield number, json.loads(line)
        except json.JSONDecodeError as exc:
            raise InputError(path, f"is not valid JSON ({exc.msg})", line=number, fix=fix) from exc
        except RecursionError as exc:
            raise InputError(path, "is nested too deeply", line=number, fix=fix) from exc
        except ValueError as exc:  # an integer beyond Python's 4,300-digit conversion limit
            raise InputError(
                path, "holds an integer of more than 4,300 digits, which is no row id or position", line=number, fix=fix
            ) from exc


def read_plan_file(path: str, ids: pl.Series) -> Plan:
    """Read a plan; ``ids`` are the rows' ids in row order."""
    index = {value: i for i, value in enumerate(ids.to_list())}
    batches: list[np.ndarray] = []
    epochs: list[int] = []
    for number, record in json_records(path, what="plan file", fix='write one {"rows": [...]} object per line'):
        if not isinstance(record, dict) or "rows" not in record:
            continue
        members = record["rows"]
        if not isinstance(members, list):
            raise InputError(path, "'rows' must be a list of row ids", line=number, fix='write {"rows": [id, ...]}')
        if not members:
            raise InputError(path, "batch is empty", line=number, fix="drop the line or add row ids")
        keys = [str(m) if not isinstance(m, str) else m for m in members]
        unknown = [k for k in keys if k not in index]
        if unknown:
            shown = ", ".join(repr(u) for u in unknown[:3])
            raise InputError(
                path,
                f"unknown row id(s) {shown}{' …' if len(unknown) > 3 else ''}",
                line=number,
                fix="ids come from the id column (--id), or are 0-based row numbers when there is none",
            )
        rows = np.fromiter((index[k] for k in keys), dtype=np.int64, count=len(keys))
        if np.unique(rows).shape[0] != rows.shape[0]:
            seen: set[str] = set()
            twice = next(k for k in keys if k in seen or seen.add(k))
            raise InputError(
                path, f"row id {twice!r} appears twice in one batch", line=number, fix="list each row once per batch"
            )
        epoch = record.get("epoch", 0)
        if not isinstance(epoch, int) or isinstance(epoch, bool) or not 0 <= epoch < 100_000:
            raise InputError(
                path, "'epoch' must be an integer in [0, 99,999]", line=number, fix="fix or drop the epoch field"
            )
        batches.append(rows)
        epochs.append(epoch)
    if not batches:
        raise InputError(
            path, "holds no batches (no line with 'rows')", fix='write one {"rows": [id, ...]} object per line'
        )
    return Plan.from_batches(batches, epochs, f"file:{path}")
