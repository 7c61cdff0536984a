"""An optional second stage: a sentence-transformers ``CrossEncoder`` rescores what the detectors flag.

A bi-encoder compares two texts through two vectors made apart; a cross-encoder reads both texts at
once and tells a paraphrase from a same-topic sentence far better, at a cost per pair. So it rescores
only the pairs the detectors found at ``likely`` or ``suspect`` (``certain`` evidence is identity or
the data's own labels): each is ``likely`` when the cross-encoder scores it at or above the bar, and
``suspect`` below it. The verifier scores the compared text (the anchor; for ``doc_to_*`` directions
the positive) against the candidate.

The bar, like the embedding bars, comes from the data's own pairs: the ``quantile`` of the
cross-encoder's scores on up to ``CALIBRATION_PAIRS`` seeded rows' own (anchor, positive) pairs, held at
or above the 99th percentile of its scores on as many random pairs of rows, so a loose data set cannot
make everything equivalent. An explicit ``threshold`` wins. Any local ``CrossEncoder`` directory
with one output (a duplicate-question, STS or relevance model) can serve; nothing is downloaded.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from contrast_audit.calibration import random_row_pairs
from contrast_audit.corpus import ANCHOR_ROLE, POSITIVE_ROLE, Corpus
from contrast_audit.errors import ModelError
from contrast_audit.evidence.base import LIKELY, SUSPECT, Hits, Pairs
from contrast_audit.evidence.blocks import role_texts

CALIBRATION_PAIRS = 256
FLOOR_QUANTILE = 0.99


class Verifier:
    name = "verifier"
    description = "a cross-encoder rescores the likely and suspect candidates against a bar from the data's own pairs"
    RULES = ("cross-encoder score at or above the bar", "cross-encoder score below the bar")

    def __init__(
        self,
        path: str,
        threshold: float | None = None,
        quantile: float = 0.5,
        batch_size: int = 32,
        device: str | None = None,
        seed: int = 0,
    ) -> None:
        self.path = path
        self.explicit = threshold
        self.quantile = quantile
        self.batch_size = batch_size
        self.device = device
        self.seed = seed
        self.threshold = float("nan") if threshold is None else float(threshold)
        self.scored = 0
        self.calibration: dict[str, Any] = {}

    def check(self) -> None:
        """Refuse a path that cannot be a model directory before any text is embedded."""
        if not Path(self.path).expanduser().is_dir():
            raise ModelError(
                f"verifier {self.path}: not a directory",
                fix="name a local sentence-transformers CrossEncoder directory (nothing is downloaded)",
            )

    def _load(self):
        self.check()
        directory = Path(self.path).expanduser()
        from sentence_transformers import CrossEncoder

        try:
            model = CrossEncoder(str(directory), device=self.device, local_files_only=True)
        except Exception as exc:  # a broken or foreign directory: a user error, not ours
            raise ModelError(
                f"verifier {self.path}: could not be loaded as a CrossEncoder ({type(exc).__name__}: {exc})",
                fix="name a directory saved by sentence-transformers' CrossEncoder.save_pretrained",
            ) from None
        labels = getattr(model, "num_labels", 1)
        if labels != 1:
            raise ModelError(
                f"verifier {self.path}: the model gives {labels} scores per pair; a verifier needs one",
                fix="use a CrossEncoder with one output (duplicate-question, STS or relevance models)",
            )
        return model

    def prepare(self, corpus: Corpus) -> None:
        self.corpus = corpus
        self.model = self._load()
        texts = corpus.texts.get_column("text")
        own = np.flatnonzero(corpus.anchor != corpus.positive)
        rng = np.random.default_rng(self.seed)
        if own.shape[0] > CALIBRATION_PAIRS:
            own = np.sort(rng.choice(own, CALIBRATION_PAIRS, replace=False))
        i, j = random_row_pairs(corpus.n_rows, own.shape[0], self.seed)
        positive = self.score(texts.gather(corpus.anchor[own]).to_list(), texts.gather(corpus.positive[own]).to_list())
        random = self.score(texts.gather(corpus.anchor[i]).to_list(), texts.gather(corpus.positive[j]).to_list())
        if self.explicit is None:
            if positive.shape[0] == 0:
                raise ModelError(
                    "verifier: no row has a positive of its own to calibrate the bar on",
                    fix="give the bar with --verifier-threshold",
                )
            bar = float(np.quantile(positive, self.quantile))
            floor = float(np.quantile(random, FLOOR_QUANTILE)) if random.shape[0] else bar
            self.threshold = max(bar, floor)
        self.calibration = {
            "rows": int(positive.shape[0]),
            "random_pairs": int(random.shape[0]),
            "positive_quantile": None
            if positive.shape[0] == 0
            else round(float(np.quantile(positive, self.quantile)), 4),
            "random_q99": None if random.shape[0] == 0 else round(float(np.quantile(random, FLOOR_QUANTILE)), 4),
        }

    def score(self, left: list[str], right: list[str]) -> np.ndarray:
        if not left:
            return np.zeros(0, dtype=np.float64)
        out = self.model.predict(
            list(zip(left, right, strict=True)), batch_size=self.batch_size, show_progress_bar=False
        )
        self.scored += len(left)
        return np.asarray(out, dtype=np.float64).reshape(-1)

    def verify(self, pairs: Pairs, checked: np.ndarray) -> Hits:
        """Scores the pairs marked ``checked``: ``likely`` at or above the bar, ``suspect`` below."""
        c = self.corpus
        idx = np.flatnonzero(checked)
        score = np.zeros(len(pairs), dtype=np.float64)
        if idx.size:
            compared_role = POSITIVE_ROLE if pairs.direction.startswith("doc_to") else ANCHOR_ROLE
            texts = c.texts.get_column("text")
            left = texts.gather(role_texts(c, pairs.anchor_row[idx], compared_role)).to_list()
            right = texts.gather(pairs.cand_tid[idx]).to_list()
            score[idx] = self.score(left, right)
        passed = score >= self.threshold
        return Hits(
            self.name,
            checked.copy(),
            score,
            self.threshold,
            np.where(passed, LIKELY, SUSPECT).astype(np.int8),
            np.where(passed, 0, 1).astype(np.int64),
            self.RULES,
        )

    def info(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "threshold": None if np.isnan(self.threshold) else round(self.threshold, 4),
            "bar": "explicit"
            if self.explicit is not None
            else f"quantile {self.quantile:g} of the rows' own pairs' "
            f"scores, at least the {FLOOR_QUANTILE:g} quantile of random pairs'",
            "calibration": self.calibration,
            "scored": self.scored,
        }
