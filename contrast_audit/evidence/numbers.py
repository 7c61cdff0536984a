"""The number guard of the semantic evidence: two short texts that disagree on their numbers are
not near-duplicates, however close their embeddings or shingles ("USB-C cable, 2 m" vs "1 m",
"error 429" vs "error 500", "rose 0.6%" vs "rose 1.3%").

A pair is vetoed when both texts have at most ``max_words`` words and the sets of numbers they
contain differ. Longer texts (passages) are never vetoed: their halves or sections legitimately
carry different numbers.
"""

from __future__ import annotations

import numpy as np
import polars as pl

from contrast_audit.corpus import Corpus

NUMBER = r"\d+(?:[.,]\d+)*"


class NumberGuard:
    def __init__(self, max_words: int) -> None:
        self.max_words = max_words

    def prepare(self, corpus: Corpus) -> None:
        norm = corpus.texts.select(
            pl.col("norm").str.extract_all(NUMBER).list.unique().list.sort().list.join(" ").alias("numbers"),
            pl.col("norm").str.split(" ").list.len().alias("words"),
        )
        # Equal number sets get equal codes: a dense rank of the joined, sorted numbers.
        self.code = norm.get_column("numbers").rank("dense").cast(pl.Int64).to_numpy()
        self.short = (norm.get_column("words") <= self.max_words).to_numpy()

    def disagree(self, u: np.ndarray, v: np.ndarray) -> np.ndarray:
        """True where texts ``u`` and ``v`` are both short and carry different numbers."""
        if self.max_words <= 0:
            return np.zeros(u.shape[0], dtype=bool)
        return self.short[u] & self.short[v] & (self.code[u] != self.code[v])


class NumberGuarded:
    """A semantic detector whose hits are dropped where the candidate disagrees on numbers with
    both the anchor and the positive of the anchor row."""

    def __init__(self, inner, guard: NumberGuard) -> None:
        self.inner = inner
        self.guard = guard
        self.name = inner.name
        self.description = inner.description

    @property
    def store(self):
        return getattr(self.inner, "store", None)

    def prepare(self, corpus: Corpus) -> None:
        self.corpus = corpus
        self.inner.prepare(corpus)
        self.guard.prepare(corpus)

    def detect(self, pairs):
        from dataclasses import replace

        hits = self.inner.detect(pairs)
        c = self.corpus
        # Vetoed only when the candidate disagrees with both texts of the anchor row: semantic
        # evidence may have matched either of them.
        anchor, positive = c.anchor[pairs.anchor_row], c.positive[pairs.anchor_row]
        veto = self.guard.disagree(anchor, pairs.cand_tid) & self.guard.disagree(positive, pairs.cand_tid)
        return replace(hits, mask=hits.mask & ~veto)

    def info(self) -> dict:
        return {**self.inner.info(), "number_guard_words": self.guard.max_words}
