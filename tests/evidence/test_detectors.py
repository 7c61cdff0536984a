"""Each detector on hand-built corpora."""

from __future__ import annotations

import numpy as np
from support import corpus_of, pairs, run

from contrast_audit.config import EmbeddingConfig
from contrast_audit.corpus import ANCHOR_ROLE, POSITIVE_ROLE
from contrast_audit.embed import EmbeddingStore
from contrast_audit.evidence import CERTAIN, SUSPECT
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
    # row0 (x,y): z is 1 hop from y → certain (no embeddings to check); w is 2 hops → suspect; v is unrelated.
    assert hits.mask.tolist() == [True, True, False]
    assert hits.score[:2].tolist() == [1.0, 2.0]
    assert hits.severity[:2].tolist() == [CERTAIN, SUSPECT]
    assert [hits.rules[r] for r in hits.rule[:2]] == [
        "one hop through the positive (no embeddings to check the texts)",
        "two or more hops",
    ]
    assert det.info()["max_hops"] == 2


class _Vectors(EmbeddingStore):
    def __init__(self, vectors: dict[str, list[float]]) -> None:
        super().__init__(EmbeddingConfig())
        self.vectors = vectors

    def prepare(self, corpus) -> None:
        mat = np.array([self.vectors[t] for t in corpus.texts.get_column("text").to_list()], dtype=np.float32)
        self.query = self.doc = mat / np.linalg.norm(mat, axis=1, keepdims=True)


def test_linked_one_hop_through_the_positive_is_certain_only_when_the_texts_are_near():
    # x~y (row 0), y~z (row 1), y~g (row 2), x~h (row 3, h far from y): z and g are one hop from row 0's
    # positive y; z is near y, g (a generic text the data chained through) is not. h is paired with
    # row 0's anchor itself: the data's own label, certain however far it lies.
    vectors = {"x": [1, 0.1, 0], "y": [1, 0, 0], "z": [0.95, 0.1, 0], "g": [0.3, 1, 0], "h": [0, 0.2, 1]}
    c = corpus_of([("x", "y"), ("y", "z"), ("y", "g"), ("x", "h")])
    det = LinkedDetector(max_hops=2, store=_Vectors(vectors))
    hits = run(det, c, pairs(c, [0, 0, 0], [1, 2, 3]))
    assert hits.mask.tolist() == [True, True, True]
    assert hits.severity.tolist() == [CERTAIN, SUSPECT, CERTAIN]
    assert [hits.rules[r] for r in hits.rule] == [
        "one hop through the positive, texts near",
        "one hop through the positive, texts not near",
        "one hop from the anchor (another row pairs the anchor with the candidate)",
    ]
    # Three rows with a positive of their own are too few to calibrate: the bar is the floor.
    assert det.info()["near_bar"] == 0.5


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
