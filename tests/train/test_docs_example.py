"""The user-trainer example in docs/training.md runs exactly as written, on the bundled sample data."""

from __future__ import annotations

import json
import re
import shlex
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from contrast_audit.cli import app

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "training.md"


def example() -> tuple[str, str]:
    """The shell command and the Python block of the own-trainer example."""
    text = DOC.read_text(encoding="utf-8")
    found = re.findall(r"```sh\n([^`]*?)```\s*```python\n(.*?)```", text, flags=re.S)
    assert len(found) == 1
    command, code = found[0]
    return command.strip(), code


def test_the_example_uses_the_public_names_and_no_placeholder():
    command, code = example()
    assert command.startswith("contrast-audit manifest sample_data/pairs.jsonl")
    for name in ("ManifestBatchSampler.factory", "MaskedMultipleNegativesRankingLoss", "manifest_dataset"):
        assert name in code
    assert "path/to" not in code and "default_model_path()" in code
    compile(code, str(DOC), "exec")


def test_the_sample_data_is_ragged():
    # what the example must cope with: rows with and without a hard negative
    rows = [json.loads(line) for line in (ROOT / "sample_data" / "pairs.jsonl").read_text().splitlines()]
    assert {("negative" in r) for r in rows} == {True, False}


@pytest.mark.slow
def test_the_example_trains(tmp_path, monkeypatch):
    (tmp_path / "sample_data").mkdir()
    shutil.copy(ROOT / "sample_data" / "pairs.jsonl", tmp_path / "sample_data" / "pairs.jsonl")
    monkeypatch.chdir(tmp_path)
    command, code = example()
    argv = shlex.split(command)
    assert argv[0] == "contrast-audit"
    result = CliRunner().invoke(app, argv[1:])
    assert result.exit_code == 0, result.output
    namespace: dict = {}
    exec(compile(code, str(DOC), "exec"), namespace)
    assert (tmp_path / "model" / "modules.json").is_file()
    data = namespace["data"]
    assert data.padded_rows == 245 and data.dataset.num_rows == 359
    assert namespace["trainer"].state.global_step == 2
