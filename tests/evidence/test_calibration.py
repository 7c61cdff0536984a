"""Calibration of the pair evidence from the data's own anchor–positive cosines, and the pair
detector, on hand-made vectors (no model)."""

from __future__ import annotations

import numpy as np
import pytest
from support import corpus_of

from contrast_audit import calibration as cal
from contrast_audit.config import EmbeddingConfig, build_config
from contrast_audit.corpus import POSITIVE_ROLE
from contrast_audit.embed import EmbeddingStore
from contrast_audit.errors import ConfigError
from contrast_audit.evidence import Pairs, default_detectors
from contrast_audit.evidence.embedding import PairDetector


class VectorStore(EmbeddingStore):
    """A store whose vectors are given per text."""

    def __init__(self, vectors: dict[str, np.ndarray]) -> None:
        super().__init__(EmbeddingConfig())
        self.vectors = vectors

    def prepare(self, corpus) -> None:
        texts = corpus.texts.get_column("text").to_list()
        mat = np.array([self.vectors[t] for t in texts], dtype=np.float32)
        mat /= np.linalg.norm(mat, axis=1, keepdims=True)
        self.query = self.doc = mat


def topic_data(n_topics: int, noise: float, seed: int = 0) -> tuple[list[tuple[str, str]], dict[str, np.ndarray]]:
    """Two rows per topic, (a, p) each a noisy copy of the topic's direction: rows of one topic are
    duplicates of each other, rows of different topics are unrelated (near-orthogonal)."""
    rng = np.random.default_rng(seed)
    dim = 64
    rows, vectors = [], {}
    for t in range(n_topics):
        centre = rng.normal(size=dim)
        for r in range(2):
            a, p = f"t{t}r{r}a", f"t{t}r{r}p"
            vectors[a] = centre + noise * rng.normal(size=dim)
            vectors[p] = centre + noise * rng.normal(size=dim)
            rows.append((a, p))
    return rows, vectors


def q2d(c, anchor_rows, cand_rows) -> Pairs:
    a, b = np.asarray(anchor_rows), np.asarray(cand_rows)
    return Pairs("query_to_doc", a, b, np.full(len(b), POSITIVE_ROLE), c.positive[b])


def detector(store, mode="auto", quantile=0.25, floor=0.5, explicit=None, fallback=0.825) -> PairDetector:
    return PairDetector(store, mode, quantile, floor, explicit, fallback)


def test_calibrated_pair_evidence_finds_rows_of_one_topic_and_records_how():
    rows, vectors = topic_data(150, noise=0.6)
    c = corpus_of(rows)
    det = detector(VectorStore(vectors))
    det.prepare(c)
    info = det.info()["calibration"]
    assert info["mode"] == "calibrated"
    assert info["rows"] == 300 and info["random_pairs"] == cal.RANDOM_PAIRS
    assert info["quantile"] == 0.25
    assert set(info["bars"]) == set(info["floors"]) == {"query_query", "doc_doc", "query_doc"}
    assert {"q5", "q25", "q50", "q75", "q95"} <= set(info["positive_quantiles"])
    assert set(info["random_quantiles"]["query_doc"]) == {"q50", "q99"}
    # the own positives sit around 0.75: the bar follows them, well under the fixed 0.825
    assert 0.5 <= info["bars"]["query_doc"] < 0.8
    assert "calibrated on 300 rows" in det.info()["calibration_line"]
    same_topic = q2d(c, range(0, 300, 2), range(1, 300, 2))
    other_topic = q2d(c, range(0, 298, 2), range(2, 300, 2))
    assert det.detect(same_topic).mask.mean() > 0.6
    assert not det.detect(other_topic).mask.any()
    # the same data with fixed bars (calibration off: positive-threshold) finds far fewer
    fixed = detector(VectorStore(vectors), mode="off")
    fixed.prepare(c)
    assert fixed.info()["calibration"]["mode"] == "fixed"
    assert fixed.detect(same_topic).mask.sum() < det.detect(same_topic).mask.sum()


def test_loose_pairs_cannot_make_everything_a_duplicate():
    # Each row's anchor and positive are unrelated vectors: the data's own "positives" look like
    # random pairs, so the raw quantile would sit near 0. The floor holds the bars up.
    rng = np.random.default_rng(1)
    rows = [(f"a{i}", f"p{i}") for i in range(200)]
    vectors = {t: rng.normal(size=32) for row in rows for t in row}
    c = corpus_of(rows)
    det = detector(VectorStore(vectors), floor=0.5)
    det.prepare(c)
    bars, floors = det.calibration.bars, det.calibration.floors
    assert all(bars[k] >= floors[k] >= 0.5 for k in bars)
    everything = q2d(c, *np.nonzero(~np.eye(200, dtype=bool)))
    assert not det.detect(everything).mask.any()


def test_floor_is_at_least_the_random_pairs_top():
    positive = np.full(100, 0.2)
    random = {k: np.linspace(0.0, 0.7, 1000) for k in cal.PAIRINGS}
    out = cal.calibrate(positive, random, quantile=0.5, floor=0.1, fallback=0.825)
    assert all(out.floors[k] == pytest.approx(np.quantile(random[k], cal.FLOOR_QUANTILE), abs=1e-4) for k in out.bars)
    assert all(out.bars[k] == out.floors[k] for k in out.bars)


def test_explicit_thresholds_win_over_calibration():
    rows, vectors = topic_data(40, noise=0.6)
    c = corpus_of(rows)
    det = detector(VectorStore(vectors), explicit=0.9)
    det.prepare(c)
    assert det.calibration.mode == "fixed"
    assert det.calibration.bars == dict.fromkeys(cal.PAIRINGS, 0.9)
    assert "pair-threshold given" in det.info()["calibration_line"]
    off = detector(VectorStore(vectors), mode="off", fallback=0.8)
    off.prepare(c)
    assert off.calibration.bars == dict.fromkeys(cal.PAIRINGS, 0.8)
    # and through the settings
    by_name = {
        d.name: d
        for d in default_detectors(build_config({"pair_evidence": True, "pair_threshold": 0.7, "minhash": False}))
    }
    assert by_name["pair"].inner.explicit == 0.7
    by_name = {
        d.name: d
        for d in default_detectors(build_config({"pair_evidence": True, "calibration": "off", "minhash": False}))
    }
    assert by_name["pair"].inner.mode == "off"
    assert "pair" not in {d.name for d in default_detectors(build_config({}))}  # opt-in (docs/quality.md)
    with pytest.raises(ConfigError, match="calibration must be auto or off"):
        build_config({"calibration": "sometimes"})
    with pytest.raises(ConfigError):
        build_config({"calibration_quantile": 1.5})


def test_rows_whose_positive_is_the_anchor_give_fixed_bars_and_no_pair_evidence():
    rows = [(f"s{i}", f"s{i}") for i in range(60)]
    rng = np.random.default_rng(2)
    base = rng.normal(size=16)
    vectors = {f"s{i}": base + 0.01 * rng.normal(size=16) for i in range(60)}
    c = corpus_of(rows)
    det = detector(VectorStore(vectors))
    det.prepare(c)
    assert det.calibration.mode == "fixed" and det.calibration.rows == 0
    assert "fewer than 50" in det.calibration.reason
    assert not det.detect(q2d(c, [0, 1, 2], [1, 2, 3])).mask.any()  # left to the embedding detector


def test_pair_evidence_ignores_hard_negatives_and_the_row_itself():
    rows, vectors = topic_data(150, noise=0.1)
    c = corpus_of(rows)
    det = detector(VectorStore(vectors), explicit=0.9)
    det.prepare(c)
    assert det.detect(q2d(c, [0], [1])).mask.tolist() == [True]
    assert det.detect(q2d(c, [0], [0])).mask.tolist() == [False]
    negative = Pairs("query_to_doc", np.array([0]), np.array([1]), np.array([1]), c.positive[[1]])
    assert det.detect(negative).mask.tolist() == [False]


def test_reports_carry_the_calibration_line():
    from types import SimpleNamespace

    from contrast_audit.report.common import calibration_line

    rows, vectors = topic_data(150, noise=0.6)
    det = detector(VectorStore(vectors))
    det.prepare(corpus_of(rows))
    result = SimpleNamespace(judgement=SimpleNamespace(detector_info={"pair": det.info()}))
    line = calibration_line(result)
    assert line.startswith("pair bars calibrated on 300 rows") and "query–doc" in line
    assert calibration_line(SimpleNamespace(judgement=SimpleNamespace(detector_info={}))) is None
