"""The text report: fits the terminal, names rows by file:line, explains the margin, counts in words."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from contrast_audit.api import audit
from contrast_audit.config import AuditConfig, EmbeddingConfig, MinHashConfig, PlanConfig
from contrast_audit.report import summary_line
from contrast_audit.report.common import MARGIN_LEGEND, evidence_text, plural
from contrast_audit.report.text import render

RUNNER = CliRunner()


@pytest.fixture
def result(tmp_path: Path):
    rows = [
        {"anchor": "how do I reset my password on the website", "positive": "Use the Forgot password link on the page"},
        {"anchor": "reset password how", "positive": "Use the Forgot password link on the page"},
        {"anchor": "export invoices", "positive": "Billing has a PDF link for each invoice"},
    ]
    (tmp_path / "a.jsonl").write_text(json.dumps(rows[0]) + "\n\n" + json.dumps(rows[1]) + "\n")
    (tmp_path / "b.jsonl").write_text(json.dumps(rows[2]) + "\n")
    cfg = AuditConfig(
        plan=PlanConfig(batch_size=3), minhash=MinHashConfig(enabled=False), embedding=EmbeddingConfig(enabled=False)
    )
    return audit([str(tmp_path / "a.jsonl"), str(tmp_path / "b.jsonl")], cfg)


@pytest.mark.parametrize("width", [80, 100])
def test_fits_the_width(result, width: int) -> None:
    text = render(result, width=width)
    assert max(len(line) for line in text.splitlines()) <= width


def test_width_follows_columns(result, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    assert max(len(line) for line in render(result).splitlines()) <= 80
    monkeypatch.delenv("COLUMNS")
    assert max(len(line) for line in render(result).splitlines()) > 80  # files and pipes: 160


def test_findings_name_file_and_line(result) -> None:
    text = render(result, width=160)
    assert "a.jsonl:1 id 0" in text and "a.jsonl:3 id 1" in text


def test_plurals(result) -> None:
    text = render(result, width=160)
    assert "1 device batch → 1 comparison set;" in text
    assert "Top 2 of 2 findings" in text
    line = summary_line(result)
    assert "1 batch," in line and "2 false negatives" in line and "0 mislabelled hard negatives" in line
    assert plural(1, "false negative") == "1 false negative"
    assert plural(2, "batch", "batches") == "2 batches"
    assert plural(1234, "row") == "1,234 rows"


def test_margin_evidence_is_explained() -> None:
    relative = [{"kind": "margin", "score": 1.103, "threshold": 0.75}]
    absolute = [{"kind": "margin", "score": 0.012, "threshold": -0.05}]
    assert evidence_text(relative) == "margin ×1.103>0.750"
    assert evidence_text(absolute) == "margin +0.012>-0.050"
    assert "relative margin" in MARGIN_LEGEND and "absolute margin" in MARGIN_LEGEND
