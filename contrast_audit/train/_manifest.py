"""The manifest API the trainer reads (``contrast_audit.plan.manifest``), in one place."""

from __future__ import annotations

from contrast_audit.plan.manifest import (
    Manifest,
    ManifestBatch,
    check_fingerprint,
    data_fingerprint,
    default_role,
    read_manifest,
)

__all__ = ["Manifest", "ManifestBatch", "check_fingerprint", "data_fingerprint", "default_role", "read_manifest"]
