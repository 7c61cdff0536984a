"""Recall without losing precision: the candidate against the anchor in rows whose texts are alike, the
near-identical bar that leaves a match to the hard guards only, the negation guard, and the record of
every veto (``why_not``, the report's ``vetoed``)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from support import corpus_of, write_jsonl
from test_embedding import FixedStore, q2d_pairs
from typer.testing import CliRunner

from contrast_audit.cli import app
from contrast_audit.config import build_config
from contrast_audit.errors import ConfigError
from contrast_audit.evidence import LIKELY, default_detectors
from contrast_audit.evidence.embedding import EmbeddingDetector
from contrast_audit.evidence.guards import EntityGuard, Guarded, NegationGuard, OrderGuard, negated
from contrast_audit.evidence.numbers import NumberGuard
from contrast_audit.judge import _frame, evaluate
from contrast_audit.report.common import why_not_text


def unit(*xs: float) -> list[float]:
    return list(xs)


# Row 0: two captions of one scene. Row 1's positive repeats row 0's *anchor* almost word for word, and is
# far from row 0's positive. Row 2: a query and a long document (not alike): its document is never compared
# with another row's anchor.
ALIKE = {
    "An onion is being sliced by a woman": unit(1, 0, 0),
    "A woman cuts up an onion in a kitchen": unit(0.6, 0.8, 0),
    "q1": unit(0, 0, 1),
    "An onion is being sliced by the woman": unit(1, 0.01, 0),
    "how do I slice onions": unit(1, 0, 0),
    "Slicing onions: " + "hold the knife firmly and cut along the grain " * 3: unit(0.6, 0.8, 0),
}
ALIKE_ROWS = [
    ("An onion is being sliced by a woman", "A woman cuts up an onion in a kitchen"),
    ("q1", "An onion is being sliced by the woman"),
    ("how do I slice onions", "Slicing onions: " + "hold the knife firmly and cut along the grain " * 3),
]


def test_a_candidate_that_repeats_the_anchor_of_an_alike_row_is_likely():
    c = corpus_of(ALIKE_ROWS)
    det = EmbeddingDetector(FixedStore(ALIKE), 0.825, doc_ratio=3.0)
    det.prepare(c)
    hits = det.detect(q2d_pairs(c, [0, 2], [1, 1]))
    # Row 0 is alike (two captions): the candidate repeats its anchor. Row 2 is a query and its document:
    # the candidate near the query is a relevance claim, not a near-duplicate, and is not flagged here.
    assert hits.mask.tolist() == [True, False]
    assert hits.severity[0] == LIKELY
    assert hits.rules[int(hits.rule[0])] == "near the anchor, in a row whose two texts are alike"
    assert hits.score[0] == pytest.approx(0.99995, abs=1e-4)
    # Without a ratio no row is alike: the old rule, the positive alone (cosine 0.6).
    plain = EmbeddingDetector(FixedStore(ALIKE), 0.825)
    plain.prepare(c)
    assert plain.detect(q2d_pairs(c, [0], [1])).mask.tolist() == [False]


def test_the_guards_read_the_text_the_match_rests_on():
    c = corpus_of(ALIKE_ROWS)
    det = EmbeddingDetector(FixedStore(ALIKE), 0.825, doc_ratio=3.0)
    det.prepare(c)
    (first, second) = det.compared(q2d_pairs(c, [0], [1]))
    anchor = int(c.anchor[0])
    assert first[0] == anchor and second[0] == anchor  # matched the anchor only: the guards read that pair


NEAR = {
    "A woman is slicing an onion in the kitchen": unit(1, 0, 0),
    "In the kitchen an onion is being sliced by a woman": unit(1, 0.05, 0),
    "A woman is not slicing an onion in the kitchen": unit(1, 0.06, 0),
    "An onion is slicing a woman in the kitchen": unit(1, 0.07, 0),
    "In the kitchen a woman was slicing an onion": unit(1, 0.08, 0),
}
NEAR_ROWS = [
    ("q0", "A woman is slicing an onion in the kitchen"),
    ("q1", "In the kitchen an onion is being sliced by a woman"),
    ("q2", "A woman is not slicing an onion in the kitchen"),
    ("q3", "An onion is slicing a woman in the kitchen"),
    ("q4", "In the kitchen a woman was slicing an onion"),
]


def near_detector(near_identical: float | None) -> tuple[Guarded, object]:
    vectors = {
        **NEAR,
        "q0": unit(0, 0, 1),
        "q1": unit(0, 1, 0),
        "q2": unit(0, 0.5, 1),
        "q3": unit(0, 1, 1),
        "q4": unit(1, 1, 1),
    }
    c = corpus_of(NEAR_ROWS)
    det = Guarded(
        EmbeddingDetector(FixedStore(vectors), 0.825),
        [NumberGuard(50), EntityGuard(50), NegationGuard(50), OrderGuard(0.85, 50)],
        near_identical,
    )
    det.prepare(c)
    return det, c


def test_a_near_identical_match_skips_the_word_order_guard_and_keeps_the_hard_guards():
    det, c = near_detector(0.97)
    hits = det.detect(q2d_pairs(c, [0, 0, 0, 1], [1, 2, 3, 4]))
    # The passive voice and the moved phrase keep the meaning; the negated sentence and the exchanged roles
    # (the same words in another order) do not. Against the passive, the active sentence with one word
    # changed ("was" for "is being ... by") is more than a swap: spared.
    assert hits.mask.tolist() == [True, False, False, True]
    assert hits.rules[int(hits.rule[0])] == Guarded.NEAR_IDENTICAL_RULE
    assert hits.guards[int(hits.vetoed[1])] == "negation"
    assert hits.guards[int(hits.vetoed[2])] == "word-order"
    # Without the bar, the word-order guard vetoes the exchange and says with what value.
    det, c = near_detector(None)
    hits = det.detect(q2d_pairs(c, [0], [1]))
    assert hits.mask.tolist() == [False]
    assert hits.guards[int(hits.vetoed[0])] == "word-order"
    assert hits.veto_value[0] < 0.85 and hits.guard_bars[int(hits.vetoed[0])] == 0.85


def test_why_not_names_the_guard_and_its_numbers():
    det, c = near_detector(None)
    pairs = q2d_pairs(c, [0, 1], [1, 2])
    found, severity, hits = evaluate([det], pairs)
    severity = np.where(found, severity, -1).astype(np.int8)
    frame = _frame({"severity_rank": severity}, hits, np.ones(len(pairs), dtype=bool))
    (why,) = frame.get_column("why_not").to_list()[:1]
    (entry,) = why
    assert entry["kind"] == "embedding" and entry["guard"] == "word-order"
    assert entry["guard_threshold"] == 0.85 and entry["guard_value"] < 0.85
    assert entry["score"] >= entry["threshold"]
    text = why_not_text(why)
    assert text.startswith("embedding ") and "vetoed by word-order" in text and "<0.85" in text


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("a man is not playing the guitar", True),
        ("nobody is playing the guitar", True),
        ("the man isn't playing the guitar", True),
        ("a man plays without a pick", True),
        ("a man is playing the guitar", False),
        ("notes on a guitar", False),  # "not" inside a word is no negation
    ],
)
def test_negated_reads_words_of_negation(text, expected):
    assert negated(text) is expected


def test_the_negation_guard_reads_its_corpus_as_negated_does():
    texts = ["a man is not playing", "nobody plays", "the man isn't playing", "notes on a guitar", "a man plays"]
    c = corpus_of([(t, t + " here") for t in texts])
    guard = NegationGuard(50)
    guard.prepare(c)
    norms = c.texts.get_column("norm").to_list()
    assert guard.negated.tolist() == [negated(n) for n in norms]
    assert guard.negated.any() and not guard.negated.all()


def test_the_negation_guard_and_the_bar_are_settings():
    detectors = {d.name: d for d in default_detectors(build_config({"embeddings": False}))}
    assert "NegationGuard" in [type(g).__name__ for g in detectors["minhash"].guards]
    assert detectors["minhash"].info()["negation_guard_words"] == 50
    off = {d.name: d for d in default_detectors(build_config({"embeddings": False, "negation_guard": 0}))}
    assert "NegationGuard" not in [type(g).__name__ for g in off["minhash"].guards]
    with_embeddings = {d.name: d for d in default_detectors(build_config({}))}
    assert with_embeddings["embedding"].near_identical == 0.97
    assert with_embeddings["embedding"].info()["near_identical"] == 0.97
    assert with_embeddings["minhash"].near_identical is None  # a cosine bar; Jaccard is not a cosine
    assert {d.name: d for d in default_detectors(build_config({"near_identical": 0}))}[
        "embedding"
    ].near_identical is None
    with pytest.raises(ConfigError, match="near-identical"):
        build_config({"near_identical": 1.5})
    with pytest.raises(ConfigError, match="negation-guard"):
        build_config({"negation_guard": -1})


def test_the_report_lists_vetoed_pairs_with_why(tmp_path):
    # Word 1-grams: one shingle set (Jaccard 1), the shared words in another order: the word-order guard
    # vetoes the MinHash match, so the pair is no finding and the report says why.
    rows = [
        {"anchor": "x", "positive": "revenue from the north grew while costs in the south stayed flat"},
        {"anchor": "y", "positive": "revenue from the south grew while costs in the north stayed flat"},
    ]
    path = write_jsonl(tmp_path / "pairs.jsonl", rows)
    args = ["scan", str(path), "--no-embeddings", "--ngram", "1", "--batch-size", "2", "--format", "json", "-q"]
    result = CliRunner().invoke(app, [*args, "--output", str(tmp_path / "r.json")])
    assert result.exit_code == 0, result.output
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["findings"] == []
    assert len(report["vetoed"]) == 2  # each row's anchor meets the other row's positive
    vetoed = report["vetoed"][0]
    assert set(vetoed) == {
        "batch",
        "epoch",
        "direction",
        "anchor_id",
        "candidate_id",
        "candidate_role",
        "why_not",
        "anchor_text_hash",
        "candidate_text_hash",
    }
    (why,) = vetoed["why_not"]
    assert (why["kind"], why["guard"], why["guard_threshold"]) == ("minhash", "word-order", 0.85)
    assert why["score"] == 1.0 and why["guard_value"] < 0.85


def test_the_stream_engine_lists_the_same_vetoed_pairs(tmp_path):
    rows = [
        {"anchor": "x", "positive": "revenue from the north grew while costs in the south stayed flat"},
        {"anchor": "y", "positive": "revenue from the south grew while costs in the north stayed flat"},
        {"anchor": "z", "positive": "an unrelated sentence about the weather"},
    ]
    path = write_jsonl(tmp_path / "pairs.jsonl", rows)
    reports = []
    for engine in ("memory", "stream"):
        out = tmp_path / f"{engine}.json"
        args = ["scan", str(path), "--no-embeddings", "--ngram", "1", "--batch-size", "3", "--engine", engine]
        result = CliRunner().invoke(app, [*args, "--format", "json", "-q", "--output", str(out)])
        assert result.exit_code == 0, result.output
        reports.append(json.loads(out.read_text())["vetoed"])
    assert reports[0] == reports[1] and len(reports[0]) == 2


@pytest.mark.slow
def test_negatives_say_why_an_alleged_negative_is_not_flagged(tmp_path):
    rows = [
        {"id": "a", "anchor": "How long are backups kept?", "positive": "Backups are kept for 35 days."},
        {"id": "b", "anchor": "backup retention", "positive": "Backups are retained for thirty-five days."},
        {"id": "c", "anchor": "reset my password", "positive": "Use the Forgot password link."},
    ]
    path = write_jsonl(tmp_path / "pairs.jsonl", rows)
    out = tmp_path / "n.json"
    result = CliRunner().invoke(
        app,
        ["negatives", str(path), "--batch-size", "3", "--top", "6", "--format", "json", "-q", "--output", str(out)],
    )
    assert result.exit_code == 0, result.output
    listed = json.loads(out.read_text())["negatives"]
    unflagged = [n for n in listed if not n["flagged"]]
    assert unflagged and all(n["why_not"] for n in unflagged)
    kinds = {w["kind"] for n in unflagged for w in n["why_not"]}
    assert {"embedding", "minhash"} <= kinds
    for n in unflagged:
        for w in n["why_not"]:
            # under the bar, vetoed by a guard, or a rule that held and is not reported (the margin alone)
            assert w["score"] < w["threshold"] or w["guard"] is not None or w["rule"] is not None


# Query→document rows: the documents have three times the queries' words and more. The data's own anchor–
# positive scores set the bar (its 0.9 quantile); a candidate above both its row's positive and that bar
# is likely.
QD_ROWS = [(f"q{i}", f"document number {i} " + "with many words " * 3) for i in range(10)]


def qd_vectors() -> dict[str, list[float]]:
    out: dict[str, list[float]] = {}
    for i in range(10):
        out[f"q{i}"] = unit(1, 0, i)
        # Each row's positive scores 0.5 + 0.04 i against its own query: the 0.9 quantile is 0.824.
        score = 0.5 + 0.04 * i
        out[QD_ROWS[i][1]] = unit(score, (1 - score**2) ** 0.5, 0)
    return out


def margin_detector(above: float):
    from contrast_audit.evidence.embedding import MarginDetector

    c = corpus_of(QD_ROWS)
    vectors = qd_vectors()
    # Queries of one direction, documents of another: make the anchor the first axis for the cosines below.
    for i in range(10):
        vectors[f"q{i}"] = unit(1, 0, 0)
    det = MarginDetector(FixedStore(vectors), None, 0.25, None, False, 3.0, above)
    det.prepare(c)
    return det, c


def test_a_candidate_above_its_positive_and_the_data_s_best_pairs_is_likely():
    det, c = margin_detector(0.9)
    # Row 0's positive scores 0.5. Row 9's document scores 0.86 against every query (above the bar,
    # 0.824); row 5's scores 0.70 (above row 0's positive, under the bar).
    hits = det.detect(q2d_pairs(c, [0, 0, 9], [9, 5, 8]))
    assert hits.mask.tolist() == [True, False, False]  # row 9's own positive (0.86) beats row 8's (0.82)
    assert hits.severity[0] == LIKELY
    assert hits.rules[int(hits.rule[0])].startswith("above the positive")
    assert det.above_bar[False] == pytest.approx(0.824, abs=1e-3)  # between rows 8 (0.82) and 9 (0.86)
    assert det.info()["above_positive_quantile"] == 0.9
    off, c = margin_detector(0.0)
    assert not off.detect(q2d_pairs(c, [0], [9])).mask.any()


def test_the_above_positive_rule_is_a_setting():
    margin = {d.name: d for d in default_detectors(build_config({}))}["margin"]
    assert margin.inner.above_quantile == 0.0  # off unless asked for
    on = {d.name: d for d in default_detectors(build_config({"above_positive": 0.9}))}["margin"]
    assert on.inner.above_quantile == 0.9
    with pytest.raises(ConfigError, match="above-positive"):
        build_config({"above_positive": 2})


def test_the_above_positive_rule_reads_only_data_of_queries_and_documents():
    from contrast_audit.evidence.embedding import MarginDetector

    # Captions: one long caption beside a short one makes a row look like a query and its document, but the
    # data is of alike rows, so the rule stays off.
    rows = [("Dogs in snow .", "The dog is chasing the other dog carrying a stick in its mouth .")]
    rows += [(f"A dog runs {i} .", f"A dog is running {i} .") for i in range(5)]
    vectors = {t: unit(1, 0.1 * i, 0) for i, row in enumerate(rows) for t in row}
    vectors[rows[0][1]] = unit(0.2, 1, 0)  # the row's own positive scores low against its anchor
    c = corpus_of(rows)
    det = MarginDetector(FixedStore(vectors), None, 0.25, None, False, 3.0, 0.9)
    det.prepare(c)
    assert det.query_doc_row[0] and not det.query_doc_data
    assert not det.detect(q2d_pairs(c, [0, 0], [1, 2])).mask.any()


def test_the_word_order_guard_still_reads_near_identical_swaps():
    rows = [
        ("q0", "while the fighter group was inactive it was merged with the tactical group"),
        ("q1", "while the tactical group was inactive it was consolidated with the fighter group"),  # swap + 1 word
        ("q2", "the fighter group, inactive at the time, joined the tactical group in a merger"),  # reworded
    ]
    c = corpus_of(rows)
    guard = OrderGuard(0.85, 50)
    guard.prepare(c)
    det = EmbeddingDetector(FixedStore({t: unit(1, 0, 0) for row in rows for t in row}), 0.825)
    det.prepare(c)
    spared = guard.spares(det, q2d_pairs(c, [0, 0], [1, 2]))
    assert spared.tolist() == [False, True]
