"""Embedding evidence on the streaming engine: decided once over every text (the first stage's rows, the
idf weights, the link bar), each run embedding its own texts, and the in-memory engine's findings."""

from __future__ import annotations

import json
import random
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from engine_cases import (
    assert_judged_as_in_memory,
    embedding_case_config,
    embedding_case_rows,
    small_first_stage,
    vocabulary_words,
)
from support import write_jsonl
from typer.testing import CliRunner

from contrast_audit import judge
from contrast_audit.api import audit
from contrast_audit.cli import app
from contrast_audit.engine import stream


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_jsonl(tmp_path_factory.mktemp("stream-embeddings") / "pairs.jsonl", embedding_case_rows())


@pytest.fixture
def small_stage(monkeypatch: pytest.MonkeyPatch) -> None:
    small_first_stage(monkeypatch)


_config = embedding_case_config


@pytest.mark.parametrize("run_rows", [40, 150, 100_000])
@pytest.mark.parametrize("first_stage", ["static", "none"])
def test_findings_match_the_in_memory_engine(data: Path, small_stage: None, run_rows: int, first_stage: str) -> None:
    cfg = _config(first_stage=first_stage)
    memory = audit([str(data)], replace(cfg, engine="memory"))
    streamed = stream.run([str(data)], cfg, stream.Sizes(run_rows=run_rows))
    j = streamed.judgement
    kinds = {e["kind"] for f in memory.findings.get_column("evidence").to_list() for e in f}
    assert {"embedding", "linked"} <= kinds
    rules = set(memory.findings.get_column("severity_rule").to_list())
    assert {
        "linked: one hop through the positive, texts near",
        "linked: one hop through the positive, texts not near",
    } & rules
    assert memory.mislabelled.height > 0
    if run_rows < 100_000:  # several runs, cut where the judge's chunks begin
        width = 1 + memory.corpus.negatives.shape[1]
        chunks = np.array([a for a, _ in judge.chunk_bounds(streamed.batches, width)])
        assert len(stream.plan_runs(streamed.batches, streamed.corpus.n_rows, run_rows, chunks)) > 2
    assert_judged_as_in_memory(memory, j, first_stage)


@pytest.mark.parametrize(
    "embedding",
    [{"margin": True, "margin_support": 0.8}, {"query_prompt": "query: ", "doc_prompt": "passage: "}],
    ids=["margin rule", "two prompts"],
)
def test_other_embedding_settings_match_the_in_memory_engine(data: Path, small_stage: None, embedding: dict) -> None:
    cfg = _config(**embedding)
    memory = audit([str(data)], replace(cfg, engine="memory"))
    streamed = stream.run([str(data)], cfg, stream.Sizes(run_rows=150))
    assert memory.judgement.detector_info["embedding"]["first_stage"]["used"] is False
    assert memory.findings.height > 0
    assert memory.findings.equals(streamed.judgement.findings)
    assert memory.mislabelled.equals(streamed.judgement.mislabelled)
    assert memory.judgement.vetoed.equals(streamed.judgement.vetoed)


def _far_apart(path: Path) -> Path:
    """Rows of unrelated word strings, none near another: no pair reaches a guard."""
    rng = random.Random(5)
    words = vocabulary_words()
    text = lambda n: " ".join(rng.sample(words, n))  # noqa: E731
    return write_jsonl(path, [{"anchor": text(6), "positive": text(12), "negative": text(12)} for _ in range(60)])


@pytest.mark.parametrize("near", [True, False], ids=["near pairs", "nothing near"])
def test_the_json_report_is_the_in_memory_one(data: Path, small_stage: None, tmp_path: Path, near: bool) -> None:
    # Nothing near: the alignment guard never reads its idf weights, and the report says 0 on both engines.
    data = data if near else _far_apart(tmp_path / "far.jsonl")

    def scan(engine: str) -> dict:
        out = tmp_path / f"{engine}.json"
        args = ["scan", str(data), "--negative", "negative", "--batch-size", "48", "--seed", "3", "--epochs", "3"]
        result = CliRunner().invoke(app, [*args, "--engine", engine, "--format", "json", "--output", str(out)])
        assert result.exit_code in (0, 1), result.output
        report = json.loads(out.read_text())
        report["config"].pop("engine")
        for key in ("candidate_checks", "near_duplicate_pairs", "skipped_buckets"):
            report["detectors"]["minhash"].pop(key)
        for name in ("embedding", "anchor-embedding", "minhash"):
            # Lookups: a streamed audit looks a text up in each run that holds it, and for the calibrations.
            for key in ("cached", "embedded", "token_texts_cached", "token_texts_encoded"):
                report["detectors"][name].pop(key, None)
        return report

    memory = scan("memory")
    streamed = scan("stream")
    if near:
        assert memory["findings"] and memory["detectors"]["embedding"]["first_stage"]["used"]
    else:
        assert not memory["findings"] and memory["detectors"]["embedding"]["idf_texts"] == 0
    assert streamed == memory


def test_a_run_counts_its_vectors_against_the_memory_limit() -> None:
    lexical = stream.Shape(rows=1000, width=2, texts=2000, text_bytes=100_000)
    embedded = replace(lexical, spaces=2)
    assert embedded.run_bytes_per_row() - lexical.run_bytes_per_row() == 2 * 2 * 384 * 6
    assert embedded.global_bytes() > lexical.global_bytes()
    assert embedded.fixed_bytes() == stream.MODEL_BYTES and lexical.fixed_bytes() == 0
    sizes = stream.Sizes(limit=4 << 30)
    assert sizes.judging(embedded, "pairs.jsonl") < sizes.judging(lexical, "pairs.jsonl")


def test_runs_are_cut_where_a_chunk_begins() -> None:
    from contrast_audit.plan import GlobalBatches

    offsets = np.arange(0, 101, 10)
    batches = GlobalBatches(np.arange(100), offsets, np.zeros(10, dtype=np.int64))
    runs = stream.plan_runs(batches, 100, 25, chunks=np.array([0, 4, 8]))
    assert [(r.start, r.stop) for r in runs] == [(0, 4), (4, 8), (8, 10)]
    assert [(r.start, r.stop) for r in stream.plan_runs(batches, 100, 25)] == [(0, 2), (2, 4), (4, 7), (7, 9), (9, 10)]


def test_a_bad_cache_is_refused_and_the_score_plots_say_why_they_are_missing(data: Path, tmp_path: Path) -> None:
    from contrast_audit.errors import ConfigError
    from contrast_audit.report.plots import plots

    cache = tmp_path / "cache"
    cache.write_text("not a directory")
    cfg = _config()
    with pytest.raises(ConfigError, match="is a file, not a directory"):
        audit([str(data)], replace(cfg, engine="stream", embedding=replace(cfg.embedding, cache_dir=str(cache))))
    result = audit([str(data)], replace(cfg, engine="stream"))
    scatter, margins = plots(result)[:2]
    assert scatter.svg is None and "streaming engine holds no vectors" in scatter.caption
    assert margins.svg is None and "--engine memory" in margins.caption


def test_negatives_needs_every_vector_and_is_refused_on_the_streaming_engine(data: Path, tmp_path: Path) -> None:
    from contrast_audit.errors import ConfigError
    from contrast_audit.negatives import alleged_negatives, in_memory

    result = CliRunner().invoke(app, ["negatives", str(data), "--engine", "stream", "--top", "3"])
    assert result.exit_code == 2, result.output
    assert "negatives runs on the in-memory engine, not --engine stream" in result.output
    # auto refuses an input too large for memory (here: any) rather than streaming it
    result = CliRunner().invoke(app, ["negatives", str(data), "--max-memory", "257M", "--top", "3"])
    assert result.exit_code == 2, result.output
    assert "needs about" in result.output and "--max-memory" in result.output
    assert in_memory(_config()).engine == "memory"
    # A streamed result handed to the API says what is missing instead of failing on it.
    streamed = audit([str(data)], replace(_config(), engine="stream"))
    with pytest.raises(ConfigError, match="runs on the in-memory engine"):
        alleged_negatives(streamed)
