"""``--fail-on``: parsing, evaluation, and the exit codes the CLI maps them to."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from contrast_audit.cli import app
from contrast_audit.errors import ConfigError
from contrast_audit.gate import Condition, evaluate, parse

# These tests are about loading, plans and reports: lexical evidence only, no model.
LEXICAL = ("--no-embeddings", "--no-minhash")

METRICS = sorted(
    ["findings", "certain", "likely", "suspect", "fn-rate", "rows-affected", "mislabelled", "exact", "same-anchor"]
)
RUNNER = CliRunner()


@pytest.mark.parametrize(
    ("expr", "expected"),
    [
        ("findings>0", [Condition("findings", ">", 0.0)]),
        ("fn-rate>0.001", [Condition("fn-rate", ">", 0.001)]),
        ("fn_rate > 1e-3", [Condition("fn-rate", ">", 0.001)]),
        ("likely>=10", [Condition("likely", ">=", 10.0)]),
        (" certain == 0 ", [Condition("certain", "==", 0.0)]),
        ("rows-affected<=.5", [Condition("rows-affected", "<=", 0.5)]),
        ("mislabelled!=0", [Condition("mislabelled", "!=", 0.0)]),
        ("suspect<3", [Condition("suspect", "<", 3.0)]),
        ("findings>0,likely>=10", [Condition("findings", ">", 0.0), Condition("likely", ">=", 10.0)]),
        ("findings>-1", [Condition("findings", ">", -1.0)]),
        ("fn-rate>=+.5e-1", [Condition("fn-rate", ">=", 0.05)]),
        ("findings>inf", [Condition("findings", ">", float("inf"))]),
        ("findings>1e309", [Condition("findings", ">", float("inf"))]),
        ("findings<-Infinity", [Condition("findings", "<", float("-inf"))]),
    ],
)
def test_parse(expr: str, expected: list[Condition]) -> None:
    assert parse([expr], METRICS) == expected


def test_parse_several_arguments_keep_order() -> None:
    got = parse(["likely>=10", "findings>0,fn-rate>0.001"], METRICS)
    assert [str(c) for c in got] == ["likely>=10", "findings>0", "fn-rate>0.001"]


def test_unknown_metric_lists_the_valid_ones() -> None:
    with pytest.raises(ConfigError) as info:
        parse(["bogus>1"], METRICS)
    message = str(info.value)
    assert "bogus" in message
    for metric in METRICS:
        assert metric in message


@pytest.mark.parametrize(
    "expr",
    ["findings", "findings>>0", ">0", "findings>abc", "findings=>1", "2>findings", "findings>nan", "findings>1e"],
)
def test_bad_syntax(expr: str) -> None:
    with pytest.raises(ConfigError, match="METRIC OP NUMBER"):
        parse([expr], METRICS)


@pytest.mark.parametrize("expr", ["", "  ", "findings>0,", "findings>0, ,", ",findings>0"])
def test_empty_conditions_are_refused(expr: str) -> None:
    with pytest.raises(ConfigError, match="empty condition"):
        parse([expr], METRICS)


def test_inf_and_overflow_agree() -> None:
    a, b = parse(["findings>inf", "findings>1e309"], METRICS)
    assert a == b
    assert evaluate([a], {"findings": 10**300}).passed


def test_evaluate() -> None:
    conditions = parse(["findings>0", "fn-rate>0.5", "likely>=2"], METRICS)
    result = evaluate(conditions, {"findings": 3, "fn-rate": 0.25, "likely": 2})
    assert not result.passed
    assert [(str(c), v) for c, v in result.failed] == [("findings>0", 3.0), ("likely>=2", 2.0)]
    assert len(result.checked) == 3
    assert evaluate(conditions, {"findings": 0, "fn-rate": 0.0, "likely": 0}).passed
    assert evaluate([], {}).passed


# --- through the CLI ----------------------------------------------------------------------


@pytest.fixture
def data(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    clean = [{"anchor": f"question {i}", "positive": f"answer {i}"} for i in range(6)]
    dupes = clean + [{"anchor": "question 0", "positive": "answer 0"}]
    (tmp_path / "clean.jsonl").write_text("".join(json.dumps(r) + "\n" for r in clean), encoding="utf-8")
    (tmp_path / "dupes.jsonl").write_text("".join(json.dumps(r) + "\n" for r in dupes), encoding="utf-8")
    return tmp_path


def scan(*args: str):
    return RUNNER.invoke(app, ["scan", *args, "--format", "json", *LEXICAL])


def test_gate_fails_on_a_duplicate(data: Path) -> None:
    result = scan("dupes.jsonl", "--fail-on", "findings>0")
    assert result.exit_code == 1, result.output
    assert json.loads(result.stdout)["counts"]["findings"] > 0  # the report is still written
    assert "FAILED" in result.stderr


def test_gate_passes_on_clean_data(data: Path) -> None:
    result = scan("clean.jsonl", "--fail-on", "findings>0", "--fail-on", "fn-rate>0.001")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["counts"]["findings"] == 0
    assert "passed" in result.stderr


def test_no_gate_means_exit_zero_even_with_findings(data: Path) -> None:
    result = scan("dupes.jsonl")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["counts"]["findings"] > 0


def test_gate_threshold_not_crossed(data: Path) -> None:
    assert scan("dupes.jsonl", "--fail-on", "findings>1000").exit_code == 0
    assert scan("dupes.jsonl", "--fail-on", "findings>1000,certain>=1").exit_code == 1


@pytest.mark.parametrize("expr", ["bogus>1", "findings", ""])
def test_bad_gate_is_a_usage_error(data: Path, expr: str) -> None:
    result = scan("dupes.jsonl", "--fail-on", expr)
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    assert "--fail-on" in result.stderr


def test_gate_from_config_file(data: Path) -> None:
    (data / "contrast-audit.toml").write_text('fail-on = "findings>0"\n', encoding="utf-8")
    assert scan("dupes.jsonl").exit_code == 1
    assert scan("clean.jsonl").exit_code == 0


def test_gate_grammar_is_in_help() -> None:
    import re

    result = RUNNER.invoke(app, ["scan", "--help"], env={"COLUMNS": "200"})
    text = re.sub(r"[\s│]+", " ", result.output)
    assert ">= < <= == !=" in text and "inf" in text


def test_bad_gate_in_the_settings_file(data: Path) -> None:
    (data / "contrast-audit.toml").write_text('fail-on = ["findings>0", ""]\n', encoding="utf-8")
    result = scan("clean.jsonl")
    assert result.exit_code == 2 and "empty condition" in result.stderr
