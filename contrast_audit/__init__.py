"""contrast-audit: find the false negatives that in-batch contrastive training will see."""

from __future__ import annotations

from contrast_audit._version import __version__
from contrast_audit.api import AuditResult, audit

__all__ = ["AuditResult", "__version__", "audit"]
