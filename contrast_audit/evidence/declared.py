"""``declared``: both rows carry the same ``group`` value, declared mutual positives."""

from __future__ import annotations

from typing import Any

from contrast_audit.corpus import POSITIVE_ROLE, Corpus
from contrast_audit.evidence.base import CERTAIN, Hits, Pairs, constant_hits


class DeclaredDetector:
    name = "declared"
    description = "candidate's row has the same group as the anchor's row"

    def prepare(self, corpus: Corpus) -> None:
        self.corpus = corpus

    def detect(self, pairs: Pairs) -> Hits:
        g = self.corpus.group
        ga = g[pairs.anchor_row]
        mask = (
            (ga >= 0)
            & (g[pairs.cand_row] == ga)
            & (pairs.cand_row != pairs.anchor_row)
            & (pairs.cand_role <= POSITIVE_ROLE)  # anchors and positives, never hard negatives
        )
        return constant_hits(self.name, mask, 1.0, CERTAIN)

    def info(self) -> dict[str, Any]:
        return {}
