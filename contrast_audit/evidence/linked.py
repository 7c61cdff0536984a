"""``linked``: texts connected through the dataset's own positive pairs.

Every row is an edge between its anchor and its positive. A candidate is linked to an anchor row
when a chain of at most ``max_hops`` rows joins it to that row's anchor or positive (row A: x→y and
row B: y→z link z to A in one hop). One hop is ``certain``; longer chains are ``likely``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import scipy.sparse as sp
from scipy.sparse.csgraph import connected_components

from contrast_audit.corpus import Corpus
from contrast_audit.evidence.base import CERTAIN, LIKELY, Hits, Pairs


class LinkedDetector:
    name = "linked"
    description = "candidate is joined to the anchor row by a chain of the dataset's positive pairs"

    def __init__(self, max_hops: int = 2) -> None:
        self.max_hops = max_hops

    def prepare(self, corpus: Corpus) -> None:
        self.corpus = corpus
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
        severity = np.where(both == 1, CERTAIN, LIKELY).astype(np.int8)
        return Hits(self.name, mask, both.astype(np.float64), float(self.max_hops), severity)

    def info(self) -> dict[str, Any]:
        return {"max_hops": self.max_hops, "components": int(self.n_components)}
