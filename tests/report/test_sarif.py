"""--format sarif: valid SARIF 2.1.0 (checked against the vendored OASIS schema), located results,
baseline states and suppressions, deterministic bytes."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import jsonschema
import polars as pl
import pytest
from ci_support import flag, full_result, lexical_result, overlaps_for, write_rows

from contrast_audit.report import FORMATTERS
from contrast_audit.report.located import RULES
from contrast_audit.report.sarif import render, sarif_log

SCHEMA = json.loads((Path(__file__).parent.parent / "data" / "sarif" / "sarif-schema-2.1.0.json").read_text("utf-8"))


def validate(log: dict) -> None:
    cls = jsonschema.validators.validator_for(SCHEMA)
    cls.check_schema(SCHEMA)
    cls(SCHEMA, format_checker=cls.FORMAT_CHECKER).validate(log)


@pytest.fixture
def data(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("GITHUB_WORKSPACE", raising=False)  # the repository root in CI: URIs are relative to it
    (tmp_path / "data").mkdir()
    return write_rows(tmp_path / "data" / "pairs.jsonl")


def test_schema_rejects_an_invalid_log(data: Path):
    log = sarif_log(lexical_result(data))
    log["runs"][0]["results"][0]["level"] = "fatal"  # not a SARIF level
    with pytest.raises(jsonschema.ValidationError):
        validate(log)


def test_sarif_is_valid_and_locates_each_result(data: Path):
    assert "sarif" in FORMATTERS
    log = json.loads(FORMATTERS["sarif"](full_result(data)))
    validate(log)
    run = log["runs"][0]
    assert [r["id"] for r in run["tool"]["driver"]["rules"]] == [r.id for r in RULES]
    by_rule: dict[str, list[dict]] = {}
    for res in run["results"]:
        by_rule.setdefault(res["ruleId"], []).append(res)
        assert run["tool"]["driver"]["rules"][res["ruleIndex"]]["id"] == res["ruleId"]
    assert sorted(by_rule) == ["eval-leak", "false-negative-certain", "mislabelled-negative", "overlap-existing"]
    # a <-> b: same positive text; each finding sits at its anchor's row, the other row related.
    fn = {r["properties"]["row_id"]: r for r in by_rule["false-negative-certain"]}
    assert set(fn) == {"a", "b"}
    loc = fn["a"]["locations"][0]["physicalLocation"]
    assert loc == {"artifactLocation": {"uri": "data/pairs.jsonl"}, "region": {"startLine": 1}}
    assert fn["a"]["relatedLocations"][0]["physicalLocation"]["region"] == {"startLine": 2}
    assert fn["a"]["level"] == "error"
    assert "how to reset your password!" in fn["a"]["message"]["text"]
    assert "evidence: exact" in fn["a"]["message"]["text"]
    assert fn["a"]["properties"]["evidence"] == [{"kind": "exact", "score": 1.0, "threshold": 1.0}]
    mis = by_rule["mislabelled-negative"][0]
    assert mis["locations"][0]["physicalLocation"]["region"] == {"startLine": 4}
    assert mis["properties"]["role"] == "negative_1"
    leak = by_rule["eval-leak"][0]
    assert leak["level"] == "error"
    assert leak["locations"][0]["physicalLocation"]["region"] == {"startLine": 5}
    assert leak["relatedLocations"][0]["physicalLocation"]["artifactLocation"]["uri"] == "eval/queries.jsonl"
    assert leak["properties"]["evidence"][0]["kind"] == "embedding"
    assert "q17" in leak["message"]["text"] and "0.970≥0.825" in leak["message"]["text"]
    assert by_rule["overlap-existing"][0]["level"] == "error"  # repeats of existing data fail the workflow's gate


def test_baseline_and_masked_results(data: Path):
    result = full_result(data)
    result = flag(result, findings={"baseline": [True, False], "masked": [False, True]})
    log = sarif_log(result)
    validate(log)
    states = {
        (r["ruleId"], r["properties"]["row_id"]): (r.get("baselineState"), r.get("suppressions"))
        for r in log["runs"][0]["results"]
    }
    assert states[("overlap-existing", "c")][0] == "unchanged"
    assert states[("eval-leak", "e")] == ("new", None)
    finding_states = sorted(v for k, v in states.items() if k[0] == "false-negative-certain")
    assert [s[0] for s in finding_states] == ["new", "unchanged"]
    suppressed = [s[1] for s in finding_states if s[1]]
    assert len(suppressed) == 1 and suppressed[0][0]["kind"] == "external"
    # Without any baseline, no result carries a baseline state.
    plain = sarif_log(lexical_result(data))
    assert all("baselineState" not in r for r in plain["runs"][0]["results"])


def test_sarif_is_deterministic(data: Path):
    assert render(full_result(data)) == render(full_result(data))


def test_parquet_rows_have_no_line_region(data: Path):
    result = lexical_result(data)
    overlaps = overlaps_for(data).with_columns(file=pl.lit("data/new.parquet"))
    log = sarif_log(dataclasses.replace(result, overlaps=overlaps))
    validate(log)
    leak = next(r for r in log["runs"][0]["results"] if r["ruleId"] == "eval-leak")
    assert leak["locations"][0]["physicalLocation"] == {"artifactLocation": {"uri": "data/new.parquet"}}
    assert leak["properties"]["row_number"] == 5


def test_scan_with_a_baseline_marks_sarif_results(data: Path, tmp_path: Path):
    from typer.testing import CliRunner

    from contrast_audit.cli import app

    env = {"GITHUB_ACTIONS": "", "GITHUB_STEP_SUMMARY": ""}
    lexical = ["--no-embeddings", "--no-minhash", "-q"]
    runner = CliRunner()
    made = runner.invoke(app, ["scan", "data/pairs.jsonl", "--output", "baseline.json", *lexical], env=env)
    assert made.exit_code == 0, made.output
    with (tmp_path / "data" / "pairs.jsonl").open("a", encoding="utf-8") as handle:
        handle.write('{"id": "f", "anchor": "dark theme", "positive": "enable dark mode in settings"}\n')
    run = runner.invoke(
        app, ["scan", "data/pairs.jsonl", "--baseline", "baseline.json", "--output", "scan.sarif", *lexical], env=env
    )
    assert run.exit_code == 0, run.output
    log = json.loads((tmp_path / "scan.sarif").read_text(encoding="utf-8"))
    validate(log)
    states = {(r["ruleId"], r["properties"]["row_id"]): r["baselineState"] for r in log["runs"][0]["results"]}
    assert states[("false-negative-certain", "a")] == "unchanged"
    assert states[("mislabelled-negative", "d")] == "unchanged"
    assert states[("false-negative-certain", "f")] == "new"  # f's positive repeats c's


def test_sarif_is_written_in_slices_byte_for_byte(data: Path, monkeypatch: pytest.MonkeyPatch):
    from contrast_audit.report import pieces, sarif

    result = full_result(data)
    whole = json.dumps(sarif_log(result), indent=2, ensure_ascii=False) + "\n"
    assert len(sarif_log(result)["runs"][0]["results"]) > 3
    monkeypatch.setattr(sarif, "RESULTS_PER_SLICE", 2)
    parts = list(pieces("sarif", result))
    assert len(parts) > 3 and "".join(parts) == whole == render(result)
    empty = lexical_result(write_rows(data.parent / "one.jsonl", rows=[{"anchor": "a b c", "positive": "d e f"}]))
    assert "".join(pieces("sarif", empty)) == json.dumps(sarif_log(empty), indent=2, ensure_ascii=False) + "\n"
