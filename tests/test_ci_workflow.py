"""The GitHub Actions workflow of docs/ci.md (docs/examples/training-data.yml), run step by step as the
runner would in a temporary data repository, and the pre-commit hook definition."""

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
from packaging.requirements import Requirement
from support import git, init_repo
from typer.testing import CliRunner

from contrast_audit.cli import app

ROOT = Path(__file__).resolve().parent.parent
WORKFLOW = ROOT / "docs" / "examples" / "training-data.yml"
COMMAND = re.compile(r"^::(error|warning|notice)(?: ([^:]*))?::(.*)$")
EXPRESSION = re.compile(r"\$\{\{\s*(.*?)\s*\}\}")
# GitHub's own actions: the runner fetches and runs them; here the repository, Python and an empty
# cache are already in place, and uploads have nowhere to go.
ACTIONS = ("actions/checkout@", "actions/setup-python@", "actions/cache@", "actions/upload-artifact@")
ACTIONS += ("github/codeql-action/upload-sarif@",)
SKIPPED = {"install": "installs contrast-audit from git with pip: needs the network; this test's environment stands in"}

# Pairs of rows sharing an answer: wherever batches of 4 put both rows of a pair, a certain finding.
OLD_ROWS = [
    row
    for i in range(8)
    for row in (
        {"anchor": f"how do I do task {i}", "positive": f"the documented steps for task {i}"},
        {"anchor": f"what is the way to do task {i}", "positive": f"The documented steps for task {i}"},
    )
]
CLEAN = [{"anchor": f"a brand new question {i}", "positive": f"a brand new answer {i}"} for i in range(4)]
EVAL_QUERIES = [{"_id": "q1", "text": "how do I rotate my api key"}, {"_id": "q2", "text": "what is the refund window"}]
LEAK = {"anchor": "How do I rotate my API key?", "positive": "Settings, then Keys, then Rotate"}
MISLABELLED = {"anchor": "refund policy", "positive": "Refunds within 30 days", "negative": "refunds within 30 days"}


def workflow() -> dict:
    return yaml.safe_load(WORKFLOW.read_text(encoding="utf-8"))


def steps() -> list[dict]:
    return workflow()["jobs"]["contrast-audit"]["steps"]


def step(step_id: str) -> dict:
    return next(s for s in steps() if s.get("id") == step_id)


def shim(tmp: Path) -> Path:
    """A `contrast-audit` executable that runs this checkout's code: the install step's stand-in."""
    bin_dir = tmp / "bin"
    bin_dir.mkdir(exist_ok=True)
    exe = bin_dir / "contrast-audit"
    exe.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m contrast_audit.cli "$@"\n', encoding="utf-8")
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR)
    return bin_dir


def jsonl(rows: list[dict]) -> str:
    return "".join(json.dumps(r) + "\n" for r in rows)


def append(path: Path, rows: list[dict]) -> None:
    with path.open("a", encoding="utf-8") as handle:
        handle.write(jsonl(rows))


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """A data repository with a base commit: old rows (with findings of their own), an eval set and its
    settings (lexical evidence, batches of 4, so an append re-plans them)."""
    repo = init_repo(tmp_path / "data-repo")
    (repo / "data").mkdir()
    (repo / "data" / "train.jsonl").write_text(jsonl(OLD_ROWS), encoding="utf-8")
    (repo / "README.md").write_text("data\n", encoding="utf-8")
    (repo / "eval").mkdir()
    (repo / "eval" / "queries.jsonl").write_text(jsonl(EVAL_QUERIES), encoding="utf-8")
    settings = 'embeddings = false\nbatch-size = 4\neval = ["eval/queries.jsonl"]\n'
    (repo / "contrast-audit.toml").write_text(settings, encoding="utf-8")
    (repo / ".gitignore").write_text("reports/\n.contrast-audit-cache/\n", encoding="utf-8")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "base")
    return repo


def commit(repo: Path, message: str) -> None:
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", message)


def expand(value: object, context: dict[str, str], env: dict[str, str]) -> str:
    """A value with its ``${{ }}`` expressions filled in, as far as the runner would here."""

    def one(match: re.Match) -> str:
        expr = match.group(1)
        if expr.startswith("env."):
            return env[expr.removeprefix("env.")]
        assert expr in context, f"the test does not know the expression ${{{{ {expr} }}}}"
        return context[expr]

    return EXPRESSION.sub(one, str(value))


class Runner:
    """Runs a job's ``run:`` steps in order as GitHub's runner does: each as a bash script in the
    workspace, with the workflow's, job's and step's env, and the GITHUB_* files between steps."""

    def __init__(self, repo: Path, base: str, tmp: Path) -> None:
        self.repo, self.tmp = repo, tmp
        self.files = {
            name: tmp / name.lower() for name in ("GITHUB_STEP_SUMMARY", "GITHUB_OUTPUT", "GITHUB_ENV", "GITHUB_PATH")
        }
        for path in self.files.values():
            path.write_text("", encoding="utf-8")
        (tmp / "runner-temp").mkdir(exist_ok=True)
        self.env = {k: v for k, v in os.environ.items() if not k.startswith(("GITHUB_", "CONTRAST_AUDIT_"))}
        self.env.update({k: str(p) for k, p in self.files.items()})
        self.env.update(
            {
                "CI": "true",
                "GITHUB_ACTIONS": "true",
                "GITHUB_WORKSPACE": str(repo),
                "RUNNER_TEMP": str(tmp / "runner-temp"),
                "RUNNER_OS": "Linux",
                "PYTHONPATH": str(ROOT),  # the stand-in for the installed package
            }
        )
        self.context = {
            "github.event.pull_request.base.sha": base,
            "github.workspace": str(repo),
            "github.sha": git(repo, "rev-parse", "HEAD"),
            "runner.os": "Linux",
        }
        self.paths: list[str] = []

    def step_env(self, flow: dict, job: dict, spec: dict) -> dict[str, str]:
        env = dict(self.env)
        for line in self.files["GITHUB_ENV"].read_text(encoding="utf-8").splitlines():
            if "=" in line:
                key, value = line.split("=", 1)
                env[key] = value
        for scope in (flow.get("env", {}), job.get("env", {}), spec.get("env", {})):
            for key, value in scope.items():
                env[key] = expand(value, self.context, env)
        env["PATH"] = os.pathsep.join([*reversed(self.paths), env["PATH"]])
        return env

    def run_step(self, flow: dict, job: dict, spec: dict) -> subprocess.CompletedProcess:
        script = self.tmp / f"step-{spec.get('id', 'x')}.sh"
        script.write_text(spec["run"], encoding="utf-8")
        done = subprocess.run(
            ["bash", "--noprofile", "--norc", "-eo", "pipefail", str(script)],
            cwd=self.repo,
            env=self.step_env(flow, job, spec),
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        added = self.files["GITHUB_PATH"].read_text(encoding="utf-8").splitlines()
        self.paths = [p for p in added if p]
        return done

    def run(self) -> subprocess.CompletedProcess:
        """Every step up to the first that fails; the result of the last one run."""
        flow = workflow()
        job = flow["jobs"]["contrast-audit"]
        done = None
        for spec in job["steps"]:
            if "uses" in spec:
                assert spec["uses"].startswith(ACTIONS), f"a step the test cannot stand in for: {spec['uses']}"
                continue
            if spec.get("id") in SKIPPED:  # explicitly: the install needs the network
                with self.files["GITHUB_PATH"].open("a", encoding="utf-8") as handle:
                    handle.write(f"{shim(self.tmp)}\n")  # what the install step would add: contrast-audit on PATH
                self.paths.append(str(shim(self.tmp)))
                continue
            done = self.run_step(flow, job, spec)
            if done.returncode != 0:
                break
        assert done is not None
        return done

    @property
    def summary(self) -> str:
        return self.files["GITHUB_STEP_SUMMARY"].read_text(encoding="utf-8")


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


def test_the_docs_embed_the_workflow_file():
    text = (ROOT / "docs" / "ci.md").read_text(encoding="utf-8")
    blocks = re.findall(r"```yaml\n(.*?)```", text, re.S)
    assert WORKFLOW.read_text(encoding="utf-8") in blocks
    assert "examples/training-data.yml" in text


def test_workflow_shape():
    flow = workflow()
    uses = [s.get("uses", "") for s in steps()]
    assert uses[0].startswith("actions/checkout@") and steps()[0]["with"]["fetch-depth"] == 0
    for action in ACTIONS:
        assert any(u.startswith(action) for u in uses), action
    assert flow["permissions"]["security-events"] == "write"
    # No path filter: a required check must report on every pull request.
    assert not ((flow.get("on") or flow.get(True))["pull_request"] or {}).get("paths")
    gate = step("gate")["run"]
    assert "git diff --name-only" in gate and "...HEAD" in gate and '--since "$BASE_SHA"' in gate
    assert 'git worktree add --quiet --detach "$base" "$BASE_SHA"' in gate and 'cd "$base"' in gate


def test_the_install_names_an_installable_pinned_git_requirement():
    script = step("install")["run"]
    (spec,) = re.findall(r'"(contrast-audit @ [^"]+)"', script)
    env = workflow()["env"]
    filled = spec.replace("${CONTRAST_AUDIT_GIT}", "https://git.example.invalid/contrast-audit.git")
    filled = filled.replace("${CONTRAST_AUDIT_SHA}", "0" * 40)
    requirement = Requirement(filled)  # PEP 508: what pip parses
    assert requirement.name == "contrast-audit"
    assert requirement.url == f"git+https://git.example.invalid/contrast-audit.git@{'0' * 40}"
    assert "REPLACE-ME" in env["CONTRAST_AUDIT_GIT"] and "REPLACE-ME" in env["CONTRAST_AUDIT_SHA"]
    cache = next(s for s in steps() if s.get("name") == "Cache the virtualenv")
    assert "env.CONTRAST_AUDIT_SHA" in cache["with"]["key"]


def test_the_install_step_stops_until_its_placeholders_are_filled(repo: Path, tmp_path: Path):
    runner = Runner(repo, git(repo, "rev-parse", "HEAD"), tmp_path)
    flow = workflow()
    done = runner.run_step(flow, flow["jobs"]["contrast-audit"], step("install"))
    assert done.returncode == 1
    assert "::error::Set CONTRAST_AUDIT_GIT and CONTRAST_AUDIT_SHA" in done.stdout
    assert not (repo / ".venv").exists()  # stopped before creating anything


@pytest.mark.slow  # runs the CLI in subprocesses, as CI does
def test_an_append_of_clean_rows_passes(repo: Path, tmp_path: Path):
    base = git(repo, "rev-parse", "HEAD")
    append(repo / "data" / "train.jsonl", CLEAN)
    commit(repo, "append clean rows")
    runner = Runner(repo, base, tmp_path)
    done = runner.run()
    assert done.returncode == 0, done.stderr[-3000:]
    assert commands(done.stderr) == [] and commands(done.stdout) == []
    assert "Gate: passed" in runner.summary
    report = json.loads((repo / "reports" / "contrast-audit.json").read_text(encoding="utf-8"))
    assert report["baseline"]["file"] == f"{base} (git)"
    assert report["reference"]["repeats"] == {"new_rows": len(CLEAN), "existing_rows": len(OLD_ROWS)}
    # The old rows had findings, and the append moved the batches: they meet in pairs, all in the baseline.
    assert report["findings"], "the case must re-plan batches with findings, or it tests nothing"
    assert all(f["baseline"] for f in report["findings"]) and report["counts"]["findings"] == 0
    assert report["overlaps"] == []
    assert not (tmp_path / "runner-temp" / "contrast-audit-base").exists()  # the worktree was removed


@pytest.mark.slow
def test_an_append_of_duplicates_fails_naming_only_the_new_rows(repo: Path, tmp_path: Path):
    base = git(repo, "rev-parse", "HEAD")
    append(repo / "data" / "train.jsonl", [*OLD_ROWS, LEAK])  # a copy of every old row, then an eval leak
    (repo / "data" / "extra.jsonl").write_text(jsonl([MISLABELLED]), encoding="utf-8")
    (repo / "README.md").write_text("data, more\n", encoding="utf-8")
    commit(repo, "append duplicates")
    runner = Runner(repo, base, tmp_path)
    done = runner.run()
    assert done.returncode == 1, done.stderr[-3000:]
    assert (repo / "reports" / "changed-files.txt").read_text().split() == ["data/extra.jsonl", "data/train.jsonl"]
    errors = [(c[1]["file"], int(c[1]["line"]), c[1]["title"]) for c in commands(done.stderr) if c[0] == "error"]
    assert errors and commands(done.stdout) == []  # the annotations went to stderr
    train = [line for file, line, _ in errors if file == "data/train.jsonl"]
    assert train and min(train) > len(OLD_ROWS), errors  # only appended lines, never an old row's
    assert len(train) == len(set(train))  # one annotation per row
    assert errors[0] == ("data/train.jsonl", 2 * len(OLD_ROWS) + 1, "contrast-audit: Evaluation data leak")
    assert ("data/extra.jsonl", 1, "contrast-audit: Mislabelled hard negative") in errors
    assert any(title == "contrast-audit: Repeats existing training data" for _, _, title in errors)

    text = runner.summary
    assert "Gate: **FAILED**" in text and "| `leaks>0` | 1 | FAILED |" in text
    assert "how do I rotate my api key" in text
    report = json.loads((repo / "reports" / "contrast-audit.json").read_text(encoding="utf-8"))
    c = report["counts"]
    assert c["findings"] > 0 and c["in_baseline"]["findings"] >= 0 and c["leaks"] == 1
    assert c["mislabelled_negatives"] == 1
    sarif = json.loads((repo / "reports" / "contrast-audit.sarif").read_text(encoding="utf-8"))
    new = [r for r in sarif["runs"][0]["results"] if r["baselineState"] == "new"]
    lines = {
        r["locations"][0]["physicalLocation"]["region"]["startLine"]
        for r in new
        if r["locations"][0]["physicalLocation"]["artifactLocation"]["uri"] == "data/train.jsonl"
    }
    assert lines and min(lines) > len(OLD_ROWS)
    assert (repo / "reports" / "contrast-audit.html").read_text(encoding="utf-8").startswith("<!DOCTYPE html>")


@pytest.mark.slow
def test_repeats_of_existing_rows_fail_each_annotated_and_no_clean_row(repo: Path, tmp_path: Path):
    base = git(repo, "rev-parse", "HEAD")
    copies = [OLD_ROWS[0], OLD_ROWS[5]]  # exact copies (ids are row numbers: new ids)
    swapped = [{"anchor": OLD_ROWS[3]["positive"], "positive": OLD_ROWS[3]["anchor"]}]
    near = [{"anchor": OLD_ROWS[7]["anchor"] + "?", "positive": OLD_ROWS[7]["positive"] + "."}]  # a light edit
    append(repo / "data" / "train.jsonl", [CLEAN[0], *copies, CLEAN[1], *swapped, *near, CLEAN[2]])
    commit(repo, "append repeats")
    runner = Runner(repo, base, tmp_path)
    done = runner.run()
    assert done.returncode == 1, done.stderr[-3000:]
    annotated = {int(c[1]["line"]) for c in commands(done.stderr) if c[0] == "error"}
    n = len(OLD_ROWS)
    clean_lines, repeat_lines = {n + 1, n + 4, n + 7}, {n + 2, n + 3, n + 5, n + 6}
    assert repeat_lines <= annotated and not clean_lines & annotated, (annotated, done.stderr[-2000:])
    report = json.loads((repo / "reports" / "contrast-audit.json").read_text(encoding="utf-8"))
    assert report["counts"]["overlaps"] >= len(repeat_lines)
    assert {o["line"] for o in report["overlaps"]} == repeat_lines
    assert all(o["target_file"].endswith("data/train.jsonl") and o["target_line"] <= n for o in report["overlaps"])
    assert "| `overlaps>0` |" in runner.summary and "FAILED" in runner.summary


@pytest.mark.slow
def test_a_pull_request_cannot_switch_off_its_own_eval_gate(repo: Path, tmp_path: Path):
    base = git(repo, "rev-parse", "HEAD")
    (repo / "contrast-audit.toml").write_text("embeddings = false\nbatch-size = 4\neval = []\n", encoding="utf-8")
    (repo / "eval" / "queries.jsonl").write_text("", encoding="utf-8")  # and the eval set emptied
    append(repo / "data" / "train.jsonl", [CLEAN[0], LEAK])
    commit(repo, "loosen the gate and leak")
    runner = Runner(repo, base, tmp_path)
    done = runner.run()
    assert done.returncode == 1, done.stderr[-3000:]
    errors = [c for c in commands(done.stderr) if c[0] == "error"]
    assert [(c[1]["line"], c[1]["title"]) for c in errors] == [
        (str(len(OLD_ROWS) + 2), "contrast-audit: Evaluation data leak")
    ]
    assert "| `leaks>0` | 1 | FAILED |" in runner.summary


@pytest.mark.slow
@pytest.mark.parametrize(
    ("name", "text"),
    [("contrast-audit.toml", "embeddings = false\nbatch-size = 8\n"), ("README.md", "docs only\n")],
    ids=["settings-only", "no-data"],
)
def test_a_change_without_data_runs_the_check_and_passes(repo: Path, tmp_path: Path, name: str, text: str):
    base = git(repo, "rev-parse", "HEAD")
    (repo / name).write_text(text, encoding="utf-8")
    commit(repo, name)
    runner = Runner(repo, base, tmp_path)
    done = runner.run()
    assert done.returncode == 0, done.stderr[-3000:]
    assert "no training data files changed" in runner.summary


def test_pre_commit_hook(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    (hook,) = yaml.safe_load((ROOT / ".pre-commit-hooks.yaml").read_text(encoding="utf-8"))
    assert hook["id"] == "contrast-audit" and hook["entry"] == "contrast-audit scan"
    assert hook["require_serial"] is True
    assert "--no-embeddings" in hook["args"] and hook["args"][hook["args"].index("--since") + 1] == "HEAD"
    pattern = re.compile(hook["files"])
    assert all(pattern.search(p) for p in ("data/a.jsonl", "b.csv", "c.tsv", "d.parquet", "e.ndjson"))
    assert not any(pattern.search(p) for p in ("README.md", "package.json", "x.jsonl.bak"))
    # pre-commit runs `entry args... files...` in the repository, on the staged files.
    repo = init_repo(tmp_path / "repo")
    monkeypatch.chdir(repo)
    staged = repo / "staged.jsonl"
    argv = [*hook["entry"].split()[1:], *hook["args"], "staged.jsonl"]  # after the program name
    env = {"GITHUB_ACTIONS": "", "GITHUB_STEP_SUMMARY": ""}

    def hook_exit(rows: list[dict]) -> int:
        staged.write_text(jsonl(rows), encoding="utf-8")
        done = CliRunner().invoke(app, argv, env=env)
        assert done.exit_code in (0, 1), done.output
        return done.exit_code

    clean = [{"id": f"c{i}", **row} for i, row in enumerate(CLEAN)]
    # The first commit: nothing to compare with.
    assert hook_exit(clean) == 0
    commit(repo, "first")
    old = [{"id": f"r{i}", **row} for i, row in enumerate(OLD_ROWS[:4])]
    assert hook_exit([*clean, *old]) == 1  # in-batch certain findings between new rows
    git(repo, "commit", "-q", "-am", "more")  # committed anyway: their findings are the base's now
    assert hook_exit([*clean, *old]) == 0
    assert hook_exit([*clean, *old, {"id": "again", **OLD_ROWS[0]}]) == 1  # an exact copy under a new id
    swapped = {"id": "swapped", "anchor": CLEAN[2]["positive"], "positive": CLEAN[2]["anchor"]}
    assert hook_exit([*clean, *old, swapped]) == 1  # the pair swapped
    assert hook_exit([*clean, *old, {"id": "m", **MISLABELLED}]) == 1
    assert hook_exit([*clean, *old, {"id": "new", "anchor": "a new question", "positive": "its own answer"}]) == 0


def test_the_local_hook_runs_what_the_shipped_hook_runs():
    (hook,) = yaml.safe_load((ROOT / ".pre-commit-hooks.yaml").read_text(encoding="utf-8"))
    text = (ROOT / "docs" / "ci.md").read_text(encoding="utf-8")
    configs = [yaml.safe_load(b) for b in re.findall(r"```yaml\n(repos:.*?)```", text, re.S)]
    local = next(h for config in configs for repo in config["repos"] if repo["repo"] == "local" for h in repo["hooks"])
    remote = next(h for config in configs for repo in config["repos"] if repo["repo"] != "local" for h in repo["hooks"])
    assert local["entry"].split()[2:] == [a.replace("'", "") for a in hook["args"]]
    assert remote["args"] == hook["args"]


def test_the_documented_pre_commit_config_pins_a_commit():
    text = (ROOT / "docs" / "ci.md").read_text(encoding="utf-8")
    configs = [yaml.safe_load(b) for b in re.findall(r"```yaml\n(repos:.*?)```", text, re.S)]
    remote = next(repo for config in configs for repo in config["repos"] if repo["repo"] != "local")
    assert "commit sha" in remote["rev"] and not re.fullmatch(r"v?\d+(\.\d+)*", remote["rev"])
    assert re.search(r"rev: <a full commit sha of it>\s+# the repository has no release tags", text)
