"""The Ray engine on a local Ray instance (2 CPUs) finds what the in-memory engine finds."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
from engine_cases import (
    PLANS,
    assert_judged_as_in_memory,
    case_config,
    case_rows,
    embedding_case_config,
    embedding_case_rows,
    paraphrase_rows,
    scan_report,
    small_first_stage,
)
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
@pytest.mark.parametrize("first_stage", ["static", "none"])
def test_runs_judged_on_ray_embed_their_own_texts_with_the_in_memory_findings(
    local_ray, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, first_stage: str
) -> None:
    """With embedding evidence each run is judged, and its texts embedded, in a Ray worker, from what the
    driver decided over every text; the findings, scores and counts are the in-memory engine's."""
    small_first_stage(monkeypatch)
    data = write_jsonl(tmp_path / "pairs.jsonl", embedding_case_rows())
    cfg = embedding_case_config(first_stage=first_stage)

    def cached(name: str):
        return replace(cfg.embedding, cache_dir=str(tmp_path / name))

    memory = audit([str(data)], replace(cfg, engine="memory", embedding=cached("memory")))
    calls = []
    judge_run = stream.Work.judge
    monkeypatch.setattr(stream.Work, "judge", lambda *a, **k: calls.append(1) or judge_run(*a, **k))
    got = on_ray.run([str(data)], replace(cfg, engine="ray", embedding=cached("ray")), stream.Sizes(chunk_rows=60))
    assert not calls  # every run was judged in a worker
    assert memory.findings.height > 20 and memory.mislabelled.height > 0
    assert_judged_as_in_memory(memory, got.judgement, first_stage)
    info, ray_info = memory.judgement.detector_info, got.judgement.detector_info
    # What the workers' stores counted came back: their vectors are every run's lookups.
    assert ray_info["embedding"]["embedded"] + ray_info["embedding"]["cached"] >= info["embedding"]["embedded"] > 0


@pytest.mark.slow
def test_the_scan_report_of_runs_judged_on_ray_is_the_in_memory_one(local_ray, tmp_path: Path) -> None:
    """``scan --engine ray`` with embedding evidence judges on the workers and writes the in-memory report."""
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


@pytest.mark.parametrize("kind", ["task", "actor"])
def test_an_audit_error_raised_on_a_worker_reaches_the_user_as_itself(local_ray, kind: str) -> None:
    """Exit 2 with the error's own message and fix, not Ray's task error around a traceback (exit 3)."""
    from contrast_audit.errors import ConfigError

    def refuse(batch: dict) -> dict:  # defined here: Ray ships it by value, the workers cannot import tests
        raise ConfigError("the model is not on this node", fix="install it there")

    class Refusing:  # as ``on_ray._Encoder`` does: an error of its set-up is raised on its first batch
        def __call__(self, batch: dict) -> dict:
            return refuse(batch)

    task, kwargs = (refuse, {}) if kind == "task" else (Refusing, {"concurrency": 1})
    with pytest.raises(ConfigError) as err, on_ray.worker_errors(ray):
        ray.data.range(4).map_batches(task, **kwargs).materialize()
    assert type(err.value) is ConfigError
    assert str(err.value) == "the model is not on this node — install it there"
    assert not ray.data.DataContext.get_current().raise_original_map_exception  # put back as it was


def test_an_embedding_actor_that_cannot_load_the_model_says_so_on_its_first_batch() -> None:
    from contrast_audit.errors import ModelError

    class Store:
        def model(self, source):
            raise ModelError(f"{source}: no such model directory", fix="install the model on every node")

    actor = on_ray._Encoder(Store(), "/models/x", "", threads=2)
    with pytest.raises(ModelError, match="no such model directory"):
        actor({"position": [0], "text": ["a text"]})
