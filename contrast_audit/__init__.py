"""contrast-audit: find the false negatives that in-batch contrastive training will see."""

from __future__ import annotations

__version__ = "0.1.0"

from contrast_audit.api import AuditResult, audit  # noqa: E402

__all__ = ["AuditResult", "__version__", "audit"]
