"""The sample data set: every planted exact/same-anchor/linked/declared case is found, the
mislabelled negatives are reported apart, and nothing is raised on the clean rows."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from contrast_audit import audit
from contrast_audit.config import AuditConfig, EmbeddingConfig, PlanConfig

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "sample_data" / "pairs.jsonl"
TRUTH = ROOT / "sample_data" / "truth.json"
DETECTABLE = {"exact", "same-anchor", "linked", "declared"}


@pytest.fixture(scope="module")
def one_batch():
    """Every row in one batch, so every planted pair is compared."""
    result = audit([str(SAMPLE)], AuditConfig(plan=PlanConfig(batch_size=1000)))
    return result, result.report()


@pytest.fixture(scope="module")
def truth():
    return json.loads(TRUTH.read_text(encoding="utf-8"))


def test_truth_matches_file(truth):
    assert truth["rows"] == sum(1 for line in SAMPLE.read_text(encoding="utf-8").splitlines() if line.strip())


def test_each_planted_pair_is_found_with_its_evidence(one_batch, truth):
    _, report = one_batch
    found = {(f["anchor_id"], f["candidate_id"]): f for f in report["findings"] if f["candidate_role"] == "positive"}
    cases = [c for c in truth["cases"] if c["kind"] in DETECTABLE]
    assert len(cases) >= 8
    for case in cases:
        for anchor, candidate in case["pairs"]:
            finding = found.get((anchor, candidate))
            assert finding is not None, f"{case['name']}: {anchor} → {candidate} not reported"
            kinds = {e["kind"] for e in finding["evidence"]}
            assert case["kind"] in kinds, f"{case['name']}: got {kinds}"
            assert finding["severity"] == case["severity"]


def test_mislabelled_negatives_are_reported_apart(one_batch, truth):
    _, report = one_batch
    case = next(c for c in truth["cases"] if c["kind"] == "mislabelled")
    planted = {m["row_id"]: m for m in report["mislabelled_negatives"] if m["row_id"] in case["rows"]}
    assert sorted(planted) == sorted(case["rows"])
    assert all(m["severity"] == "certain" for m in planted.values())
    # Clean rows' curated hard negatives score high against their anchors by design; the margin rule
    # alone never calls them mislabelled, so only the planted ones are reported.
    assert [m for m in report["mislabelled_negatives"] if m["row_id"] not in case["rows"]] == []
    # A row's own hard negative is never an in-batch finding.
    assert not [f for f in report["findings"] if f["anchor_id"] == f["candidate_id"]]


def _touches_clean(finding: dict, prefix: str) -> bool:
    return finding["anchor_id"].startswith(prefix) or finding["candidate_id"].startswith(prefix)


def test_no_duplicate_evidence_on_clean_rows(one_batch, truth):
    """No clean row is called a duplicate, paraphrase or linked text of anything."""
    _, report = one_batch
    touching = [f for f in report["findings"] if _touches_clean(f, truth["clean_prefix"])]
    assert not [f for f in touching if {e["kind"] for e in f["evidence"]} != {"margin"}]
    assert all(f["severity"] != "certain" for f in touching)


def test_margin_findings_on_clean_rows_are_rare(one_batch, truth):
    """The margin rule (candidate scores within 25% of the positive and is near it) flags some
    near-intent pairs among the clean rows; they stay under 1 in 5,000 comparisons."""
    result, report = one_batch
    prefix = truth["clean_prefix"]
    ids = result.corpus.rows.get_column("id")
    clean = ids.str.starts_with(prefix).to_numpy()
    compared = int(result.judgement.candidates_per_row[clean].sum())
    touching = [f for f in report["findings"] if _touches_clean(f, prefix)]
    assert compared > 100_000
    assert len(touching) / compared < 1 / 5000


def test_every_lexical_finding_is_a_planted_pair(one_batch, truth):
    """Precision of the certain evidence on the sample: each such pair is one the truth file plants."""
    _, report = one_batch
    planted = {tuple(p) for c in truth["cases"] for p in c.get("pairs", [])}
    unexpected = [
        (f["anchor_id"], f["candidate_id"], f["candidate_role"])
        for f in report["findings"]
        if f["severity"] == "certain" and (f["anchor_id"], f["candidate_id"]) not in planted
    ]
    assert unexpected == []


def test_paraphrased_documents_are_margin_suspects_not_gated(one_batch, truth):
    """The paraphrased documents (cosines under the embedding bar) are found only by the margin rule,
    which says "same topic" and so is suspect: reported with --margin, never counted by the gate."""
    _, report = one_batch
    pairs = [tuple(p) for c in truth["cases"] if c["kind"] == "semantic" for p in c["pairs"]]
    assert len(pairs) == 8
    assert not {(f["anchor_id"], f["candidate_id"]) for f in report["findings"]} & set(pairs)
    with_margin = audit(
        [str(SAMPLE)], AuditConfig(plan=PlanConfig(batch_size=1000), embedding=EmbeddingConfig(margin=True))
    ).report()
    found = {(f["anchor_id"], f["candidate_id"]): f for f in with_margin["findings"]}
    hits = [found[p] for p in pairs if p in found]
    assert len(hits) >= 6
    assert all(f["severity"] == "suspect" and f["severity_rule"] == "margin: within the margin alone" for f in hits)


def test_breakdown_by_source_and_cohort_adds_up(one_batch):
    result, report = one_batch
    for key in ("by_source", "by_cohort"):
        table = report[key]
        assert sum(r["rows"] for r in table) == report["counts"]["rows"]
        assert sum(r["findings"] for r in table) == report["counts"]["findings"]
        assert sum(r["candidates"] for r in table) == report["counts"]["candidates"]
    assert {r["source"] for r in report["by_source"]} == {"docs", "forum", "tickets", "catalog"}


def test_lexical_evidence_raises_nothing_on_clean_rows(truth):
    """Exact, same-anchor, linked and declared evidence (and MinHash) never touch a clean row."""
    result = audit(
        [str(SAMPLE)], AuditConfig(plan=PlanConfig(batch_size=1000), embedding=EmbeddingConfig(enabled=False))
    )
    report = result.report()
    prefix = truth["clean_prefix"]
    assert [f for f in report["findings"] if _touches_clean(f, prefix)] == []
    assert [m for m in report["mislabelled_negatives"] if m["row_id"].startswith(prefix)] == []
    planted = {tuple(p) for c in truth["cases"] if c["kind"] in DETECTABLE for p in c["pairs"]}
    certain = {(f["anchor_id"], f["candidate_id"]) for f in report["findings"] if f["severity"] == "certain"}
    assert certain == planted
