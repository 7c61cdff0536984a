"""Embedding, anchor-embedding and margin evidence on hand-made vectors (no model), and the
policy that maps them to severities."""

from __future__ import annotations

import numpy as np
import pytest
from support import corpus_of

from contrast_audit.config import EmbeddingConfig, build_config
from contrast_audit.corpus import POSITIVE_ROLE
from contrast_audit.embed import EmbeddingStore
from contrast_audit.errors import ConfigError
from contrast_audit.evidence import LIKELY, REGISTRY, SUSPECT, Pairs, default_detectors
from contrast_audit.evidence.embedding import AnchorEmbeddingDetector, EmbeddingDetector, MarginDetector
from contrast_audit.evidence.guards import AlignmentGuard


class FixedStore(EmbeddingStore):
    """A store whose vectors are given: text → unit vector."""

    def __init__(self, vectors: dict[str, list[float]]) -> None:
        super().__init__(EmbeddingConfig())
        self.vectors = vectors

    def prepare(self, corpus) -> None:
        texts = corpus.texts.get_column("text").to_list()
        mat = np.array([self.vectors[t] for t in texts], dtype=np.float32)
        mat /= np.linalg.norm(mat, axis=1, keepdims=True)
        self.query = self.doc = mat


VECTORS = {
    "q0": [1, 0, 0, 0],
    "d0": [1, 0.2, 0, 0],
    "q1": [0.95, 0.05, 0, 0],
    "d1": [1, 0.25, 0, 0],  # q1 paraphrases q0; d1 near-duplicates d0
    "q2": [0, 1, 0, 0],
    "d2": [0, 0, 1, 0],  # unrelated
    "q3": [0, 0, 0, 1],
    "d3": [0.8, -0.3, 0, 0.5],  # d3 scores fairly high against q0 but is not a duplicate of d0
}
ROWS = [("q0", "d0"), ("q1", "d1"), ("q2", "d2"), ("q3", "d3")]


def q2d_pairs(c, anchor_rows, cand_rows):
    a, b = np.asarray(anchor_rows), np.asarray(cand_rows)
    return Pairs("query_to_doc", a, b, np.full(len(b), POSITIVE_ROLE), c.positive[b])


def prepared(detector, c):
    detector.prepare(c)
    return detector


def test_embedding_flags_near_duplicate_positives():
    c = corpus_of(ROWS)
    det = prepared(EmbeddingDetector(FixedStore(VECTORS), 0.95), c)
    hits = det.detect(q2d_pairs(c, [0, 0, 0], [1, 2, 3]))
    assert hits.mask.tolist() == [True, False, False]
    assert hits.score[0] == pytest.approx(
        np.dot([1, 0.2, 0, 0], [1, 0.25, 0, 0]) / (np.linalg.norm([1, 0.2, 0, 0]) * np.linalg.norm([1, 0.25, 0, 0])),
        rel=1e-5,
    )
    assert (hits.severity == LIKELY).all()


def test_query_candidates_are_compared_with_the_anchor():
    c = corpus_of(ROWS)
    det = prepared(EmbeddingDetector(FixedStore(VECTORS), 0.95), c)
    pairs = Pairs("query_to_query", np.array([0, 0]), np.array([1, 2]), np.array([-1, -1]), c.anchor[[1, 2]])
    assert det.detect(pairs).mask.tolist() == [True, False]


def test_anchor_embedding_needs_paraphrased_anchors_and_positive_candidates():
    c = corpus_of(ROWS)
    det = prepared(AnchorEmbeddingDetector(FixedStore(VECTORS), 0.95), c)
    assert det.detect(q2d_pairs(c, [0, 0, 0], [1, 2, 3])).mask.tolist() == [True, False, False]
    hard_negative = Pairs("query_to_doc", np.array([0]), np.array([1]), np.array([1]), c.positive[[1]])
    assert det.detect(hard_negative).mask.tolist() == [False]


def test_margin_absolute_and_relative_rules():
    c = corpus_of(ROWS)
    store = FixedStore(VECTORS)
    pairs = q2d_pairs(c, [0, 0, 0], [1, 2, 3])
    store.prepare(c)
    unit = store.query
    sim = lambda a, b: float(unit[c.anchor[a]] @ unit[c.positive[b]])  # noqa: E731
    gap = [sim(0, j) - sim(0, 0) for j in (1, 2, 3)]
    absolute = prepared(MarginDetector(store, 0.0, None, support=-1.0, report_suspects=True), c).detect(pairs)
    assert absolute.mask.tolist() == [g > 0 for g in gap]
    loose = prepared(MarginDetector(store, 0.1, None, support=-1.0, report_suspects=True), c).detect(pairs)
    assert loose.mask.tolist() == [g > -0.1 for g in gap]
    relative = prepared(MarginDetector(store, None, 0.2, support=-1.0, report_suspects=True), c).detect(pairs)
    assert relative.mask.tolist() == [sim(0, j) > 0.8 * sim(0, 0) for j in (1, 2, 3)]
    assert relative.threshold == pytest.approx(0.8)


def test_margin_is_likely_only_when_the_candidate_is_near_the_positive():
    c = corpus_of(ROWS)
    store = FixedStore(VECTORS)
    pairs = q2d_pairs(c, [0, 0], [1, 3])  # d1 is near d0; d3 scores against q0 but is far from d0
    store.prepare(c)
    d0, d1, d3 = (store.doc[c.positive[i]] for i in (0, 1, 3))
    support = (float(d0 @ d1) + float(d0 @ d3)) / 2  # between the two candidates' similarity to d0
    det = prepared(MarginDetector(store, None, 0.5, support=support, report_suspects=True), c)
    hits = det.detect(pairs)
    assert hits.mask.tolist() == [True, True]
    assert hits.severity.tolist() == [LIKELY, SUSPECT]
    quiet = prepared(MarginDetector(store, None, 0.5, support=support, report_suspects=False), c).detect(pairs)
    assert quiet.mask.tolist() == [True, False]


def test_margin_is_likely_only_in_query_to_document_rows():
    # The same texts as above, one word each: with doc_ratio 2 no row is a query->document row, so
    # the supported candidate stays suspect; give row 0 a long positive and it is likely again.
    c = corpus_of(ROWS)
    store = FixedStore(VECTORS)
    det = prepared(MarginDetector(store, None, 0.5, support=0.9, report_suspects=True, doc_ratio=2.0), c)
    hits = det.detect(q2d_pairs(c, [0], [1]))
    assert hits.mask.tolist() == [True] and hits.severity.tolist() == [SUSPECT]
    long_doc = "d0 with many more words in it"
    rows = [("q0", long_doc), *ROWS[1:]]
    store = FixedStore({**VECTORS, long_doc: VECTORS["d0"]})
    det = prepared(MarginDetector(store, None, 0.5, support=0.9, report_suspects=True, doc_ratio=2.0), corpus_of(rows))
    assert det.detect(q2d_pairs(corpus_of(rows), [0], [1])).severity.tolist() == [LIKELY]
    assert "at least 2 times its anchor's words (query->document)" in det.info()["likely_when"]
    # Without a ratio every row qualifies, and the settings say so (not "at least 0 times").
    info = prepared(
        MarginDetector(store, None, 0.5, support=0.9, report_suspects=True, doc_ratio=0.0), corpus_of(rows)
    ).info()
    assert "in any row" in info["likely_when"] and "times" not in info["likely_when"]
    assert "alike in length" not in info["suspect_when"]


def test_margin_alone_never_makes_a_rows_own_hard_negative_likely():
    # Row 0's hard negative is d1: within the margin of d0 and near it (supported), which makes the
    # same text a likely finding as another row's positive, but only a suspect mislabelled negative:
    # mined negatives score high against their anchor by construction.
    c = corpus_of([("q0", "d0", "d1"), ("q1", "d1")])
    store = FixedStore(VECTORS)
    in_batch = q2d_pairs(c, [0], [1])
    own = Pairs("query_to_doc", np.array([0]), np.array([0]), np.array([1]), c.negatives[[0], [0]])
    assert own.cand_tid[0] == in_batch.cand_tid[0]  # the same text in both roles
    quiet = prepared(MarginDetector(store, None, 0.25, support=0.6, report_suspects=False), c)
    assert quiet.detect(in_batch).mask.tolist() == [True]
    assert quiet.detect(own).mask.tolist() == [False]
    loud = prepared(MarginDetector(store, None, 0.25, support=0.6, report_suspects=True), c)
    assert loud.detect(own).severity[loud.detect(own).mask].tolist() == [SUSPECT]


def test_policy_wires_detectors_from_config():
    detectors = default_detectors(build_config({"pair_evidence": True}))  # pair evidence is opt-in
    names = [d.name for d in detectors]
    assert set(names) == set(REGISTRY)  # every detector a scan runs is registered, and vice versa
    assert names == [
        "exact",
        "same-anchor",
        "declared",
        "linked",
        "minhash",
        "embedding",
        "anchor-embedding",
        "margin",
        "pair",
    ]
    by_name = {d.name: d for d in detectors}
    margin = by_name["margin"].inner  # semantic detectors sit behind the guards
    assert by_name["margin"].info()["number_guard_words"] == 50
    assert "alignment_threshold" not in by_name["margin"].info()  # the margin rule is not a near-duplicate claim
    assert "alignment_threshold" not in by_name["pair"].info()  # nor is pair evidence
    assert by_name["pair"].info()["number_guard_words"] == 50
    assert by_name["anchor-embedding"].info()["alignment_threshold"] == 0.8
    assert by_name["anchor-embedding"].info()["alignment_match"] == 0.7
    assert (margin.relative_margin, margin.absolute_margin, margin.support, margin.report_suspects) == (
        0.25,
        None,
        None,
        False,
    )
    absolute = {
        d.name: d
        for d in default_detectors(
            build_config(
                {
                    "minhash": False,
                    "absolute_margin": 0.05,
                    "margin": True,
                    "number_guard": 0,
                    "entity_guard": 0,
                    "negation_guard": 0,
                }
            )
        )
    }["margin"]
    assert (absolute.relative_margin, absolute.absolute_margin, absolute.report_suspects) == (None, 0.05, True)
    off = [d.name for d in default_detectors(build_config({"minhash": False, "embeddings": False}))]
    assert off == ["exact", "same-anchor", "declared", "linked"]
    with pytest.raises(ConfigError):
        build_config({"absolute_margin": 0.1, "relative_margin": 0.05})
    with pytest.raises(ConfigError):
        build_config({"positive_threshold": 1.5})
    with pytest.raises(ConfigError):
        build_config({"alignment": 1.2})
    with pytest.raises(ConfigError, match="alignment-match"):
        build_config({"alignment_match": -0.1})
    soft = {d.name: d for d in default_detectors(build_config({"alignment_match": 0}))}["anchor-embedding"]
    assert soft.info()["alignment_match"] == 0.0
    unaligned = default_detectors(build_config({"alignment": 0}))
    assert all(not any(isinstance(g, AlignmentGuard) for g in d.guards) for d in unaligned if hasattr(d, "guards"))


def test_margin_leaves_rows_whose_positive_is_the_anchor_to_the_embedding_detector():
    # SimCSE-style rows (s, s): sim(a, p) = 1, so the rule would only be a cosine threshold on the anchor.
    rows = [("q0", "q0"), ("d1", "d1")]
    c = corpus_of(rows)
    store = FixedStore({"q0": [1, 0, 0, 0], "d1": [1, 0.1, 0, 0]})
    det = prepared(MarginDetector(store, None, 0.5, support=0.0, report_suspects=True), c)
    assert det.detect(q2d_pairs(c, [0, 1], [1, 0])).mask.tolist() == [False, False]
    assert prepared(EmbeddingDetector(store, 0.9), c).detect(q2d_pairs(c, [0], [1])).mask.tolist() == [True]


def test_number_guard_vetoes_short_texts_that_disagree_on_numbers():
    from contrast_audit.evidence.guards import Guarded
    from contrast_audit.evidence.numbers import NumberGuard

    rows = [
        ("cable", "Acme USB-C cable, 2 m, braided"),
        ("other cable", "Acme USB-C cable, 1 m, braided"),
        ("same cable", "Acme braided USB-C cable 2 m"),
    ]
    c = corpus_of(rows)
    vectors = {t: [1.0, 0.01 * i, 0, 0] for i, t in enumerate(c.texts.get_column("text").to_list())}
    guarded = Guarded(EmbeddingDetector(FixedStore(vectors), 0.9), [NumberGuard(50)])
    guarded.prepare(c)
    hits = guarded.detect(q2d_pairs(c, [0, 0], [1, 2]))
    assert hits.mask.tolist() == [False, True]
    off = Guarded(EmbeddingDetector(FixedStore(vectors), 0.9), [NumberGuard(0)])
    off.prepare(c)
    assert off.detect(q2d_pairs(c, [0, 0], [1, 2])).mask.tolist() == [True, True]
    long = NumberGuard(3)  # both texts longer than 3 words: passages are never vetoed
    long.prepare(c)
    assert not long.disagree(c.positive[[0]], c.positive[[1]]).any()


def test_number_guard_keeps_matches_that_agree_with_the_anchor():
    from contrast_audit.evidence.guards import Guarded
    from contrast_audit.evidence.numbers import NumberGuard

    # The candidate repeats the anchor's number; the positive has none: no veto.
    rows = [("fix error 429 from the api", "slow down and retry later"), ("x", "fix error 429 from the api quickly")]
    c = corpus_of(rows)
    vectors = {t: [1.0, 0.01 * i, 0, 0] for i, t in enumerate(c.texts.get_column("text").to_list())}
    guarded = Guarded(EmbeddingDetector(FixedStore(vectors), 0.5), [NumberGuard(50)])
    guarded.prepare(c)
    assert guarded.detect(q2d_pairs(c, [0], [1])).mask.tolist() == [True]
