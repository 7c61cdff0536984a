"""The sample data set: every planted exact/same-anchor/linked/declared case is found, the
mislabelled negatives are reported apart, and nothing is raised on the clean rows."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from contrast_audit import audit
from contrast_audit.config import AuditConfig, PlanConfig

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
    assert sorted(m["row_id"] for m in report["mislabelled_negatives"]) == sorted(case["rows"])
    assert all(m["severity"] == "certain" for m in report["mislabelled_negatives"])
    # A row's own hard negative is never an in-batch finding.
    assert not [f for f in report["findings"] if f["anchor_id"] == f["candidate_id"]]


def test_nothing_is_raised_on_clean_rows(one_batch, truth):
    _, report = one_batch
    prefix = truth["clean_prefix"]
    touching = [
        f for f in report["findings"] if f["anchor_id"].startswith(prefix) or f["candidate_id"].startswith(prefix)
    ]
    assert touching == []
    assert not [m for m in report["mislabelled_negatives"] if m["row_id"].startswith(prefix)]


def test_every_finding_is_a_planted_pair(one_batch, truth):
    """Precision on the sample: each reported in-batch pair is one the truth file plants (or a
    consequence of two planted mechanisms sharing rows, which the truth lists too)."""
    _, report = one_batch
    planted = {tuple(p) for c in truth["cases"] for p in c.get("pairs", [])}
    unexpected = [
        (f["anchor_id"], f["candidate_id"], f["candidate_role"])
        for f in report["findings"]
        if (f["anchor_id"], f["candidate_id"]) not in planted
    ]
    assert unexpected == []


def test_breakdown_by_source_and_cohort_adds_up(one_batch):
    result, report = one_batch
    for key in ("by_source", "by_cohort"):
        table = report[key]
        assert sum(r["rows"] for r in table) == report["counts"]["rows"]
        assert sum(r["findings"] for r in table) == report["counts"]["findings"]
        assert sum(r["candidates"] for r in table) == report["counts"]["candidates"]
    assert {r["source"] for r in report["by_source"]} == {"docs", "forum", "tickets", "catalog"}
