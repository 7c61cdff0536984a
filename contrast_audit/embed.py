"""Text embeddings: each distinct text embedded once per role prompt, batched, with an on-disk
cache keyed by model fingerprint + prompt + text hash, so a rerun embeds only texts it has not seen.

Vectors are L2-normalised; every similarity is a cosine (the dot product of unit vectors), the
scoring contract of sentence-transformers' MultipleNegativesRankingLoss with ``cos_sim``.
"""

from __future__ import annotations

import functools
import hashlib
import os
import tempfile
import time
import zipfile
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from contrast_audit import encoders
from contrast_audit import model as model_io
from contrast_audit.config import EmbeddingConfig
from contrast_audit.corpus import Corpus, alike_rows
from contrast_audit.encoders import Encoder, OnnxEncoder, TorchEncoder
from contrast_audit.errors import ConfigError, ModelError
from contrast_audit.io.atomic import remove_stale_temporaries

FLUSH_TEXTS = 4096  # new vectors are written to the cache in shards of this many texts ...
FLUSH_SECONDS = 30.0  # ... or after this long, so an interrupted run loses at most that much work
VECTOR_DTYPE = np.dtype(np.float16)  # how vectors are stored, and the precision every score uses
CACHE_LAYOUT = "embeddings-v2"  # float16 shards with checksums
PAIR_BLOCK = 65536  # pairs per gather when computing row-wise cosines


def default_cache_dir() -> Path:
    env = os.environ.get("CONTRAST_AUDIT_CACHE_DIR")
    if env:
        return Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "contrast-audit"


@functools.lru_cache(maxsize=4)
def _load_onnx(directory: str, model_dir: str) -> OnnxEncoder:
    encoder = encoders.load_onnx(Path(directory), Path(model_dir))
    if encoder is None:
        raise ConfigError(f"the exported model in {directory} is gone", fix="run the command again")
    return encoder


@functools.lru_cache(maxsize=4)
def _load_model(path: str, device: str | None, model_id: str, revision: str | None, digests: tuple):
    source = model_io.ModelSource(model_id, path, revision, dict(digests))
    return model_io.load(source, device=device)


DEVICE_TYPES = ("cpu", "cuda", "mps")


def check_device(device: str | None) -> None:
    """``--device``: cpu, cuda, cuda:N or mps, and present on this machine; exit 2 otherwise."""
    if device is None or device == "auto":
        return
    kind, _, number = device.partition(":")
    # A GPU index is a short ASCII number: "²" passes isdigit() and int() refuses it.
    index_ok = number.isascii() and number.isdecimal() and len(number) <= 9
    if kind not in DEVICE_TYPES or (number and not index_ok) or (number and kind != "cuda"):
        raise ConfigError(
            f"--device {device!r} is not a device", fix="pass cpu, cuda, cuda:N (N a GPU index) or mps, or leave it out"
        )
    if kind == "cpu":
        return
    import torch

    if kind == "cuda":
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if count == 0:
            raise ConfigError(f"--device {device}: no CUDA GPU is available", fix="pass --device cpu or leave it out")
        if number and int(number) >= count:
            raise ConfigError(
                f"--device {device}: this machine has {count} CUDA GPU{'s' if count != 1 else ''} (cuda:0..cuda:{count - 1})",
                fix="pass an index that exists",
            )
    elif kind == "mps" and not torch.backends.mps.is_available():
        raise ConfigError(f"--device {device}: Apple MPS is not available", fix="pass --device cpu or leave it out")


def text_keys(texts: list[str], prompt: str) -> np.ndarray:
    """16-byte SHA-256 digests of ``prompt + text``: the cache key of each text."""
    return np.array([hashlib.sha256((prompt + t).encode("utf-8")).digest()[:16] for t in texts], dtype="S16")


class ShardCache:
    """Shards of arrays (``keys`` first) in one directory.

    Each shard is an uncompressed ``.npz`` read with ``allow_pickle=False`` (no code-executing
    format is ever read), written to a temporary file and renamed, so two processes sharing the
    directory never see half a shard. Every array is stored with a SHA-256 of its dtype, shape and
    bytes (``sum_<name>``); a shard that is truncated, unreadable, of the wrong dtype or shape, or
    whose bytes changed is reported once (``problems``), deleted, and its texts computed again. A
    shard without checksums (an older format) is ignored. Temporaries left by a killed process are
    removed by the next writer.
    """

    def __init__(self, directory: Path, validate: Callable[[dict[str, np.ndarray]], bool] | None = None) -> None:
        self.dir = directory
        self.validate = validate
        self.problems: list[str] = []

    def paths(self) -> list[Path]:
        if not self.dir.is_dir():
            return []
        remove_stale_temporaries(self.dir / "shard")  # left by killed writers
        return sorted(self.dir.glob("shard-*.npz"))

    def load(self, path: Path, fields: tuple[str, ...]) -> dict[str, np.ndarray] | None:
        """One shard's ``fields``, verified; None when the shard is damaged, legacy or gone."""
        try:
            with np.load(path, allow_pickle=False) as data:
                names = set(data.files)
                if any(f"sum_{f}" not in names for f in fields):
                    if all(f in names for f in fields):
                        return None  # an older format without checksums: ignored, never trusted
                    raise ValueError(f"lacks {', '.join(f for f in fields if f not in names)}")
                out: dict[str, np.ndarray] = {}
                for f in fields:
                    array = data[f]
                    if array.dtype.hasobject or _digest(array) != data[f"sum_{f}"].tobytes():
                        raise ValueError(f"checksum of '{f}' does not match")
                    out[f] = array
        except FileNotFoundError:
            return None  # removed by another process since it was listed
        except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile) as exc:
            self._damaged(path, str(exc) or type(exc).__name__)
            return None
        if self.validate is not None and not self.validate(out):
            self._damaged(path, "arrays of the wrong dtype or shape")
            return None
        return out

    def _damaged(self, path: Path, reason: str) -> None:
        self.problems.append(f"cache shard {path} is damaged ({reason}): removed, its texts are computed again")
        try:
            path.unlink()
        except OSError:
            pass

    def read(self, fields: tuple[str, ...]) -> dict[str, np.ndarray] | None:
        """Every shard's ``fields``, concatenated in shard-name order; None when nothing is stored."""
        parts = [(path, part) for path in self.paths() if (part := self.load(path, fields)) is not None]
        if not parts:
            return None
        # Shards of one directory share their arrays' trailing shape; the one most rows have wins.
        shapes: dict[tuple, int] = {}
        for _, part in parts:
            shape = tuple(part[f].shape[1:] for f in fields)
            shapes[shape] = shapes.get(shape, 0) + len(part[fields[0]])
        usual = max(shapes, key=lambda k: shapes[k])
        loaded = []
        for path, part in parts:
            if tuple(part[f].shape[1:] for f in fields) == usual:
                loaded.append(part)
            else:
                self._damaged(path, "arrays shaped unlike the other shards'")
        return {f: np.concatenate([part[f] for part in loaded]) for f in fields}

    def write(self, keys: np.ndarray, **arrays: np.ndarray) -> None:
        if keys.shape[0] == 0:
            return
        self.dir.mkdir(parents=True, exist_ok=True)
        remove_stale_temporaries(self.dir / "shard")
        name = hashlib.sha256(keys.tobytes()).hexdigest()[:16]
        payload = {"keys": keys, **arrays}
        sums = {f"sum_{k}": np.frombuffer(_digest(v), dtype=np.uint8) for k, v in payload.items()}
        fd, tmp = tempfile.mkstemp(prefix=f".shard.{os.getpid()}.", suffix=".tmp", dir=self.dir)
        try:
            with os.fdopen(fd, "wb") as handle:
                np.savez(handle, **payload, **sums)
                handle.flush()
                os.fsync(handle.fileno())
            os.replace(tmp, self.dir / f"shard-{name}.npz")
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise


def _digest(array: np.ndarray) -> bytes:
    """SHA-256 of an array's dtype, shape and bytes, hashed in place (no copy of the bytes)."""
    digest = hashlib.sha256(f"{array.dtype.str}{array.shape}".encode())
    data = np.ascontiguousarray(array)
    if data.size:
        digest.update(data.reshape(-1).view(np.uint8))
    return digest.digest()


def _equal_length_batches(
    encoder: Encoder, texts: list[str], prompt: str, batch_size: int
) -> list[tuple[np.ndarray, int]]:
    """(positions, token length) of ``texts`` in batches of equal token length (prompt included,
    truncated as the model truncates), each of at most ``batch_size`` texts or, for texts so short
    that such a batch covers fewer than the encoder's ``min_batch_tokens``, of as many as reach it."""
    if not texts:
        return []
    ids = encoder.token_ids([prompt + t for t in texts])
    lengths = np.fromiter((len(x) for x in ids), dtype=np.int64, count=len(texts))
    order = np.argsort(lengths, kind="stable")
    bounds = np.flatnonzero(np.diff(lengths[order])) + 1
    batches: list[tuple[np.ndarray, int]] = []
    for group in np.split(order, bounds):
        tokens = max(int(lengths[group[0]]), 1)
        size = max(batch_size, -(-encoder.min_batch_tokens // tokens))
        parts = -(-group.shape[0] // size)  # ceil: balanced parts
        batches.extend((part, tokens) for part in np.array_split(group, parts))
    return batches


def encode_batches(
    encoder: Encoder, texts: list[str], prompt: str, batch_size: int, tokens: bool = False
) -> Iterator[tuple[np.ndarray, Any]]:
    """(positions in ``texts``, unit sentence vectors, or with ``tokens`` the token embeddings of each
    text without the prompt) batch by batch, of texts of equal token length (no padding), every forward
    pass over at least the encoder's ``min_batch_tokens`` (a short batch is filled up with repeats of its
    own texts).

    torch's CPU matrix kernels are chosen by the size of the product, and small ones (measured: under
    about 220 rows of tokens on an AVX-512 Xeon) round differently from large ones; with both rules a
    text's vector does not depend on which other texts share its batch or how many there are, so a
    cache filled piecemeal holds the vectors one run would compute. ONNX Runtime's need no fill.
    """
    with encoder.arithmetic():
        for part, length in _equal_length_batches(encoder, texts, prompt, batch_size):
            chunk = [texts[i] for i in part]
            need = -(-encoder.min_batch_tokens // length)
            if len(chunk) < need:
                chunk = (chunk * -(-need // len(chunk)))[:need]
            out = encoder.tokens(chunk) if tokens else encoder.sentences(chunk, prompt)
            yield part, out[: len(part)]


def find_keys(stored: np.ndarray, keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(found mask over ``keys``, index into ``stored`` of each found key, in order).

    16-byte keys are searched by their first 8 bytes as integers (sorting and searching byte strings
    is several times slower), then compared whole; the few keys whose first 8 bytes another stored
    key shares are searched again as byte strings."""
    if stored.shape[0] == 0 or keys.shape[0] == 0:
        return np.zeros(keys.shape[0], dtype=bool), np.zeros(0, dtype=np.int64)
    head = lambda k: np.frombuffer(np.ascontiguousarray(k).tobytes(), dtype=">u8")[:: k.dtype.itemsize // 8]  # noqa: E731
    if stored.dtype != np.dtype("S16") or keys.dtype != np.dtype("S16"):
        return _find_bytes(stored, keys)
    stored_head, key_head = head(stored), head(keys)
    order = np.argsort(stored_head, kind="stable")
    sorted_head = stored_head[order]
    pos = np.minimum(np.searchsorted(sorted_head, key_head), sorted_head.shape[0] - 1)
    at = order[pos]
    found = stored[at] == keys
    # A key whose first 8 bytes match a stored key's but not the rest may match another stored key.
    shared = np.flatnonzero(~found & (sorted_head[pos] == key_head))
    if shared.shape[0]:
        again, where = _find_bytes(stored, keys[shared])
        found[shared[again]] = True
        at[shared[again]] = where
    return found, at[found]


def _find_bytes(stored: np.ndarray, keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    order = np.argsort(stored, kind="stable")
    sorted_keys = stored[order]
    pos = np.minimum(np.searchsorted(sorted_keys, keys), sorted_keys.shape[0] - 1)
    found = sorted_keys[pos] == keys
    return found, order[pos[found]]


def _vectors_ok(part: dict[str, np.ndarray]) -> bool:
    keys, vectors = part.get("keys"), part.get("vectors")
    if keys is None or vectors is None:
        return True
    return (
        keys.dtype == np.dtype("S16")
        and keys.ndim == 1
        and vectors.dtype == VECTOR_DTYPE
        and vectors.ndim == 2
        and vectors.shape[0] == keys.shape[0]
    )


def quantise(vectors: np.ndarray) -> np.ndarray:
    """Vectors as the cache stores them (float16)."""
    return np.asarray(vectors, dtype=np.float32).astype(VECTOR_DTYPE)


def dequantise(stored: np.ndarray) -> np.ndarray:
    """Unit float32 vectors from stored ones: the only form scores are computed from, whether a
    vector was just encoded or read from the cache, so cold and warm runs score alike."""
    vectors = stored.astype(np.float32)
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    return vectors / np.maximum(norms, 1e-12)


class EmbeddingCache(ShardCache):
    """Sentence vectors in one directory per model fingerprint and prompt."""

    def __init__(self, root: Path, fingerprint: str, prompt: str) -> None:
        prompt_id = hashlib.sha256(prompt.encode("utf-8")).hexdigest()[:12]
        super().__init__(root / CACHE_LAYOUT / f"{fingerprint[:16]}-{prompt_id}", validate=_vectors_ok)

    def lookup(self, keys: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
        """(found mask, stored vectors for found keys in order) — vectors is None when nothing is cached.

        Only the keys of every shard are read (16 bytes a text); vectors are read from the shards
        that hold a wanted key, so vectors cached for other data cost nothing. Where the shards
        holding wanted keys differ in width, the width most of those keys have wins and the other
        shards are removed as damaged."""
        paths = self.paths()
        stored, shard, row = [], [], []
        for number, path in enumerate(paths):
            part = self.load(path, ("keys",))
            if part is None or part["keys"].dtype != np.dtype("S16") or part["keys"].ndim != 1:
                continue
            stored.append(part["keys"])
            shard.append(np.full(part["keys"].shape[0], number, dtype=np.int64))
            row.append(np.arange(part["keys"].shape[0], dtype=np.int64))
        found = np.zeros(keys.shape[0], dtype=bool)
        if not stored:
            return found, None
        hit, index = find_keys(np.concatenate(stored), keys)
        slots = np.flatnonzero(hit)
        hit_shard, hit_row = np.concatenate(shard)[index], np.concatenate(row)[index]
        parts: dict[int, np.ndarray] = {}
        for number in np.unique(hit_shard).tolist():
            part = self.load(paths[number], ("keys", "vectors"))
            if part is not None:
                parts[number] = part["vectors"]
        hits_per_shard = np.bincount(hit_shard, minlength=len(paths))
        widths: dict[int, int] = {}
        for number, vectors in parts.items():
            widths[vectors.shape[1]] = widths.get(vectors.shape[1], 0) + int(hits_per_shard[number])
        if not widths:
            return found, None
        usual = max(widths, key=lambda w: widths[w])
        out = np.empty((slots.shape[0], usual), dtype=VECTOR_DTYPE)
        kept = np.zeros(slots.shape[0], dtype=bool)
        by_shard = np.argsort(hit_shard, kind="stable")  # the hits of each shard, found once
        bounds = np.searchsorted(hit_shard[by_shard], np.arange(len(paths) + 1))
        for number, vectors in parts.items():
            if vectors.shape[1] != usual:
                self._damaged(paths[number], "arrays shaped unlike the other shards'")
                continue
            sel = by_shard[bounds[number] : bounds[number + 1]]
            out[sel] = vectors[hit_row[sel]]
            kept[sel] = True
        found[slots[kept]] = True
        return found, out if kept.all() else out[kept]  # no second copy of a large matrix when all are kept

    def store(self, keys: np.ndarray, vectors: np.ndarray) -> None:
        self.write(keys, vectors=quantise(vectors))


def calibration_sample(
    anchor: np.ndarray, positive: np.ndarray, keys_of: Callable[[np.ndarray], np.ndarray]
) -> np.ndarray:
    """Rows a calibration reads: every row, or of more than ``CALIBRATION_ROWS`` those whose texts' cache
    keys (``keys_of(text ids)``) hash smallest (``first_stage.sample_rows``): the same rows in memory and
    streamed."""
    from contrast_audit import first_stage as fs

    if anchor.shape[0] <= CALIBRATION_ROWS:
        return np.arange(anchor.shape[0])
    return fs.sample_rows(keys_of(anchor), keys_of(positive), CALIBRATION_ROWS)


@dataclass
class FirstStage:
    """A first stage fitted on its sample (``EmbeddingStore.fit_first_stage``): the static model, its map,
    the sample's rows, their distinct text ids and those texts' full vectors."""

    static: Any
    map: Any
    rows: np.ndarray
    sample: np.ndarray
    vectors: np.ndarray

    def select(self, mapped: np.ndarray, slots: np.ndarray, alike: np.ndarray, batches: Any) -> np.ndarray:
        """Rows (of ``slots``: rows × text ids) the full model embeds besides the sample's: those near another
        row of a batch of ``batches`` by their ``mapped`` vectors, and those whose own hard negative is near."""
        from contrast_audit import first_stage as fs

        rows = fs.select_rows(mapped, self.map.bar, slots, alike, batches.rows, batches.offsets)
        rows |= fs.own_negatives_near(mapped, self.map.bar, slots)  # mislabelled negatives, in every row
        return rows

    def info(self, rows: np.ndarray, known: np.ndarray) -> dict[str, Any]:
        return {
            "used": True,
            "bar": self.map.bar,
            **self.map.info,
            "sample_rows": int(self.rows.shape[0]),
            "rows": int(rows.sum()),
            "of_rows": int(rows.shape[0]),
            "texts": int(known.sum()),
            "of_texts": int(known.shape[0]),
        }


CALIBRATION_ROWS = 20_000  # rows whose own anchor-positive cosines calibrate (a sample of larger data)


@dataclass
class Shared:
    """What a streamed audit decides once over every text, for the store of each run of batches
    (``engine.stream``): the texts the full model embeds (``known``, per global text id; None: all),
    the idf counts, the model and backend, and the account the report gives; the stores of the runs
    add their counts to ``stats`` and their cache problems to ``warnings``."""

    source: model_io.ModelSource
    backends: dict[str, tuple[str, str]]
    writable: bool
    known: np.ndarray | None
    idf_counts: tuple[int, np.ndarray] | None
    first_stage_info: dict[str, Any]
    stats: dict[str, int] = field(default_factory=lambda: {"embedded": 0, "cached": 0})
    warnings: list[str] = field(default_factory=list)
    link_bar: float | None = None  # the linked rule's bar, from the rows ``calibration_rows`` names
    token_stats: dict[str, int] = field(default_factory=dict)  # the alignment guard's, every run's
    idf_used: bool = False  # whether a run's alignment guard read the idf weights (the report counts them then)

    def add_run(self, stores: Iterable[EmbeddingStore], token_stores: Iterable[Any] = ()) -> None:
        """Count a run's stores (and the alignment guard's token stores) in."""
        for store in stores:
            _add_counts(self.stats, store.stats)
            self._warn(getattr(store, "warnings", []))
        for tokens in token_stores:
            _add_counts(self.token_stats, tokens.stats)
            self.idf_used = self.idf_used or tokens.idf is not None

    def fresh(self) -> Shared:
        """The same decisions with nothing counted: a run judged in another process counts into its own
        copy, whose ``account`` the driver adds in (``add_account``)."""
        info = {k: v for k, v in self.first_stage_info.items() if k != "texts_on_demand"}
        return replace(
            self, stats={"embedded": 0, "cached": 0}, warnings=[], token_stats={}, idf_used=False, first_stage_info=info
        )

    def account(self) -> dict[str, Any]:
        """What the runs counted, as plain data (JSON)."""
        return {
            "stats": self.stats,
            "token_stats": self.token_stats,
            "warnings": self.warnings,
            "idf_used": self.idf_used,
            "texts_on_demand": self.first_stage_info.get("texts_on_demand", 0),  # ``EmbeddingStore.ensure``'s
        }

    def add_account(self, account: dict[str, Any]) -> None:
        """Count in another copy's ``account``."""
        _add_counts(self.stats, account["stats"])
        _add_counts(self.token_stats, account["token_stats"])
        self._warn(account["warnings"])
        self.idf_used = self.idf_used or account["idf_used"]
        if account["texts_on_demand"]:
            _add_counts(self.first_stage_info, {"texts_on_demand": account["texts_on_demand"]})

    def _warn(self, warnings: Iterable[str]) -> None:
        self.warnings += [w for w in warnings if w not in self.warnings]


def _add_counts(into: dict[str, Any], counts: dict[str, int]) -> None:
    for key, value in counts.items():
        into[key] = into.get(key, 0) + value


@dataclass
class EmbeddingStore:
    """Unit vectors per text id: ``query`` for texts used as anchors, ``doc`` for positives and
    hard negatives (the same matrix when the two prompts are equal)."""

    cfg: EmbeddingConfig
    progress: Callable[[str, int], Callable[[int], None]] | None = None
    query: np.ndarray | None = None
    doc: np.ndarray | None = None
    stats: dict[str, Any] = field(default_factory=dict)
    memo: dict[Any, np.ndarray] = field(default_factory=dict)  # per-row scores, computed once
    # Computes the vectors the cache lacks in place of this process (``engine.on_ray.embedder``): called
    # as ``encoder(store, texts, keys, prompt, source, cache)``, it returns their stored form, in order.
    encoder: Callable[..., np.ndarray] | None = None
    # The global batches of the plan the texts are judged in: the first stage selects the rows the full
    # model embeds for them (``contrast_audit.first_stage``). None: every text is embedded.
    batches: Any = None
    # Per text id: compared by the full model, as the first stage selected (None: every text). Fixed once
    # prepared, so what is compared does not depend on the order batches are judged in.
    known: np.ndarray | None = None
    embedded: np.ndarray | None = None  # per text id: has its full vector (``known``, and ``ensure``'s)
    sample_rows: np.ndarray | None = None  # the first stage's sample of rows (None: no first stage)
    backends: dict[str, tuple[str, str]] = field(default_factory=dict)  # model path → (backend, why)
    # The idf sample's token counts, from the first stage's tokenising of every text (None: not counted).
    document_frequency: encoders.DocumentFrequency | None = None
    first_stage_info: dict[str, Any] = field(default_factory=dict)
    # A run of a streamed audit: what was decided over every text, and the run's text ids in it.
    shared: Shared | None = None
    global_ids: np.ndarray | None = None

    def prepare(self, corpus: Corpus) -> None:
        if self.query is not None:
            return
        self.warnings: list[str] = []
        self.stats = {"embedded": 0, "cached": 0}
        if self.shared is not None:
            self._prepare_run(corpus)
            return
        self.open()
        source = self.source
        texts = corpus.texts.get_column("text").to_list()
        if self.cfg.query_prompt == self.cfg.doc_prompt:
            vectors = self._first_stage(corpus, texts, source)
            if vectors is None:
                vectors = self._embed(texts, np.ones(len(texts), dtype=bool), self.cfg.query_prompt, source)
            self.query = self.doc = vectors
        else:
            self.first_stage_info = {"used": False, "reason": "the anchor and document prompts differ"}
            self._embed_roles(corpus, texts, source)

    def open(self) -> None:
        """Check the device and the cache directory, and find the model (exit 2 where they are wrong)."""
        self.warnings = getattr(self, "warnings", [])
        self.stats = self.stats or {"embedded": 0, "cached": 0}
        check_device(self.cfg.device)  # before the cache: a warm cache must not hide a bad --device
        self.writable = self._check_cache_dir() if self.cfg.use_cache else False
        self.source = model_io.resolve(self.cfg.model)

    def _embed_roles(self, corpus: Corpus, texts: list[str], source: model_io.ModelSource) -> None:
        """Anchors with the query prompt, positives and hard negatives with the document prompt."""
        n = len(texts)
        is_query = np.zeros(n, dtype=bool)
        is_query[corpus.anchor] = True
        is_doc = np.zeros(n, dtype=bool)
        is_doc[corpus.positive] = True
        is_doc[corpus.negatives[corpus.negatives >= 0]] = True
        self.query = self._embed(texts, is_query, self.cfg.query_prompt, source)
        self.doc = self._embed(texts, is_doc, self.cfg.doc_prompt, source)

    def _prepare_run(self, corpus: Corpus) -> None:
        """A run's vectors, as ``shared`` decided: the full model's of the texts it selected over every text."""
        shared = self.shared
        assert shared is not None and self.global_ids is not None
        self.source, self.backends, self.writable = shared.source, shared.backends, shared.writable
        self.first_stage_info = shared.first_stage_info
        texts = corpus.texts.get_column("text").to_list()
        if self.cfg.query_prompt != self.cfg.doc_prompt:
            self._embed_roles(corpus, texts, self.source)
            return
        prompt = self.cfg.query_prompt
        keys = text_keys(texts, prompt)
        if shared.known is not None:
            self.known = shared.known[self.global_ids]
            self.embedded = self.known.copy()
            self._pending = (texts, keys, prompt, self.source)
        wanted = self.known if self.known is not None else np.ones(len(texts), dtype=bool)
        self.query = self.doc = self._embed(texts, wanted, prompt, self.source, keys)

    def idf_counts(self, n_texts: int) -> tuple[int, np.ndarray] | None:
        """(texts counted, per token id the texts holding it) for the idf weights of a corpus of ``n_texts``,
        where they were counted already: over every text of a streamed audit, or by the first stage's
        tokenising of this corpus; None: not counted."""
        if self.shared is not None:
            return self.shared.idf_counts
        counted = self.document_frequency
        if counted is None or counted.n != n_texts:
            return None
        return int(counted.positions.shape[0]), counted.counts

    def first_stage_refusal(self, n_texts: int) -> str | None:
        """Why the full model embeds every text of ``n_texts`` whatever the first stage could select, or
        None: the settings, the plan, the data's size."""
        from contrast_audit import first_stage as fs

        cfg = self.cfg
        if cfg.first_stage == "none":
            return "first-stage = none"
        if self.batches is None:
            return "no batch plan: the command compares texts across the whole data"
        if cfg.margin or cfg.margin_support is not None or cfg.above_positive > 0 or cfg.pair_evidence:
            # Their bars sit under the embedding detectors': the margin rule's follows each row's own positive,
            # pair evidence's is calibrated on the data.
            return "the margin rule or pair evidence is on: they flag pairs under the embedding detectors' bar"
        if n_texts < fs.MIN_TEXTS:
            return f"{n_texts:,} distinct texts (under {fs.MIN_TEXTS:,}: the sample would be most of them)"
        return None

    def fit_first_stage(
        self,
        anchor: np.ndarray,
        positive: np.ndarray,
        keys: np.ndarray,
        texts_of: Callable[[np.ndarray], list[str]],
        source: model_io.ModelSource,
    ) -> FirstStage | str:
        """The first stage's map, fitted on a sample of rows (``first_stage.sample_rows``), or why there
        is none: a model without a static form, long documents, a sample of few texts. ``anchor`` and
        ``positive`` are the rows' text ids, ``keys`` every text's cache key and ``texts_of(ids)`` the
        texts of some ids: the same whether the data is held in memory or streamed."""
        from contrast_audit import first_stage as fs

        static = fs.StaticModel.load(Path(source.path))
        if static is None:
            return "the model has no tokenizer.json or word-embedding table"
        rows = fs.sample_rows(keys[anchor], keys[positive])
        # The sample's documents tell long ones: no static pass over every text only to find them long.
        _, counts = static.encode(texts_of(positive[rows]))
        long = int(np.median(counts)) if counts.size else 0
        if long > fs.LONG_DOCUMENTS:
            return f"long documents (a median of {long} tokens): a static model finds most of them near"
        sample = np.unique(np.r_[anchor[rows], positive[rows]])
        if sample.shape[0] < fs.MIN_SAMPLE_TEXTS:
            return f"the sample's rows hold {sample.shape[0]} distinct texts (a map needs {fs.MIN_SAMPLE_TEXTS})"
        texts = texts_of(sample)
        vectors = self.embed_texts(texts, keys[sample], self.cfg.query_prompt, source)
        bar = min(self.cfg.positive_threshold, self.cfg.anchor_threshold)
        fitted = fs.fit_map(static.encode(texts)[0], vectors, bar)
        return FirstStage(static, fitted, rows, sample, vectors)

    def _first_stage(self, corpus: Corpus, texts: list[str], source: model_io.ModelSource) -> np.ndarray | None:
        """The full model's vectors of the texts the first stage selects for ``self.batches`` (zeros
        elsewhere, ``known`` False there); None when the full model is to embed every text."""
        n = len(texts)
        prompt = self.cfg.query_prompt
        reason = self.first_stage_refusal(n)
        fitted: FirstStage | str | None = None
        if reason is None:
            keys = text_keys(texts, prompt)
            fitted = self.fit_first_stage(
                corpus.anchor, corpus.positive, keys, lambda ids: [texts[i] for i in ids], source
            )
            reason = fitted if isinstance(fitted, str) else None
        if reason is not None or not isinstance(fitted, FirstStage):
            self.first_stage_info = {"used": False, "reason": reason}
            return None
        tokenizer = encoders.file_tokenizer(Path(source.path))
        self.document_frequency = encoders.DocumentFrequency(n, tokenizer) if tokenizer else None
        on_ids = self.document_frequency.add if self.document_frequency else None
        mapped = fitted.map.apply(fitted.static.encode(texts, on_ids)[0])
        slots = np.c_[corpus.anchor, corpus.positive, corpus.negatives]
        rows = fitted.select(mapped, slots, alike_rows(corpus, self.cfg.margin_doc_ratio), self.batches)
        del mapped  # the selection is all the mapped vectors serve
        rows[fitted.rows] = True
        known = np.zeros(n, dtype=bool)
        live = slots[rows]
        known[live[live >= 0]] = True
        vectors = np.zeros((n, fitted.vectors.shape[1]), dtype=np.float32)
        vectors[fitted.sample] = fitted.vectors
        more = known.copy()
        more[fitted.sample] = False
        if more.any():
            vectors[more] = self._embed(texts, more, prompt, source, keys)[more]
        self.known, self.embedded, self.sample_rows = known, known.copy(), fitted.rows
        self._pending = (texts, keys, prompt, source)
        self.first_stage_info = fitted.info(rows, known)
        return vectors

    def ensure(self, tids: np.ndarray) -> None:
        """Have the full model embed the texts of ``tids`` the first stage left out, for a detector that
        must compare them (the linked rule's texts one hop away). They stay out of ``known``: what the
        other detectors compare does not depend on which batches were judged first."""
        if self.embedded is None:
            return
        missing = np.unique(tids[~self.embedded[tids]])
        if missing.size == 0:
            return
        texts, keys, prompt, source = self._pending
        wanted = np.zeros(self.embedded.shape[0], dtype=bool)
        wanted[missing] = True
        extra = self._embed(texts, wanted, prompt, source, keys)
        self.query[missing] = extra[missing]  # the doc matrix is the same array (one prompt)
        self.embedded[missing] = True
        self.memo.clear()  # per-row scores read the zeros these texts had
        info = self.first_stage_info
        info["texts_on_demand"] = info.get("texts_on_demand", 0) + int(missing.size)

    def known_rows(self, corpus: Corpus) -> np.ndarray:
        """Rows whose anchor and positive the full model embedded (every row without a first stage)."""
        if self.known is None:
            return np.ones(corpus.n_rows, dtype=bool)
        return self.known[corpus.anchor] & self.known[corpus.positive]

    def calibration_rows(self, corpus: Corpus) -> np.ndarray:
        """The rows a calibration reads the data's own cosines from: the first stage's sample (the rows it
        selected are the near ones, not the data's kind), else every row, or of more than
        ``CALIBRATION_ROWS`` a sample of that many (``calibration_sample``)."""
        out = np.zeros(corpus.n_rows, dtype=bool)
        if self.sample_rows is not None:
            out[self.sample_rows] = True
            return out
        texts = corpus.texts.get_column("text")
        keys_of = lambda ids: text_keys(texts.gather(ids).to_list(), self.cfg.query_prompt)  # noqa: E731
        out[calibration_sample(corpus.anchor, corpus.positive, keys_of)] = True
        return out

    def compared(self, *tids: np.ndarray) -> np.ndarray:
        """Per pair of text-id arrays: whether the full model embedded every one of their texts."""
        out = np.ones(tids[0].shape[0], dtype=bool)
        if self.known is not None:
            for t in tids:
                out &= self.known[t]
        return out

    def _check_cache_dir(self) -> bool:
        """A cache directory that is a file is an error; one that cannot be written is a warning."""
        root = self.cache_root()
        if root.exists() and not root.is_dir():
            raise ConfigError(
                f"--cache-dir {root} is a file, not a directory",
                fix="name a directory (it is created if missing), or pass --no-cache",
            )
        try:
            root.mkdir(parents=True, exist_ok=True)
            probe = tempfile.NamedTemporaryFile(dir=root, prefix=".probe.", suffix=".tmp")
            probe.close()
        except OSError as exc:
            self.warnings.append(
                f"the embedding cache {root} cannot be written ({exc.strerror}): vectors are computed but not kept"
            )
            return False
        return True

    def _embed(
        self,
        texts: list[str],
        needed: np.ndarray,
        prompt: str,
        source: model_io.ModelSource,
        all_keys: np.ndarray | None = None,
    ) -> np.ndarray:
        """Vectors of the ``needed`` texts, zeros elsewhere (one row per text)."""
        index = np.flatnonzero(needed)
        subset = [texts[i] for i in index]
        vectors = self.embed_texts(subset, all_keys[index] if all_keys is not None else None, prompt, source)
        out = np.zeros((len(texts), vectors.shape[1]), dtype=np.float32)
        out[index] = vectors
        return out

    def embed_texts(
        self, texts: list[str], keys: np.ndarray | None, prompt: str, source: model_io.ModelSource
    ) -> np.ndarray:
        """Unit vectors of ``texts`` (``keys``: their cache keys), from the cache where it holds them."""
        keys = keys if keys is not None else text_keys(texts, prompt)
        cache = EmbeddingCache(self.cache_root(), self.vectors_id(source), prompt)
        if self.cfg.use_cache:
            found, cached = cache.lookup(keys)
        else:
            found, cached = np.zeros(len(texts), dtype=bool), None
        missing = np.flatnonzero(~found)
        writer = cache if self.cfg.use_cache and self.writable else None
        new = self._encode([texts[i] for i in missing], keys[missing], prompt, source, writer) if missing.size else None
        dim = (cached if cached is not None else new).shape[1] if (cached is not None or new is not None) else 384
        out = np.zeros((len(texts), dim), dtype=np.float32)
        if cached is not None and cached.shape[0]:
            out[found] = dequantise(cached)
        if new is not None:
            out[missing] = dequantise(new)
        for problem in dict.fromkeys(cache.problems):
            if problem not in self.warnings:
                self.warnings.append(problem)
        self.stats["embedded"] += int(missing.size)
        self.stats["cached"] += int(found.sum())
        return out

    def model(self, source: model_io.ModelSource | None = None) -> Encoder:
        """The model as this store runs it (``backend``), loaded once per process."""
        source = source or self.source
        if self.backend(source) == "onnx":
            directory = self.onnx_dir(source)
            try:
                return _load_onnx(str(directory), source.path)
            except ConfigError:
                # Another machine decided the backend (a Ray worker on a node with a cache of its own):
                # the model is exported here as that machine exported it.
                failed = self._export(source, directory)
                if failed is not None:
                    raise ModelError(
                        f"the model cannot run on ONNX Runtime on this machine ({directory}): {failed}",
                        fix="pass --backend torch",
                    ) from None
            return _load_onnx(str(directory), source.path)
        return TorchEncoder(self._sentence_transformer(source), self.cfg.precision)

    def _export(self, source: model_io.ModelSource, directory: Path) -> str | None:
        """Export the model to ONNX in ``directory``; None, or why it could not be."""
        exported, failed = encoders.export(self._sentence_transformer(source), Path(source.path), directory)
        return None if exported is not None else failed

    def _sentence_transformer(self, source: model_io.ModelSource) -> Any:
        return _load_model(
            source.path, self.cfg.device, source.model_id, source.revision, tuple(sorted(source.sha256.items()))
        )

    def onnx_dir(self, source: model_io.ModelSource) -> Path:
        return encoders.onnx_dir(self.cache_root(), source.fingerprint())

    def backend(self, source: model_io.ModelSource | None = None) -> str:
        """``onnx`` or ``torch``: what runs the model (``--backend``), decided once per model. ``auto`` runs
        ONNX Runtime where it is exact and can be kept (fp32, a CPU, the cache, a plain pipeline whose
        export matches the model) and torch elsewhere; ``onnx`` where it cannot is an error."""
        source = source or self.source
        if source.path not in self.backends:
            self.backends[source.path] = self._choose_backend(source)
        return self.backends[source.path][0]

    def _choose_backend(self, source: model_io.ModelSource) -> tuple[str, str]:
        cfg = self.cfg
        if cfg.backend == "torch":
            return "torch", "backend = torch"
        why = None
        if cfg.precision != "fp32":
            why = f"precision {cfg.precision} runs under torch autocast"
        elif cfg.device not in (None, "auto", "cpu"):
            why = f"device {cfg.device}"
        elif cfg.device != "cpu" and encoders.accelerator_visible():
            why = "a GPU is visible and no --device cpu was given"
        elif self.encoder is not None:
            why = "the vectors are computed on Ray actors"
        elif not cfg.use_cache:
            why = "--no-cache: the exported model is kept in the cache"
        elif not encoders.onnx_runtime_installed():
            why = "onnxruntime is not installed"
        directory = self.onnx_dir(source) if why is None else None
        if directory is not None and encoders.load_onnx(directory, Path(source.path)) is None:
            writable = getattr(self, "writable", True)
            if not writable:
                why = "the cache cannot be written, so the model cannot be exported to it"
            else:
                failed = self._export(source, directory)
                if failed is not None:
                    why = f"the model cannot run on ONNX Runtime: {failed}"
        if why is None:
            return "onnx", f"the model exported to {encoders.ONNX_LAYOUT}/{directory.name} in the cache"
        if cfg.backend == "onnx":
            raise ConfigError(f"--backend onnx: {why}", fix="pass --backend auto or torch")
        return "torch", why

    def cache_root(self) -> Path:
        return Path(self.cfg.cache_dir) if self.cfg.cache_dir else default_cache_dir()

    def vectors_id(self, source: model_io.ModelSource | None = None) -> str:
        """What vectors are cached under: the model's fingerprint, and the backend or the precision it
        encoded in when that is not torch in fp32 (vectors of one model computed two ways are never mixed)."""
        source = source or self.source
        fingerprint = source.fingerprint()
        if self.backend(source) == "onnx":
            return hashlib.sha256(f"{fingerprint}|backend={encoders.ONNX_LAYOUT}".encode()).hexdigest()
        if self.cfg.precision == "fp32":
            return fingerprint
        return hashlib.sha256(f"{fingerprint}|precision={self.cfg.precision}".encode()).hexdigest()

    def _encode(
        self,
        texts: list[str],
        keys: np.ndarray,
        prompt: str,
        source: model_io.ModelSource,
        cache: EmbeddingCache | None,
    ) -> np.ndarray:
        """Stored-form (float16) vectors of ``texts``, written to ``cache`` in shards as they are
        computed, so an interrupted run resumes where it stopped.

        Texts are encoded by ``encode_batches``: a text's vector does not depend on which other texts
        share its batch, so a cache filled piecemeal holds the vectors a single run would compute.
        """
        if self.encoder is not None:
            return self.encoder(self, texts, keys, prompt, source, cache)
        encoder = self.model(source)
        tick = self.progress("Embedding texts", len(texts)) if self.progress else None
        out = np.zeros((len(texts), 0), dtype=VECTOR_DTYPE)
        pending: list[np.ndarray] = []
        last_flush = time.monotonic()
        done = 0
        for part, vecs in self.encode_stored(encoder, texts, prompt):
            if out.shape[1] == 0:
                out = np.zeros((len(texts), vecs.shape[1]), dtype=VECTOR_DTYPE)
            out[part] = vecs
            pending.append(part)
            done += len(part)
            if tick:
                tick(len(part))
            waiting = sum(len(p) for p in pending)
            if cache is not None and (
                waiting >= FLUSH_TEXTS or time.monotonic() - last_flush >= FLUSH_SECONDS or done == len(texts)
            ):
                rows = np.sort(np.concatenate(pending))
                self._flush(cache, keys[rows], out[rows])
                pending, last_flush = [], time.monotonic()
        return out

    def encode_stored(self, encoder: Encoder, texts: list[str], prompt: str) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """(positions, stored-form vectors) of ``texts``, batch by batch, as this store computes them."""
        for part, vecs in encode_batches(encoder, texts, prompt, self.cfg.batch_size):
            yield part, quantise(vecs)

    def flush(self, cache: EmbeddingCache | None, keys: np.ndarray, vectors: np.ndarray) -> None:
        """Write new vectors to the cache (nothing without one)."""
        if cache is not None:
            self._flush(cache, keys, vectors)

    def _flush(self, cache: EmbeddingCache, keys: np.ndarray, vectors: np.ndarray) -> None:
        if not self.writable:
            return  # it failed once this run (a full disk): said once, not tried again
        try:
            cache.write(keys, vectors=vectors)
        except OSError as exc:
            self.warnings.append(
                f"the embedding cache {self.cache_root()} cannot be written ({exc.strerror}): vectors are "
                "computed but not kept"
            )
            self.writable = False

    def cosine(self, left: np.ndarray, right: np.ndarray, u: np.ndarray, v: np.ndarray) -> np.ndarray:
        """Row-wise cosine between ``left[u]`` and ``right[v]``, in blocks to bound memory."""
        out = np.empty(u.shape[0], dtype=np.float32)
        for start in range(0, u.shape[0], PAIR_BLOCK):
            stop = start + PAIR_BLOCK
            out[start:stop] = np.einsum("ij,ij->i", left[u[start:stop]], right[v[start:stop]])
        return out

    def _backend_info(
        self, source: model_io.ModelSource | None, backends: dict[str, tuple[str, str]]
    ) -> dict[str, Any]:
        chosen = backends.get(source.path) if source else None
        if chosen is None:
            return {"backend": None}
        return {"backend": chosen[0], "backend_reason": chosen[1]}

    def info(self) -> dict[str, Any]:
        shared = self.shared if getattr(self, "source", None) is None else None  # a streamed audit's account
        src = getattr(self, "source", None) or (shared.source if shared else None)
        return {
            "model": src.model_id if src else self.cfg.model,
            "model_path": src.path if src else None,
            "revision": src.revision if src else None,
            "fingerprint": src.fingerprint() if src else None,
            "query_prompt": self.cfg.query_prompt,
            "doc_prompt": self.cfg.doc_prompt,
            "normalize_embeddings": True,
            "similarity": "cosine",
            "device": self.cfg.device or "auto",
            "precision": self.cfg.precision,
            **self._backend_info(src, shared.backends if shared else self.backends),
            "cache_dtype": VECTOR_DTYPE.name,
            **(shared.stats if shared else self.stats),
            "first_stage": shared.first_stage_info if shared else self.first_stage_info,
        }
