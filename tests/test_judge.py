"""Comparison sets per loss direction, world size, and candidate counting."""

from __future__ import annotations

import numpy as np
from support import corpus_of

from contrast_audit.evidence.exact import ExactDetector
from contrast_audit.judge import judge
from contrast_audit.plan import Plan


def run(corpus, batches, directions, world_size=1):
    plan = Plan.from_batches([np.asarray(b) for b in batches], [0] * len(batches), "test")
    det = ExactDetector()
    det.prepare(corpus)
    return judge(corpus, plan.global_batches(world_size), [det], directions)


ROWS = [("q0", "d0", "n0"), ("q1", "d1", "n1"), ("q2", "d2", "n2")]


def test_candidate_counts_per_direction():
    c = corpus_of(ROWS)
    j = run(c, [[0, 1, 2]], ("query_to_doc", "query_to_query", "doc_to_query", "doc_to_doc"))
    # query_to_doc / doc_to_doc: 2 other positives + 2 other rows' hard negatives per row.
    # query_to_query / doc_to_query: the 2 other anchors per row.
    assert j.candidates_by_direction == {"query_to_doc": 12, "query_to_query": 6, "doc_to_query": 6, "doc_to_doc": 12}
    assert j.candidates_per_row.tolist() == [12, 12, 12]
    assert j.findings.height == 0


def test_other_rows_hard_negatives_are_candidates():
    c = corpus_of([("q0", "d0"), ("q1", "d1", "d0")])  # row 1's hard negative is row 0's positive
    j = run(c, [[0, 1]], ("query_to_doc",))
    f = j.findings.to_dicts()
    assert [(x["anchor_row"], x["cand_row"], x["cand_role"]) for x in f] == [(0, 1, 1)]


def test_directions_pick_the_compared_texts():
    # Row 1's anchor is the same text as row 0's positive.
    c = corpus_of([("what is x", "x is a letter"), ("x is a letter", "letters explained")])
    q2d = run(c, [[0, 1]], ("query_to_doc",)).findings.to_dicts()
    # Row 0's positive is row 1's own anchor text; row 1's positive matches nothing of row 0.
    assert [(x["anchor_row"], x["cand_row"]) for x in q2d] == [(1, 0)]
    d2q = run(c, [[0, 1]], ("doc_to_query",)).findings.to_dicts()
    # Row 0's positive is compared with row 1's anchor: the same text.
    assert [(x["anchor_row"], x["cand_row"], x["direction"]) for x in d2q] == [(0, 1, "doc_to_query")]
    q2q = run(c, [[0, 1]], ("query_to_query",)).findings.to_dicts()
    # Row 0's anchor is compared with row 1's anchor, which is row 0's positive text.
    assert [(x["anchor_row"], x["cand_row"]) for x in q2q] == [(0, 1)]


def test_world_size_gathers_device_batches():
    c = corpus_of([("a", "dup"), ("b", "x"), ("c", "y"), ("d", "Dup!")])
    alone = run(c, [[0, 1], [2, 3]], ("query_to_doc",), world_size=1)
    gathered = run(c, [[0, 1], [2, 3]], ("query_to_doc",), world_size=2)
    assert alone.findings.height == 0
    assert sorted(gathered.findings.select("anchor_row", "cand_row").rows()) == [(0, 3), (3, 0)]
    assert gathered.findings.get_column("batch").unique().to_list() == [0]


def test_own_negative_is_judged_apart():
    c = corpus_of([("q", "same text", "Same text."), ("r", "other")])
    j = run(c, [[0, 1]], ("query_to_doc",))
    assert j.findings.height == 0
    assert j.mislabelled.select("anchor_row", "cand_role").rows() == [(0, 1)]


def test_many_batches_are_chunked_consistently(monkeypatch):
    import contrast_audit.judge as judge_module

    rows = [(f"q{i}", "shared" if i % 50 == 0 else f"d{i}") for i in range(1000)]
    c = corpus_of(rows)
    batches = [list(range(i, i + 100)) for i in range(0, 1000, 100)]
    whole = run(c, batches, ("query_to_doc",))
    monkeypatch.setattr(judge_module, "PAIRS_PER_CHUNK", 5000)
    chunked = run(c, batches, ("query_to_doc",))
    assert whole.findings.equals(chunked.findings)
    assert whole.candidates == chunked.candidates == 10 * 100 * 99
    assert whole.findings.height == 10 * 2  # each batch holds two rows whose positive is "shared"


def test_candidate_counts_restricted_to_involved_rows_match_the_enumerated_pairs():
    from contrast_audit.judge import batch_pairs, candidate_counts, direction_pairs

    rng = np.random.default_rng(3)
    rows = [(f"q{i}", f"d{i}", *[f"n{i}-{k}" for k in range(i % 3)]) for i in range(23)]  # ragged negatives
    c = corpus_of(rows)
    directions = ("query_to_doc", "query_to_query", "doc_to_query", "doc_to_doc")
    order = rng.permutation(23)
    batches = [order[:8], order[8:16], np.r_[order[16:], order[:2]]]  # rows 0-1 of the order occur twice
    plan = Plan.from_batches(batches, [0, 0, 1], "test")
    for world_size in (1, 2):
        gb = plan.global_batches(world_size)
        every = run(c, batches, directions, world_size)
        everyone = np.ones(23, dtype=bool)
        assert candidate_counts(c, gb, directions, everyone)[0] == every.candidates_by_direction
        assert candidate_counts(c, gb, directions, everyone)[1].tolist() == every.candidates_per_row.tolist()
        involved = rng.random(23) < 0.3
        by_direction, per_row = candidate_counts(c, gb, directions, involved)
        expected_rows = np.zeros(23, dtype=np.int64)
        for direction in directions:
            batch, anchor, other = batch_pairs(gb, 0, len(gb))
            pairs, _ = direction_pairs(c, direction, batch, anchor, other)
            keep = involved[pairs.anchor_row] | involved[pairs.cand_row]
            assert by_direction[direction] == int(keep.sum())
            expected_rows += np.bincount(pairs.anchor_row[keep], minlength=23)
        assert per_row.tolist() == expected_rows.tolist()
