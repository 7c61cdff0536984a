"""The user-trainer example in docs/training.md runs as written."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from contrast_audit.cli import app
from contrast_audit.model import default_model_dir

DOC = Path(__file__).resolve().parents[2] / "docs" / "training.md"


def example() -> str:
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(encoding="utf-8"), flags=re.S)
    assert len(blocks) == 1
    return blocks[0]


def test_the_example_uses_the_public_names():
    code = example()
    for name in ("ManifestBatchSampler.factory", "MaskedMultipleNegativesRankingLoss", "manifest_dataset"):
        assert name in code
    compile(code, str(DOC), "exec")


@pytest.mark.slow
def test_the_example_trains(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    rows = [
        {
            "id": f"r{i}",
            "anchor": f"question about topic {i % 3}",
            "positive": f"answer {i} on topic {i % 3}",
            "negative": f"note {i} about something else",
        }
        for i in range(6)
    ]
    Path("pairs.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    args = [
        "manifest",
        "pairs.jsonl",
        "--out",
        "manifest.jsonl",
        "--batch-size",
        "3",
        "--no-embeddings",
        "--no-minhash",
        "-q",
    ]
    assert CliRunner().invoke(app, args).exit_code == 0
    code = example().replace('"path/to/model"', repr(str(default_model_dir())))
    exec(compile(code, str(DOC), "exec"), {})
    assert (tmp_path / "model" / "modules.json").is_file()
