"""The highest-scoring alleged negatives: for every in-batch comparison, the candidate's score
against the anchor, the anchor's positive score, the margin between them, and whether (and why)
the scan flags the candidate. Globally, or per anchor."""

from __future__ import annotations

import io
import json
from collections.abc import Sequence
from dataclasses import replace

import numpy as np
import polars as pl
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from contrast_audit.api import AuditResult
from contrast_audit.config import AuditConfig
from contrast_audit.errors import ConfigError
from contrast_audit.evidence.base import Pairs
from contrast_audit.evidence.blocks import BatchBlock
from contrast_audit.evidence.embedding import pair_scores
from contrast_audit.judge import WHY_NOT, _frame, chunk_bounds, direction_pairs, evaluate
from contrast_audit.report.common import clip, evidence_text, why_not_text


def in_memory(cfg: AuditConfig) -> AuditConfig:
    """``cfg`` for listing alleged negatives: on the in-memory engine (``auto`` refuses an input too large for
    memory rather than streaming it), or on Ray with the vectors computed there; ``stream`` is exit 2."""
    if cfg.engine == "stream":
        raise ConfigError(
            "negatives runs on the in-memory engine, not --engine stream: it ranks every comparison by the "
            "vectors of every text (--engine ray computes only its vectors on Ray)",
            fix="leave --engine out (or pass --engine memory); scan streams inputs larger than memory",
        )
    return replace(cfg, engine="memory") if cfg.engine == "auto" else cfg


def _store(result: AuditResult):
    for detector in result.detectors:
        store = getattr(detector, "store", None)
        if store is not None and store.query is None:  # a streamed audit: no vectors of the whole data
            engine = result.config.engine
            raise ConfigError(
                f"listing alleged negatives runs on the in-memory engine, not --engine {engine}: "
                "it ranks every comparison by the vectors of every text",
                fix="audit with every_vector=True (the vectors on Ray, the rest in memory)"
                if engine == "ray"
                else "leave --engine out (or pass --engine memory)",
            )
        if store is not None:
            return store
    raise ConfigError("listing alleged negatives needs embeddings", fix="drop --no-embeddings")


def alleged_negatives(
    result: AuditResult,
    *,
    top: int = 20,
    per_anchor: int = 0,
    sources: Sequence[str] | None = None,
    cohorts: Sequence[str] | None = None,
) -> pl.DataFrame:
    """Top candidates by score. With ``per_anchor`` K, each anchor's K best, for the ``top``
    anchors whose best candidate scores highest."""
    corpus, store = result.corpus, _store(result)
    keep_rows = np.ones(corpus.n_rows, dtype=bool)
    rows = corpus.rows
    if sources:
        keep_rows &= rows.get_column("source").is_in(list(sources)).fill_null(False).to_numpy()
    if cohorts:
        keep_rows &= rows.get_column("cohort").is_in(list(cohorts)).fill_null(False).to_numpy()
    batches = result.plan.global_batches(result.config.plan.world_size)
    width = 1 + corpus.negatives.shape[1]
    keep_each = max(top, 1) if per_anchor == 0 else per_anchor
    parts: list[pl.DataFrame] = []
    for start, stop in chunk_bounds(batches, width):
        batch, anchor, other, at = BatchBlock(batches.rows, batches.offsets, start, stop).pairs()
        for direction in result.config.loss.directions:
            pairs, pair_batch = direction_pairs(corpus, direction, batch, anchor, other, at)
            wanted = keep_rows[pairs.anchor_row]
            if not wanted.any():
                continue
            cand, pos = pair_scores(store, corpus, pairs)
            frame = pl.DataFrame(
                {
                    "batch": pair_batch[wanted],
                    "anchor_row": pairs.anchor_row[wanted],
                    "cand_row": pairs.cand_row[wanted],
                    "cand_role": pairs.cand_role[wanted],
                    "cand_tid": pairs.cand_tid[wanted],
                    "candidate_score": cand[wanted],
                    "positive_score": pos[wanted],
                }
            ).with_columns(pl.lit(direction).alias("direction"))
            if per_anchor:
                frame = (
                    frame.sort("candidate_score", descending=True)
                    .group_by("anchor_row", maintain_order=True)
                    .head(keep_each)
                )
            else:
                frame = frame.top_k(keep_each, by="candidate_score")
            parts.append(frame)
    if not parts:
        return _join_findings(result, pl.DataFrame(schema=_SCHEMA))
    table = pl.concat(parts)
    order = ["candidate_score", "batch", "anchor_row", "cand_row"]
    desc = [True, False, False, False]
    if per_anchor:
        table = table.sort(order, descending=desc).group_by("anchor_row", maintain_order=True).head(per_anchor)
        best = table.group_by("anchor_row").agg(pl.col("candidate_score").max().alias("_best"))
        anchors = best.sort(["_best", "anchor_row"], descending=[True, False]).head(top).with_row_index("_rank")
        table = (
            table.join(anchors, on="anchor_row")
            .sort(["_rank", "candidate_score"], descending=[False, True])
            .drop("_best", "_rank")
        )
    else:
        table = table.sort(order, descending=desc).head(top)
    table = _join_findings(
        result, table.with_columns((pl.col("candidate_score") - pl.col("positive_score")).alias("margin"))
    )
    return table.with_columns(why_not(result, table))


_PAIR_COLUMNS = ("anchor_row", "cand_row", "cand_role", "cand_tid")


def why_not(result: AuditResult, table: pl.DataFrame) -> pl.Series:
    """For each alleged negative short of ``likely``, why the semantic detectors did not flag it: each
    one's score against its bar, or the guard that vetoed its match with the guard's value (the JSON
    report's ``why_not``). The detectors are run again on these pairs alone."""
    if table.height == 0:
        return pl.Series("why_not", [], dtype=WHY_NOT)
    numbered = table.with_row_index("_at")
    parts = []
    for direction in numbered.get_column("direction").unique(maintain_order=True):
        part = numbered.filter(pl.col("direction") == direction)
        cols = {c: part.get_column(c).to_numpy().astype(np.int64) for c in ("_at", *_PAIR_COLUMNS)}
        pairs = Pairs(direction, *(cols[c] for c in _PAIR_COLUMNS))
        found, severity, hits = evaluate(result.detectors, pairs)
        severity = np.where(found, severity, -1).astype(np.int8)
        frame = _frame({"_at": cols["_at"], "severity_rank": severity}, hits, np.ones(len(pairs), dtype=bool))
        parts.append(frame.select(pl.col("_at").cast(pl.UInt32), "why_not"))
    joined = numbered.select("_at").join(pl.concat(parts), on="_at", how="left", maintain_order="left")
    return joined.get_column("why_not").fill_null(pl.lit([], dtype=WHY_NOT))


_SCHEMA = {
    "batch": pl.Int64,
    "anchor_row": pl.Int64,
    "cand_row": pl.Int64,
    "cand_role": pl.Int64,
    "cand_tid": pl.Int64,
    "candidate_score": pl.Float32,
    "positive_score": pl.Float32,
    "direction": pl.String,
    "margin": pl.Float32,
}


def _join_findings(result: AuditResult, table: pl.DataFrame) -> pl.DataFrame:
    keys = ["batch", "direction", "anchor_row", "cand_row", "cand_role"]
    flags = result.findings.select(*keys, pl.col("severity").cast(pl.String), "severity_rule", "evidence")
    joined = table.join(flags, on=keys, how="left", maintain_order="left")
    return joined.with_columns(pl.col("severity").is_not_null().alias("flagged"))


def _records(result: AuditResult, table: pl.DataFrame) -> list[dict]:
    shown = result.findings_table(
        table.with_columns(pl.col("evidence").fill_null(pl.lit([], dtype=result.findings.schema["evidence"])))
    )
    return shown.select(
        "batch",
        "direction",
        "anchor_id",
        "candidate_id",
        "candidate_role",
        pl.col("candidate_score").round(6),
        pl.col("positive_score").round(6),
        pl.col("margin").round(6),
        "flagged",
        "severity",
        "severity_rule",
        "evidence",
        "why_not",
        "anchor_text",
        "positive_text",
        "candidate_text",
    ).to_dicts()


def render_json(result: AuditResult, table: pl.DataFrame, *, top: int, per_anchor: int) -> str:
    payload = {
        "schema_version": "1",
        "mode": "per_anchor" if per_anchor else "global",
        "top": top,
        "per_anchor": per_anchor,
        "similarity": "cosine",
        "embedding": _store(result).info(),
        "detectors": result.judgement.detector_info,
        "negatives": _records(result, table),
    }
    return json.dumps(payload, indent=2, ensure_ascii=False, default=float) + "\n"


def render_text(result: AuditResult, table: pl.DataFrame, *, per_anchor: int, color: bool = False) -> str:
    buffer = io.StringIO()
    console = Console(file=buffer, force_terminal=color, no_color=not color, width=160, highlight=False)
    title = "Highest-scoring alleged negatives" + (f" ({per_anchor} per anchor)" if per_anchor else "")
    grid = Table(title=title, title_justify="left")
    for name in ("anchor", "its positive", "alleged negative", "score", "positive", "margin", "flagged"):
        grid.add_column(name, overflow="fold", justify="right" if name in ("score", "positive", "margin") else "left")
    for r in _records(result, table):
        flagged = f"{r['severity']}: {evidence_text(r['evidence'])}" if r["flagged"] else "no"
        if r["why_not"] and r["severity"] not in ("certain", "likely"):
            flagged += f"\n[dim]not likely: {escape(why_not_text(r['why_not']))}[/dim]"
        grid.add_row(
            f"{escape(clip(r['anchor_text'], 45))}\n[dim]{escape(str(r['anchor_id']))}[/dim]",
            escape(clip(r["positive_text"], 45)),
            f"{escape(clip(r['candidate_text'], 45))}\n[dim]{escape(str(r['candidate_id']))} {escape(str(r['candidate_role']))} · batch {r['batch']}[/dim]",
            f"{r['candidate_score']:.3f}",
            f"{r['positive_score']:.3f}",
            f"{r['margin']:+.3f}",
            flagged,
        )
    console.print(grid)
    return buffer.getvalue()
