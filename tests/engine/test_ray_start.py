"""The Ray engine starts its own local instance, and refuses a cluster address nothing answers at."""

from __future__ import annotations

from pathlib import Path

import pytest
from engine_cases import case_rows, scan_report
from support import write_jsonl
from typer.testing import CliRunner

from contrast_audit.cli import app

ray = pytest.importorskip("ray", reason="the Ray engine's tests need the ray extra (pip install '.[ray]')")


@pytest.fixture
def data(tmp_path: Path) -> Path:
    return write_jsonl(tmp_path / "pairs.jsonl", case_rows(120, seed=3))


def test_a_local_instance_is_started_and_stopped(data: Path, tmp_path: Path) -> None:
    assert not ray.is_initialized()
    got = scan_report(data, tmp_path / "ray.json", "--engine", "ray")
    assert got["findings"]
    assert not ray.is_initialized()


def test_an_address_nothing_answers_at_is_a_clear_error(data: Path) -> None:
    result = CliRunner().invoke(
        app, ["scan", str(data), "--no-embeddings", "--engine", "ray", "--ray-address", "127.0.0.1:1"]
    )
    assert result.exit_code == 2
    assert "cannot join Ray at 127.0.0.1:1: nothing answers there" in result.output
    assert "--ray-address" in result.output
    assert not ray.is_initialized()
