"""GitHub Actions outputs: annotation commands (escaping, limits, what counts) and the step summary."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from ci_support import flag, full_result, lexical_result, write_rows

from contrast_audit.errors import AuditError, ConfigError
from contrast_audit.gate import evaluate, parse
from contrast_audit.report.github import (
    annotations,
    annotations_enabled,
    append_step_summary,
    command,
    escape_data,
    escape_property,
    step_summary,
)

COMMAND = re.compile(r"^::(error|warning|notice)(?: ([^:]*))?::(.*)$")


def unescape(value: str) -> str:
    """The runner's unescaping (actions/runner ActionCommand)."""
    for code, char in (("%0D", "\r"), ("%0A", "\n"), ("%3A", ":"), ("%2C", ","), ("%25", "%")):
        value = value.replace(code, char)
    return value


def parse_command(line: str) -> tuple[str, dict[str, str], str]:
    match = COMMAND.match(line)
    assert match, line
    props = dict(p.split("=", 1) for p in match.group(2).split(",")) if match.group(2) else {}
    return match.group(1), {k: unescape(v) for k, v in props.items()}, unescape(match.group(3))


@pytest.fixture
def data(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("GITHUB_WORKSPACE", raising=False)
    (tmp_path / "data").mkdir()
    return write_rows(tmp_path / "data" / "pairs.jsonl")


def test_escaping_round_trips():
    text = "100% sure: a, b\r\nnext"
    assert escape_data(text) == "100%25 sure: a, b%0D%0Anext"
    assert escape_property(text) == "100%25 sure%3A a%2C b%0D%0Anext"
    name, props, message = parse_command(command("error", text, file="a,b:c.jsonl", line=3, title="t: 1"))
    assert (name, props, message) == ("error", {"file": "a,b:c.jsonl", "line": "3", "title": "t: 1"}, text)


def test_annotations_locate_every_counted_result(data: Path):
    lines = annotations(full_result(data))
    parsed = [parse_command(line) for line in lines]
    # The leak first, then certain findings, the mislabelled negative; the overlap is in the baseline.
    titles = [p[1]["title"] for p in parsed]
    assert titles == [
        "contrast-audit: Evaluation data leak",
        "contrast-audit: In-batch false negative (certain)",
        "contrast-audit: In-batch false negative (certain)",
        "contrast-audit: Mislabelled hard negative",
    ]
    assert all(p[0] == "error" for p in parsed)
    assert [(p[1]["file"], p[1]["line"]) for p in parsed] == [
        ("data/pairs.jsonl", "5"),
        ("data/pairs.jsonl", "1"),
        ("data/pairs.jsonl", "2"),
        ("data/pairs.jsonl", "4"),
    ]
    assert "what is 100% uptime, really?" in parsed[0][2] and "q17" in parsed[0][2]
    assert all(line.count("\n") == 0 for line in lines)


def test_baseline_and_masked_results_are_not_annotated(data: Path):
    result = flag(full_result(data), findings={"baseline": [True, False], "masked": [False, True]})
    result = flag(result, mislabelled={"masked": [True]})
    titles = [parse_command(line)[1]["title"] for line in annotations(result)]
    assert titles == ["contrast-audit: Evaluation data leak"]


def test_at_most_max_annotations_and_a_notice(data: Path):
    lines = annotations(full_result(data), max_annotations=2)
    assert len(lines) == 3
    name, props, message = parse_command(lines[-1])
    assert name == "notice" and props == {}
    assert message.startswith("contrast-audit: 2 more offending rows not annotated")
    assert len(annotations(full_result(data), max_annotations=0)) == 1
    with pytest.raises(ConfigError):
        annotations(full_result(data), max_annotations=-1)


def test_one_annotation_per_offending_row(data: Path):
    """A new row leaking one eval row through four text pairings is one annotation; the notice counts rows."""
    import dataclasses

    import polars as pl
    from ci_support import overlaps_for

    result = full_result(data)
    leak = overlaps_for(data).filter(pl.col("target") == "eval")
    pairings = [("anchor", "query"), ("anchor", "title"), ("positive", "query"), ("positive", "title")]
    leaks = pl.concat([leak.with_columns(role=pl.lit(r), target_role=pl.lit(tr)) for r, tr in pairings])
    result = dataclasses.replace(result, overlaps=pl.concat([leaks, result.overlaps.filter(pl.col("baseline"))]))
    parsed = [parse_command(line) for line in annotations(result)]
    at = [(p[1]["file"], p[1]["line"]) for p in parsed]
    assert at == [
        ("data/pairs.jsonl", "5"),
        ("data/pairs.jsonl", "1"),
        ("data/pairs.jsonl", "2"),
        ("data/pairs.jsonl", "4"),
    ]
    assert parsed[0][1]["title"] == "contrast-audit: Evaluation data leak"
    assert "This row has 3 more results (3 × evaluation data leak)" in parsed[0][2]
    assert "more result" not in parsed[1][2]  # row a: one finding

    lines = annotations(result, max_annotations=1)
    name, _, notice = parse_command(lines[-1])
    assert len(lines) == 2 and name == "notice"
    assert notice.startswith("contrast-audit: 3 more offending rows not annotated")  # rows 1, 2 and 4, not 6 results


def test_annotations_enabled():
    assert annotations_enabled("auto", {"GITHUB_ACTIONS": "true"})
    assert not annotations_enabled("auto", {})
    assert annotations_enabled("github", {})
    assert not annotations_enabled("none", {"GITHUB_ACTIONS": "true"})
    with pytest.raises(ConfigError, match="github, none"):
        annotations_enabled("gitlab", {})


def test_step_summary_reports_gate_and_new_results(data: Path):
    result = flag(full_result(data), findings={"baseline": [True, False]})
    metrics = result.metrics()
    gate = evaluate(parse(["findings>0", "mislabelled>5"], sorted(metrics)), metrics)
    text = step_summary(result, gate)
    assert "Gate: **FAILED**" in text
    assert "| `findings>0` | 1 | FAILED |" in text  # the baseline finding does not count
    assert "| `mislabelled>5` | 1 | passed |" in text
    assert "| In-batch false negative (certain) | 1 | 1 | 0 | 2 |" in text
    assert "| Evaluation data leak | 1 | 0 | 0 | 1 |" in text
    assert "| Repeats existing training data | 0 | 1 | 0 | 1 |" in text
    assert "### New repeats and leaks (1 of 1)" in text and "what is 100% uptime, really?" in text
    assert "### New findings (2 of 2)" in text  # one finding and the mislabelled negative
    # The verdict first, then what counts, then the counts.
    assert text.index("Gate:") < text.index("### New repeats") < text.index("### New findings")
    assert text.index("### New findings") < text.index("| result | new | baseline |")
    assert (
        "| Mislabelled hard negative |" in text and "| In-batch false negative (suspect) |" not in text
    )  # no zero rows
    assert "Gate: no `--fail-on`" in step_summary(lexical_result(data), None)


def test_step_summary_appends_and_names_the_path_on_failure(tmp_path: Path):
    path = tmp_path / "summary.md"
    path.write_text("earlier step\n", encoding="utf-8")
    append_step_summary(path, "## ours\n")
    assert path.read_text(encoding="utf-8") == "earlier step\n## ours\n"
    missing = tmp_path / "no-such-dir" / "summary.md"
    with pytest.raises(AuditError, match=re.escape(str(missing))):
        append_step_summary(missing, "x")


def scan_cli(args: list[str], env: dict[str, str]):
    from typer.testing import CliRunner

    from contrast_audit.cli import app

    return CliRunner().invoke(app, ["scan", *args, "--no-embeddings", "--no-minhash", "-q"], env=env)


def test_scan_under_github_actions(data: Path, tmp_path: Path):
    summary = tmp_path / "summary.md"
    summary.write_text("# earlier\n", encoding="utf-8")
    env = {"GITHUB_ACTIONS": "true", "GITHUB_STEP_SUMMARY": str(summary)}
    run = scan_cli(["data/pairs.jsonl", "--format", "json", "--fail-on", "findings>0"], env)
    assert run.exit_code == 1, run.output
    json_report = __import__("json").loads(run.stdout)  # annotations did not go to stdout
    assert json_report["counts"]["findings"] == 2
    commands = [parse_command(line) for line in run.stderr.splitlines() if line.startswith("::")]
    assert [(c[0], c[1]["file"], c[1]["line"]) for c in commands] == [
        ("error", "data/pairs.jsonl", "1"),
        ("error", "data/pairs.jsonl", "2"),
        ("error", "data/pairs.jsonl", "4"),
    ]
    text = summary.read_text(encoding="utf-8")
    assert text.startswith("# earlier\n## contrast-audit scan")
    assert "| `findings>0` | 2 | FAILED |" in text


def test_scan_annotation_switches(data: Path, tmp_path: Path):
    quiet_env = {"GITHUB_ACTIONS": "true", "GITHUB_STEP_SUMMARY": ""}
    off = scan_cli(["data/pairs.jsonl", "--format", "json", "--annotations", "none"], quiet_env)
    assert off.exit_code == 0 and "::" not in off.stderr
    local = scan_cli(["data/pairs.jsonl", "--format", "json"], {"GITHUB_ACTIONS": "", "GITHUB_STEP_SUMMARY": ""})
    assert local.exit_code == 0 and "::" not in local.stderr
    forced = scan_cli(
        ["data/pairs.jsonl", "--format", "json", "--annotations", "github", "--max-annotations", "1"],
        {"GITHUB_ACTIONS": "", "GITHUB_STEP_SUMMARY": ""},
    )
    lines = [line for line in forced.stderr.splitlines() if line.startswith("::")]
    assert len(lines) == 2 and lines[-1].startswith("::notice::contrast-audit: 2 more")
    bad = scan_cli(["data/pairs.jsonl", "--max-annotations", "-1"], quiet_env)
    assert bad.exit_code == 2


def test_scan_fails_clearly_when_the_summary_cannot_be_written(data: Path, tmp_path: Path):
    missing = tmp_path / "gone" / "summary.md"
    run = scan_cli(
        ["data/pairs.jsonl", "--format", "json"], {"GITHUB_ACTIONS": "", "GITHUB_STEP_SUMMARY": str(missing)}
    )
    assert run.exit_code == 2
    assert str(missing) in run.stderr


def test_scan_format_sarif(data: Path):
    run = scan_cli(["data/pairs.jsonl", "--format", "sarif"], {"GITHUB_ACTIONS": "", "GITHUB_STEP_SUMMARY": ""})
    assert run.exit_code == 0, run.output
    log = __import__("json").loads(run.stdout)
    assert log["version"] == "2.1.0" and len(log["runs"][0]["results"]) == 3


def test_one_scan_writes_several_reports(data: Path, tmp_path: Path):
    env = {"GITHUB_ACTIONS": "", "GITHUB_STEP_SUMMARY": ""}
    (tmp_path / "reports").mkdir()
    args = ["data/pairs.jsonl", "--format", "json", "--output", "reports/scan.json"]
    run = scan_cli([*args, "--report", "sarif=reports/scan.sarif", "--report", "html=reports/scan.html"], env)
    assert run.exit_code == 0, run.output
    assert __import__("json").loads((tmp_path / "reports" / "scan.sarif").read_text("utf-8"))["version"] == "2.1.0"
    assert (tmp_path / "reports" / "scan.html").read_text("utf-8").startswith("<!DOCTYPE html>")
    assert (tmp_path / "reports" / "scan.json").is_file()
    for bad in ("sarif", "pdf=x.pdf", "sarif="):
        failed = scan_cli(["data/pairs.jsonl", "--report", bad], env)
        assert failed.exit_code == 2 and "FORMAT=PATH" in failed.stderr
    contradiction = scan_cli(["data/pairs.jsonl", "--report", "sarif=reports/x.json"], env)
    assert contradiction.exit_code == 2 and "contradicts" in contradiction.stderr
    onto_input = scan_cli(["data/pairs.jsonl", "--report", "json=data/pairs.jsonl"], env)
    assert onto_input.exit_code == 2 and "--report" in onto_input.stderr
    assert (tmp_path / "data" / "pairs.jsonl").read_text("utf-8").startswith('{"id": "a"')


def test_paths_are_relative_to_the_github_workspace(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    from contrast_audit.report.located import display_path

    (tmp_path / "repo" / "data").mkdir(parents=True)
    monkeypatch.chdir(tmp_path / "repo" / "data")
    monkeypatch.setenv("GITHUB_WORKSPACE", str(tmp_path / "repo"))
    assert display_path("pairs.jsonl") == "data/pairs.jsonl"
    monkeypatch.delenv("GITHUB_WORKSPACE")
    assert display_path("pairs.jsonl") == "pairs.jsonl"
    assert display_path(str(tmp_path / "elsewhere.jsonl")) == (tmp_path / "elsewhere.jsonl").as_posix()


def test_parquet_rows_are_annotated_on_the_file(data: Path):
    import dataclasses

    import polars as pl
    from ci_support import overlaps_for

    result = lexical_result(data)
    overlaps = overlaps_for(data).with_columns(file=pl.lit("data/new.parquet"))
    lines = annotations(dataclasses.replace(result, overlaps=overlaps))
    leak = next(parse_command(line) for line in lines if "Evaluation data leak" in line)
    assert leak[1]["file"] == "data/new.parquet" and "line" not in leak[1]
