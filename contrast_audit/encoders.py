"""The two ways a scan runs its embedding model, behind one interface.

- ``TorchEncoder``: the sentence-transformers model on torch (any model, any device, bf16).
- ``OnnxEncoder``: the same network exported once to ONNX (``torch.onnx.export``) and run with ONNX
  Runtime on the CPU, with the model's own ``tokenizer.json`` (the ``tokenizers`` library) and its
  pooling done here. A process that finds the export in the cache never imports torch or
  sentence-transformers (about 5 s of a scan on a 2-core machine), and ONNX Runtime's matrix kernels
  give a text the same vector whatever the size of its batch, so small encode calls need no fill.

Both give, for equal-length batches of texts, unit sentence vectors and raw token embeddings.
Vectors of the two differ by under 1e-6 (the export is checked against sentence-transformers on probe
texts before it is used) and are cached apart (``EmbeddingStore.vectors_id``).

Only plain pipelines are exported: a Transformer, then mean or CLS pooling that counts prompt tokens,
then optionally Normalize. Anything else (a Dense layer, other pooling, remote code) runs on torch.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from contrast_audit.errors import ModelError
from contrast_audit.io.atomic import remove_stale_temporaries

MIN_BATCH_TOKENS = 512  # every torch forward pass covers at least this many tokens (see ``embed.encode_batches``)
ONNX_LAYOUT = "onnx-v1"  # the cache's folder of exported models, and part of their vectors' cache key
EXPORT_TOLERANCE = 1e-4  # largest difference of a probe's unit vector between the export and torch
PROBE_TEXTS = (
    "A man is playing a flute.",
    "How can I improve my pronunciation in English?",
    "The committee, which met on 3 March 2019, approved the plan by 7 votes to 2 after a long debate.",
    "naïve café — 東京 🙂",
    "",
)
_POOLING = ("mean", "cls")


@dataclass(frozen=True)
class ModelTokenizer:
    """What the alignment needs of a model's tokenizer: token ids with the model's special tokens,
    truncated at ``max_length`` (``tokenizer(texts, truncation=True, max_length=...)``), the
    vocabulary size and the special token ids (weighted 0)."""

    encode: Callable[[list[str]], list[list[int]]]
    vocab_size: int
    special_ids: frozenset[int]
    max_length: int
    source: str  # "tokenizer.json" or "model"


_TOKENIZER_FILES = ("tokenizer.json", "sentence_bert_config.json", "tokenizer_config.json")


def file_tokenizer(directory: Path) -> ModelTokenizer | None:
    """The tokenizer of a sentence-transformers model directory read from its ``tokenizer.json`` with
    the ``tokenizers`` library, as the loaded model would tokenise: its ``max_seq_length``
    (``sentence_bert_config.json``), no padding, special tokens added. None when the directory lacks
    those files or declares what the file alone cannot reproduce (text lowercased by the model
    module, a ``do_lower_case`` that the tokenizer's normaliser does not carry); the caller then
    uses the loaded model's tokenizer. Read once per process while the files stay as they are."""
    stamps = []
    for name in _TOKENIZER_FILES:
        try:
            stat = (directory / name).stat()
            stamps.append((stat.st_ino, stat.st_mtime_ns, stat.st_size))
        except OSError:
            stamps.append(None)
    return _file_tokenizer(str(directory), tuple(stamps))


@functools.lru_cache(maxsize=8)
def _file_tokenizer(where: str, stamps: tuple) -> ModelTokenizer | None:
    directory = Path(where)
    path = directory / "tokenizer.json"
    config_path = directory / "sentence_bert_config.json"
    if not path.is_file() or not config_path.is_file():
        return None
    try:
        config = json.loads(config_path.read_text(encoding="utf-8"))
        spec = json.loads(path.read_text(encoding="utf-8"))
        tok_config_path = directory / "tokenizer_config.json"
        tok_config = json.loads(tok_config_path.read_text(encoding="utf-8")) if tok_config_path.is_file() else {}
    except (OSError, ValueError):
        return None
    max_length = config.get("max_seq_length")
    if not isinstance(max_length, int) or max_length <= 0 or config.get("do_lower_case"):
        return None
    normalizer = spec.get("normalizer") or {}
    lower = tok_config.get("do_lower_case")
    if lower is not None and normalizer.get("type") == "BertNormalizer" and normalizer.get("lowercase") != lower:
        return None
    from tokenizers import Tokenizer

    try:
        tokenizer = Tokenizer.from_file(str(path))
    except Exception:  # the library raises its own exception types for files it cannot read
        return None
    tokenizer.no_padding()
    tokenizer.enable_truncation(max_length)
    special = frozenset(int(i) for i, token in tokenizer.get_added_tokens_decoder().items() if token.special)

    def encode(texts: list[str]) -> list[list[int]]:
        return [e.ids for e in tokenizer.encode_batch(texts, add_special_tokens=True)]

    return ModelTokenizer(
        encode, tokenizer.get_vocab_size(with_added_tokens=True), special, max_length, "tokenizer.json"
    )


def model_tokenizer(st: Any) -> ModelTokenizer:
    """The tokenizer of a loaded sentence-transformers model."""
    tokenizer, max_length = st.tokenizer, st.max_seq_length

    def encode(texts: list[str]) -> list[list[int]]:
        return tokenizer(texts, truncation=True, max_length=max_length)["input_ids"]

    return ModelTokenizer(encode, len(tokenizer), frozenset(tokenizer.all_special_ids), max_length, "model")


def unit(vectors: np.ndarray) -> np.ndarray:
    """Rows scaled to length 1 (a zero row stays zero)."""
    vectors = np.asarray(vectors, dtype=np.float32)
    return vectors / np.maximum(np.linalg.norm(vectors, axis=-1, keepdims=True), 1e-12)


class TorchEncoder:
    """A loaded sentence-transformers model. Small matrix products round differently from large ones
    in torch's CPU kernels, so every forward pass covers ``min_batch_tokens`` tokens."""

    name = "torch"
    min_batch_tokens = MIN_BATCH_TOKENS

    def __init__(self, st: Any, precision: str = "fp32") -> None:
        self.st = st
        self.precision = precision

    def token_ids(self, texts: list[str]) -> list[list[int]]:
        return self.st.tokenizer(texts, truncation=True, max_length=self.st.max_seq_length, add_special_tokens=True)[
            "input_ids"
        ]

    def tokenizer(self) -> ModelTokenizer:
        return model_tokenizer(self.st)

    def arithmetic(self) -> contextlib.AbstractContextManager:
        """fp32 as it is; torch autocast to bfloat16 for bf16 (on CPUs with bfloat16 instructions
        1.7–2.4× faster, vectors within 1e-4 cosine: docs/benchmarks.md). Entered once per call:
        autocast casts the weights afresh on every entry."""
        if self.precision == "fp32":
            return contextlib.nullcontext()
        import torch

        return torch.autocast(device_type=self.st.device.type, dtype=torch.bfloat16)

    def set_threads(self, threads: int) -> None:
        import torch

        torch.set_num_threads(threads)

    def sentences(self, texts: list[str], prompt: str) -> np.ndarray:
        return self.st.encode(
            texts,
            prompt=prompt or None,
            batch_size=len(texts),
            show_progress_bar=False,
            normalize_embeddings=True,
            convert_to_numpy=True,
        )

    def tokens(self, texts: list[str]) -> list[np.ndarray]:
        out = self.st.encode(texts, batch_size=len(texts), show_progress_bar=False, output_value="token_embeddings")
        return [m.float().cpu().numpy() for m in out]


@dataclass(frozen=True)
class OnnxSpec:
    """What the exported network leaves to us: the pooling of its token outputs."""

    pooling: str  # "mean" or "cls"
    normalize: bool

    @classmethod
    def read(cls, path: Path) -> OnnxSpec | None:
        try:
            raw = json.loads(path.read_text(encoding="utf-8"))
            spec = cls(str(raw["pooling"]), bool(raw["normalize"]))
        except (OSError, ValueError, KeyError, TypeError):
            return None
        return spec if spec.pooling in _POOLING else None


class OnnxEncoder:
    """The exported network under ONNX Runtime (CPU), tokenised from ``tokenizer.json``."""

    name = "onnx"
    min_batch_tokens = 1  # a text's vector does not depend on its batch (tests/test_encoders.py)

    def __init__(self, onnx_file: Path, spec: OnnxSpec, tokenizer: ModelTokenizer, threads: int | None = None) -> None:
        self.file, self.spec, self._tokenizer, self.threads = onnx_file, spec, tokenizer, threads
        self._session: Any = None

    def session(self) -> Any:
        if self._session is None:
            import onnxruntime as ort

            options = ort.SessionOptions()
            options.log_severity_level = 3  # errors only: its warnings would land on the scan's stderr
            # Idle threads sleep instead of spinning: a scan runs its own work between short calls
            # (measured 2-4% faster cold scans on 2 cores).
            options.add_session_config_entry("session.intra_op.allow_spinning", "0")
            if self.threads:
                options.intra_op_num_threads = self.threads
            try:
                self._session = ort.InferenceSession(str(self.file), options, providers=["CPUExecutionProvider"])
            except Exception as exc:  # the runtime raises its own types for a file it cannot read
                raise ModelError(
                    f"{self.file}: ONNX Runtime cannot load the exported model ({type(exc).__name__})",
                    fix=f"delete {self.file.parent} (the next scan exports the model again), or pass --backend torch",
                ) from exc
        return self._session

    def token_ids(self, texts: list[str]) -> list[list[int]]:
        return self._tokenizer.encode(texts)

    def tokenizer(self) -> ModelTokenizer:
        return self._tokenizer

    def arithmetic(self) -> contextlib.AbstractContextManager:
        return contextlib.nullcontext()

    def set_threads(self, threads: int) -> None:
        self.threads, self._session = threads, None

    def _hidden(self, texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
        """(last hidden states, attention mask) of ``texts``, padded to the longest of them."""
        ids = self.token_ids(texts)
        width = max((len(x) for x in ids), default=0)
        input_ids = np.zeros((len(ids), width), dtype=np.int64)
        mask = np.zeros((len(ids), width), dtype=np.int64)
        for i, x in enumerate(ids):
            input_ids[i, : len(x)] = x
            mask[i, : len(x)] = 1
        (hidden,) = self.session().run(None, {"input_ids": input_ids, "attention_mask": mask})
        return hidden, mask

    def sentences(self, texts: list[str], prompt: str) -> np.ndarray:
        hidden, mask = self._hidden([prompt + t for t in texts])
        if self.spec.pooling == "cls":
            pooled = hidden[:, 0]
        else:
            weights = mask[:, :, None].astype(np.float32)
            pooled = (hidden * weights).sum(axis=1) / np.maximum(weights.sum(axis=1), 1e-9)
        return unit(pooled)  # every score is a cosine: normalised whether or not the model's last module does

    def tokens(self, texts: list[str]) -> list[np.ndarray]:
        hidden, mask = self._hidden(texts)
        return [h[: int(m.sum())] for h, m in zip(hidden, mask, strict=True)]


Encoder = TorchEncoder | OnnxEncoder

IDF_SAMPLE = 50_000  # texts the alignment guard's idf weights are counted on (evenly spaced)


def idf_sample(n: int) -> np.ndarray:
    """Positions of the texts, of ``n``, that idf weights are counted on: all, or ``IDF_SAMPLE`` evenly spaced."""
    return np.unique(np.linspace(0, n - 1, min(n, IDF_SAMPLE)).astype(np.int64)) if n else np.zeros(0, np.int64)


class DocumentFrequency:
    """How many texts of the idf sample of ``n`` texts hold each token id, counted from the token ids
    (without special tokens) of a pass that tokenises every text anyway, such as the first stage's, so
    the alignment guard need not tokenise them again. Equal to counting ``tokenizer``'s own ids: the
    content is cut where ``tokenizer`` cuts it, and special tokens weigh 0 there."""

    def __init__(self, n: int, tokenizer: ModelTokenizer) -> None:
        self.n = n
        self.positions = idf_sample(n)
        specials = len(tokenizer.encode([""])[0])  # what the tokenizer adds to every text
        self.limit = max(tokenizer.max_length - specials, 0)
        self.counts = np.zeros(tokenizer.vocab_size, dtype=np.int64)

    def add(self, start: int, ids: list[list[int]]) -> None:
        """The token ids of texts ``start``, ``start + 1``, … (every text, in order, once)."""
        lo, hi = np.searchsorted(self.positions, [start, start + len(ids)])
        held = [np.unique(np.asarray(ids[p - start][: self.limit], dtype=np.int64)) for p in self.positions[lo:hi]]
        if held:
            flat = np.concatenate(held)
            if flat.size and flat.max() >= self.counts.shape[0]:
                self.counts = np.pad(self.counts, (0, int(flat.max()) + 1 - self.counts.shape[0]))
            self.counts += np.bincount(flat, minlength=self.counts.shape[0])


def accelerator_visible() -> bool:
    """Whether sentence-transformers' automatic device could be a GPU here (an NVIDIA or AMD device
    node; on macOS and Windows, where no device node tells, always), judged without importing torch."""
    import sys

    dev = Path("/dev")
    return sys.platform in ("darwin", "win32") or any(dev.glob("nvidia[0-9]*")) or (dev / "kfd").exists()


def onnx_runtime_installed() -> bool:
    from importlib.util import find_spec

    return find_spec("onnxruntime") is not None


def onnx_dir(cache_root: Path, fingerprint: str) -> Path:
    """Where the export of the model of ``fingerprint`` lives in a cache."""
    return cache_root / ONNX_LAYOUT / fingerprint[:16]


def load_onnx(directory: Path, model_dir: Path) -> OnnxEncoder | None:
    """The export in ``directory`` (``model.onnx`` and ``spec.json``), or None when it is not there whole
    or the model's tokenizer cannot be read from its files."""
    spec = OnnxSpec.read(directory / "spec.json")
    tokenizer = file_tokenizer(model_dir)
    if spec is None or tokenizer is None or not (directory / "model.onnx").is_file():
        return None
    return OnnxEncoder(directory / "model.onnx", spec, tokenizer)


def exportable(st: Any) -> tuple[OnnxSpec | None, str]:
    """(the pooling the export leaves to us, "") for a plain pipeline; (None, why not) otherwise."""
    modules = [type(m).__name__ for m in st]
    if not modules or modules[0] != "Transformer" or len(modules) < 2 or modules[1] != "Pooling":
        return None, f"its modules are {' → '.join(modules)}, not Transformer → Pooling"
    if any(name != "Normalize" for name in modules[2:]):
        return None, f"its modules are {' → '.join(modules)}, not Transformer → Pooling → Normalize"
    config = st[1].get_config_dict()
    pooling = config.get("pooling_mode")
    if pooling is None:  # older sentence-transformers describe pooling by flags
        flags = [k for k in ("cls_token", "mean_tokens") if config.get(f"pooling_mode_{k}")]
        others = [k for k, v in config.items() if k.startswith("pooling_mode_") and v and k[13:] not in flags]
        pooling = {"cls_token": "cls", "mean_tokens": "mean"}.get(flags[0]) if len(flags) == 1 and not others else None
    if pooling not in _POOLING:
        return None, f"its pooling is {pooling or 'a combination of modes'}, not mean or cls"
    if config.get("include_prompt") is False:
        return None, "its pooling leaves prompt tokens out"
    return OnnxSpec(str(pooling), len(modules) > 2), ""


def export(st: Any, model_dir: Path, directory: Path) -> tuple[OnnxEncoder | None, str]:
    """Export the Transformer of ``st`` to ``directory`` and check it against ``st`` on ``PROBE_TEXTS``;
    (the encoder, "") or (None, why not). Nothing is left in ``directory`` unless it passed."""
    spec, why = exportable(st)
    if spec is None:
        return None, why
    tokenizer = file_tokenizer(model_dir)
    if tokenizer is None:
        return None, "its tokenizer.json cannot reproduce the model's tokenisation"
    try:
        import onnx  # noqa: F401  (torch's exporter needs it)
        import torch
    except ImportError as exc:
        return None, f"{exc.name} is not installed"

    network = getattr(st[0], "auto_model", None)
    if network is None:
        return None, "its Transformer module holds no Hugging Face model (auto_model)"

    class Hidden(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.network = network

        def forward(self, input_ids: Any, attention_mask: Any) -> Any:
            return self.network(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state

    directory.mkdir(parents=True, exist_ok=True)
    stem = f"{os.getpid()}.{os.urandom(4).hex()}.tmp"  # the io.atomic naming: a killed export's are removed
    for name in ("model.onnx", "spec.json"):
        remove_stale_temporaries(directory / name)
    onnx_tmp, spec_tmp = directory / f".model.onnx.{stem}", directory / f".spec.json.{stem}"
    # Attention written out (eager) exports to a graph ONNX Runtime runs 1.4x faster on 256-token texts
    # than torch's fused kernel exports to; the loaded model gets its own back afterwards.
    attention = getattr(network.config, "_attn_implementation", None)
    switch = attention not in (None, "eager") and hasattr(network, "set_attn_implementation")
    try:
        if switch:
            network.set_attn_implementation("eager")
        sample = torch.tensor([tokenizer.encode(["a short text to trace"])[0]] * 2)
        dynamic = {0: "batch", 1: "tokens"}
        with warnings.catch_warnings(), torch.no_grad():
            warnings.simplefilter("ignore")
            torch.onnx.export(
                Hidden().eval(),
                (sample, torch.ones_like(sample)),
                str(onnx_tmp),
                input_names=["input_ids", "attention_mask"],
                output_names=["hidden"],
                dynamic_axes={"input_ids": dynamic, "attention_mask": dynamic, "hidden": dynamic},
                opset_version=17,
                dynamo=False,
            )
        if switch:
            network.set_attn_implementation(attention)
            switch = False
        encoder = OnnxEncoder(onnx_tmp, spec, tokenizer)
        texts = list(PROBE_TEXTS)
        ours = np.concatenate([encoder.sentences([t], "") for t in texts])
        theirs = st.encode(texts, batch_size=1, normalize_embeddings=True, convert_to_numpy=True)
        worst = float(np.abs(ours - theirs).max())
        if not worst <= EXPORT_TOLERANCE:
            return None, f"the export's vectors differ from the model's by {worst:.1e}"
        spec_tmp.write_text(json.dumps({"pooling": spec.pooling, "normalize": spec.normalize}), encoding="utf-8")
        os.replace(onnx_tmp, directory / "model.onnx")
        os.replace(spec_tmp, directory / "spec.json")  # last: the spec says the export is whole
    except Exception as exc:  # the exporter and the runtime raise many types for networks they cannot take
        return (
            None,
            f"it could not be exported ({type(exc).__name__}: {str(exc).splitlines()[0][:200] if str(exc) else ''})",
        )
    finally:
        if switch:
            network.set_attn_implementation(attention)
        for tmp in (onnx_tmp, spec_tmp):
            tmp.unlink(missing_ok=True)
    return load_onnx(directory, model_dir), ""
