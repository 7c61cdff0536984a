"""Batch manifests, the contract between the auditor and a trainer (docs/manifest.md).

- ``format``: the file itself (JSON Lines, its JSON Schema, reading and validating it, the data fingerprint);
- ``build``: writing one from an audit (``build_manifest``: the ``mask``, ``group``, ``multi-positive`` and
  ``cluster`` strategies, ``balance``, ``weight``);
- ``replay``: reading one back as a batch plan, and marking the findings it masks (``scan --plan``).

``from contrast_audit.manifest import read_manifest, build_manifest`` gives the two entry points; the
builder (which runs an audit) is imported on first use, so the trainer reads manifests without it.
"""

from __future__ import annotations

from typing import Any

from contrast_audit.manifest.format import (
    KIND,
    SCHEMA_VERSION,
    STRATEGIES,
    WEIGHTS,
    Manifest,
    ManifestBatch,
    check_fingerprint,
    data_fingerprint,
    default_role,
    read_manifest,
)

_BUILD = ("ManifestResult", "build_manifest")


def __getattr__(name: str) -> Any:
    if name in _BUILD:
        from contrast_audit.manifest import build

        return getattr(build, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "KIND",
    "SCHEMA_VERSION",
    "STRATEGIES",
    "WEIGHTS",
    "Manifest",
    "ManifestBatch",
    "ManifestResult",
    "build_manifest",
    "check_fingerprint",
    "data_fingerprint",
    "default_role",
    "read_manifest",
]
