"""docs/ci.md's GitHub Actions gate step, run as the runner would in a temporary data repository,
and the pre-commit hook definition."""

from __future__ import annotations

import json
import os
import re
import stat
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from contrast_audit.cli import app

ROOT = Path(__file__).resolve().parent.parent
COMMAND = re.compile(r"^::(error|warning|notice)(?: ([^:]*))?::(.*)$")

OLD_ROWS = [
    {"id": f"old-{i}", "anchor": f"question number {i} about topic {i}", "positive": f"answer text {i} on topic {i}"}
    for i in range(6)
]
DUPLICATE = {"id": "new-dup", "anchor": "another way to ask about topic 2", "positive": "Answer text 2 on topic 2."}
CLEAN = {"id": "new-clean", "anchor": "a brand new question", "positive": "a brand new answer"}
EVAL_QUERIES = [{"_id": "q1", "text": "how do I rotate my api key"}, {"_id": "q2", "text": "what is the refund window"}]
LEAK = {"id": "new-leak", "anchor": "How do I rotate my API key?", "positive": "Settings, then Keys, then Rotate"}
MISLABELLED = {
    "id": "new-neg",
    "anchor": "refund policy",
    "positive": "Refunds within 30 days",
    "negative": "refunds within 30 days",
}


def workflow() -> dict:
    text = (ROOT / "docs" / "ci.md").read_text(encoding="utf-8")
    block = re.search(r"```yaml\n(name: training data\n.*?)```", text, re.S)
    assert block, "docs/ci.md lost its workflow"
    return yaml.safe_load(block.group(1))


def gate_step() -> dict:
    steps = workflow()["jobs"]["contrast-audit"]["steps"]
    return next(step for step in steps if step.get("id") == "gate")


def shim(tmp: Path) -> Path:
    """A `contrast-audit` executable on PATH that runs this checkout's code."""
    bin_dir = tmp / "bin"
    bin_dir.mkdir(exist_ok=True)
    exe = bin_dir / "contrast-audit"
    exe.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m contrast_audit.cli "$@"\n', encoding="utf-8")
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR)
    return bin_dir


def git(repo: Path, *args: str) -> str:
    done = subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True, check=True)
    return done.stdout.strip()


def jsonl(rows: list[dict]) -> str:
    return "".join(json.dumps(r) + "\n" for r in rows)


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """A data repository with a base commit: old rows and its settings (lexical evidence only)."""
    repo = tmp_path / "data-repo"
    (repo / "data").mkdir(parents=True)
    git(repo, "init", "-q", "-b", "main")
    git(repo, "config", "user.email", "ci@example.com")
    git(repo, "config", "user.name", "CI")
    (repo / "data" / "train.jsonl").write_text(jsonl(OLD_ROWS), encoding="utf-8")
    (repo / "README.md").write_text("data\n", encoding="utf-8")
    (repo / "eval").mkdir()
    (repo / "eval" / "queries.jsonl").write_text(jsonl(EVAL_QUERIES), encoding="utf-8")
    settings = 'embeddings = false\nbatch-size = 64\neval = ["eval/queries.jsonl"]\n'
    (repo / "contrast-audit.toml").write_text(settings, encoding="utf-8")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "base")
    return repo


def run_gate(repo: Path, base: str, tmp: Path) -> tuple[subprocess.CompletedProcess, Path]:
    step = gate_step()
    summary = tmp / "step-summary.md"
    summary.write_text("", encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if not k.startswith("GITHUB_")}
    env.update({k: str(v) for k, v in step.get("env", {}).items() if "${{" not in str(v)})
    env.update(
        {
            "BASE_SHA": base,
            "GITHUB_ACTIONS": "true",
            "GITHUB_STEP_SUMMARY": str(summary),
            "GITHUB_WORKSPACE": str(repo),
            "PATH": f"{shim(tmp)}{os.pathsep}{env['PATH']}",
            "PYTHONPATH": str(ROOT),
        }
    )
    script = tmp / "gate.sh"
    script.write_text(step["run"], encoding="utf-8")
    done = subprocess.run(
        ["bash", "--noprofile", "--norc", "-eo", "pipefail", str(script)],
        cwd=repo,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    return done, summary


def unescape(value: str) -> str:
    for code, char in (("%0D", "\r"), ("%0A", "\n"), ("%3A", ":"), ("%2C", ","), ("%25", "%")):
        value = value.replace(code, char)
    return value


def commands(stream: str) -> list[tuple[str, dict[str, str], str]]:
    """The workflow commands in a stream, unescaped as the runner does."""
    out = []
    for line in stream.splitlines():
        if match := COMMAND.match(line):
            props = dict(p.split("=", 1) for p in match.group(2).split(",")) if match.group(2) else {}
            out.append((match.group(1), {k: unescape(v) for k, v in props.items()}, unescape(match.group(3))))
    return out


def test_workflow_shape():
    flow = workflow()
    uses = [step.get("uses", "") for step in flow["jobs"]["contrast-audit"]["steps"]]
    assert uses[0].startswith("actions/checkout@")
    assert flow["jobs"]["contrast-audit"]["steps"][0]["with"]["fetch-depth"] == 0
    for action in (
        "actions/setup-python@",
        "actions/cache@",
        "actions/upload-artifact@",
        "github/codeql-action/upload-sarif@",
    ):
        assert any(u.startswith(action) for u in uses), action
    assert flow["permissions"]["security-events"] == "write"
    assert "git diff --name-only" in gate_step()["run"] and "...HEAD" in gate_step()["run"]


@pytest.mark.slow  # runs the CLI in subprocesses, as CI does
def test_gate_fails_a_change_that_adds_a_duplicate(repo: Path, tmp_path: Path):
    base = git(repo, "rev-parse", "HEAD")
    with (repo / "data" / "train.jsonl").open("a", encoding="utf-8") as handle:
        handle.write(jsonl([CLEAN, DUPLICATE, LEAK]))
    (repo / "data" / "extra.jsonl").write_text(jsonl([MISLABELLED]), encoding="utf-8")
    (repo / "README.md").write_text("data, more\n", encoding="utf-8")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "add rows")

    done, summary = run_gate(repo, base, tmp_path)
    assert done.returncode == 1, done.stderr[-3000:]
    assert (repo / "reports" / "changed-files.txt").read_text().split() == ["data/extra.jsonl", "data/train.jsonl"]
    errors = [(c[1]["file"], c[1]["line"], c[1]["title"]) for c in commands(done.stderr) if c[0] == "error"]
    # The new duplicate (line 8) and the old row it repeats (line 3), and the mislabelled negative.
    assert ("data/train.jsonl", "8", "contrast-audit: In-batch false negative (certain)") in errors
    assert ("data/train.jsonl", "3", "contrast-audit: In-batch false negative (certain)") in errors
    assert ("data/extra.jsonl", "1", "contrast-audit: Mislabelled hard negative") in errors
    assert ("data/train.jsonl", "9", "contrast-audit: Evaluation data leak") in errors
    assert errors[0][2] == "contrast-audit: Evaluation data leak"  # the worst first
    assert len(errors) == 4
    assert commands(done.stdout) == []  # the annotations went to stderr
    text = summary.read_text(encoding="utf-8")
    assert "Gate: **FAILED**" in text and "| `certain>0` | 2 | FAILED |" in text
    assert "| `leaks>0` | 1 | FAILED |" in text and "how do I rotate my api key" in text
    assert "Answer text 2 on topic 2." in text  # the new row's text, shown in the summary
    report = json.loads((repo / "reports" / "contrast-audit.json").read_text(encoding="utf-8"))
    assert report["counts"]["findings"] == 2 and report["counts"]["mislabelled_negatives"] == 1
    sarif = json.loads((repo / "reports" / "contrast-audit.sarif").read_text(encoding="utf-8"))
    uris = {r["locations"][0]["physicalLocation"]["artifactLocation"]["uri"] for r in sarif["runs"][0]["results"]}
    assert uris == {"data/train.jsonl", "data/extra.jsonl"}
    assert "eval-leak" in {r["ruleId"] for r in sarif["runs"][0]["results"]}
    assert (repo / "reports" / "contrast-audit.html").read_text(encoding="utf-8").startswith("<!DOCTYPE html>")


@pytest.mark.slow
def test_gate_passes_a_clean_change_and_a_change_without_data(repo: Path, tmp_path: Path):
    base = git(repo, "rev-parse", "HEAD")
    (repo / "README.md").write_text("docs only\n", encoding="utf-8")
    git(repo, "commit", "-q", "-am", "docs")
    done, summary = run_gate(repo, base, tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "no data files changed" in summary.read_text(encoding="utf-8")

    with (repo / "data" / "train.jsonl").open("a", encoding="utf-8") as handle:
        handle.write(jsonl([CLEAN]))
    git(repo, "commit", "-q", "-am", "clean rows")
    done, summary = run_gate(repo, base, tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    assert commands(done.stderr) == []
    assert "Gate: passed" in summary.read_text(encoding="utf-8")


def test_pre_commit_hook(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    (hook,) = yaml.safe_load((ROOT / ".pre-commit-hooks.yaml").read_text(encoding="utf-8"))
    assert hook["id"] == "contrast-audit" and hook["entry"] == "contrast-audit scan"
    assert hook["require_serial"] is True
    pattern = re.compile(hook["files"])
    assert all(pattern.search(p) for p in ("data/a.jsonl", "b.csv", "c.tsv", "d.parquet", "e.ndjson"))
    assert not any(pattern.search(p) for p in ("README.md", "package.json", "x.jsonl.bak"))
    # pre-commit runs `entry args... files...`
    monkeypatch.chdir(tmp_path)
    (tmp_path / "staged.jsonl").write_text(jsonl([*OLD_ROWS, MISLABELLED]), encoding="utf-8")
    argv = [*hook["entry"].split()[1:], *hook["args"], "staged.jsonl"]  # after the program name
    env = {"GITHUB_ACTIONS": "", "GITHUB_STEP_SUMMARY": ""}
    done = CliRunner().invoke(app, argv, env=env)
    assert done.exit_code == 1, done.output
    (tmp_path / "staged.jsonl").write_text(jsonl(OLD_ROWS), encoding="utf-8")
    done = CliRunner().invoke(app, argv, env=env)
    assert done.exit_code == 0, done.output
