"""``exact``: the candidate is the same normalised text as the anchor or its positive."""

from __future__ import annotations

from typing import Any

from contrast_audit.corpus import Corpus
from contrast_audit.evidence.base import CERTAIN, Hits, Pairs, constant_hits


class ExactDetector:
    name = "exact"
    description = "candidate is identical, after normalisation, to the anchor row's anchor or positive"

    def __init__(self, normalisation: dict[str, Any] | None = None) -> None:
        self.normalisation = normalisation or {}

    def prepare(self, corpus: Corpus) -> None:
        self.corpus = corpus

    def detect(self, pairs: Pairs) -> Hits:
        c = self.corpus
        mask = (pairs.cand_tid == c.anchor[pairs.anchor_row]) | (pairs.cand_tid == c.positive[pairs.anchor_row])
        return constant_hits(self.name, mask, 1.0, CERTAIN)

    def info(self) -> dict[str, Any]:
        return {"normalisation": self.normalisation}
