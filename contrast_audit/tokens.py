"""Token alignment between two texts, with the scan's own embedding model.

Each token of one text is matched to its most similar token of the other (cosine of contextual
token embeddings, the greedy matching of BERTScore: Zhang et al., 2020, "BERTScore: Evaluating Text
Generation with BERT"). A token is *covered* when its best match reaches ``match`` (0.7 by
default); a text's coverage is the idf-weighted share of its tokens that are covered, and the
alignment of two texts is the smaller of the two coverages. It drops when either text carries
content the other lacks ("held a news conference against Powell" vs "… against Powell and the two
other Republicans"), which a pooled sentence vector barely registers. Counting an unmatched token as
0 rather than as its (always positive) best cosine is what separates "the same sentence plus a
clause" from a reworded paraphrase; ``match=0`` gives BERTScore's soft min(precision, recall).

Token embeddings are computed only for the texts a guard asks about, without role prompts (prompt
tokens would match themselves and inflate every score), cached on disk next to the sentence
vectors and keyed the same way, so a rerun encodes nothing it has seen. The idf weights come from
the scanned corpus: every distinct text, or an evenly spaced sample of ``IDF_SAMPLE`` of them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from contrast_audit.config import PolicyConfig
from contrast_audit.corpus import Corpus
from contrast_audit.embed import EmbeddingStore, ShardCache, encode_batches, find_keys, text_keys
from contrast_audit.encoders import ModelTokenizer, file_tokenizer, idf_sample, unit

TOKEN_PROMPT = "tokens:v1:"  # the cache key's prefix: token embeddings never collide with sentence vectors
FLUSH_TEXTS = 4096  # new token matrices written to the cache per shard
DEFAULT_MATCH = PolicyConfig.alignment_match  # token cosine at which a token has a counterpart in the other text


class TokenCache:
    """Token matrices (float16, one row per token) in shards of ``keys``, ``lengths`` and the rows
    of all their texts, ``vectors``. Only keys and lengths are read up front; a shard's vectors are
    read when one of its texts is needed. New matrices are written in shards of ``FLUSH_TEXTS``."""

    def __init__(self, directory: Path) -> None:
        self.shards = ShardCache(directory)
        self.paths: list[Path] = []
        self.keys: np.ndarray | None = None
        self.pending: list[tuple[bytes, np.ndarray]] = []

    def _index(self) -> None:
        keys, shard, start, length = [], [], [], []
        self.paths = self.shards.paths()
        for number, path in enumerate(self.paths):
            part = self.shards.load(path, ("keys", "lengths"))
            if part is None:
                continue
            keys.append(part["keys"])
            shard.append(np.full(part["keys"].shape[0], number))
            start.append(np.concatenate([[0], np.cumsum(part["lengths"])[:-1]]).astype(np.int64))
            length.append(part["lengths"].astype(np.int64))
        empty = np.zeros(0, dtype=np.int64)
        self.keys = np.concatenate(keys) if keys else np.zeros(0, dtype="S16")
        self.shard = np.concatenate(shard) if shard else empty
        self.start = np.concatenate(start) if start else empty
        self.length = np.concatenate(length) if length else empty

    def lookup(self, keys: np.ndarray) -> dict[int, np.ndarray]:
        """Matrices of the cached ``keys``, by position in ``keys``."""
        if self.keys is None:
            self._index()
        if self.keys.shape[0] == 0:
            return {}
        found, index = find_keys(self.keys, keys)
        out: dict[int, np.ndarray] = {}
        slots = np.flatnonzero(found)
        shard_of = self.shard[index]
        for number in np.unique(shard_of):
            part = self.shards.load(self.paths[number], ("vectors",))
            if part is None:
                continue  # damaged since it was indexed: those texts are encoded again
            rows = part["vectors"]
            mine = np.flatnonzero(shard_of == number)
            for slot, at in zip(slots[mine].tolist(), index[mine].tolist(), strict=True):
                start, stop = self.start[at], self.start[at] + self.length[at]
                if stop <= rows.shape[0]:
                    out[slot] = rows[start:stop]
        return out

    def add(self, keys: np.ndarray, mats: list[np.ndarray]) -> None:
        self.pending += list(zip(keys.tolist(), mats, strict=True))
        if len(self.pending) >= FLUSH_TEXTS:
            self.flush()

    def flush(self) -> None:
        if not self.pending:
            return
        keys = np.array([k for k, _ in self.pending], dtype="S16")
        mats = [m for _, m in self.pending]
        self.pending = []
        try:
            lengths = np.array([m.shape[0] for m in mats], dtype=np.int64)
            self.shards.write(keys, lengths=lengths, vectors=np.concatenate(mats))
        except OSError:
            pass  # a read-only cache directory only costs a re-encode next time


def count_documents(tokenizer: ModelTokenizer, texts: list[str]) -> tuple[int, np.ndarray]:
    """(texts, per token id the texts holding it): the idf weights' counts over ``texts``."""
    per_text = [np.unique(np.asarray(x, dtype=np.int64)) for x in tokenizer.encode(texts)]
    flat = np.concatenate(per_text) if per_text else np.zeros(0, dtype=np.int64)
    return len(texts), np.bincount(flat, minlength=max(tokenizer.vocab_size, int(flat.max()) + 1 if flat.size else 0))


def model_tokenizer(store: EmbeddingStore) -> ModelTokenizer:
    """The tokenizer the alignment guard reads ``store``'s model with: its ``tokenizer.json`` where it can
    be (no model load, no torch), else the loaded model's."""
    return file_tokenizer(Path(store.source.path)) or store.model().tokenizer()


class TokenStore:
    """Unit token vectors and idf weights per text id, computed on demand; alignments of text pairs
    with token match threshold ``match`` (0: soft matching)."""

    def __init__(self, store: EmbeddingStore, match: float = DEFAULT_MATCH) -> None:
        if not 0.0 <= match < 1.0:  # cosines of a float16 round trip never quite reach 1
            raise ValueError(f"match must be in [0, 1), got {match}")
        self.store = store
        self.match = match
        self.vectors: dict[int, np.ndarray] = {}
        self.weights: dict[int, np.ndarray] = {}
        self.memo: dict[tuple[int, int], float] = {}
        self.idf: np.ndarray | None = None
        self.idf_texts = 0
        self.stats = {"token_texts_encoded": 0, "token_texts_cached": 0, "token_fallbacks": 0}
        self.cache: TokenCache | None = None
        self.tokenizer: ModelTokenizer | None = None

    def prepare(self, corpus: Corpus) -> None:
        if getattr(self, "corpus", None) is corpus:
            return  # shared by every guarded detector of a scan
        self.store.prepare(corpus)
        self.corpus = corpus
        self.texts = corpus.texts.get_column("text").to_list()
        self.vectors, self.weights, self.memo, self.idf, self.idf_texts = {}, {}, {}, None, 0

    def _tokenizer(self) -> ModelTokenizer:
        """The model's tokenizer, from its ``tokenizer.json`` where it can be (no model load, no
        torch), else from the loaded model."""
        if self.tokenizer is None:
            self.tokenizer = model_tokenizer(self.store)
        return self.tokenizer

    def _token_ids(self, texts: list[str]) -> list[list[int]]:
        return self._tokenizer().encode(texts)

    def _ensure_idf(self) -> None:
        if self.idf is not None:
            return
        tokenizer = self._tokenizer()
        special = tokenizer.special_ids
        n = len(self.texts)
        counted = self.store.idf_counts(n)
        if counted is not None and (self.store.shared is not None or tokenizer.source == "tokenizer.json"):
            size, df = counted  # counted over every text of a streamed audit, or by the first stage's tokenising
        else:
            size, df = count_documents(tokenizer, [self.texts[i] for i in idf_sample(n)])
        df = np.pad(df, (0, max(tokenizer.vocab_size - df.shape[0], 0)))
        idf = np.log((size + 1.0) / (df + 1.0))
        idf[list(special)] = 0.0
        self.idf, self.idf_texts = idf, size

    def ensure(self, tids: np.ndarray) -> None:
        """Compute (or read from the cache) the token vectors of every text in ``tids``."""
        need = [int(t) for t in np.unique(tids) if int(t) not in self.vectors]
        if not need:
            return
        self._ensure_idf()
        texts = [self.texts[t] for t in need]
        ids = self._token_ids(texts)
        keys = text_keys(texts, TOKEN_PROMPT)
        cached: dict[int, np.ndarray] = {}
        if self.store.cfg.use_cache:
            if self.cache is None:
                self.cache = TokenCache(self.store.cache_root() / "tokens" / self.store.vectors_id()[:16])
            cached = self.cache.lookup(keys)
        for slot, mat in cached.items():
            self._keep(need[slot], ids[slot], mat)
        missing = np.array([i for i in range(len(need)) if i not in cached], dtype=np.int64)
        if missing.size:
            todo = [texts[i] for i in missing]
            mats: list[np.ndarray] = [np.zeros((0, 0), dtype=np.float16)] * len(todo)
            # No role prompt: its tokens would align with themselves.
            for part, encoded in encode_batches(self.store.model(), todo, "", self.store.cfg.batch_size, tokens=True):
                for slot, m in zip(part, encoded, strict=True):
                    mats[slot] = unit(m).astype(np.float16)
            for slot, mat in zip(missing, mats, strict=True):
                self._keep(need[slot], ids[slot], mat)
            if self.cache is not None:
                self.cache.add(keys[missing], mats)
        self.stats["token_texts_encoded"] += int(missing.size)
        self.stats["token_texts_cached"] += len(cached)

    def finish(self) -> None:
        """Write what is still buffered for the cache (called once, after the last comparison)."""
        if self.cache is not None:
            self.cache.flush()

    def _keep(self, tid: int, ids: list[int], mat: np.ndarray) -> None:
        if self.idf is not None and len(ids) == mat.shape[0]:
            weights = self.idf[np.asarray(ids, dtype=np.int64)]
        else:  # a model whose own preprocessing tokenises differently: uniform weights, ends dropped
            weights = np.ones(mat.shape[0])
            weights[[0, -1]] = 0.0
            self.stats["token_fallbacks"] += 1
        keep = weights > 0
        vecs = mat[keep].astype(np.float32)
        norms = np.linalg.norm(vecs, axis=1, keepdims=True)
        self.vectors[tid] = vecs / np.maximum(norms, 1e-12)
        self.weights[tid] = weights[keep].astype(np.float32)

    def alignment(self, u: np.ndarray, v: np.ndarray) -> np.ndarray:
        """The smaller idf-weighted token coverage of the two texts, per pair (1 for a text and itself)."""
        self.ensure(np.concatenate([u, v]))
        out = np.empty(u.shape[0], dtype=np.float64)
        for i, (a, b) in enumerate(zip(u.tolist(), v.tolist(), strict=True)):
            key = (a, b) if a <= b else (b, a)
            score = self.memo.get(key)
            if score is None:
                score = 1.0 if a == b else self._align(a, b)
                self.memo[key] = score
            out[i] = score
        return out

    def _align(self, a: int, b: int) -> float:
        ea, eb = self.vectors[a], self.vectors[b]
        wa, wb = self.weights[a], self.weights[b]
        if ea.shape[0] == 0 or eb.shape[0] == 0 or wa.sum() <= 0 or wb.sum() <= 0:
            return 1.0  # nothing weighted to compare (only unknown or ubiquitous tokens): no evidence against
        sim = ea @ eb.T
        best_a, best_b = sim.max(axis=1), sim.max(axis=0)
        if self.match > 0:  # covered or not: an unmatched token counts 0, not its best cosine
            best_a, best_b = best_a >= self.match, best_b >= self.match
        coverage_a = float((best_a * wa).sum() / wa.sum())
        coverage_b = float((best_b * wb).sum() / wb.sum())
        return min(coverage_a, coverage_b)

    def info(self) -> dict[str, Any]:
        shared = self.store.shared
        if shared is not None and getattr(self, "corpus", None) is None:  # a streamed audit's account, every run's
            counted = shared.idf_counts[0] if shared.idf_counts and shared.idf_used else 0
            return {"alignment_match": self.match, "idf_texts": counted, **self.stats, **shared.token_stats}
        return {"alignment_match": self.match, "idf_texts": self.idf_texts, **self.stats}
