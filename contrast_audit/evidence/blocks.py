"""Similarities at matrix speed: the candidate pairs of a run of global batches, and their cosines
read from one matrix product per batch.

Every in-batch comparison sets a text of one row (its anchor or its positive) against a text of
another row of the same global batch (its anchor, positive or a hard negative). For one kind of
comparison — which text of the anchor row, which text of the candidate row, in which embedding
space — the cosines of all pairs of a batch are one product ``L @ R.T`` of the batch's vectors
(BLAS), instead of two vectors gathered per pair. A ``BatchBlock`` computes each kind once, when a
detector first asks for it, and every detector reading the same kind shares it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from contrast_audit.corpus import ANCHOR_ROLE, POSITIVE_ROLE, Corpus


def role_texts(corpus: Corpus, rows: np.ndarray, role: int) -> np.ndarray:
    """The text ids of ``role`` (anchor, positive, negative k) in ``rows``; -1 where a row has none."""
    if role == ANCHOR_ROLE:
        return corpus.anchor[rows]
    if role == POSITIVE_ROLE:
        return corpus.positive[rows]
    return corpus.negatives[rows, role - 1]


class BatchBlock:
    """Global batches ``start..stop-1`` of ``rows``/``offsets`` (a ``GlobalBatches``), as the unit of
    the similarity matrices: occurrence ``o`` (an index into the block's rows) sits at position
    ``pos[o]`` of local batch ``batch_of[o]``."""

    def __init__(self, rows: np.ndarray, offsets: np.ndarray, start: int, stop: int) -> None:
        lo, hi = int(offsets[start]), int(offsets[stop])
        self.start = start
        self.rows = rows[lo:hi]
        self.sizes = np.diff(offsets[start : stop + 1])
        self.local_offsets = offsets[start:stop] - lo
        self.batch_of = np.repeat(np.arange(stop - start), self.sizes)
        self.pos = np.arange(self.rows.shape[0]) - self.local_offsets[self.batch_of]
        squares = self.sizes.astype(np.int64) ** 2
        self.flat_start = np.cumsum(squares) - squares  # where each batch's size × size matrix begins
        self.flat_size = int(squares.sum())
        self._matrices: dict[tuple, np.ndarray] = {}
        self._gathered: dict[tuple, np.ndarray] = {}

    def pairs(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, Slots]:
        """Every ordered pair of distinct occurrences: (global batch, anchor row, other row, slots)."""
        counts = self.sizes[self.batch_of]
        total = int(counts.sum())
        i = np.repeat(np.arange(self.rows.shape[0]), counts)
        block_start = np.repeat(self.local_offsets[self.batch_of], counts)
        within = np.arange(total) - np.repeat(np.cumsum(counts) - counts, counts)
        j = block_start + within
        keep = i != j
        i, j = i[keep], j[keep]
        batch = self.batch_of[i]
        flat = self.flat_start[batch] + self.pos[i] * self.sizes[batch] + self.pos[j]
        return batch + self.start, self.rows[i], self.rows[j], Slots(self, flat)

    def cosine(
        self, corpus: Corpus, left: np.ndarray, left_role: int, right: np.ndarray, right_role: int, flat: np.ndarray
    ) -> np.ndarray:
        """cosine(``left[left_role text of the anchor row]``, ``right[right_role text of the other
        row]``) at the matrix positions ``flat``."""
        key = (id(left), left_role, id(right), right_role)
        matrix = self._matrices.get(key)
        if matrix is None:
            matrix = self._matrices[key] = self._products(
                self._vectors(corpus, left, left_role), self._vectors(corpus, right, right_role)
            )
        return matrix[flat]

    def _vectors(self, corpus: Corpus, space: np.ndarray, role: int) -> np.ndarray:
        """The vectors of every occurrence's ``role`` text (zero where the row has none), gathered once."""
        key = (id(space), role)
        vectors = self._gathered.get(key)
        if vectors is None:
            tids = role_texts(corpus, self.rows, role)
            vectors = space[np.maximum(tids, 0)]
            missing = tids < 0
            if missing.any():
                vectors[missing] = 0.0
            self._gathered[key] = vectors
        return vectors

    def _products(self, lv: np.ndarray, rv: np.ndarray) -> np.ndarray:
        """Every batch's ``L @ R.T``, flattened batch after batch."""
        dim = lv.shape[1]
        sizes = np.unique(self.sizes[self.sizes > 0])  # an empty batch has no pairs
        if sizes.shape[0] == 1 and (self.sizes == sizes[0]).all():  # equal batches: one product, in order
            size = int(sizes[0])
            lv, rv = lv.reshape(-1, size, dim), rv.reshape(-1, size, dim)
            return np.matmul(lv, rv.transpose(0, 2, 1)).ravel()
        out = np.empty(self.flat_size, dtype=np.float32)
        for size in sizes:
            size = int(size)
            batches = np.flatnonzero(self.sizes == size)
            occ = (self.local_offsets[batches][:, None] + np.arange(size)).ravel()
            products = np.matmul(lv[occ].reshape(-1, size, dim), rv[occ].reshape(-1, size, dim).transpose(0, 2, 1))
            out[(self.flat_start[batches][:, None] + np.arange(size * size)).ravel()] = products.ravel()
        return out


@dataclass(frozen=True)
class Slots:
    """Where each candidate pair sits in its batch's similarity matrices (``BatchBlock``)."""

    block: BatchBlock
    flat: np.ndarray

    def take(self, idx: np.ndarray) -> Slots:
        return Slots(self.block, self.flat[idx])

    @staticmethod
    def concat(parts: list[Slots]) -> Slots:
        return Slots(parts[0].block, np.concatenate([p.flat for p in parts]))
