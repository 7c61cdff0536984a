"""The first stage of embedding evidence: a static model picks the rows of the batch plan the full model
embeds; what it leaves out is reported as not compared, and the findings are the full model's."""

from __future__ import annotations

import random
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from support import write_jsonl

from contrast_audit import first_stage as fs
from contrast_audit import model as model_io
from contrast_audit.api import audit
from contrast_audit.config import AuditConfig, build_config
from contrast_audit.embed import text_keys
from contrast_audit.errors import ConfigError
from contrast_audit.report.common import why_not_text


def test_the_static_model_is_the_models_own_token_table():
    model = fs.StaticModel.load(Path(model_io.resolve(None).path))
    assert model is not None
    assert model.table.shape == (30522, 384)
    out, counts = model.encode(["a cat sat on the mat", "", "a cat sat on the mat"])
    assert out.shape == (3, 384)
    assert counts.tolist() == [6, 0, 6]
    assert not out[1].any()  # no tokens: no vector
    np.testing.assert_array_equal(out[0], out[2])


def test_a_model_without_a_token_table_has_no_static_form(tmp_path: Path):
    assert fs.StaticModel.load(tmp_path) is None


def test_the_sample_keeps_its_rows_when_rows_are_appended(monkeypatch: pytest.MonkeyPatch):
    texts = [f"text number {i}" for i in range(400)]
    keys = text_keys(texts, "")
    first = fs.sample_rows(keys[:200], keys[200:400], size=20)
    more = text_keys([f"other {i}" for i in range(40)], "")
    grown = fs.sample_rows(np.r_[keys[:200], more[:20]], np.r_[keys[200:400], more[20:]], size=20)
    assert first.shape == grown.shape == (20,)
    # An old row leaves the sample only for a new row that sorts before it.
    assert set(grown[grown < 200].tolist()) <= set(first.tolist())
    assert fs.sample_rows(keys[:5], keys[5:10], size=20).tolist() == [0, 1, 2, 3, 4]
    # Rows whose positive is their anchor are sampled like any other, not all first.
    simcse = fs.sample_rows(np.r_[keys[:200], keys[200:400]], np.r_[keys[:200], keys[:200]], size=20)
    assert 0 < int((simcse < 200).sum()) < 20


def unit(*xs: float) -> np.ndarray:
    v = np.array(xs, dtype=np.float32)
    return v / np.linalg.norm(v)


def test_rows_are_selected_for_a_near_text_of_another_row_of_their_batch():
    # texts: 0..7; rows (anchor, positive): 0 (0, 1), 1 (2, 3), 2 (5, 4), 3 (6, 7), 4 (0, 5)
    vectors = np.stack(
        [
            unit(1, 0, 0, 0),
            unit(0, 1, 0, 0),
            unit(0, 0, 1, 0),
            unit(0, 1, 0.1, 0),  # near text 1: rows 0 and 1, in one batch
            unit(1, 0.05, 0, 0),  # row 2's positive, near row 0's anchor: a document-anchor comparison
            unit(0, 0, 0, 1),
            unit(0, 0, 0.1, 1),  # near text 5: rows 2 and 3, in different batches
            unit(0, 0, 1, 1),
        ]
    )
    slots = np.array([[0, 1], [2, 3], [5, 4], [6, 7], [0, 5]])
    rows = np.array([0, 1, 2, 4, 3])
    offsets = np.array([0, 3, 5])  # batches {0, 1, 2} and {4, 3}
    none_cross = np.zeros(5, dtype=bool)
    picked = fs.select_rows(vectors, 0.9, slots, none_cross, rows, offsets)
    # Row 4 shares texts with rows 0 and 2 (identical texts are the exact detector's), and its positive is
    # near row 3's anchor only across kinds; rows 2 and 3 never share a batch.
    assert picked.tolist() == [True, True, False, False, False]
    # A document near another row's anchor is compared where either row's texts are alike.
    cross = np.array([True, False, False, False, False])
    assert fs.select_rows(vectors, 0.9, slots, cross, rows, offsets).tolist() == [True, True, True, False, False]


def test_the_map_follows_the_full_models_cosines():
    rng = np.random.default_rng(0)
    static = rng.normal(size=(600, 16)).astype(np.float32)
    mix = rng.normal(size=(16, 24)).astype(np.float32)
    full = static @ mix
    full /= np.linalg.norm(full, axis=1, keepdims=True)
    sample = np.arange(0, 600, 2)
    fitted = fs.fit_map(static[sample], full[sample], 0.825)
    assert fs.BAR_RANGE[0] <= fitted.bar <= fs.BAR_RANGE[1]
    rest = np.arange(1, 600, 2)
    vectors = fitted.apply(static[rest]).astype(np.float32)
    mapped = vectors @ vectors.T
    truth = full[rest] @ full[rest].T
    upper = np.triu_indices(rest.shape[0], 1)
    assert np.corrcoef(mapped[upper], truth[upper])[0, 1] > 0.98  # held-out texts: the map recovers the truth


def _words() -> list[str]:
    vocab = (Path(model_io.resolve(None).path) / "vocab.txt").read_text(encoding="utf-8").split()
    return [w for w in vocab if w.isalpha() and w.isascii() and len(w) >= 5]


@pytest.fixture
def wordy(tmp_path: Path) -> Path:
    """400 rows of unrelated word strings, and three rows whose positive repeats another row's but for
    one word: near-duplicates only the embedding detector sees at this length."""
    rng = random.Random(7)
    words = _words()
    text = lambda n: " ".join(rng.sample(words, n))  # noqa: E731
    rows = [{"id": f"r{i}", "anchor": text(6), "positive": text(12)} for i in range(400)]
    for k, j in enumerate((11, 120, 301)):
        twin = rows[j]["positive"].split()
        twin[5] = rng.choice(words)
        rows.append({"id": f"twin{k}", "anchor": text(6), "positive": " ".join(twin)})
    # A hard negative that repeats its own row's positive but for its last word: mislabelled.
    positive = text(12)
    rows.append({"id": "mislabelled", "anchor": text(6), "positive": positive, "negative": positive + " again"})
    return write_jsonl(tmp_path / "pairs.jsonl", rows)


def _scan(path: Path, first_stage: str, **embedding):
    cfg = AuditConfig()
    cfg = replace(
        cfg,
        plan=replace(cfg.plan, batch_size=405, seed=1),  # one batch: every planted pair is compared
        embedding=replace(cfg.embedding, first_stage=first_stage, **embedding),
    )
    result = audit([str(path)], cfg)
    store = next(d.store for d in result.detectors if getattr(d, "store", None) is not None)
    found = result.findings.filter(result.findings["severity"].is_in(["certain", "likely"]))
    return result, store, set(found.select("anchor_row", "cand_row").rows())


def test_the_full_model_embeds_the_near_rows_and_finds_what_it_finds_everywhere(
    wordy: Path, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.setattr(fs, "SAMPLE_ROWS", 150)
    monkeypatch.setattr(fs, "MIN_TEXTS", 600)
    monkeypatch.setattr(fs, "MIN_SAMPLE_TEXTS", 200)
    everywhere_result, everywhere, expected = _scan(wordy, "none")
    assert everywhere.first_stage_info == {"used": False, "reason": "first-stage = none"}
    assert everywhere.known is None
    planted = {(401, 120), (120, 401), (400, 11), (11, 400), (402, 301), (301, 402)}
    assert expected and expected <= planted  # one word in twelve changed: two of the three reach the bar
    mislabelled = set(everywhere_result.mislabelled.select("anchor_row", "severity").rows())
    assert mislabelled  # the planted one
    result, staged, found = _scan(wordy, "static")
    assert set(result.mislabelled.select("anchor_row", "severity").rows()) == mislabelled
    # The row's texts reach the full model for its own negative: it is not sampled and no other row is near.
    assert 403 not in staged.sample_rows
    assert staged.known[result.corpus.negatives[403, 0]] and staged.known[result.corpus.positive[403]]
    info = staged.first_stage_info
    assert info["used"] and info["sample_rows"] == 150
    assert info["texts"] < info["of_texts"] / 2  # most rows are far from every other
    assert found == expected
    assert result.report()["detectors"]["embedding"]["first_stage"]["rows"] == info["rows"]
    # Rows the full model did not embed are not compared, and say so.
    assert not staged.known_rows(result.corpus).all()
    far = int(np.flatnonzero(~staged.known)[0])
    assert not staged.query[far].any()
    staged.ensure(np.array([far]))  # a detector that must compare it has it embedded
    np.testing.assert_allclose(staged.query[far], everywhere.query[far], atol=1e-6)


def test_small_data_is_embedded_whole(wordy: Path):
    _, store, _ = _scan(wordy, "static")
    assert store.known is None
    assert store.first_stage_info["used"] is False
    assert "distinct texts" in store.first_stage_info["reason"]


def test_a_pair_the_full_model_did_not_compare_reads_so():
    line = why_not_text([{"kind": "embedding", "score": None, "threshold": 0.825, "guard": None}])
    assert line == "embedding not compared (the first stage found the texts far apart)"


def test_first_stage_takes_static_or_none():
    assert build_config({"first_stage": "none"}).embedding.first_stage == "none"
    with pytest.raises(ConfigError, match="first-stage"):
        build_config({"first_stage": "fast"})


def test_long_documents_are_embedded_whole(wordy: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(fs, "SAMPLE_ROWS", 150)
    monkeypatch.setattr(fs, "MIN_TEXTS", 600)
    monkeypatch.setattr(fs, "MIN_SAMPLE_TEXTS", 200)
    monkeypatch.setattr(fs, "LONG_DOCUMENTS", 8)  # the fixture's positives are twelve words
    _, store, _ = _scan(wordy, "static")
    assert store.known is None
    assert store.first_stage_info["reason"].startswith("long documents (a median of ")


def test_a_sample_of_few_texts_maps_nothing(wordy: Path, monkeypatch: pytest.MonkeyPatch):
    # 40 rows hold 80 texts: a ridge map of 385 weights a dimension would be guesswork.
    monkeypatch.setattr(fs, "SAMPLE_ROWS", 40)
    monkeypatch.setattr(fs, "MIN_TEXTS", 160)
    _, store, _ = _scan(wordy, "static")
    assert store.known is None
    assert store.first_stage_info["reason"] == "the sample's rows hold 80 distinct texts (a map needs 400)"


def test_a_row_whose_own_negative_is_near_its_positive_is_selected():
    vectors = np.stack([unit(1, 0, 0), unit(0, 1, 0), unit(0, 1, 0.05), unit(0, 0, 1), unit(1, 0, 0.02)])
    # rows (anchor, positive, negative): 0 (0, 1, 2): its negative near-duplicates its positive;
    # 1 (3, 1, 4): its negative is near text 0, another row's anchor, and none of its own texts
    slots = np.array([[0, 1, 2], [3, 1, 4], [3, 0, -1]])
    assert fs.own_negatives_near(vectors, 0.9, slots).tolist() == [True, False, False]


@pytest.mark.parametrize("rule", [{"margin": True}, {"above_positive": 0.9}, {"pair_evidence": True}])
def test_rules_with_bars_under_the_embedding_bar_keep_the_full_model(
    wordy: Path, monkeypatch: pytest.MonkeyPatch, rule: dict
):
    monkeypatch.setattr(fs, "SAMPLE_ROWS", 150)
    monkeypatch.setattr(fs, "MIN_TEXTS", 600)
    _, store, _ = _scan(wordy, "static", **rule)
    assert store.known is None
    assert store.first_stage_info["reason"].startswith("the margin rule or pair evidence is on")


def test_a_sample_whose_pairs_all_score_alike_compares_at_the_lowest_bar():
    static = np.random.default_rng(1).normal(size=(40, 8)).astype(np.float32)
    full = np.eye(20, dtype=np.float32)  # every sample pair at cosine 0, none near: no spread to fit
    fitted = fs.fit_map(static[:20], full, 0.825)
    assert fitted.bar == fs.BAR_RANGE[0]
    assert "all score alike" in fitted.info["bar_from"]
