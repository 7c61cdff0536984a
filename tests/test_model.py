"""Locating and verifying the embedding model (no download; the real model is loaded once, marked slow)."""

from __future__ import annotations

import hashlib

import numpy as np
import pytest

from contrast_audit import model
from contrast_audit.errors import ModelError


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


def test_user_model_must_be_a_local_directory(tmp_path):
    with pytest.raises(ModelError, match="not a local model directory"):
        model.resolve("sentence-transformers/all-mpnet-base-v2")
    with pytest.raises(ModelError, match="no modules.json"):
        model.resolve(str(tmp_path))


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
