"""Plan files (``--plan``): one ``{"rows": [...]}`` batch per line, headers skipped."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest
from typer.testing import CliRunner

from contrast_audit.cli import app
from contrast_audit.errors import InputError
from contrast_audit.plan import read_plan_file

# These tests are about loading, plans and reports: lexical evidence only, no model.
LEXICAL = ("--no-embeddings", "--no-minhash")

RUNNER = CliRunner()


@pytest.fixture(autouse=True)
def _in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)


def _pairs(tmp_path: Path, ids: bool = False) -> None:
    rows = [
        {"anchor": "what is a cat", "positive": "a small feline"},
        {"anchor": "what is a dog", "positive": "a loyal canine"},
        {"anchor": "what is a cat", "positive": "a small feline"},  # duplicate of row 0
        {"anchor": "define kitten", "positive": "a young cat"},
    ]
    if ids:
        for i, r in enumerate(rows):
            r["id"] = f"r{i}"
    (tmp_path / "pairs.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")


def _plan_file(tmp_path: Path, lines: list[object]) -> None:
    text = "".join((x if isinstance(x, str) else json.dumps(x)) + "\n" for x in lines)
    (tmp_path / "plan.jsonl").write_text(text, encoding="utf-8")


def scan(*args: str):
    return RUNNER.invoke(app, ["scan", "pairs.jsonl", "--plan", "plan.jsonl", "--quiet", *LEXICAL, *args])


def test_plan_file_drives_the_batches(tmp_path: Path) -> None:
    _pairs(tmp_path)
    # Rows 0 and 2 never share a batch: no findings. Headers (no "rows") are skipped.
    _plan_file(tmp_path, [{"schema_version": 1, "kind": "manifest"}, {"rows": [0, 1]}, "", {"rows": ["2", "3"]}])
    result = scan("--format", "json")
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["plan"]["device_batches"] == 2
    assert report["plan"]["source"] == "file:plan.jsonl"
    assert report["counts"]["findings"] == 0

    _plan_file(tmp_path, [{"header": True}, {"rows": [0, 2]}, {"rows": [1, 3]}])
    report = json.loads(scan("--format", "json").stdout)
    assert report["counts"]["findings"] > 0


def test_plan_file_with_id_column_and_world_size(tmp_path: Path) -> None:
    _pairs(tmp_path, ids=True)
    _plan_file(tmp_path, [{"rows": ["r0"]}, {"rows": ["r2"]}, {"rows": ["r1", "r3"]}])
    one = json.loads(scan("--id", "id", "--format", "json").stdout)
    assert one["counts"]["findings"] == 0
    # Gathered across two devices, batches 0 and 1 form one comparison set.
    two = json.loads(scan("--id", "id", "--world-size", "2", "--format", "json").stdout)
    assert two["plan"]["global_batches"] == 2
    assert two["counts"]["findings"] > 0


def test_read_plan_file_epochs(tmp_path: Path) -> None:
    _plan_file(tmp_path, [{"rows": [0, 1]}, {"rows": [2], "epoch": 1}, {"rows": [1, 0], "epoch": 1}])
    plan = read_plan_file("plan.jsonl", pl.Series(["0", "1", "2"]))
    assert plan.epoch.tolist() == [0, 1, 1]
    assert [plan.batch(i).tolist() for i in range(plan.n_batches)] == [[0, 1], [2], [1, 0]]


@pytest.mark.parametrize(
    ("lines", "location", "needle"),
    [
        ([{"rows": [0, 1]}, {"rows": [2, 99]}], "plan.jsonl:2:", "'99'"),
        ([{"header": 1}, {"rows": [0]}, {"rows": [1, 3, 1]}], "plan.jsonl:3:", "twice"),
        ([{"rows": [0]}, {"rows": []}], "plan.jsonl:2:", "empty"),
        ([{"rows": [0]}, "", "{not json"], "plan.jsonl:3:", "JSON"),
        ([{"rows": "0,1"}], "plan.jsonl:1:", "list"),
        ([{"rows": [0], "epoch": -1}], "plan.jsonl:1:", "epoch"),
    ],
    ids=["unknown id", "row twice", "empty batch", "non-JSON", "rows not a list", "bad epoch"],
)
def test_bad_plan_lines_are_located(tmp_path: Path, lines: list[object], location: str, needle: str) -> None:
    _pairs(tmp_path)
    _plan_file(tmp_path, lines)
    result = scan()
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    assert location in result.stderr
    assert needle in result.stderr


def test_plan_without_batches(tmp_path: Path) -> None:
    _pairs(tmp_path)
    _plan_file(tmp_path, [{"schema_version": 1}])
    result = scan()
    assert result.exit_code == 2
    assert "plan.jsonl" in result.stderr and "no batches" in result.stderr


def test_missing_plan_file(tmp_path: Path) -> None:
    _pairs(tmp_path)
    result = scan()
    assert result.exit_code == 2
    assert "plan.jsonl" in result.stderr and "not found" in result.stderr


def test_unknown_ids_are_listed(tmp_path: Path) -> None:
    _plan_file(tmp_path, [{"rows": ["a", "x", "y"]}])
    with pytest.raises(InputError) as info:
        read_plan_file("plan.jsonl", pl.Series(["a", "b"]))
    assert info.value.line == 1
    assert "'x'" in str(info.value) and "'y'" in str(info.value)


def test_ids_with_unicode_line_separators(tmp_path: Path) -> None:
    # JSON allows U+2028 and U+0085 unescaped inside strings: they must not split a line.
    ids = ["a\u2028b", "c\x85d", "e"]
    text = '{"rows": ["a\u2028b", "c\x85d"]}\n{"bad"\n'
    (tmp_path / "plan.jsonl").write_text(text, encoding="utf-8")
    with pytest.raises(InputError) as info:
        read_plan_file("plan.jsonl", pl.Series(ids))
    assert info.value.line == 2
    (tmp_path / "plan.jsonl").write_text('{"rows": ["a\u2028b", "c\x85d"]}\r\n{"rows": ["e"]}\r\n', encoding="utf-8")
    plan = read_plan_file("plan.jsonl", pl.Series(ids))
    assert [plan.batch(i).tolist() for i in range(plan.n_batches)] == [[0, 1], [2]]


class TestTamperedPlanFiles:
    @pytest.mark.parametrize(
        ("line", "needle"),
        [
            ('{"rows": [1' + "0" * 5000 + "]}", "4,300 digits"),
            ('{"rows": [0, 1], "epoch": 1' + "0" * 30 + "}", "'epoch'"),
            ('{"rows": [0, 1], "epoch": true}', "'epoch'"),
            ('{"rows": [0], "x": ' + "[" * 10_000 + "]" * 10_000 + "}", "nested too deeply"),
            ('{"rows": {"0": 1}}', "'rows' must be a list"),
        ],
    )
    def test_located(self, tmp_path: Path, line: str, needle: str) -> None:
        _pairs(tmp_path)
        _plan_file(tmp_path, ['{"rows": [2, 3]}', line])
        result = scan()
        assert result.exit_code == 2, result.output
        assert "plan.jsonl:2:" in result.stderr and needle in result.stderr, result.stderr
