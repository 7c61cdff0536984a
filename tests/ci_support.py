"""A small audited data set with every kind of located result, for the CI-facing formatters."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import polars as pl

from contrast_audit.api import OVERLAP_SCHEMA, AuditResult, audit
from contrast_audit.config import build_config

ROWS = [
    {"id": "a", "anchor": "reset password", "positive": "How to reset your password"},
    {"id": "b", "anchor": "forgot pw", "positive": "how to reset your password!"},
    {"id": "c", "anchor": "dark mode", "positive": "Enable dark mode in Settings"},
    {"id": "d", "anchor": "export invoices", "positive": "Billing → Export", "negative": "billing → export"},
    {"id": "e", "anchor": "what is 100% uptime, really?", "positive": "Uptime: the share of time, up"},
]


def write_rows(path: Path, rows: list[dict] = ROWS) -> Path:
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    return path


def lexical_result(path: Path) -> AuditResult:
    """Exact and linked evidence only (no model): findings a↔b, mislabelled negative of d."""
    return audit([str(path)], build_config({"embeddings": False, "minhash": False, "batch_size": 8}))


def overlaps_for(path: Path, eval_path: str = "eval/queries.jsonl") -> pl.DataFrame:
    """One eval leak (row e's anchor, with a comma and a colon in the evidence's file) and one
    overlap with existing data (row c's positive, already in the baseline)."""
    evidence = [{"kind": "embedding", "score": 0.97, "threshold": 0.825}]
    return pl.DataFrame(
        [
            {
                "row_id": "e",
                "file": str(path),
                "line": 5,
                "role": "anchor",
                "target": "eval",
                "target_id": "q17",
                "target_file": eval_path,
                "target_line": 17,
                "target_role": "anchor",
                "severity": "likely",
                "evidence": evidence,
                "baseline": False,
            },
            {
                "row_id": "c",
                "file": str(path),
                "line": 3,
                "role": "positive",
                "target": "existing",
                "target_id": "old-9",
                "target_file": "train/old.jsonl",
                "target_line": 9,
                "target_role": "positive",
                "severity": "certain",
                "evidence": [{"kind": "exact", "score": 1.0, "threshold": 1.0}],
                "baseline": True,
            },
        ],
        schema=OVERLAP_SCHEMA,
    )


def full_result(path: Path) -> AuditResult:
    """The lexical result with overlaps attached."""
    result = lexical_result(path)
    return dataclasses.replace(result, overlaps=overlaps_for(path))


def flag(result: AuditResult, *, findings: dict[str, list[bool]] | None = None, mislabelled=None) -> AuditResult:
    """Set the ``masked`` / ``baseline`` columns of findings and mislabelled negatives."""
    j = result.judgement
    f, m = j.findings, j.mislabelled
    for column, values in (findings or {}).items():
        f = f.with_columns(pl.Series(column, values, dtype=pl.Boolean))
    for column, values in (mislabelled or {}).items():
        m = m.with_columns(pl.Series(column, values, dtype=pl.Boolean))
    return dataclasses.replace(result, judgement=dataclasses.replace(j, findings=f, mislabelled=m))
