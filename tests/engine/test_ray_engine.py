"""The Ray engine on a local Ray instance (2 CPUs) finds what the in-memory engine finds."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
from engine_cases import PLANS, case_config, case_rows, paraphrase_rows, scan_report
from support import write_jsonl

from contrast_audit.api import audit
from contrast_audit.engine import stream

ray = pytest.importorskip("ray", reason="the Ray engine's tests need the ray extra (pip install '.[ray]')")
from contrast_audit.engine import on_ray  # noqa: E402


@pytest.fixture(scope="module")
def local_ray():
    """One local instance for the module, as a user's machine would start it."""
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, logging_level="ERROR")
    yield
    ray.shutdown()


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    return write_jsonl(tmp_path_factory.mktemp("ray") / "pairs.jsonl", case_rows(400, seed=7))


@pytest.mark.parametrize("plan", PLANS.values(), ids=PLANS.keys())
def test_findings_match_the_in_memory_engine(local_ray, data: Path, plan: dict) -> None:
    cfg = case_config(**plan)
    memory = audit([str(data)], replace(cfg, engine="memory"))
    # Small read chunks: several blocks are normalised apart and come back in any order.
    got = on_ray.run([str(data)], replace(cfg, engine="ray"), stream.Sizes(chunk_rows=60))
    assert memory.findings.height > 20 and memory.mislabelled.height > 5
    assert memory.findings.equals(got.judgement.findings)
    assert memory.mislabelled.equals(got.judgement.mislabelled)
    assert memory.judgement.candidates_by_direction == got.judgement.candidates_by_direction
    assert memory.row_hashes().equals(got.row_hashes)


def test_scan_engine_ray_writes_the_in_memory_report(local_ray, data: Path, tmp_path: Path) -> None:
    memory = scan_report(data, tmp_path / "memory.json", "--engine", "memory")
    on_ray_report = scan_report(data, tmp_path / "ray.json", "--engine", "ray")
    assert memory["findings"]
    assert on_ray_report == memory


@pytest.mark.slow
def test_embeddings_are_computed_on_ray_actors_with_a_local_run_s_findings(local_ray, tmp_path: Path) -> None:
    """With embedding evidence the audit runs in memory and only the vectors come from Ray: each actor
    encodes as a local run does, so the findings are a local run's."""
    from typer.testing import CliRunner

    from contrast_audit.cli import app

    data = write_jsonl(tmp_path / "pairs.jsonl", paraphrase_rows())

    def scan(engine: str) -> dict:
        out = tmp_path / f"{engine}.json"
        result = CliRunner().invoke(
            app,
            ["scan", str(data), "--batch-size", "22", "--engine", engine, "--cache-dir", str(tmp_path / engine)]
            + ["--format", "json", "--output", str(out)],
        )
        assert result.exit_code in (0, 1), result.output
        return json.loads(out.read_text())

    memory, on_ray_report = scan("memory"), scan("ray")
    assert any(e["kind"] in ("embedding", "anchor-embedding") for f in memory["findings"] for e in f["evidence"])
    assert on_ray_report["findings"] == memory["findings"]
    assert on_ray_report["mislabelled_negatives"] == memory["mislabelled_negatives"]
    assert on_ray_report["counts"] == memory["counts"]
    assert on_ray_report["detectors"]["embedding"]["embedded"] == memory["detectors"]["embedding"]["embedded"] > 0


@pytest.mark.slow
def test_a_manifest_with_vectors_from_ray_is_the_in_memory_one(local_ray, tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from contrast_audit.cli import app

    data = write_jsonl(tmp_path / "pairs.jsonl", paraphrase_rows())

    def manifest(engine: str) -> list[dict]:
        out = tmp_path / f"{engine}.manifest.jsonl"
        result = CliRunner().invoke(
            app,
            ["manifest", str(data), "--batch-size", "22", "--engine", engine, "--out", str(out)]
            + ["--cache-dir", str(tmp_path / engine)],
        )
        assert result.exit_code == 0, result.output
        return [json.loads(line) for line in out.read_text().splitlines()[1:]]  # the batches, header aside

    memory = manifest("memory")
    assert any(batch.get("mask") for batch in memory)
    assert manifest("ray") == memory


@pytest.mark.slow
def test_negatives_with_vectors_from_ray_lists_the_in_memory_ones(local_ray, tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from contrast_audit.cli import app

    data = write_jsonl(tmp_path / "pairs.jsonl", paraphrase_rows())

    def negatives(engine: str) -> list:
        out = tmp_path / f"{engine}.negatives.json"
        result = CliRunner().invoke(
            app,
            ["negatives", str(data), "--batch-size", "22", "--engine", engine, "--top", "15", "--format", "json"]
            + ["--output", str(out), "--cache-dir", str(tmp_path / engine), "--backend", "torch"],
        )
        assert result.exit_code == 0, result.output
        return json.loads(out.read_text())

    memory = negatives("memory")
    assert memory
    assert negatives("ray") == memory
