"""Offending rows located at their file and line: the one table that the SARIF report, GitHub
annotations and the step summary read.

Each in-batch false negative is located at its anchor's row (the row whose training signal it
spoils; a symmetric finding is also reported from the other side), with the candidate's row as the
related location; with a baseline, a finding between an old anchor row and a new candidate row is
located at the new row, the one that brought it, with the anchor's row as the related location. A mislabelled hard negative is located at its own row; an overlap (``scan
--against/--eval``) at the new row, with the matched target row as the related location.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path, PurePath

import numpy as np
import polars as pl

from contrast_audit.api import AuditResult
from contrast_audit.corpus import ANCHOR_ROLE, POSITIVE_ROLE, role_codes


@dataclass(frozen=True)
class Rule:
    """One kind of result, as SARIF ``reportingDescriptor`` and annotation title."""

    id: str
    name: str
    title: str
    description: str
    level: str  # SARIF level: error or warning


RULES: tuple[Rule, ...] = (
    Rule(
        "false-negative-certain",
        "InBatchFalseNegativeCertain",
        "In-batch false negative (certain)",
        "Another row in the same batch is an exact or declared equivalent of what this anchor is trained towards "
        "(same text, same group or same anchor), yet the loss pushes it away as a negative.",
        "error",
    ),
    Rule(
        "false-negative-likely",
        "InBatchFalseNegativeLikely",
        "In-batch false negative (likely)",
        "Another row in the same batch is a near-duplicate (MinHash or embedding) of what this anchor is trained "
        "towards, yet the loss pushes it away as a negative.",
        "error",
    ),
    Rule(
        "false-negative-suspect",
        "InBatchFalseNegativeSuspect",
        "In-batch false negative (suspect)",
        "A candidate in the same batch scores within the margin of this anchor's own positive (margin rule only).",
        "warning",
    ),
    Rule(
        "mislabelled-negative",
        "MislabelledHardNegative",
        "Mislabelled hard negative",
        "A curated hard negative of this row is equivalent to the row's own anchor or positive.",
        "error",
    ),
    Rule(
        "overlap-existing",
        "OverlapWithExistingData",
        "Repeats existing training data",
        "A text of this new row repeats or paraphrases a row of the existing training data (an old row of the "
        "scanned data with --baseline or --since, or --against data).",
        "error",
    ),
    Rule(
        "eval-leak",
        "EvalLeak",
        "Evaluation data leak",
        "A text of this new row copies or paraphrases a row of an evaluation set (--eval): train/eval contamination.",
        "error",
    ),
)
RULE_INDEX = {rule.id: i for i, rule in enumerate(RULES)}
RULE_BY_ID = {rule.id: rule for rule in RULES}
# Which results come first when only some can be shown: leaks, then repeats of old rows (a repeated row
# also meets its original in batches; "repeats line 6" says it first), then the surest findings.
PRIORITY = {
    "eval-leak": 0,
    "overlap-existing": 1,
    "false-negative-certain": 2,
    "mislabelled-negative": 3,
    "false-negative-likely": 4,
    "false-negative-suspect": 5,
}

EVIDENCE = pl.List(pl.Struct({"kind": pl.String, "score": pl.Float64, "threshold": pl.Float64}))
SCHEMA = {
    "rule": pl.String,
    "severity": pl.String,
    "file": pl.String,
    "line": pl.Int64,
    "row_id": pl.String,
    "role": pl.String,
    "text": pl.String,
    "other_file": pl.String,
    "other_line": pl.Int64,
    "other_id": pl.String,
    "other_role": pl.String,
    "other_text": pl.String,  # null when the matched text is not known (overlap targets)
    "batch": pl.Int64,  # in-batch findings only
    "epoch": pl.Int64,
    "direction": pl.String,
    "target": pl.String,  # overlaps only: existing or eval
    "evidence": EVIDENCE,
    "baseline": pl.Boolean,
    "masked": pl.Boolean,
    "priority": pl.Int64,
}


def display_path(path: str | None, root: Path | None = None) -> str | None:
    """``path`` relative to ``root`` with ``/`` separators; unchanged when it lies outside ``root``.
    The default root is ``$GITHUB_WORKSPACE`` (the checkout, to which GitHub resolves annotation and
    SARIF paths) when set, else the working directory."""
    if path is None:
        return None
    base = (root or Path(os.environ.get("GITHUB_WORKSPACE") or Path.cwd())).resolve()
    full = Path(path)
    full = full if full.is_absolute() else Path.cwd() / full  # a relative path is relative to the cwd
    try:
        rel = os.path.relpath(full.resolve(), base)
    except ValueError:  # another drive on Windows
        return PurePath(path).as_posix()
    if rel == os.pardir or rel.startswith(os.pardir + os.sep):
        return PurePath(full).as_posix()
    return PurePath(rel).as_posix()


def has_lines(path: str | None) -> bool:
    """Text formats locate rows by physical line; Parquet rows only by number."""
    return path is not None and PurePath(path).suffix.lower() not in (".parquet", ".pq")


def _findings(result: AuditResult) -> pl.DataFrame:
    """Findings at their anchor's row; with a baseline, one whose anchor's row is old and whose candidate's
    row is new sits at the candidate's row (``at_candidate``), the row that brought it."""
    f = result.findings
    if f.height == 0:
        return pl.DataFrame(schema=SCHEMA)
    rows = result.corpus.rows
    anchor = f.get_column("anchor_row").to_numpy()
    cand = f.get_column("cand_row").to_numpy()
    roles = f.get_column("cand_role").to_numpy()
    new = result.new_rows
    flip = (~new[anchor] & new[cand]) if new is not None else np.zeros(f.height, dtype=bool)
    sides = pl.DataFrame(
        {
            "a_file": rows.get_column("file").gather(anchor),
            "a_line": rows.get_column("line").gather(anchor),
            "a_id": rows.get_column("id").gather(anchor),
            "a_role": np.full(f.height, ANCHOR_ROLE, dtype=np.int64),
            "a_text": result.corpus.spelling(anchor, np.full(f.height, ANCHOR_ROLE)),
            "c_file": rows.get_column("file").gather(cand),
            "c_line": rows.get_column("line").gather(cand),
            "c_id": rows.get_column("id").gather(cand),
            "c_role": roles.astype(np.int64),
            "c_text": result.corpus.spelling(cand, roles),
            "flip": flip,
        }
    )

    def side(here: str, there: str, name: str) -> pl.Expr:
        return pl.when(pl.col("flip")).then(pl.col(f"{there}_{name}")).otherwise(pl.col(f"{here}_{name}"))

    located_sides = sides.select(
        *(side("a", "c", k).alias(out) for k, out in (("file", "file"), ("line", "line"), ("id", "row_id"))),
        side("a", "c", "role").alias("role_code"),
        side("a", "c", "text").alias("text"),
        *(side("c", "a", k).alias(f"other_{k}") for k in ("file", "line", "id", "text")),
        side("c", "a", "role").alias("other_role_code"),
        pl.col("flip").alias("at_candidate"),
    )
    return pl.DataFrame(
        {
            "rule": "false-negative-" + f.get_column("severity").cast(pl.String),
            "severity": f.get_column("severity").cast(pl.String),
            "positive_text": result.corpus.spelling(anchor, np.full(f.height, POSITIVE_ROLE)),
            "batch": f.get_column("batch"),
            "epoch": f.get_column("epoch"),
            "direction": f.get_column("direction"),
            "evidence": f.get_column("evidence"),
            "baseline": f.get_column("baseline"),
            "masked": f.get_column("masked"),
        }
    ).hstack(located_sides)


def _mislabelled(result: AuditResult) -> pl.DataFrame:
    m = result.mislabelled
    rows = result.corpus.rows
    row = m.get_column("anchor_row").to_numpy()
    roles = m.get_column("cand_role").to_numpy()
    return pl.DataFrame(
        {
            "rule": pl.Series(["mislabelled-negative"] * m.height, dtype=pl.String),
            "severity": m.get_column("severity").cast(pl.String),
            "file": rows.get_column("file").gather(row),
            "line": rows.get_column("line").gather(row),
            "row_id": rows.get_column("id").gather(row),
            "role": pl.Series([f"negative_{r}" for r in roles.tolist()], dtype=pl.String),
            "text": result.corpus.spelling(row, roles),
            "other_file": rows.get_column("file").gather(row),
            "other_line": rows.get_column("line").gather(row),
            "other_id": rows.get_column("id").gather(row),
            "other_role": pl.Series(["positive"] * m.height, dtype=pl.String),
            "other_text": result.corpus.spelling(row, np.full(m.height, POSITIVE_ROLE)),
            "evidence": m.get_column("evidence"),
            "baseline": m.get_column("baseline"),
            "masked": m.get_column("masked"),
        },
        schema_overrides={"evidence": EVIDENCE},
    )


def _overlaps(result: AuditResult) -> pl.DataFrame:
    o = result.overlaps
    if o.height == 0:
        return pl.DataFrame(schema=SCHEMA)
    index = result.corpus.rows.select("id", pl.int_range(pl.len(), dtype=pl.Int64).alias("_row"))
    joined = o.join(index, left_on="row_id", right_on="id", how="left", maintain_order="left")
    row = joined.get_column("_row")
    known = row.is_not_null().to_numpy()
    texts = pl.Series([None] * o.height, dtype=pl.String)
    if known.any():
        idx = row.fill_null(0).to_numpy()
        spelled = result.corpus.spelling(idx, role_codes(joined.get_column("role")))
        texts = pl.Series(np.where(known, spelled.to_numpy(), None), dtype=pl.String)
    other_text = pl.Series([None] * o.height, dtype=pl.String)
    found = result.overlap_texts  # the scan's texts of both sides, row for row with the overlaps
    if found is not None and found.height == o.height and {"text", "target_text"} <= set(found.columns):
        texts = found.get_column("text").cast(pl.String).fill_null(texts)
        other_text = found.get_column("target_text").cast(pl.String)
    masked = joined.get_column("masked") if "masked" in joined.columns else pl.Series([False] * o.height)
    return pl.DataFrame(
        {
            "rule": joined.get_column("target").replace_strict(
                {"eval": "eval-leak", "existing": "overlap-existing"}, return_dtype=pl.String
            ),
            "severity": joined.get_column("severity").cast(pl.String),
            "file": joined.get_column("file"),
            "line": joined.get_column("line"),
            "row_id": joined.get_column("row_id"),
            "role": joined.get_column("role"),
            "text": texts,
            "other_file": joined.get_column("target_file"),
            "other_line": joined.get_column("target_line"),
            "other_id": joined.get_column("target_id"),
            "other_role": joined.get_column("target_role"),
            "other_text": other_text,
            "target": joined.get_column("target"),
            "evidence": joined.get_column("evidence"),
            "baseline": joined.get_column("baseline").fill_null(False),
            "masked": masked.cast(pl.Boolean).fill_null(False),
        },
        schema_overrides={"evidence": EVIDENCE},
    )


def located(result: AuditResult) -> pl.DataFrame:
    """Every finding, mislabelled negative and overlap as one located result (``SCHEMA`` plus, for
    findings, ``positive_text`` and ``at_candidate``), ordered by kind priority, then file, line and ids."""
    frames = []
    findings = _findings(result)
    if findings.height:
        findings = findings.with_columns(
            *(
                pl.col(f"{name}_code")
                .replace_strict(
                    {ANCHOR_ROLE: "anchor", POSITIVE_ROLE: "positive"}, default=None, return_dtype=pl.String
                )
                .fill_null(pl.format("negative_{}", pl.col(f"{name}_code")))
                .alias(name)
                for name in ("role", "other_role")
            )
        ).drop("role_code", "other_role_code")
        frames.append(findings)
    frames.append(_mislabelled(result))
    frames.append(_overlaps(result))
    schema = {**SCHEMA, "positive_text": pl.String, "at_candidate": pl.Boolean}
    aligned = [
        f.with_columns(*(pl.lit(None, dtype).alias(name) for name, dtype in schema.items() if name not in f.columns))
        .with_columns(pl.col("rule").replace_strict(PRIORITY, return_dtype=pl.Int64).alias("priority"))
        .select([pl.col(name).cast(dtype) for name, dtype in schema.items()])
        for f in frames
        if f.height
    ]
    if not aligned:
        return pl.DataFrame(schema=schema)
    return pl.concat(aligned).sort(
        ["priority", "file", "line", "row_id", "other_id", "batch", "direction"], nulls_last=True, maintain_order=True
    )


def counts(table: pl.DataFrame) -> dict[str, dict[str, int]]:
    """Per rule: ``total`` = ``new`` (neither baseline nor masked) + ``baseline`` (not masked) + ``masked``."""
    out = {rule.id: {"total": 0, "new": 0, "baseline": 0, "masked": 0} for rule in RULES}
    if table.height:
        agg = table.group_by("rule").agg(
            pl.len().alias("total"),
            (~pl.col("baseline") & ~pl.col("masked")).sum().alias("new"),
            (pl.col("baseline") & ~pl.col("masked")).sum().alias("baseline"),
            pl.col("masked").sum().alias("masked"),
        )
        for r in agg.iter_rows(named=True):
            out[r["rule"]] = {k: int(r[k]) for k in ("total", "new", "baseline", "masked")}
    return out


def new_only(table: pl.DataFrame) -> pl.DataFrame:
    """Results that count: neither in the baseline nor masked by the manifest."""
    return table.filter(~pl.col("baseline") & ~pl.col("masked"))


def where(file: str | None, line: int | None, root: Path | None = None) -> str:
    """``file:line`` for text formats, ``file: row N`` for Parquet."""
    path = display_path(file, root) or "?"
    if line is None:
        return path
    return f"{path}:{line}" if has_lines(file) else f"{path}: row {line}"


def row_name(
    file: str | None, line: int | None, row_id: str | None, here: str | None = None, root: Path | None = None
) -> str:
    """A row as a reviewer names it: ``line 114`` of the annotated file, ``line 7 of eval/q.jsonl`` elsewhere,
    ``row 3 of x.parquet`` in Parquet, with its id when the id is not just its row number."""
    shown = display_path(file, root) or "?"
    if line is None:
        place = f"row {row_id} of {shown}"
    else:
        place = f"line {line}" if has_lines(file) else f"row {line}"
        if file != here:
            place += f" of {shown}"
    if row_id is not None and line is not None and row_id not in (str(line - 1), str(line)):
        place += f" (id {row_id})"
    return place


__all__ = [
    "row_name",
    "RULES",
    "RULE_BY_ID",
    "RULE_INDEX",
    "Rule",
    "counts",
    "display_path",
    "has_lines",
    "located",
    "new_only",
    "where",
]
