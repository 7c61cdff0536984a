"""Each detector on hand-built corpora."""

from __future__ import annotations

from support import corpus_of, pairs, run

from contrast_audit.corpus import ANCHOR_ROLE, POSITIVE_ROLE
from contrast_audit.evidence import CERTAIN, LIKELY
from contrast_audit.evidence.declared import DeclaredDetector
from contrast_audit.evidence.exact import ExactDetector
from contrast_audit.evidence.linked import LinkedDetector
from contrast_audit.evidence.same_anchor import SameAnchorDetector


def test_exact_matches_normalised_positive_and_anchor():
    c = corpus_of([("q1", "Reset your password."), ("q2", "  reset YOUR password"), ("q3", "q1"), ("q4", "other")])
    hits = run(ExactDetector(), c, pairs(c, [0, 0, 0], [1, 2, 3]))
    assert hits.mask.tolist() == [True, True, False]
    assert (hits.severity[hits.mask] == CERTAIN).all()


def test_same_anchor_only_for_other_rows_positives():
    c = corpus_of([("How to X?", "d1", "n1"), ("how to x", "d2", "n2"), ("other", "d3")])
    p = pairs(c, [0, 0, 0], [1, 1, 2], roles=[POSITIVE_ROLE, 1, POSITIVE_ROLE])
    assert run(SameAnchorDetector(), c, p).mask.tolist() == [True, False, False]


def test_declared_needs_same_group_and_skips_negatives():
    c = corpus_of([("a", "b", "n"), ("c", "d", "m"), ("e", "f")], groups=["g", "g", None])
    p = pairs(c, [0, 0, 0, 2], [1, 1, 2, 0], roles=[POSITIVE_ROLE, 1, POSITIVE_ROLE, POSITIVE_ROLE])
    assert run(DeclaredDetector(), c, p).mask.tolist() == [True, False, False, False]


def test_linked_counts_hops_from_anchor_or_positive():
    # x→y, y→z, z→w, and an unrelated pair.
    c = corpus_of([("x", "y"), ("y", "z"), ("z", "w"), ("u", "v")])
    det = LinkedDetector(max_hops=2)
    hits = run(det, c, pairs(c, [0, 0, 0], [1, 2, 3]))
    # row0 (x,y): z is 1 hop from y → certain; w is 2 hops → likely; v is unrelated.
    assert hits.mask.tolist() == [True, True, False]
    assert hits.score[:2].tolist() == [1.0, 2.0]
    assert hits.severity[:2].tolist() == [CERTAIN, LIKELY]
    assert det.info()["max_hops"] == 2


def test_linked_respects_max_hops_and_skips_identity():
    c = corpus_of([("x", "y"), ("y", "z"), ("z", "w"), ("x", "y")])
    hits = run(LinkedDetector(max_hops=1), c, pairs(c, [0, 0, 0], [1, 2, 3]))
    # z: 1 hop (certain); w: 2 hops > max_hops; row3's positive is y itself (exact, not linked).
    assert hits.mask.tolist() == [True, False, False]


def test_linked_hub_does_not_link_across_components():
    rows = [(f"q{i}", "hub") for i in range(50)] + [("lonely", "doc")]
    c = corpus_of(rows)
    det = LinkedDetector(max_hops=2)
    det.prepare(c)
    assert det.n_components == 2
    hits = det.detect(pairs(c, [0, 0], [50, 1], roles=[POSITIVE_ROLE, ANCHOR_ROLE]))
    assert hits.mask.tolist() == [False, True]  # q1 shares the hub with q0: 2 hops from q0
