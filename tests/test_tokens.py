"""Token alignment (tokens.py) and the alignment guard, with the real default model."""

from __future__ import annotations

import numpy as np
import pytest
from support import corpus_of

from contrast_audit.config import EmbeddingConfig
from contrast_audit.corpus import ANCHOR_ROLE, POSITIVE_ROLE
from contrast_audit.embed import EmbeddingStore
from contrast_audit.evidence import Pairs
from contrast_audit.evidence.embedding import AnchorEmbeddingDetector, EmbeddingDetector
from contrast_audit.evidence.guards import AlignmentGuard, Guarded
from contrast_audit.tokens import TokenStore

BASE = "Eight firefighters suffered minor injuries, fire officials said."
NEAR = "Eight firefighters suffered minor injuries, officials said."
EXTRA = (
    "Eight firefighters suffered minor injuries and were treated at a hospital for burns and smoke "
    "inhalation overnight, fire officials said."
)
ROWS = [
    (BASE, NEAR),
    (EXTRA, "Crews contained the blaze by noon."),
    ("How do I reset my password?", "Use the forgot password link on the sign-in page."),
    ("How can I reset my password?", "Support can send you a new login link by email."),
]


def tokens_for(rows, cache_dir, match=0.7):
    corpus = corpus_of(rows)
    tokens = TokenStore(EmbeddingStore(EmbeddingConfig(cache_dir=str(cache_dir))), match)
    tokens.prepare(corpus)
    tid = {t: i for i, t in enumerate(corpus.texts.get_column("text").to_list())}
    return corpus, tokens, tid


def test_alignment_drops_when_one_text_carries_content_the_other_lacks(tmp_path):
    _, tokens, tid = tokens_for(ROWS, tmp_path)
    near, extra = tokens.alignment(np.array([tid[BASE], tid[BASE]]), np.array([tid[NEAR], tid[EXTRA]]))
    assert near > 0.9 and extra < 0.8
    # The smaller coverage is symmetric, and a text aligns fully with itself (computed, not memoised).
    assert tokens._align(tid[EXTRA], tid[BASE]) == pytest.approx(tokens._align(tid[BASE], tid[EXTRA]))
    assert tokens._align(tid[BASE], tid[BASE]) == pytest.approx(1.0, abs=1e-3)


def test_an_unmatched_token_counts_nothing_unless_matching_is_soft(tmp_path):
    _, hard, tid = tokens_for(ROWS, tmp_path, match=0.7)
    _, soft, _ = tokens_for(ROWS, tmp_path, match=0.0)
    u, v = np.array([tid[BASE], tid[BASE]]), np.array([tid[NEAR], tid[EXTRA]])
    near_hard, extra_hard = hard.alignment(u, v)
    near_soft, extra_soft = soft.alignment(u, v)
    # Soft matching credits the extra clause's tokens with their (positive) best cosine; coverage does not.
    assert extra_hard < extra_soft - 0.1
    assert near_hard >= near_soft - 0.05  # every token of the near-copy has a counterpart
    # By hand: the idf-weighted share of each text's tokens matched in the other; the smaller one.
    sim = hard.vectors[tid[EXTRA]] @ hard.vectors[tid[BASE]].T
    w_extra, w_base = hard.weights[tid[EXTRA]], hard.weights[tid[BASE]]
    extra_covered = float((w_extra * (sim.max(axis=1) >= 0.7)).sum() / w_extra.sum())
    base_covered = float((w_base * (sim.max(axis=0) >= 0.7)).sum() / w_base.sum())
    assert extra_hard == pytest.approx(min(extra_covered, base_covered))
    assert extra_covered < base_covered  # the longer text is the one not covered
    with pytest.raises(ValueError, match="match"):
        TokenStore(hard.store, 1.5)


def test_token_vectors_come_from_the_cache_on_a_rerun(tmp_path):
    _, first, tid = tokens_for(ROWS, tmp_path)
    u, v = np.array([tid[BASE], tid[BASE]]), np.array([tid[NEAR], tid[EXTRA]])
    scores = first.alignment(u, v)
    assert (first.stats["token_texts_encoded"], first.stats["token_texts_cached"]) == (3, 0)
    assert first.stats["token_fallbacks"] == 0  # the model's own tokenisation matched every text
    first.finish()  # writes the buffered matrices as one shard
    _, again, _ = tokens_for(ROWS, tmp_path)
    assert again.alignment(u, v) == pytest.approx(scores, abs=1e-6)
    assert (again.stats["token_texts_encoded"], again.stats["token_texts_cached"]) == (0, 3)
    # Texts spread over several shards are all found; a damaged shard only costs a re-encode.
    again.alignment(np.array([tid[ROWS[2][0]]]), np.array([tid[ROWS[3][0]]]))
    again.finish()
    shards = sorted((tmp_path / "tokens").glob("*/shard-*.npz"))
    assert len(shards) == 2
    _, third, _ = tokens_for(ROWS, tmp_path)
    third.ensure(np.array([tid[BASE], tid[NEAR], tid[EXTRA], tid[ROWS[2][0]], tid[ROWS[3][0]]]))
    assert (third.stats["token_texts_encoded"], third.stats["token_texts_cached"]) == (0, 5)
    shards[0].write_bytes(b"not a zip file")
    _, fourth, _ = tokens_for(ROWS, tmp_path)
    fourth.ensure(np.array([tid[BASE], tid[NEAR], tid[EXTRA], tid[ROWS[2][0]], tid[ROWS[3][0]]]))
    assert fourth.stats["token_texts_encoded"] + fourth.stats["token_texts_cached"] == 5
    assert 0 < fourth.stats["token_texts_encoded"] < 5


def test_the_guard_checks_the_texts_each_detector_compared(tmp_path):
    corpus, tokens, _ = tokens_for(ROWS, tmp_path)
    store = tokens.store
    guard = AlignmentGuard(tokens, 0.84, 50)
    guard.prepare(corpus)
    pairs = Pairs("query_to_doc", np.array([2]), np.array([3]), np.array([POSITIVE_ROLE]), corpus.positive[[3]])
    everything = np.array([True])
    anchors, answers = AnchorEmbeddingDetector(store, 0.85), EmbeddingDetector(store, 0.85)
    anchors.prepare(corpus)
    answers.prepare(corpus)
    # anchor-embedding rests on the two anchors, which align; embedding on the two answers, which do not.
    assert guard.veto(anchors, pairs, everything).tolist() == [False]
    assert guard.veto(answers, pairs, everything).tolist() == [True]
    assert guard.veto(answers, pairs, np.array([False])).tolist() == [False]
    long = AlignmentGuard(tokens, 0.84, 3)  # every text is longer than 3 words: never vetoed
    long.prepare(corpus)
    assert long.veto(answers, pairs, everything).tolist() == [False]


def test_guarded_detectors_drop_vetoed_matches_and_report_the_guard(tmp_path):
    corpus, tokens, _ = tokens_for(ROWS, tmp_path)
    store = tokens.store
    pairs = Pairs("query_to_query", np.array([0]), np.array([1]), np.array([ANCHOR_ROLE]), corpus.anchor[[1]])
    bare = EmbeddingDetector(store, 0.5)
    bare.prepare(corpus)
    assert bare.detect(pairs).mask.tolist() == [True]  # BASE vs EXTRA: close sentence vectors
    guarded = Guarded(EmbeddingDetector(store, 0.5), [AlignmentGuard(tokens, 0.84, 50)])
    guarded.prepare(corpus)
    assert guarded.detect(pairs).mask.tolist() == [False]
    info = guarded.info()
    assert info["alignment_threshold"] == 0.84 and info["alignment_words"] == 50
