"""New rows that repeat old rows of the same data (with a baseline or ``--since``), whatever the batches,
and the gate conditions that could never fail."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from support import git, init_repo, write_jsonl
from typer.testing import CliRunner

from contrast_audit.cli import app

# Templated rows: numbers keep them apart (the number guard), so only real repeats match.
OLD = [
    {
        "id": f"r{i}",
        "anchor": f"how do I configure feature {i} of the product",
        "positive": f"Feature {i} lives under section {i} of the settings page.",
    }
    for i in range(40)
]
COPY = {"id": "copy", "anchor": OLD[3]["anchor"], "positive": OLD[3]["positive"]}
SWAPPED = {"id": "swapped", "anchor": OLD[7]["positive"], "positive": OLD[7]["anchor"]}
NEAR = {"id": "near", "anchor": OLD[9]["anchor"] + " quickly", "positive": OLD[9]["positive"]}
CLEAN = {"id": "clean", "anchor": "what is the refund window", "positive": "Refunds are issued within 14 days."}
LEXICAL = ["--no-embeddings", "--batch-size", "4"]


def scan(*args: str):
    return CliRunner().invoke(app, ["scan", *args], env={"GITHUB_ACTIONS": "", "GITHUB_STEP_SUMMARY": ""})


def report(tmp: Path, data: Path, *args: str) -> tuple[int, dict]:
    out = tmp / "r.json"
    done = scan(str(data), *LEXICAL, *args, "--format", "json", "--output", str(out), "-q")
    assert done.exit_code in (0, 1), done.output
    return done.exit_code, json.loads(out.read_text(encoding="utf-8"))


def baseline_of(tmp: Path, rows: list[dict]) -> Path:
    data = write_jsonl(tmp / "base.jsonl", rows)
    out = tmp / "baseline.json"
    assert scan(str(data), *LEXICAL, "--format", "json", "--output", str(out), "-q").exit_code in (0, 1)
    return out


def test_repeats_of_old_rows_are_overlaps_naming_the_old_line(tmp_path: Path):
    baseline = baseline_of(tmp_path, OLD)
    data = write_jsonl(tmp_path / "train.jsonl", [*OLD, CLEAN, COPY, SWAPPED, NEAR])
    code, r = report(tmp_path, data, "--baseline", str(baseline), "--fail-on", "overlaps>0")
    assert code == 1
    by_row = {(o["row_id"], o["role"]): (o["target_line"], o["target_role"], o["severity"]) for o in r["overlaps"]}
    assert by_row[("copy", "anchor")] == (4, "anchor", "certain")
    assert by_row[("copy", "positive")] == (4, "positive", "certain")
    assert by_row[("swapped", "anchor")] == (8, "positive", "certain")  # the pair swapped
    assert by_row[("swapped", "positive")] == (8, "anchor", "certain")
    assert by_row[("near", "positive")] == (10, "positive", "certain")
    assert by_row[("near", "anchor")][:2] == (10, "anchor") and by_row[("near", "anchor")][2] == "likely"  # MinHash
    assert not any(row == "clean" for row, _ in by_row)
    assert {o["line"] for o in r["overlaps"]} == {42, 43, 44}  # never an old row's line
    assert all(not o["baseline"] and o["target"] == "existing" for o in r["overlaps"])
    assert r["reference"]["repeats"] == {"new_rows": 4, "existing_rows": len(OLD)}
    assert r["counts"]["overlaps"] == len(r["overlaps"])


def test_no_repeats_turns_the_check_off_and_an_unchanged_file_has_none(tmp_path: Path):
    baseline = baseline_of(tmp_path, OLD)
    data = write_jsonl(tmp_path / "train.jsonl", [*OLD, COPY])
    _, r = report(tmp_path, data, "--baseline", str(baseline), "--no-repeats")
    assert r["overlaps"] == [] and "repeats" not in (r["reference"] or {})
    _, r = report(tmp_path, write_jsonl(tmp_path / "same.jsonl", OLD), "--baseline", str(baseline))
    assert r["overlaps"] == [] and r["reference"]["repeats"] == {"new_rows": 0, "existing_rows": len(OLD)}


def test_the_stream_engine_finds_the_same_exact_repeats_and_says_what_it_leaves(tmp_path: Path):
    baseline = baseline_of(tmp_path, OLD)
    data = write_jsonl(tmp_path / "train.jsonl", [*OLD, CLEAN, COPY, SWAPPED])
    _, memory = report(tmp_path, data, "--baseline", str(baseline), "--engine", "memory")
    _, streamed = report(tmp_path, data, "--baseline", str(baseline), "--engine", "stream")
    assert streamed["overlaps"] == memory["overlaps"] and len(memory["overlaps"]) == 4
    assert any("exact repeats of old rows only" in w for w in streamed["warnings"])


def test_since_takes_the_files_at_a_revision(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    repo = init_repo(tmp_path / "repo")
    monkeypatch.chdir(repo)
    data = write_jsonl(repo / "train.jsonl", OLD)
    _, r = report(tmp_path, data, "--since", "HEAD")  # no commit yet: every row is new, nothing repeats
    assert r["baseline"]["new"]["overlaps"] == 0 and r["reference"]["repeats"]["existing_rows"] == 0
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "base")
    write_jsonl(data, [*OLD, COPY, CLEAN])
    code, r = report(tmp_path, data, "--since", "HEAD", "--fail-on", "overlaps>0")
    assert code == 1 and r["baseline"]["file"] == "HEAD (git)"
    assert {o["row_id"] for o in r["overlaps"]} == {"copy"}
    added = write_jsonl(repo / "added.jsonl", [CLEAN])  # a file the change adds: no old rows of its own
    _, r = report(tmp_path, added, "--since", "HEAD")
    assert r["reference"]["repeats"] == {"new_rows": 1, "existing_rows": 0}


def test_since_errors_name_the_cause(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.chdir(tmp_path)
    data = write_jsonl(tmp_path / "train.jsonl", OLD)
    done = scan(str(data), *LEXICAL, "--since", "HEAD", "-q")
    assert done.exit_code == 2 and "is not in a git work tree" in done.output
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q")
    inside = write_jsonl(repo / "train.jsonl", OLD)
    done = scan(str(inside), *LEXICAL, "--since", "no-such-branch", "-q")
    assert done.exit_code == 2 and "not a commit of the repository" in done.output
    done = scan(str(inside), *LEXICAL, "--since", "--all", "-q")
    assert done.exit_code == 2
    done = scan(str(inside), *LEXICAL, "--since", "HEAD", "--baseline", "b.json", "-q")
    assert done.exit_code == 2 and "--baseline and --since" in done.output


def test_conditions_that_could_never_fail_are_errors(tmp_path: Path):
    data = write_jsonl(tmp_path / "train.jsonl", OLD)
    done = scan(str(data), *LEXICAL, "--fail-on", "leaks>0", "-q")
    assert done.exit_code == 2 and "no eval data is configured" in done.output
    done = scan(str(data), *LEXICAL, "--fail-on", "certain>0,overlaps>0", "-q")
    assert done.exit_code == 2 and "--against" in done.output and "--since" in done.output
    settings = tmp_path / "contrast-audit.toml"
    settings.write_text('fail-on = ["leaks>0"]\n', encoding="utf-8")
    done = scan(str(data), *LEXICAL, "--config", str(settings), "-q")
    assert done.exit_code == 2 and f"fail-on in {settings}" in done.output
    baseline = baseline_of(tmp_path, OLD)
    assert scan(str(data), *LEXICAL, "--baseline", str(baseline), "--fail-on", "overlaps>0", "-q").exit_code == 0
