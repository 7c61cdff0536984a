"""Terminal report with rich: headline numbers, breakdowns by source and cohort, and the top
findings with their texts side by side."""

from __future__ import annotations

import io
import os
import shutil

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from contrast_audit.api import AuditResult
from contrast_audit.report.common import (
    MARGIN_LEGEND,
    OVERLAP_TITLES,
    baseline_lines,
    calibration_line,
    clip,
    embedding_line,
    evidence_text,
    has_margin,
    has_reference,
    locations,
    mapping_lines,
    mislabelled_rows,
    plan_line,
    plural,
    top_findings,
    top_overlaps,
)

SEVERITY_STYLE = {"certain": "bold red", "likely": "yellow", "suspect": "cyan"}


FILE_WIDTH = 160  # a report written to a file or a pipe, unless $COLUMNS says otherwise


def report_width(terminal: bool) -> int:
    """$COLUMNS when set, else the terminal's width on a terminal, else ``FILE_WIDTH``; never below 60."""
    fallback = shutil.get_terminal_size((FILE_WIDTH, 24)).columns if terminal else FILE_WIDTH
    try:
        columns = int(os.environ.get("COLUMNS", ""))
    except ValueError:
        columns = fallback
    return max(60, columns)


def render(result: AuditResult, *, top: int = 20, color: bool = False, width: int | None = None, **_: object) -> str:
    buffer = io.StringIO()
    width = width or report_width(terminal=color)
    console = Console(file=buffer, force_terminal=color, no_color=not color, width=width, highlight=False)
    c = result.counts()
    text_width = min(50, max(20, (width - 40) // 3))  # the three text columns share what the others leave

    console.print("[bold]contrast-audit scan[/bold]")
    for line in mapping_lines(result):
        console.print(f"  mapping  {line}", markup=False)
    console.print(f"  plan     {plan_line(result)}", markup=False)
    if (line := embedding_line(result)) is not None:
        console.print(f"  model    {line}", markup=False)
    if (line := calibration_line(result)) is not None:
        console.print(f"  pairs    {line}", markup=False)
    if c["skipped_rows"]:
        console.print(f"  skipped  {plural(c['skipped_rows'], 'bad row')} (see the JSON report for each location)")
    for line in result.warnings:
        console.print(f"  warning  {line}", markup=False)

    summary = Table(title="Summary", show_header=False, title_justify="left")
    summary.add_column("metric")
    summary.add_column("value", justify="right")
    for label, value in (
        ("rows", c["rows"]),
        ("distinct texts", c["texts"]),
        ("batches", c["batches"]),
        ("candidates compared", c["candidates"]),
        ("false negatives", c["findings"]),
        ("  certain", c["by_severity"]["certain"]),
        ("  likely", c["by_severity"]["likely"]),
        ("  suspect", c["by_severity"]["suspect"]),
        ("false-negative rate", f"{c['fn_rate']:.4%}"),
        ("rows affected", c["rows_affected"]),
        ("mislabelled hard negatives", c["mislabelled_negatives"]),
        *(
            (("overlaps with existing data", c["overlaps"]), ("leaks of eval data", c["leaks"]))
            if has_reference(result)
            else ()
        ),
    ):
        summary.add_row(label, str(value))
    console.print(summary)
    for line in baseline_lines(result):
        console.print(f"  baseline {line}", markup=False)

    kinds = Table(title="Findings by evidence", title_justify="left")
    kinds.add_column("kind")
    kinds.add_column("findings", justify="right")
    for kind, n in c["by_kind"].items():
        kinds.add_row(kind, str(n))
    console.print(kinds)

    for column in ("source", "cohort"):
        rows = result.breakdown(column)
        if len(rows) == 1 and rows[0][column] == "(none)":
            continue
        table = Table(title=f"By {column}", title_justify="left")
        for name in (
            column,
            "rows",
            "candidates",
            "findings",
            "certain",
            "likely",
            "suspect",
            "fn-rate",
            "rows affected",
        ):
            table.add_column(name, justify="left" if name == column else "right")
        for r in rows:
            table.add_row(
                escape(r[column]),
                str(r["rows"]),
                str(r["candidates"]),
                str(r["findings"]),
                str(r["certain"]),
                str(r["likely"]),
                str(r["suspect"]),
                f"{r['fn_rate']:.4%}",
                str(r["rows_affected"]),
            )
        console.print(table)

    margins = False
    if c["findings"]:
        shown = top_findings(result, top)
        anchors_at = locations(result, shown.get_column("anchor_row").to_numpy())
        candidates_at = locations(result, shown.get_column("cand_row").to_numpy())
        title = f"Top {shown.height} of {plural(c['findings'], 'finding')}"
        table = Table(title=title, title_justify="left")
        for name in ("severity", "batch", "anchor", "its positive", "alleged negative", "evidence"):
            table.add_column(name, overflow="fold")
        for r, anchor_at, cand_at in zip(shown.iter_rows(named=True), anchors_at, candidates_at, strict=True):
            sev = r["severity"]
            table.add_row(
                f"[{SEVERITY_STYLE[sev]}]{sev}[/]",
                str(r["batch"]),
                f"{escape(clip(r['anchor_text'], text_width))}\n[dim]{escape(anchor_at)} id {escape(str(r['anchor_id']))}[/dim]",
                escape(clip(r["positive_text"], text_width)),
                f"{escape(clip(r['candidate_text'], text_width))}\n[dim]{escape(cand_at)} id {escape(str(r['candidate_id']))} "
                f"{escape(str(r['candidate_role']))} · {escape(str(r['direction']))}[/dim]",
                evidence_text(r["evidence"]),
            )
        console.print(table)
        margins = has_margin(shown.get_column("evidence").to_list())

    if c["mislabelled_negatives"]:
        title = f"Mislabelled hard negatives ({c['mislabelled_negatives']:,})"
        table = Table(title=title, title_justify="left")
        for name in ("severity", "row", "anchor", "positive", "hard negative", "evidence"):
            table.add_column(name, overflow="fold")
        rows = mislabelled_rows(result, top)
        at = locations(result, result.active_mislabelled.head(top).get_column("anchor_row").to_numpy())
        for r, where in zip(rows, at, strict=True):
            table.add_row(
                f"[{SEVERITY_STYLE[r['severity']]}]{r['severity']}[/]",
                f"{escape(where)}\n[dim]id {escape(r['row_id'])}[/dim]",
                escape(clip(r["anchor_text"], text_width)),
                escape(clip(r["positive_text"], text_width)),
                escape(clip(r["negative_text"], text_width)) + f"\n[dim]{r['negative']}[/dim]",
                evidence_text(r["evidence"]),
            )
        console.print(table)
        margins = margins or has_margin([r["evidence"] for r in rows])
    if margins:
        console.print(MARGIN_LEGEND, markup=False, style="dim")
    for target in ("eval", "existing"):
        total, shown = top_overlaps(result, target, top)
        if not total:
            continue
        table = Table(title=f"{OVERLAP_TITLES[target]} ({len(shown)} of {total})", title_justify="left")
        for name in ("severity", "new row", "text", "matched row", "matched text", "evidence"):
            table.add_column(name, overflow="fold")
        for r in shown:
            sev = r["severity"]
            mark = " [dim](baseline)[/dim]" if r["baseline"] else ""
            table.add_row(
                f"[{SEVERITY_STYLE[sev]}]{sev}[/]{mark}",
                escape(f"{r['file']}:{r['line']}") + f"\n[dim]{escape(str(r['row_id']))} {escape(r['role'])}[/dim]",
                escape(clip(r["text"] or "", 50)),
                escape(f"{r['target_file']}:{r['target_line']}")
                + f"\n[dim]{escape(str(r['target_id']))} {escape(r['target_role'])}[/dim]",
                escape(clip(r["target_text"] or "", 50)),
                evidence_text(r["evidence"]),
            )
        console.print(table)
    return buffer.getvalue()
