"""The person-judged evaluation: keys, the judged file, Wilson intervals and the tallies."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.judged.common import findings_with_texts, pair_key, read_judgments, wilson
from bench.judged.score import render, tally


def test_wilson_interval_matches_the_textbook_values():
    lo, hi = wilson(15, 20)
    assert (round(lo, 2), round(hi, 2)) == (0.53, 0.89)  # 0.75 of 20
    lo, hi = wilson(20, 20)
    assert hi == 1.0 and round(lo, 2) == 0.84


def test_pair_keys_ignore_spacing_and_depend_on_the_direction():
    assert pair_key("query_to_doc", "a  b", "c") == pair_key("query_to_doc", "a b", " c ")
    assert pair_key("query_to_doc", "a", "c") != pair_key("doc_to_doc", "a", "c")
    assert pair_key("query_to_doc", "a", "c") != pair_key("query_to_doc", "c", "a")


def test_a_judgment_with_an_unknown_label_is_refused(tmp_path: Path):
    path = tmp_path / "j.jsonl"
    path.write_text(json.dumps({"key": "k", "label": "SIMILAR"}) + "\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"j.jsonl:1: label must be one of"):
        read_judgments(path)


def test_the_shipped_judgments_are_well_formed():
    judged = read_judgments()
    assert len(judged) >= 400
    assert {j["dataset"] for j in judged.values()} >= {"stsb", "mrpc", "paws", "captions", "cqa", "scifact", "cisi"}
    for key, j in judged.items():
        assert key == pair_key(j["direction"], j["anchor"], j["candidate"])
        assert j["reason"].strip()


def _finding(anchor_id: str, candidate_id: str, severity: str, rule: str) -> dict:
    return {
        "direction": "query_to_doc",
        "anchor_id": anchor_id,
        "candidate_id": candidate_id,
        "candidate_role": "positive",
        "severity": severity,
        "severity_rule": rule,
        "evidence": [],
    }


def test_tally_counts_each_pair_once_at_its_highest_severity_and_splits_labels_from_evidence():
    rows = {
        "0": {"anchor": "a0", "positive": "p0"},
        "1": {"anchor": "a1", "positive": "p1"},
        "2": {"anchor": "a0", "positive": "p2"},
        "3": {"anchor": "a3", "positive": "p3"},
    }
    report = {
        "findings": [
            _finding("0", "1", "suspect", "margin: within the margin alone"),
            _finding("0", "1", "likely", "embedding"),  # the same texts in a later batch, at a higher severity
            _finding("0", "2", "certain", "same-anchor"),
            _finding("3", "1", "likely", "embedding"),
        ]
    }
    findings = findings_with_texts(report, rows)

    def judged(anchor, candidate, label, seed=0):
        key = pair_key("query_to_doc", anchor, candidate)
        return key, {"key": key, "dataset": "d", "label": label, "sampled_as": {"seed": seed}}

    judgments = dict(
        [
            judged("a0", "p1", "EQUIVALENT"),
            judged("a0", "p2", "RELATED"),
            judged("a3", "p1", "EQUIVALENT"),
            judged("a3", "p9", "EQUIVALENT"),  # judged equivalent, never reported: recall counts it
            judged("a3", "p8", "EQUIVALENT", seed=5),  # another seed's batches: not counted
        ]
    )
    t = tally("d", findings, judgments, [0])
    assert t["count"]["likely"] == 2 and t["count"]["certain"] == 1 and t["count"]["suspect"] == 0
    assert t["by_sev"]["likely"]["EQUIVALENT"] == 2
    assert t["by_sev"]["labels"]["RELATED"] == 1 and t["by_sev"]["evidence"]["EQUIVALENT"] == 2
    assert (t["equivalent"], t["kept"]) == (3, 2)
    text = render([t], "score")
    assert "| d | likely | 2 | 2 | 2 | 1.00 (0.34–1.00) |" in text
    assert "| d | 3 | 2 | 0.67 (0.21–0.94) |" in text
