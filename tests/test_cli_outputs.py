"""``--output`` through the CLI: checked before the scan, never an input, format from the extension;
silent no-ops reported as warnings on stderr and in the report."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

import contrast_audit.api as api
from contrast_audit.cli import app

LEXICAL = ("--no-embeddings", "--no-minhash")
RUNNER = CliRunner()


@pytest.fixture(autouse=True)
def _in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    rows = [{"anchor": f"query {i % 5}", "positive": f"document {i % 5}"} for i in range(12)]
    (tmp_path / "in.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


def scan(*args: str):
    return RUNNER.invoke(app, ["scan", *args, "--quiet", *LEXICAL])


@pytest.fixture
def no_scan(monkeypatch: pytest.MonkeyPatch) -> None:
    """The output check happens before the scan: a scan here is a failure."""

    def boom(*args: object, **kwargs: object) -> None:
        raise AssertionError("the scan ran before the output was checked")

    monkeypatch.setattr(api, "audit", boom)


@pytest.mark.parametrize("target", ["in.jsonl", "./in.jsonl", "link.jsonl", "hard.jsonl"])
def test_output_naming_the_input_is_refused(tmp_path: Path, no_scan: None, target: str) -> None:
    import os

    (tmp_path / "link.jsonl").symlink_to(tmp_path / "in.jsonl")
    os.link(tmp_path / "in.jsonl", tmp_path / "hard.jsonl")
    before = (tmp_path / "in.jsonl").read_bytes()
    result = scan("in.jsonl", "--output", target)
    assert result.exit_code == 2, result.output
    assert "is the input file" in result.stderr
    assert (tmp_path / "in.jsonl").read_bytes() == before


def test_output_naming_the_plan_or_settings_file_is_refused(tmp_path: Path, no_scan: None) -> None:
    (tmp_path / "plan.jsonl").write_text('{"rows": ["0", "1"]}\n')
    (tmp_path / "contrast-audit.toml").write_text("seed = 1\n")
    assert scan("in.jsonl", "--plan", "plan.jsonl", "--output", "plan.jsonl").exit_code == 2
    assert scan("in.jsonl", "--output", "contrast-audit.toml").exit_code == 2
    assert (tmp_path / "contrast-audit.toml").read_text() == "seed = 1\n"


@pytest.mark.parametrize(
    "target, needle",
    [(".", "is a directory"), ("", "is empty"), ("missing/r.json", "does not exist"), ("/proc/x", "cannot write")],
)
def test_bad_output_exits_2_before_the_scan(no_scan: None, target: str, needle: str) -> None:
    result = scan("in.jsonl", "--output", target)
    assert result.exit_code == 2, result.output
    assert needle in result.stderr


def test_output_to_dev_null() -> None:
    result = scan("in.jsonl", "--output", "/dev/null", "--format", "json")
    assert result.exit_code == 0, result.output


def test_symlinked_output_stays_a_link(tmp_path: Path) -> None:
    (tmp_path / "reports").mkdir()
    (tmp_path / "reports" / "r.json").write_text("old")
    (tmp_path / "latest.json").symlink_to(tmp_path / "reports" / "r.json")
    assert scan("in.jsonl", "--output", "latest.json").exit_code == 0
    assert (tmp_path / "latest.json").is_symlink()
    assert json.loads((tmp_path / "reports" / "r.json").read_text())["counts"]["rows"] == 12


@pytest.mark.parametrize(
    "name, check",
    [
        ("r.html", lambda t: t.startswith("<!DOCTYPE html>")),
        ("r.HTM", lambda t: t.startswith("<!DOCTYPE html>")),
        ("r.json", lambda t: json.loads(t)["counts"]["rows"] == 12),
        ("r.md", lambda t: t.startswith("# contrast-audit scan")),
        ("r.txt", lambda t: t.startswith("contrast-audit scan")),
        ("r.out", lambda t: t.startswith("contrast-audit scan")),
    ],
)
def test_format_from_the_extension(tmp_path: Path, name: str, check) -> None:
    result = scan("in.jsonl", "--output", name)
    assert result.exit_code == 0, result.output
    assert check((tmp_path / name).read_text())


def test_format_that_contradicts_the_extension_is_refused(no_scan: None) -> None:
    result = scan("in.jsonl", "--output", "r.html", "--format", "json")
    assert result.exit_code == 2 and "contradicts" in result.stderr


def test_negatives_refuses_a_format_it_cannot_write(no_scan: None) -> None:
    result = RUNNER.invoke(app, ["negatives", "in.jsonl", "--output", "r.md", "--quiet"])
    assert result.exit_code == 2 and "writes text or json" in result.stderr


def test_negatives_help_lists_only_its_formats() -> None:
    result = RUNNER.invoke(app, ["negatives", "--help"], env={"COLUMNS": "200"})
    text = re.sub(r"[\s│]+", " ", result.output)
    assert "<text|json>" in text
    assert "markdown" not in text and "html" not in text


# --- silent no-ops become warnings --------------------------------------------------------------


def _json(result) -> dict:
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_zero_comparison_sets_is_a_warning() -> None:
    result = scan("in.jsonl", "--drop-last", "--batch-size", "64", "--format", "json")
    report = _json(result)
    assert report["counts"]["batches"] == 0
    assert any("no comparison sets" in w for w in report["warnings"])
    assert "warning: no comparison sets" in result.stderr
    assert "12 of 12 rows are in no batch" in result.stderr


def test_plan_leaving_rows_out_and_ignored_batch_size(tmp_path: Path) -> None:
    (tmp_path / "plan.jsonl").write_text('{"rows": ["0", "1", "2"]}\n')
    result = scan("in.jsonl", "--plan", "plan.jsonl", "--batch-size", "8", "--format", "json")
    report = _json(result)
    assert any("batch-size 8 ignored" in w for w in report["warnings"])
    assert any("9 of 12 rows are in no batch" in w for w in report["warnings"])
    assert "batch-size 8 ignored" in result.stderr


def test_same_file_twice_is_a_warning_in_the_report() -> None:
    result = scan("in.jsonl", "in.jsonl", "--format", "json")
    report = _json(result)
    assert any("in.jsonl is given twice" in w for w in report["warnings"])
    assert "given twice" in result.stderr


def test_warnings_in_text_and_markdown(tmp_path: Path) -> None:
    assert scan("in.jsonl", "--drop-last", "--batch-size", "64", "--output", "r.md").exit_code == 0
    assert "**warning**: no comparison sets" in (tmp_path / "r.md").read_text()
    assert scan("in.jsonl", "--drop-last", "--batch-size", "64", "--output", "r.txt").exit_code == 0
    assert "warning  no comparison sets" in (tmp_path / "r.txt").read_text()
    assert scan("in.jsonl", "--drop-last", "--batch-size", "64", "--output", "r.html").exit_code == 0
    assert "no comparison sets" in (tmp_path / "r.html").read_text()


def test_a_clean_scan_has_no_warnings() -> None:
    result = scan("in.jsonl", "--format", "json")
    assert _json(result)["warnings"] == [] and "warning" not in result.stderr


def test_every_stage_has_a_progress_bar(tmp_path: Path) -> None:
    from contrast_audit.config import AuditConfig, EmbeddingConfig

    started: list[tuple[str, int]] = []
    ticks: dict[str, int] = {}

    def progress(description: str, total: int):
        started.append((description, total))
        return lambda n: ticks.__setitem__(description, ticks.get(description, 0) + n)

    api.audit([str(tmp_path / "in.jsonl")], AuditConfig(embedding=EmbeddingConfig(enabled=False)), progress=progress)
    names = [name for name, _ in started]
    for stage in ("Loading files", "Normalising texts", "Planning batches", "Preparing minhash evidence"):
        assert stage in names
    assert names[-1] == "Comparing batches"
    assert all(ticks.get(name) == total for name, total in started)  # every bar completes


def test_output_naming_reference_data_is_refused(tmp_path: Path, no_scan: None) -> None:
    (tmp_path / "old.jsonl").write_text((tmp_path / "in.jsonl").read_text())
    (tmp_path / "eval.jsonl").write_text((tmp_path / "in.jsonl").read_text())
    for flag, target in (("--against", "old.jsonl"), ("--eval", "eval.jsonl")):
        result = scan("in.jsonl", flag, target, "--output", target)
        assert result.exit_code == 2 and "is the input file" in result.stderr, result.output


ROOT = Path(__file__).resolve().parent.parent


def _shell(command: str, cwd: Path) -> tuple[int, str]:
    """Run ``contrast-audit`` as a process under ``sh -c`` (so redirections like ``>&-`` apply); returns
    the exit code and what reached stderr when stderr was left open (else "")."""
    import os
    import shlex
    import subprocess
    import sys

    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    cli = f"{shlex.quote(sys.executable)} -c 'from contrast_audit.cli import main; main()'"
    proc = subprocess.run(
        ["sh", "-c", command.replace("CLI", cli)], cwd=cwd, env=env, capture_output=True, text=True, timeout=120
    )
    return proc.returncode, proc.stderr


class TestStandardStreams:
    """A closed or full stdout/stderr is never an internal error: a report that cannot be written is exit 2
    saying so, lost messages are not (the exit code still tells)."""

    SCAN = "CLI scan in.jsonl --no-embeddings --no-minhash"

    @pytest.mark.parametrize(
        ("redirect", "code", "needle"),
        [
            (">&-", 2, "standard output is closed"),
            ("> /dev/full", 2, "writing the report to standard output failed (No space left on device)"),
            ("--format json > /dev/full", 2, "No space left on device"),
            ("--output r.json >&-", 0, ""),
            ("> /dev/null 2>&-", 0, ""),
            ("> /dev/null 2> /dev/full", 0, ""),
            ("--fail-on 'findings>0' > /dev/null 2> /dev/full", 1, ""),
        ],
    )
    def test_scan(self, tmp_path: Path, redirect: str, code: int, needle: str) -> None:
        returned, stderr = _shell(f"{self.SCAN} {redirect}", tmp_path)
        assert returned == code, stderr
        assert needle in stderr and "internal error" not in stderr and "Traceback" not in stderr

    def test_no_file_takes_the_closed_descriptor(self, tmp_path: Path) -> None:
        returned, _ = _shell(f"{self.SCAN} --output r.json >&-", tmp_path)
        assert returned == 0 and json.loads((tmp_path / "r.json").read_text())["counts"]["rows"] == 12

    @pytest.mark.parametrize(
        ("redirect", "needle"),
        [(">&-", "closed"), pytest.param("> /dev/full", "No space left", marks=pytest.mark.slow)],
    )
    def test_eval(self, tmp_path: Path, redirect: str, needle: str) -> None:
        (tmp_path / "q.jsonl").write_text('{"_id": "q0", "text": "x"}\n')
        (tmp_path / "c.jsonl").write_text('{"_id": "d0", "text": "x"}\n')
        (tmp_path / "r.tsv").write_text("q0\td0\t1\n")
        returned, stderr = _shell(
            f"CLI eval default --queries q.jsonl --corpus c.jsonl --qrels r.tsv {redirect}", tmp_path
        )
        assert returned == 2 and needle in stderr and "internal error" not in stderr, stderr


class TestTopRange:
    @pytest.mark.parametrize("value", ["99999999999999999999999", "-1", "1000001"])
    @pytest.mark.parametrize("command", ["scan", "negatives"])
    def test_out_of_range_is_a_usage_error(self, command: str, value: str) -> None:
        extra = ("--no-minhash",) if command == "negatives" else LEXICAL
        result = RUNNER.invoke(app, [command, "in.jsonl", "--top", value, "-q", *extra])
        assert result.exit_code == 2 and "--top" in result.output, result.output

    def test_top_zero_shows_no_findings(self) -> None:
        result = scan("in.jsonl", "--top", "0", "--format", "markdown")
        assert result.exit_code == 0, result.output
        assert "query 0" not in result.stdout  # the findings table lists no texts


class TestSpecialOutputs:
    @pytest.mark.parametrize("target", ["/dev/stdout", "/proc/self/fd/1"])
    def test_stdout_as_a_pipe(self, tmp_path: Path, target: str) -> None:
        returned, stderr = _shell(
            f"CLI scan in.jsonl -q --no-embeddings --format json --output {target} | cat > got", tmp_path
        )
        assert returned == 0, stderr
        assert json.loads((tmp_path / "got").read_text())["counts"]["rows"] == 12

    def test_stderr_as_a_pipe(self, tmp_path: Path) -> None:
        returned, _ = _shell(
            "CLI scan in.jsonl -q --no-embeddings --format json --output /dev/stderr 2>&1 | cat > got", tmp_path
        )
        assert returned == 0
        assert json.loads((tmp_path / "got").read_text())["counts"]["rows"] == 12


class TestHelpText:
    """--help shows bracketed text as written (it was read as Rich markup and vanished)."""

    @staticmethod
    def _rendered(command: str) -> str:
        result = RUNNER.invoke(app, [command, "--help"], terminal_width=400, env={"COLUMNS": "400"})
        assert result.exit_code == 0, result.output
        return re.sub(r"\s+", " ", result.output.replace("│", " "))

    @pytest.mark.parametrize("command", ["scan", "negatives", "manifest", "train", "eval", "init"])
    def test_every_bracket_is_shown(self, command: str) -> None:
        import typer.main

        shown = self._rendered(command)
        click_command = typer.main.get_command(app).commands[command]  # type: ignore[attr-defined]
        brackets = [
            part
            for param in click_command.params
            for part in re.findall(r"[\[{][^\]}]*[\]}]", (getattr(param, "help", None) or "").replace("\\[", "["))
        ]
        assert brackets or command in ("train", "eval", "init")
        missing = [part for part in brackets if part not in shown]
        assert not missing, missing

    def test_the_reported_losses(self) -> None:
        shown = self._rendered("scan")
        assert '{"rows": [id, ...]}' in shown and "unless [tool.contrast-audit.against] names" in shown
        assert "[default: 32]" in shown

    def test_fail_on_lists_every_metric(self) -> None:
        from contrast_audit.api import AuditResult

        shown = self._rendered("scan")
        fail_on = shown[shown.index("--fail-on") : shown.index("--baseline")]
        assert not [m for m in AuditResult.METRICS if m not in fail_on]
