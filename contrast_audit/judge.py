"""Known positives × comparison sets → findings with severity.

For every global batch and every direction of the loss, each anchor is compared with the
candidates MultipleNegativesRankingLoss puts in its softmax denominator; each detector marks the
candidates equivalent to the anchor's known positives. A row's own hard negatives are judged once,
apart, as possible mislabelled negatives.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
import polars as pl

from contrast_audit.corpus import ANCHOR_ROLE, POSITIVE_ROLE, Corpus
from contrast_audit.evidence import CERTAIN, SEVERITY_NAMES, Detector, Pairs
from contrast_audit.evidence.blocks import BatchBlock, Slots
from contrast_audit.plan import GlobalBatches

PAIRS_PER_CHUNK = 131072


@dataclass
class Judgement:
    findings: pl.DataFrame
    mislabelled: pl.DataFrame
    candidates: int
    candidates_by_direction: dict[str, int]
    candidates_per_row: np.ndarray
    detector_info: dict[str, dict] = field(default_factory=dict)
    # In-batch pairs a semantic detector matched and a guard vetoed, found by no other detector
    # (``findings``' columns; ``severity`` null, ``why_not`` saying which guard and with what value).
    vetoed: pl.DataFrame = field(default_factory=lambda: empty_findings())


def batch_pairs(gb: GlobalBatches, start: int, stop: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Every ordered pair of distinct occurrences in global batches ``start..stop-1``:
    (batch index, anchor row, other row)."""
    return BatchBlock(gb.rows, gb.offsets, start, stop).pairs()[:3]


def direction_pairs(
    corpus: Corpus,
    direction: str,
    batch: np.ndarray,
    anchor: np.ndarray,
    other: np.ndarray,
    at: Slots | None = None,
) -> tuple[Pairs, np.ndarray]:
    """The candidates of one direction for (anchor row, other row) pairs, and their batch ids; with
    ``at`` (``BatchBlock.pairs``), each placed in its batch's similarity matrices."""
    if direction in ("query_to_query", "doc_to_query"):
        roles = np.full(anchor.shape[0], ANCHOR_ROLE, dtype=np.int64)
        return Pairs(direction, anchor, other, roles, corpus.anchor[other], at), batch
    # query_to_doc, doc_to_doc: other rows' positives and every hard negative of other rows.
    parts_anchor = [anchor]
    parts_other = [other]
    parts_role = [np.full(anchor.shape[0], POSITIVE_ROLE, dtype=np.int64)]
    parts_tid = [corpus.positive[other]]
    parts_batch = [batch]
    parts_at = [at]
    for k in range(corpus.negatives.shape[1]):
        tid = corpus.negatives[other, k]
        has = tid >= 0
        parts_anchor.append(anchor[has])
        parts_other.append(other[has])
        parts_role.append(np.full(int(has.sum()), k + 1, dtype=np.int64))
        parts_tid.append(tid[has])
        parts_batch.append(batch[has])
        parts_at.append(None if at is None else at.take(has))
    pairs = Pairs(
        direction,
        np.concatenate(parts_anchor),
        np.concatenate(parts_other),
        np.concatenate(parts_role),
        np.concatenate(parts_tid),
        None if at is None else Slots.concat(parts_at),
    )
    return pairs, np.concatenate(parts_batch)


def chunk_bounds(gb: GlobalBatches, width: int) -> list[tuple[int, int]]:
    """Runs of consecutive global batches holding about ``PAIRS_PER_CHUNK`` candidate pairs each."""
    if len(gb) == 0:
        return []
    cost = np.cumsum(gb.sizes.astype(np.int64) ** 2 * width)
    # A chunk ends where the running cost crosses the next multiple of PAIRS_PER_CHUNK.
    ends = np.flatnonzero(np.diff(cost // PAIRS_PER_CHUNK) > 0) + 1
    bounds = np.unique(np.r_[0, ends, len(gb)])
    return [(int(a), int(b)) for a, b in zip(bounds[:-1], bounds[1:], strict=True)]


def evaluate(detectors: Sequence[Detector], pairs: Pairs) -> tuple[np.ndarray, np.ndarray, list]:
    """Run every detector on the candidate pairs: (found, highest severity or -1, each detector's hits)."""
    hits = [d.detect(pairs) for d in detectors if not hasattr(d, "verify")]
    found = np.zeros(len(pairs), dtype=bool)
    severity = np.full(len(pairs), -1, dtype=np.int8)
    for h in hits:
        found |= h.mask
        severity = np.where(h.mask, np.maximum(severity, h.severity), severity)
    # A verifier (a cross-encoder) rescores what is found short of certain: its verdict is the severity.
    for v in (d for d in detectors if hasattr(d, "verify")):
        checked = found & (severity < CERTAIN)
        h = v.verify(pairs, checked)
        severity = np.where(checked, h.severity, severity)
        hits.append(h)
    return found, severity, hits


def severity_rules(hits: list, severity: np.ndarray, found: np.ndarray) -> pl.Series:
    """For each found pair, the rule that set its severity: that of the first detector (in the
    registry's order) whose evidence reaches the pair's severity."""
    names: list[str] = []
    offset = np.zeros(len(hits), dtype=np.int64)
    for i, h in enumerate(hits):
        offset[i] = len(names)
        names += h.rule_names()
    code = np.full(found.shape[0], -1, dtype=np.int64)
    # A verifier's verdict is the severity of every pair it scored.
    for i in sorted(range(len(hits)), key=lambda i: hits[i].kind != "verifier"):
        h = hits[i]
        take = h.mask & (code < 0) & (h.severity == severity)
        code[take] = offset[i] + (0 if h.rule is None else h.rule[take])
    return pl.Series("severity_rule", names, dtype=pl.String).gather(code[found])


# Detectors whose score says how near a pair came when they do not flag it (a finding's ``why_not``).
EXPLAINED = ("embedding", "minhash", "pair", "anchor-embedding", "margin")
WHY_NOT = pl.List(
    pl.Struct(
        {
            "kind": pl.String,
            "score": pl.Float64,
            "threshold": pl.Float64,
            "guard": pl.String,
            "guard_value": pl.Float64,
            "guard_threshold": pl.Float64,
            "rule": pl.String,
        }
    )
)


def _explained(h) -> bool:
    """Whether a detector's hits say how near a pair came: a semantic detector that looked (a NaN bar:
    the margin rule when nothing it would find is reported)."""
    return h.kind in EXPLAINED and not np.isnan(h.threshold)


def _frame(columns: dict[str, np.ndarray], hits: list, found: np.ndarray) -> pl.DataFrame:
    """The pairs at ``found`` (found or vetoed) with their severity rule, evidence and, for those short of
    ``likely``, why the semantic detectors that did not flag them did not: the score against the bar, or
    the guard that vetoed the match with its value."""
    data = {name: values[found] for name, values in columns.items()}
    data["severity_rule"] = severity_rules(hits, columns["severity_rank"], found)
    explain = columns["severity_rank"][found] < 1  # suspect findings and vetoed pairs
    for idx, h in enumerate(hits):
        data[f"hit_{idx}"] = h.mask[found]
        data[f"score_{idx}"] = h.score[found]
        if _explained(h):
            vetoed = np.full(found.shape[0], -1, dtype=np.int64) if h.vetoed is None else h.vetoed.astype(np.int64)
            names = pl.Series([*h.guards, None], dtype=pl.String)
            bars = pl.Series([*h.guard_bars, None], dtype=pl.Float64)
            code = np.where(vetoed[found] >= 0, vetoed[found], len(h.guards))
            data[f"why_{idx}"] = explain & ~h.mask[found]
            data[f"guard_{idx}"] = names.gather(code)
            data[f"bar_{idx}"] = bars.gather(code)
            value = np.full(found.shape[0], np.nan) if h.veto_value is None else h.veto_value
            data[f"value_{idx}"] = value[found]
            # A bar met with no veto and no finding: the rule that held says why (the margin rule alone is
            # suspect, reported only with --margin).
            rules = pl.Series([*h.rules, None], dtype=pl.String)
            met = (h.score[found] >= h.threshold) & (vetoed[found] < 0) & (h.rule is not None)
            rule = np.where(met, h.rule[found] if h.rule is not None else 0, len(h.rules))
            data[f"rule_{idx}"] = rules.gather(rule)
    frame = pl.DataFrame(data)
    structs = [
        pl.when(pl.col(f"hit_{idx}")).then(
            pl.struct(
                pl.lit(h.kind).alias("kind"),
                pl.col(f"score_{idx}").alias("score"),
                pl.lit(h.threshold, pl.Float64).alias("threshold"),
            )
        )
        for idx, h in enumerate(hits)
    ]
    why = [
        pl.when(pl.col(f"why_{idx}")).then(
            pl.struct(
                pl.lit(h.kind).alias("kind"),
                pl.col(f"score_{idx}").fill_nan(None).alias("score"),  # null: the full model did not compare them
                pl.lit(h.threshold, pl.Float64).alias("threshold"),
                pl.col(f"guard_{idx}").alias("guard"),
                pl.col(f"value_{idx}").fill_nan(None).alias("guard_value"),
                pl.col(f"bar_{idx}").alias("guard_threshold"),
                pl.col(f"rule_{idx}").alias("rule"),
            )
        )
        for idx, h in enumerate(hits)
        if _explained(h)
    ]
    why_not = (
        pl.concat_list(why).list.drop_nulls().cast(WHY_NOT) if why else pl.lit(pl.Series([[]], dtype=WHY_NOT)).first()
    )
    scratch = ("hit_", "score_", "why_", "guard_", "bar_", "value_", "rule_")
    return frame.with_columns(
        pl.concat_list(structs).list.drop_nulls().alias("evidence"), why_not.alias("why_not")
    ).drop([c for c in frame.columns if c.startswith(scratch)])


def vetoed_pairs(hits: list, found: np.ndarray) -> np.ndarray:
    """Pairs some guard vetoed that no detector found."""
    out = np.zeros(found.shape[0], dtype=bool)
    for h in hits:
        if h.vetoed is not None:
            out |= h.vetoed >= 0
    return out & ~found


@dataclass
class Compared:
    """What comparing a run of global batches gives before it is sorted: the frames of found pairs,
    the candidates per direction and per anchor row."""

    frames: list[pl.DataFrame]
    by_direction: dict[str, int]
    per_row: np.ndarray


def compare_batches(
    corpus: Corpus,
    batches: GlobalBatches,
    detectors: Sequence[Detector],
    directions: Sequence[str],
    progress: Callable[[int], None] | None = None,
    chunks: Sequence[tuple[int, int]] | None = None,
) -> Compared:
    """Compare every anchor with its comparison set in every global batch of ``batches``, chunk by chunk
    (``chunks``: the batches of each, ``chunk_bounds`` by default): the batches of a chunk share their
    similarity matrices."""
    width = 1 + corpus.negatives.shape[1]
    per_row = np.zeros(corpus.n_rows, dtype=np.int64)
    frames: list[pl.DataFrame] = []
    by_direction = dict.fromkeys(directions, 0)
    for start, stop in chunks if chunks is not None else chunk_bounds(batches, width):
        # One block per run of batches, shared by the directions: a similarity matrix one direction
        # computed (the anchors' paraphrases, say) serves the next.
        batch, anchor, other, at = BatchBlock(batches.rows, batches.offsets, start, stop).pairs()
        for direction in directions:
            pairs, pair_batch = direction_pairs(corpus, direction, batch, anchor, other, at)
            by_direction[direction] += len(pairs)
            per_row += np.bincount(pairs.anchor_row, minlength=corpus.n_rows)
            found, severity, hits = evaluate(detectors, pairs)
            # Vetoed pairs travel with the found ones, at severity -1, for the report's ``vetoed`` list.
            vetoed = vetoed_pairs(hits, found)
            severity = np.where(vetoed, -1, severity).astype(np.int8)
            found = found | vetoed
            if found.any():
                frames.append(
                    _frame(
                        {
                            "batch": pair_batch,
                            "epoch": batches.epoch[pair_batch],
                            "anchor_row": pairs.anchor_row,
                            "cand_row": pairs.cand_row,
                            "cand_role": pairs.cand_role,
                            "cand_tid": pairs.cand_tid,
                            "severity_rank": severity,
                        },
                        hits,
                        found,
                    ).with_columns(pl.lit(direction).alias("direction"))
                )
            if progress:
                progress(stop - start)
    return Compared(frames, by_direction, per_row)


def judge(
    corpus: Corpus,
    batches: GlobalBatches,
    detectors: Sequence[Detector],
    directions: Sequence[str],
    progress: Callable[[int], None] | None = None,
) -> Judgement:
    """Compare every anchor with its comparison set in every global batch."""
    compared = compare_batches(corpus, batches, detectors, directions, progress)
    findings = finish_findings(compared.frames, directions)
    vetoed = finish_vetoed(compared.frames, directions)
    mislabelled = mislabelled_negatives(corpus, detectors)
    for d in detectors:  # detectors that buffer work (the token cache) complete it here
        getattr(d, "finish", lambda: None)()
    return Judgement(
        findings=findings,
        mislabelled=mislabelled,
        candidates=sum(compared.by_direction.values()),
        candidates_by_direction=compared.by_direction,
        candidates_per_row=compared.per_row,
        detector_info={d.name: d.info() for d in detectors},
        vetoed=vetoed,
    )


def candidate_counts(
    corpus: Corpus, batches: GlobalBatches, directions: Sequence[str], involved: np.ndarray
) -> tuple[dict[str, int], np.ndarray]:
    """Candidates per direction and per anchor row, counting only the (anchor, candidate) pairs in which
    an ``involved`` row takes part (``scan --with-existing``: pairs with a new row).

    With every row involved this equals ``judge``'s counts: an anchor occurrence meets every other
    occurrence of its global batch, through its positive and each hard negative in the document
    directions and through its anchor otherwise.
    """
    rows = batches.rows
    batch_of = np.repeat(np.arange(len(batches)), batches.sizes)
    inv = involved[rows]
    per_row = np.zeros(corpus.n_rows, dtype=np.int64)
    by_direction: dict[str, int] = {}
    texts_per_row = 1 + (corpus.negatives >= 0).sum(axis=1)  # a row's positive and hard negatives
    for direction in directions:
        if direction in ("query_to_query", "doc_to_query"):
            weight = np.ones(rows.shape[0], dtype=np.int64)
        else:
            weight = texts_per_row[rows]
        total = np.bincount(batch_of, weights=weight, minlength=len(batches)).astype(np.int64)
        of_involved = np.bincount(batch_of, weights=weight * inv, minlength=len(batches)).astype(np.int64)
        # An involved anchor counts every other occurrence; any other anchor only the involved ones.
        count = np.where(inv, total[batch_of] - weight, of_involved[batch_of])
        per_row += np.bincount(rows, weights=count, minlength=corpus.n_rows).astype(np.int64)
        by_direction[direction] = int(count.sum())
    return by_direction, per_row


_SEVERITY = pl.Enum(["certain", "likely", "suspect"])


def _severity_name(col: str = "severity_rank") -> pl.Expr:
    """The severity's name; null for a vetoed pair (-1)."""
    return (
        pl.col(col)
        .replace_strict(SEVERITY_NAMES, default=None, return_dtype=pl.String)
        .cast(_SEVERITY)
        .alias("severity")
    )


def finish_findings(frames: list[pl.DataFrame], directions: Sequence[str]) -> pl.DataFrame:
    """The found pairs of every run in one frame, in report order."""
    return _finish([f.filter(pl.col("severity_rank") >= 0) for f in frames], directions)


def finish_vetoed(frames: list[pl.DataFrame], directions: Sequence[str]) -> pl.DataFrame:
    """The vetoed pairs (severity -1) of every run in one frame, in report order, severity null."""
    return _finish([f.filter(pl.col("severity_rank") < 0) for f in frames], directions)


def _finish(frames: list[pl.DataFrame], directions: Sequence[str]) -> pl.DataFrame:
    frames = [f for f in frames if f.height]
    if not frames:
        return empty_findings()
    order = {d: i for i, d in enumerate(directions)}
    return (
        pl.concat(frames)
        .with_columns(_severity_name(), pl.col("direction").replace_strict(order, return_dtype=pl.Int64).alias("_d"))
        .sort(["batch", "_d", "anchor_row", "cand_row", "cand_role"])
        .drop("_d")
        .with_columns(pl.lit(False).alias("masked"), pl.lit(False).alias("baseline"))
        .select(empty_findings().columns)
    )


def empty_findings() -> pl.DataFrame:
    evidence = pl.List(pl.Struct({"kind": pl.String, "score": pl.Float64, "threshold": pl.Float64}))
    return pl.DataFrame(
        schema={
            "batch": pl.Int64,
            "epoch": pl.Int64,
            "direction": pl.String,
            "anchor_row": pl.Int64,
            "cand_row": pl.Int64,
            "cand_role": pl.Int64,
            "cand_tid": pl.Int64,
            "severity": _SEVERITY,
            "severity_rank": pl.Int8,
            "severity_rule": pl.String,
            "evidence": evidence,
            "why_not": WHY_NOT,
            "masked": pl.Boolean,
            "baseline": pl.Boolean,
        }
    )


MISLABELLED_COLUMNS = (
    "anchor_row",
    "cand_role",
    "cand_tid",
    "severity",
    "severity_rank",
    "severity_rule",
    "evidence",
    "masked",
    "baseline",
)


def mislabelled_negatives(
    corpus: Corpus, detectors: Sequence[Detector], rows: np.ndarray | None = None
) -> pl.DataFrame:
    """Each row's own hard negatives (of ``rows``, sorted, or of every row), judged against that row's
    anchor and positive."""
    rows_idx, slot = np.nonzero(corpus.negatives >= 0)
    if rows is not None:
        keep = np.isin(rows_idx, rows)
        rows_idx, slot = rows_idx[keep], slot[keep]
    empty = empty_findings().select(MISLABELLED_COLUMNS)
    if rows_idx.shape[0] == 0:
        return empty
    rows_idx = rows_idx.astype(np.int64)
    pairs = Pairs("query_to_doc", rows_idx, rows_idx, slot.astype(np.int64) + 1, corpus.negatives[rows_idx, slot])
    found, severity, hits = evaluate(detectors, pairs)
    if not found.any():
        return empty
    frame = _frame(
        {
            "anchor_row": pairs.anchor_row,
            "cand_role": pairs.cand_role,
            "cand_tid": pairs.cand_tid,
            "severity_rank": severity,
        },
        hits,
        found,
    )
    return finish_mislabelled([frame])


def finish_mislabelled(frames: list[pl.DataFrame]) -> pl.DataFrame:
    """Judged hard negatives (``anchor_row``, ``cand_role``, ``cand_tid``, ``severity_rank``,
    ``severity_rule``, ``evidence``) in one frame, in report order."""
    empty = empty_findings().select(MISLABELLED_COLUMNS)
    frames = [f for f in frames if f.height]
    if not frames:
        return empty
    return (
        pl.concat(
            [
                f.select(c for c in empty.columns if c in f.columns and c not in ("severity", "masked", "baseline"))
                for f in frames
            ]
        )
        .with_columns(_severity_name(), pl.lit(False).alias("masked"), pl.lit(False).alias("baseline"))
        .select(empty.columns)
        .sort(["severity_rank", "anchor_row", "cand_role"], descending=[True, False, False])
    )
