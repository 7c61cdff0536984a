"""``same-anchor``: two rows share their anchor text, so each one's positive answers the other."""

from __future__ import annotations

from typing import Any

from contrast_audit.corpus import POSITIVE_ROLE, Corpus
from contrast_audit.evidence.base import CERTAIN, Hits, Pairs, constant_hits


class SameAnchorDetector:
    name = "same-anchor"
    description = "candidate is the positive of another row whose anchor is the same text"

    def prepare(self, corpus: Corpus) -> None:
        self.corpus = corpus

    def detect(self, pairs: Pairs) -> Hits:
        a = self.corpus.anchor
        mask = (
            (pairs.cand_role == POSITIVE_ROLE)
            & (pairs.cand_row != pairs.anchor_row)
            & (a[pairs.cand_row] == a[pairs.anchor_row])
        )
        return constant_hits(self.name, mask, 1.0, CERTAIN)

    def info(self) -> dict[str, Any]:
        return {}
