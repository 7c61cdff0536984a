"""Formatters: one per output format, each ``render(result) -> str``."""

from __future__ import annotations

from collections.abc import Callable

from contrast_audit.api import AuditResult
from contrast_audit.report import html, json_format, markdown, sarif, text

FORMATTERS: dict[str, Callable[..., str]] = {
    "text": text.render,
    "json": json_format.render,
    "markdown": markdown.render,
    "html": html.render,
    "sarif": sarif.render,
}


def summary_line(result: AuditResult) -> str:
    """The one-sentence summary written to stderr."""
    c = result.counts()
    sev = c["by_severity"]
    return (
        f"contrast-audit: {c['rows']} rows, {c['batches']} batches, {c['candidates']} candidates compared: "
        f"{c['findings']} false negatives ({sev['certain']} certain, {sev['likely']} likely, "
        f"{sev['suspect']} suspect), fn-rate {c['fn_rate']:.4%}, {c['rows_affected']} rows affected, "
        f"{c['mislabelled_negatives']} mislabelled hard negatives"
        + (f"; {masked} masked by the manifest" if (masked := c["masked"]["findings"]) else "")
    )


__all__ = ["FORMATTERS", "summary_line"]
