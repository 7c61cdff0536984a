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

import re
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


class _PairwiseGuard:
    """A guard judging the pairs of texts a match rests on, one pair at a time: it vetoes a match when
    every pair of texts it rests on is a pair of short texts that ``fails``. The pairs are the
    detector's own (``compared``: the anchor row's positive and the candidate for ``embedding``, the
    two anchors for ``anchor-embedding``, the candidate and the row text it matched for ``minhash``)
    or, by default, the candidate with either text of the anchor row."""

    threshold: float
    max_words: int

    def prepare(self, corpus: Corpus) -> None:
        if getattr(self, "corpus", None) is corpus:
            return  # one guard serves several detectors
        self.corpus = corpus
        self.short = short_texts(corpus, self.max_words)
        self._prepare(corpus)

    def _prepare(self, corpus: Corpus) -> None:
        pass

    def fails(self, u: np.ndarray, v: np.ndarray) -> np.ndarray:
        raise NotImplementedError

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
            out[idx] = self.fails(u[idx], v[idx])
        return out


class AlignmentGuard(_PairwiseGuard):
    """Vetoes a match when every pair of short texts it rests on does not align: token alignment
    (``tokens.TokenStore.alignment``) below ``threshold``."""

    def __init__(self, tokens: TokenStore, threshold: float, max_words: int) -> None:
        self.tokens = tokens
        self.threshold = threshold
        self.max_words = max_words

    def _prepare(self, corpus: Corpus) -> None:
        self.tokens.prepare(corpus)

    def finish(self) -> None:
        self.tokens.finish()

    def fails(self, u: np.ndarray, v: np.ndarray) -> np.ndarray:
        return self.tokens.alignment(u, v) < self.threshold

    def info(self) -> dict[str, Any]:
        return {
            "alignment_threshold": self.threshold,
            "alignment_words": self.max_words,
            **self.tokens.info(),
        }


_WORD = re.compile(r"\w+")


def order_ranks(a: list[str], b: list[str]) -> list[int]:
    """The words that occur exactly once in each of ``a`` and ``b``, in ``a``'s order, each as its
    rank in ``b``'s order: ``[0, 1, 2, ...]`` when the two agree."""
    count_a: dict[str, int] = {}
    for w in a:
        count_a[w] = count_a.get(w, 0) + 1
    at_b: dict[str, int] = {}
    for i, w in enumerate(b):
        at_b[w] = -1 if w in at_b else i
    shared = [w for w in a if count_a[w] == 1 and at_b.get(w, -1) >= 0]
    rank = {w: r for r, w in enumerate(sorted(shared, key=at_b.__getitem__))}
    return [rank[w] for w in shared]


def word_order(a: list[str], b: list[str]) -> float:
    """How well the order of two texts' shared words agrees (:func:`order_ranks`): 1 minus the share
    of neighbouring shared words of ``a`` that are not neighbours, in the same order, in ``b``.

    Moving one block of words elsewhere keeps the meaning and scores 1: the order differs only where
    two neighbouring blocks were exchanged ("In 2003 the team won the cup" / "The team won the cup in
    2003"; "the password of my account" / "my account password"). Exchanging words does not ("Anna
    met Bob in Paris" / "Bob met Anna in Paris": 0.25; "the dog bit the man" / "the man bit the
    dog": 0; "from new york to boston" / "from boston to new york": 0.25)."""
    seq = order_ranks(a, b)
    lo, hi = 0, len(seq)
    while lo < hi and seq[lo] == lo:
        lo += 1
    while hi > lo and seq[hi - 1] == hi - 1:
        hi -= 1
    middle = seq[lo:hi]
    breaks = sum(1 for x, y in zip(middle, middle[1:], strict=False) if x + 1 != y)
    if breaks <= 1:  # the same order, or two neighbouring blocks exchanged: one block moved
        return 1.0
    return 1.0 - (breaks + (lo > 0) + (hi < len(seq))) / (len(seq) - 1)


class OrderGuard(_PairwiseGuard):
    """Vetoes a match when every pair of short texts it rests on has its shared words in a
    different order (:func:`word_order` below ``threshold``): "the dog bit the man" is not a
    near-duplicate of "the man bit the dog", however close their embeddings and shingle sets.
    Needs no model: words are the normal form's ``\\w+`` runs."""

    def __init__(self, threshold: float, max_words: int) -> None:
        self.threshold = threshold
        self.max_words = max_words
        self._words: dict[int, list[str]] = {}

    def _prepare(self, corpus: Corpus) -> None:
        self._words = {}

    def fails(self, u: np.ndarray, v: np.ndarray) -> np.ndarray:
        words = self._words
        missing = [int(t) for t in np.unique(np.r_[u, v]) if int(t) not in words]
        if missing:
            texts = self.corpus.texts.get_column("norm").gather(missing).to_list()
            words.update((tid, _WORD.findall(text)) for tid, text in zip(missing, texts, strict=True))
        score = np.fromiter(
            (word_order(words[int(a)], words[int(b)]) for a, b in zip(u, v, strict=True)), np.float64, u.shape[0]
        )
        return score < self.threshold

    def info(self) -> dict[str, Any]:
        return {"word_order_threshold": self.threshold, "word_order_words": self.max_words}
