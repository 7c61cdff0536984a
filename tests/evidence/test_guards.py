"""The word-order guard: shared words in another order are not a near-duplicate; a moved phrase is."""

from __future__ import annotations

import json

import pytest
from support import corpus_of, write_jsonl
from test_embedding import FixedStore, q2d_pairs
from typer.testing import CliRunner

from contrast_audit.api import audit
from contrast_audit.cli import app
from contrast_audit.config import build_config
from contrast_audit.errors import ConfigError
from contrast_audit.evidence import default_detectors
from contrast_audit.evidence.embedding import EmbeddingDetector
from contrast_audit.evidence.guards import Guarded, OrderGuard, order_ranks, word_order


def words(text: str) -> list[str]:
    return text.lower().split()


@pytest.mark.parametrize(
    ("a", "b", "expected"),
    [
        ("the same words in the same order", "the same words in the same order", 1.0),
        ("in 2003 the team won the cup", "the team won the cup in 2003", 1.0),  # a moved phrase
        ("we met at noon in the old town", "in the old town we met at noon", 1.0),
        ("anna met bob in paris", "bob met anna in paris", 0.25),  # exchanged names
        ("the dog bit the man", "the man bit the dog", 0.0),  # "the" twice: dog, bit, man reversed
        ("is a former coach and brazilian player", "is a brazilian coach and former player", 1 - 4 / 6),
        ("from new york to boston", "from boston to new york", 0.25),  # a route reversed
        ("the password of my account", "my account password", 1.0),  # one word moved
        ("one two", "three four", 1.0),  # nothing shared: nothing to disagree on
    ],
)
def test_word_order_scores_exchanges_low_and_moved_phrases_as_agreeing(a, b, expected):
    assert word_order(words(a), words(b)) == pytest.approx(expected)
    assert word_order(words(b), words(a)) == pytest.approx(expected)


def test_order_ranks_take_words_that_occur_once_in_each_text():
    # "the" twice in the first, "x" only in the first, "z" twice in the second: left out.
    assert order_ranks(words("the x a the b c z"), words("c z b z a")) == [2, 1, 0]


ROWS = [
    ("who met whom", "Anna met Bob in Paris last spring"),
    ("other", "Bob met Anna in Paris last spring"),
    ("moved", "Last spring Anna met Bob in Paris"),
    ("long", "word " * 60),
]


def guarded_hits(threshold: float, max_words: int = 50) -> list[bool]:
    c = corpus_of(ROWS)
    vectors = {t: [1.0, 0.01 * i, 0, 0] for i, t in enumerate(c.texts.get_column("text").to_list())}
    det = Guarded(EmbeddingDetector(FixedStore(vectors), 0.9), [OrderGuard(threshold, max_words)])
    det.prepare(c)
    return det.detect(q2d_pairs(c, [0, 0], [1, 2])).mask.tolist()


def test_the_guard_drops_exchanged_words_and_keeps_a_moved_phrase():
    assert guarded_hits(0.85) == [False, True]
    assert guarded_hits(0.0) == [True, True]  # 0 turns it off
    assert guarded_hits(0.85, max_words=3) == [True, True]  # texts over the bound are never vetoed


def test_the_guard_runs_by_default_before_the_alignment_guard_and_reports_itself():
    detectors = {d.name: d for d in default_detectors(build_config({}))}
    for name in ("minhash", "embedding", "anchor-embedding"):
        kinds = [type(g).__name__ for g in detectors[name].guards]
        assert kinds.index("OrderGuard") < kinds.index("AlignmentGuard")
        assert detectors[name].info()["word_order_threshold"] == 0.85
    assert "word_order_threshold" not in detectors["margin"].info()  # relevance, not near-duplication
    lexical = {d.name: d for d in default_detectors(build_config({"embeddings": False}))}
    assert [type(g).__name__ for g in lexical["minhash"].guards] == [
        "NumberGuard",
        "EntityGuard",
        "NegationGuard",
        "OrderGuard",
    ]
    off = {d.name: d for d in default_detectors(build_config({"embeddings": False, "word_order": 0}))}
    assert [type(g).__name__ for g in off["minhash"].guards] == ["NumberGuard", "EntityGuard", "NegationGuard"]
    with pytest.raises(ConfigError, match="word-order"):
        build_config({"word_order": 1.5})


SWAPPED = {"anchor": "x", "positive": "revenue from the north grew while costs in the south stayed flat"}
ORIGINAL = {"anchor": "y", "positive": "revenue from the south grew while costs in the north stayed flat"}


def test_overlaps_and_scans_apply_it_to_minhash_matches(tmp_path):
    # Word 1-grams: the two texts have one shingle set (Jaccard 1), and say opposite things.
    old = write_jsonl(tmp_path / "old.jsonl", [ORIGINAL])
    new = write_jsonl(tmp_path / "new.jsonl", [SWAPPED])
    settings = {"embeddings": False, "ngram": 1, "against": [str(old)], "index": str(tmp_path / "i")}
    assert audit([str(new)], build_config(settings)).overlaps.height == 0
    assert audit([str(new)], build_config({**settings, "word_order": 0})).overlaps.height == 1
    both = write_jsonl(tmp_path / "both.jsonl", [ORIGINAL, SWAPPED])
    args = ["scan", str(both), "--no-embeddings", "--ngram", "1", "--batch-size", "2", "--format", "json", "-q"]
    guarded = CliRunner().invoke(app, [*args, "--output", str(tmp_path / "g.json")])
    assert guarded.exit_code == 0, guarded.output
    assert json.loads((tmp_path / "g.json").read_text())["findings"] == []
    unguarded = CliRunner().invoke(app, [*args, "--word-order", "0", "--output", str(tmp_path / "u.json")])
    assert unguarded.exit_code == 0, unguarded.output  # the default gate fails on `certain` findings only
    report = json.loads((tmp_path / "u.json").read_text())
    assert {e["kind"] for f in report["findings"] for e in f["evidence"]} == {"minhash"}
    assert "word_order_threshold" not in report["detectors"]["minhash"]
    assert json.loads((tmp_path / "g.json").read_text())["detectors"]["minhash"]["word_order_threshold"] == 0.85


@pytest.mark.parametrize(
    ("a", "b", "disagree"),
    [
        # a named place, language or product swapped in a templated text
        (
            "What do you think of the gun law proposed by the NRA in New Jersey?",
            "What do you think of the gun law proposed by the NRA in Wisconsin?",
            True,
        ),
        ("How do I learn Python?", "How do I learn Java?", True),
        ("Is the iPhone better than the Pixel?", "Is the iPhone better than the Galaxy?", True),
        # a name that begins the sentence ("Buccinum pulchellum is a species …")
        ("Buccinum pulchellum is a species of sea snail.", "Probuccinum tenerum is a species of sea snail.", True),
        # a name one text adds, spells in another case, or abbreviates is no disagreement
        ("Bush said no to the plan.", "President Bush said no to the plan.", False),
        ("I moved to the US last year.", "I moved to the us last year.", False),
        ("The U.S. economy grew.", "The United States economy grew.", False),
        # a sentence's first word is capitalised in any text; titles and shouting name nothing by capitals
        ("The man is playing a flute.", "The woman is playing the flute.", False),
        ("Where To Buy Cheap Furniture In Doha", "Where To Buy Cheap Furniture In Qatar", False),
        # function words capitalised after a missing full stop name nothing
        (
            "Hi Does anyone know a good bank in Qatar?",
            "Greetings everybody, does anyone know a good bank in Qatar?",
            False,
        ),
    ],
)
def test_name_disagreement(a, b, disagree):
    from contrast_audit.evidence.guards import name_disagreement

    assert name_disagreement(a, b) is disagree
    assert name_disagreement(b, a) is disagree


def test_entity_guard_vetoes_a_substituted_name_but_not_long_texts():
    from contrast_audit.evidence.guards import EntityGuard

    rows = [
        ("gun law in New Jersey", "What is the gun law proposed by the NRA in New Jersey?"),
        ("gun law in Wisconsin", "What is the gun law proposed by the NRA in Wisconsin?"),
    ]
    c = corpus_of(rows)
    vectors = {t: [1.0, 0.01 * i] for i, t in enumerate(c.texts.get_column("text").to_list())}
    detector = EmbeddingDetector(FixedStore(vectors), 0.9)
    guarded = Guarded(detector, [EntityGuard(50)])
    guarded.prepare(c)
    p = q2d_pairs(c, [0], [1])
    assert detector.detect(p).mask.tolist() == [True]
    assert guarded.detect(p).mask.tolist() == [False]
    # Texts over the word limit are passages: their parts may name different things.
    loose = Guarded(detector, [EntityGuard(3)])
    loose.prepare(c)
    assert loose.detect(p).mask.tolist() == [True]
