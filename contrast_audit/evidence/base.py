"""The detector interface: each detector looks at candidate pairs and says which are equivalent
to the anchor's known positives, with a score and the threshold it used."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

import numpy as np

from contrast_audit.corpus import Corpus

if TYPE_CHECKING:
    from contrast_audit.evidence.blocks import Slots

CERTAIN, LIKELY, SUSPECT = 2, 1, 0
SEVERITY_NAMES = {CERTAIN: "certain", LIKELY: "likely", SUSPECT: "suspect"}
SEVERITIES = ("certain", "likely", "suspect")


@dataclass(frozen=True)
class Pairs:
    """Candidate pairs of one comparison direction.

    ``anchor_row`` is the row whose anchor (or, for ``doc_to_*``, whose positive) is compared;
    ``cand_row``/``cand_role``/``cand_tid`` say which text of which row is the candidate. ``at``,
    where the pairs come from global batches, places each pair in its batch's similarity matrices
    (``blocks.BatchBlock``); pairs without it (a row's own hard negatives, reference data) have
    their similarities computed pair by pair.
    """

    direction: str
    anchor_row: np.ndarray
    cand_row: np.ndarray
    cand_role: np.ndarray
    cand_tid: np.ndarray
    at: Slots | None = None

    def __len__(self) -> int:
        return int(self.anchor_row.shape[0])

    def take(self, idx: np.ndarray) -> Pairs:
        """The pairs at positions ``idx``."""
        return Pairs(
            self.direction,
            self.anchor_row[idx],
            self.cand_row[idx],
            self.cand_role[idx],
            self.cand_tid[idx],
            None if self.at is None else self.at.take(idx),
        )


@dataclass(frozen=True)
class Hits:
    """A detector's verdict on every pair: ``mask`` marks equivalent pairs. A detector with more than
    one rule names them in ``rules`` and says in ``rule`` (an index into ``rules``, per pair) which
    one set each pair's severity; the report records it as the finding's ``severity_rule``. A guarded
    detector (``guards.Guarded``) names its guards in ``guards`` and says in ``vetoed`` (per pair, an
    index into ``guards``, -1 for none) which guard vetoed a match it would otherwise have made, with
    the guard's best value over the texts it compared in ``veto_value`` and its bar in ``guard_bars``."""

    kind: str
    mask: np.ndarray
    score: np.ndarray
    threshold: float
    severity: np.ndarray
    rule: np.ndarray | None = None
    rules: tuple[str, ...] = ()
    vetoed: np.ndarray | None = None
    veto_value: np.ndarray | None = None
    guards: tuple[str, ...] = ()
    guard_bars: tuple[float, ...] = ()

    def rule_names(self) -> list[str]:
        """``kind`` for a one-rule detector, else ``kind: rule`` for each of its rules."""
        return [f"{self.kind}: {r}" for r in self.rules] if self.rules else [self.kind]


class Detector(Protocol):
    name: ClassVar[str]
    description: ClassVar[str]

    def prepare(self, corpus: Corpus) -> None: ...

    def detect(self, pairs: Pairs) -> Hits: ...

    def info(self) -> dict[str, Any]: ...


def constant_hits(kind: str, mask: np.ndarray, threshold: float, severity: int, score: float = 1.0) -> Hits:
    return Hits(
        kind=kind,
        mask=mask,
        score=np.full(mask.shape[0], score, dtype=np.float64),
        threshold=threshold,
        severity=np.full(mask.shape[0], severity, dtype=np.int8),
    )
