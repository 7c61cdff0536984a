"""Peer rules that decide in-batch false negatives, scored on the same batches and pairs as the scan.

Each rule takes, for every truth record (anchor row r, candidate row s), the texts or the cosine
similarities it needs and returns a boolean mask: True = the rule flags s's positive as a false
negative of r's anchor (masks it out of r's softmax, or refuses it as a negative).

- ``exact-identity``: s's positive is the same string as r's anchor or r's positive. This is what
  sentence-transformers' ``NoDuplicatesBatchSampler`` keeps out of a batch (it compares raw strings).
- ``gist-guide``: ``GISTEmbedLoss(margin_strategy="absolute", margin=0.0)`` with the default model as
  guide: masked when ``sim(a, c) > sim(a, p) - margin``, or for ``"relative"``
  ``sim(a, c) > sim(a, p) - |sim(a, p)| * margin`` (sentence_transformers/sentence_transformer/losses/
  gist_embed.py, ``mask_false_negatives``). Strictly greater: a candidate scoring exactly like the
  positive (an exact duplicate of it) is kept as a negative.
- ``topk-percpos-95``: NV-Retriever's TopK-PercPos at 95%, as sentence-transformers'
  ``mine_hard_negatives(relative_margin=0.05)``: refused when
  ``score > positive_score - |positive_score| * 0.05`` (sentence_transformers/util/hard_negatives.py).

Similarities are cosines of normalised embeddings (float32, as the library computes them); each
distinct text of a case is embedded once.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

Embedder = Callable[[list[str]], np.ndarray]

GIST_MARGIN = 0.0
GIST_MARGIN_STRATEGY = "absolute"
PERCPOS_RELATIVE_MARGIN = 0.05


def gist_mask(
    sim_ac: np.ndarray, sim_ap: np.ndarray, margin: float = GIST_MARGIN, margin_strategy: str = GIST_MARGIN_STRATEGY
) -> np.ndarray:
    """GISTEmbedLoss's guide rule: True where the candidate is masked as a false negative."""
    if margin_strategy == "absolute":
        return sim_ac > (sim_ap - margin)
    if margin_strategy == "relative":
        return sim_ac > (sim_ap - np.abs(sim_ap) * margin)
    raise ValueError(f"margin_strategy must be 'absolute' or 'relative', got {margin_strategy!r}")


def relative_margin_mask(
    sim_ac: np.ndarray, sim_ap: np.ndarray, relative_margin: float = PERCPOS_RELATIVE_MARGIN
) -> np.ndarray:
    """``mine_hard_negatives(relative_margin=...)``: True where the candidate is refused as a negative."""
    return sim_ac > (sim_ap - np.abs(sim_ap) * relative_margin)


def exact_identity_mask(
    anchor_text: Sequence[str], positive_text: Sequence[str], candidate_text: Sequence[str]
) -> np.ndarray:
    """True where the candidate is the same string as the anchor or its positive (NoDuplicatesBatchSampler)."""
    return np.fromiter(
        (c == a or c == p for a, p, c in zip(anchor_text, positive_text, candidate_text, strict=True)),
        dtype=bool,
        count=len(candidate_text),
    )


@dataclass(frozen=True)
class PairTexts:
    """Texts of every truth record: r's anchor, r's own positive, s's positive (the candidate)."""

    anchor: list[str]
    positive: list[str]
    candidate: list[str]


def pair_texts(rows: dict[str, tuple[str, str]], anchor_ids: Sequence[str], candidate_ids: Sequence[str]) -> PairTexts:
    """``rows`` maps a row id to (anchor, positive)."""
    return PairTexts(
        anchor=[rows[a][0] for a in anchor_ids],
        positive=[rows[a][1] for a in anchor_ids],
        candidate=[rows[c][1] for c in candidate_ids],
    )


def similarities(texts: PairTexts, embed: Embedder) -> tuple[np.ndarray, np.ndarray]:
    """(sim(anchor, candidate), sim(anchor, own positive)) per record; each distinct text embedded once."""
    index: dict[str, int] = {}
    for text in (*texts.anchor, *texts.positive, *texts.candidate):
        index.setdefault(text, len(index))
    distinct = list(index)
    emb = np.asarray(embed(distinct), dtype=np.float32)
    if emb.ndim != 2 or emb.shape[0] != len(distinct):
        raise ValueError(f"embedder returned shape {emb.shape} for {len(distinct)} texts")
    norms = np.linalg.norm(emb, axis=1, keepdims=True)
    emb = emb / np.where(norms == 0, 1, norms).astype(np.float32)
    a = emb[[index[t] for t in texts.anchor]]
    p = emb[[index[t] for t in texts.positive]]
    c = emb[[index[t] for t in texts.candidate]]
    return np.einsum("ij,ij->i", a, c), np.einsum("ij,ij->i", a, p)


PEERS: dict[str, str] = {
    "exact-identity": "candidate string == anchor or positive (NoDuplicatesBatchSampler)",
    "gist-guide": f"GISTEmbedLoss guide, {GIST_MARGIN_STRATEGY} margin {GIST_MARGIN}: sim(a,c) > sim(a,p) - {GIST_MARGIN}",
    "topk-percpos-95": f"mine_hard_negatives relative_margin={PERCPOS_RELATIVE_MARGIN}: "
    f"sim(a,c) > sim(a,p) - |sim(a,p)| * {PERCPOS_RELATIVE_MARGIN}",
}


def run_peers(texts: PairTexts, embed: Embedder) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """Every peer's mask, aligned with the records; also returns sim(anchor, candidate) for diagnostics."""
    sim_ac, sim_ap = similarities(texts, embed)
    masks = {
        "exact-identity": exact_identity_mask(texts.anchor, texts.positive, texts.candidate),
        "gist-guide": gist_mask(sim_ac, sim_ap),
        "topk-percpos-95": relative_margin_mask(sim_ac, sim_ap),
    }
    return masks, sim_ac


def default_embedder(batch_size: int = 64, device: str = "cpu", cache: Path | None = None) -> Embedder:
    """The scan's default model (all-MiniLM-L6-v2, verified and loaded offline by contrast_audit.model).

    With ``cache`` (an ``.npz`` file), vectors are kept by the text's sha256 so a rerun embeds only
    new texts (the vectors are the model's own; the cache only saves the time)."""
    from contrast_audit.model import load, resolve

    model = load(resolve(None), device=device)

    def encode(texts: list[str]) -> np.ndarray:
        return model.encode(
            texts, batch_size=batch_size, normalize_embeddings=True, convert_to_numpy=True, show_progress_bar=False
        )

    if cache is None:
        return encode

    def embed(texts: list[str]) -> np.ndarray:
        keys = [hashlib.sha256(t.encode("utf-8")).hexdigest() for t in texts]
        stored: dict[str, np.ndarray] = {}
        if cache.is_file():
            with np.load(cache) as data:
                stored = dict(zip(data["keys"].tolist(), data["vectors"], strict=True))
        missing = sorted({k: t for k, t in zip(keys, texts, strict=True) if k not in stored}.items())
        if missing:
            vectors = encode([t for _, t in missing])
            stored.update({k: v for (k, _), v in zip(missing, vectors, strict=True)})
            cache.parent.mkdir(parents=True, exist_ok=True)
            tmp = cache.with_name(cache.name + ".tmp.npz")
            np.savez(tmp, keys=np.array(list(stored)), vectors=np.stack(list(stored.values())))
            os.replace(tmp, cache)
        return np.stack([stored[k] for k in keys])

    return embed
