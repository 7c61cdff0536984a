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
import zipfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from contrast_audit import model as model_io
from contrast_audit.config import EmbeddingConfig
from contrast_audit.corpus import Corpus

ENCODE_BLOCK = 2048  # texts per encode call, so the progress bar moves
PAIR_BLOCK = 65536  # pairs per gather when computing row-wise cosines


def default_cache_dir() -> Path:
    env = os.environ.get("CONTRAST_AUDIT_CACHE_DIR")
    if env:
        return Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "contrast-audit"


@functools.lru_cache(maxsize=4)
def _load_model(path: str, device: str | None, model_id: str, revision: str | None, digests: tuple):
    source = model_io.ModelSource(model_id, path, revision, dict(digests))
    return model_io.load(source, device=device)


def text_keys(texts: list[str], prompt: str) -> np.ndarray:
    """16-byte SHA-256 digests of ``prompt + text``: the cache key of each text."""
    return np.array([hashlib.sha256((prompt + t).encode("utf-8")).digest()[:16] for t in texts], dtype="S16")


class ShardCache:
    """Shards of arrays (``keys`` first) in one directory, each written atomically; a damaged shard
    is ignored, and its texts are computed again."""

    def __init__(self, directory: Path) -> None:
        self.dir = directory

    def paths(self) -> list[Path]:
        return sorted(self.dir.glob("shard-*.npz")) if self.dir.is_dir() else []

    @staticmethod
    def load(path: Path, fields: tuple[str, ...]) -> dict[str, np.ndarray] | None:
        """One shard's ``fields``; None when the shard is damaged or lacks one of them."""
        try:
            with np.load(path) as data:
                return {f: data[f] for f in fields}
        except (OSError, ValueError, KeyError, zipfile.BadZipFile):
            return None

    def read(self, fields: tuple[str, ...]) -> dict[str, np.ndarray] | None:
        """Every shard's ``fields``, concatenated in shard-name order; None when nothing is stored."""
        loaded = [part for path in self.paths() if (part := self.load(path, fields)) is not None]
        if not loaded:
            return None
        return {f: np.concatenate([part[f] for part in loaded]) for f in fields}

    def write(self, keys: np.ndarray, **arrays: np.ndarray) -> None:
        if keys.shape[0] == 0:
            return
        self.dir.mkdir(parents=True, exist_ok=True)
        name = hashlib.sha256(keys.tobytes()).hexdigest()[:16]
        fd, tmp = tempfile.mkstemp(prefix=".shard-", suffix=".npz", dir=self.dir)
        try:
            with os.fdopen(fd, "wb") as handle:
                np.savez(handle, keys=keys, **arrays)
            os.replace(tmp, self.dir / f"shard-{name}.npz")
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise


def find_keys(stored: np.ndarray, keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(found mask over ``keys``, index into ``stored`` of each found key, in order)."""
    order = np.argsort(stored, kind="stable")
    sorted_keys = stored[order]
    pos = np.minimum(np.searchsorted(sorted_keys, keys), sorted_keys.shape[0] - 1)
    found = sorted_keys[pos] == keys
    return found, order[pos[found]]


class EmbeddingCache(ShardCache):
    """Sentence vectors in one directory per model fingerprint and prompt."""

    def __init__(self, root: Path, fingerprint: str, prompt: str) -> None:
        prompt_id = hashlib.sha256(prompt.encode("utf-8")).hexdigest()[:12]
        super().__init__(root / "embeddings" / f"{fingerprint[:16]}-{prompt_id}")

    def lookup(self, keys: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
        """(found mask, vectors for found keys in order) — vectors is None when nothing is cached."""
        stored = self.read(("keys", "vectors"))
        if stored is None:
            return np.zeros(keys.shape[0], dtype=bool), None
        found, index = find_keys(stored["keys"], keys)
        return found, stored["vectors"][index]

    def store(self, keys: np.ndarray, vectors: np.ndarray) -> None:
        self.write(keys, vectors=vectors.astype(np.float32))


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

    def prepare(self, corpus: Corpus) -> None:
        if self.query is not None:
            return
        source = model_io.resolve(self.cfg.model)
        self.source = source
        texts = corpus.texts.get_column("text").to_list()
        n = len(texts)
        is_query = np.zeros(n, dtype=bool)
        is_query[corpus.anchor] = True
        is_doc = np.zeros(n, dtype=bool)
        is_doc[corpus.positive] = True
        is_doc[corpus.negatives[corpus.negatives >= 0]] = True
        self.stats = {"embedded": 0, "cached": 0}
        if self.cfg.query_prompt == self.cfg.doc_prompt:
            vectors = self._embed(texts, np.ones(n, dtype=bool), self.cfg.query_prompt, source)
            self.query = self.doc = vectors
        else:
            self.query = self._embed(texts, is_query, self.cfg.query_prompt, source)
            self.doc = self._embed(texts, is_doc, self.cfg.doc_prompt, source)

    def _embed(self, texts: list[str], needed: np.ndarray, prompt: str, source: model_io.ModelSource) -> np.ndarray:
        index = np.flatnonzero(needed)
        subset = [texts[i] for i in index]
        keys = text_keys(subset, prompt)
        cache = EmbeddingCache(self.cache_root(), source.fingerprint(), prompt)
        found, cached = cache.lookup(keys) if self.cfg.use_cache else (np.zeros(len(subset), dtype=bool), None)
        missing = np.flatnonzero(~found)
        new = self._encode([subset[i] for i in missing], prompt, source) if missing.size else None
        dim = (cached if cached is not None else new).shape[1] if (cached is not None or new is not None) else 384
        out = np.zeros((len(texts), dim), dtype=np.float32)
        if cached is not None and cached.shape[0]:
            out[index[found]] = cached
        if new is not None:
            out[index[missing]] = new
            if self.cfg.use_cache:
                try:
                    cache.store(keys[missing], new)
                except OSError:
                    pass  # a read-only cache directory only costs a re-embed next time
        self.stats["embedded"] += int(missing.size)
        self.stats["cached"] += int(found.sum())
        return out

    def model(self, source: model_io.ModelSource | None = None):
        """The loaded sentence-transformers model (loaded once per process)."""
        source = source or self.source
        return _load_model(
            source.path, self.cfg.device, source.model_id, source.revision, tuple(sorted(source.sha256.items()))
        )

    def cache_root(self) -> Path:
        return Path(self.cfg.cache_dir) if self.cfg.cache_dir else default_cache_dir()

    def _encode(self, texts: list[str], prompt: str, source: model_io.ModelSource) -> np.ndarray:
        st = self.model(source)
        tick = self.progress("Embedding texts", len(texts)) if self.progress else None
        blocks = []
        for start in range(0, len(texts), ENCODE_BLOCK):
            chunk = texts[start : start + ENCODE_BLOCK]
            vecs = st.encode(
                chunk,
                prompt=prompt or None,
                batch_size=self.cfg.batch_size,
                normalize_embeddings=True,
                convert_to_numpy=True,
                show_progress_bar=False,
            )
            blocks.append(np.asarray(vecs, dtype=np.float32))
            if tick:
                tick(len(chunk))
        return np.concatenate(blocks)

    def cosine(self, left: np.ndarray, right: np.ndarray, u: np.ndarray, v: np.ndarray) -> np.ndarray:
        """Row-wise cosine between ``left[u]`` and ``right[v]``, in blocks to bound memory."""
        out = np.empty(u.shape[0], dtype=np.float32)
        for start in range(0, u.shape[0], PAIR_BLOCK):
            stop = start + PAIR_BLOCK
            out[start:stop] = np.einsum("ij,ij->i", left[u[start:stop]], right[v[start:stop]])
        return out

    def info(self) -> dict[str, Any]:
        src = getattr(self, "source", None)
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
            **self.stats,
        }
