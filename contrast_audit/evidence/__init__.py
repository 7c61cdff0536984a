"""Evidence that two texts are equivalent: one detector per file, discovered from a registry."""

from __future__ import annotations

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
from contrast_audit.evidence.exact import ExactDetector
from contrast_audit.evidence.linked import LinkedDetector
from contrast_audit.evidence.same_anchor import SameAnchorDetector

REGISTRY: dict[str, type] = {
    cls.name: cls for cls in (ExactDetector, SameAnchorDetector, LinkedDetector, DeclaredDetector)
}


def default_detectors(cfg: AuditConfig) -> list[Detector]:
    """The detectors a scan runs, configured from ``cfg``."""
    from dataclasses import asdict

    detectors: list[Detector] = [
        ExactDetector(asdict(cfg.normalise)),
        SameAnchorDetector(),
        DeclaredDetector(),
    ]
    if cfg.link.max_hops > 0:
        detectors.append(LinkedDetector(cfg.link.max_hops))
    return detectors


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
