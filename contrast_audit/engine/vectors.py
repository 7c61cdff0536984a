"""Embedding evidence in a streamed audit: what is decided once over every text, before any run is judged.

The in-memory store decides over the whole corpus which texts the full model embeds (the first stage),
the alignment guard's idf weights and the linked rule's bar. A streamed audit holds no text and no vector
of the whole corpus, so it decides the same things here, from the spill, into an ``embed.Shared``; the
store of each run reads it and embeds only the run's own texts, from the cache where it holds them:

1. every text's cache key, read in chunks of ``KEY_CHUNK`` texts (16 bytes a text are kept);
2. the first stage's map, fitted on the same sample of rows (``EmbeddingStore.fit_first_stage``);
3. a pass over the runs: each run's texts mapped by the static model and the rows near another row of a
   batch, or near their own hard negative, selected (``FirstStage.select``); the vectors go with the run;
4. the idf counts over the same evenly spaced texts, and the link bar over the same rows.

So the runs' findings are the in-memory engine's, and the memory of a run grows with its texts only.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from contrast_audit.config import AuditConfig, EmbeddingConfig
from contrast_audit.corpus import alike_rows
from contrast_audit.embed import EmbeddingStore, FirstStage, Shared, calibration_sample, text_keys
from contrast_audit.encoders import idf_sample
from contrast_audit.evidence.linked import near_bar

KEY_CHUNK = 100_000


def prepare(
    cfg: AuditConfig,
    corpus: Any,
    work: Any,
    read: Callable[[np.ndarray], Any],
    progress: Callable[[str, int], Callable[[int], None]] | None = None,
) -> Shared:
    """What each run's store reads (``corpus``: the ``StreamCorpus``; ``work``: the runs, ``stream.Work``;
    ``read(rows)``: the spilled texts of rows)."""
    e = cfg.embedding
    store = EmbeddingStore(e, progress)
    store.open()
    store.batches = work.batches
    source = store.source
    n = corpus.n_texts

    def texts_of(ids: np.ndarray) -> list[str]:
        return corpus.texts_of(ids).to_list()

    keys: np.ndarray | None = None

    def all_keys() -> np.ndarray:
        nonlocal keys
        if keys is None:
            keys = np.empty(n, dtype="S16")
            tick = progress("Reading texts for the first stage", n) if progress else None
            for lo in range(0, n, KEY_CHUNK):
                ids = np.arange(lo, min(n, lo + KEY_CHUNK))
                keys[lo : lo + KEY_CHUNK] = text_keys(texts_of(ids), e.query_prompt)
                if tick:
                    tick(ids.shape[0])
        return keys

    reason = (
        store.first_stage_refusal(n) if e.query_prompt == e.doc_prompt else "the anchor and document prompts differ"
    )
    fitted: FirstStage | str | None = None
    if reason is None:
        fitted = store.fit_first_stage(corpus.anchor, corpus.positive, all_keys(), texts_of, source)
        reason = fitted if isinstance(fitted, str) else None
    known = None
    if isinstance(fitted, FirstStage):
        selected = _select(fitted, work, read, e.margin_doc_ratio, progress)
        selected[fitted.rows] = True
        known = np.zeros(n, dtype=bool)
        live = work.tids[selected]
        known[live[live >= 0]] = True
        info = fitted.info(selected, known)
    else:
        info = {"used": False, "reason": reason}
    idf_counts = None
    if cfg.policy.alignment_threshold > 0:
        from contrast_audit.tokens import count_documents, model_tokenizer

        idf_counts = count_documents(model_tokenizer(store), texts_of(idf_sample(n)))
    link_bar = None
    if cfg.link.max_hops > 0:
        if isinstance(fitted, FirstStage):  # the sample's rows, whose texts' vectors the fit holds
            rows, sample, held = fitted.rows, fitted.sample, fitted.vectors
            vectors_of = lambda ids, _prompt: held[np.searchsorted(sample, ids)]  # noqa: E731
        else:
            rows = calibration_sample(corpus.anchor, corpus.positive, lambda ids: all_keys()[ids])
            vectors_of = lambda ids, prompt: store.embed_texts(texts_of(ids), None, prompt, source)  # noqa: E731
        link_bar = near_bar(_own_scores(e, corpus.anchor[rows], corpus.positive[rows], vectors_of))
    store.backend(source)  # decided here, for every run: those judged in other processes too (``engine.on_ray``)
    shared = Shared(source, store.backends, store.writable, known, idf_counts, info, link_bar=link_bar)
    shared.add_run([store])
    return shared


def _select(
    fitted: FirstStage,
    work: Any,
    read: Callable[[np.ndarray], Any],
    doc_ratio: float,
    progress: Callable[[str, int], Callable[[int], None]] | None,
) -> np.ndarray:
    """Per global row: selected by the first stage for the batches of some run (``FirstStage.select``)."""
    selected = np.zeros(work.tids.shape[0], dtype=bool)
    tick = progress("Selecting rows for the full model", len(work.batches)) if progress else None
    for i, run in enumerate(work.runs):
        part = work.local(i, read(work.rows(i)))
        c = part.corpus
        mapped = fitted.map.apply(fitted.static.encode(c.texts.get_column("text").to_list())[0])
        slots = np.c_[c.anchor, c.positive, c.negatives]
        selected[part.rows[fitted.select(mapped, slots, alike_rows(c, doc_ratio), part.batches)]] = True
        del mapped
        if tick:
            tick(run.stop - run.start)
    return selected


def _own_scores(
    e: EmbeddingConfig,
    anchor: np.ndarray,
    positive: np.ndarray,
    vectors_of: Callable[[np.ndarray, str], np.ndarray],
) -> np.ndarray:
    """sim(anchor, positive) of the rows (``anchor``, ``positive``: their text ids) whose positive is not
    their anchor, as the in-memory store computes them (``row_positive_scores``); ``vectors_of(ids, prompt)``
    gives the vectors of sorted distinct text ids."""
    own = anchor != positive
    anchor, positive = anchor[own], positive[own]
    if e.query_prompt == e.doc_prompt:
        ids = np.unique(np.r_[anchor, positive])
        vectors = vectors_of(ids, e.query_prompt)
        left, right = vectors[np.searchsorted(ids, anchor)], vectors[np.searchsorted(ids, positive)]
    else:
        a_ids, p_ids = np.unique(anchor), np.unique(positive)
        left = vectors_of(a_ids, e.query_prompt)[np.searchsorted(a_ids, anchor)]
        right = vectors_of(p_ids, e.doc_prompt)[np.searchsorted(p_ids, positive)]
    return np.einsum("ij,ij->i", left, right)
