"""Markdown report, for CI artifacts and pull-request comments."""

from __future__ import annotations

from contrast_audit.api import AuditResult
from contrast_audit.report.common import (
    OVERLAP_TITLES,
    baseline_lines,
    calibration_line,
    clip,
    embedding_line,
    evidence_text,
    has_reference,
    locations,
    mapping_lines,
    top_findings,
    top_overlaps,
)


def _cell(text: str) -> str:
    return clip(text, 80).replace("|", "\\|")


def _place(at: str, row_id: str) -> str:
    """A row by ``file:line``, with its id where the id is not its row number."""
    line = at.rsplit(":", 1)[-1]
    return f"`{at}`" if not line.isdecimal() or row_id in (str(int(line) - 1), line) else f"`{at}` id `{row_id}`"


def render(result: AuditResult, *, top: int = 20, **_: object) -> str:
    c = result.counts()
    sev = c["by_severity"]
    out = [
        "# contrast-audit scan",
        "",
        *(f"- mapping: {line}" for line in mapping_lines(result)),
        *([f"- model: {line}"] if (line := embedding_line(result)) is not None else []),
        *([f"- pair evidence: {line}"] if (line := calibration_line(result)) is not None else []),
        *(f"- **warning**: {line}" for line in result.warnings),
        f"- comparison sets: {c['batches']} (batch size {result.config.plan.batch_size}, "
        f"world size {result.config.plan.world_size}; directions {', '.join(result.config.loss.directions)})",
        "",
        "| metric | value |",
        "|---|---:|",
        f"| rows | {c['rows']} |",
        f"| candidates compared | {c['candidates']} |",
        f"| false negatives | {c['findings']} |",
        f"| certain / likely / suspect | {sev['certain']} / {sev['likely']} / {sev['suspect']} |",
        f"| false-negative rate | {c['fn_rate']:.4%} |",
        f"| rows affected | {c['rows_affected']} |",
        f"| mislabelled hard negatives | {c['mislabelled_negatives']} |",
        *(
            [f"| overlaps with existing data | {c['overlaps']} |", f"| leaks of eval data | {c['leaks']} |"]
            if has_reference(result)
            else []
        ),
        "",
        *(f"- baseline: {line}" for line in baseline_lines(result)),
        *([""] if result.baseline_file is not None else []),
        "| evidence | findings |",
        "|---|---:|",
        *(f"| {k} | {n} |" for k, n in c["by_kind"].items()),
        "",
    ]
    for column in ("source", "cohort"):
        rows = result.breakdown(column)
        if len(rows) == 1 and rows[0][column] == "(none)":
            continue
        out += [
            f"## By {column}",
            "",
            f"| {column} | rows | candidates | findings | fn-rate | rows affected |",
            "|---|---:|---:|---:|---:|---:|",
        ]
        out += [
            f"| {_cell(r[column])} | {r['rows']} | {r['candidates']} | {r['findings']} | {r['fn_rate']:.4%} | {r['rows_affected']} |"
            for r in rows
        ]
        out.append("")
    if c["findings"]:
        shown = top_findings(result, top)
        out += [
            f"## Top {shown.height} of {c['findings']} findings",
            "",
            "| severity | batch | anchor | alleged negative | evidence |",
            "|---|---:|---|---|---|",
        ]
        anchors_at = locations(result, shown.get_column("anchor_row").to_numpy())
        candidates_at = locations(result, shown.get_column("cand_row").to_numpy())
        out += [
            f"| {r['severity']} | {r['batch']} | {_cell(r['anchor_text'])} ({_place(anchor_at, r['anchor_id'])}) | "
            f"{_cell(r['candidate_text'])} ({_place(cand_at, r['candidate_id'])} {r['candidate_role']}) | "
            f"{evidence_text(r['evidence'])} |"
            for r, anchor_at, cand_at in zip(shown.iter_rows(named=True), anchors_at, candidates_at, strict=True)
        ]
        out.append("")
    for target in ("eval", "existing"):
        total, shown = top_overlaps(result, target, top)
        if not total:
            continue
        out += [
            f"## {OVERLAP_TITLES[target]} ({len(shown)} of {total})",
            "",
            "| severity | new row | text | matched row | matched text | evidence |",
            "|---|---|---|---|---|---|",
        ]
        out += [
            f"| {r['severity']}{' (baseline)' if r['baseline'] else ''} | `{r['file']}:{r['line']}` {r['role']} | "
            f"{_cell(r['text'] or '')} | `{r['target_file']}:{r['target_line']}` {r['target_role']} | "
            f"{_cell(r['target_text'] or '')} | {evidence_text(r['evidence'])} |"
            for r in shown
        ]
        out.append("")
    return "\n".join(out) + "\n"
