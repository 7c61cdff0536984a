"""``minhash``: the candidate is a near-duplicate, by shingle overlap, of the anchor row's anchor or
positive.

Each distinct normalised text gets one MinHash signature over its word or character n-grams,
computed in bulk: polars splits every text into tokens and hashes each once, then a compiled loop on
every core (``minhash_kernels``, numba) folds each n-gram's token hashes into its shingle hash and
applies datasketch's ``affine32`` permutations (datasketch >= 2.0, its default scheme) and the
per-text minimum. A signature row is identical
to the ``hashvalues`` of a ``datasketch.MinHash`` with the same ``num_perm`` and ``seed`` and
:func:`shingle_hash` as its ``hashfunc``, updated with the same shingles.

Signatures are cut into ``bands`` × ``rows`` chosen for recall (:func:`lsh_params`): a pair whose
Jaccard similarity is exactly ``threshold`` becomes an LSH candidate with probability at least
``CANDIDATE_RECALL``, and among the band settings that reach it, the one with the fewest false
positives (datasketch's own measure) is used. Candidates are verified anyway, so a missed pair is
the costlier error; datasketch's optimiser, which weighs both errors equally, makes a pair at the
threshold a candidate less than half the time. Two texts are near-duplicates when they share a band
and their estimated Jaccard similarity, the fraction of equal signature values, is at least
``threshold``. A text with no shingles matches nothing, and identical texts are left to the
``exact`` detector.

The detector signs and bands texts ``TEXTS_PER_CHUNK`` at a time and keeps only 32-bit band keys per
text; the signatures needed to verify candidates (texts that share a bucket with another) are
computed again for those texts alone, so the full signature matrix is never held.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import numpy as np
import polars as pl

from contrast_audit.corpus import Corpus
from contrast_audit.errors import ConfigError
from contrast_audit.evidence.base import LIKELY, Hits, Pairs

SCHEME = "affine32"
SHINGLES = ("word", "char")
MAX_HASH = np.uint32(0xFFFFFFFF)  # datasketch's empty value for affine32
HASH_SEED = 0
SHINGLE_HASH = (
    f"polars {pl.__version__} hash(seed={HASH_SEED}) of each token, low 32 bits, folded in order by "
    "MurmurHash3's 64-bit finalizer, low 32 bits"
)
_FOLD_SEED = 0x9E3779B97F4A7C15
MAX_BUCKET = 1000  # an LSH bucket holding more texts than this is skipped (boilerplate)

_TEXTS_PER_SIGN = 131_072  # texts tokenised and signed at once
_PAIRS_PER_BLOCK = 1 << 16  # pairs whose signatures are compared at once
_CANDIDATES_PER_CHUNK = 4_000_000  # LSH candidate pairs expanded and verified at once
TEXTS_PER_CHUNK = 131_072  # texts signed and banded at once by the detector
CANDIDATE_RECALL = 0.98  # least probability that a pair at exactly the threshold is an LSH candidate
# MurmurHash3's finalizer (shifts and multipliers), datasketch's input mix for affine32 and 64-bit keys.
_FMIX = {
    32: (np.uint32(16), np.uint32(0x85EBCA6B), np.uint32(13), np.uint32(0xC2B2AE35), np.uint32(16)),
    64: (np.uint64(33), np.uint64(0xFF51AFD7ED558CCD), np.uint64(33), np.uint64(0xC4CEB9FE1A85EC53), np.uint64(33)),
}


def _kernels():
    """The compiled loops (numba), imported on first use: a scan without MinHash never loads numba."""
    from contrast_audit.evidence import minhash_kernels

    return minhash_kernels


def _fmix(hv: np.ndarray, width: int) -> np.ndarray:
    """MurmurHash3's finalizer on uint32 or uint64 arrays (``datasketch.minhash._fmix``)."""
    s1, m1, s2, m2, s3 = _FMIX[width]
    hv = hv ^ (hv >> s1)
    hv = hv * m1
    hv = hv ^ (hv >> s2)
    hv = hv * m2
    return hv ^ (hv >> s3)


def permutations(num_perm: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(a, b) uint32 of ``datasketch.MinHash(num_perm, seed, scheme="affine32").permutations``: odd
    ``a`` and any ``b`` drawn from ``numpy.random.RandomState(seed)``. Reproduced here so a scan does
    not import datasketch (which imports scipy for its LSH optimiser); tested equal."""
    gen = np.random.RandomState(seed)
    a = gen.randint(0, 1 << 31, num_perm, dtype=np.uint32) * np.uint32(2) + np.uint32(1)
    b = gen.randint(0, 1 << 32, num_perm, dtype=np.uint32)
    return a, b


def false_positive_mass(threshold: float, bands: int, rows: int) -> float:
    """The integral of the candidate probability below ``threshold`` (datasketch's
    ``_false_positive_probability``), by Simpson's rule on 2,001 points."""
    s = np.linspace(0.0, threshold, 2001)
    f = 1.0 - (1.0 - s**rows) ** bands
    h = threshold / 2000
    return float(h / 3 * (f[0] + f[-1] + 4 * f[1:-1:2].sum() + 2 * f[2:-1:2].sum()))


_TOKEN = {"word": r"\S+", "char": r"(?s)."}
_JOIN = {"word": " ", "char": ""}


def _fold(hashes: list[int]) -> int:
    """The shingle hash of its tokens' hashes, in Python, as ``minhash_kernels.sign_tokens`` folds them."""
    mask = (1 << 64) - 1
    h = _FOLD_SEED
    for t in hashes:
        h ^= t
        h ^= h >> 33
        h = (h * 0xFF51AFD7ED558CCD) & mask
        h ^= h >> 33
        h = (h * 0xC4CEB9FE1A85EC53) & mask
        h ^= h >> 33
    return h & 0xFFFFFFFF


def shingle_hash(shingle: str) -> int:
    """The 32-bit hash of one shingle, as signing computes it in bulk (a ``hashfunc`` for
    ``datasketch.MinHash``): each token (word, or character for ``char`` shingles) hashed by polars,
    the hashes folded in order (:func:`_fold`). A word shingle's tokens are its space-separated
    words; a shingle without a space is taken as one word (use :func:`char_shingle_hash` for character
    shingles). Stable within one polars version only, so it is part of the settings."""
    return _fold(_hash_tokens(shingle.split(" ")))


def char_shingle_hash(shingle: str) -> int:
    """:func:`shingle_hash` of a character shingle: each character is a token."""
    return _fold(_hash_tokens(list(shingle)))


def _hash_tokens(tokens: list[str]) -> list[int]:
    return [int(h) & 0xFFFFFFFF for h in pl.Series(tokens, dtype=pl.String).hash(HASH_SEED).to_list()]


def token_hashes(texts: pl.Series, shingle: str) -> tuple[np.ndarray, np.ndarray]:
    """Every token of every text (``word``: runs of non-space characters; ``char``: characters),
    hashed by polars (low 32 bits): the hashes in text order and the offsets where each text's
    tokens start (one more than texts)."""
    tok = pl.DataFrame({"text": texts.cast(pl.String)}).select(
        pl.col("text").fill_null("").str.extract_all(_TOKEN[shingle]).alias("tok")
    )
    lengths = tok.select(pl.col("tok").list.len()).to_series().to_numpy()
    hashed = tok.select(
        (pl.col("tok").list.eval(pl.element().hash(HASH_SEED) & 0xFFFFFFFF).explode().drop_nulls()).cast(pl.UInt32)
    )
    offsets = np.zeros(lengths.shape[0] + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    return hashed.to_series().to_numpy(), offsets


def shingles(texts: pl.Series, shingle: str, ngram: int) -> pl.DataFrame:
    """Every shingle of every text: columns ``idx`` (position in ``texts``, ascending) and ``shingle``.

    ``word``: n-grams of whitespace-separated tokens, joined by one space; ``char``: n-grams of
    characters. A text shorter than ``ngram`` tokens is one shingle (its tokens joined); an empty
    text has none.
    """
    frame = (
        pl.DataFrame({"text": texts.cast(pl.String)})
        .with_row_index("idx")
        .select(
            pl.col("idx").cast(pl.Int64), pl.col("text").fill_null("").str.extract_all(_TOKEN[shingle]).alias("tok")
        )
        .with_columns(pl.col("tok").list.len().cast(pl.Int64).alias("len"))
        .filter(pl.col("len") > 0)
    )
    short = frame.filter(pl.col("len") < ngram).select("idx", pl.col("tok").list.join(_JOIN[shingle]).alias("shingle"))
    tok = pl.col("tok")
    long = (
        frame.filter(pl.col("len") >= ngram)
        .with_columns(pl.int_ranges(0, pl.col("len")).alias("pos"))
        .explode("tok", "pos")
        .with_columns(pl.concat_str([tok.shift(-k) for k in range(ngram)], separator=_JOIN[shingle]).alias("shingle"))
        .filter(pl.col("pos") <= pl.col("len") - ngram)
        .select("idx", "shingle")
    )
    return pl.concat([short, long]).sort("idx", maintain_order=True)


@dataclass(frozen=True)
class Signatures:
    """MinHash signatures of a set of texts, with the settings that made them.

    ``values`` is (texts × num_perm) uint32; a text without shingles (``empty``) keeps the empty
    signature, all ``MAX_HASH``, and is similar to nothing.
    """

    settings: tuple[tuple[str, Any], ...]
    values: np.ndarray
    empty: np.ndarray

    def __len__(self) -> int:
        return int(self.values.shape[0])

    def jaccard(self, rows: np.ndarray, other: Signatures, other_rows: np.ndarray) -> np.ndarray:
        """Estimated Jaccard similarity of each ``self[rows[i]]`` with ``other[other_rows[i]]``.

        Raises ConfigError when the two were made with different settings (like datasketch
        refusing MinHashes with different seeds): their values are not comparable.
        """
        self._comparable(other)
        rows = np.asarray(rows, dtype=np.int64)
        other_rows = np.asarray(other_rows, dtype=np.int64)
        out = np.zeros(rows.shape[0], dtype=np.float64)
        num_perm = self.values.shape[1]
        for lo in range(0, rows.shape[0], _PAIRS_PER_BLOCK):
            a, b = rows[lo : lo + _PAIRS_PER_BLOCK], other_rows[lo : lo + _PAIRS_PER_BLOCK]
            equal = np.count_nonzero(self.values[a] == other.values[b], axis=1)
            out[lo : lo + a.shape[0]] = equal / num_perm
        out[self.empty[rows] | other.empty[other_rows]] = 0.0
        return out

    def at_least(self, rows: np.ndarray, other: Signatures, other_rows: np.ndarray, threshold: float) -> np.ndarray:
        """:meth:`jaccard` where it is at least ``threshold``, 0 elsewhere: the same values, computed with
        an early exit: a pair's comparison stops once too many of its values differ for it to reach
        the threshold (most candidates of an LSH stage are far below it)."""
        self._comparable(other)
        rows = np.asarray(rows, dtype=np.int64)
        other_rows = np.asarray(other_rows, dtype=np.int64)
        out = np.zeros(rows.shape[0], dtype=np.float64)
        num_perm = self.values.shape[1]
        need = min(int(np.ceil(threshold * num_perm)), num_perm)  # equal values a pair at the threshold has
        while need > 0 and (need - 1) / num_perm >= threshold:
            need -= 1
        while need < num_perm and need / num_perm < threshold:
            need += 1

        equal = np.empty(rows.shape[0], dtype=np.int64)
        _kernels().equal_at_least(self.values, rows, other.values, other_rows, need, equal)
        hit = np.flatnonzero(equal)
        out[hit] = equal[hit] / num_perm
        out[self.empty[rows] | other.empty[other_rows]] = 0.0
        return out

    def _comparable(self, other: Signatures) -> None:
        """Raise ConfigError when the two were made with different settings (like datasketch refusing
        MinHashes with different seeds): their values are not comparable."""
        if other.settings != self.settings:
            mine, theirs = dict(self.settings), dict(other.settings)
            diff = ", ".join(f"{k} {mine.get(k)!r} vs {theirs.get(k)!r}" for k in mine if mine.get(k) != theirs.get(k))
            raise ConfigError(
                f"cannot compare MinHash signatures made with different settings ({diff})",
                fix="compute both with the same minhash settings",
            )


def signatures(
    texts: pl.Series, *, num_perm: int, seed: int, shingle: str, ngram: int, out: np.ndarray | None = None
) -> Signatures:
    """One MinHash signature per text, in bulk, chunked so memory stays bounded. ``out``, a
    (texts × num_perm) uint32 array to fill, saves allocating one per call (a caller signing many
    chunks reuses its pages); the blocks of shingles are permuted on every core."""
    a, b = permutations(num_perm, seed)
    n = texts.len()
    if out is None:
        values = np.full((n, num_perm), MAX_HASH, dtype=np.uint32)
    else:
        values = out
        values.fill(MAX_HASH)
    empty = np.ones(n, dtype=bool)
    for lo in range(0, n, _TEXTS_PER_SIGN):
        hashes, offsets = token_hashes(texts.slice(lo, _TEXTS_PER_SIGN), shingle)
        rows = np.arange(lo, lo + offsets.shape[0] - 1, dtype=np.int64)
        _kernels().sign_tokens(hashes, offsets, rows, ngram, a, b, values)
        empty[rows] = offsets[1:] == offsets[:-1]
    settings = (
        ("scheme", SCHEME),
        ("hash", SHINGLE_HASH),
        ("shingle", shingle),
        ("ngram", ngram),
        ("num_perm", num_perm),
        ("seed", seed),
    )
    return Signatures(settings, values, empty)


def band_keys(sig: Signatures, bands: int, rows: int) -> np.ndarray:
    """(texts × bands) uint64: one key per band, a hash of that band's ``rows`` signature values."""
    keys = np.zeros((len(sig), bands), dtype=np.uint64)
    _kernels().band_keys(sig.values, bands, rows, keys)
    return keys


def candidate_probability(similarity: float | np.ndarray, bands: int, rows: int) -> float | np.ndarray:
    """Probability that two texts of Jaccard ``similarity`` share at least one of ``bands`` bands of
    ``rows`` values: ``1 - (1 - s**rows)**bands``."""
    return 1.0 - (1.0 - np.asarray(similarity, dtype=np.float64) ** rows) ** bands


@lru_cache(maxsize=32)
def lsh_params(threshold: float, num_perm: int) -> tuple[int, int]:
    """(bands, rows) for recall at ``threshold``: of the settings with ``bands * rows <= num_perm``
    that make a pair at the threshold a candidate with probability ``CANDIDATE_RECALL`` or more, the
    one with the least false-positive probability mass below the threshold (datasketch's integral);
    when none reaches it, the most probable one."""
    options = []
    for rows in range(1, num_perm + 1):
        bands = num_perm // rows
        recall = float(candidate_probability(threshold, bands, rows))
        false_pos = false_positive_mass(threshold, bands, rows) if threshold < 1 else 0.0
        options.append((recall >= CANDIDATE_RECALL, -false_pos, recall, -bands, rows))
    reaches = [o for o in options if o[0]]
    best = max(reaches, key=lambda o: o[1:]) if reaches else max(options, key=lambda o: (o[2], o[1], *o[3:]))
    return -int(best[3]), int(best[4])


class MinHashDetector:
    """Near-duplicates by MinHash: ``threshold`` on the estimated Jaccard similarity of the texts'
    ``shingle`` n-grams (``ngram`` words or characters), ``num_perm`` permutations from ``seed``.

    After :meth:`prepare`, ``keys`` holds the band keys of every text id (32 bits per band),
    ``empty`` marks texts without shingles, ``signatures`` the signatures of the texts that share a
    bucket with another (row ``_position[tid]``), and ``pairs`` every near-duplicate pair of the
    corpus (``tid_a < tid_b``, ``jaccard``).
    """

    name = "minhash"
    description = "candidate is a near-duplicate (MinHash Jaccard of shingles) of the anchor row's anchor or positive"

    def __init__(
        self, threshold: float = 0.5, num_perm: int = 128, shingle: str = "word", ngram: int = 3, seed: int = 1
    ) -> None:
        if isinstance(threshold, bool) or not isinstance(threshold, int | float) or not 0 < threshold <= 1:
            raise ConfigError(f"minhash threshold must be in (0, 1], got {threshold!r}")
        if isinstance(num_perm, bool) or not isinstance(num_perm, int) or num_perm < 16:
            raise ConfigError(f"minhash num_perm must be an integer >= 16, got {num_perm!r}")
        if shingle not in SHINGLES:
            raise ConfigError(f"minhash shingle must be 'word' or 'char', got {shingle!r}")
        if isinstance(ngram, bool) or not isinstance(ngram, int) or ngram < 1:
            raise ConfigError(f"minhash ngram must be an integer >= 1, got {ngram!r}")
        if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < 2**32:
            raise ConfigError(f"minhash seed must be an integer in [0, 2**32), got {seed!r}")
        self.threshold = float(threshold)
        self.num_perm = num_perm
        self.shingle = shingle
        self.ngram = ngram
        self.seed = seed
        self.bands, self.rows = lsh_params(self.threshold, num_perm)
        self.max_bucket = MAX_BUCKET
        self.pairs: pl.DataFrame | None = None
        self.candidate_checks: int | None = None
        self.skipped_buckets: int | None = None

    def prepare(self, corpus: Corpus) -> None:
        self.corpus = corpus
        norm = corpus.texts.get_column("norm")
        n = norm.len()
        self.n_texts = n
        self.keys = np.empty((n, self.bands), dtype=np.uint32)
        self.empty = np.ones(n, dtype=bool)
        buffer = np.empty((min(n, TEXTS_PER_CHUNK), self.num_perm), dtype=np.uint32)
        for lo in range(0, n, TEXTS_PER_CHUNK):
            part = norm.slice(lo, TEXTS_PER_CHUNK)
            sig = signatures(part, **self._settings(), out=buffer[: part.len()])
            hi = lo + len(sig)
            self.keys[lo:hi] = band_keys(sig, self.bands, self.rows) & np.uint64(0xFFFFFFFF)
            self.empty[lo:hi] = sig.empty
        self._near_duplicates(norm)

    def _settings(self) -> dict[str, Any]:
        return {"num_perm": self.num_perm, "seed": self.seed, "shingle": self.shingle, "ngram": self.ngram}

    def _near_duplicates(self, norm: pl.Series) -> None:
        """Every pair of texts sharing a band bucket of at most ``max_bucket`` texts, verified.

        Texts in a bucket of two or more are signed again (``signatures`` holds only them, at
        ``_position``); each band's buckets are then expanded into pairs a few million at a time and
        verified at once, so only near-duplicates are kept. Texts in a larger bucket are marked
        ``crowded``; pairs of them are compared band by band in :meth:`similar` instead.
        """
        n = self.n_texts
        tids = np.flatnonzero(~self.empty)
        crowded = np.zeros(n, dtype=bool)
        bucketed = np.zeros(n, dtype=bool)  # in a bucket of two or more texts in some band
        members_by_band: list[pl.DataFrame] = []
        skipped = 0
        for j in range(self.bands):
            band = pl.DataFrame({"key": self.keys[tids, j], "tid": tids})
            sizes = band.group_by("key").len()
            big = sizes.filter(pl.col("len") > self.max_bucket).select("key")
            skipped += big.height
            if big.height:
                crowded[band.join(big, on="key", how="semi").get_column("tid").to_numpy()] = True
            # Buckets in runs of about _CANDIDATES_PER_CHUNK pairs.
            buckets = (
                sizes.filter((pl.col("len") > 1) & (pl.col("len") <= self.max_bucket))
                .sort("key")
                .with_columns(
                    (
                        (pl.col("len").cast(pl.Int64) * (pl.col("len") - 1) // 2).cum_sum() // _CANDIDATES_PER_CHUNK
                    ).alias("run")
                )
            )
            members = band.join(buckets.select("key", "run"), on="key", how="inner")
            bucketed[members.get_column("tid").to_numpy()] = True
            members_by_band.append(members)
        signed = np.flatnonzero(bucketed | crowded)
        self._position = np.full(n, -1, dtype=np.int64)
        self._position[signed] = np.arange(signed.shape[0])
        self.signatures = signatures(norm.gather(signed), **self._settings())
        found: list[pl.DataFrame] = []
        checks = 0
        for members in members_by_band:
            for run in members.partition_by("run", include_key=False):
                pairs = (
                    run.join(run, on="key", suffix="_b")
                    .filter(pl.col("tid") < pl.col("tid_b"))
                    .select(pl.col("tid").alias("tid_a"), "tid_b")
                )
                jac = self._jaccard(pairs.get_column("tid_a").to_numpy(), pairs.get_column("tid_b").to_numpy())
                checks += pairs.height
                found.append(pairs.with_columns(pl.Series("jaccard", jac)).filter(pl.Series(jac > 0)))
        schema = {"tid_a": pl.Int64, "tid_b": pl.Int64, "jaccard": pl.Float64}
        self.pairs = pl.concat([pl.DataFrame(schema=schema), *found]).unique(["tid_a", "tid_b"]).sort("tid_a", "tid_b")
        self.candidate_checks = checks
        self.skipped_buckets = skipped
        a = self.pairs.get_column("tid_a").to_numpy()
        b = self.pairs.get_column("tid_b").to_numpy()
        self._codes = a * n + b  # sorted, since (a, b) is sorted and b < n
        self._jaccard_of_pairs = self.pairs.get_column("jaccard").to_numpy()
        self._crowded = crowded
        self._paired = np.zeros(n, dtype=bool)  # texts in at least one near-duplicate pair
        self._paired[a] = True
        self._paired[b] = True

    def _jaccard(self, x: np.ndarray, y: np.ndarray) -> np.ndarray:
        """Estimated Jaccard of texts ``x[i]`` and ``y[i]`` where it reaches ``threshold``, 0 elsewhere;
        both texts are signed (in a shared bucket)."""
        pos = self._position
        return self.signatures.at_least(pos[x], self.signatures, pos[y], self.threshold)

    def similar(self, x: np.ndarray, y: np.ndarray) -> np.ndarray:
        """Verified Jaccard of texts ``x[i]`` and ``y[i]`` where they are LSH candidates (share a
        band key) at or above ``threshold``; 0 elsewhere, for identical ids and for empty texts.

        Looked up in the near-duplicate pairs of ``prepare``; pairs of crowded texts, which may
        share only a skipped bucket, are compared band by band.
        """
        x = np.asarray(x, dtype=np.int64)
        y = np.asarray(y, dtype=np.int64)
        out = np.zeros(x.shape[0], dtype=np.float64)
        both = np.flatnonzero(self._paired[x] & self._paired[y])
        if both.shape[0]:
            code = np.minimum(x[both], y[both]) * self.n_texts + np.maximum(x[both], y[both])
            pos = np.minimum(np.searchsorted(self._codes, code), self._codes.shape[0] - 1)
            hit = self._codes[pos] == code
            out[both[hit]] = self._jaccard_of_pairs[pos[hit]]
        crowded = np.flatnonzero(self._crowded[x] & self._crowded[y])
        if crowded.shape[0]:
            out[crowded] = np.maximum(out[crowded], self.compare(x[crowded], y[crowded]))
        return out

    def compare(self, x: np.ndarray, y: np.ndarray) -> np.ndarray:
        """:meth:`similar` straight from the band keys and signatures: band keys compared pair by pair,
        then verified. The reference for the lookup, and its fallback for crowded texts."""
        x = np.asarray(x, dtype=np.int64)
        y = np.asarray(y, dtype=np.int64)
        out = np.zeros(x.shape[0], dtype=np.float64)
        todo = np.flatnonzero((x != y) & ~self.empty[x] & ~self.empty[y])
        for lo in range(0, todo.shape[0], _PAIRS_PER_BLOCK):
            part = todo[lo : lo + _PAIRS_PER_BLOCK]
            part = part[(self.keys[x[part]] == self.keys[y[part]]).any(axis=1)]
            out[part] = self._jaccard(x[part], y[part])  # sharing a key, both are in a bucket: signed
        return out

    def compared(self, pairs: Pairs) -> list[tuple[np.ndarray, np.ndarray]]:
        """The texts this evidence says are near-duplicates (for the guards): the candidate and
        whichever text of the anchor row it matched, or each of them when it matched both."""
        c, cand = self.corpus, pairs.cand_tid
        anchor, positive = c.anchor[pairs.anchor_row], c.positive[pairs.anchor_row]
        to_anchor = self.similar(cand, anchor) > 0
        to_positive = self.similar(cand, positive) > 0
        return [
            (np.where(to_anchor | ~to_positive, anchor, positive), cand),
            (np.where(to_positive | ~to_anchor, positive, anchor), cand),
        ]

    def detect(self, pairs: Pairs) -> Hits:
        c = self.corpus
        cand = pairs.cand_tid
        score = np.maximum(
            self.similar(cand, c.anchor[pairs.anchor_row]), self.similar(cand, c.positive[pairs.anchor_row])
        )
        mask = score > 0  # verified scores are >= threshold > 0
        return Hits(self.name, mask, score, self.threshold, np.full(len(pairs), LIKELY, dtype=np.int8))

    def info(self) -> dict[str, Any]:
        return {
            "threshold": self.threshold,
            "num_perm": self.num_perm,
            "shingle": self.shingle,
            "ngram": self.ngram,
            "seed": self.seed,
            "scheme": SCHEME,
            "bands": self.bands,
            "rows": self.rows,
            "hash": SHINGLE_HASH,
            "candidate_recall_at_threshold": round(
                float(candidate_probability(self.threshold, self.bands, self.rows)), 4
            ),
            "max_bucket": self.max_bucket,
            "candidate_checks": self.candidate_checks,
            "near_duplicate_pairs": None if self.pairs is None else self.pairs.height,
            "skipped_buckets": self.skipped_buckets,
        }
