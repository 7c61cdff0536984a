"""``linked``: texts connected through the dataset's own positive pairs.

Every row is an edge between its anchor and its positive. A candidate is linked to an anchor row
when a chain of at most ``max_hops`` rows joins it to that row's anchor or positive (row A: x→y and
row B: y→z link z to A in one hop).

One hop from the anchor means another row pairs this very anchor text with the candidate: the data's
own label, ``certain``. Every other chain composes labels, inherits the data's label noise and runs
through generic texts ("A man is playing a guitar" → "A man is playing the instrument" → "A man is
playing a large flute"), so the chain alone proves little: one hop through the positive is ``certain``
only when the texts themselves are near each other (the candidate's cosine to what the anchor is
trained towards reaches the link bar: the ``NEAR_QUANTILE`` of the rows' own anchor–positive cosines,
at least ``NEAR_FLOOR``); one that is not near, and every longer chain, is ``suspect``. Without
embeddings one hop through the positive is ``certain`` and longer chains are ``suspect``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import scipy.sparse as sp
from scipy.sparse.csgraph import connected_components

from contrast_audit.corpus import Corpus
from contrast_audit.evidence.base import CERTAIN, SUSPECT, Hits, Pairs

NEAR_QUANTILE = 0.1
NEAR_FLOOR = 0.5
MIN_ROWS = 50  # fewer rows with a positive of their own: the bar is the floor


class LinkedDetector:
    name = "linked"
    description = "candidate is joined to the anchor row by a chain of the dataset's positive pairs"
    RULES = (
        "one hop from the anchor (another row pairs the anchor with the candidate)",
        "one hop through the positive, texts near",
        "one hop through the positive (no embeddings to check the texts)",
        "one hop through the positive, texts not near",
        "two or more hops",
    )

    def __init__(self, max_hops: int = 2, store=None) -> None:
        self.max_hops = max_hops
        self.store = store
        self.near_bar: float | None = None
        # Whether chains through the positive are checked with embeddings: by ``store`` here, or, in a
        # streamed audit, by each run's own store (``check_near``) against a bar set from outside.
        self.checks_near = store is not None

    def prepare(self, corpus: Corpus) -> None:
        self.corpus = corpus
        if self.store is not None:
            from contrast_audit.evidence.embedding import row_positive_scores

            self.store.prepare(corpus)
            # The rows' own sim(anchor, positive), shared with the margin rule (computed once per store).
            # Every row's, or a sample's (``EmbeddingStore.calibration_rows``).
            own = (corpus.anchor != corpus.positive) & self.store.calibration_rows(corpus)
            self.near_bar = near_bar(row_positive_scores(self.store, corpus, from_doc=False)[own])
        n = corpus.n_texts
        a, p = corpus.anchor, corpus.positive
        keep = a != p
        rows = np.r_[a[keep], p[keep]]
        cols = np.r_[p[keep], a[keep]]
        adj = sp.csr_matrix((np.ones(rows.shape[0], dtype=np.float32), (rows, cols)), shape=(n, n))
        adj.data[:] = 1.0
        self.adj = adj
        self.n_components, self.component = connected_components(adj, directed=False)

    def hops(self, src: np.ndarray, dst: np.ndarray) -> np.ndarray:
        """Shortest chain length from each ``src`` to its ``dst`` text; 0 where none within
        ``max_hops`` (or the texts are the same)."""
        out = np.zeros(src.shape[0], dtype=np.int64)
        if self.max_hops == 0 or src.shape[0] == 0:
            return out
        todo = np.flatnonzero((self.component[src] == self.component[dst]) & (src != dst))
        if todo.shape[0] == 0:
            return out
        sources, src_index = np.unique(src[todo], return_inverse=True)
        keys, dist = self._reach(sources)
        n = self.adj.shape[0]
        wanted = src_index.astype(np.int64) * n + dst[todo]
        pos = np.searchsorted(keys, wanted)
        pos_ok = pos < keys.shape[0]
        found = np.zeros(todo.shape[0], dtype=bool)
        found[pos_ok] = keys[pos[pos_ok]] == wanted[pos_ok]
        out[todo[found]] = dist[pos[found]]
        return out

    def _reach(self, sources: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Breadth-first search from every source at once, as sparse matrix products."""
        k, n = sources.shape[0], self.adj.shape[0]
        frontier = sp.csr_matrix((np.ones(k, dtype=np.float32), (np.arange(k), sources)), shape=(k, n))
        visited = frontier.copy()
        keys: list[np.ndarray] = []
        dists: list[np.ndarray] = []
        for hop in range(1, self.max_hops + 1):
            nxt = frontier @ self.adj
            nxt = nxt - nxt.multiply(visited)
            nxt.eliminate_zeros()
            if nxt.nnz == 0:
                break
            nxt.data[:] = 1.0
            coo = nxt.tocoo()
            keys.append(coo.row.astype(np.int64) * n + coo.col)
            dists.append(np.full(coo.nnz, hop, dtype=np.int64))
            visited = visited + nxt
            frontier = nxt
        if not keys:
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
        all_keys = np.concatenate(keys)
        all_dist = np.concatenate(dists)
        order = np.argsort(all_keys, kind="stable")
        return all_keys[order], all_dist[order]

    def detect(self, pairs: Pairs) -> Hits:
        c = self.corpus
        r = pairs.anchor_row
        from_anchor = self.hops(c.anchor[r], pairs.cand_tid)
        from_positive = self.hops(c.positive[r], pairs.cand_tid)
        both = np.where(
            from_anchor == 0,
            from_positive,
            np.where(from_positive == 0, from_anchor, np.minimum(from_anchor, from_positive)),
        )
        # Identity is exact evidence, not a chain.
        same = (pairs.cand_tid == c.anchor[r]) | (pairs.cand_tid == c.positive[r])
        mask = (both > 0) & ~same
        rule = np.select([from_anchor == 1, both == 1], [0, 2], default=4).astype(np.int64)
        severity = np.where(rule <= 2, CERTAIN, SUSPECT).astype(np.int8)
        hits = Hits(self.name, mask, both.astype(np.float64), float(self.max_hops), severity, rule, self.RULES)
        if self.store is not None:
            self.check_near(self.store, c, pairs, hits)
        return hits

    def check_near(self, store, corpus: Corpus, pairs: Pairs, hits: Hits) -> None:
        """Chains one hop through the positive, checked with ``store``'s vectors: ``certain`` where the
        texts are near (the candidate's cosine to what the anchor is trained towards reaches
        ``near_bar``), ``suspect`` where not."""
        assert hits.rule is not None
        chain = np.flatnonzero(hits.mask & (hits.rule == 2))
        if chain.size == 0:
            return
        from contrast_audit.evidence.embedding import target_scores

        r = pairs.anchor_row[chain]
        store.ensure(np.r_[pairs.cand_tid[chain], corpus.anchor[r], corpus.positive[r]])
        near = target_scores(store, corpus, pairs, chain) >= self.near_bar
        hits.rule[chain] = np.where(near, 1, 3)
        hits.severity[chain] = np.where(near, CERTAIN, SUSPECT)

    def info(self) -> dict[str, Any]:
        return {
            "max_hops": self.max_hops,
            "components": int(self.n_components),
            "near_bar": self.near_bar,
            "certain_when": "one hop from the anchor; one hop through the positive where "
            + (
                "the candidate's cosine to what the anchor is trained towards reaches near_bar (the "
                f"{NEAR_QUANTILE:g} quantile of the rows' own anchor-positive cosines, at least {NEAR_FLOOR:g})"
                if self.checks_near
                else "no embeddings check the texts"
            ),
            "suspect_when": "one hop through the positive whose texts are not near, or two or more hops",
        }


def near_bar(own_scores: np.ndarray) -> float:
    """The link bar from the rows' own anchor-positive cosines: their ``NEAR_QUANTILE``, at least
    ``NEAR_FLOOR`` (the floor alone for fewer than ``MIN_ROWS`` rows)."""
    bar = float(np.quantile(own_scores, NEAR_QUANTILE)) if own_scores.shape[0] >= MIN_ROWS else NEAR_FLOOR
    return round(max(NEAR_FLOOR, bar), 4)
