"""Embedding evidence (sentence-transformers): three detectors over one shared ``EmbeddingStore``.

- ``embedding``: the candidate is a near-duplicate of what the anchor is trained towards — a
  document candidate of the anchor row's positive, a query candidate of the anchor itself
  (cosine ≥ ``positive_threshold``): ``likely``.
- ``anchor-embedding``: the candidate is another row's positive and that row's anchor is a
  paraphrase of this anchor (cosine ≥ ``anchor_threshold``): ``suspect``. Read by a person, half of
  its findings on natural batches were false negatives: similar captions of different images,
  similar claims with different evidence, similar queries with different documents
  (docs/quality.md). The candidate itself is what the loss pushes away, and it is not compared.
- ``margin``: the candidate scores against the anchor within a margin of the anchor's own positive,
  ``sim(a, c) > sim(a, p) - absolute_margin`` or ``sim(a, c) > sim(a, p) * (1 - relative_margin)``
  (GISTEmbedLoss / mine_hard_negatives vocabulary): ``suspect`` (the rule says "same topic"); with a
  ``support`` bar, ``likely`` when the candidate is also within ``support`` cosine of the positive in
  a query→document row, unless the candidate is the row's own hard negative (mined for scoring high:
  never more than ``suspect``). Rows whose positive is the anchor itself are left to ``embedding``.

Identical texts are left to the ``exact`` detector.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from contrast_audit.corpus import ANCHOR_ROLE, POSITIVE_ROLE, Corpus, alike_rows
from contrast_audit.embed import EmbeddingStore
from contrast_audit.evidence.base import LIKELY, SUSPECT, Hits, Pairs
from contrast_audit.evidence.blocks import role_texts


def _candidate_space(store: EmbeddingStore, pairs: Pairs) -> tuple[np.ndarray, bool]:
    """The candidate's vectors: query vectors for anchor candidates, document vectors otherwise."""
    query_candidates = pairs.direction in ("query_to_query", "doc_to_query")
    return (store.query if query_candidates else store.doc), query_candidates


def cross(
    store: EmbeddingStore,
    corpus: Corpus,
    pairs: Pairs,
    left: np.ndarray,
    left_role: int,
    right: np.ndarray,
    right_role: int | None = None,
    idx: np.ndarray | None = None,
) -> np.ndarray:
    """cosine(``left`` vector of the anchor row's ``left_role`` text, ``right`` vector of the
    candidate row's ``right_role`` text; by default the candidate itself) for every pair, or the
    pairs at positions ``idx``: read from the batches' similarity matrices when the pairs carry
    their place in them, else pair by pair."""
    pick = (lambda a: a) if idx is None else (lambda a: a[idx])
    if pairs.at is None:
        tids = pick(pairs.cand_tid) if right_role is None else role_texts(corpus, pick(pairs.cand_row), right_role)
        return store.cosine(left, right, role_texts(corpus, pick(pairs.anchor_row), left_role), tids)
    block, flat = pairs.at.block, pick(pairs.at.flat)
    if right_role is not None:
        return block.cosine(corpus, left, left_role, right, right_role, flat)
    cand_role = pick(pairs.cand_role)
    roles = np.flatnonzero(np.bincount(cand_role - ANCHOR_ROLE)) + ANCHOR_ROLE
    if roles.shape[0] <= 1:
        return block.cosine(corpus, left, left_role, right, int(roles[0]) if roles.shape[0] else ANCHOR_ROLE, flat)
    out = np.empty(flat.shape[0], dtype=np.float32)
    for role in roles:
        at = np.flatnonzero(cand_role == role)
        out[at] = block.cosine(corpus, left, left_role, right, int(role), flat[at])
    return out


def pair_scores(store: EmbeddingStore, corpus: Corpus, pairs: Pairs) -> tuple[np.ndarray, np.ndarray]:
    """sim(compared text, candidate) and sim(compared text, its target) for every pair: for
    ``query_to_*`` the anchor against the candidate and against its positive; for ``doc_to_*`` the
    positive against the candidate and against its anchor — the logits MNRL puts in one softmax."""
    from_doc = pairs.direction in ("doc_to_query", "doc_to_doc")
    side_role, side_space = (POSITIVE_ROLE, store.doc) if from_doc else (ANCHOR_ROLE, store.query)
    space, _ = _candidate_space(store, pairs)
    return cross(store, corpus, pairs, side_space, side_role, space), row_positive_scores(store, corpus, from_doc)[
        pairs.anchor_row
    ]


def target_scores(store: EmbeddingStore, corpus: Corpus, pairs: Pairs, idx: np.ndarray | None = None) -> np.ndarray:
    """sim(what the anchor is trained towards, candidate) of every pair (or those at ``idx``): a query
    candidate against the anchor, a document candidate against the anchor row's positive (the
    ``embedding`` evidence)."""
    space, query_candidates = _candidate_space(store, pairs)
    return cross(store, corpus, pairs, space, ANCHOR_ROLE if query_candidates else POSITIVE_ROLE, space, idx=idx)


def row_positive_scores(store: EmbeddingStore, corpus: Corpus, from_doc: bool) -> np.ndarray:
    """sim(anchor, positive) of every row (the same for all its pairs), computed once per store."""
    key = ("row_positive", from_doc)
    if key not in store.memo:
        a, p = corpus.anchor, corpus.positive
        if from_doc:
            store.memo[key] = store.cosine(store.doc, store.query, p, a)
        else:
            store.memo[key] = store.cosine(store.query, store.doc, a, p)
    return store.memo[key]


class _CosineDetector:
    """A detector reading one shared ``EmbeddingStore`` with one cosine threshold."""

    def __init__(self, store: EmbeddingStore, threshold: float) -> None:
        self.store = store
        self.threshold = threshold

    def prepare(self, corpus: Corpus) -> None:
        self.corpus = corpus
        self.store.prepare(corpus)


class EmbeddingDetector(_CosineDetector):
    """``likely`` when the candidate is a near-duplicate of what the anchor is trained towards: a
    document candidate of the row's positive, a query candidate of the anchor. In a row whose two texts
    are alike (``alike_rows``; both embedded alike, with one prompt) a document candidate is also
    compared with the anchor itself: a reader sees "the onion is sliced by the woman" repeat "an onion
    is sliced by a woman" whichever of the row's two texts it is set against."""

    name = "embedding"
    description = (
        "candidate is a near-duplicate, by embedding cosine, of the anchor row's positive (or anchor; of either "
        "in a row whose two texts are alike)"
    )
    RULES = ("near the positive", "near the anchor, in a row whose two texts are alike")

    def __init__(self, store: EmbeddingStore, threshold: float, doc_ratio: float = 0.0) -> None:
        super().__init__(store, threshold)
        self.doc_ratio = doc_ratio

    def prepare(self, corpus: Corpus) -> None:
        super().prepare(corpus)
        same_space = self.store.query is self.store.doc  # one prompt: anchors and documents embedded alike
        self.alike = alike_rows(corpus, self.doc_ratio) if same_space else np.zeros(corpus.n_rows, dtype=bool)

    def _target(self, pairs: Pairs) -> np.ndarray:
        query_candidates = pairs.direction in ("query_to_query", "doc_to_query")
        return (self.corpus.anchor if query_candidates else self.corpus.positive)[pairs.anchor_row]

    def _anchor_side(self, pairs: Pairs) -> np.ndarray:
        """Where the candidate is also compared with the anchor: document candidates in alike rows."""
        if pairs.direction not in ("query_to_doc", "doc_to_doc"):
            return np.zeros(len(pairs), dtype=bool)
        return self.alike[pairs.anchor_row]

    def scores(self, pairs: Pairs) -> tuple[np.ndarray, np.ndarray]:
        """cosine(candidate, target) and cosine(candidate, anchor) (NaN where not compared)."""
        target = target_scores(self.store, self.corpus, pairs)
        anchor = np.full(len(pairs), np.nan, dtype=np.float32)
        idx = np.flatnonzero(self._anchor_side(pairs))
        if idx.size:
            s = self.store
            anchor[idx] = cross(s, self.corpus, pairs, s.doc, ANCHOR_ROLE, s.doc, idx=idx)
        return target, anchor

    def compared(self, pairs: Pairs) -> list[tuple[np.ndarray, np.ndarray]]:
        """The texts this evidence says are near-duplicates (for the guards): the candidate and whichever
        text of the row it matched, or each of them when it matched both."""
        target = self._target(pairs)
        side = self._anchor_side(pairs)
        if not side.any():
            return [(target, pairs.cand_tid)]
        to_target, to_anchor = self.scores(pairs)
        to_anchor = side & (to_anchor >= self.threshold)
        to_target = to_target >= self.threshold
        anchor = self.corpus.anchor[pairs.anchor_row]
        return [
            (np.where(to_target | ~to_anchor, target, anchor), pairs.cand_tid),
            (np.where(to_anchor, anchor, target), pairs.cand_tid),
        ]

    def detect(self, pairs: Pairs) -> Hits:
        to_target, to_anchor = self.scores(pairs)
        by_anchor = np.nan_to_num(to_anchor, nan=-1.0) > to_target
        score = np.where(by_anchor, to_anchor, to_target).astype(np.float64)
        score[~self.store.compared(self._target(pairs), pairs.cand_tid)] = np.nan  # left out by the first stage
        mask = score >= self.threshold
        idx = np.flatnonzero(mask)
        rows, cand = pairs.anchor_row[idx], pairs.cand_tid[idx]
        # Identical texts are the exact detector's: the candidate is neither the target nor, where the anchor
        # is compared, the anchor itself.
        same = (self._target(pairs.take(idx)) == cand) | (by_anchor[idx] & (self.corpus.anchor[rows] == cand))
        mask[idx] = ~same
        return Hits(
            self.name,
            mask,
            score,
            self.threshold,
            np.full(len(pairs), LIKELY, dtype=np.int8),
            by_anchor.astype(np.int64),
            self.RULES,
        )

    def info(self) -> dict[str, Any]:
        return {
            "threshold": self.threshold,
            "alike_rows_doc_ratio": self.doc_ratio,
            **self.store.info(),
        }


class AnchorEmbeddingDetector(_CosineDetector):
    name = "anchor-embedding"
    description = "candidate is the positive of a row whose anchor paraphrases this anchor (embedding cosine)"

    def compared(self, pairs: Pairs) -> list[tuple[np.ndarray, np.ndarray]]:
        return [(self.corpus.anchor[pairs.anchor_row], self.corpus.anchor[pairs.cand_row])]

    def detect(self, pairs: Pairs) -> Hits:
        c, s = self.corpus, self.store
        mine, theirs = c.anchor[pairs.anchor_row], c.anchor[pairs.cand_row]
        eligible = (pairs.cand_role == POSITIVE_ROLE) & (pairs.cand_row != pairs.anchor_row) & (mine != theirs)
        score = np.zeros(len(pairs), dtype=np.float64)
        idx = np.flatnonzero(eligible)
        score[idx] = cross(s, c, pairs, s.query, ANCHOR_ROLE, s.query, ANCHOR_ROLE, idx=idx)
        score[~s.compared(mine, theirs)] = np.nan  # left out by the first stage
        mask = eligible & (score >= self.threshold)
        return Hits(self.name, mask, score, self.threshold, np.full(len(pairs), SUSPECT, dtype=np.int8))

    def info(self) -> dict[str, Any]:
        return {"threshold": self.threshold}


class MarginDetector(_CosineDetector):
    name = "margin"
    description = (
        "candidate scores against the anchor within the margin of the anchor's own positive: likely when it is "
        "also close to the positive (unless it is the row's own hard negative), suspect alone"
    )

    def __init__(
        self,
        store: EmbeddingStore,
        absolute_margin: float | None,
        relative_margin: float | None,
        support: float | None,
        report_suspects: bool,
        doc_ratio: float = 0.0,
        above_quantile: float = 0.0,
    ) -> None:
        super().__init__(store, threshold=1.0 if support is None else support)
        self.absolute_margin = absolute_margin
        self.relative_margin = relative_margin
        self.support = support
        self.report_suspects = report_suspects
        self.doc_ratio = doc_ratio
        self.above_quantile = above_quantile
        self.above_bar: dict[bool, float] = {}

    def prepare(self, corpus: Corpus) -> None:
        super().prepare(corpus)
        # Query→document rows: the positive has at least ``doc_ratio`` times the anchor's words. In rows
        # whose two texts are alike (paraphrase pairs, captions), the rule only says "same topic".
        self.query_doc_row = ~alike_rows(corpus, self.doc_ratio)
        # The rule above the positive reads the data as queries and documents: most of its rows are. A long
        # caption beside a short one is no document (captions, paraphrases: most rows are alike).
        self.query_doc_data = bool(self.query_doc_row.mean() > 0.5) if corpus.n_rows else False
        self.above_bar = {}

    def _above_bar(self, from_doc: bool) -> float:
        """The ``above_quantile`` quantile of the data's own positive scores (query→document rows whose
        positive is not the anchor): the relevance only the best-answered tenth of the data reaches."""
        if from_doc not in self.above_bar:
            c = self.corpus
            own = self.query_doc_row & (c.anchor != c.positive)
            scores = row_positive_scores(self.store, c, from_doc)[own]
            self.above_bar[from_doc] = float(np.quantile(scores, self.above_quantile)) if scores.size else np.inf
        return self.above_bar[from_doc]

    def detect(self, pairs: Pairs) -> Hits:
        c, s = self.corpus, self.store
        if self.support is None and not self.report_suspects and self.above_quantile <= 0:  # nothing to do
            empty = np.zeros(len(pairs), dtype=bool)
            # A NaN bar: the rule did not look (a finding's ``why_not`` leaves it out).
            return Hits(self.name, empty, np.zeros(len(pairs)), float("nan"), np.zeros(len(pairs), dtype=np.int8))
        cand, pos = pair_scores(s, c, pairs)
        if self.relative_margin is not None:
            threshold = 1.0 - self.relative_margin
            score = np.divide(cand, pos, out=np.zeros_like(cand), where=pos > 0).astype(np.float64)
            mask = (pos > 0) & (score > threshold)
        else:
            threshold = -float(self.absolute_margin or 0.0)
            score = (cand - pos).astype(np.float64)
            mask = score > threshold
        # A row whose positive is its anchor (SimCSE-style) has sim(a, p) = 1: the rule would be a
        # cosine threshold on the anchor, a near-duplicate claim the embedding detector judges.
        idx = np.flatnonzero(mask)
        rows, cand_tid = pairs.anchor_row[idx], pairs.cand_tid[idx]
        anchor, positive = c.anchor[rows], c.positive[rows]
        mask[idx] = (cand_tid != anchor) & (cand_tid != positive) & (anchor != positive)
        # Corroboration: the candidate is also near what the anchor is trained towards.
        supported = np.zeros(len(pairs), dtype=bool)
        idx = np.flatnonzero(mask)
        rows = pairs.anchor_row[idx]
        # A row's own hard negatives were (usually) mined for scoring high against its anchor, so
        # being within the margin is how they were chosen, not evidence that they answer it: for
        # them the rule is never more than suspect. Calling one mislabelled takes evidence of
        # equivalence with the row's own texts (exact, near-duplicate), which other detectors give.
        own = (pairs.cand_row[idx] == rows) & (pairs.cand_role[idx] > POSITIVE_ROLE)
        near = (
            target_scores(s, c, pairs, idx) >= self.support
            if self.support is not None
            else np.zeros(idx.shape[0], dtype=bool)
        )
        query_doc = self.query_doc_row[rows]
        supported[idx] = near & ~own & query_doc
        # Above the positive: in a query→document row the candidate answers the anchor better than the row's
        # own positive does, and as well as only the best-answered tenth of the data's own pairs.
        above = np.zeros(len(pairs), dtype=bool)
        if self.above_quantile > 0 and self.query_doc_data:
            bar = self._above_bar(pairs.direction in ("doc_to_query", "doc_to_doc"))
            above[idx] = ~own & query_doc & (cand[idx] > pos[idx]) & (cand[idx] >= bar)
        likely = supported | above
        severity = np.where(likely, LIKELY, SUSPECT).astype(np.int8)
        rule = np.zeros(len(pairs), dtype=np.int64)
        rule[idx] = np.select([supported[idx], above[idx], own, ~query_doc & near], [0, 4, 2, 3], default=1)
        if not self.report_suspects:
            mask &= likely
        return Hits(self.name, mask, score, threshold, severity, rule, self.RULES)

    RULES = (
        "within the margin and near the positive, in a query->document row",
        "within the margin alone",
        "within the margin, the row's own hard negative",
        "within the margin, in a row whose texts are alike (same topic is all it says)",
        "above the positive and the data's best-answered pairs, in a query->document row",
    )

    def info(self) -> dict[str, Any]:
        rule = (
            f"sim(a, c) > sim(a, p) * (1 - {self.relative_margin})"
            if self.relative_margin is not None
            else f"sim(a, c) > sim(a, p) - {self.absolute_margin}"
        )
        likely = f"rule holds and cosine(candidate, positive) >= {self.support}"
        if self.support is None:
            likely = "never (no --margin-support)"
            suspect = "rule holds, or the candidate is"
        elif self.doc_ratio > 0:  # rows are told apart by length only with a ratio
            likely += (
                f", in a row whose positive has at least {self.doc_ratio:g} times its anchor's words (query->document)"
            )
            suspect = "rule holds alone, in a row whose two texts are alike in length, or the candidate is"
        else:
            likely += ", in any row (--margin-doc-ratio 0)"
            suspect = "rule holds alone, or the candidate is"
        if self.above_quantile > 0:
            bars = ", ".join(f"{v:.3f}" for _, v in sorted(self.above_bar.items()))
            likely += (
                f"; or sim(a, c) > sim(a, p) and sim(a, c) >= the {self.above_quantile:g} quantile of the data's own "
                f"positive scores ({bars or 'not computed'}), in a query->document row of data whose rows are "
                "mostly query->document"
            )
        return {
            "rule": rule,
            "relative_margin": self.relative_margin,
            "absolute_margin": self.absolute_margin,
            "support": self.support,
            "above_positive_quantile": self.above_quantile,
            "above_positive_bar": {("doc" if k else "query"): v for k, v in sorted(self.above_bar.items())} or None,
            "likely_when": likely,
            "suspect_when": f"{suspect} the row's own hard negative"
            + ("" if self.report_suspects else " (not reported; --margin reports them)"),
        }


class PairDetector(_CosineDetector):
    """Rows compared as pairs: row r = (a, p) and row s = (a', p') are two pairs the data says
    belong together; s duplicates r when their four cross cosines, sim(a, a'), sim(p, p'),
    sim(a, p') and sim(p, a'), sit on average at or above their pairings' bars (query–query,
    doc–doc, query–doc: calibrated from the data by ``contrast_audit.calibration``) and none is
    under its floor. The score is the bars' query–doc value plus the four cosines' mean excess over
    their bars, so it reads against the query–doc bar (with equal bars: the mean of the four).
    Rows whose positive is their anchor are left to ``embedding``."""

    name = "pair"
    description = "the two rows, compared through all four of their cross cosines, are as close as the data's positives"

    def __init__(
        self,
        store: EmbeddingStore,
        mode: str,
        quantile: float,
        floor: float,
        explicit: float | None,
        fallback: float,
        seed: int = 0,
    ) -> None:
        super().__init__(store, threshold=fallback)
        self.mode = mode
        self.quantile = quantile
        self.floor = floor
        self.explicit = explicit
        self.fallback = fallback
        self.seed = seed

    def prepare(self, corpus: Corpus) -> None:
        super().prepare(corpus)
        from contrast_audit import calibration as cal

        if self.explicit is not None:
            self.calibration = cal.fixed(self.explicit, "pair-threshold given")
        elif self.mode == "off":
            self.calibration = cal.fixed(self.fallback, "calibration off: positive-threshold")
        else:
            s, a, p = self.store, corpus.anchor, corpus.positive
            own = a != p
            positive = s.cosine(s.query, s.doc, a[own], p[own])
            i, j = cal.random_row_pairs(corpus.n_rows, cal.RANDOM_PAIRS, self.seed)
            random = {
                "query_query": s.cosine(s.query, s.query, a[i], a[j]),
                "doc_doc": s.cosine(s.doc, s.doc, p[i], p[j]),
                "query_doc": s.cosine(s.query, s.doc, a[i], p[j]),
            }
            self.calibration = cal.calibrate(
                positive, random, quantile=self.quantile, floor=self.floor, fallback=self.fallback
            )
        bars = self.calibration.bars
        floors = self.calibration.floors or dict.fromkeys(bars, min(self.floor, min(bars.values())))
        self.bar = {k: float(v) for k, v in bars.items()}
        self.floors = {k: float(v) for k, v in floors.items()}
        self.threshold = self.bar["query_doc"]

    def compared(self, pairs: Pairs) -> list[tuple[np.ndarray, np.ndarray]]:
        c = self.corpus
        r, s = pairs.anchor_row, pairs.cand_row
        return [(c.anchor[r], c.anchor[s]), (c.positive[r], c.positive[s])]

    def cosines(self, pairs: Pairs, idx: np.ndarray) -> dict[str, np.ndarray]:
        """The four cross cosines of the rows (r, s) of the pairs at ``idx``, by the pairing whose bar
        they meet."""
        st, c = self.store, self.corpus
        return {
            "anchor_anchor": cross(st, c, pairs, st.query, ANCHOR_ROLE, st.query, ANCHOR_ROLE, idx),
            "positive_positive": cross(st, c, pairs, st.doc, POSITIVE_ROLE, st.doc, POSITIVE_ROLE, idx),
            "anchor_other_positive": cross(st, c, pairs, st.query, ANCHOR_ROLE, st.doc, POSITIVE_ROLE, idx),
            "positive_other_anchor": cross(st, c, pairs, st.doc, POSITIVE_ROLE, st.query, ANCHOR_ROLE, idx),
        }

    _PAIRING = {
        "anchor_anchor": "query_query",
        "positive_positive": "doc_doc",
        "anchor_other_positive": "query_doc",
        "positive_other_anchor": "query_doc",
    }

    def detect(self, pairs: Pairs) -> Hits:
        c = self.corpus
        r, s = pairs.anchor_row, pairs.cand_row
        eligible = (
            (pairs.cand_role <= POSITIVE_ROLE)
            & (r != s)
            & (c.anchor[r] != c.positive[r])
            & (c.anchor[s] != c.positive[s])
            & (c.anchor[r] != c.anchor[s])
            & (c.positive[r] != c.positive[s])
        )
        idx = np.flatnonzero(eligible)
        score = np.zeros(len(pairs), dtype=np.float64)
        mask = np.zeros(len(pairs), dtype=bool)
        if idx.size:
            excess = np.zeros(idx.size, dtype=np.float64)
            above = np.ones(idx.size, dtype=bool)
            for key, sims in self.cosines(pairs, idx).items():
                pairing = self._PAIRING[key]
                excess += sims - self.bar[pairing]
                above &= sims >= self.floors[pairing]
            score[idx] = self.threshold + excess / 4.0
            mask[idx] = above & (excess >= 0.0)
        return Hits(self.name, mask, score, self.threshold, np.full(len(pairs), LIKELY, dtype=np.int8))

    def info(self) -> dict[str, Any]:
        calibration = getattr(self, "calibration", None)
        return {
            "rule": "mean over sim(a, a'), sim(p, p'), sim(a, p'), sim(p, a') of (cosine - its pairing's bar) >= 0, "
            "each cosine >= its pairing's floor",
            "score": "query-doc bar + the four cosines' mean excess over their bars",
            "calibration": calibration.info() if calibration else None,
            "calibration_line": calibration.line() if calibration else None,
        }
