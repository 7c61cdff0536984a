"""GitHub Actions outputs: workflow-command annotations on the offending rows, and the markdown
step summary appended to ``$GITHUB_STEP_SUMMARY``.

Annotations go to stderr: the runner reads workflow commands from both streams, and stdout may
carry the report itself (``--format json`` must stay parseable). Only rows with results that count
are annotated (not those in the baseline, not those masked by the manifest), one annotation per row,
most important first:
eval leaks, repeats of existing rows (overlaps), certain findings, mislabelled negatives, likely findings,
suspects; at most ``max_annotations``, then one ``::notice::`` saying how many more there are.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import polars as pl

from contrast_audit.api import AuditResult
from contrast_audit.errors import AuditError, ConfigError
from contrast_audit.gate import GateResult
from contrast_audit.report.common import SCOPE, clip, evidence_text, plural
from contrast_audit.report.located import (
    RULE_BY_ID,
    RULES,
    counts,
    display_path,
    has_lines,
    located,
    new_only,
    row_name,
    where,
)
from contrast_audit.report.sarif import message

DEFAULT_MAX_ANNOTATIONS = 50
ANNOTATION_MODES = ("auto", "github", "none")
LEVEL_COMMAND = {"error": "error", "warning": "warning", "note": "notice"}


class StepSummaryError(AuditError):
    """The step summary file cannot be written."""


def escape_data(value: str) -> str:
    """A workflow command's message (actions/toolkit ``escapeData``)."""
    return value.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def escape_property(value: str) -> str:
    """A workflow command's property value (actions/toolkit ``escapeProperty``)."""
    return escape_data(value).replace(":", "%3A").replace(",", "%2C")


def command(name: str, message_text: str, **properties: Any) -> str:
    """``::name key=value,...::message`` with both parts escaped; ``None`` properties are left out."""
    props = ",".join(f"{k}={escape_property(str(v))}" for k, v in properties.items() if v is not None)
    return f"::{name}{' ' + props if props else ''}::{escape_data(message_text)}"


def annotations_enabled(mode: str, environ: Mapping[str, str] | None = None) -> bool:
    """``github`` on, ``none`` off, ``auto`` on when running under GitHub Actions."""
    if mode not in ANNOTATION_MODES:
        raise ConfigError(f"--annotations must be one of {', '.join(ANNOTATION_MODES)}, got {mode!r}")
    if mode == "auto":
        env = os.environ if environ is None else environ
        return env.get("GITHUB_ACTIONS") == "true"
    return mode == "github"


def annotations(
    result: AuditResult, *, max_annotations: int = DEFAULT_MAX_ANNOTATIONS, root: Path | None = None
) -> list[str]:
    """Workflow-command lines for the rows whose results count, one per row (its most important result;
    the message says how many more the row has), at most ``max_annotations`` of them and a closing
    notice of how many rows were left out."""
    if max_annotations < 0:
        raise ConfigError(f"--max-annotations must be >= 0, got {max_annotations}")
    table = new_only(located(result)).sort(
        ["priority", "file", "line", "row_id", "other_id"], nulls_last=True, maintain_order=True
    )
    # One annotation per offending row: a row meets several rows, in several batches, through several texts.
    row = ["file", "line", "row_id"]
    table = table.with_columns(pl.len().over(row).alias("_results"))
    rules = (
        table.group_by([*row, "rule"], maintain_order=True)
        .agg(pl.len().alias("_n"))
        .group_by(row, maintain_order=True)
        .agg(pl.struct("rule", "_n").alias("_rules"))
    )
    firsts = table.unique(row, keep="first", maintain_order=True).join(
        rules, on=row, how="left", nulls_equal=True, maintain_order="left"
    )
    lines = []
    for r in firsts.head(max_annotations).iter_rows(named=True):
        rule = RULE_BY_ID[r["rule"]]
        text = message(r, root)
        if r["_results"] > 1:
            kinds = ", ".join(
                f"{k['_n'] - (k['rule'] == r['rule'])} × {RULE_BY_ID[k['rule']].title.lower()}"
                for k in r["_rules"]
                if k["_n"] - (k["rule"] == r["rule"])
            )
            more = r["_results"] - 1
            text += f" This row has {more} more result{'s' if more != 1 else ''} ({kinds}); the reports list each."
        lines.append(
            command(
                LEVEL_COMMAND[rule.level],
                text,
                file=display_path(r["file"], root),
                line=r["line"] if has_lines(r["file"]) else None,
                title=f"contrast-audit: {rule.title}",
            )
        )
    if firsts.height > max_annotations:
        more = firsts.height - max_annotations
        lines.append(
            command(
                "notice",
                f"contrast-audit: {more} more offending row{'s' if more != 1 else ''} not annotated "
                f"(--max-annotations {max_annotations}); the reports list every one.",
            )
        )
    return lines


def _cell(text: str | None, width: int = 120) -> str:
    return clip(text or "", width).replace("|", "\\|")


def step_summary(result: AuditResult, gate: GateResult | None = None, *, top: int = 10) -> str:
    """The markdown summary for ``$GITHUB_STEP_SUMMARY``: the gate verdict with its conditions, then the
    new repeats, leaks and findings with their texts, each row named by ``file:line``, then the counts
    (new vs baseline) of the kinds that occur."""
    table = located(result)
    per_rule = counts(table)
    c = result.counts()
    out = ["## contrast-audit scan", ""]
    if gate is not None and gate.checked:
        verdict = "passed ✅" if gate.passed else "**FAILED** ❌"
        out += [f"Gate: {verdict}", "", "| condition | value | result |", "|---|---:|---|"]
        for cond, value in gate.checked:
            verdict = "FAILED" if (cond, value) in gate.failed else "passed"
            out.append(f"| `{cond}` | {value:g} | {verdict} |")
        out.append("")
    else:
        out += ["Gate: no `--fail-on` conditions (the scan reports only).", ""]
    fresh = new_only(table)
    fresh = fresh.unique(["rule", "file", "line", "role", "other_file", "other_id", "other_role"], keep="first").sort(
        ["priority", "file", "line", "row_id", "other_id"], nulls_last=True, maintain_order=True
    )
    leaks = fresh.filter(pl.col("rule").is_in(["eval-leak", "overlap-existing"]))
    if leaks.height:
        out += _table_head("New repeats and leaks", top, leaks.height, ("kind", "row", "text", "repeats", "evidence"))
        for r in leaks.head(top).iter_rows(named=True):
            target = _cell(row_name(r["other_file"], r["other_line"], r["other_id"], r["file"]))
            if r["other_role"]:
                target += f" ({r['other_role']})"
            if r["other_text"]:
                target += f": {_cell(r['other_text'])}"
            out.append(
                f"| {RULE_BY_ID[r['rule']].title} | {_cell(where(r['file'], r['line']))} ({r['role']}) | "
                f"{_cell(r['text'])} | {target} | {evidence_text(r['evidence'] or [])} |"
            )
        out.append("")
    findings = fresh.filter(~pl.col("rule").is_in(["eval-leak", "overlap-existing"]))
    if findings.height:
        columns = ("kind", "row", "its positive", "alleged negative", "evidence")
        out += _table_head("New findings", top, findings.height, columns)
        for r in findings.head(top).iter_rows(named=True):
            if r["rule"] == "mislabelled-negative":  # the row's own hard negative against its positive
                positive, negative, of = r["other_text"], r["text"], f"this row's {r['role']}"
            elif r["at_candidate"]:  # a new row, the negative of an old anchor row
                positive, negative, of = r["positive_text"], r["text"], f"this row's {r['role']}"
            else:
                other = row_name(r["other_file"], r["other_line"], r["other_id"], r["file"])
                positive, negative, of = r["positive_text"], r["other_text"], f"{other}, {r['other_role']}"
            out.append(
                f"| {RULE_BY_ID[r['rule']].title} | {_cell(where(r['file'], r['line']))} | "
                f"{_cell(positive)} | {_cell(negative)} ({_cell(of)}) | {evidence_text(r['evidence'] or [])} |"
            )
        out.append("")
    if not leaks.height and not findings.height:
        out += ["Nothing new counts.", ""]
    out += [
        f"{plural(c['rows'], 'row')}, {plural(c['batches'], 'batch', 'batches')}, "
        f"{plural(c['candidates'], 'candidate')} {'with a new row ' if result.baseline_file else ''}compared; "
        f"false-negative rate {c['fn_rate']:.4%}.",
        "",
        *([f"Baseline `{result.baseline_file}`: {SCOPE}.", ""] if result.baseline_file is not None else []),
    ]
    occurring = [rule for rule in RULES if per_rule[rule.id]["total"]]
    if occurring:
        out += ["| result | new | baseline | masked | total |", "|---|---:|---:|---:|---:|"]
        for rule in occurring:
            n = per_rule[rule.id]
            out.append(f"| {rule.title} | {n['new']} | {n['baseline']} | {n['masked']} | {n['total']} |")
        out.append("")
    return "\n".join(out) + "\n"


def _table_head(title: str, top: int, total: int, columns: tuple[str, ...]) -> list[str]:
    """A section heading saying how many of how many rows follow, then a markdown table head."""
    return [
        f"### {title} ({min(top, total)} of {total})",
        "",
        "| " + " | ".join(columns) + " |",
        "|" + "---|" * len(columns),
    ]


def append_step_summary(path: str | os.PathLike[str], text: str) -> None:
    """Append ``text`` to the step summary file (never truncating what earlier steps wrote)."""
    try:
        with open(path, "a", encoding="utf-8") as handle:
            handle.write(text)
    except OSError as exc:
        raise StepSummaryError(
            f"{path}: cannot append the step summary ({exc.strerror or exc})",
            fix="check $GITHUB_STEP_SUMMARY, or unset it to skip the summary",
        ) from exc


__all__ = [
    "ANNOTATION_MODES",
    "DEFAULT_MAX_ANNOTATIONS",
    "StepSummaryError",
    "annotations",
    "annotations_enabled",
    "append_step_summary",
    "command",
    "escape_data",
    "escape_property",
    "step_summary",
]
