"""Token alignment (tokens.py) and the alignment guard, with the real default model."""

from __future__ import annotations

import numpy as np
import pytest
from support import corpus_of

from contrast_audit.config import EmbeddingConfig
from contrast_audit.corpus import ANCHOR_ROLE, POSITIVE_ROLE
from contrast_audit.embed import EmbeddingStore
from contrast_audit.evidence import Pairs
from contrast_audit.evidence.embedding import AnchorEmbeddingDetector, EmbeddingDetector
from contrast_audit.evidence.guards import AlignmentGuard, Guarded
from contrast_audit.tokens import TokenStore

BASE = "Eight firefighters suffered minor injuries, fire officials said."
NEAR = "Eight firefighters suffered minor injuries, officials said."
EXTRA = (
    "Eight firefighters suffered minor injuries and were treated at a hospital for burns and smoke "
    "inhalation overnight, fire officials said."
)
ROWS = [
    (BASE, NEAR),
    (EXTRA, "Crews contained the blaze by noon."),
    ("How do I reset my password?", "Use the forgot password link on the sign-in page."),
    ("How can I reset my password?", "Support can send you a new login link by email."),
]


def tokens_for(rows, cache_dir, match=0.7):
    corpus = corpus_of(rows)
    tokens = TokenStore(EmbeddingStore(EmbeddingConfig(cache_dir=str(cache_dir))), match)
    tokens.prepare(corpus)
    tid = {t: i for i, t in enumerate(corpus.texts.get_column("text").to_list())}
    return corpus, tokens, tid


def test_alignment_drops_when_one_text_carries_content_the_other_lacks(tmp_path):
    _, tokens, tid = tokens_for(ROWS, tmp_path)
    near, extra = tokens.alignment(np.array([tid[BASE], tid[BASE]]), np.array([tid[NEAR], tid[EXTRA]]))
    assert near > 0.9 and extra < 0.8
    # The smaller coverage is symmetric, and a text aligns fully with itself (computed, not memoised).
    assert tokens._align(tid[EXTRA], tid[BASE]) == pytest.approx(tokens._align(tid[BASE], tid[EXTRA]))
    assert tokens._align(tid[BASE], tid[BASE]) == pytest.approx(1.0, abs=1e-3)


def test_an_unmatched_token_counts_nothing_unless_matching_is_soft(tmp_path):
    _, hard, tid = tokens_for(ROWS, tmp_path, match=0.7)
    _, soft, _ = tokens_for(ROWS, tmp_path, match=0.0)
    u, v = np.array([tid[BASE], tid[BASE]]), np.array([tid[NEAR], tid[EXTRA]])
    near_hard, extra_hard = hard.alignment(u, v)
    near_soft, extra_soft = soft.alignment(u, v)
    # Soft matching credits the extra clause's tokens with their (positive) best cosine; coverage does not.
    assert extra_hard < extra_soft - 0.1
    assert near_hard >= near_soft - 0.05  # every token of the near-copy has a counterpart
    # By hand: the idf-weighted share of each text's tokens matched in the other; the smaller one.
    sim = hard.vectors[tid[EXTRA]] @ hard.vectors[tid[BASE]].T
    w_extra, w_base = hard.weights[tid[EXTRA]], hard.weights[tid[BASE]]
    extra_covered = float((w_extra * (sim.max(axis=1) >= 0.7)).sum() / w_extra.sum())
    base_covered = float((w_base * (sim.max(axis=0) >= 0.7)).sum() / w_base.sum())
    assert extra_hard == pytest.approx(min(extra_covered, base_covered))
    assert extra_covered < base_covered  # the longer text is the one not covered
    with pytest.raises(ValueError, match="match"):
        TokenStore(hard.store, 1.5)


def test_token_vectors_come_from_the_cache_on_a_rerun(tmp_path):
    _, first, tid = tokens_for(ROWS, tmp_path)
    u, v = np.array([tid[BASE], tid[BASE]]), np.array([tid[NEAR], tid[EXTRA]])
    scores = first.alignment(u, v)
    assert (first.stats["token_texts_encoded"], first.stats["token_texts_cached"]) == (3, 0)
    assert first.stats["token_fallbacks"] == 0  # the model's own tokenisation matched every text
    first.finish()  # writes the buffered matrices as one shard
    _, again, _ = tokens_for(ROWS, tmp_path)
    assert again.alignment(u, v) == pytest.approx(scores, abs=1e-6)
    assert (again.stats["token_texts_encoded"], again.stats["token_texts_cached"]) == (0, 3)
    # Texts spread over several shards are all found; a damaged shard only costs a re-encode.
    again.alignment(np.array([tid[ROWS[2][0]]]), np.array([tid[ROWS[3][0]]]))
    again.finish()
    shards = sorted((tmp_path / "tokens").glob("*/shard-*.npz"))
    assert len(shards) == 2
    _, third, _ = tokens_for(ROWS, tmp_path)
    third.ensure(np.array([tid[BASE], tid[NEAR], tid[EXTRA], tid[ROWS[2][0]], tid[ROWS[3][0]]]))
    assert (third.stats["token_texts_encoded"], third.stats["token_texts_cached"]) == (0, 5)
    shards[0].write_bytes(b"not a zip file")
    _, fourth, _ = tokens_for(ROWS, tmp_path)
    fourth.ensure(np.array([tid[BASE], tid[NEAR], tid[EXTRA], tid[ROWS[2][0]], tid[ROWS[3][0]]]))
    assert fourth.stats["token_texts_encoded"] + fourth.stats["token_texts_cached"] == 5
    assert 0 < fourth.stats["token_texts_encoded"] < 5


def test_the_guard_checks_the_texts_each_detector_compared(tmp_path):
    corpus, tokens, _ = tokens_for(ROWS, tmp_path)
    store = tokens.store
    guard = AlignmentGuard(tokens, 0.84, 50)
    guard.prepare(corpus)
    pairs = Pairs("query_to_doc", np.array([2]), np.array([3]), np.array([POSITIVE_ROLE]), corpus.positive[[3]])
    everything = np.array([True])
    anchors, answers = AnchorEmbeddingDetector(store, 0.85), EmbeddingDetector(store, 0.85)
    anchors.prepare(corpus)
    answers.prepare(corpus)
    # anchor-embedding rests on the two anchors, which align; embedding on the two answers, which do not.
    assert guard.veto(anchors, pairs, everything).tolist() == [False]
    assert guard.veto(answers, pairs, everything).tolist() == [True]
    assert guard.veto(answers, pairs, np.array([False])).tolist() == [False]
    long = AlignmentGuard(tokens, 0.84, 3)  # every text is longer than 3 words: never vetoed
    long.prepare(corpus)
    assert long.veto(answers, pairs, everything).tolist() == [False]


def test_guarded_detectors_drop_vetoed_matches_and_report_the_guard(tmp_path):
    corpus, tokens, _ = tokens_for(ROWS, tmp_path)
    store = tokens.store
    pairs = Pairs("query_to_query", np.array([0]), np.array([1]), np.array([ANCHOR_ROLE]), corpus.anchor[[1]])
    bare = EmbeddingDetector(store, 0.5)
    bare.prepare(corpus)
    assert bare.detect(pairs).mask.tolist() == [True]  # BASE vs EXTRA: close sentence vectors
    guarded = Guarded(EmbeddingDetector(store, 0.5), [AlignmentGuard(tokens, 0.84, 50)])
    guarded.prepare(corpus)
    assert guarded.detect(pairs).mask.tolist() == [False]
    info = guarded.info()
    assert info["alignment_threshold"] == 0.84 and info["alignment_words"] == 50


LONG = " ".join(["The committee reviewed the annual budget, line by line, twice."] * 40)  # > 256 tokens
TOKENIZER_TEXTS = [BASE, NEAR, EXTRA, "", "  padded  ", "Café Straße naïve — 日本語のテキスト ½ ①", "[CLS] [SEP]", LONG]


def test_the_tokenizer_file_gives_the_model_tokenizers_ids():
    from transformers import AutoTokenizer

    from contrast_audit.model import default_model_dir
    from contrast_audit.tokens import file_tokenizer

    directory = default_model_dir()
    ours = file_tokenizer(directory)
    assert ours is not None and ours.source == "tokenizer.json" and ours.max_length == 256
    reference = AutoTokenizer.from_pretrained(str(directory), local_files_only=True)
    expected = reference(TOKENIZER_TEXTS, truncation=True, max_length=256)["input_ids"]
    assert ours.encode(TOKENIZER_TEXTS) == expected
    assert len(expected[-1]) == 256  # the long text is truncated, its [SEP] kept
    assert ours.vocab_size == len(reference)
    assert ours.special_ids == frozenset(reference.all_special_ids)


def test_a_directory_the_file_cannot_describe_falls_back_to_the_model(tmp_path):
    from contrast_audit.model import default_model_dir
    from contrast_audit.tokens import file_tokenizer

    assert file_tokenizer(tmp_path) is None  # no tokenizer.json
    source = default_model_dir()
    for name in ("tokenizer.json", "tokenizer_config.json"):
        (tmp_path / name).write_bytes((source / name).read_bytes())
    assert file_tokenizer(tmp_path) is None  # no sentence_bert_config.json: max length unknown
    (tmp_path / "sentence_bert_config.json").write_text('{"max_seq_length": 128, "do_lower_case": true}')
    assert file_tokenizer(tmp_path) is None  # the model module lowercases text itself
    (tmp_path / "sentence_bert_config.json").write_text('{"max_seq_length": 128, "do_lower_case": false}')
    assert file_tokenizer(tmp_path).max_length == 128
    (tmp_path / "tokenizer_config.json").write_text('{"do_lower_case": false}')  # the normaliser lowercases
    assert file_tokenizer(tmp_path) is None
    (tmp_path / "tokenizer_config.json").write_text("{}")
    (tmp_path / "tokenizer.json").write_text("not json")
    assert file_tokenizer(tmp_path) is None


WARM_RESCAN = """
import sys
import numpy as np
from support import corpus_of
from contrast_audit import embed
from contrast_audit.config import EmbeddingConfig
from contrast_audit.embed import EmbeddingStore
from contrast_audit.tokens import TokenStore

def no_model(*args, **kwargs):
    raise AssertionError("the model was loaded")

embed._load_model = no_model
rows = {rows!r}
corpus = corpus_of(rows)
tokens = TokenStore(EmbeddingStore(EmbeddingConfig(cache_dir={cache!r})), 0.7)
tokens.prepare(corpus)
tid = {{t: i for i, t in enumerate(corpus.texts.get_column("text").to_list())}}
scores = tokens.alignment(np.array([tid[rows[0][0]]]), np.array([tid[rows[0][1]]]))
assert tokens.stats["token_texts_encoded"] == 0 and tokens.stats["token_texts_cached"] == 2, tokens.stats
assert tokens.tokenizer.source == "tokenizer.json"
heavy = sorted(m for m in ("torch", "sentence_transformers", "transformers") if m in sys.modules)
print(float(scores[0]), heavy)
"""


def test_a_warm_alignment_loads_neither_the_model_nor_torch(tmp_path):
    import subprocess
    import sys
    from pathlib import Path

    _, tokens, tid = tokens_for(ROWS, tmp_path)
    expected = tokens.alignment(np.array([tid[BASE]]), np.array([tid[NEAR]]))[0]
    tokens.finish()
    script = WARM_RESCAN.format(rows=ROWS, cache=str(tmp_path))
    tests = Path(__file__).parent
    env = {**__import__("os").environ, "PYTHONPATH": f"{tests}{__import__('os').pathsep}{tests.parent}"}
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    score, heavy = proc.stdout.strip().split(" ", 1)
    assert float(score) == pytest.approx(expected, abs=1e-6)
    assert heavy == "[]"


def test_idf_from_the_first_stages_token_counts_equals_tokenising_again(tmp_path):
    """The first stage tokenises every text for its static vectors and counts the idf sample's tokens
    on the way; the weights equal those of tokenising the sample again, texts past the model's length
    and texts of no token included."""
    from pathlib import Path

    from contrast_audit.encoders import DocumentFrequency, file_tokenizer
    from contrast_audit.first_stage import StaticModel
    from contrast_audit.model import resolve

    long = " ".join(f"token{i} alpha beta" for i in range(200))
    rows = [(f"text number {i} about {long if i % 7 == 0 else 'cats'}", f"naïve café {i} ✓", "") for i in range(60)]
    corpus = corpus_of(rows)
    texts = corpus.texts.get_column("text").to_list()
    directory = Path(resolve(None).path)
    weights = {}
    for shared in (False, True):
        store = EmbeddingStore(EmbeddingConfig(cache_dir=str(tmp_path)))
        tokens = TokenStore(store, 0.7)
        tokens.prepare(corpus)
        if shared:
            store.document_frequency = DocumentFrequency(len(texts), file_tokenizer(directory))
            StaticModel.load(directory).encode(texts, store.document_frequency.add)
        tokens._ensure_idf()
        weights[shared] = tokens.idf
    np.testing.assert_array_equal(weights[True], weights[False])
