"""The first stage of embedding evidence: which rows the full model must embed for a batch plan.

The embedding detectors flag a pair only at a high cosine (0.825 by default), and in a batch plan a
text is only ever compared with the texts of its batch. A static model scores every such comparison
for almost nothing, and the full model embeds only the rows of a comparison the static model finds
near, the rows whose own hard negative it finds near the row's anchor or positive (mislabelled
negatives are judged in every row), and a fixed sample; every other comparison is reported as not
compared by the full model.

- **The static model** is the full model's own input token embeddings (no forward pass, no torch,
  nothing downloaded), each token weighted by SIF on its vocabulary rank as model2vec weights its
  distilled tables (``SIF / (SIF + p(rank))``, Zipf's p), a text's vector the mean of its tokens'.
- **A map fitted on the data**: the full model embeds the texts of a sample of rows (the
  ``SAMPLE_ROWS`` whose texts' cache keys hash smallest, so an appended file keeps its sample), and a
  ridge regression maps static vectors to the full model's. The sample's rows also serve the
  calibrations that read the rows' own anchor-positive cosines. Cosines of mapped vectors follow the full
  model's on this data (in-batch pairs of the judged sentence and caption sets: correlation 0.63-0.78
  mapped, 0.38-0.48 unmapped).
- **The bar** is calibrated on the sample, cross-fitted (the map of one half scores the pairs of the
  other): the ``MISS_QUANTILE`` quantile of the mapped cosines of the sample pairs whose full cosine
  is within ``BAR_MARGIN`` of the lowest detector bar. A comparison under it would be missed by the
  full model at most that often, by the sample's measure.

The full model embeds every text, as before, for data of fewer than ``MIN_TEXTS`` distinct texts or
whose sample holds fewer than ``MIN_SAMPLE_TEXTS``, documents of a median over ``LONG_DOCUMENTS``
tokens, the margin rule or pair evidence (bars under the embedding detectors'), role prompts that
differ, models without a word-embedding table, and commands without a batch plan
(``EmbeddingStore.first_stage_info["reason"]`` says which).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

SAMPLE_ROWS = 500  # rows whose texts the full model embeds to fit the map and the bar
MIN_TEXTS = 4 * SAMPLE_ROWS  # below this, the sample is most of the data: the full model embeds it all
MIN_SAMPLE_TEXTS = 400  # a map of 385 weights per dimension needs at least about this many texts
SIF = 1e-4  # model2vec's SIF coefficient
RIDGE = 0.3  # ridge penalty of the map
MISS_QUANTILE = 0.01  # share of near comparisons the bar may miss, by the sample's measure
BAR_MARGIN = 0.05  # "near": within this of the lowest detector bar
MIN_NEAR = 30  # sample pairs needed to read the quantile; fewer: a linear fit on all pairs, 2 s.d. down
BAR_RANGE = (0.3, 0.9)
LONG_DOCUMENTS = 48  # tokens: paragraphs rather than sentences. Documents whose median is longer look alike
# to a static model (the mean of many token vectors): on forum bodies (median 56 tokens), abstracts (256)
# and library records (148) it found 92-100% of rows near, and the full model embeds everything at less
# cost in one pass than in two. Sentence data measured: medians of 10 to 26 tokens.
ENCODE_CHUNK = 8192  # texts per static encoding step (bounds the tokenizer output held at once)
WORD_TABLE = "embeddings.word_embeddings.weight"


@dataclass
class StaticModel:
    """Mean of SIF-weighted input token embeddings, read with safetensors and tokenizers."""

    table: np.ndarray
    tokenizer: Any

    @classmethod
    def load(cls, directory: Path) -> StaticModel | None:
        """The model's static form, or None when it has no ``tokenizer.json`` or word-embedding table."""
        weights, tok_file = directory / "model.safetensors", directory / "tokenizer.json"
        if not weights.is_file() or not tok_file.is_file():
            return None
        from safetensors import safe_open
        from tokenizers import Tokenizer

        with safe_open(str(weights), framework="numpy") as handle:
            name = next((k for k in handle.keys() if k.endswith(WORD_TABLE)), None)
            if name is None:
                return None
            table = np.asarray(handle.get_tensor(name), dtype=np.float32)
        tokenizer = Tokenizer.from_file(str(tok_file))
        tokenizer.no_padding()
        tokenizer.enable_truncation(_max_length(directory))
        if tokenizer.get_vocab_size() > table.shape[0]:
            return None
        rank = np.arange(2, table.shape[0] + 2, dtype=np.float64)
        p = (1.0 / rank) / (1.0 / rank).sum()
        return cls((table * (SIF / (SIF + p))[:, None]).astype(np.float32), tokenizer)

    def encode(
        self, texts: list[str], on_ids: Callable[[int, list[list[int]]], None] | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """Mean token vector per text (unnormalised; zeros for a text without tokens), and its token count;
        ``on_ids(start, ids)`` is given each chunk's token ids (``encoders.DocumentFrequency.add``).

        Each chunk of texts is one sparse (texts x vocabulary) matrix of 1/length weights times the table,
        so no (tokens x dimensions) array is ever gathered."""
        import scipy.sparse as sp

        out = np.zeros((len(texts), self.table.shape[1]), dtype=np.float32)
        counts = np.zeros(len(texts), dtype=np.int64)
        for lo in range(0, len(texts), ENCODE_CHUNK):
            encoded = self.tokenizer.encode_batch(texts[lo : lo + ENCODE_CHUNK], add_special_tokens=False)
            if on_ids is not None:
                on_ids(lo, [e.ids for e in encoded])
            lengths = np.fromiter((len(e.ids) for e in encoded), dtype=np.int64, count=len(encoded))
            counts[lo : lo + lengths.shape[0]] = lengths
            total = int(lengths.sum())
            if total == 0:
                continue
            ids = np.fromiter((i for e in encoded for i in e.ids), dtype=np.int64, count=total)
            weights = np.repeat(1.0 / np.maximum(lengths, 1), lengths).astype(np.float32)
            indptr = np.concatenate([[0], np.cumsum(lengths)])
            mean = sp.csr_matrix((weights, ids, indptr), shape=(lengths.shape[0], self.table.shape[0]))
            out[lo : lo + lengths.shape[0]] = mean @ self.table
        return out, counts


def _max_length(directory: Path) -> int:
    try:
        return int(json.loads((directory / "sentence_bert_config.json").read_text())["max_seq_length"])
    except (OSError, ValueError, KeyError, TypeError):
        return 512


def sample_rows(anchor_keys: np.ndarray, positive_keys: np.ndarray, size: int | None = None) -> np.ndarray:
    """Indexes of the ``size`` (``SAMPLE_ROWS``) rows whose two texts' cache keys hash smallest together:
    the same rows however the file grows, except for new rows that sort among them."""
    size = SAMPLE_ROWS if size is None else size
    n = anchor_keys.shape[0]
    if n <= size:
        return np.arange(n)
    a = np.frombuffer(np.ascontiguousarray(anchor_keys).tobytes(), dtype=">u8")[::2].astype(np.uint64)
    p = np.frombuffer(np.ascontiguousarray(positive_keys).tobytes(), dtype=">u8")[::2].astype(np.uint64)
    # The positive's key rotated by a bit: a row whose positive is its anchor (SimCSE) does not hash to 0.
    mixed = a ^ ((p << np.uint64(1)) | (p >> np.uint64(63)))
    return np.sort(np.argsort(mixed, kind="stable")[:size])


def _unit(v: np.ndarray) -> np.ndarray:
    return v / np.maximum(np.linalg.norm(v, axis=1, keepdims=True), 1e-12)


def _fit(static: np.ndarray, full: np.ndarray) -> np.ndarray:
    x = np.c_[static, np.ones(static.shape[0], dtype=np.float32)].astype(np.float64)
    gram = x.T @ x + RIDGE * np.eye(x.shape[1])
    return np.linalg.solve(gram, x.T @ full.astype(np.float64)).astype(np.float32)


def _apply(weights: np.ndarray, static: np.ndarray) -> np.ndarray:
    return _unit(static @ weights[:-1] + weights[-1])


@dataclass
class Map:
    """A fitted first stage without its vectors: the ridge map from static vectors to the full model's
    space, and the bar a comparison must reach. A streamed audit fits it once and maps each run's texts."""

    weights: np.ndarray
    bar: float
    info: dict[str, Any] = field(default_factory=dict)

    def apply(self, static: np.ndarray) -> np.ndarray:
        """Unit mapped vectors (float16: half the memory of float32) of ``static`` vectors."""
        vectors = np.empty(static.shape[:1] + (self.weights.shape[1],), dtype=np.float16)
        for lo in range(0, static.shape[0], ENCODE_CHUNK):
            vectors[lo : lo + ENCODE_CHUNK] = _apply(self.weights, static[lo : lo + ENCODE_CHUNK])
        return vectors


def fit_map(static: np.ndarray, full: np.ndarray, detector_bar: float) -> Map:
    """The map from the sample texts' ``static`` vectors to their ``full`` ones (row for row), and the
    bar calibrated on the sample, cross-fitted: the map of one half scores the pairs of the other."""
    half = static.shape[0] // 2
    parts = (np.arange(half), np.arange(half, static.shape[0]))
    full_cos, static_cos = [], []
    for train, test in (parts, parts[::-1]):
        mapped = _apply(_fit(static[train], full[train]), static[test])
        upper = np.triu_indices(test.shape[0], 1)
        full_cos.append((full[test] @ full[test].T)[upper])
        static_cos.append((mapped @ mapped.T)[upper])
    f, s = np.concatenate(full_cos), np.concatenate(static_cos)
    near = f >= detector_bar - BAR_MARGIN
    if near.sum() >= MIN_NEAR:
        bar = float(np.quantile(s[near], MISS_QUANTILE))
        how = f"the {MISS_QUANTILE:g} quantile of {int(near.sum())} sample pairs at full cosine >= {detector_bar - BAR_MARGIN:.3f}"
    elif np.ptp(f) > 1e-6:
        slope, intercept = np.polyfit(f, s, 1)
        spread = float(np.std(s - (intercept + slope * f)))
        bar = float(intercept + slope * (detector_bar - BAR_MARGIN) - 2 * spread)
        how = f"a linear fit on {f.shape[0]} sample pairs (only {int(near.sum())} near), 2 s.d. under it"
    else:  # every sample pair scores alike: nothing to fit, so compare at the lowest bar
        bar, how = BAR_RANGE[0], f"the lowest bar: the {f.shape[0]} sample pairs all score alike"
    bar = float(np.clip(bar, *BAR_RANGE))
    return Map(_fit(static, full), round(bar, 4), {"bar_from": how})


def select_rows(
    vectors: np.ndarray,
    bar: float,
    texts_of_rows: np.ndarray,
    cross_rows: np.ndarray,
    rows: np.ndarray,
    offsets: np.ndarray,
) -> np.ndarray:
    """Rows with a text whose mapped static cosine to a text of another row of a batch reaches ``bar``.

    ``texts_of_rows`` is (rows, slots) of text ids, -1 where a row has fewer; slot 0 is the anchor.
    Anchors are compared with anchors and documents with documents; an anchor with another row's
    documents only where either row is in ``cross_rows`` (its texts are alike: the embedding detector
    compares a candidate with the anchor there). Identical texts are not compared: the exact detector
    reads them."""
    selected = np.zeros(texts_of_rows.shape[0], dtype=bool)
    slots = texts_of_rows.shape[1]
    is_anchor = np.zeros(slots, dtype=bool)
    is_anchor[0] = True
    for g in range(offsets.shape[0] - 1):
        batch = rows[offsets[g] : offsets[g + 1]]
        tids = texts_of_rows[batch].reshape(-1)
        owner = np.repeat(np.arange(batch.shape[0]), slots)
        anchor_slot = np.tile(is_anchor, batch.shape[0])
        live = tids >= 0
        tids, owner, anchor_slot = tids[live], owner[live], anchor_slot[live]
        v = vectors[tids].astype(np.float32)
        near = (v @ v.T) >= bar
        near &= owner[:, None] != owner[None, :]
        near &= tids[:, None] != tids[None, :]
        cross = cross_rows[batch][owner]
        near &= (anchor_slot[:, None] == anchor_slot[None, :]) | cross[:, None] | cross[None, :]
        hit = near.any(axis=1)
        selected[batch[np.unique(owner[hit])]] = True
    return selected


def own_negatives_near(vectors: np.ndarray, bar: float, texts_of_rows: np.ndarray) -> np.ndarray:
    """Rows with a hard negative whose mapped static cosine to the row's own anchor or positive reaches
    ``bar``: a mislabelled negative is judged against them in every row, whatever the plan."""
    near = np.zeros(texts_of_rows.shape[0], dtype=bool)
    anchor, positive = texts_of_rows[:, 0], texts_of_rows[:, 1]
    for slot in range(2, texts_of_rows.shape[1]):
        neg = texts_of_rows[:, slot]
        has = np.flatnonzero((neg >= 0) & (neg != anchor) & (neg != positive))
        if has.size == 0:
            continue
        v = vectors[neg[has]].astype(np.float32)
        to_anchor = np.einsum("ij,ij->i", v, vectors[anchor[has]].astype(np.float32))
        to_positive = np.einsum("ij,ij->i", v, vectors[positive[has]].astype(np.float32))
        near[has[(to_anchor >= bar) | (to_positive >= bar)]] = True
    return near
