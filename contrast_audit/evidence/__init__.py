"""Evidence that two texts are equivalent: one detector per file, discovered from a registry."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict
from typing import Any

from contrast_audit.config import AuditConfig
from contrast_audit.evidence.base import (
    CERTAIN,
    LIKELY,
    SEVERITIES,
    SEVERITY_NAMES,
    SUSPECT,
    Detector,
    Hits,
    Pairs,
)
from contrast_audit.evidence.declared import DeclaredDetector
from contrast_audit.evidence.embedding import (  # noqa: E402
    AnchorEmbeddingDetector,
    EmbeddingDetector,
    MarginDetector,
    PairDetector,
)
from contrast_audit.evidence.exact import ExactDetector
from contrast_audit.evidence.linked import LinkedDetector
from contrast_audit.evidence.minhash import MinHashDetector  # noqa: E402
from contrast_audit.evidence.same_anchor import SameAnchorDetector

REGISTRY: dict[str, type] = {
    cls.name: cls
    for cls in (
        ExactDetector,
        SameAnchorDetector,
        LinkedDetector,
        DeclaredDetector,
        MinHashDetector,
        EmbeddingDetector,
        AnchorEmbeddingDetector,
        MarginDetector,
        PairDetector,
    )
}


def default_detectors(
    cfg: AuditConfig,
    progress: Callable[[str, int], Callable[[int], None]] | None = None,
    encoder: Callable[..., Any] | None = None,
    shared: Any = None,
    global_ids: Any = None,
) -> list[Detector]:
    """The detectors a scan runs, configured from ``cfg``; ``encoder`` computes the vectors the cache
    lacks in place of this process (``EmbeddingStore.encoder``). In a run of a streamed audit, ``shared``
    is what was decided over every text (``embed.Shared``) and ``global_ids`` the run's text ids in it."""
    detectors: list[Detector] = [
        ExactDetector(asdict(cfg.normalise)),
        SameAnchorDetector(),
        DeclaredDetector(),
    ]
    semantic: list[Detector] = []
    store = margin = pair = None
    if cfg.minhash.enabled:
        m = cfg.minhash
        semantic.append(MinHashDetector(m.threshold, m.num_perm, m.shingle, m.ngram, m.seed))
    if cfg.embedding.enabled:
        from contrast_audit.embed import EmbeddingStore

        e = cfg.embedding
        store = EmbeddingStore(e, progress, encoder=encoder, shared=shared, global_ids=global_ids)
        semantic += [
            EmbeddingDetector(store, e.positive_threshold, e.margin_doc_ratio),
            AnchorEmbeddingDetector(store, e.anchor_threshold),
        ]
        margin = MarginDetector(
            store,
            e.absolute_margin,
            e.relative_margin,
            e.margin_support,
            e.margin,
            e.margin_doc_ratio,
            e.above_positive,
        )
        if e.pair_evidence:
            pair = PairDetector(
                store,
                e.calibration,
                e.calibration_quantile,
                e.calibration_floor,
                e.pair_threshold,
                e.positive_threshold,
            )
    if cfg.link.max_hops > 0:
        detectors.append(LinkedDetector(cfg.link.max_hops, store))
    if cfg.embedding.verifier:
        from contrast_audit.evidence.verifier import Verifier

        e = cfg.embedding
        verifiers = [Verifier(e.verifier, e.verifier_threshold, e.verifier_quantile, device=e.device)]
        verifiers[0].check()
    else:
        verifiers = []
    from contrast_audit.evidence.guards import Guarded

    numbers, aligned = _guards(cfg, store)
    # A near-identical embedding match is left to the hard guards (numbers, names, negation): wording
    # guards would veto "sliced by a woman" / "sliced by the woman" as readily as a change of fact.
    near = cfg.policy.near_identical if cfg.policy.near_identical > 0 else None
    guarded = (
        [Guarded(d, numbers + aligned, near if d.name == "embedding" else None) for d in semantic]
        if numbers + aligned
        else semantic
    )
    # The margin rule is a relevance claim, not one of near-duplication (two answers to one question
    # need not share wording): the number guard only.
    if margin is not None:
        guarded.append(Guarded(margin, numbers) if numbers else margin)
    # Pair evidence rests on four comparisons of two rows, not on one pair of texts being worded
    # alike (two captions of one image rarely are): the number guard only, like the margin rule.
    if pair is not None:
        guarded.append(Guarded(pair, numbers) if numbers else pair)
    return detectors + guarded + verifiers


def _guards(cfg: AuditConfig, store) -> tuple[list, list]:
    """The hard guards (number, entity, negation); the soft ones, of wording: word order, and alignment
    when embeddings are on (``store``)."""
    policy = cfg.policy
    numbers: list = []
    aligned: list = []
    if policy.number_guard_words > 0:
        from contrast_audit.evidence.numbers import NumberGuard

        numbers.append(NumberGuard(policy.number_guard_words))
    if policy.entity_guard_words > 0:
        from contrast_audit.evidence.guards import EntityGuard

        numbers.append(EntityGuard(policy.entity_guard_words))
    if policy.negation_guard_words > 0:
        from contrast_audit.evidence.guards import NegationGuard

        numbers.append(NegationGuard(policy.negation_guard_words))
    if policy.word_order_threshold > 0:
        from contrast_audit.evidence.guards import OrderGuard

        aligned.append(OrderGuard(policy.word_order_threshold, policy.alignment_words))
    if store is not None and policy.alignment_threshold > 0:
        from contrast_audit.evidence.guards import AlignmentGuard
        from contrast_audit.tokens import TokenStore

        tokens = TokenStore(store, policy.alignment_match)
        aligned.append(AlignmentGuard(tokens, policy.alignment_threshold, policy.alignment_words))
    return numbers, aligned


__all__ = [
    "CERTAIN",
    "LIKELY",
    "REGISTRY",
    "SEVERITIES",
    "SEVERITY_NAMES",
    "SUSPECT",
    "Detector",
    "Hits",
    "Pairs",
    "default_detectors",
]
