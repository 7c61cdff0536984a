"""JSON report: stable key order and formatting, so the same inputs give the same bytes."""

from __future__ import annotations

import json

from contrast_audit.api import AuditResult


def render(result: AuditResult, **_: object) -> str:
    return json.dumps(result.report(), indent=2, ensure_ascii=False) + "\n"
