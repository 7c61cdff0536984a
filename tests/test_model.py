"""Locating and verifying the embedding model (no download; the real model is loaded once, marked slow).

Hub ids resolve through a Hugging Face cache each test builds under ``tmp_path`` (``support.fake_hub_cache``),
its snapshot linking to the packaged model's files."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pytest
from support import RUNNER, fake_hub_cache

from contrast_audit import model
from contrast_audit.cli import app
from contrast_audit.errors import ModelError

COMMIT = "c0ffee" + "0" * 34


@pytest.fixture
def hub(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty hub cache named by HF_HUB_CACHE, offline, run from ``tmp_path``."""
    cache = tmp_path / "hub"
    cache.mkdir()
    monkeypatch.delenv("HUGGINGFACE_HUB_CACHE", raising=False)
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.chdir(tmp_path)
    return cache


def test_default_model_is_found_and_matches_the_official_release():
    source = model.resolve(None)
    assert source.model_id == "sentence-transformers/all-MiniLM-L6-v2"
    assert source.revision == model.DEFAULT_MODEL_REVISION
    assert source.sha256 == model.DEFAULT_MODEL_SHA256
    assert len(source.fingerprint()) == 64


def test_a_tampered_file_is_refused(tmp_path):
    (tmp_path / "config.json").write_text("{}")
    expected = {"config.json": hashlib.sha256(b"{ }").hexdigest()}
    with pytest.raises(ModelError, match="does not match"):
        model.verify(tmp_path, expected)
    with pytest.raises(ModelError, match="missing"):
        model.verify(tmp_path, {"model.safetensors": "0" * 64})


def test_user_model_must_be_a_local_directory_or_a_cached_hub_id(tmp_path, hub):
    with pytest.raises(ModelError, match="not a local model directory"):
        model.resolve(str(tmp_path / "no" / "such" / "model"))
    with pytest.raises(ModelError, match="is not in the Hugging Face cache"):
        model.resolve("sentence-transformers/all-mpnet-base-v2")
    with pytest.raises(ModelError, match="no modules.json"):
        model.resolve(str(tmp_path))


def test_a_hub_id_resolves_to_its_cached_snapshot_and_records_its_commit(hub):
    snapshot = fake_hub_cache(hub, "acme/minilm", model.default_model_dir(), COMMIT)
    source = model.resolve("acme/minilm")
    assert source.model_id == "acme/minilm"
    assert source.path == str(snapshot.resolve())
    assert source.revision == COMMIT
    # The snapshot holds the packaged files: the same digests as the verified default, another fingerprint.
    assert {name: source.sha256[name] for name in model.DEFAULT_MODEL_SHA256} == model.DEFAULT_MODEL_SHA256
    assert source.fingerprint() != model.resolve(None).fingerprint()


def test_hf_home_locates_the_cache_when_hf_hub_cache_is_unset(tmp_path, hub, monkeypatch):
    monkeypatch.delenv("HF_HUB_CACHE")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))
    fake_hub_cache(tmp_path / "hf-home" / "hub", "acme/minilm", model.default_model_dir(), COMMIT)
    assert model.hub_cache_dir() == tmp_path / "hf-home" / "hub"
    assert model.resolve("acme/minilm").revision == COMMIT


@pytest.mark.parametrize("offline", ["1", None])
def test_a_hub_id_missing_from_the_cache_is_an_error_and_never_a_download(hub, monkeypatch, offline):
    monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)
    if offline:
        monkeypatch.setenv("HF_HUB_OFFLINE", offline)
        said = f"BAAI/bge-small-en-v1.5 is not in the Hugging Face cache at {hub} and HF_HUB_OFFLINE=1"
    else:
        monkeypatch.delenv("HF_HUB_OFFLINE")
        said = (
            f"BAAI/bge-small-en-v1.5 is not in the Hugging Face cache at {hub}, and contrast-audit never downloads "
            "a model at run time"
        )
    with pytest.raises(ModelError) as caught:
        model.resolve("BAAI/bge-small-en-v1.5")
    assert caught.value.message == said
    assert caught.value.fix.startswith("download it once with `hf download BAAI/bge-small-en-v1.5`")
    assert caught.value.fix.endswith("or pass a local directory")
    assert list(hub.iterdir()) == []  # nothing was fetched into the cache


def test_a_local_directory_wins_over_a_hub_id_of_the_same_name(hub):
    fake_hub_cache(hub, "acme/minilm", model.default_model_dir(), COMMIT)
    local = Path("acme") / "minilm"
    local.mkdir(parents=True)
    (local / "config.json").write_text("{}", encoding="utf-8")
    source = model.resolve("acme/minilm")
    assert source.path == str(local.resolve())
    assert source.revision is None
    assert source.model_id == "minilm"


def test_scan_with_a_hub_id_missing_from_the_cache_exits_2(hub):
    data = Path("pairs.jsonl")
    data.write_text(json.dumps({"anchor": "a b", "positive": "c d"}) + "\n", encoding="utf-8")
    result = RUNNER.invoke(app, ["scan", str(data), "--model", "acme/absent", "--no-minhash"])
    assert result.exit_code == 2, result.output
    assert f"acme/absent is not in the Hugging Face cache at {hub}" in result.output


@pytest.mark.slow
def test_scan_with_a_cached_hub_id_reports_the_id_snapshot_and_revision(hub):
    snapshot = fake_hub_cache(hub, "acme/minilm", model.default_model_dir(), COMMIT)
    data = Path("pairs.jsonl")
    rows = [("how do I reset my password", "steps to reset your password"), ("bake bread", "a bread recipe")]
    data.write_text("".join(json.dumps({"anchor": a, "positive": p}) + "\n" for a, p in rows), encoding="utf-8")
    args = [
        "scan",
        str(data),
        "--model",
        "acme/minilm",
        "--format",
        "json",
        "--output",
        "report.json",
        "--quiet",
        "--no-cache",
    ]
    result = RUNNER.invoke(app, args)
    assert result.exit_code == 0, result.output
    info = json.loads(Path("report.json").read_text(encoding="utf-8"))["detectors"]["embedding"]
    assert info["model"] == "acme/minilm"
    assert info["model_path"] == str(snapshot.resolve())
    assert info["revision"] == COMMIT
    assert info["embedded"] == 4


@pytest.mark.slow
def test_default_model_loads_offline_and_embeds():
    st = model.load(model.resolve(None), device="cpu")
    emb = st.encode(
        ["reset a forgotten password", "recover access when you cannot remember your password", "export invoices"],
        normalize_embeddings=True,
    )
    assert emb.shape == (3, 384)
    sims = emb @ emb.T
    assert sims[0, 1] > sims[0, 2]
    assert np.allclose(np.linalg.norm(emb, axis=1), 1.0, atol=1e-5)
