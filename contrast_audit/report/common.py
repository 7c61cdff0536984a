"""Pieces shared by the human-readable formatters."""

from __future__ import annotations

import polars as pl

from contrast_audit.api import AuditResult


def top_findings(result: AuditResult, top: int) -> pl.DataFrame:
    """The most severe findings first (then by batch), with texts, for display."""
    f = result.findings.sort(
        ["severity_rank", "batch", "anchor_row", "cand_row"], descending=[True, False, False, False]
    ).head(top)
    return result.findings_table(f)


def evidence_text(evidence: list[dict]) -> str:
    parts = []
    for e in evidence:
        if e["kind"] == "linked":
            parts.append(f"linked ({int(e['score'])} hop{'s' if e['score'] != 1 else ''})")
        elif e["kind"] == "margin":
            parts.append(f"margin {e['score']:+.3f}" if e["threshold"] <= 0 else f"margin ×{e['score']:.3f}")
        elif e["score"] == 1.0 and e["threshold"] == 1.0:
            parts.append(e["kind"])
        else:
            parts.append(f"{e['kind']} {e['score']:.3f}≥{e['threshold']:.3f}")
    return ", ".join(parts)


def clip(text: str, width: int = 80) -> str:
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 1] + "…"


def mapping_lines(result: AuditResult) -> list[str]:
    seen: dict[tuple, list[str]] = {}
    for m in result.loaded.mappings:
        key = (m.layout, m.anchor, m.positive, m.negatives, m.id, m.source, m.cohort, m.group)
        seen.setdefault(key, []).append(m.path)
    lines = []
    for (layout, anchor, positive, negatives, ident, source, cohort, group), files in seen.items():
        extras = ", ".join(
            f"{k}={v}" for k, v in (("id", ident), ("source", source), ("cohort", cohort), ("group", group)) if v
        )
        neg = f", negatives={'+'.join(negatives)}" if negatives else ""
        where = files[0] if len(files) == 1 else f"{len(files)} files"
        lines.append(f"{where}: {layout} (anchor={anchor}, positive={positive}{neg}{', ' + extras if extras else ''})")
    return lines


def embedding_line(result: AuditResult) -> str | None:
    """Which model scored the texts, with which prompts, and how many vectors came from the cache."""
    info = result.judgement.detector_info.get("embedding")
    if not info:
        return None
    prompts = ""
    if info.get("query_prompt") or info.get("doc_prompt"):
        prompts = f", prompts {info.get('query_prompt')!r} / {info.get('doc_prompt')!r}"
    return (
        f"{info['model']} ({info['similarity']}, normalised{prompts}): "
        f"{info['embedded']} texts embedded, {info['cached']} from the cache"
    )
