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
from contrast_audit.evidence.base import Pairs
from contrast_audit.evidence.guards import row_texts, short_texts

NUMBER = r"\d+(?:[.,]\d+)*"


class NumberGuard:
    name = "number"
    soft = False
    threshold = 1.0

    def __init__(self, max_words: int) -> None:
        self.max_words = max_words

    def prepare(self, corpus: Corpus) -> None:
        if getattr(self, "corpus", None) is corpus:
            return  # one guard serves several detectors
        self.corpus = corpus
        numbers = corpus.texts.select(
            pl.col("norm").str.extract_all(NUMBER).list.unique().list.sort().list.join(" ")
        ).to_series()
        # Equal number sets get equal codes: a dense rank of the joined, sorted numbers.
        self.code = numbers.rank("dense").cast(pl.Int64).to_numpy()
        self.short = short_texts(corpus, self.max_words)

    def disagree(self, u: np.ndarray, v: np.ndarray) -> np.ndarray:
        """True where texts ``u`` and ``v`` are both short and carry different numbers."""
        if self.max_words <= 0:
            return np.zeros(u.shape[0], dtype=bool)
        return self.short[u] & self.short[v] & (self.code[u] != self.code[v])

    def measure(self, u: np.ndarray, v: np.ndarray) -> np.ndarray:
        """1 where texts ``u`` and ``v`` agree on their numbers (or either is long), 0 where they do not."""
        return (~self.disagree(u, v)).astype(np.float64)

    def comparisons(self, detector, pairs: Pairs) -> list[tuple[np.ndarray, np.ndarray]]:
        """The candidate with each text of the anchor row: a match is vetoed when it disagrees with both."""
        return row_texts(self.corpus, pairs)

    def veto(self, detector, pairs: Pairs, mask: np.ndarray) -> np.ndarray:
        """Vetoed where the candidate disagrees with both texts of the anchor row."""
        (anchor, cand), (positive, _) = row_texts(self.corpus, pairs)
        return mask & self.disagree(anchor, cand) & self.disagree(positive, cand)

    def info(self) -> dict:
        return {"number_guard_words": self.max_words}
