"""Formatters: one per output format, each ``render(result) -> str``; the formats whose reports grow
with the findings (JSON, SARIF) also write theirs in pieces (``pieces``)."""

from __future__ import annotations

from collections.abc import Callable, Iterable

from contrast_audit.api import AuditResult
from contrast_audit.report import html, json_format, markdown, sarif, text
from contrast_audit.report.common import plural

FORMATTERS: dict[str, Callable[..., str]] = {
    "text": text.render,
    "json": json_format.render,
    "markdown": markdown.render,
    "html": html.render,
    "sarif": sarif.render,
}
STREAMS: dict[str, Callable[..., Iterable[str]]] = {"json": json_format.chunks, "sarif": sarif.chunks}


def pieces(fmt: str, result: AuditResult, **options: object) -> Iterable[str]:
    """The report in ``fmt`` as pieces of text to write one after the other (the same text as
    ``FORMATTERS[fmt]``): JSON and SARIF a slice of rows at a time, the others whole."""
    if fmt in STREAMS:
        return STREAMS[fmt](result, **options)
    return (FORMATTERS[fmt](result, **options),)


def summary_line(result: AuditResult) -> str:
    """The one-sentence summary written to stderr."""
    c = result.counts()
    sev = c["by_severity"]
    ref = result.config.reference
    extra = (
        f", {c['overlaps']} overlaps with existing data, {c['leaks']} leaks of eval data"
        if ref.against or ref.eval or "repeats" in result.overlap_info
        else ""
    )
    scope, compared = "", "compared"
    if result.baseline_file is not None:
        old = c["in_baseline"]
        scope, compared = " new since the baseline", "with a new row compared"
        extra += (
            f"; in the baseline (not counted): {old['findings']:,} false negatives, "
            f"{old['mislabelled_negatives']:,} mislabelled, {old['overlaps']:,} overlaps, {old['leaks']:,} leaks"
        )
    return (
        f"contrast-audit: {plural(c['rows'], 'row')}, {plural(c['batches'], 'batch', 'batches')}, "
        f"{plural(c['candidates'], 'candidate')} {compared}: "
        f"{plural(c['findings'], 'false negative')}{scope} ({sev['certain']:,} certain, {sev['likely']:,} likely, "
        f"{sev['suspect']:,} suspect), fn-rate {c['fn_rate']:.4%}, "
        f"{plural(c['rows_affected'], 'row')} affected, "
        f"{plural(c['mislabelled_negatives'], 'mislabelled hard negative')}{extra}"
        + (f"; {masked:,} masked by the manifest" if (masked := c["masked"]["findings"]) else "")
    )


__all__ = ["FORMATTERS", "STREAMS", "pieces", "summary_line"]
