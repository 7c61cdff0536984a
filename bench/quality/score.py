"""Scoring against a case's truth: read the truth and the scan's findings, count, and format tables.

Every method (the scan, one evidence kind of the scan, a peer rule) is a boolean mask over the
truth records; precision, recall and F1 are computed over those records (micro-averaged when cases
are pooled).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

SCAN_DIRECTION = "query_to_doc"
UNJUDGED = "unjudged"  # bench.quality.cases.UNJUDGED
SCAN_ROLE = "positive"


@dataclass(frozen=True)
class Truth:
    """The truth records of a case, as parallel arrays."""

    anchor_ids: list[str]
    candidate_ids: list[str]
    labels: np.ndarray  # bool
    kinds: np.ndarray  # str

    index: dict[tuple[str, str], int] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        index: dict[tuple[str, str], int] = {}
        for i, key in enumerate(zip(self.anchor_ids, self.candidate_ids, strict=True)):
            if key in index:
                raise ValueError(f"truth pair {key} appears twice")
            index[key] = i
        object.__setattr__(self, "index", index)

    def __len__(self) -> int:
        return len(self.anchor_ids)


def truth_from_records(records: Iterable[dict]) -> Truth:
    records = list(records)
    return Truth(
        anchor_ids=[str(r["anchor_id"]) for r in records],
        candidate_ids=[str(r["candidate_id"]) for r in records],
        labels=np.array([int(r["label"]) == 1 for r in records], dtype=bool),
        kinds=np.array([str(r["kind"]) for r in records], dtype=object),
    )


def read_truth(path: Path) -> Truth:
    with Path(path).open(encoding="utf-8") as handle:
        return truth_from_records(json.loads(line) for line in handle if line.strip())


@dataclass(frozen=True)
class Finding:
    anchor_id: str
    candidate_id: str
    kinds: frozenset[str]


def findings_from_report(report: dict) -> list[Finding]:
    """The report's query_to_doc findings against other rows' positives, at the severities a gate and a
    manifest act on (``likely`` and ``certain``; suspects are reported, not acted on)."""
    return [
        Finding(str(f["anchor_id"]), str(f["candidate_id"]), frozenset(e["kind"] for e in f.get("evidence", ())))
        for f in report.get("findings", ())
        if f.get("direction") == SCAN_DIRECTION
        and f.get("candidate_role") == SCAN_ROLE
        and f.get("severity", "likely") != "suspect"
    ]


def report_kinds(report: dict) -> list[str]:
    """Evidence kinds the report knows about: those counted, those configured, those seen."""
    kinds = set(report.get("counts", {}).get("by_kind", {}))
    kinds |= {k for f in report.get("findings", ()) for k in (e["kind"] for e in f.get("evidence", ()))}
    return sorted(kinds)


def finding_masks(truth: Truth, findings: Sequence[Finding], kinds: Iterable[str]) -> tuple[dict[str, np.ndarray], int]:
    """Masks over the truth: ``"all"`` (any finding) and one per evidence kind; plus the number of
    findings that name a pair outside the truth (the plan should make that impossible)."""
    kinds = list(kinds)
    masks = {name: np.zeros(len(truth), dtype=bool) for name in ["all", *kinds]}
    outside = 0
    for finding in findings:
        i = truth.index.get((finding.anchor_id, finding.candidate_id))
        if i is None:
            outside += 1
            continue
        masks["all"][i] = True
        for kind in finding.kinds:
            masks.setdefault(kind, np.zeros(len(truth), dtype=bool))[i] = True
    return masks, outside


@dataclass(frozen=True)
class Score:
    pairs: int
    positives: int
    flagged: int
    true_positives: int
    fp_distractor: int
    fp_random: int
    outside: int = 0  # flagged pairs not in the truth, counted as false positives

    @property
    def false_positives(self) -> int:
        return self.flagged - self.true_positives

    @property
    def precision(self) -> float | None:
        return self.true_positives / self.flagged if self.flagged else None

    @property
    def recall(self) -> float | None:
        return self.true_positives / self.positives if self.positives else None

    @property
    def f1(self) -> float:
        p, r = self.precision, self.recall
        return 2 * p * r / (p + r) if p and r else 0.0

    def __add__(self, other: Score) -> Score:
        return Score(*(getattr(self, f) + getattr(other, f) for f in self.__dataclass_fields__))


def score(truth: Truth, mask: np.ndarray, outside: int = 0) -> Score:
    """Counts over the truth's records; records of kind ``unjudged`` are left out (neither right nor wrong)."""
    mask = np.asarray(mask, dtype=bool)
    if mask.shape != truth.labels.shape:
        raise ValueError(f"mask has shape {mask.shape}, the truth {truth.labels.shape}")
    judged = truth.kinds != UNJUDGED
    mask = mask & judged
    wrong = mask & ~truth.labels
    return Score(
        pairs=int(judged.sum()),
        positives=int(truth.labels.sum()),
        flagged=int(mask.sum()) + outside,
        true_positives=int((mask & truth.labels).sum()),
        fp_distractor=int((wrong & (truth.kinds == "distractor")).sum()),
        fp_random=int((wrong & (truth.kinds == "random")).sum()),
        outside=outside,
    )


def pooled(scores: Iterable[Score]) -> Score:
    total = Score(0, 0, 0, 0, 0, 0, 0)
    for s in scores:
        total = total + s
    return total


def _num(value: float | None) -> str:
    return "–" if value is None else f"{value:.3f}"


HEADER = (
    "| method | pairs scored | positives | flagged | precision | recall | F1 | FP distractor | FP random |\n"
    "|---|---:|---:|---:|---:|---:|---:|---:|---:|\n"
)


def markdown_table(rows: Sequence[tuple[str, Score]]) -> str:
    lines = [HEADER]
    for name, s in rows:
        lines.append(
            f"| {name} | {s.pairs:,} | {s.positives:,} | {s.flagged:,} | {_num(s.precision)} | {_num(s.recall)} "
            f"| {s.f1:.3f} | {s.fp_distractor:,} | {s.fp_random:,} |\n"
        )
    return "".join(lines)


def margin_line(ours: Score, peers: dict[str, Score]) -> str:
    """'best peer F1' and our F1's margin over it."""
    if not peers:
        return "No peers scored."
    best = min(peers, key=lambda name: (-peers[name].f1, name))
    margin = ours.f1 - peers[best].f1
    return f"Best peer F1: {peers[best].f1:.3f} ({best}); scan F1 {ours.f1:.3f}, margin over best peer {margin:+.3f}."
