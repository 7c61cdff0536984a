"""The streaming engine finds what the in-memory engine finds, row for row, whatever its chunk and run sizes."""

from __future__ import annotations

import errno
import json
import os
import re
from dataclasses import replace
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from engine_cases import PLANS, case_config, case_rows, scan_report
from support import write_jsonl
from typer.testing import CliRunner

from contrast_audit.api import audit
from contrast_audit.cli import app
from contrast_audit.config import AuditConfig, EmbeddingConfig
from contrast_audit.engine import choose, stream
from contrast_audit.errors import ConfigError, InputError


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    return write_jsonl(tmp_path_factory.mktemp("stream") / "pairs.jsonl", case_rows(400))


@pytest.mark.parametrize("plan", PLANS.values(), ids=PLANS.keys())
@pytest.mark.parametrize(("chunk_rows", "run_rows"), [(3, 5), (50, 37), (10_000, 10_000)])
def test_findings_match_the_in_memory_engine(data: Path, plan: dict, chunk_rows: int, run_rows: int) -> None:
    cfg = case_config(**plan)
    memory = audit([str(data)], replace(cfg, engine="memory"))
    streamed = stream.run([str(data)], cfg, stream.Sizes(chunk_rows=chunk_rows, run_rows=run_rows))
    j = streamed.judgement
    assert memory.findings.height > 20 and memory.mislabelled.height > 5
    if plan is PLANS["random"]:  # every evidence kind is exercised
        kinds = set(memory.findings.get_column("evidence").list.eval(_kind()).explode().to_list())
        assert {"exact", "minhash", "same-anchor", "linked", "declared"} <= kinds
    assert memory.findings.equals(j.findings)
    assert memory.mislabelled.equals(j.mislabelled)
    assert memory.judgement.candidates_by_direction == j.candidates_by_direction
    assert np.array_equal(memory.judgement.candidates_per_row, j.candidates_per_row)
    assert memory.row_hashes().equals(streamed.row_hashes)
    assert memory.corpus.n_texts == streamed.corpus.n_texts
    rows = memory.findings.get_column("cand_row").to_numpy()
    roles = memory.findings.get_column("cand_role").to_numpy()
    assert memory.corpus.spelling(rows, roles).equals(streamed.corpus.spelling(rows, roles))
    tids = memory.findings.get_column("cand_tid")
    assert memory.corpus.norms(tids).equals(streamed.corpus.norms(tids))


def _kind():
    import polars as pl

    return pl.element().struct.field("kind")


def test_the_json_report_is_the_in_memory_one(data: Path, tmp_path: Path) -> None:
    memory = scan_report(data, tmp_path / "memory.json", "--engine", "memory")
    streamed = scan_report(data, tmp_path / "stream.json", "--engine", "stream")
    assert memory["findings"] and memory["mislabelled_negatives"]
    assert streamed == memory


def test_a_baseline_marks_the_same_findings(data: Path, tmp_path: Path) -> None:
    old = write_jsonl(tmp_path / "old.jsonl", case_rows(400)[:300])
    CliRunner().invoke(
        app,
        ["scan", str(old), "--no-embeddings", "--negative", "negatives", "--group", "group"]
        + ["--format", "json", "--output", str(tmp_path / "base.json")],
    )
    # Repeats of old rows: the stream engine finds the exact ones only (tests/test_repeats.py), so the
    # reports are compared without them, and the exact repeats apart.
    base = ["--baseline", str(tmp_path / "base.json")]
    memory = scan_report(data, tmp_path / "memory.json", "--engine", "memory", *base, "--no-repeats")
    streamed = scan_report(data, tmp_path / "stream.json", "--engine", "stream", *base, "--no-repeats")
    assert memory["counts"]["in_baseline"]["findings"] > 0
    assert streamed == memory
    memory = scan_report(data, tmp_path / "memory.json", "--engine", "memory", *base)
    streamed = scan_report(data, tmp_path / "stream.json", "--engine", "stream", *base)
    exact = [o for o in memory["overlaps"] if [e["kind"] for e in o["evidence"]] == ["exact"]]
    assert exact and streamed["overlaps"] == exact
    assert streamed["findings"] == memory["findings"]


def test_auto_streams_what_does_not_fit(data: Path) -> None:
    small = replace(case_config(), max_memory="1M")
    assert choose(small, [data]) == "stream"
    assert choose(replace(small, embedding=EmbeddingConfig()), [data]) == "stream"  # embeddings stream too
    pair = replace(EmbeddingConfig(), pair_evidence=True)
    assert choose(replace(small, embedding=pair), [data]) == "memory"  # calibrated on every row: refused as before
    assert choose(replace(small, max_memory="off"), [data]) == "memory"


def test_what_it_cannot_stream_is_refused() -> None:
    for option in ({"pair_evidence": True}, {"above_positive": 0.9}, {"verifier": "a-cross-encoder"}):
        cfg = replace(case_config(), embedding=replace(EmbeddingConfig(), **option))
        with pytest.raises(ConfigError, match="calibrate on every row's vectors"):
            stream.run(["unused.jsonl"], cfg, stream.Sizes())


def test_too_little_memory_for_the_global_state_is_refused(data: Path) -> None:
    with pytest.raises(InputError, match="streaming 400 rows"):
        stream.run([str(data)], case_config(), stream.Sizes(limit=300 << 20, chunk_rows=100))


def test_text_ids_number_texts_as_the_corpus_does() -> None:
    # Two rows: anchors first, then positives, then negatives row by row; (1, 1) repeats (0, 0)'s text.
    h = np.zeros((2, 4, 2), dtype=np.uint64)
    h[0, 0] = (5, 5)
    h[1, 0] = (7, 7)
    h[0, 1] = (7, 7)
    h[1, 1] = (9, 9)
    h[0, 2] = (11, 11)
    h[1, 2] = (5, 5)
    h[1, 3] = (13, 13)
    has = (h != 0).any(axis=2)
    tids, n = stream.text_ids(h, has)
    assert n == 5
    assert tids.tolist() == [[0, 1, 3, -1], [1, 2, 0, 4]]


@pytest.mark.parametrize("engine", ["stream", "ray"])
def test_a_lexical_manifest_refuses_the_streaming_engines(data: Path, tmp_path: Path, engine: str) -> None:
    result = CliRunner().invoke(
        app, ["manifest", str(data), "--no-embeddings", "--engine", engine, "--out", str(tmp_path / "m.jsonl")]
    )
    assert result.exit_code == 2, result.output
    assert "manifest runs on the in-memory engine" in result.output
    assert not (tmp_path / "m.jsonl").exists()


def test_a_killed_run_s_spill_is_removed_by_the_next_one(tmp_path: Path) -> None:
    import subprocess
    import sys

    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    host = stream._host()
    stale = tmp_path / f"{stream.SPILL_PREFIX}{host}-{dead.stdout.strip()}-abc"
    stale.mkdir()
    (stale / "rows-000000.arrow").write_bytes(b"x")
    live = tmp_path / f"{stream.SPILL_PREFIX}{host}-{os.getpid()}-def"  # a run still going
    live.mkdir()
    elsewhere = tmp_path / f"{stream.SPILL_PREFIX}other-host-{dead.stdout.strip()}-ghi"  # another host's
    elsewhere.mkdir()
    spill = stream.Spill(str(tmp_path))
    assert not stale.exists() and live.exists() and elsewhere.exists() and spill.directory.exists()
    spill.close()
    assert not spill.directory.exists()


@pytest.mark.parametrize("fmt", ["text", "markdown", "sarif", "html"])
def test_every_format_shows_the_in_memory_report(data: Path, tmp_path: Path, fmt: str) -> None:
    def render(engine: str) -> str:
        out = tmp_path / f"{engine}.{fmt}"
        result = CliRunner().invoke(
            app,
            ["scan", str(data), "--no-embeddings", "--batch-size", "8", "--negative", "negatives", "--group", "group"]
            + ["--format", fmt, "--output", str(out), "--top", "50", "--engine", engine],
        )
        assert result.exit_code in (0, 1), result.output
        return out.read_text()

    def comparable(text: str) -> str:  # what may differ: the engine, and minhash's corpus-wide counts
        text = re.sub(r"(engine\W+)(memory|stream)", r"\1-", text)
        counts = r"(candidate_checks|near_duplicate_pairs|skipped_buckets)(\W*(?:code>)?)(\w+)"
        return re.sub(counts, r"\1\2-", text)

    memory, streamed = render("memory"), render("stream")
    assert len(memory) > 2000
    assert comparable(streamed) == comparable(memory)


def test_a_plan_file_is_judged_as_in_memory(data: Path, tmp_path: Path) -> None:
    ids = [f"r{i}" for i in range(400)][::-1]
    plan = tmp_path / "plan.jsonl"
    plan.write_text("".join(json.dumps({"rows": ids[lo : lo + 9]}) + "\n" for lo in range(0, 400, 9)))
    memory = scan_report(data, tmp_path / "memory.json", "--plan", str(plan), "--engine", "memory")
    streamed = scan_report(data, tmp_path / "stream.json", "--plan", str(plan), "--engine", "stream")
    assert memory["findings"] and memory["plan"]["source"] != "random"
    assert streamed == memory


def test_a_text_s_first_spelling_is_the_whole_input_s_in_every_run(tmp_path: Path) -> None:
    """The entity guard reads a text's first spelling; a run whose rows spell a text otherwise (here
    "New Jersey" capitalised after a lower-case first row) must still see the input's first spelling."""

    def row(i: str, anchor: str, positive: str) -> dict:
        return {"id": i, "anchor": anchor, "positive": positive}

    rows = [row("r0", "how do i renew my driving license at the office in new jersey", "zzz unrelated 0")]
    rows += [row(f"f{i}", f"filler question {i}", f"filler answer text {i}") for i in range(1, 6)]
    rows.append(row("rB", "How do I renew my driving license at the office in New Jersey", "qqq other thing"))
    rows.append(row("rC", "unrelated q", "How do I renew my driving license at the office in Wisconsin"))
    data = write_jsonl(tmp_path / "pairs.jsonl", rows)
    found = 0
    for seed in range(6):
        cfg = replace(case_config(batch_size=2, seed=seed), mapping=AuditConfig().mapping)
        memory = audit([str(data)], replace(cfg, engine="memory"))
        streamed = stream.run([str(data)], cfg, stream.Sizes(chunk_rows=3, run_rows=2))
        assert memory.findings.equals(streamed.judgement.findings), seed
        found += memory.findings.height
    assert found  # some seed puts the two spellings in one batch


@pytest.mark.parametrize(
    ("pid", "removed"),
    [
        ("²", False),  # isdigit() is True, int() refused it: every streamed scan on the host failed (exit 3)
        ("٣", False),  # a decimal digit, not ASCII: not a spill of ours
        ("12345678901234567890", True),  # int() takes it, os.kill raised OverflowError (exit 3)
        ("9" * 200, True),
        ("0", True),  # kill(0, 0) signals our own group: such a spill was never removed
        ("-5", True),
    ],
)
def test_spills_whose_pid_no_process_can_have(tmp_path: Path, pid: str, removed: bool) -> None:
    odd = tmp_path / f"{stream.SPILL_PREFIX}{stream._host()}-{pid}-abc"
    odd.mkdir()
    spill = stream.Spill(str(tmp_path))
    assert odd.exists() is not removed and spill.directory.exists()
    spill.close()


@pytest.mark.parametrize("suffix", ["#²", "#" + "7" * 5000], ids=["superscript two", "5,000 digits"])
def test_a_repeated_id_with_an_odd_number_is_located_by_both_engines(tmp_path: Path, suffix: str) -> None:
    rows = [{"id": f"r{i}", "anchor": f"query {i}", "positive": f"answer {i}"} for i in range(6)]
    rows[1]["id"] = rows[4]["id"] = f"x{suffix}"
    data = write_jsonl(tmp_path / "pairs.jsonl", rows)
    said = {}
    for engine in ("memory", "stream"):
        result = CliRunner().invoke(app, ["scan", str(data), "--no-embeddings", "--engine", engine, "-q"])
        assert result.exit_code == 2, result.output
        said[engine] = result.output
    assert said["stream"] == said["memory"]
    assert f"pairs.jsonl:5: id 'x{suffix}' repeats the id of {data}:2" in said["stream"]


def _spill_left(directory: Path) -> list[Path]:
    return list(directory.glob(f"{stream.SPILL_PREFIX}*"))


@pytest.mark.parametrize("where", ["missing", "under a file"])
@pytest.mark.parametrize("engine", ["stream", "auto"])
def test_a_tmpdir_that_cannot_hold_the_spill_is_a_clear_error(
    data: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, where: str, engine: str
) -> None:
    # Root writes into read-only directories: a path under a regular file is refused to everyone.
    (tmp_path / "a-file").write_text("x")
    tmpdir = tmp_path / ("missing" if where == "missing" else "a-file/sub")
    monkeypatch.setenv("TMPDIR", str(tmpdir))
    flags = ["--engine", engine] + (["--max-memory", "1M"] if engine == "auto" else [])  # auto: streamed
    result = CliRunner().invoke(app, ["scan", str(data), "--no-embeddings", *flags, "-q"])
    assert result.exit_code == 2, result.output
    assert f"cannot create its spill in {tmpdir} ($TMPDIR)" in result.output
    assert "set TMPDIR to an existing directory" in result.output and "--engine memory" in result.output


@pytest.mark.parametrize(
    ("target", "error"),
    [
        ("polars", OSError("No space left on device (os error 28)")),  # polars' errors carry no errno
        ("numpy", OSError("12000 requested and 8176 written")),  # numpy's short write on a full disk
        ("numpy", OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))),
    ],
)
def test_a_full_tmpdir_is_a_clear_error_and_leaves_no_spill(
    data: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, target: str, error: OSError
) -> None:
    def full(*args, **kwargs):
        raise error

    if target == "polars":
        monkeypatch.setattr(pl.DataFrame, "write_ipc", full)
    else:
        monkeypatch.setattr(stream.np, "save", full)
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    result = CliRunner().invoke(app, ["scan", str(data), "--no-embeddings", "--engine", "stream", "-q"])
    assert result.exit_code == 2, result.output
    assert f"the streaming engine's spill in {tmp_path} ($TMPDIR) ran out of space" in result.output
    assert "free some space there, set TMPDIR to a directory with room" in result.output
    assert _spill_left(tmp_path) == []


def test_another_write_error_of_the_spill_says_what_failed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(*args, **kwargs):
        raise OSError(errno.EIO, os.strerror(errno.EIO))

    monkeypatch.setattr(stream.np, "save", broken)
    spill = stream.Spill(str(tmp_path))
    try:
        with pytest.raises(ConfigError, match=r"writing the streaming engine's spill in .* failed: Input/output error"):
            stream.Keys(spill).add(0, np.zeros((1, 2, 2), np.uint64), None, np.zeros(1, np.uint64))
    finally:
        spill.close()
