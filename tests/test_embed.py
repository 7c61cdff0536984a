"""The embedding store with the real default model: one load per session, on-disk cache, prompts."""

from __future__ import annotations

import numpy as np
import pytest
from support import corpus_of

from contrast_audit.config import EmbeddingConfig
from contrast_audit.embed import EmbeddingCache, EmbeddingStore, text_keys
from contrast_audit.encoders import TorchEncoder

ROWS = [
    (
        "reset a forgotten password",
        "Use the Forgot password link on the sign-in page.",
        "Change your password in Settings.",
    ),
    ("export invoices", "Billing → History has a PDF link for each invoice."),
]


def test_cache_roundtrip_and_rerun_embeds_nothing(tmp_path):
    c = corpus_of(ROWS)
    cfg = EmbeddingConfig(cache_dir=str(tmp_path))
    first = EmbeddingStore(cfg)
    first.prepare(c)
    assert first.info()["embedded"] == c.n_texts and first.info()["cached"] == 0
    second = EmbeddingStore(cfg)
    second.prepare(c)
    assert second.info()["embedded"] == 0 and second.info()["cached"] == c.n_texts
    np.testing.assert_allclose(first.doc, second.doc, rtol=0, atol=0)
    assert np.allclose(np.linalg.norm(first.doc, axis=1), 1.0, atol=1e-5)
    # One more text: only it is embedded.
    third = EmbeddingStore(cfg)
    third.prepare(corpus_of([*ROWS, ("new query", "new document")]))
    assert third.info()["embedded"] == 2


def test_prompts_are_part_of_the_key(tmp_path):
    c = corpus_of(ROWS)
    plain = EmbeddingStore(EmbeddingConfig(cache_dir=str(tmp_path)))
    plain.prepare(c)
    prompted = EmbeddingStore(EmbeddingConfig(cache_dir=str(tmp_path), query_prompt="query: ", doc_prompt="passage: "))
    prompted.prepare(c)
    assert prompted.info()["cached"] == 0
    assert prompted.query is not prompted.doc
    anchor = c.anchor[0]
    assert not np.allclose(plain.query[anchor], prompted.query[anchor])
    assert text_keys(["x"], "query: ")[0] != text_keys(["x"], "")[0]


def test_no_cache_writes_nothing(tmp_path):
    store = EmbeddingStore(EmbeddingConfig(cache_dir=str(tmp_path), use_cache=False))
    store.prepare(corpus_of(ROWS))
    assert not any(tmp_path.rglob("*.npz"))


def test_damaged_shard_is_ignored(tmp_path):
    cache = EmbeddingCache(tmp_path, "f" * 64, "")
    cache.dir.mkdir(parents=True)
    (cache.dir / "shard-broken.npz").write_bytes(b"not a zip")
    found, vectors = cache.lookup(text_keys(["a"], ""))
    assert not found.any() and vectors is None


@pytest.mark.parametrize("device", ["cpu"])
def test_paraphrase_scores_above_unrelated(tmp_path, device):
    c = corpus_of(
        [
            ("How do I reset my password?", "Recover access when you cannot remember your password"),
            ("x", "Export monthly billing invoices"),
        ]
    )
    store = EmbeddingStore(EmbeddingConfig(cache_dir=str(tmp_path), device=device))
    store.prepare(c)
    a, p, other = c.anchor[0], c.positive[0], c.positive[1]
    sims = store.cosine(store.query, store.doc, np.array([a, a]), np.array([p, other]))
    assert sims[0] > sims[1]


def test_bf16_vectors_are_close_to_fp32_and_cached_apart(tmp_path, monkeypatch):
    import json

    from typer.testing import CliRunner

    from contrast_audit.cli import app
    from contrast_audit.errors import ConfigError

    c = corpus_of(ROWS)
    exact = EmbeddingStore(EmbeddingConfig(cache_dir=str(tmp_path)))
    exact.prepare(c)
    fast = EmbeddingStore(EmbeddingConfig(cache_dir=str(tmp_path), precision="bf16"))
    entered = []
    arithmetic = TorchEncoder.arithmetic
    monkeypatch.setattr(TorchEncoder, "arithmetic", lambda self: entered.append(1) or arithmetic(self))
    fast.prepare(c)
    assert len(entered) == 1  # once for all batches: autocast casts the weights again on each entry
    monkeypatch.undo()
    assert fast.info()["embedded"] == c.n_texts and fast.info()["cached"] == 0  # not the fp32 vectors
    assert fast.info()["precision"] == "bf16" and exact.info()["precision"] == "fp32"
    assert fast.info()["backend"] == "torch" and "autocast" in fast.info()["backend_reason"]
    assert fast.vectors_id() != exact.vectors_id()
    assert np.all(np.einsum("ij,ij->i", exact.doc, fast.doc) > 0.999)
    again = EmbeddingStore(EmbeddingConfig(cache_dir=str(tmp_path), precision="bf16"))
    again.prepare(c)
    assert again.info()["cached"] == c.n_texts
    np.testing.assert_array_equal(again.doc, fast.doc)
    with pytest.raises(ConfigError, match="precision"):
        EmbeddingConfig(precision="fp16")
    # The command line and the report.
    data = tmp_path / "pairs.jsonl"
    data.write_text("".join(json.dumps({"anchor": a, "positive": p}) + "\n" for a, p, *_ in ROWS), encoding="utf-8")
    out = tmp_path / "r.json"
    args = ["scan", str(data), "--cache-dir", str(tmp_path), "--precision", "bf16", "--format", "json", "-q"]
    done = CliRunner().invoke(app, [*args, "--output", str(out)])
    assert done.exit_code == 0, done.output
    assert json.loads(out.read_text())["detectors"]["embedding"]["precision"] == "bf16"
    bad = CliRunner().invoke(app, ["scan", str(data), "--precision", "fp16"])
    assert bad.exit_code == 2 and "precision" in bad.output


@pytest.mark.parametrize("backend", ["torch", "onnx"])
def test_a_texts_vector_does_not_depend_on_its_batch_mates(tmp_path, backend):
    """Small matrix products round differently from large ones in torch's CPU kernels: every torch
    forward pass covers MIN_BATCH_TOKENS tokens, so one text alone, with one other or with many of its
    length gets the same bits. ONNX Runtime's kernels give them without the fill."""
    from contrast_audit.embed import _equal_length_batches, encode_batches
    from contrast_audit.encoders import MIN_BATCH_TOKENS

    store = EmbeddingStore(EmbeddingConfig(cache_dir=str(tmp_path), backend=backend, device="cpu"))
    store.prepare(corpus_of(ROWS))
    encoder = store.model()
    assert encoder.name == backend
    short = ["cat", "dog", "a red car", "two blue cars", "the quick brown fox jumps"]
    texts = short * 30 + [" ".join(["word"] * 40)]

    def encode(batch: list[str], size: int) -> np.ndarray:
        out = np.zeros((len(batch), 384), dtype=np.float32)
        for part, vecs in encode_batches(encoder, batch, "", size):
            out[part] = vecs
        return out

    together = encode(texts, 64)
    for i in (0, 2, 4, len(texts) - 1):
        np.testing.assert_array_equal(encode([texts[i]], 64)[0], together[i])
    np.testing.assert_array_equal(encode(texts[:7], 3), together[:7])
    # Batches of very short texts grow to cover the minimum; none is split into passes below it.
    batches = _equal_length_batches(encoder, texts, "", 4)
    floor = MIN_BATCH_TOKENS if backend == "torch" else 1
    for part, tokens in batches:
        alike = sum(len(p) for p, t in batches if t == tokens)
        assert len(part) * tokens >= floor or len(part) == alike  # else filled up at encode time
