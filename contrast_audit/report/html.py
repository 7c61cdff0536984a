"""HTML report: one self-contained page (inline CSS, plots as inline SVG images; no scripts, nothing
fetched, a Content-Security-Policy that forbids any request) for CI artifacts and browsers. Every piece of data is escaped. The same inputs give the same bytes, except that the
model line counts how many vectors came from the embedding cache (as in the JSON report)."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence
from html import escape
from typing import Any

from contrast_audit._version import __version__
from contrast_audit.api import AuditResult
from contrast_audit.report.common import (
    OVERLAP_TITLES,
    baseline_lines,
    embedding_line,
    evidence_text,
    has_reference,
    location,
    locations,
    mapping_lines,
    mislabelled_rows,
    plan_line,
    top_findings,
    top_overlaps,
)

SHORT = 280  # characters of a text shown before it folds into <details>
_CONTROL = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")  # not allowed in HTML text, even escaped

STYLE = """
:root { color-scheme: light dark; --line: #8884; --muted: #888; }
body { font: 14px/1.45 system-ui, sans-serif; margin: 2rem auto; max-width: 90rem; padding: 0 1rem; }
h1 { font-size: 1.4rem; margin-bottom: .2rem; } h2 { font-size: 1.1rem; margin-top: 2rem; }
.verdict { font-size: 1.15rem; margin: .4rem 0; } .failed { color: #c22; }
p.summary { font-size: 1rem; }
dl { display: grid; grid-template-columns: max-content 1fr; gap: .1rem 1rem; }
dt { color: var(--muted); } dd { margin: 0; }
table { border-collapse: collapse; margin: .5rem 0; }
th, td { border-bottom: 1px solid var(--line); padding: .3rem .6rem; text-align: left; vertical-align: top; }
th { font-weight: 600; } td.n { text-align: right; font-variant-numeric: tabular-nums; }
table.texts td { max-width: 28rem; overflow-wrap: anywhere; white-space: pre-wrap; }
.id { color: var(--muted); font-size: .85em; display: block; }
.sev { border-radius: .3rem; padding: .05rem .4rem; font-weight: 600; white-space: nowrap; }
.certain { background: #d32f2f; color: #fff; } .likely { background: #f9a825; color: #000; }
.suspect { background: #4fc3f7; color: #000; }
.base { border: 1px solid var(--muted); color: var(--muted); border-radius: .3rem; padding: 0 .3rem; font-size: .85em; white-space: nowrap; }
code { font-size: .9em; }
footer { margin-top: 2rem; color: var(--muted); font-size: .85em; }
.plots { display: flex; flex-wrap: wrap; gap: 1rem; }
figure.plot { margin: 0; max-width: 44rem; }
figure.plot img { width: 100%; height: auto; background: #fff; border-radius: .3rem; }
figure.plot figcaption, p.note { color: var(--muted); font-size: .9em; }
""".strip()
# Nothing may leave the page: no scripts, no fetches; images only as inline data URIs.
CSP = "default-src 'none'; style-src 'unsafe-inline'; img-src data:"


def _safe(value: Any) -> str:
    """Data as HTML text: escaped, with control characters (invalid in HTML) as U+FFFD."""
    return escape(_CONTROL.sub("\ufffd", str(value)))


def _text(value: str) -> str:
    """A data text; a long one folds into <details>: its opening as the summary, the rest inside."""
    if len(value) <= SHORT:
        return _safe(value)
    return f"<details><summary>{_safe(value[:SHORT])}…</summary>…{_safe(value[SHORT:])}</details>"


def _id(value: Any, *extra: str) -> str:
    return f'<span class="id">{_safe(" ".join([str(value), *extra]))}</span>'


def _severity(value: str, baseline: bool = False) -> str:
    """A severity badge; a result the baseline holds is marked as such (it does not count)."""
    mark = ' <span class="base" title="in the baseline: not counted">baseline</span>' if baseline else ""
    return f'<span class="sev {escape(value)}">{escape(value)}</span>{mark}'


def _table(header: Sequence[str], rows: Iterable[Sequence[str]], *, numeric: Sequence[int] = (), cls: str = "") -> str:
    """A table from cells that are already HTML; ``numeric`` columns are right-aligned."""
    head = "".join(f"<th>{escape(h)}</th>" for h in header)
    body = "".join(
        "<tr>"
        + "".join(f'<td class="n">{c}</td>' if i in numeric else f"<td>{c}</td>" for i, c in enumerate(r))
        + "</tr>"
        for r in rows
    )
    attr = f' class="{cls}"' if cls else ""
    return f"<table{attr}><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _setting(value: Any) -> str:
    return _safe(value if isinstance(value, str) else json.dumps(value, ensure_ascii=False))


def _plots(result: AuditResult) -> list[str]:
    """The plots section: each plot an inline SVG image, or a note saying why it is missing."""
    from contrast_audit.report.plots import plots

    out = ["<h2>Plots</h2>", '<div class="plots">']
    for plot in plots(result):
        if plot.svg is None:
            out.append(
                f'<figure class="plot" id="plot-{plot.key}"><figcaption><b>{escape(plot.title)}</b></figcaption>'
                f'<p class="note">{_safe(plot.caption)}</p></figure>'
            )
        else:
            out.append(
                f'<figure class="plot" id="plot-{plot.key}"><figcaption><b>{escape(plot.title)}</b></figcaption>'
                f'<img alt="{escape(plot.title)}" src="{plot.data_uri()}">'
                f"<figcaption>{_safe(plot.caption)}</figcaption></figure>"
            )
    out.append("</div>")
    return out


def _verdict(gate: Any) -> list[str]:
    """The gate's verdict and its conditions, when the scan ran one."""
    if gate is None or not gate.checked:
        return []
    rows = [
        (f"<code>{escape(str(cond))}</code>", f"{value:g}", "FAILED" if (cond, value) in gate.failed else "passed")
        for cond, value in gate.checked
    ]
    verdict = '<strong class="failed">FAILED</strong>' if not gate.passed else "passed"
    return [f'<p class="verdict">Gate: {verdict}</p>', _table(["condition", "value", "result"], rows, numeric=[1])]


def render(result: AuditResult, *, top: int = 20, gate: Any = None, **_: object) -> str:
    from contrast_audit.report import summary_line  # the stderr sentence, as the page's headline

    c = result.counts()
    sev = c["by_severity"]
    about = [("mapping", line) for line in mapping_lines(result)]
    about.append(("plan", plan_line(result)))
    if (line := embedding_line(result)) is not None:
        about.append(("model", line))
    if result.config_file:
        about.append(("settings", result.config_file))
    if c["skipped_rows"]:
        about.append(("skipped", f"{c['skipped_rows']} bad rows (the JSON report lists each location)"))
    about += [("warning", line) for line in result.warnings]
    about += [("baseline", line) for line in baseline_lines(result)]
    out = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f'<meta http-equiv="Content-Security-Policy" content="{CSP}">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        "<title>contrast-audit scan</title>",
        f"<style>\n{STYLE}\n</style></head><body>",
        "<h1>contrast-audit scan</h1>",
        *_verdict(gate),
        f'<p class="summary">{_safe(summary_line(result).removeprefix("contrast-audit: "))}</p>',
    ]
    head, out = out, []
    out += [
        "<dl>" + "".join(f"<dt>{escape(k)}</dt><dd>{_safe(v)}</dd>" for k, v in about) + "</dl>",
        "<h2>Summary</h2>",
        _table(
            ["metric", "value"],
            [
                ("rows", str(c["rows"])),
                ("distinct texts", str(c["texts"])),
                ("comparison sets", str(c["batches"])),
                ("candidates compared", str(c["candidates"])),
                ("false negatives", str(c["findings"])),
                (_severity("certain"), str(sev["certain"])),
                (_severity("likely"), str(sev["likely"])),
                (_severity("suspect"), str(sev["suspect"])),
                ("false-negative rate", f"{c['fn_rate']:.4%}"),
                ("rows affected", str(c["rows_affected"])),
                ("mislabelled hard negatives", str(c["mislabelled_negatives"])),
                *(
                    (("overlaps with existing data", str(c["overlaps"])), ("leaks of eval data", str(c["leaks"])))
                    if has_reference(result) or result.overlaps.height
                    else ()
                ),
            ],
            numeric=[1],
        ),
        "<h2>Findings by evidence</h2>",
        _table(["evidence", "findings"], [(escape(k), str(n)) for k, n in c["by_kind"].items()], numeric=[1]),
        *_plots(result),
    ]
    for column in ("source", "cohort"):
        rows = result.breakdown(column)
        if len(rows) == 1 and rows[0][column] == "(none)":
            continue
        out.append(f"<h2>By {escape(column)}</h2>")
        out.append(
            _table(
                [column, "rows", "candidates", "findings", "certain", "likely", "suspect", "fn-rate", "rows affected"],
                [
                    (
                        _safe(r[column]),
                        *(str(r[k]) for k in ("rows", "candidates", "findings", "certain", "likely", "suspect")),
                        f"{r['fn_rate']:.4%}",
                        str(r["rows_affected"]),
                    )
                    for r in rows
                ],
                numeric=range(1, 9),
            )
        )
    results: list[str] = []
    for target in ("eval", "existing"):
        total, overlaps = top_overlaps(result, target, top)
        if not total:
            continue
        counted = c["leaks" if target == "eval" else "overlaps"]
        results.append(
            f"<h2>{escape(OVERLAP_TITLES[target])} ({len(overlaps)} of {total}: {counted} new, "
            f"{total - counted} in the baseline)</h2>"
        )
        results.append(
            _table(
                ["severity", "new row", "text", "matched row", "matched text", "evidence"],
                [
                    (
                        _severity(r["severity"], r["baseline"]),
                        _safe(location(r["file"], r["line"])) + _id(r["row_id"], r["role"]),
                        _text(r["text"] or ""),
                        _safe(location(r["target_file"], r["target_line"])) + _id(r["target_id"], r["target_role"]),
                        _text(r["target_text"] or ""),
                        escape(evidence_text(r["evidence"])),
                    )
                    for r in overlaps
                ],
                cls="texts",
            )
        )
    in_baseline = c["in_baseline"]["findings"]
    if c["findings"] or in_baseline:
        shown = top_findings(result, top, with_baseline=True)
        anchors_at = locations(result, shown.get_column("anchor_row").to_numpy())
        candidates_at = locations(result, shown.get_column("cand_row").to_numpy())
        title = f"Top {shown.height} of {c['findings']} findings"
        if result.baseline_file is not None:
            title = (
                f"Top {shown.height} findings: {c['findings']} new since the baseline first, "
                f"then {in_baseline} in the baseline (marked, not counted)"
            )
        results.append(f"<h2>{escape(title)}</h2>")
        results.append(
            _table(
                ["severity", "batch", "anchor", "its positive", "alleged negative", "evidence"],
                [
                    (
                        _severity(r["severity"], r["baseline"]),
                        str(r["batch"]),
                        _text(r["anchor_text"]) + _id(anchor_at, "·", r["anchor_id"]),
                        _text(r["positive_text"]),
                        _text(r["candidate_text"])
                        + _id(cand_at, "·", r["candidate_id"], r["candidate_role"], "·", r["direction"]),
                        escape(evidence_text(r["evidence"])),
                    )
                    for r, anchor_at, cand_at in zip(
                        shown.iter_rows(named=True), anchors_at, candidates_at, strict=True
                    )
                ],
                numeric=[1],
                cls="texts",
            )
        )
    if c["mislabelled_negatives"]:
        shown = mislabelled_rows(result, top)
        results.append(f"<h2>Mislabelled hard negatives ({len(shown)} of {c['mislabelled_negatives']})</h2>")
        results.append(
            _table(
                ["severity", "row", "anchor", "positive", "hard negative", "evidence"],
                [
                    (
                        _severity(r["severity"]),
                        _safe(r["location"]) + _id(r["row_id"]),
                        _text(r["anchor_text"]),
                        _text(r["positive_text"]),
                        _text(r["negative_text"]) + _id(r["negative"]),
                        escape(evidence_text(r["evidence"])),
                    )
                    for r in shown
                ],
                cls="texts",
            )
        )
    detectors = result.judgement.detector_info
    if detectors:
        out.append("<h2>Detector settings</h2>")
        out.append(
            _table(
                ["detector", "settings"],
                [
                    (
                        f"<code>{escape(name)}</code>",
                        "<br>".join(f"{escape(k)}: <code>{_setting(v)}</code>" for k, v in info.items()),
                    )
                    for name, info in detectors.items()
                ],
            )
        )
    out.append(f"<footer>contrast-audit {escape(__version__)} · the JSON report has every finding</footer>")
    out.append("</body></html>")
    # The verdict and what counts first; the counts, plots, breakdowns and settings after them.
    return "\n".join([*head, *results, *out]) + "\n"
