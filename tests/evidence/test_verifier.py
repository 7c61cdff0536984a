"""The cross-encoder verifier: it rescores likely and suspect findings only, against a bar from the
data's own pairs, and records its score, bar and rule; a model that is not a one-output CrossEncoder
is a clear error. The cross-encoder is built from the packaged model (its head initialised with a
fixed seed), so nothing is downloaded."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from support import corpus_of, fake_hub_cache, pairs
from typer.testing import CliRunner

from contrast_audit.cli import app
from contrast_audit.errors import ModelError
from contrast_audit.evidence import LIKELY, SUSPECT
from contrast_audit.evidence.verifier import Verifier
from contrast_audit.model import default_model_dir

NOT_A_CROSS_ENCODER = (
    "is a sentence-embedding model, not a CrossEncoder: --verifier needs a cross-encoder "
    "(a sequence-classification model with one output)"
)

RUNNER = CliRunner()


class FakeCrossEncoder:
    """Scores a pair by the words the two texts share (enough to test the plumbing)."""

    num_labels = 1

    def predict(self, sentence_pairs, batch_size=32, show_progress_bar=False):
        return np.array(
            [
                len(set(a.lower().split()) & set(b.lower().split())) / max(len(set(a.split())), 1)
                for a, b in sentence_pairs
            ]
        )


def fake_verifier(threshold=None, quantile=0.5) -> Verifier:
    v = Verifier("unused", threshold, quantile)
    v._load = lambda: FakeCrossEncoder()
    return v


def test_verifier_sets_the_severity_of_what_it_scores_and_calibrates_on_own_pairs():
    rows = [(f"the cat sat on mat {i}", f"the cat sat on the mat {i}") for i in range(60)]
    rows += [("a dog runs in a park", "a dog is running in the park"), ("stock prices fell", "markets dropped")]
    c = corpus_of(rows)
    v = fake_verifier()
    v.prepare(c)
    # The bar is the median of the rows' own pairs' scores (most share every anchor word).
    assert v.calibration["rows"] == 62
    assert v.threshold == pytest.approx(1.0)
    p = pairs(c, [60, 60, 61], [0, 61, 0])
    checked = np.array([True, True, False])
    hits = v.verify(p, checked)
    assert hits.mask.tolist() == [True, True, False]  # only what was handed to it
    assert hits.severity[:2].tolist() == [SUSPECT, SUSPECT]
    assert v.scored >= 2
    fixed = fake_verifier(threshold=0.1)
    fixed.prepare(c)
    assert fixed.threshold == 0.1
    hits = fixed.verify(pairs(c, [0], [1]), np.array([True]))
    assert hits.severity.tolist() == [LIKELY]
    assert hits.rules[hits.rule[0]] == "cross-encoder score at or above the bar"
    assert fixed.info()["bar"] == "explicit"


def test_a_missing_verifier_directory_is_a_usage_error(tmp_path: Path):
    data = tmp_path / "pairs.jsonl"
    data.write_text(json.dumps({"anchor": "a b", "positive": "c d"}) + "\n", encoding="utf-8")
    result = RUNNER.invoke(app, ["scan", str(data), "--verifier", str(tmp_path / "nope"), "--no-minhash"])
    assert result.exit_code == 2
    assert "not a directory" in result.output


def model_dir(path: Path, config: dict, **files: object) -> Path:
    """A directory holding only the config files the verifier reads before loading a model."""
    path.mkdir(parents=True)
    (path / "config.json").write_text(json.dumps(config), encoding="utf-8")
    for name, value in files.items():
        (path / f"{name}.json").write_text(json.dumps(value), encoding="utf-8")
    return path


def test_a_sentence_embedding_model_is_refused_before_it_is_loaded(tmp_path: Path):
    bundled = str(default_model_dir())
    with pytest.raises(ModelError) as caught:
        Verifier(bundled).check()
    assert caught.value.message == f"{bundled} {NOT_A_CROSS_ENCODER}"
    # Saved by a newer sentence-transformers, a bi-encoder says what it is.
    saved = model_dir(
        tmp_path / "st",
        {"architectures": ["BertModel"]},
        config_sentence_transformers={"model_type": "SentenceTransformer"},
    )
    with pytest.raises(ModelError, match="is a sentence-embedding model, not a CrossEncoder"):
        Verifier(str(saved)).check()


def test_scan_with_a_sentence_embedding_model_as_verifier_exits_2(tmp_path: Path):
    data = tmp_path / "pairs.jsonl"
    data.write_text(json.dumps({"anchor": "a b", "positive": "c d"}) + "\n", encoding="utf-8")
    result = RUNNER.invoke(app, ["scan", str(data), "--verifier", str(default_model_dir()), "--no-minhash"])
    assert result.exit_code == 2, result.output
    assert NOT_A_CROSS_ENCODER in result.output


def test_the_config_decides_what_can_verify(tmp_path: Path):
    def check(name: str, config: dict, **files: object) -> Verifier:
        v = Verifier(str(model_dir(tmp_path / name, config, **files)))
        v.check()
        return v

    check("ce", {"architectures": ["BertForSequenceClassification"], "id2label": {"0": "LABEL_0"}})
    # A reranker saved as a CrossEncoder scores with its own modules, whatever its architecture.
    check(
        "reranker", {"architectures": ["Qwen3ForCausalLM"]}, config_sentence_transformers={"model_type": "CrossEncoder"}
    )
    with pytest.raises(ModelError, match="gives 3 scores per pair"):
        check("nli", {"architectures": ["BertForSequenceClassification"], "id2label": {"0": "a", "1": "b", "2": "c"}})
    with pytest.raises(ModelError, match="is a BertForMaskedLM checkpoint, not a CrossEncoder"):
        check("mlm", {"architectures": ["BertForMaskedLM"]})
    with pytest.raises(ModelError, match="no config.json"):
        Verifier(str(tmp_path)).check()


def test_a_verifier_hub_id_resolves_through_the_hugging_face_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    commit = "feed" * 10
    cache = tmp_path / "hub"
    source = model_dir(tmp_path / "ce", {"architectures": ["BertForSequenceClassification"], "id2label": {"0": "x"}})
    snapshot = fake_hub_cache(cache, "acme/ce", source, commit)
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.chdir(tmp_path)
    v = Verifier("acme/ce")
    v.check()
    assert v.directory == snapshot and v.revision == commit
    assert v.info()["path"] == "acme/ce" and v.info()["revision"] == commit
    with pytest.raises(ModelError) as caught:
        Verifier("acme/absent").check()
    assert (
        caught.value.message == f"verifier acme/absent is not in the Hugging Face cache at {cache} and HF_HUB_OFFLINE=1"
    )
    # The bundled bi-encoder under a hub id is refused as it is from a directory.
    fake_hub_cache(cache, "acme/minilm", default_model_dir())
    with pytest.raises(ModelError) as caught:
        Verifier("acme/minilm").check()
    assert caught.value.message == f"acme/minilm {NOT_A_CROSS_ENCODER}"


@pytest.fixture(scope="module")
def cross_encoder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A one-output CrossEncoder made from the packaged MiniLM (head initialised with seed 0)."""
    import torch
    from sentence_transformers import CrossEncoder

    from contrast_audit.model import default_model_dir

    torch.manual_seed(0)
    out = tmp_path_factory.mktemp("cross-encoder")
    CrossEncoder(str(default_model_dir()), num_labels=1).save_pretrained(str(out))
    return out


@pytest.mark.slow
def test_scan_with_a_cross_encoder_records_its_score_bar_and_rule(tmp_path: Path, cross_encoder: Path):
    texts = [
        ("how do I reset my password", "steps to reset your password"),
        ("how can I change my password", "changing the password of an account"),
        ("what is the capital of france", "paris is the capital of france"),
        ("where is paris located", "paris lies in northern france"),
        ("how to bake bread", "a simple recipe for baking bread"),
        ("how do I make bread at home", "homemade bread recipe"),
        ("best way to learn guitar", "tips for learning to play guitar"),
        ("how to start playing the guitar", "a beginner's guide to guitar"),
        ("how can I recover my password", "steps to reset your password"),  # same positive: certain
    ]
    rows = [{"anchor": a, "positive": p} for a, p in texts]
    data = tmp_path / "pairs.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    out = tmp_path / "report.json"
    args = ["scan", str(data), "--batch-size", "16", "--margin", "--format", "json", "--output", str(out), "--quiet"]
    result = RUNNER.invoke(app, [*args, "--verifier", str(cross_encoder), "--verifier-threshold", "-1e9"])
    assert result.exit_code in (0, 1), result.output
    report = json.loads(out.read_text(encoding="utf-8"))
    info = report["detectors"]["verifier"]
    assert info["threshold"] == -1e9 and info["scored"] > 0
    verified = [f for f in report["findings"] if any(e["kind"] == "verifier" for e in f["evidence"])]
    assert verified, report["findings"]
    # A bar under every score makes each verified finding likely, and says so.
    assert all(f["severity"] == "likely" for f in verified)
    assert all(f["severity_rule"] == "verifier: cross-encoder score at or above the bar" for f in verified)
    # Certain findings are never handed to it.
    assert all(
        not any(e["kind"] == "verifier" for e in f["evidence"])
        for f in report["findings"]
        if f["severity"] == "certain"
    )
    # A bar over every score makes them suspect; calibrated, the bar is recorded with its calibration.
    result = RUNNER.invoke(app, [*args, "--verifier", str(cross_encoder)])
    assert result.exit_code in (0, 1), result.output
    calibrated = json.loads(out.read_text(encoding="utf-8"))["detectors"]["verifier"]
    assert calibrated["calibration"]["rows"] == 9 and calibrated["threshold"] is not None
