"""Guards of the semantic evidence: rules under which a MinHash or embedding match between short
texts does not count. Each guard looks only at the pairs a detector matched and vetoes a pair when
the candidate fails it against both texts of the anchor row (semantic evidence may have matched
either of them). Longer texts (passages) are never vetoed: their halves or sections legitimately
differ in wording and figures.

- ``NumberGuard`` (numbers.py): short texts whose numbers differ are not near-duplicates.
- ``AlignmentGuard``: short texts whose tokens do not align (``tokens.TokenStore.alignment`` below
  the threshold) are not near-duplicates — one carries content the other lacks.
- ``OrderGuard``: short texts whose shared words come in another order are not near-duplicates.
- ``EntityGuard``: short texts that each name something the other does not ("in New Jersey" / "in
  Wisconsin", "iPhone" / "Pixel", "Python" / "Java") are not near-duplicates.
- ``NegationGuard``: short texts of which one is negated and the other not ("is playing" / "is not
  playing") are not near-duplicates.

The number, entity and negation guards are *hard*: a fact differs, however alike the wording. Word order
and alignment are *soft*: they read wording, and a change of article, voice or the place of a phrase
moves them as much as a change of fact, so a ``Guarded`` detector with a ``near_identical`` bar does not
apply them to matches scoring at or above it (texts a sentence vector calls near-identical that no hard
guard tells apart; docs/quality.md measures it on the judged set).

Every guard has a ``name`` and measures each comparison it reads (``measure``: the value and the bar it
is held to), so a vetoed match can say which guard vetoed it and with what numbers (a finding's
``why_not``: ``judge``; an alleged negative's: ``negatives``).
"""

from __future__ import annotations

import re
from collections import Counter
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
    name: str
    soft: bool

    def prepare(self, corpus: Corpus) -> None: ...

    def veto(self, detector, pairs: Pairs, mask: np.ndarray) -> np.ndarray: ...

    def info(self) -> dict[str, Any]: ...


class Guarded:
    """A semantic detector whose matches are dropped where any guard vetoes them. With a
    ``near_identical`` bar, the soft guards (word order, alignment) leave matches scoring at or above
    it alone (a soft guard's ``spares`` says which: the word-order guard still reads two texts that are
    the same words, all but two, in another order); their severity rule says so. Each vetoed match is
    recorded in the hits' ``vetoed`` (the index of the first guard that vetoed it, in ``guards``)."""

    NEAR_IDENTICAL_RULE = "near-identical (word order and alignment not applied)"

    def __init__(self, inner, guards: list[Guard], near_identical: float | None = None) -> None:
        self.inner = inner
        self.guards = guards
        self.near_identical = near_identical
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
        near = self.near(hits.score[matched])
        vetoed = np.full(len(pairs), -1, dtype=np.int8)
        value = np.full(len(pairs), np.nan, dtype=np.float64)
        for number, guard in enumerate(self.guards):
            asked = keep
            if getattr(guard, "soft", False) and near.any():
                spared = near.copy()
                spares = getattr(guard, "spares", None)  # which near-identical matches it leaves alone
                if spares is not None:
                    spared[near] = spares(self.inner, some.take(np.flatnonzero(near)))
                asked = keep & ~spared
            veto = guard.veto(self.inner, some, asked)
            at = np.flatnonzero(veto)
            if at.size:
                vetoed[matched[at]] = number
                value[matched[at]] = self._best(guard, some.take(at))
            keep &= ~veto
        mask = np.zeros(len(pairs), dtype=bool)
        mask[matched[keep]] = True
        hits = replace(
            hits,
            mask=mask,
            vetoed=vetoed,
            veto_value=value,
            guards=tuple(g.name for g in self.guards),
            guard_bars=tuple(float(g.threshold) for g in self.guards),
        )
        if self.near_identical is None or not any(getattr(g, "soft", False) for g in self.guards):
            return hits
        return self._near_rule(hits, matched[keep & near])

    def _best(self, guard, pairs: Pairs) -> np.ndarray:
        """A vetoing guard's best value over the texts the matches rest on (each of them failed)."""
        return np.max([guard.measure(u, v) for u, v in guard.comparisons(self.inner, pairs)], axis=0)

    def near(self, score: np.ndarray) -> np.ndarray:
        """Where a match's score reaches the ``near_identical`` bar (the soft guards leave it alone)."""
        if self.near_identical is None:
            return np.zeros(score.shape[0], dtype=bool)
        return score >= self.near_identical

    def _near_rule(self, hits: Hits, near: np.ndarray) -> Hits:
        """The hits with one rule more, that of the near-identical matches the soft guards left alone."""
        rules = hits.rules or ("match",)
        rule = np.zeros(hits.mask.shape[0], dtype=np.int64) if hits.rule is None else hits.rule.copy()
        rule[near] = len(rules)
        return replace(hits, rule=rule, rules=(*rules, self.NEAR_IDENTICAL_RULE))

    def info(self) -> dict:
        out = dict(self.inner.info())
        for guard in self.guards:
            out.update(guard.info())
        if self.near_identical is not None and any(getattr(g, "soft", False) for g in self.guards):
            out["near_identical"] = self.near_identical
        return out


class _PairwiseGuard:
    """A guard judging the pairs of texts a match rests on, one pair at a time: it vetoes a match when
    every pair of texts it rests on is a pair of short texts that ``fails``. The pairs are the
    detector's own (``compared``: the anchor row's positive and the candidate for ``embedding``, the
    two anchors for ``anchor-embedding``, the candidate and the row text it matched for ``minhash``)
    or, by default, the candidate with either text of the anchor row."""

    threshold: float
    max_words: int
    name = "guard"
    soft = False

    def prepare(self, corpus: Corpus) -> None:
        if getattr(self, "corpus", None) is corpus:
            return  # one guard serves several detectors
        self.corpus = corpus
        self.short = short_texts(corpus, self.max_words)
        self._prepare(corpus)

    def _prepare(self, corpus: Corpus) -> None:
        pass

    def fails(self, u: np.ndarray, v: np.ndarray) -> np.ndarray:
        return self.measure(u, v) < self.threshold

    def measure(self, u: np.ndarray, v: np.ndarray) -> np.ndarray:
        """The guard's value for texts ``u[i]`` and ``v[i]``, held to ``threshold`` (below it fails):
        a score, or 1 (agree) / 0 (disagree) for a yes-or-no guard."""
        return (~self.fails(u, v)).astype(np.float64)

    def comparisons(self, detector, pairs: Pairs) -> list[tuple[np.ndarray, np.ndarray]]:
        """The pairs of texts a match of ``detector`` rests on (see the class)."""
        compared = getattr(detector, "compared", None)
        return compared(pairs) if compared else row_texts(self.corpus, pairs)

    def veto(self, detector, pairs: Pairs, mask: np.ndarray) -> np.ndarray:
        comparisons = self.comparisons(detector, pairs)
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

    name = "alignment"
    soft = True

    def measure(self, u: np.ndarray, v: np.ndarray) -> np.ndarray:
        return self.tokens.alignment(u, v)

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


def _word_difference(a: list[str], b: list[str]) -> int:
    """How many words one text has that the other lacks, counted with repeats, both ways."""
    ca, cb = Counter(a), Counter(b)
    return sum(((ca - cb) + (cb - ca)).values())


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

    name = "word-order"
    soft = True

    # Words two texts may differ by and still count as one set of words moved about (PAWS-style swaps change
    # a word or two beside the exchange: "the 33d Fighter Group ... with the 33d Tactical Group").
    SWAP_SLACK = 2

    def spares(self, detector, pairs: Pairs) -> np.ndarray:
        """Which near-identical matches the guard leaves alone: all but those where every text compared is
        the candidate's words (all but ``SWAP_SLACK``) in another order ("the dog bit the man" / "the man bit
        the dog": exchanged roles, which a sentence vector scores near 1). A change of article, voice or
        wording beside the move ("an onion is sliced by a woman" / "a woman slices the onion") is spared."""
        comparisons = self.comparisons(detector, pairs)
        words = self._fill(np.concatenate([np.r_[u, v] for u, v in comparisons]))
        out = np.zeros(len(pairs), dtype=bool)
        for u, v in comparisons:
            out |= np.fromiter(
                (_word_difference(words[int(a)], words[int(b)]) > self.SWAP_SLACK for a, b in zip(u, v, strict=True)),
                bool,
                u.shape[0],
            )
        return out

    def _fill(self, tids: np.ndarray) -> dict[int, list[str]]:
        """The word lists, with those of ``tids`` read."""
        words = self._words
        missing = [int(t) for t in np.unique(tids) if int(t) not in words]
        if missing:
            texts = self.corpus.texts.get_column("norm").gather(missing).to_list()
            words.update((tid, _WORD.findall(text)) for tid, text in zip(missing, texts, strict=True))
        return words

    def measure(self, u: np.ndarray, v: np.ndarray) -> np.ndarray:
        words = self._fill(np.r_[u, v])
        return np.fromiter(
            (word_order(words[int(a)], words[int(b)]) for a, b in zip(u, v, strict=True)), np.float64, u.shape[0]
        )

    def info(self) -> dict[str, Any]:
        return {"word_order_threshold": self.threshold, "word_order_words": self.max_words}


_TOKEN = re.compile(r"[^\W_](?:[\w'’.-]*[^\W_])?")
_SENTENCE_END = re.compile(r"[.!?:;\"“”]\s*$")
# Capitalised words that name nothing: pronouns and the like that English writes capitalised anywhere.
_NOT_NAMES = frozenset(
    {"i", "i'm", "i've", "i'd", "i'll", "i’m", "i’ve", "i’d", "i’ll", "ok", "okay", "mr", "mrs", "ms", "dr"}
)
# Words a sentence commonly begins with: determiners, pronouns, question words, prepositions and
# conjunctions. Any other capitalised first word may be a name ("Buccinum pulchellum is a species …").
_STARTERS = frozenset(
    """a an the this that these those there here it its he she they we you i his her their our your my
    one some any many most several all both each every no not what which who whom whose when where why how
    is are was were be do does did can could should would will shall may might must has have had
    in on at of for from to by with without about after before during since until while as if when
    and but or so yet also then however although though because once thus hence therefore
    please hi hey hello greetings dear thanks thank good anyone anybody someone somebody everyone""".split()
)


def names(text: str) -> frozenset[str]:
    """The words of ``text`` that name something (casefolded): capitalised where a sentence does not
    begin (``Wisconsin``, ``NRA``, ``iPhone``), or mixing letters and digits (``A4``, ``COVID-19``).
    A text in which most words are capitalised (a title, shouting) names nothing by its capitals."""
    out: set[str] = set()
    tokens = list(_TOKEN.finditer(text))
    # Title case ("Where To Buy Furniture In Doha") or shouting: most longer words after the first
    # are capitalised, so capitals say nothing.
    longer = [m.group(0) for m in tokens[1:] if len(m.group(0)) > 3]
    by_case = not (len(longer) >= 3 and sum(w[0].isupper() for w in longer) >= 0.6 * len(longer))
    for i, m in enumerate(tokens):
        word = m.group(0)
        folded = word.casefold()
        if folded in _NOT_NAMES or folded in _STARTERS:
            continue  # a function word capitalised after a missing full stop ("Hi Does anyone …") names nothing
        has_digit = any(ch.isdigit() for ch in word)
        if has_digit and any(ch.isalpha() for ch in word):
            out.add(folded)
            continue
        if not by_case or has_digit or not any(ch.isupper() for ch in word):
            continue
        starts = i == 0 or bool(_SENTENCE_END.search(text[tokens[i - 1].end() : m.start()] or text[: m.start()][-1:]))
        if starts and word[1:] == word[1:].lower() and len(word) < 4:
            continue  # a sentence's first word, capitalised as any first word is
        out.add(folded)
    return frozenset(out)


def name_disagreement(a: str, b: str) -> bool:
    """True when each text names something the other does not mention at all (a substitution:
    "… in New Jersey?" / "… in Wisconsin?"); a name one text adds ("Bush" / "President Bush") or
    spells in other case is no disagreement."""
    na, nb = names(a), names(b)
    if not na or not nb:
        return False
    words_a = [w.casefold() for w in _TOKEN.findall(a)]
    words_b = [w.casefold() for w in _TOKEN.findall(b)]
    only_a = [w for w in dict.fromkeys(words_a) if w in na and w not in set(words_b)]
    only_b = [w for w in dict.fromkeys(words_b) if w in nb and w not in set(words_a)]
    if not only_a or not only_b:
        return False
    # An abbreviation and its words ("U.S." / "United States") name the same thing.
    initials_a, initials_b = "".join(w[0] for w in only_a), "".join(w[0] for w in only_b)
    letters_a, letters_b = "".join(only_a).replace(".", ""), "".join(only_b).replace(".", "")
    return not (letters_a == initials_b or letters_b == initials_a)


class EntityGuard(_PairwiseGuard):
    """Vetoes a match when every pair of short texts it rests on is a substitution of names
    (:func:`name_disagreement`): templated texts that differ in the place, product, person or language
    they name ("… proposed by the NRA in New Jersey?" / "… in Wisconsin?") are different texts,
    however close their shingles and embeddings. Reads each text's first spelling (case matters);
    needs no model."""

    name = "entity"

    def __init__(self, max_words: int) -> None:
        self.threshold = 1.0 if max_words > 0 else 0.0
        self.max_words = max_words
        self._spelling: dict[int, str] = {}

    def _prepare(self, corpus: Corpus) -> None:
        self._spelling = {}

    def disagree(self, u: np.ndarray, v: np.ndarray) -> np.ndarray:
        """True where short texts ``u`` and ``v`` each name something the other does not."""
        if self.max_words <= 0 or u.shape[0] == 0:
            return np.zeros(u.shape[0], dtype=bool)
        out = self.short[u] & self.short[v]
        idx = np.flatnonzero(out)
        if idx.size:
            out[idx] = self.fails(u[idx], v[idx])
        return out

    def fails(self, u: np.ndarray, v: np.ndarray) -> np.ndarray:
        spelling = self._spelling
        missing = [int(t) for t in np.unique(np.r_[u, v]) if int(t) not in spelling]
        if missing:
            texts = self.corpus.texts.get_column("text").gather(missing).to_list()
            spelling.update(zip(missing, texts, strict=True))
        return np.fromiter(
            (name_disagreement(spelling[int(a)], spelling[int(b)]) for a, b in zip(u, v, strict=True)),
            dtype=bool,
            count=u.shape[0],
        )

    def info(self) -> dict[str, Any]:
        return {"entity_guard_words": self.max_words}


# Words that negate what a short text says. Normal forms are casefolded, so "Not" and "NOT" are "not".
_NEGATION = re.compile(r"\b(?:not|no|never|nobody|nothing|none|neither|nor|nowhere|without|cannot)\b|\wn[’']t\b")


def negated(text: str) -> bool:
    """Whether ``text`` (a normal form) holds a word of negation: "not", "never", "no", "without",
    a contraction such as "isn't"."""
    return _NEGATION.search(text) is not None


class NegationGuard(_PairwiseGuard):
    """Vetoes a match when every pair of short texts it rests on has one text negated and the other
    not (:func:`negated`): "A man is playing the guitar" / "A man is not playing the guitar" say
    opposite things in nearly the same words. Needs no model."""

    name = "negation"

    def __init__(self, max_words: int) -> None:
        self.threshold = 1.0 if max_words > 0 else 0.0
        self.max_words = max_words

    def _prepare(self, corpus: Corpus) -> None:
        self.negated = corpus.texts.get_column("norm").str.contains(_NEGATION.pattern).to_numpy()

    def fails(self, u: np.ndarray, v: np.ndarray) -> np.ndarray:
        return self.negated[u] != self.negated[v]

    def info(self) -> dict[str, Any]:
        return {"negation_guard_words": self.max_words}
