"""Formatters: one per output format, each ``render(result) -> str``."""

from __future__ import annotations

from collections.abc import Callable

from contrast_audit.api import AuditResult
from contrast_audit.report import html, json_format, markdown, text

FORMATTERS: dict[str, Callable[..., str]] = {
    "text": text.render,
    "json": json_format.render,
    "markdown": markdown.render,
    "html": html.render,
}


def summary_line(result: AuditResult) -> str:
    """The one-sentence summary written to stderr."""
    c = result.counts()
    sev = c["by_severity"]
    ref = result.config.reference
    extra = (
        f", {c['overlaps']} overlaps with existing data, {c['leaks']} leaks of eval data"
        if ref.against or ref.eval
        else ""
    )
    if result.baseline_file is not None:
        new = c["new"]
        extra += (
            f"; new since the baseline: {new['findings']} false negatives, {new['mislabelled_negatives']} mislabelled,"
            f" {new['overlaps']} overlaps, {new['leaks']} leaks"
        )
    return (
        f"contrast-audit: {c['rows']} rows, {c['batches']} batches, {c['candidates']} candidates compared: "
        f"{c['findings']} false negatives ({sev['certain']} certain, {sev['likely']} likely, "
        f"{sev['suspect']} suspect), fn-rate {c['fn_rate']:.4%}, {c['rows_affected']} rows affected, "
        f"{c['mislabelled_negatives']} mislabelled hard negatives{extra}"
    )


__all__ = ["FORMATTERS", "summary_line"]
