"""SARIF 2.1.0 report (``--format sarif``), for code-scanning views such as GitHub's.

One rule per kind of result (in-batch false negative by severity, mislabelled hard negative,
overlap with existing data, eval leak). Each result sits at the offending row's file and line
(``physicalLocation.artifactLocation.uri`` relative to the working directory, ``region.startLine``;
Parquet rows have no line, so only the file), the related row as a ``relatedLocation``, and the
evidence in the message and in ``properties``. Results already in a baseline report carry
``baselineState: "unchanged"`` (the others ``"new"``) when a baseline was given; results masked by
the manifest given as ``--plan`` carry an external, accepted suppression. Deterministic: no times,
stable order.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any
from urllib.parse import quote

from contrast_audit._version import __version__
from contrast_audit.api import AuditResult
from contrast_audit.report.common import clip, evidence_text
from contrast_audit.report.located import RULE_BY_ID, RULE_INDEX, RULES, display_path, has_lines, located, row_name
from contrast_audit.report.stream import placeholders, spliced

SCHEMA_URI = "https://json.schemastore.org/sarif-2.1.0.json"
TEXT_WIDTH = 200  # characters of each data text quoted in a message
MASKED = "masked by the batch manifest given as --plan: the loss never compares this pair"


def _uri(path: str | None, root: Path | None) -> str:
    shown = display_path(path, root) or ""
    if shown.startswith("/"):
        return Path(shown).as_uri()
    return quote(shown, safe="/")


def _location(file: str | None, line: int | None, root: Path | None, message: str | None = None) -> dict[str, Any]:
    physical: dict[str, Any] = {"artifactLocation": {"uri": _uri(file, root)}}
    if line is not None and has_lines(file) and line >= 1:
        physical["region"] = {"startLine": int(line)}
    out: dict[str, Any] = {"physicalLocation": physical}
    if message:
        out["message"] = {"text": message}
    return out


def message(r: dict[str, Any], root: Path | None = None) -> str:
    """One sentence in a reviewer's words, about the row it is shown on: what it does wrong, with the texts,
    the other row by line, and the evidence."""
    evidence = evidence_text(r["evidence"] or [])
    text = clip(r["text"] or "", TEXT_WIDTH)
    other_text = clip(r["other_text"] or "", TEXT_WIDTH)
    other = row_name(r["other_file"], r["other_line"], r["other_id"], r["file"], root)
    rule = r["rule"]
    why = f"({r['severity']}; evidence: {evidence})"
    if rule.startswith("false-negative-") and r.get("at_candidate"):
        return (
            f"This row's {r['role']} “{text}” shares batch {r['batch']} with the anchor “{other_text}” of {other}, "
            f"whose loss pushes it away as a negative ({r['direction']}), yet it answers that anchor as its own "
            f"positive “{clip(r['positive_text'] or '', TEXT_WIDTH)}” does {why}."
        )
    if rule.startswith("false-negative-"):
        return (
            f"This row's anchor “{text}” is pushed away from the {r['other_role']} “{other_text}” of {other} in batch "
            f"{r['batch']} ({r['direction']}), yet that text answers it as its own positive "
            f"“{clip(r['positive_text'] or '', TEXT_WIDTH)}” does {why}."
        )
    if rule == "mislabelled-negative":
        return (
            f"This row's hard negative ({r['role']}) “{text}” is its own positive “{other_text}” or anchor again: "
            f"a negative that is a positive {why}."
        )
    matched = f" “{other_text}”" if r["other_text"] else ""
    if rule == "eval-leak":
        return (
            f"This row's {r['role']} “{text}” copies the {r['other_role'] or 'text'}{matched} of eval {other}: "
            f"train/eval contamination {why}."
        )
    kind = "repeats" if r["severity"] == "certain" else "nearly repeats"
    return f"This row {kind} {other}: its {r['role']} “{text}” is the {r['other_role'] or 'text'}{matched} there {why}."


def _fingerprint(r: dict[str, Any]) -> str:
    key = "\x1f".join(
        str(r[k]) for k in ("rule", "row_id", "role", "other_file", "other_id", "other_role", "batch", "direction")
    )
    return hashlib.sha256(key.encode("utf-8")).hexdigest()[:32]


def _properties(r: dict[str, Any]) -> dict[str, Any]:
    props: dict[str, Any] = {
        "severity": r["severity"],
        "row_id": r["row_id"],
        "role": r["role"],
        "related_row_id": r["other_id"],
        "related_role": r["other_role"],
        "evidence": r["evidence"] or [],
        "baseline": bool(r["baseline"]),
        "masked": bool(r["masked"]),
    }
    if r["batch"] is not None:
        props.update(batch=r["batch"], epoch=r["epoch"], direction=r["direction"])
    if r["target"] is not None:
        props["target"] = r["target"]
    if not has_lines(r["file"]) and r["line"] is not None:
        props["row_number"] = r["line"]
    return props


RESULTS_PER_SLICE = 5_000


def _result(r: dict[str, Any], root: Path | None, baseline: bool) -> dict[str, Any]:
    rule = RULE_BY_ID[r["rule"]]
    entry: dict[str, Any] = {
        "ruleId": rule.id,
        "ruleIndex": RULE_INDEX[rule.id],
        "level": rule.level,
        "message": {"text": message(r, root)},
        "locations": [_location(r["file"], r["line"], root)],
        "relatedLocations": [
            {
                "id": 1,
                **_location(r["other_file"], r["other_line"], root, f"row {r['other_id']} ({r['other_role']})"),
            }
        ],
        "partialFingerprints": {"contrastAudit/v1": _fingerprint(r)},
        "properties": _properties(r),
    }
    if baseline:
        entry["baselineState"] = "unchanged" if r["baseline"] else "new"
    if r["masked"]:
        entry["suppressions"] = [{"kind": "external", "status": "accepted", "justification": MASKED}]
    return entry


def sarif_log(
    result: AuditResult, *, baseline: bool | None = None, root: Path | None = None, results: Any = None
) -> dict[str, Any]:
    """The SARIF log as a dict. ``baseline``: whether a baseline report was given (default: whether
    the scan read one, or any result is marked as in the baseline). ``results`` stands in for the
    results list (``chunks`` passes a placeholder and writes the results in its place)."""
    if results is None:
        table = located(result)
        marked = _has_baseline(result, table) if baseline is None else baseline
        results = [_result(r, root, marked) for r in table.iter_rows(named=True)]
    c = result.counts()
    run: dict[str, Any] = {
        "tool": {
            "driver": {
                "name": "contrast-audit",
                "version": __version__,
                "semanticVersion": __version__,
                "rules": [
                    {
                        "id": rule.id,
                        "name": rule.name,
                        "shortDescription": {"text": rule.title},
                        "fullDescription": {"text": rule.description},
                        "defaultConfiguration": {"level": rule.level},
                        "properties": {"tags": ["training-data", "contrastive"]},
                    }
                    for rule in RULES
                ],
            }
        },
        "columnKind": "unicodeCodePoints",
        "results": results,
        "properties": {
            "counts": {k: c[k] for k in ("rows", "batches", "candidates", "findings", "mislabelled_negatives")},
            "overlaps": int(result.overlaps.height),
        },
    }
    return {"$schema": SCHEMA_URI, "version": "2.1.0", "runs": [run]}


def _has_baseline(result: AuditResult, table: Any) -> bool:
    return result.baseline_file is not None or (bool(table.height) and bool(table.get_column("baseline").any()))


def render(result: AuditResult, *, baseline: bool | None = None, **_: object) -> str:
    return "".join(chunks(result, baseline=baseline))


def chunks(result: AuditResult, *, baseline: bool | None = None, root: Path | None = None, **_: object):
    """The log's text in pieces, the results written ``RESULTS_PER_SLICE`` at a time (the same bytes
    as ``json.dumps(sarif_log(...), indent=2)``), so memory holds one slice of result objects."""
    table = located(result)
    if baseline is None:
        baseline = _has_baseline(result, table)
    marks = placeholders(["results"])

    def slices():
        for lo in range(0, table.height, RESULTS_PER_SLICE):
            yield [_result(r, root, baseline) for r in table.slice(lo, RESULTS_PER_SLICE).iter_rows(named=True)]

    log = sarif_log(result, baseline=baseline, root=root, results=marks["results"])
    return spliced(log, marks, {"results": slices})


__all__ = ["chunks", "message", "render", "sarif_log"]
