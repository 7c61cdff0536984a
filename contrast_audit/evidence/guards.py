"""Guards of the semantic evidence: rules under which a MinHash or embedding match between short
texts does not count. Each guard looks only at the pairs a detector matched and vetoes a pair when
the candidate fails it against both texts of the anchor row (semantic evidence may have matched
either of them). Longer texts (passages) are never vetoed: their halves or sections legitimately
differ in wording and figures.

- ``NumberGuard`` (numbers.py): short texts whose numbers differ are not near-duplicates.
- ``AlignmentGuard``: short texts whose tokens do not align (``tokens.TokenStore.alignment`` below
  the threshold) are not near-duplicates — one carries content the other lacks.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np
import polars as pl

from contrast_audit.corpus import Corpus
from contrast_audit.evidence.base import Hits, Pairs

if TYPE_CHECKING:  # the token store needs the embedding model; lexical-only scans never import it
    from contrast_audit.tokens import TokenStore


def short_texts(corpus: Corpus, max_words: int) -> np.ndarray:
    """Per text id: at most ``max_words`` words in its normal form."""
    words = corpus.texts.select(pl.col("norm").str.split(" ").list.len()).to_series()
    return (words <= max_words).to_numpy()


def row_texts(corpus: Corpus, pairs: Pairs) -> list[tuple[np.ndarray, np.ndarray]]:
    """The default comparisons of semantic evidence: the candidate with the anchor and with the
    positive of the anchor row (a detector may have matched either)."""
    rows = pairs.anchor_row
    return [(corpus.anchor[rows], pairs.cand_tid), (corpus.positive[rows], pairs.cand_tid)]


class Guard(Protocol):
    def prepare(self, corpus: Corpus) -> None: ...

    def veto(self, detector, pairs: Pairs, mask: np.ndarray) -> np.ndarray: ...

    def info(self) -> dict[str, Any]: ...


class Guarded:
    """A semantic detector whose matches are dropped where any guard vetoes them."""

    def __init__(self, inner, guards: list[Guard]) -> None:
        self.inner = inner
        self.guards = guards
        self.name = inner.name
        self.description = inner.description

    @property
    def store(self):
        return getattr(self.inner, "store", None)

    def prepare(self, corpus: Corpus) -> None:
        self.corpus = corpus
        self.inner.prepare(corpus)
        for guard in self.guards:
            guard.prepare(corpus)

    def finish(self) -> None:
        for guard in self.guards:
            getattr(guard, "finish", lambda: None)()

    def detect(self, pairs: Pairs) -> Hits:
        hits = self.inner.detect(pairs)
        matched = np.flatnonzero(hits.mask)
        if matched.shape[0] == 0 or not self.guards:
            return hits
        # The guards look at the matches only: a batch has thousands of candidates and a few matches.
        some = pairs.take(matched)
        keep = np.ones(matched.shape[0], dtype=bool)
        for guard in self.guards:
            keep &= ~guard.veto(self.inner, some, keep)
        mask = np.zeros(len(pairs), dtype=bool)
        mask[matched[keep]] = True
        return replace(hits, mask=mask)

    def info(self) -> dict:
        out = dict(self.inner.info())
        for guard in self.guards:
            out.update(guard.info())
        return out


class AlignmentGuard:
    """Vetoes a match when every pair of texts it rests on is a pair of short texts that do not
    align. The pairs are the detector's own (``compared``: the anchor row's positive and the
    candidate for ``embedding``, the two anchors for ``anchor-embedding``) or, by default, the
    candidate with either text of the anchor row."""

    def __init__(self, tokens: TokenStore, threshold: float, max_words: int) -> None:
        self.tokens = tokens
        self.threshold = threshold
        self.max_words = max_words

    def prepare(self, corpus: Corpus) -> None:
        if getattr(self, "corpus", None) is corpus:
            return  # one guard serves several detectors
        self.corpus = corpus
        self.short = short_texts(corpus, self.max_words)
        self.tokens.prepare(corpus)

    def finish(self) -> None:
        self.tokens.finish()

    def veto(self, detector, pairs: Pairs, mask: np.ndarray) -> np.ndarray:
        compared = getattr(detector, "compared", None)
        comparisons = compared(pairs) if compared else row_texts(self.corpus, pairs)
        out = mask.copy()
        for u, v in comparisons:
            out &= self.short[u] & self.short[v]
        if self.threshold <= 0:
            return np.zeros(mask.shape[0], dtype=bool)
        for u, v in comparisons:  # each later comparison only where the earlier ones all failed
            idx = np.flatnonzero(out)
            if idx.size == 0:
                break
            out[idx] = self.tokens.alignment(u[idx], v[idx]) < self.threshold
        return out

    def info(self) -> dict[str, Any]:
        return {
            "alignment_threshold": self.threshold,
            "alignment_words": self.max_words,
            **self.tokens.info(),
        }
