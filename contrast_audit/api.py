"""The Python API: ``audit(paths, config)`` runs load → normalise → evidence → plan → judge and
returns an ``AuditResult`` that the formatters and the gate read."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import polars as pl

from contrast_audit import __version__
from contrast_audit.config import AuditConfig, PlanConfig
from contrast_audit.corpus import ANCHOR_ROLE, POSITIVE_ROLE, Corpus, build_corpus, role_name
from contrast_audit.evidence import REGISTRY, SEVERITIES, Detector, default_detectors
from contrast_audit.io import LoadResult, load_rows
from contrast_audit.judge import Judgement, judge
from contrast_audit.plan import Plan, make_plan, read_plan_file

SCHEMA_VERSION = "1"

Progress = Callable[[str, int], Callable[[int], None]]


@dataclass
class AuditResult:
    config: AuditConfig
    loaded: LoadResult
    corpus: Corpus
    plan: Plan
    n_global_batches: int
    judgement: Judgement
    config_file: str | None = None
    detectors: list[Detector] = field(default_factory=list)
    overlaps: pl.DataFrame = field(default_factory=lambda: empty_overlaps())
    # What did not stop the audit but changes what it means (printed on stderr, shown in reports).
    warnings: list[str] = field(default_factory=list)

    @property
    def findings(self) -> pl.DataFrame:
        return self.judgement.findings

    @property
    def mislabelled(self) -> pl.DataFrame:
        return self.judgement.mislabelled

    def counts(self) -> dict[str, Any]:
        """Headline numbers (also the metrics the gate reads)."""
        f = self.findings
        sev = f.get_column("severity").cast(pl.String).value_counts()
        by_sev = {s: 0 for s in SEVERITIES}
        by_sev.update(dict(sev.iter_rows()))
        kinds = (
            f.select(pl.col("evidence").list.eval(pl.element().struct.field("kind")).list.unique().alias("k"))
            .explode("k")
            .drop_nulls()
            .get_column("k")
            .value_counts(sort=True)
        )
        by_kind = {name: 0 for name in REGISTRY}  # every kind, 0 when its detector is off
        by_kind.update(dict(kinds.iter_rows()))
        candidates = self.judgement.candidates
        return {
            "rows": self.corpus.n_rows,
            "texts": self.corpus.n_texts,
            "skipped_rows": len(self.loaded.skipped),
            "batches": self.n_global_batches,
            "device_batches": self.plan.n_batches,
            "candidates": candidates,
            "candidates_by_direction": self.judgement.candidates_by_direction,
            "findings": f.height,
            "by_severity": by_sev,
            "by_kind": by_kind,
            "fn_rate": (f.height / candidates) if candidates else 0.0,
            "rows_affected": f.get_column("anchor_row").n_unique(),
            "mislabelled_negatives": self.mislabelled.height,
        }

    def breakdown(self, column: str) -> list[dict[str, Any]]:
        """The same numbers per value of ``source`` or ``cohort`` (of the anchor's row)."""
        rows = self.corpus.rows.select(pl.col(column).fill_null("(none)").alias("value"))
        per_row = rows.with_columns(
            pl.Series("candidates", self.judgement.candidates_per_row),
            pl.int_range(pl.len(), dtype=pl.Int64).alias("row"),
        )
        f = self.findings.join(per_row.select("row", "value"), left_on="anchor_row", right_on="row")
        found = f.group_by("value").agg(
            pl.len().alias("findings"),
            pl.col("anchor_row").n_unique().alias("rows_affected"),
            (pl.col("severity") == "certain").sum().alias("certain"),
            (pl.col("severity") == "likely").sum().alias("likely"),
            (pl.col("severity") == "suspect").sum().alias("suspect"),
        )
        table = (
            per_row.group_by("value")
            .agg(pl.len().alias("rows"), pl.col("candidates").sum())
            .join(found, on="value", how="left")
            .fill_null(0)
            .with_columns(
                pl.when(pl.col("candidates") > 0)
                .then(pl.col("findings") / pl.col("candidates"))
                .otherwise(0.0)
                .alias("fn_rate")
            )
            .sort(["findings", "value"], descending=[True, False])
        )
        return table.rename({"value": column}).to_dicts()

    def metrics(self) -> dict[str, float]:
        """Gate metrics: findings, certain, likely, suspect, fn-rate, rows-affected, mislabelled,
        and one per evidence kind."""
        c = self.counts()
        out: dict[str, float] = {
            "findings": c["findings"],
            **c["by_severity"],
            "fn-rate": c["fn_rate"],
            "rows-affected": c["rows_affected"],
            "mislabelled": c["mislabelled_negatives"],
        }
        for kind, value in c["by_kind"].items():
            out.setdefault(kind, value)
        return out

    METRICS = ("findings", "certain", "likely", "suspect", "fn-rate", "rows-affected", "mislabelled", *REGISTRY)

    def findings_table(self, frame: pl.DataFrame | None = None) -> pl.DataFrame:
        """Findings with ids and texts, for reports."""
        f = self.findings if frame is None else frame
        ids = self.corpus.rows.get_column("id")
        anchor_rows = f.get_column("anchor_row").to_numpy()
        return f.with_columns(
            ids.gather(f.get_column("anchor_row")).alias("anchor_id"),
            ids.gather(f.get_column("cand_row")).alias("candidate_id"),
            _role_names(f.get_column("cand_role")).alias("candidate_role"),
            self.corpus.spelling(anchor_rows, np.full(f.height, ANCHOR_ROLE)).alias("anchor_text"),
            self.corpus.spelling(anchor_rows, np.full(f.height, POSITIVE_ROLE)).alias("positive_text"),
            self.corpus.spelling(f.get_column("cand_row").to_numpy(), f.get_column("cand_role").to_numpy()).alias(
                "candidate_text"
            ),
        )

    def report(self) -> dict[str, Any]:
        """The JSON report (``schema_version`` 1)."""
        findings = self.findings_table().select(
            "batch",
            "epoch",
            "direction",
            "anchor_id",
            "candidate_id",
            "candidate_role",
            pl.col("severity").cast(pl.String),
            "evidence",
        )
        ids = self.corpus.rows.get_column("id")
        mis = self.mislabelled
        mislabelled = mis.select(
            ids.gather(mis.get_column("anchor_row")).alias("row_id"),
            _role_names(mis.get_column("cand_role")).alias("negative"),
            pl.col("severity").cast(pl.String),
            "evidence",
        )
        return {
            "schema_version": SCHEMA_VERSION,
            "tool": {"name": "contrast-audit", "version": __version__},
            "config": self.config.to_dict(),
            "config_file": self.config_file,
            "mapping": [m.to_dict() for m in self.loaded.mappings],
            "input": {
                "files": self.loaded.files,
                "rows": self.corpus.n_rows,
                "skipped": [{"location": b.location(), "reason": b.reason} for b in self.loaded.skipped],
            },
            "plan": {
                "source": self.plan.source,
                "device_batches": self.plan.n_batches,
                "global_batches": self.n_global_batches,
                "world_size": self.config.plan.world_size,
                "directions": list(self.config.loss.directions),
            },
            "detectors": self.judgement.detector_info,
            "counts": self.counts(),
            "by_source": self.breakdown("source"),
            "by_cohort": self.breakdown("cohort"),
            "findings": findings.to_dicts(),
            "mislabelled_negatives": mislabelled.to_dicts(),
            "warnings": list(self.warnings),
        }


def audit(
    paths: Sequence[str],
    config: AuditConfig | None = None,
    *,
    detectors: Sequence[Detector] | None = None,
    progress: Progress | None = None,
    config_file: str | None = None,
) -> AuditResult:
    """Audit pair files for in-batch false negatives under ``config``'s batch plan and loss."""
    cfg = config or AuditConfig()
    with _stage(progress, "Loading files"):
        loaded = load_rows(list(paths), cfg.mapping, cfg.on_bad_row, cfg.normalise)
    with _stage(progress, "Normalising texts"):
        corpus = build_corpus(loaded.rows, cfg.normalise)
    with _stage(progress, "Planning batches"):
        if cfg.plan.plan_file:
            plan = read_plan_file(cfg.plan.plan_file, corpus.rows.get_column("id"))
        else:
            plan = make_plan(cfg.plan, corpus.n_rows, corpus.raw)
    active = list(detectors) if detectors is not None else default_detectors(cfg, progress)
    for detector in active:
        with _stage(progress, f"Preparing {detector.name} evidence"):
            detector.prepare(corpus)
    batches = plan.global_batches(cfg.plan.world_size)
    tick = progress("Comparing batches", len(batches)) if progress else None
    judgement = judge(corpus, batches, active, cfg.loss.directions, tick)
    result = AuditResult(cfg, loaded, corpus, plan, len(batches), judgement, config_file, active)
    stores = {id(s): s for d in active if (s := getattr(d, "store", None)) is not None}
    cache_warnings = [w for s in stores.values() for w in getattr(s, "warnings", [])]
    plan_notes = plan_warnings(cfg, corpus.n_rows, plan, len(batches), judgement.candidates)
    result.warnings = [*loaded.warnings, *plan_notes, *cache_warnings]
    return result


@contextmanager
def _stage(progress: Progress | None, description: str) -> Iterator[None]:
    """A live bar (with its elapsed time) for a stage that reports no finer progress."""
    tick = progress(description, 1) if progress else None
    yield
    if tick:
        tick(1)


def plan_warnings(cfg: AuditConfig, n_rows: int, plan: Plan, n_sets: int, candidates: int) -> list[str]:
    """Silent no-ops made visible: settings a plan file overrides, rows in no batch, nothing compared."""
    out: list[str] = []
    p, default = cfg.plan, PlanConfig()
    if p.plan_file:
        ignored = [
            f"{name.replace('_', '-')} {getattr(p, name)}"
            for name in ("batch_size", "seed", "epochs", "drop_last", "sampler")
            if getattr(p, name) != getattr(default, name)
        ]
        if ignored:
            out.append(f"{', '.join(ignored)} ignored: the plan file {p.plan_file} fixes the batches")
    covered = int(np.unique(plan.rows).size)
    if covered < n_rows:
        why = (
            "--drop-last drops the last incomplete batch" if p.drop_last and not p.plan_file else "the plan omits them"
        )
        out.append(f"{n_rows - covered} of {n_rows} rows are in no batch and were not checked ({why})")
    if n_sets == 0:
        out.append("no comparison sets: no batch was formed, so nothing was compared")
    elif candidates == 0:
        out.append("no candidate was compared: every comparison set holds a single row")
    return out


OVERLAP_SCHEMA = {
    "row_id": pl.String,  # the new row
    "file": pl.String,
    "line": pl.Int64,
    "role": pl.String,  # which text of the new row: anchor, positive, negative_k
    "target": pl.String,  # "existing" or "eval"
    "target_id": pl.String,
    "target_file": pl.String,
    "target_line": pl.Int64,
    "target_role": pl.String,
    "severity": pl.Enum(["certain", "likely", "suspect"]),
    "evidence": pl.List(pl.Struct({"kind": pl.String, "score": pl.Float64, "threshold": pl.Float64})),
    "baseline": pl.Boolean,
}


def empty_overlaps() -> pl.DataFrame:
    """Overlaps of new rows with existing training rows or eval rows (``scan --against/--eval``):
    one row per (new row, role, matched target text)."""
    return pl.DataFrame(schema=OVERLAP_SCHEMA)


def _role_names(codes: pl.Series) -> pl.Series:
    names = {int(code): role_name(int(code)) for code in codes.unique().to_list()}
    return codes.replace_strict(names, return_dtype=pl.String) if names else codes.cast(pl.String)


__all__ = ["OVERLAP_SCHEMA", "SCHEMA_VERSION", "AuditResult", "audit", "empty_overlaps"]
