"""The ``minhash`` detector: signatures against datasketch, LSH banding, near-duplicate verdicts."""

from __future__ import annotations

import datasketch
import numpy as np
import polars as pl
import pytest
from datasketch.lsh import _false_positive_probability, _optimal_param
from support import corpus_of, pairs, run

from contrast_audit.config import NormaliseConfig
from contrast_audit.corpus import ANCHOR_ROLE, POSITIVE_ROLE
from contrast_audit.errors import ConfigError
from contrast_audit.evidence import LIKELY
from contrast_audit.evidence import minhash as mh
from contrast_audit.evidence.minhash import MinHashDetector, char_shingle_hash, shingle_hash, shingles, signatures

BOTTLE = "insulated stainless steel water bottle keeps drinks cold for twenty four hours"  # 12 words
BOTTLE_LAST = "insulated stainless steel water bottle keeps drinks cold for twenty four hrs"
BOTTLE_MIDDLE = "insulated stainless steel water bottle keeps drinks cool for twenty four hours"
ROUTER = "how do i reset my router password after a firmware update"


def word_shingles(text: str, n: int) -> list[str]:
    tokens = text.split()
    if 0 < len(tokens) < n:
        return [" ".join(tokens)]
    return [" ".join(tokens[i : i + n]) for i in range(len(tokens) - n + 1)]


def char_shingles(text: str, n: int) -> list[str]:
    if 0 < len(text) < n:
        return [text]
    return [text[i : i + n] for i in range(len(text) - n + 1)]


def true_jaccard(x: str, y: str, n: int = 3) -> float:
    a, b = set(word_shingles(x, n)), set(word_shingles(y, n))
    return len(a & b) / len(a | b)


TEXTS = [BOTTLE, "hello", "", "two words", "a b c", "  spaced\tout \n text  ", "café ß 日本語 テキスト", "x y z x y z"]


@pytest.mark.parametrize(("shingle", "ngram"), [("word", 3), ("word", 1), ("char", 3), ("char", 5)])
def test_shingles_are_word_or_char_ngrams(shingle, ngram):
    got = shingles(pl.Series(TEXTS), shingle, ngram)
    make = word_shingles if shingle == "word" else char_shingles
    for i, text in enumerate(TEXTS):
        assert got.filter(pl.col("idx") == i).get_column("shingle").to_list() == make(text, ngram)


@pytest.mark.parametrize(("shingle", "ngram", "num_perm", "seed"), [("word", 3, 128, 1), ("char", 4, 64, 7)])
def test_signatures_equal_datasketch(shingle, ngram, num_perm, seed):
    sig = signatures(pl.Series(TEXTS), num_perm=num_perm, seed=seed, shingle=shingle, ngram=ngram)
    make = word_shingles if shingle == "word" else char_shingles
    for i, text in enumerate(TEXTS):
        hashfunc = shingle_hash if shingle == "word" else char_shingle_hash
        reference = datasketch.MinHash(num_perm=num_perm, seed=seed, hashfunc=hashfunc)
        for s in make(text, ngram):
            reference.update(s)
        assert sig.values[i].dtype == reference.hashvalues.dtype
        assert np.array_equal(sig.values[i], reference.hashvalues), text
        assert sig.empty[i] == reference.is_empty()


def test_signatures_do_not_depend_on_chunking(monkeypatch):
    rng = np.random.default_rng(3)
    words = np.array(["alpha", "beta", "gamma", "delta", "eps", "zeta", "eta", "theta"])
    texts = pl.Series([" ".join(words[rng.integers(0, 8, int(k))]) for k in rng.integers(0, 9, 300)])
    whole = signatures(texts, num_perm=32, seed=1, shingle="word", ngram=2)
    monkeypatch.setattr(mh, "_TEXTS_PER_SIGN", 7)
    chunked = signatures(texts, num_perm=32, seed=1, shingle="word", ngram=2)
    assert np.array_equal(whole.values, chunked.values)
    assert np.array_equal(whole.empty, chunked.empty)
    assert whole.empty.any() and not whole.empty.all()
    # A reused output buffer (left dirty by an earlier call) gives the same values.
    buffer = np.zeros((300, 32), dtype=np.uint32)
    signatures(texts[::-1], num_perm=32, seed=1, shingle="word", ngram=2, out=buffer)
    again = signatures(texts, num_perm=32, seed=1, shingle="word", ngram=2, out=buffer)
    assert again.values is buffer and np.array_equal(again.values, whole.values)


def _band_keys_numpy(sig, bands: int, rows: int) -> np.ndarray:
    """The band keys as numpy arrays spell them: the reference for the compiled loop."""
    keys = np.zeros((len(sig), bands), dtype=np.uint64)
    for j in range(bands):
        values = sig.values[:, j * rows : (j + 1) * rows].astype(np.uint64)
        key = np.full(len(sig), 0x9E3779B97F4A7C15 + j, dtype=np.uint64)
        for c in range(0, rows, 2):
            word = values[:, c] << np.uint64(32)
            if c + 1 < rows:
                word |= values[:, c + 1]
            key = mh._fmix(key ^ word, 64)
        keys[:, j] = key
    return keys


def test_signing_on_one_thread_or_many_is_the_same():
    import numba

    rng = np.random.default_rng(5)
    words = np.array(["alpha", "beta", "gamma", "delta", "eps", "zeta", "eta", "theta"])
    texts = pl.Series([" ".join(words[rng.integers(0, 8, int(k))]) for k in rng.integers(0, 12, 2000)])
    threads = numba.get_num_threads()
    try:
        numba.set_num_threads(numba.config.NUMBA_NUM_THREADS)
        many = signatures(texts, num_perm=32, seed=1, shingle="word", ngram=2)
        keys_many = mh.band_keys(many, 4, 8)
        numba.set_num_threads(1)
        one = signatures(texts, num_perm=32, seed=1, shingle="word", ngram=2)
        keys_one = mh.band_keys(one, 5, 5)  # an odd number of rows: the last value mixed alone
    finally:
        numba.set_num_threads(threads)
    assert np.array_equal(many.values, one.values)
    assert np.array_equal(keys_many, _band_keys_numpy(one, 4, 8))
    assert np.array_equal(keys_one, _band_keys_numpy(one, 5, 5))
    rows = rng.integers(0, 2000, 5000)
    other = rng.integers(0, 2000, 5000)
    for threshold in (0.3, 0.5, 0.9, 1.0):
        exact = one.jaccard(rows, one, other)
        assert np.array_equal(many.at_least(rows, many, other, threshold), exact * (exact >= threshold))


def test_near_duplicate_found_and_unrelated_not():
    c = corpus_of([("bottle?", BOTTLE), ("other bottle?", BOTTLE_LAST), ("router?", ROUTER)])
    det = MinHashDetector()
    hits = run(det, c, pairs(c, [0, 0, 2], [1, 2, 0]))
    assert hits.mask.tolist() == [True, False, False]
    assert hits.kind == "minhash"
    assert hits.threshold == 0.5
    assert hits.severity[0] == LIKELY
    # The estimate is close to the true Jaccard of the word 3-grams (9 of 11 shared).
    assert abs(hits.score[0] - true_jaccard(BOTTLE, BOTTLE_LAST)) < 0.15
    assert hits.score[1] == 0.0
    tids = c.positive[[0, 1]]
    assert det.pairs.select("tid_a", "tid_b").rows() == [(int(tids.min()), int(tids.max()))]
    assert det.info()["near_duplicate_pairs"] == 1


def test_candidate_compared_with_anchor_as_well_as_positive():
    # Row 1's anchor is a near-duplicate of row 0's anchor; the positives are unrelated.
    c = corpus_of([(BOTTLE, "doc a"), (BOTTLE_LAST, "doc b")])
    hits = run(MinHashDetector(), c, pairs(c, [0, 0], [1, 1], roles=[ANCHOR_ROLE, POSITIVE_ROLE]))
    assert hits.mask.tolist() == [True, False]


def test_identical_texts_are_not_minhash_evidence():
    # Row 1's positive normalises to row 0's positive: same text id, the exact detector's case.
    c = corpus_of([("q0", BOTTLE), ("q1", BOTTLE.upper() + "."), ("q2", BOTTLE_LAST)])
    assert c.positive[0] == c.positive[1]
    det = MinHashDetector()
    hits = run(det, c, pairs(c, [0, 0], [1, 2]))
    assert hits.mask.tolist() == [False, True]
    assert hits.score[0] == 0.0
    assert det.similar(c.positive[[0]], c.positive[[0]]).tolist() == [0.0]


def test_threshold_and_shingle_change_the_outcome():
    # One word changed in the middle: 7 of 13 word 3-grams shared, but most character 3-grams.
    c = corpus_of([("q0", BOTTLE), ("q1", BOTTLE_MIDDLE)])
    p = pairs(c, [0], [1])
    assert 0.5 < true_jaccard(BOTTLE, BOTTLE_MIDDLE) < 0.6
    assert run(MinHashDetector(threshold=0.3), c, p).mask.tolist() == [True]
    assert run(MinHashDetector(threshold=0.8), c, p).mask.tolist() == [False]
    char = run(MinHashDetector(threshold=0.8, shingle="char"), c, p)
    assert char.mask.tolist() == [True]
    assert char.score[0] >= 0.8


@pytest.mark.parametrize(("threshold", "num_perm"), [(0.5, 128), (0.7, 128), (0.8, 128), (0.3, 64), (0.9, 256)])
def test_bands_and_rows_are_chosen_for_recall_at_the_threshold(threshold, num_perm):
    det = MinHashDetector(threshold=threshold, num_perm=num_perm)
    b, r = det.bands, det.rows
    assert (det.info()["bands"], det.info()["rows"]) == (b, r)
    assert b * r <= num_perm
    # A pair exactly at the threshold is a candidate at least CANDIDATE_RECALL of the time ...
    assert mh.candidate_probability(threshold, b, r) >= mh.CANDIDATE_RECALL
    assert det.info()["candidate_recall_at_threshold"] >= mh.CANDIDATE_RECALL
    # ... which datasketch's equal weighting does not give ...
    ds_b, ds_r = _optimal_param(threshold, num_perm, 0.5, 0.5)
    assert mh.candidate_probability(threshold, ds_b, ds_r) < mh.CANDIDATE_RECALL
    # ... and no other setting that reaches it has fewer false positives below the threshold.
    mine = _false_positive_probability(threshold, b, r)
    for rows in range(1, num_perm + 1):
        bands = num_perm // rows
        if mh.candidate_probability(threshold, bands, rows) >= mh.CANDIDATE_RECALL:
            assert _false_positive_probability(threshold, bands, rows) >= mine - 1e-12


def test_threshold_one_uses_one_band_of_every_permutation():
    assert mh.lsh_params(1.0, 16) == (1, 16)
    assert mh.lsh_params(1.0, 128) == (1, 128)


@pytest.mark.parametrize("threshold", [0.5, 0.7, 0.8])
def test_candidate_recall_on_synthetic_pairs_at_the_threshold(threshold):
    """Pairs of word sets built to have Jaccard similarity at the threshold or just above are LSH
    candidates (share a band key) at least 95% of the time; pairs far below about as often as the
    banding predicts, and far less often."""
    rng = np.random.default_rng(int(threshold * 100))
    rows, truth = [], []
    for i in range(400):
        # |A ∩ B| = k, |A ∪ B| = k + 2d: Jaccard k / (k + 2d), with 1-word shingles.
        k = 60
        d = int(rng.integers(0, int(k * (1 - threshold) / (2 * threshold)) + 1))
        common = [f"c{i}_{j}" for j in range(k)]
        a = common + [f"a{i}_{j}" for j in range(d)]
        b = common + [f"b{i}_{j}" for j in range(d)]
        rows.append((" ".join(a), " ".join(b)))
        truth.append(k / (k + 2 * d))
    far = []
    for i in range(400):  # Jaccard 0.2
        common = [f"f{i}_{j}" for j in range(20)]
        far.append(
            (" ".join(common + [f"x{i}_{j}" for j in range(40)]), " ".join(common + [f"y{i}_{j}" for j in range(40)]))
        )
    c = corpus_of(rows + far)
    det = MinHashDetector(threshold=threshold, ngram=1)
    det.prepare(c)
    keys_a, keys_b = det.keys[c.anchor], det.keys[c.positive]
    candidate = (keys_a == keys_b).any(axis=1)
    assert min(truth) >= threshold
    assert candidate[:400].mean() >= 0.95
    expected_far = mh.candidate_probability(0.2, det.bands, det.rows)
    assert candidate[400:].mean() <= min(expected_far + 0.08, 0.4)
    # Verified pairs are exactly the candidates whose estimate reaches the threshold.
    verified = det.similar(c.anchor, c.positive) > 0
    assert not (verified & ~candidate).any()


def test_empty_and_one_word_texts():
    # Whitespace kept: three distinct texts without a single word, and one-word texts.
    cfg = NormaliseConfig(collapse_whitespace=False, strip_chars="")
    c = corpus_of([(" ", "  "), ("   ", "hello"), ("help", "hello world"), ("word", "word")], cfg=cfg)
    det = MinHashDetector()
    det.prepare(c)
    empty = c.anchor[[0, 1]].tolist() + [c.positive[0]]
    assert len(set(empty)) == 3
    assert det.empty[empty].all()
    assert (
        signatures(c.texts.get_column("norm").gather(empty), num_perm=128, seed=1, shingle="word", ngram=3).values
        == mh.MAX_HASH
    ).all()
    # Empty signatures share every band key, yet never match.
    assert (det.keys[empty[0]] == det.keys[empty[1]]).all()
    hits = det.detect(pairs(c, [0, 0, 1, 2], [1, 1, 2, 1], roles=[ANCHOR_ROLE, POSITIVE_ROLE, POSITIVE_ROLE, 0]))
    assert not hits.mask.any()
    assert det.compare(np.array(empty[:2]), np.array(empty[1:])).tolist() == [0.0, 0.0]
    assert det.pairs.height == 0
    # A one-word text is one shingle: matched only by the same text (another id is impossible).
    assert not det.empty[c.positive[1]]


def test_same_seed_same_signatures():
    c = corpus_of([(BOTTLE, BOTTLE_LAST), (BOTTLE_MIDDLE, ROUTER)])
    a, b, other = MinHashDetector(seed=5), MinHashDetector(seed=5), MinHashDetector(seed=6)
    for det in (a, b, other):
        det.prepare(c)
    assert np.array_equal(a.keys, b.keys)
    assert a.pairs.equals(b.pairs)
    assert not np.array_equal(a.keys, other.keys)


def test_signatures_with_other_settings_are_refused():
    texts = pl.Series([BOTTLE, BOTTLE_LAST])
    settings = {"num_perm": 128, "shingle": "word", "ngram": 3}
    a, b, other = (signatures(texts, seed=seed, **settings) for seed in (1, 1, 2))
    rows = np.array([0, 1])
    assert a.jaccard(rows, b, rows).tolist() == [1.0, 1.0]
    with pytest.raises(ConfigError, match=r"different settings \(seed 1 vs 2\)"):
        a.jaccard(rows, other, rows)
    with pytest.raises(ConfigError, match=r"different settings \(seed 1 vs 2\)"):
        a.at_least(rows, other, rows, 0.5)
    char = signatures(texts, num_perm=128, seed=1, shingle="char", ngram=3)
    with pytest.raises(ConfigError, match="shingle 'word' vs 'char'"):
        a.jaccard(rows, char, rows)


@pytest.mark.parametrize("num_perm", [16, 17, 128])
@pytest.mark.parametrize("threshold", [0.3, 0.5, 0.7, 0.71, 1.0])
def test_the_early_exit_verification_equals_the_full_estimate_at_the_threshold(num_perm: int, threshold: float):
    rng = np.random.default_rng(num_perm)
    n = 3000
    values = rng.integers(0, 4, size=(n, num_perm), dtype=np.uint32)  # pairs of every similarity
    values[::7] = values[1::7][: values[::7].shape[0]]  # and some identical ones
    empty = np.zeros(n, dtype=bool)
    empty[5] = True
    sig = mh.Signatures((("num_perm", num_perm),), values, empty)
    a, b = rng.integers(0, n, 200_000), rng.integers(0, n, 200_000)
    full = sig.jaccard(a, sig, b)
    expected = np.where(full >= threshold, full, 0.0)
    assert np.array_equal(sig.at_least(a, sig, b, threshold), expected)
    assert (expected > 0).any() and (full < threshold).any()


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"threshold": 1.5}, "minhash threshold must be in (0, 1], got 1.5"),
        ({"threshold": 0}, "minhash threshold must be in (0, 1], got 0"),
        ({"threshold": float("nan")}, "minhash threshold must be in (0, 1], got nan"),
        ({"num_perm": 8}, "minhash num_perm must be an integer >= 16, got 8"),
        ({"num_perm": 64.0}, "minhash num_perm must be an integer >= 16, got 64.0"),
        ({"shingle": "token"}, "minhash shingle must be 'word' or 'char', got 'token'"),
        ({"ngram": 0}, "minhash ngram must be an integer >= 1, got 0"),
        ({"seed": -1}, "minhash seed must be an integer in [0, 2**32), got -1"),
    ],
)
def test_settings_are_checked(kwargs, message):
    with pytest.raises(ConfigError) as err:
        MinHashDetector(**kwargs)
    assert err.value.message == message


def test_info_records_settings_and_results():
    c = corpus_of([("q0", BOTTLE), ("q1", BOTTLE_LAST), ("q2", ROUTER)])
    det = MinHashDetector(threshold=0.6, num_perm=64, shingle="char", ngram=4, seed=3)
    det.prepare(c)
    info = det.info()
    assert {k: info[k] for k in ("threshold", "num_perm", "shingle", "ngram", "seed")} == {
        "threshold": 0.6,
        "num_perm": 64,
        "shingle": "char",
        "ngram": 4,
        "seed": 3,
    }
    assert info["hash"] == mh.SHINGLE_HASH
    assert info["near_duplicate_pairs"] == det.pairs.height == 1
    assert info["skipped_buckets"] == 0


def test_crowded_buckets_are_skipped_but_still_detected():
    # Five copies of one description, each with a different last word, share most bands.
    variants = [BOTTLE.rsplit(" ", 1)[0] + f" {w}" for w in ("hours", "hrs", "h", "days", "nights")]
    c = corpus_of([(f"q{i}", v) for i, v in enumerate(variants)] + [("q9", ROUTER)])
    det = MinHashDetector()
    det.max_bucket = 3
    det.prepare(c)
    assert det.info()["skipped_buckets"] > 0
    p = pairs(c, [0, 0, 0, 0, 0], [1, 2, 3, 4, 5])
    hits = det.detect(p)
    assert hits.mask.tolist() == [True, True, True, True, False]
    reference = det.compare(p.cand_tid, c.positive[p.anchor_row])
    assert np.array_equal(hits.score, reference)


def test_twenty_thousand_texts_prepare_and_detect():
    rng = np.random.default_rng(0)
    vocab = np.array([f"w{i}" for i in range(5000)])
    n = 10_000
    lengths = rng.integers(10, 16, 2 * n)
    texts = [" ".join(vocab[rng.integers(0, vocab.size, int(k))]) for k in lengths]
    # Every 100th row's positive is the previous row's positive with its last word changed.
    for i in range(100, n, 100):
        texts[2 * i + 1] = texts[2 * i - 1].rsplit(" ", 1)[0] + " changed"
    c = corpus_of([(texts[2 * i], texts[2 * i + 1]) for i in range(n)])
    det = MinHashDetector()
    det.prepare(c)
    assert det.keys.shape == (c.n_texts, det.bands)
    # Only texts sharing a bucket with another are signed to verify candidates.
    assert 0 < len(det.signatures) < c.n_texts
    anchor_rows = np.repeat(np.arange(n), 8)
    cand_rows = (anchor_rows + np.tile(np.arange(1, 9), n)) % n
    first = anchor_rows[::8]
    cand_rows[::8] = np.where((first % 100 == 0) & (first > 0), first - 1, cand_rows[::8])
    p = pairs(c, anchor_rows, cand_rows)
    hits = det.detect(p)
    planted = np.flatnonzero((anchor_rows % 100 == 0) & (cand_rows == anchor_rows - 1) & (anchor_rows > 0))
    assert hits.mask[planted].all()  # 10+ words, last one changed: Jaccard >= 7/9
    # The lookup agrees with comparing band keys and signatures pair by pair.
    reference = np.maximum(
        det.compare(p.cand_tid, c.anchor[p.anchor_row]), det.compare(p.cand_tid, c.positive[p.anchor_row])
    )
    assert np.array_equal(hits.score, reference)
    # Nothing else: the planted pairs, seen from both rows.
    planted_rows = {(i, i - 1) for i in range(100, n, 100)} | {(i - 1, i) for i in range(100, n, 100)}
    found = set(zip(p.anchor_row[hits.mask].tolist(), p.cand_row[hits.mask].tolist(), strict=True))
    assert found == planted_rows


def test_detector_does_not_depend_on_text_chunks(monkeypatch):
    variants = [BOTTLE.rsplit(" ", 1)[0] + f" {w}" for w in ("hours", "hrs", "h", "days", "nights")]
    rows = [(f"q{i}", v) for i, v in enumerate(variants)] + [("q9", ROUTER), ("", BOTTLE_MIDDLE)]
    c = corpus_of(rows)
    whole = MinHashDetector()
    whole.prepare(c)
    monkeypatch.setattr(mh, "TEXTS_PER_CHUNK", 2)
    chunked = MinHashDetector()
    chunked.prepare(c)
    assert np.array_equal(whole.keys, chunked.keys)
    assert np.array_equal(whole.empty, chunked.empty)
    assert whole.pairs.equals(chunked.pairs)
    assert whole.pairs.height >= 10


@pytest.mark.parametrize(("num_perm", "seed"), [(128, 1), (64, 7), (16, 2**32 - 1)])
def test_permutations_are_datasketchs(num_perm, seed):
    a, b = mh.permutations(num_perm, seed)
    ref = datasketch.MinHash(num_perm=num_perm, seed=seed, scheme="affine32").permutations
    assert a.dtype == b.dtype == np.uint32
    assert np.array_equal(a, ref[0]) and np.array_equal(b, ref[1])


@pytest.mark.parametrize(("threshold", "bands", "rows"), [(0.7, 25, 5), (0.5, 42, 3), (0.9, 11, 11), (0.3, 64, 2)])
def test_false_positive_mass_is_datasketchs_integral(threshold, bands, rows):
    expected = _false_positive_probability(threshold, bands, rows)
    assert mh.false_positive_mass(threshold, bands, rows) == pytest.approx(expected, rel=1e-9, abs=1e-12)


def test_minhash_imports_neither_datasketch_nor_its_optimisers_scipy(tmp_path):
    import subprocess
    import sys

    script = (
        "import sys\n"
        "from support import corpus_of\n"
        "from contrast_audit.evidence.minhash import MinHashDetector\n"
        "MinHashDetector().prepare(corpus_of([('a b c d', 'a b c e')]))\n"
        "print(sorted(m for m in ('datasketch', 'scipy.integrate', 'torch') if m in sys.modules))\n"
    )
    from pathlib import Path

    tests = Path(__file__).parent.parent
    env = {**__import__("os").environ, "PYTHONPATH": f"{tests}{__import__('os').pathsep}{tests.parent}"}
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"


def test_signing_works_where_numba_cannot_cache_its_code(tmp_path):
    import subprocess
    import sys

    # No writable place for numba's cache (a read-only install and home): compiled in the process.
    script = (
        "import numba.core.caching as caching\n"
        "caching.CacheImpl._locator_classes = []\n"
        "import polars as pl\n"
        "from contrast_audit.evidence.minhash import signatures\n"
        "sig = signatures(pl.Series(['a b c d', 'a b c e']), num_perm=16, seed=1, shingle='word', ngram=2)\n"
        "print(int(sig.values[0, 0]) > 0)\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "True"
