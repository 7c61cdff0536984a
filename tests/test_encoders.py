"""The model on ONNX Runtime against sentence-transformers on torch: the same vectors within 1e-5,
cached apart, an export checked before use, torch where the export cannot be exact or kept."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from support import corpus_of
from typer.testing import CliRunner

from contrast_audit import embed, encoders
from contrast_audit.config import EmbeddingConfig
from contrast_audit.embed import EmbeddingStore
from contrast_audit.errors import ConfigError
from contrast_audit.tokens import TokenStore

ROWS = [
    ("reset a forgotten password", "Use the Forgot password link on the sign-in page.", "Change it in Settings."),
    ("export invoices", "Billing → History has a PDF link for each invoice."),
    ("A man is playing a flute.", "A man plays the flute.", "A woman slices an onion."),
    ("naïve café near 東京 🙂", "a café in Tokyo", ""),
]


def store(cache: Path, **settings) -> EmbeddingStore:
    s = EmbeddingStore(EmbeddingConfig(cache_dir=str(cache), device="cpu", **settings))
    s.prepare(corpus_of(ROWS))
    return s


def test_onnx_vectors_match_torch_and_are_cached_apart(tmp_path):
    onnx, torch = store(tmp_path, backend="onnx"), store(tmp_path, backend="torch")
    assert onnx.info()["backend"] == "onnx" and torch.info()["backend"] == "torch"
    network = torch.model().st[0].auto_model
    assert network.config._attn_implementation != "eager"  # exported with eager attention, then given back
    assert onnx.vectors_id() != torch.vectors_id()
    assert torch.info()["embedded"] == onnx.info()["embedded"]  # neither read the other's vectors
    np.testing.assert_allclose(onnx.doc, torch.doc, atol=2e-3)  # float16 in the cache: one step of it
    assert np.all(np.einsum("ij,ij->i", onnx.doc, torch.doc) > 0.99999)
    # auto is onnx on this CPU-only machine, and reads what the onnx store cached.
    auto = store(tmp_path)
    assert auto.info()["backend"] == "onnx" and auto.info()["embedded"] == 0
    assert auto.info()["backend_reason"].startswith("the model exported to onnx-v1/")
    assert (encoders.onnx_dir(tmp_path, onnx.source.fingerprint()) / "model.onnx").is_file()


def test_prompts_and_texts_past_the_models_length_encode_alike_on_both(tmp_path):
    long = " ".join(f"word{i} and more" for i in range(300))  # past max_seq_length: truncated alike
    texts = [long, "short", "naïve café"]
    vectors = {}
    for backend in ("onnx", "torch"):
        s = EmbeddingStore(EmbeddingConfig(cache_dir=str(tmp_path / backend), backend=backend, device="cpu"))
        s.prepare(corpus_of(ROWS))
        encoder = s.model()
        vectors[backend] = np.concatenate([encoder.sentences([t], "query: ") for t in texts])
    np.testing.assert_allclose(vectors["onnx"], vectors["torch"], atol=1e-5)


def test_token_embeddings_align_alike_on_both(tmp_path):
    corpus = corpus_of(ROWS)
    scores = {}
    for backend in ("onnx", "torch"):
        tokens = TokenStore(EmbeddingStore(EmbeddingConfig(cache_dir=str(tmp_path / backend), backend=backend)))
        tokens.prepare(corpus)
        u, v = np.array([0, 2, 4, 6]), np.array([1, 3, 5, 7])
        scores[backend] = tokens.alignment(u, v)
        assert tokens.stats["token_texts_encoded"] == 8
    np.testing.assert_allclose(scores["onnx"], scores["torch"], atol=1e-6)


WARM = """
import sys
from support import corpus_of
from contrast_audit.config import EmbeddingConfig
from contrast_audit.embed import EmbeddingStore
s = EmbeddingStore(EmbeddingConfig(cache_dir={cache!r}))
s.prepare(corpus_of([("a text never embedded before", "and its positive, also new")]))
heavy = sorted(m for m in ("torch", "sentence_transformers", "transformers") if m in sys.modules)
print(s.info()["backend"], s.info()["embedded"], heavy)
"""


def test_a_process_with_the_export_embeds_without_torch(tmp_path):
    store(tmp_path)  # exports
    tests = Path(__file__).parent
    done = subprocess.run(
        [sys.executable, "-c", WARM.format(cache=str(tmp_path))],
        cwd=tests,
        env={"PYTHONPATH": str(tests), "HF_HUB_OFFLINE": "1", "PATH": ""},
        capture_output=True,
        text=True,
        check=True,
    )
    assert done.stdout.split() == ["onnx", "2", "[]"], done.stderr


class _Module:
    def __init__(self, config: dict | None = None) -> None:
        self.config = config or {}

    def get_config_dict(self) -> dict:
        return self.config


def _pipeline(*names: str, pooling: dict | None = None) -> list:
    kinds = {name: type(name, (_Module,), {}) for name in set(names)}
    return [kinds[n](pooling if n == "Pooling" else None) for n in names]


@pytest.mark.parametrize(
    ("modules", "pooling", "why"),
    [
        (("Transformer", "Pooling", "Dense", "Normalize"), {"pooling_mode": "mean"}, "Transformer → Pooling → Dense"),
        (("Transformer", "Pooling"), {"pooling_mode": "max"}, "pooling is max"),
        (
            ("Transformer", "Pooling"),
            {"pooling_mode_mean_tokens": True, "pooling_mode_max_tokens": True},
            "combination",
        ),
        (("Transformer", "Pooling"), {"pooling_mode": "mean", "include_prompt": False}, "prompt tokens out"),
        (("StaticEmbedding",), None, "not Transformer → Pooling"),
    ],
)
def test_only_plain_pipelines_export(modules, pooling, why):
    spec, reason = encoders.exportable(_pipeline(*modules, pooling=pooling))
    assert spec is None and why in reason


def test_plain_pipelines_and_the_older_pooling_flags_export():
    spec, _ = encoders.exportable(_pipeline("Transformer", "Pooling", pooling={"pooling_mode_cls_token": True}))
    assert spec == encoders.OnnxSpec("cls", False)
    spec, _ = encoders.exportable(_pipeline("Transformer", "Pooling", "Normalize", pooling={"pooling_mode": "mean"}))
    assert spec == encoders.OnnxSpec("mean", True)


def test_a_machine_that_may_have_a_gpu_runs_torch_unless_told_cpu(tmp_path, monkeypatch):
    monkeypatch.setattr(encoders, "accelerator_visible", lambda: True)
    auto = EmbeddingStore(EmbeddingConfig(cache_dir=str(tmp_path)))
    auto.prepare(corpus_of(ROWS))
    assert auto.info()["backend"] == "torch" and "GPU" in auto.info()["backend_reason"]
    assert store(tmp_path).info()["backend"] == "onnx"  # --device cpu


def test_torch_where_onnx_cannot_be_exact_or_kept(tmp_path, monkeypatch):
    bf16 = store(tmp_path, precision="bf16")
    assert bf16.info()["backend"] == "torch" and "autocast" in bf16.info()["backend_reason"]
    uncached = store(tmp_path, use_cache=False)
    assert uncached.info()["backend"] == "torch" and "--no-cache" in uncached.info()["backend_reason"]
    with pytest.raises(ConfigError, match="--backend onnx: --no-cache"):
        store(tmp_path, use_cache=False, backend="onnx")
    # An export whose vectors differ from the model's is not kept, and auto runs torch.
    monkeypatch.setattr(encoders, "EXPORT_TOLERANCE", -1.0)
    differs = store(tmp_path / "other")
    assert differs.info()["backend"] == "torch" and "differ from the model's" in differs.info()["backend_reason"]
    assert not any((tmp_path / "other" / encoders.ONNX_LAYOUT).rglob("*.onnx"))
    assert not any((tmp_path / "other" / encoders.ONNX_LAYOUT).rglob("*.tmp"))
    with pytest.raises(ConfigError, match="differ from the model's"):
        store(tmp_path / "other", backend="onnx")


def test_an_export_without_its_spec_is_made_again(tmp_path):
    first = store(tmp_path)
    folder = encoders.onnx_dir(tmp_path, first.source.fingerprint())
    spec = folder / "spec.json"
    spec.write_text("{not json", encoding="utf-8")
    left = folder / ".model.onnx.999999999.0badf00d.tmp"  # a killed export's
    left.write_bytes(b"half a model")
    again = store(tmp_path)  # a new store chooses again
    assert again.info()["backend"] == "onnx"
    assert json.loads(spec.read_text(encoding="utf-8")) == {"pooling": "mean", "normalize": True}
    assert sorted(p.name for p in folder.iterdir()) == ["model.onnx", "spec.json"]


def test_the_backend_on_the_command_line_and_in_the_report(tmp_path):
    from contrast_audit.cli import app

    data = tmp_path / "pairs.jsonl"
    data.write_text("".join(json.dumps({"anchor": r[0], "positive": r[1]}) + "\n" for r in ROWS), encoding="utf-8")
    out = tmp_path / "r.json"
    args = ["scan", str(data), "--cache-dir", str(tmp_path / "c"), "--format", "json", "-q", "--output", str(out)]
    done = CliRunner().invoke(app, [*args, "--backend", "torch"])
    assert done.exit_code == 0, done.output
    embedding = json.loads(out.read_text())["detectors"]["embedding"]
    assert embedding["backend"] == "torch" and embedding["backend_reason"] == "backend = torch"
    bad = CliRunner().invoke(app, [*args, "--backend", "tensorrt"])
    assert bad.exit_code == 2 and "backend" in bad.output


def test_a_damaged_export_is_an_error_that_says_how_to_mend_it(tmp_path):
    from contrast_audit.cli import app

    first = store(tmp_path)
    model = encoders.onnx_dir(tmp_path, first.source.fingerprint()) / "model.onnx"
    model.write_bytes(b"not a model")
    embed._load_onnx.cache_clear()  # as a new process finds it
    data = tmp_path / "pairs.jsonl"
    data.write_text(json.dumps({"anchor": "a text never seen", "positive": "nor this one"}) + "\n", encoding="utf-8")
    done = CliRunner().invoke(app, ["scan", str(data), "--cache-dir", str(tmp_path), "-q"])
    assert done.exit_code == 2 and "cannot load the exported model" in done.output
    assert "--backend torch" in done.output


def test_a_store_told_onnx_by_another_machine_exports_the_model_where_it_runs(tmp_path):
    """A Ray worker on a node with a cache of its own runs the backend the driver chose: the export is
    made in that node's cache, and its vectors are the driver's."""
    driver = store(tmp_path / "driver")
    assert driver.info()["backend"] == "onnx"
    worker = EmbeddingStore(EmbeddingConfig(cache_dir=str(tmp_path / "node"), device="cpu"))
    worker.open()
    worker.backends = dict(driver.backends)  # decided on the driver, as ``embed.Shared`` carries it
    assert not (worker.onnx_dir(worker.source) / "model.onnx").exists()
    encoder = worker.model()
    assert encoder.name == "onnx" and (worker.onnx_dir(worker.source) / "model.onnx").is_file()
    texts = [r[0] for r in ROWS]
    assert np.array_equal(encoder.sentences(texts, ""), driver.model().sentences(texts, ""))
