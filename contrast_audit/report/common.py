"""Pieces shared by the human-readable formatters."""

from __future__ import annotations

from typing import Any

import numpy as np
import polars as pl

from contrast_audit.api import AuditResult
from contrast_audit.corpus import ANCHOR_ROLE, POSITIVE_ROLE


def top_findings(result: AuditResult, top: int, *, with_baseline: bool = False) -> pl.DataFrame:
    """The most severe findings that count first (then by batch), with texts, for display;
    ``with_baseline``: then those in the baseline (``baseline`` true), after every one that counts."""
    f = result.unmasked_findings if with_baseline else result.active_findings
    f = f.sort(
        ["baseline", "severity_rank", "batch", "anchor_row", "cand_row"], descending=[False, True, False, False, False]
    ).head(top)
    return result.findings_table(f)


def evidence_text(evidence: list[dict]) -> str:
    parts = []
    for e in evidence:
        if e["kind"] == "linked":
            parts.append(f"linked ({int(e['score'])} hop{'s' if e['score'] != 1 else ''})")
        elif e["kind"] == "margin":
            if e["threshold"] <= 0:
                parts.append(f"margin {e['score']:+.3f}>{e['threshold']:+.3f}")
            else:
                parts.append(f"margin ×{e['score']:.3f}>{e['threshold']:.3f}")
        elif e["score"] == 1.0 and e["threshold"] == 1.0:
            parts.append(e["kind"])
        else:
            parts.append(f"{e['kind']} {e['score']:.3f}≥{e['threshold']:.3f}")
    return ", ".join(parts)


def why_not_text(why_not: list[dict] | None) -> str:
    """Why the semantic detectors did not flag a pair (a finding's or alleged negative's ``why_not``), in
    a line: "embedding 0.905≥0.825 vetoed by word-order 0.33<0.85; minhash 0.000<0.700"."""
    parts = []
    for w in why_not or []:
        if w["score"] is None:
            parts.append(f"{w['kind']} not compared (the first stage found the texts far apart)")
            continue
        score = w["score"]
        if w["kind"] == "margin" and (w["threshold"] or 0) > 0:
            shown = f"margin ×{score:.3f}"
            bar = f"{w['threshold']:.3f}"
        elif w["kind"] == "margin":
            shown, bar = f"margin {score:+.3f}", f"{w['threshold']:+.3f}"
        else:
            shown, bar = f"{w['kind']} {score:.3f}", f"{w['threshold']:.3f}"
        if w["guard"] is None and w.get("rule"):
            parts.append(f"{shown}>{bar} ({w['rule']})")
            continue
        if w["guard"] is None:
            parts.append(f"{shown}<{bar}" if w["kind"] != "margin" else f"{shown}≤{bar}")
            continue
        guard = f"vetoed by {w['guard']}"
        if w["guard_threshold"] is not None and w["guard_value"] is not None and w["guard_threshold"] < 1.0:
            guard += f" {w['guard_value']:.2f}<{w['guard_threshold']:.2f}"
        elif w["guard"] in ("number", "entity", "negation"):
            guard += {"number": " (numbers differ)", "entity": " (names differ)", "negation": " (one is negated)"}[
                w["guard"]
            ]
        parts.append(f"{shown}≥{bar} {guard}")
    return "; ".join(parts)


MARGIN_LEGEND = (
    "margin ×R>T: the candidate's cosine to the anchor is R times the anchor's cosine to its own positive, "
    "above T = 1 - relative margin; margin +D>T: the candidate's cosine minus the positive's is D, above "
    "T = -absolute margin. Either way the candidate scores about as high as the positive it competes with."
)


def plural(n: int, singular: str, plural_form: str | None = None) -> str:
    """``1 false negative``, ``2 false negatives``."""
    return f"{n:,} {singular if n == 1 else (plural_form or singular + 's')}"


def has_margin(evidence_lists: list[list[dict]]) -> bool:
    return any(e["kind"] == "margin" for evidence in evidence_lists for e in evidence)


def location(file: str | None, line: int | None) -> str:
    """``file:line`` (``file: row N`` for Parquet, whose rows have no lines)."""
    if line is None:
        return str(file)
    return f"{file}: row {line}" if str(file).lower().endswith((".parquet", ".pq")) else f"{file}:{line}"


def locations(result: AuditResult, rows: np.ndarray) -> list[str]:
    """``file:line`` of each row (``file: row N`` for Parquet, whose rows have no lines)."""
    frame = result.corpus.rows
    if frame.height == 0 or len(rows) == 0:
        return []
    index = pl.Series(np.asarray(rows, dtype=np.int64))
    files = frame.get_column("file").gather(index).to_list()
    lines = frame.get_column("line").gather(index).to_list()
    return [location(f, n) for f, n in zip(files, lines, strict=True)]


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


def calibration_line(result: AuditResult) -> str | None:
    """How the pair evidence's bars were set (calibrated from the data, or fixed), one line."""
    info = result.judgement.detector_info.get("pair")
    return info.get("calibration_line") if info else None


def plan_line(result: AuditResult) -> str:
    """Where the batches came from and what each comparison set holds."""
    c = result.counts()
    plan = result.config.plan
    source = result.plan.source if plan.plan_file else f"{plan.sampler} sampler, seed {plan.seed}"
    return (
        f"{source}, batch size {plan.batch_size}, world size {plan.world_size}, "
        f"{plural(c['device_batches'], 'device batch', 'device batches')} → "
        f"{plural(c['batches'], 'comparison set')}; "
        f"directions {', '.join(result.config.loss.directions)}"
    )


def mislabelled_rows(result: AuditResult, top: int) -> list[dict[str, Any]]:
    """The first ``top`` mislabelled hard negatives with their row's id, location and texts."""
    mis = result.active_mislabelled.head(top)
    rows = mis.get_column("anchor_row").to_numpy()
    at = locations(result, rows)
    ids = result.corpus.rows.get_column("id").gather(rows).to_list()
    anchors = result.corpus.spelling(rows, np.full(mis.height, ANCHOR_ROLE)).to_list()
    positives = result.corpus.spelling(rows, np.full(mis.height, POSITIVE_ROLE)).to_list()
    negatives = result.corpus.spelling(rows, mis.get_column("cand_role").to_numpy()).to_list()
    return [
        {
            "severity": r["severity"],
            "row_id": str(ids[i]),
            "location": at[i],
            "negative": f"negative_{r['cand_role']}",
            "anchor_text": anchors[i],
            "positive_text": positives[i],
            "negative_text": negatives[i],
            "evidence": r["evidence"],
        }
        for i, r in enumerate(mis.iter_rows(named=True))
    ]


OVERLAP_TITLES = {"eval": "Leaks of eval data", "existing": "Repeats of existing data"}


def has_reference(result: AuditResult) -> bool:
    """Whether the scan checked new rows against existing or eval data, or (with a baseline) against the
    old rows of the scanned data."""
    ref = result.config.reference
    return bool(ref.against or ref.eval) or "repeats" in result.overlap_info


def top_overlaps(result: AuditResult, target: str, top: int) -> tuple[int, list[dict[str, Any]]]:
    """How many overlaps with ``target`` ("eval" or "existing") there are, and the first ``top``
    (new ones before baseline ones, most severe first) with both texts."""
    table = result.overlaps_table().with_row_index("_i").filter(pl.col("target") == target)
    shown = table.sort(["baseline", "severity", "_i"]).head(top)
    return table.height, shown.drop("_i").to_dicts()


SCOPE = (
    "every count, table and plot is of what is new since the baseline: findings with a new row on either side, "
    "mislabelled negatives, overlaps and leaks of new rows; candidates are the pairs with a new row"
)


def baseline_lines(result: AuditResult) -> list[str]:
    """What the counts cover, then 'N new, M in baseline' per kind, when a baseline was given."""
    if result.baseline_file is None:
        return []
    c = result.counts()
    new, old = c["new"], c["in_baseline"]
    labels = {
        "findings": "false negatives",
        "mislabelled_negatives": "mislabelled hard negatives",
        "overlaps": "overlaps with existing data",
        "leaks": "leaks of eval data",
    }
    return [f"{result.baseline_file}: {SCOPE}", *(f"{labels[k]}: {new[k]} new, {old[k]} in baseline" for k in labels)]
