"""``--baseline REPORT.json``: what an earlier JSON report already showed is marked ``baseline`` and
left out of the gate, so an old dataset can adopt the gate and fail only on what is new.

Items are matched by row ids and texts, never by batch numbers (a changed file re-plans every
batch): a finding by anchor id, candidate id, candidate role and the normalised-text hashes of the
anchor and the candidate; a mislabelled negative by row id, negative slot and the two texts'
hashes; an overlap by row id, role, target kind, target id, target role and the two texts' hashes.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import polars as pl

from contrast_audit.errors import InputError

FINDING_KEY = ("anchor_id", "candidate_id", "candidate_role", "anchor_text_hash", "candidate_text_hash")
MISLABELLED_KEY = ("row_id", "negative", "anchor_text_hash", "negative_text_hash")
OVERLAP_KEY = ("row_id", "role", "target", "target_id", "target_role", "text_hash", "target_text_hash")
SECTIONS = {"findings": FINDING_KEY, "mislabelled_negatives": MISLABELLED_KEY, "overlaps": OVERLAP_KEY}


@dataclass(frozen=True)
class Baseline:
    """The keys of an earlier report's findings, mislabelled negatives and overlaps."""

    path: str
    findings: pl.DataFrame
    mislabelled: pl.DataFrame
    overlaps: pl.DataFrame

    def mark(self, frame: pl.DataFrame, section: str) -> pl.Series:
        """``baseline`` flags for ``frame`` (which holds ``section``'s key columns)."""
        keys = SECTIONS[section]
        stored = {"findings": self.findings, "mislabelled_negatives": self.mislabelled, "overlaps": self.overlaps}[
            section
        ]
        if frame.height == 0:
            return pl.Series("baseline", [], dtype=pl.Boolean)
        flagged = (
            frame.select(keys)
            .with_row_index("_i")
            .join(stored.with_columns(pl.lit(True).alias("_hit")), on=list(keys), how="left", nulls_equal=True)
            .unique("_i", keep="first")
            .sort("_i")
        )
        return flagged.get_column("_hit").fill_null(False).alias("baseline")


def read_baseline(path: str | Path, schema_version: str) -> Baseline:
    """Read a JSON report written by ``scan --format json``; exit 2 when it is not one of this
    schema version."""
    where = str(path)
    fix = "regenerate it: contrast-audit scan ... --format json --output baseline.json"
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise InputError(where, "baseline report not found", fix="check the --baseline path") from None
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise InputError(where, f"baseline is not a readable JSON report ({exc})", fix=fix) from None
    if not isinstance(data, dict) or "schema_version" not in data:
        raise InputError(where, "baseline is not a contrast-audit JSON report (no schema_version)", fix=fix)
    if str(data["schema_version"]) != schema_version:
        raise InputError(
            where,
            f"baseline report has schema version {data['schema_version']!r}; this version reads {schema_version!r}",
            fix=fix,
        )
    frames = {section: _keys(where, data.get(section, []), section, keys) for section, keys in SECTIONS.items()}
    return Baseline(where, frames["findings"], frames["mislabelled_negatives"], frames["overlaps"])


def _keys(where: str, items: Any, section: str, keys: tuple[str, ...]) -> pl.DataFrame:
    schema = {k: pl.String for k in keys}
    if not isinstance(items, list):
        raise InputError(where, f"baseline '{section}' is not a list", fix="pass a JSON report written by scan")
    rows = []
    for number, item in enumerate(items):
        if not isinstance(item, dict) or any(k not in item for k in keys):
            missing = [k for k in keys if not isinstance(item, dict) or k not in item]
            raise InputError(
                where,
                f"baseline '{section}' item {number} lacks {', '.join(missing)}",
                fix="pass a JSON report written by this version of contrast-audit scan",
            )
        rows.append({k: None if item[k] is None else str(item[k]) for k in keys})
    return pl.DataFrame(rows, schema=schema).unique()


__all__ = ["FINDING_KEY", "MISLABELLED_KEY", "OVERLAP_KEY", "Baseline", "read_baseline"]
