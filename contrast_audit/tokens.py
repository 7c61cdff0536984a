"""Token alignment between two texts, with the scan's own embedding model.

Each token of one text is matched to its most similar token of the other (cosine of contextual
token embeddings), and the matches are averaged with idf weights: the precision and recall of
BERTScore (Zhang et al., 2020, "BERTScore: Evaluating Text Generation with BERT"). The alignment of
two texts is the smaller of the two, so it drops when either text carries content the other lacks
("held a news conference against Powell" vs "… against Powell and the two other Republicans"),
which a pooled sentence vector barely registers.

Token embeddings are computed only for the texts a guard asks about, without role prompts (prompt
tokens would match themselves and inflate every score), cached on disk next to the sentence
vectors and keyed the same way, so a rerun encodes nothing it has seen. The idf weights come from
the scanned corpus: every distinct text, or an evenly spaced sample of ``IDF_SAMPLE`` of them.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from contrast_audit.corpus import Corpus
from contrast_audit.embed import EmbeddingStore, ShardCache, find_keys, text_keys

IDF_SAMPLE = 50_000
TOKEN_PROMPT = "tokens:v1:"  # the cache key's prefix: token embeddings never collide with sentence vectors


class TokenStore:
    """Unit token vectors and idf weights per text id, computed on demand."""

    def __init__(self, store: EmbeddingStore) -> None:
        self.store = store
        self.vectors: dict[int, np.ndarray] = {}
        self.weights: dict[int, np.ndarray] = {}
        self.memo: dict[tuple[int, int], float] = {}
        self.idf: np.ndarray | None = None
        self.idf_texts = 0
        self.stats = {"token_texts_encoded": 0, "token_texts_cached": 0}
        self._stored: dict[str, np.ndarray] | None = None
        self._stored_read = False

    def prepare(self, corpus: Corpus) -> None:
        self.store.prepare(corpus)
        self.texts = corpus.texts.get_column("text").to_list()

    def _tokenizer(self):
        st = self.store.model()
        return st.tokenizer, st.max_seq_length, set(st.tokenizer.all_special_ids)

    def _token_ids(self, texts: list[str]) -> list[list[int]]:
        tokenizer, max_len, _ = self._tokenizer()
        return tokenizer(texts, truncation=True, max_length=max_len)["input_ids"]

    def _ensure_idf(self) -> None:
        if self.idf is not None:
            return
        tokenizer, _, special = self._tokenizer()
        n = len(self.texts)
        sample = np.unique(np.linspace(0, n - 1, min(n, IDF_SAMPLE)).astype(np.int64)) if n else np.zeros(0, int)
        ids = self._token_ids([self.texts[i] for i in sample])
        per_text = [np.unique(np.asarray(x, dtype=np.int64)) for x in ids]
        flat = np.concatenate(per_text) if per_text else np.zeros(0, dtype=np.int64)
        vocab = max(len(tokenizer), int(flat.max()) + 1 if flat.size else 0)
        df = np.bincount(flat, minlength=vocab)
        idf = np.log((sample.shape[0] + 1.0) / (df + 1.0))
        idf[list(special)] = 0.0
        self.idf, self.idf_texts = idf, int(sample.shape[0])

    def ensure(self, tids: np.ndarray) -> None:
        """Compute (or read from the cache) the token vectors of every text in ``tids``."""
        need = [int(t) for t in np.unique(tids) if int(t) not in self.vectors]
        if not need:
            return
        self._ensure_idf()
        texts = [self.texts[t] for t in need]
        ids = self._token_ids(texts)
        keys = text_keys(texts, TOKEN_PROMPT)
        cache = ShardCache(self.store.cache_root() / "tokens" / self.store.source.fingerprint()[:16])
        found = np.zeros(len(need), dtype=bool)
        if self.store.cfg.use_cache:
            if not self._stored_read:  # read once per scan: later texts are kept in memory
                self._stored, self._stored_read = cache.read(("keys", "lengths", "vectors")), True
            stored = self._stored
            if stored is not None:
                found, index = find_keys(stored["keys"], keys)
                starts = np.concatenate([[0], np.cumsum(stored["lengths"])])
                for slot, at in zip(np.flatnonzero(found), index, strict=True):
                    self._keep(need[slot], ids[slot], stored["vectors"][starts[at] : starts[at + 1]])
        missing = np.flatnonzero(~found)
        if missing.size:
            encoded = self.store.model().encode(
                [texts[i] for i in missing],
                output_value="token_embeddings",
                batch_size=self.store.cfg.batch_size,
                show_progress_bar=False,
            )
            mats = [np.asarray(m.float().cpu().numpy(), dtype=np.float16) for m in encoded]
            for slot, mat in zip(missing, mats, strict=True):
                self._keep(need[slot], ids[slot], mat)
            if self.store.cfg.use_cache:
                try:
                    cache.write(
                        keys[missing],
                        lengths=np.array([m.shape[0] for m in mats], dtype=np.int64),
                        vectors=np.concatenate(mats),
                    )
                except OSError:
                    pass  # a read-only cache directory only costs a re-encode next time
        self.stats["token_texts_encoded"] += int(missing.size)
        self.stats["token_texts_cached"] += int(found.sum())

    def _keep(self, tid: int, ids: list[int], mat: np.ndarray) -> None:
        if self.idf is not None and len(ids) == mat.shape[0]:
            weights = self.idf[np.asarray(ids, dtype=np.int64)]
        else:  # a model whose own preprocessing tokenises differently: uniform weights, ends dropped
            weights = np.ones(mat.shape[0])
            weights[[0, -1]] = 0.0
        keep = weights > 0
        vecs = mat[keep].astype(np.float32)
        norms = np.linalg.norm(vecs, axis=1, keepdims=True)
        self.vectors[tid] = vecs / np.maximum(norms, 1e-12)
        self.weights[tid] = weights[keep].astype(np.float32)

    def alignment(self, u: np.ndarray, v: np.ndarray) -> np.ndarray:
        """min(precision, recall) of the idf-weighted greedy token matching, per pair (1 for a text and itself)."""
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
            return 0.0
        sim = ea @ eb.T
        recall = float((sim.max(axis=1) * wa).sum() / wa.sum())
        precision = float((sim.max(axis=0) * wb).sum() / wb.sum())
        return min(precision, recall)

    def info(self) -> dict[str, Any]:
        return {"idf_texts": self.idf_texts, **self.stats}
