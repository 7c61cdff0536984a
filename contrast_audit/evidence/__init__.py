"""Evidence that two texts are equivalent: one detector per file, discovered from a registry."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict

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
from contrast_audit.evidence.embedding import AnchorEmbeddingDetector, EmbeddingDetector, MarginDetector  # noqa: E402
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
    )
}


def default_detectors(
    cfg: AuditConfig, progress: Callable[[str, int], Callable[[int], None]] | None = None
) -> list[Detector]:
    """The detectors a scan runs, configured from ``cfg``."""
    detectors: list[Detector] = [
        ExactDetector(asdict(cfg.normalise)),
        SameAnchorDetector(),
        DeclaredDetector(),
    ]
    if cfg.link.max_hops > 0:
        detectors.append(LinkedDetector(cfg.link.max_hops))
    semantic: list[Detector] = []
    store = margin = None
    if cfg.minhash.enabled:
        m = cfg.minhash
        semantic.append(MinHashDetector(m.threshold, m.num_perm, m.shingle, m.ngram, m.seed))
    if cfg.embedding.enabled:
        from contrast_audit.embed import EmbeddingStore

        e = cfg.embedding
        store = EmbeddingStore(e, progress)
        semantic += [EmbeddingDetector(store, e.positive_threshold), AnchorEmbeddingDetector(store, e.anchor_threshold)]
        margin = MarginDetector(store, e.absolute_margin, e.relative_margin, e.margin_support, e.margin)
    relevance = [margin] if margin is not None else []
    return detectors + _guarded(cfg, semantic, align_with=store) + _guarded(cfg, relevance, align_with=None)


def _guarded(cfg: AuditConfig, semantic: list[Detector], align_with) -> list[Detector]:
    """The guards of semantic evidence: the number guard for all of it; the alignment guard, with
    the embedding store ``align_with``, for near-duplicate claims only (the margin rule is a
    relevance claim: two answers to one question need not align)."""
    from contrast_audit.evidence.guards import Guarded

    guards: list = []
    policy = cfg.policy
    if policy.number_guard_words > 0:
        from contrast_audit.evidence.numbers import NumberGuard

        guards.append(NumberGuard(policy.number_guard_words))
    if align_with is not None and policy.alignment_threshold > 0:
        from contrast_audit.evidence.guards import AlignmentGuard
        from contrast_audit.tokens import TokenStore

        guards.append(AlignmentGuard(TokenStore(align_with), policy.alignment_threshold, policy.alignment_words))
    return [Guarded(d, guards) for d in semantic] if guards else semantic


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
