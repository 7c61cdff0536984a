"""The Python API: ``audit(paths, config)`` runs load → normalise → evidence → plan → judge and
returns an ``AuditResult`` that the formatters and the gate read."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from contrast_audit import engine, resources
from contrast_audit._version import __version__
from contrast_audit.baseline import Baseline, corpus_row_hashes, overlap_rows, read_baseline, scanned_targets
from contrast_audit.config import AuditConfig, PlanConfig
from contrast_audit.corpus import ANCHOR_ROLE, POSITIVE_ROLE, Corpus, build_corpus, role_name
from contrast_audit.errors import ConfigError
from contrast_audit.evidence import REGISTRY, SEVERITIES, Detector, default_detectors
from contrast_audit.io import LoadResult, load_rows
from contrast_audit.io.load import expand_paths
from contrast_audit.judge import Judgement, candidate_counts, judge
from contrast_audit.manifest.format import check_fingerprint, read_manifest
from contrast_audit.manifest.replay import is_manifest_file, manifest_plan, mark_masked
from contrast_audit.overlap import (
    OVERLAP_SCHEMA,
    OVERLAP_TEXTS,
    distinct_targets,
    empty_overlaps,
    exact_repeats,
    find_overlaps,
    load_eval,
    load_existing,
    merge_overlaps,
    repeat_targets,
    text_hashes,
    with_existing_rows,
)
from contrast_audit.plan import GlobalBatches, Plan, make_plan, read_plan_file

SCHEMA_VERSION = "2"  # docs/report.md, "Versions"

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
    overlap_texts: pl.DataFrame | None = None  # text, target_text and their hashes, row for row
    overlap_info: dict[str, Any] = field(default_factory=dict)
    baseline_file: str | None = None
    # With --baseline: the rows whose content the baseline lacks (and, with --with-existing, that are new).
    new_rows: np.ndarray | None = None
    # What did not stop the audit but changes what it means (printed on stderr, shown in reports).
    warnings: list[str] = field(default_factory=list)
    _row_hashes: pl.Series | None = field(default=None, repr=False)

    @property
    def findings(self) -> pl.DataFrame:
        """Every in-batch finding, those a manifest masks (``masked``) or a baseline holds (``baseline``) too."""
        return self.judgement.findings

    @property
    def mislabelled(self) -> pl.DataFrame:
        return self.judgement.mislabelled

    @property
    def unmasked_findings(self) -> pl.DataFrame:
        return self.findings.filter(~pl.col("masked"))

    @property
    def unmasked_mislabelled(self) -> pl.DataFrame:
        return self.mislabelled.filter(~pl.col("masked"))

    @property
    def active_findings(self) -> pl.DataFrame:
        """The findings the gate sees: neither masked by a manifest nor in the baseline."""
        return self.findings.filter(~pl.col("masked") & ~pl.col("baseline"))

    @property
    def active_mislabelled(self) -> pl.DataFrame:
        return self.mislabelled.filter(~pl.col("masked") & ~pl.col("baseline"))

    def counts(self) -> dict[str, Any]:
        """Headline numbers of what counts: findings and mislabelled negatives neither masked by a manifest
        nor in the ``--baseline``, overlaps and leaks not in the baseline; every table, plot, annotation
        and the gate count this same set (``active_findings``). ``candidates`` (and so ``fn_rate``) are
        the pairs that could hold such a finding: with a baseline or ``--with-existing``, those with a new
        row. ``masked`` and ``in_baseline`` count the rest apart (a finding both masked and in the baseline
        counts as masked); ``new`` repeats the counted numbers by kind."""
        out = self._counts(self.active_findings, self.active_mislabelled)
        f, mis, o = self.findings, self.mislabelled, self.overlaps
        is_eval = o.get_column("target") == "eval"
        base_o = o.get_column("baseline")
        out["overlaps"] = int((~is_eval & ~base_o).sum())
        out["leaks"] = int((is_eval & ~base_o).sum())
        out["masked"] = {
            "findings": int(f.get_column("masked").sum()),
            "mislabelled_negatives": int(mis.get_column("masked").sum()),
        }
        out["new"] = {
            "findings": out["findings"],
            "overlaps": out["overlaps"],
            "leaks": out["leaks"],
            "mislabelled_negatives": out["mislabelled_negatives"],
        }
        out["in_baseline"] = {
            "findings": int(f.filter(pl.col("baseline") & ~pl.col("masked")).height),
            "overlaps": int((~is_eval & base_o).sum()),
            "leaks": int((is_eval & base_o).sum()),
            "mislabelled_negatives": int(mis.filter(pl.col("baseline") & ~pl.col("masked")).height),
        }
        return out

    def _counts(self, f: pl.DataFrame, mislabelled: pl.DataFrame | None = None) -> dict[str, Any]:
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
            "mislabelled_negatives": (self.mislabelled if mislabelled is None else mislabelled).height,
        }

    def breakdown(self, column: str) -> list[dict[str, Any]]:
        """The same numbers per value of ``source`` or ``cohort`` (of the anchor's row)."""
        rows = self.corpus.rows.select(pl.col(column).fill_null("(none)").alias("value"))
        per_row = rows.with_columns(
            pl.Series("candidates", self.judgement.candidates_per_row),
            pl.int_range(pl.len(), dtype=pl.Int64).alias("row"),
        )
        f = self.active_findings.join(per_row.select("row", "value"), left_on="anchor_row", right_on="row")
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
        one per evidence kind, overlaps and leaks; the numbers of ``counts()``."""
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
        out["overlaps"] = c["overlaps"]
        out["leaks"] = c["leaks"]
        return out

    METRICS = (
        "findings",
        "certain",
        "likely",
        "suspect",
        "fn-rate",
        "rows-affected",
        "mislabelled",
        *REGISTRY,
        "overlaps",
        "leaks",
    )

    def row_hashes(self) -> pl.Series:
        """Each row's content hash (``baseline.row_hashes``): how a later ``--baseline`` tells old rows
        from new ones, whatever their ids or lines."""
        if self._row_hashes is None:
            self._row_hashes = corpus_row_hashes(self.corpus)
        return self._row_hashes

    def text_hashes(self, tids: pl.Series) -> pl.Series:
        """The normalised-text hash of each text id (see ``overlap.text_hashes``)."""
        unique = tids.unique().sort()
        hashes = text_hashes(self.corpus.norms(unique))
        return tids.replace_strict(unique, hashes, return_dtype=pl.String) if unique.len() else tids.cast(pl.String)

    def hashed_findings(self, frame: pl.DataFrame | None = None) -> pl.DataFrame:
        """Findings (or other in-batch pairs: ``frame``) with the ids and text hashes that identify them
        across runs (baselines)."""
        f = self.findings if frame is None else frame
        ids = self.corpus.rows.get_column("id")
        return f.with_columns(
            ids.gather(f.get_column("anchor_row")).alias("anchor_id"),
            ids.gather(f.get_column("cand_row")).alias("candidate_id"),
            _role_names(f.get_column("cand_role")).alias("candidate_role"),
            self.text_hashes(pl.Series(self.corpus.anchor[f.get_column("anchor_row").to_numpy()])).alias(
                "anchor_text_hash"
            ),
            self.text_hashes(f.get_column("cand_tid")).alias("candidate_text_hash"),
        )

    def hashed_mislabelled(self) -> pl.DataFrame:
        mis = self.mislabelled
        ids = self.corpus.rows.get_column("id")
        return mis.with_columns(
            ids.gather(mis.get_column("anchor_row")).alias("row_id"),
            _role_names(mis.get_column("cand_role")).alias("negative"),
            self.text_hashes(pl.Series(self.corpus.anchor[mis.get_column("anchor_row").to_numpy()])).alias(
                "anchor_text_hash"
            ),
            self.text_hashes(mis.get_column("cand_tid")).alias("negative_text_hash"),
        )

    def overlaps_table(self) -> pl.DataFrame:
        """Overlaps with the new text, the matched reference text and both texts' hashes."""
        texts = self.overlap_texts
        if texts is None or texts.height != self.overlaps.height:  # texts unknown: nulls, row for row
            texts = pl.DataFrame(
                {k: pl.Series(k, [None] * self.overlaps.height, dtype=pl.String) for k in OVERLAP_TEXTS}
            )
        return pl.concat([self.overlaps, texts], how="horizontal")

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

    def report_rows(self) -> dict[str, pl.DataFrame]:
        """The report's row lists as frames: ``findings``, ``vetoed``, ``mislabelled_negatives``, ``overlaps``,
        ``row_hashes``."""
        pair = ("batch", "epoch", "direction", "anchor_id", "candidate_id", "candidate_role")
        hashes = ("anchor_text_hash", "candidate_text_hash")
        findings = self.hashed_findings().select(
            *pair,
            pl.col("severity").cast(pl.String),
            "severity_rule",
            "evidence",
            "why_not",
            "masked",
            "baseline",
            *hashes,
        )
        vetoed = self.hashed_findings(self.judgement.vetoed).select(*pair, "why_not", *hashes)
        mislabelled = self.hashed_mislabelled().select(
            "row_id",
            "negative",
            pl.col("severity").cast(pl.String),
            "severity_rule",
            "evidence",
            "masked",
            "baseline",
            "anchor_text_hash",
            "negative_text_hash",
        )
        overlaps = self.overlaps_table().select(
            "row_id",
            "file",
            "line",
            "role",
            "target",
            "target_id",
            "target_file",
            "target_line",
            "target_role",
            pl.col("severity").cast(pl.String),
            "evidence",
            "baseline",
            "text_hash",
            "target_text_hash",
        )
        row_hashes = self.row_hashes().to_frame()
        return {
            "findings": findings,
            "vetoed": vetoed,
            "mislabelled_negatives": mislabelled,
            "overlaps": overlaps,
            "row_hashes": row_hashes,
        }

    def report(self, rows: dict[str, Any] | None = None) -> dict[str, Any]:
        """The JSON report (``schema_version`` 2). ``rows`` stands in for the four lists (a
        streaming writer passes placeholders and writes ``report_rows()`` slice by slice)."""
        if rows is None:
            rows = {
                name: frame.to_series().to_list() if name == "row_hashes" else frame.to_dicts()
                for name, frame in self.report_rows().items()
            }
        c = self.counts()
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
                "row_hashes": rows["row_hashes"],
            },
            "plan": {
                "source": self.plan.source,
                "device_batches": self.plan.n_batches,
                "global_batches": self.n_global_batches,
                "world_size": self.config.plan.world_size,
                "directions": list(self.config.loss.directions),
            },
            "detectors": self.judgement.detector_info,
            "counts": c,
            "by_source": self.breakdown("source"),
            "by_cohort": self.breakdown("cohort"),
            "findings": rows["findings"],
            "vetoed": rows["vetoed"],
            "mislabelled_negatives": rows["mislabelled_negatives"],
            "reference": self.overlap_info or None,
            "overlaps": rows["overlaps"],
            "baseline": None
            if self.baseline_file is None
            else {"file": self.baseline_file, "matched": c["in_baseline"], "new": c["new"]},
            "warnings": list(self.warnings),
        }


@dataclass
class Prepared:
    """Loaded rows, their corpus and the detectors prepared on it: the stages before a plan."""

    config: AuditConfig
    loaded: LoadResult
    corpus: Corpus
    detectors: list[Detector]


def prepare(
    paths: Sequence[str],
    config: AuditConfig | None = None,
    *,
    detectors: Sequence[Detector] | None = None,
    progress: Progress | None = None,
    before_evidence: Callable[[LoadResult], None] | None = None,
    extend_rows: Callable[[LoadResult], LoadResult] | None = None,
    encoder: Callable[..., Any] | None = None,
    batches_for: Callable[[Corpus], GlobalBatches] | None = None,
    can_stream: bool = True,
) -> Prepared:
    """Load, normalise and prepare the evidence (embedding texts when the detectors need it).
    ``extend_rows`` may add rows before the corpus is built (``--with-existing``); ``before_evidence`` runs on
    the loaded rows, so a bad plan or manifest fails before any embedding. ``batches_for`` gives the
    global batches the texts will be judged in: the embedding store's first stage embeds for them only.
    ``can_stream``: whether the caller could stream an input too large for memory instead (``scan`` can;
    ``manifest`` and ``negatives`` cannot), which a refusal then offers."""
    cfg = config or AuditConfig()
    hint = engine.streaming_hint(cfg) if can_stream else ""
    limit = resources.parse_size(cfg.max_memory)
    files = expand_paths(list(paths))
    where = str(files[0]) if len(files) == 1 else f"{files[0]} (+{len(files) - 1} more files)"
    n_bytes = resources.input_bytes(files)
    resources.check_memory(
        resources.load_estimate(n_bytes),
        limit,
        f"reading {resources.human(n_bytes)} of input",
        where,
        lambda share: (
            f"audit the data in parts of at most {resources.human(int(n_bytes * share))} "
            "(split -C SIZE FILE part- keeps lines whole)" + hint
            if n_bytes * share >= 1 << 10
            else None  # not a row's worth of it fits: check_memory says how much to raise the limit
        ),
    )
    with _stage(progress, "Loading files"):
        loaded = load_rows(
            [str(f) for f in files], cfg.mapping, cfg.on_bad_row, cfg.normalise, cfg.delimiter
        )  # globbed once
        if extend_rows is not None:
            loaded = extend_rows(loaded)
    with _stage(progress, "Normalising texts"):
        corpus = build_corpus(loaded.rows, cfg.normalise)
    emb = cfg.embedding
    spaces = (1 if emb.query_prompt == emb.doc_prompt else 2) if emb.enabled else 0
    if spaces == 1 and emb.first_stage == "static":
        spaces = 2  # the first stage holds static vectors (float32) and their map (float16): a space's worth
    text_bytes = int(corpus.texts.select(pl.col("text").str.len_bytes().sum()).item() or 0)
    resources.check_memory(
        resources.audit_estimate(corpus.n_texts, text_bytes, spaces),
        limit,
        f"auditing {corpus.n_rows:,} rows ({corpus.n_texts:,} distinct texts" + (", embedded)" if spaces else ")"),
        where,
        lambda share: (
            f"audit the data in parts of at most {resources.round_down(corpus.n_rows * share):,} rows "
            "(split -l ROWS FILE part-)" + hint
            if corpus.n_rows * share >= 1
            else None  # not a row of it fits: check_memory says how much to raise the limit
        ),
    )
    if before_evidence is not None:
        before_evidence(loaded)
    active = list(detectors) if detectors is not None else default_detectors(cfg, progress, encoder)
    if batches_for is not None:
        stores = {id(s): s for d in active if (s := getattr(d, "store", None)) is not None}
        if stores:
            batches = batches_for(corpus)
            for store in stores.values():
                store.batches = batches
    for detector in active:
        with _stage(progress, f"Preparing {detector.name} evidence"):
            detector.prepare(corpus)
    return Prepared(cfg, loaded, corpus, active)


@contextmanager
def _stage(progress: Progress | None, description: str) -> Iterator[None]:
    """A live bar (with its elapsed time) for a stage that reports no finer progress."""
    tick = progress(description, 1) if progress else None
    yield
    if tick:
        tick(1)


def judge_plan(prepared: Prepared, plan: Plan, world_size: int, progress: Progress | None = None) -> Judgement:
    """Judge every global batch of ``plan``."""
    batches = plan.global_batches(world_size)
    tick = progress("Comparing batches", len(batches)) if progress else None
    return judge(prepared.corpus, batches, prepared.detectors, prepared.config.loss.directions, tick)


def audit(
    paths: Sequence[str],
    config: AuditConfig | None = None,
    *,
    detectors: Sequence[Detector] | None = None,
    progress: Progress | None = None,
    config_file: str | None = None,
    every_vector: bool = False,
) -> AuditResult:
    """Audit pair files for in-batch false negatives under ``config``'s batch plan and loss.

    ``every_vector``: the caller reads every text's vector afterwards (``negatives.alleged_negatives``), so
    ``--engine ray`` runs in memory with the vectors computed on Ray rather than judging runs on the workers.

    A plan file that is a manifest (``contrast-audit manifest``) is checked against the data's fingerprint,
    planned with its own world size, and the findings it masks or marks as positives are flagged ``masked``.
    With ``reference.against``/``reference.eval`` new rows are checked against existing and eval data.
    """
    cfg = config or AuditConfig()
    baseline = read_baseline(cfg.baseline, SCHEMA_VERSION) if cfg.baseline else None  # fail early
    files = expand_paths(list(paths))
    if cfg.since:
        baseline = baseline_at(cfg.since, [str(f) for f in files], cfg)
    if detectors is not None:  # detectors of the caller's own are prepared on the whole corpus
        if cfg.engine in ("stream", "ray"):
            raise ConfigError(
                f"audit(detectors=...) runs on the in-memory engine, not --engine {cfg.engine}",
                fix="leave the engine at auto or memory, or leave detectors out",
            )
        return _in_memory(paths, cfg, baseline, detectors, progress, config_file, can_stream=False)
    chosen = engine.choose(cfg, files)
    if chosen == "stream" or (chosen == "ray" and not cfg.embedding.enabled and not engine.embeds_on_ray(cfg)):
        return _streamed(paths, cfg, baseline, progress, config_file)
    if chosen == "ray":
        from contrast_audit.engine import on_ray

        in_memory = engine.embeds_on_ray(cfg) or (every_vector and cfg.embedding.enabled)
        with on_ray.connected(cfg.ray_address) as ray:
            if not in_memory and not on_ray.gpus(ray):  # the runs judged and embedded on the workers
                return _streamed(paths, cfg, baseline, progress, config_file)
            encoder = on_ray.embedder(ray, progress)  # the vectors on Ray, everything else in memory
            return _in_memory(paths, cfg, baseline, detectors, progress, config_file, encoder, not every_vector)
    # A file read twice is fine; standard input or a FIFO is not: those stay with the refusal.
    if cfg.engine != "auto" or not engine.streams(cfg) or not all(resources.is_regular(f) for f in files):
        return _in_memory(paths, cfg, baseline, detectors, progress, config_file, can_stream=not every_vector)
    try:
        return _in_memory(paths, cfg, baseline, detectors, progress, config_file)
    except resources.MemoryRefused:
        pass  # the distinct texts do not fit after all; streamed below, once the failed attempt is gone
    return _streamed(paths, cfg, baseline, progress, config_file)


def baseline_at(rev: str, files: list[str], cfg: AuditConfig) -> Baseline:
    """``--since REV``: the baseline is the scanned files as they are at git revision ``rev`` (a file the
    change adds has no rows there). Their rows' content hashes always; with reference data (``--against``,
    ``--eval``), the same audit of them, so that the overlaps they already had stay in the baseline."""
    import tempfile

    from contrast_audit.baseline import OVERLAP_KEY, from_hex
    from contrast_audit.io.git import files_at

    with tempfile.TemporaryDirectory(prefix="contrast-audit-since-") as tmp:
        base_files = files_at(rev, files, Path(tmp))
        where = f"{rev} (git)"
        no_keys = pl.DataFrame(schema={k: pl.String for k in OVERLAP_KEY})
        if not base_files:
            return Baseline(where, np.zeros(0, dtype=np.uint64), no_keys)
        # The base's own bad rows are the base's: its good rows are what the new ones are measured against.
        base_cfg = replace(cfg, since=None, baseline=None, on_bad_row="skip")
        if cfg.reference.against or cfg.reference.eval:
            result = audit(base_files, replace(base_cfg, plan=replace(cfg.plan, plan_file=None)))
            keys = result.overlaps_table().select(OVERLAP_KEY).cast(pl.String).unique()
            return Baseline(where, from_hex(result.row_hashes().to_list()), keys)
        loaded = load_rows(base_files, cfg.mapping, "skip", cfg.normalise, cfg.delimiter)
        hashes = corpus_row_hashes(build_corpus(loaded.rows, cfg.normalise))
        return Baseline(where, from_hex(hashes.to_list()), no_keys)


def _in_memory(
    paths: Sequence[str],
    cfg: AuditConfig,
    baseline: Baseline | None,
    detectors: Sequence[Detector] | None,
    progress: Progress | None,
    config_file: str | None,
    encoder: Callable[..., Any] | None = None,
    can_stream: bool = True,
) -> AuditResult:
    """``audit`` on the in-memory engine; ``encoder`` computes the vectors the cache lacks elsewhere;
    ``can_stream`` as ``prepare`` reads it."""
    ref = cfg.reference
    existing = load_existing(ref.against, ref.against_columns or cfg.mapping, cfg.on_bad_row) if ref.against else None
    manifest = None
    plan: Plan | None = None

    def extend(loaded: LoadResult) -> LoadResult:
        return with_existing_rows(loaded, existing[0]) if existing is not None and ref.with_existing else loaded

    def read_plan(loaded: LoadResult) -> None:
        nonlocal manifest, plan, cfg
        ids = loaded.rows.get_column("id")
        if cfg.plan.plan_file and is_manifest_file(cfg.plan.plan_file):
            manifest = read_manifest(cfg.plan.plan_file)
            check_fingerprint(manifest, loaded.rows, ", ".join(loaded.files))
            plan = manifest_plan(manifest, ids, loaded.rows.get_column("negatives").list.len().fill_null(0).to_numpy())
            cfg = replace(cfg, plan=replace(cfg.plan, world_size=manifest.world_size))
        elif cfg.plan.plan_file:
            plan = read_plan_file(cfg.plan.plan_file, ids)

    def batches_for(corpus: Corpus) -> GlobalBatches:
        nonlocal plan
        if plan is None:
            with _stage(progress, "Planning batches"):
                plan = make_plan(cfg.plan, corpus.n_rows, corpus.raw)
        return plan.global_batches(cfg.plan.world_size)

    prepared = prepare(
        paths,
        cfg,
        detectors=detectors,
        progress=progress,
        before_evidence=read_plan,
        extend_rows=extend,
        encoder=encoder,
        batches_for=batches_for,
        can_stream=can_stream,
    )
    prepared.config = cfg
    loaded, corpus, active = prepared.loaded, prepared.corpus, prepared.detectors
    is_new = (
        loaded.rows.get_column("is_new").to_numpy()
        if "is_new" in loaded.rows.columns
        else np.ones(loaded.rows.height, bool)
    )
    if plan is None:
        with _stage(progress, "Planning batches"):
            plan = make_plan(cfg.plan, corpus.n_rows, corpus.raw)
    judgement = judge_plan(prepared, plan, cfg.plan.world_size, progress)
    if manifest is not None:
        judgement = mark_masked(judgement, manifest, corpus.rows.get_column("id"))
    if not is_new.all():  # --with-existing: report what involves a new row
        keep = pl.Series(is_new)
        judgement.findings = judgement.findings.filter(
            keep.gather(judgement.findings.get_column("anchor_row"))
            | keep.gather(judgement.findings.get_column("cand_row"))
        )
        judgement.mislabelled = judgement.mislabelled.filter(
            keep.gather(judgement.mislabelled.get_column("anchor_row"))
        )
        by_direction, per_row = candidate_counts(
            corpus, plan.global_batches(cfg.plan.world_size), cfg.loss.directions, is_new
        )
        judgement.candidates, judgement.candidates_by_direction = sum(by_direction.values()), by_direction
        judgement.candidates_per_row = per_row
    n_sets = len(plan.global_batches(cfg.plan.world_size))
    result = AuditResult(cfg, loaded, corpus, plan, n_sets, judgement, config_file, active)
    stores = {id(s): s for d in active if (s := getattr(d, "store", None)) is not None}
    cache_warnings = list(dict.fromkeys(w for s in stores.values() for w in getattr(s, "warnings", [])))
    plan_notes = plan_warnings(cfg, corpus.n_rows, plan, n_sets, judgement.candidates)
    result.warnings = [*loaded.warnings, *plan_notes, *cache_warnings]
    store = next((d.store for d in active if getattr(d, "store", None) is not None), None)
    parts = []
    if ref.against or ref.eval:
        targets = []
        if existing is not None:
            targets.append(distinct_targets("existing", existing[1], cfg, existing[0].files))
        if ref.eval:
            files, texts = load_eval(ref.eval, ref.eval_columns or cfg.mapping, ref.eval_text, cfg.on_bad_row)
            targets.append(distinct_targets("eval", texts, cfg, files))
        parts.append(find_overlaps(corpus, is_new, targets, cfg, store=store, progress=progress))
    repeats = None
    fresh = baseline.new_rows(result.row_hashes()) & is_new if baseline is not None else None
    if fresh is not None and ref.repeats:
        # A new row that repeats an old row of the same data is an overlap with it, whatever the batches.
        old = ~fresh & is_new  # --with-existing reference rows are --against's
        repeats = {"new_rows": int(fresh.sum()), "existing_rows": int(old.sum())}
        if fresh.any() and old.any():
            target = repeat_targets(loaded.rows, old, cfg, loaded.files)
            parts.append(find_overlaps(corpus, fresh, [target], cfg, store=store, progress=progress))
    if parts:
        found = merge_overlaps(corpus.rows, parts)
        result.overlaps, result.overlap_texts = found.overlaps, found.texts
        result.overlap_info = dict(found.info) if ref.against or ref.eval else {}
    if repeats is not None:
        result.overlap_info["repeats"] = repeats
    if baseline is not None:
        mark_baseline(result, baseline, fresh)
    return result


def _streamed(
    paths: Sequence[str],
    cfg: AuditConfig,
    baseline: Baseline | None,
    progress: Progress | None,
    config_file: str | None,
) -> AuditResult:
    """``audit`` on the streaming or Ray engine (``engine``): the same result, its texts read back from disk."""
    from contrast_audit.engine import stream

    sizes = stream.Sizes(limit=resources.parse_size(cfg.max_memory))
    if cfg.engine == "ray":
        from contrast_audit.engine import on_ray

        s = on_ray.run(paths, cfg, sizes, progress, address=cfg.ray_address)
    else:
        s = stream.run(paths, cfg, sizes, progress)
    n_sets = len(s.batches)
    result = AuditResult(cfg, s.loaded, s.corpus, s.plan, n_sets, s.judgement, config_file, s.detectors)
    result._row_hashes = s.row_hashes
    plan_notes = plan_warnings(cfg, s.corpus.n_rows, s.plan, n_sets, s.judgement.candidates)
    shared = next((st.shared for d in s.detectors if (st := getattr(d, "store", None)) is not None), None)
    result.warnings = [*s.loaded.warnings, *plan_notes, *(shared.warnings if shared is not None else [])]
    fresh = baseline.new_rows(result.row_hashes()) if baseline is not None else None
    if fresh is not None and cfg.reference.repeats:
        # Texts stay on disk: repeats of old rows by text id, exact ones (near ones need the in-memory engine).
        found = exact_repeats(s.corpus, fresh, ~fresh)
        result.overlaps, result.overlap_texts = found.overlaps, found.texts
        result.overlap_info = {"repeats": {"new_rows": int(fresh.sum()), "existing_rows": int((~fresh).sum())}}
        result.warnings.append(
            f"the {cfg.engine if cfg.engine != 'auto' else 'stream'} engine checks new rows for exact repeats of old "
            "rows only; near repeats need the in-memory engine (--engine memory, with --max-memory to allow it)"
        )
    if baseline is not None:
        mark_baseline(result, baseline, fresh)
    return result


def mark_baseline(result: AuditResult, baseline: Baseline, fresh: np.ndarray) -> None:
    """Flag what ``baseline`` already holds (``baseline`` module: a finding is new when a row on either
    side is new; ``fresh``: the rows it lacks, ``Baseline.new_rows``), and count candidates over the pairs
    with a new row, so that ``fn_rate`` and the per-source rates divide what counts by what could."""
    result.baseline_file = baseline.path
    rows = result.corpus.rows
    if "is_new" in rows.columns:  # --with-existing: the reference rows are never new
        fresh = fresh & rows.get_column("is_new").to_numpy()
    result.new_rows = fresh
    keep = pl.Series(fresh)
    j = result.judgement
    f = j.findings
    j.findings = f.with_columns(
        (~(keep.gather(f.get_column("anchor_row")) | keep.gather(f.get_column("cand_row")))).alias("baseline")
    )
    j.mislabelled = j.mislabelled.with_columns((~keep.gather(j.mislabelled.get_column("anchor_row"))).alias("baseline"))
    o = result.overlaps
    at = overlap_rows(rows, o)
    row_new = np.where(at >= 0, fresh[np.maximum(at, 0)], True) if fresh.size else np.ones(o.height, bool)
    flags = baseline.mark_overlaps(result.overlaps_table(), row_new, scanned_targets(rows, o))
    result.overlaps = o.with_columns(flags)
    cfg = result.config
    by_direction, per_row = candidate_counts(
        result.corpus, result.plan.global_batches(cfg.plan.world_size), cfg.loss.directions, fresh
    )
    j.candidates, j.candidates_by_direction, j.candidates_per_row = sum(by_direction.values()), by_direction, per_row


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


def _role_names(codes: pl.Series) -> pl.Series:
    names = {int(code): role_name(int(code)) for code in codes.unique().to_list()}
    return codes.replace_strict(names, return_dtype=pl.String) if names else codes.cast(pl.String)


__all__ = [
    "OVERLAP_SCHEMA",
    "SCHEMA_VERSION",
    "AuditResult",
    "Prepared",
    "audit",
    "empty_overlaps",
    "judge_plan",
    "plan_warnings",
    "prepare",
]
