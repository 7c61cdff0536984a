"""Similarities read from per-batch matrix products (``evidence.blocks``) equal the ones computed
pair by pair, and so do the embedding detectors' verdicts, over uneven batches, missing hard
negatives and separate query and document spaces."""

from __future__ import annotations

import numpy as np
import pytest
from support import corpus_of

from contrast_audit.config import EmbeddingConfig
from contrast_audit.corpus import ANCHOR_ROLE, POSITIVE_ROLE
from contrast_audit.embed import EmbeddingStore
from contrast_audit.evidence import Pairs
from contrast_audit.evidence.blocks import BatchBlock
from contrast_audit.evidence.embedding import (
    AnchorEmbeddingDetector,
    EmbeddingDetector,
    MarginDetector,
    PairDetector,
    cross,
    pair_scores,
)
from contrast_audit.judge import batch_pairs, direction_pairs, evaluate
from contrast_audit.plan import Plan

DIRECTIONS = ("query_to_doc", "query_to_query", "doc_to_query", "doc_to_doc")


def _unit(rng: np.random.Generator, n: int, dim: int = 8) -> np.ndarray:
    m = rng.normal(size=(n, dim)).astype(np.float32)
    return m / np.linalg.norm(m, axis=1, keepdims=True)


@pytest.fixture
def world():
    """40 rows (some sharing texts, some with one or no hard negative) in batches of 7, 7, 7, 5, 7, 7."""
    rng = np.random.default_rng(3)
    rows = []
    for i in range(40):
        negatives = [f"n{i}a", f"n{i}b"][: i % 3]
        rows.append((f"q{i % 33}", f"d{i % 29}", *negatives))
    c = corpus_of(rows)
    store = EmbeddingStore(EmbeddingConfig(), query=_unit(rng, c.n_texts), doc=_unit(rng, c.n_texts))
    order = rng.permutation(40)
    sizes = [7, 7, 7, 5, 7, 7]
    cuts = np.cumsum([0, *sizes])
    plan = Plan.from_batches([order[a:b] for a, b in zip(cuts[:-1], cuts[1:], strict=True)], [0] * 6, "test")
    return c, store, plan.global_batches(1)


def _both_ways(c, gb, direction):
    """The direction's pairs with their place in the block's matrices, and the same pairs without it."""
    block = BatchBlock(gb.rows, gb.offsets, 0, len(gb))
    batch, anchor, other, at = block.pairs()
    with_at, _ = direction_pairs(c, direction, batch, anchor, other, at)
    plain = Pairs(with_at.direction, with_at.anchor_row, with_at.cand_row, with_at.cand_role, with_at.cand_tid)
    return with_at, plain


def test_block_pairs_are_the_batch_pairs(world):
    c, _, gb = world
    block_batch, block_anchor, block_other, _ = BatchBlock(gb.rows, gb.offsets, 0, len(gb)).pairs()
    batch, anchor, other = batch_pairs(gb, 0, len(gb))
    assert block_batch.tolist() == batch.tolist() and block_anchor.tolist() == anchor.tolist()
    assert block_other.tolist() == other.tolist()
    assert block_batch.shape[0] == sum(s * (s - 1) for s in (7, 7, 7, 5, 7, 7))


@pytest.mark.parametrize("direction", DIRECTIONS)
def test_matrix_cosines_equal_pair_by_pair(world, direction):
    c, store, gb = world
    with_at, plain = _both_ways(c, gb, direction)
    spaces = {"query": store.query, "doc": store.doc}
    for left_role, left in ((ANCHOR_ROLE, "query"), (POSITIVE_ROLE, "doc")):
        for right in ("query", "doc"):
            for right_role in (None, ANCHOR_ROLE, POSITIVE_ROLE):
                fast = cross(store, c, with_at, spaces[left], left_role, spaces[right], right_role)
                slow = cross(store, c, plain, spaces[left], left_role, spaces[right], right_role)
                np.testing.assert_allclose(fast, slow, atol=1e-6)
    some = np.arange(0, len(with_at), 3)
    np.testing.assert_allclose(
        cross(store, c, with_at, store.query, ANCHOR_ROLE, store.doc, idx=some),
        cross(store, c, plain, store.query, ANCHOR_ROLE, store.doc, idx=some),
        atol=1e-6,
    )
    for fast, slow in zip(pair_scores(store, c, with_at), pair_scores(store, c, plain), strict=True):
        np.testing.assert_allclose(fast, slow, atol=1e-6)


@pytest.mark.parametrize("direction", DIRECTIONS)
def test_detectors_judge_alike_either_way(world, direction):
    c, store, gb = world
    with_at, plain = _both_ways(c, gb, direction)
    # Thresholds low enough that every detector matches some of the random pairs.
    detectors = [
        EmbeddingDetector(store, 0.3),
        AnchorEmbeddingDetector(store, 0.3),
        MarginDetector(store, None, 0.5, support=0.2, report_suspects=True),
        PairDetector(store, "off", 0.5, 0.0, explicit=0.0, fallback=0.0),
    ]
    for d in detectors:
        d.prepare(c)
    found_fast, severity_fast, hits_fast = evaluate(detectors, with_at)
    found_slow, severity_slow, hits_slow = evaluate(detectors, plain)
    assert found_fast.tolist() == found_slow.tolist()
    assert severity_fast.tolist() == severity_slow.tolist()
    for fast, slow in zip(hits_fast, hits_slow, strict=True):
        assert fast.mask.any() or direction != "query_to_doc", fast.kind
        assert fast.mask.tolist() == slow.mask.tolist(), fast.kind
        np.testing.assert_allclose(fast.score[fast.mask], slow.score[slow.mask], rtol=1e-5, atol=1e-6)


def test_uneven_batches_fill_each_matrix(world):
    """Batches of two sizes in one block: every (anchor, other) position is read from its own batch."""
    c, store, gb = world
    block = BatchBlock(gb.rows, gb.offsets, 2, 5)  # sizes 7, 5, 7
    batch, anchor, other, at = block.pairs()
    assert sorted(set(batch.tolist())) == [2, 3, 4]
    got = block.cosine(c, store.query, ANCHOR_ROLE, store.doc, POSITIVE_ROLE, at.flat)
    want = np.einsum("ij,ij->i", store.query[c.anchor[anchor]], store.doc[c.positive[other]])
    np.testing.assert_allclose(got, want, atol=1e-6)


def test_an_empty_batch_has_no_pairs_and_breaks_nothing(world):
    c, store, _ = world
    offsets = np.array([0, 3, 3, 6])  # batches of 3, 0 and 3 rows
    block = BatchBlock(np.arange(6), offsets, 0, 3)
    batch, anchor, other, at = block.pairs()
    assert sorted(set(batch.tolist())) == [0, 2] and batch.shape[0] == 12
    got = block.cosine(c, store.query, ANCHOR_ROLE, store.doc, POSITIVE_ROLE, at.flat)
    want = np.einsum("ij,ij->i", store.query[c.anchor[anchor]], store.doc[c.positive[other]])
    np.testing.assert_allclose(got, want, atol=1e-6)
